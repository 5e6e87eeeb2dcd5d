"""Each stage notebook's sizes as named data, one table: `quick` is what Run All with no edits runs (about two
minutes on two cores, a small policy: it shows every figure, decides nothing), `full` what `make reproduce` runs
(the design powered for the notebook's primary question, its seeds from FIRST_SEED on; every seed shares the one
default warm start, built once in 4 to 6 minutes of both cores, and evaluations between the first and the last are
few: they draw curves, the endpoint is the last), `test` what the test suite runs (seconds). A notebook's
parameters left at None take the preset's value; a parameter given explicitly wins (`fill`, which also sets the full
design's seed count from the power analysis).
"""
from __future__ import annotations

# A policy and runs small enough for seconds (the test suite) and for a two-minute Run All.
TINY_POLICY = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                   max_positions=384, pairs=300, steps=30, batch_size=16, train_rows=64, test_rows=16)
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=24, micro_batch=16, eval_prompts=8, eval_samples=2,
                eval_every=2, save_every=2)
QUICK_POLICY = dict(vocab_size=512, hidden_size=64, layers=1, heads=2, kv_heads=1, intermediate_size=192,
                    max_positions=384, pairs=2000, steps=200, batch_size=32, train_rows=256, test_rows=64)
QUICK_RUN = dict(prompts_per_step=8, group_size=4, max_new_tokens=48, eval_prompts=32, eval_samples=2, eval_every=5,
                 save_every=5)

# The full design's seeds start here: seeds no earlier design ran, so its pilots' runs are not among them (the
# design's first run is then a test of it, not partly its pilot); a replication passes others (`seeds`).
FIRST_SEED = 100

PRESETS = {
    "02_raif_superior_cot": {
        "test": {"seeds": [0, 1], "exploratory": ["supcot_bc"], "steps": 3, "model_size": TINY_POLICY,
                 "train_config": TINY_RUN},
        "quick": {"seeds": [0, 1], "exploratory": [], "steps": 6, "model_size": {**QUICK_POLICY, "raif_share": 1.0},
                  "train_config": {**QUICK_RUN, "max_new_tokens": 96}},
        # every held-out prompt, 4 samples each, at step 0 and at the end only: two runs' final checkpoints
        # re-evaluated at 2, 4 and 8 samples gave paired differences of about one sd (training's, not sampling's)
        "full": {"seeds": None, "exploratory": [], "steps": 24, "model_size": {},
                 "train_config": {"eval_prompts": 256, "eval_every": 24, "eval_samples": 4}},
    },
    "03_scopeif_graded_reward": {
        "test": {"seeds": [0, 1], "exploratory": ["ila"], "steps": 3, "model_size": TINY_POLICY,
                 "train_config": TINY_RUN},
        "quick": {"seeds": [0, 1], "exploratory": [], "steps": 10, "model_size": QUICK_POLICY,
                  "train_config": QUICK_RUN},
        # seeds None: as many as the power analysis asks for (stats.seeds_for_power at the pilot's sd)
        # the endpoint is greedy decoding's (ScopeIF's protocol); the sampled CSR, exploratory, takes 2 samples
        "full": {"seeds": None, "exploratory": [], "steps": 40, "model_size": {},
                 "train_config": {"eval_every": 20, "eval_samples": 2}},
    },
    "04_rtt_token_rewards": {
        "test": {"seeds": [0, 1], "exploratory": ["rtt_disc"], "exploratory_seeds": [0], "steps": 2,
                 "model_size": TINY_POLICY, "train_config": TINY_RUN,
                 "discriminator": {"instructions": 30, "steps": 20, "batch_size": 8, "eval_every": 10,
                                   "max_new_tokens": 24}},
        "quick": {"seeds": [0, 1], "exploratory": ["rtt_disc"], "exploratory_seeds": [0, 1], "steps": 6,
                  "model_size": QUICK_POLICY, "train_config": QUICK_RUN,
                  "discriminator": {"instructions": 60, "steps": 60, "batch_size": 16, "eval_every": 30,
                                    "max_new_tokens": 48}},
        # every held-out prompt x 16 samples, at step 0 and at the end only: re-evaluated at 4, 8 and 16 samples, two
        # runs' 12 final checkpoints gave paired differences of sd 0.017, 0.012, 0.010 (the rest is training's)
        "full": {"seeds": None, "exploratory": ["rtt_disc", "rtt_disc_floor", "random"],
                 "exploratory_seeds": [FIRST_SEED, FIRST_SEED + 1], "steps": 20, "model_size": {},
                 "train_config": {"eval_every": 20, "eval_prompts": 256, "eval_samples": 16}, "discriminator": {}},
    },
}


def fill(notebook: str, preset: str, namespace: dict) -> str:
    """Set each of the notebook's parameters that is None in `namespace` (its globals) to the preset's value; then,
    where `seeds` is still None (the full design), as many seeds as the power analysis asks for at the notebook's
    `sesoi`, `pilot`, `alpha` and `power` (ifcore.stats.seeds_for_power). Returns what it did, for the notebook to
    print. An unknown notebook or preset is a ValueError naming the known ones."""
    from ifcore.stats import seeds_for_power

    if notebook not in PRESETS:
        raise ValueError(f"presets: no presets for notebook {notebook!r} (known: {', '.join(PRESETS)})")
    table = PRESETS[notebook]
    if preset not in table:
        raise ValueError(f"preset {preset!r}: notebook {notebook} has {', '.join(table)}")
    taken = {k: v for k, v in table[preset].items() if namespace.get(k) is None}
    namespace.update(taken)
    n = namespace
    plan = seeds_for_power(n["sesoi"], n["pilot"]["sd"], n["alpha"], n["power"])
    if n["seeds"] is None:
        n["seeds"] = list(range(FIRST_SEED, FIRST_SEED + plan["seeds"]))
    return (f"preset {preset!r}: " + ", ".join(f"{k}={v!r}" for k, v in taken.items() if v is not None)
            + f"\npower analysis: {plan['seeds']} seeds give power {plan['power_found']:.2f} to find a difference of "
            f"{n['sesoi']}, {plan['power_equivalence']:.2f} and {plan['power_halfway']:.2f} to exclude one when the true "
            f"difference is 0 and {n['sesoi'] / 2:g}, at the pilot's sd {n['pilot']['sd']} "
            f"({n['pilot']['source']}); this run: {len(n['seeds'])} seeds")
