"""RAIF in the embedded trainer (ifcore.train.grpo, notebook 02): no-think rollouts for the superior-CoT test only,
enforcement (eq. 7 and the RAIF authors' per-sample variant) by masking, refills as an option (not in RAIF),
behaviour cloning's masked loss (eq. 8), the warm start's plans, named sweep arms, and an exact resume of a RAIF
run after a SIGKILL.

The filter tests hand-build groups: `generate` is replaced by a table of responses per prompt, so every reward
(scored for real by ifcore.rewards) and every keep decision is known in advance.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import train_killed_at_step

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ifcore import synth  # noqa: E402
from ifcore.jsonl import JsonlError  # noqa: E402
from ifcore.rewards import score_response  # noqa: E402
from ifcore.schema import parse_label  # noqa: E402
from ifcore.train import grpo  # noqa: E402
from ifcore.train.grpo import TIMING_KEYS, load_config, read_references, rollout_groups, train  # noqa: E402
from ifcore.train.model import EMPTY_THINK, train_tokenizer  # noqa: E402
from ifcore.train.sft import (NOTHINK_PREFIX, RAIF_SYSTEM, WarmStartConfig, bc_loss, default_assets,  # noqa: E402
                              expert_batch)

REPO = Path(__file__).resolve().parents[1]

# ---- hand-built groups ----------------------------------------------------------------------------------------

# One instruction's two constraints: at most 3 words, at least 1. R_accuracy (RAIF eq. 5): both hold +2, one 0.5,
# and a response without RAIF's tags fails the format: -2.
CONSTRAINTS = parse_label([{"scope": [], "target": {"count": "word"}, "range": {"max": 3}},
                           {"scope": [], "target": {"count": "word"}, "range": {"min": 1}}])
GOOD, HALF, BROKEN = "a b", "a b c d e", None


def cot(answer):
    return "no tags at all" if answer is None else f"<think>\nwords <=3 -> 2\n</think>\n<answer>\n{answer}\n</answer>"


def nothink(answer):  # the completion after NOTHINK_PREFIX
    return "no tags at all" if answer is None else f"<answer>\n{answer}\n</answer>"


# Each row: (its CoT rollouts, its no-think rollouts) for G = 4 with one no-think rollout.
KEEP = ([GOOD, BROKEN, BROKEN], [GOOD])  # max CoT 2 >= min no-think 2
DROP = ([HALF, BROKEN, BROKEN], [GOOD])  # 0.5 < 2: every reasoning rollout is worse
TIE = ([BROKEN] * 3, [BROKEN])  # -2 >= -2: kept (eq. 7 is >=)


class FakeGenerate:
    """generate() answering from a table {instruction: (CoT answers, no-think answers)}; records every call."""

    def __init__(self, table, greedy=None):
        self.table, self.greedy, self.calls = table, greedy or {}, []

    def __call__(self, model, tokenizer, prompts, max_new_tokens, device, autocast, sample, **settings):
        self.calls.append({"model": model, "prompts": prompts, "sample": sample})
        seen: dict = {}
        texts = []
        for p in prompts:
            key = next(k for k in self.table if f"\n{k}<|im_end|>" in p)
            if not sample:
                texts.append(nothink(self.greedy[key]))
                continue
            no_think = p.endswith((NOTHINK_PREFIX, EMPTY_THINK))
            i = seen[key, no_think] = seen.get((key, no_think), -1) + 1
            texts.append(nothink(self.table[key][1][i]) if no_think else cot(self.table[key][0][i]))
        n = len(prompts)
        return (torch.zeros((n, 5), dtype=torch.long), torch.ones((n, 5), dtype=torch.long), 3,
                torch.ones((n, 2), dtype=torch.bool), texts, [False] * n)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([RAIF_SYSTEM, "ROW0 a b c", cot(GOOD), nothink(HALF)] * 20, 300)


def _groups(monkeypatch, tokenizer, table, idx, greedy=None, references=None, **over):
    fake = FakeGenerate(table, greedy)
    monkeypatch.setattr(grpo, "generate", fake)
    cfg = load_config(None, **{"reward": "raif", "prompts_per_step": len(idx), "group_size": 4, "nothink_share": 0.25,
                               "superior_cot": "group", "seed": 0, **over})
    rows = [(name, CONSTRAINTS) for name in table]
    got = rollout_groups("policy", "reference", tokenizer, rows, idx, references, cfg, "cpu", None, step=7)
    return got, fake, rows


def _replacements(n_rows, missing, round_, seed=0, step=7):
    return [int(i) for i in np.random.default_rng([seed, step, round_]).choice(n_rows, missing, replace=False)]


def test_a_dropped_group_stays_in_the_batch_without_gradient_and_no_think_rollouts_never_train(monkeypatch,
                                                                                                  tokenizer):
    table = {"ROW0": DROP, "ROW1": KEEP, "ROW2": KEEP, "ROW3": TIE, **{f"ROW{i}": KEEP for i in range(4, 8)}}
    got, fake, rows = _groups(monkeypatch, tokenizer, table, [0, 1, 2, 3])
    # RAIF skips a dropped group (the paper; the authors mask it, replay_buffer.py:289): no replacement is drawn
    assert [len(c["prompts"]) for c in fake.calls] == [16]
    assert [r[0] for r in got["rows"]] == ["ROW0", "ROW1", "ROW2", "ROW3"]
    assert got["train"] == [False] * 4 + [True, True, True, False] * 3  # ROW0 dropped; no-think rollouts never
    assert got["nothink"] == [False, False, False, True] * 4
    assert got["stats"].items() >= {"keep_ratio": 3 / 4, "groups_kept": 3, "groups_sampled": 4, "refill_rounds": 0,
                                    "train_share": 9 / 16, "rollouts_trained": 9, "rollouts_sampled": 16}.items()
    assert len(got["texts"]) == len(got["scores"]) == len(got["seqs"]) == 16 and got["mask"].shape == (16, 2)
    assert got["scores"][4]["reward"] == 3.0
    # Over the step's own rows (the policy's behaviour, not the filter's choice):
    rewards = {GOOD: 3.0, HALF: 1.5, BROKEN: -3.0}
    cot_rewards = [rewards[a] for name in ("ROW0", "ROW1", "ROW2", "ROW3") for a in table[name][0]]
    assert got["stats"]["cot_reward_mean"] == pytest.approx(np.mean(cot_rewards))
    assert got["stats"]["nothink_reward_mean"] == pytest.approx(np.mean([3.0, 3.0, 3.0, -3.0]))


def test_refill_is_an_option_not_in_raif(monkeypatch, tokenizer):
    table = {"ROW0": DROP, "ROW1": KEEP, "ROW2": KEEP, "ROW3": TIE, **{f"ROW{i}": KEEP for i in range(4, 8)}}
    refill = _replacements(8, 1, round_=1)
    assert refill != [0]  # the drawn replacement is a keepable row (else a second round would be drawn)
    got, fake, rows = _groups(monkeypatch, tokenizer, table, [0, 1, 2, 3], refill_rounds=2)
    assert [r[0] for r in got["rows"]] == ["ROW1", "ROW2", "ROW3", f"ROW{refill[0]}"]
    assert got["stats"].items() >= {"keep_ratio": 4 / 5, "refill_rounds": 1}.items()
    assert [len(c["prompts"]) for c in fake.calls] == [16, 4]  # the refill samples only the missing group
    assert got["train"] == [True, True, True, False] * 4
    table = {f"ROW{i}": DROP for i in range(6)}  # the cap: then the step may train nothing
    got, fake, _ = _groups(monkeypatch, tokenizer, table, [0, 1, 2, 3], refill_rounds=2)
    assert len(fake.calls) == 3 and got["rows"] == [] and len(got["seqs"]) == 0 and got["mask"].shape[0] == 0
    assert load_config(None).refill_rounds == 0  # off by default


def test_the_grpo_baseline_samples_no_no_think_rollouts(monkeypatch, tokenizer):
    table = {"ROW0": ([HALF, BROKEN, BROKEN, GOOD], []), "ROW1": ([GOOD] * 4, [])}
    got, fake, _ = _groups(monkeypatch, tokenizer, table, [0, 1], superior_cot="off", nothink_share=0.0)
    assert len(fake.calls) == 1 and not any(p.endswith(NOTHINK_PREFIX) for p in fake.calls[0]["prompts"])
    assert got["train"] == [True] * 8 and got["nothink"] == [False] * 8
    assert got["stats"]["keep_ratio"] is None and got["stats"]["nothink_reward_mean"] is None
    with pytest.raises(ValueError, match="RAIF's GRPO baseline has none"):
        load_config(None, reward="raif", superior_cot="off", nothink_share=0.25)


def test_the_per_sample_variant_compares_each_rollouts_count_with_the_offline_one(monkeypatch, tokenizer):
    # No no-think rollouts. Each CoT rollout's count of satisfied constraints against its row's no-reasoning count
    # (check_qa.py:94): GOOD satisfies 2, HALF 1; BROKEN fails the format, is not judged, and passes (:113).
    table = {f"ROW{i}": ([GOOD, HALF, BROKEN, HALF], []) for i in range(4)}
    references = [[True, True], [True, False], None, None]  # counts 2, 1, then the initial policy's
    greedy = {"ROW2": GOOD, "ROW3": BROKEN}  # its greedy no-think answers: counts 2 and 0
    got, fake, _ = _groups(monkeypatch, tokenizer, table, [0, 1, 2, 3], greedy=greedy, references=references,
                           superior_cot="reference", nothink_share=0.0)
    assert got["train"] == ([True, False, True, False] + [True] * 4 + [True, False, True, False] + [True] * 4)
    assert got["stats"]["keep_ratio"] is None and got["stats"]["rollouts_trained"] == 12
    reference_calls = [c for c in fake.calls if not c["sample"]]
    assert len(reference_calls) == 1 and reference_calls[0]["model"] == "reference"
    assert [p.endswith(NOTHINK_PREFIX) for p in reference_calls[0]["prompts"]] == [True, True]
    assert ["ROW2" in p for p in reference_calls[0]["prompts"]] == [True, False]


def test_the_authors_no_think_scoring_makes_eq7_keep_every_group(monkeypatch, tokenizer):
    # nothink_accuracy "authors": a no-think rollout's empty think block gets R_accuracy -2 (check_qa.py:89), so
    # max CoT >= min no-think always holds: DROP is kept, and the no-think reward is -1 (format +1, accuracy -2).
    got, _, _ = _groups(monkeypatch, tokenizer, {"ROW0": DROP}, [0], nothink_accuracy="authors")
    assert got["stats"]["keep_ratio"] == 1.0 and got["train"] == [True, True, True, False]
    assert got["scores"][3]["reward"] == -1.0 and got["scores"][3]["reasoning"] == "empty"


def test_references_are_read_from_the_labels_and_checked(tmp_path):
    label = {"constraints": [c.to_dict() for c in CONSTRAINTS]}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": "a", "label": json.dumps({**label, "reference": [True, False]})}) + "\n"
                    + json.dumps({"prompt": "b", "label": label}) + "\n")
    assert read_references(str(path)) == [[True, False], None]
    path.write_text(path.read_text() + json.dumps({"prompt": "c", "label": {**label, "reference": [True]}}) + "\n")
    with pytest.raises(JsonlError, match=rf"{path}:3: label.reference: expected a list of 2 true/false values"):
        read_references(str(path))


# ---- paired rollouts --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_size, share, expected", [(4, 0.25, 1), (8, 0.25, 2), (6, 0.5, 3)])
def test_paired_rollouts_give_the_requested_share_of_empty_think_prompts(monkeypatch, tokenizer, group_size, share,
                                                                         expected):
    table = {"ROW0": ([GOOD] * group_size, [GOOD] * group_size), "ROW1": ([GOOD] * group_size, [GOOD] * group_size)}
    got, fake, _ = _groups(monkeypatch, tokenizer, table, [0, 1], group_size=group_size, nothink_share=share)
    flags = [p.endswith(NOTHINK_PREFIX) for p in fake.calls[0]["prompts"]]
    assert flags == ([False] * (group_size - expected) + [True] * expected) * 2  # the last ones of each group
    assert all(p.count(RAIF_SYSTEM) == 1 for p in fake.calls[0]["prompts"])  # RAIF's CoT prompt, both modes
    # Scored with the empty think block put back, so RAIF's format gate passes the no-think answers.
    assert all(s["format_ok"] for s in got["scores"])


def test_paired_rollouts_outside_raif_use_the_templates_empty_think_block(monkeypatch, tokenizer):
    _, fake, _ = _groups(monkeypatch, tokenizer, {"ROW0": KEEP}, [0], reward="ila", superior_cot="group")
    assert [p.endswith(EMPTY_THINK) for p in fake.calls[0]["prompts"]] == [False, False, False, True]
    assert not any(RAIF_SYSTEM in p for p in fake.calls[0]["prompts"])


@pytest.mark.parametrize("over, match", [
    ({"superior_cot": "group", "nothink_share": 0.1}, "gives 0 per group"),
    ({"superior_cot": "group", "nothink_share": 0.9}, "gives 4 per group"),
    ({"superior_cot": "group", "nothink_share": 0.25, "think": False}, "needs think true"),
    ({"nothink_share": 1.0}, r"nothink_share: must be in \[0, 1\)"),
    ({"superior_cot": "group"}, "gives 0 per group"),
    ({"superior_cot": "reference", "nothink_share": 0.25}, "group test only"),
    ({"superior_cot": "always"}, "one of off, group, reference, group\\+reference"),
    ({"nothink_accuracy": "none"}, "answer or authors"),
    ({"refill_rounds": -1}, "at least 0"), ({"bc_coef": -0.1}, ">= 0"), ({"bc_batch": 0}, "at least 1"),
    ({"bc_coef": 0.1, "reward": "scopeif"}, "default expert responses are in RAIF's format"),
])
def test_raif_options_are_checked_on_load(over, match):
    with pytest.raises(ValueError, match=match):
        load_config(None, **{"reward": "raif", "group_size": 4, **over})


# ---- behaviour cloning ------------------------------------------------------------------------------------------

def test_expert_batch_masks_the_prompt_and_the_padding():
    ids, attention, labels = expert_batch([([5, 6, 7, 8, 9], 3), ([1, 2, 3], 1)], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 0, 0]]
    assert attention.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, 2, 3, -100, -100]]


def test_bc_loss_is_the_nll_of_the_response_tokens_only():
    torch.manual_seed(0)
    _, _, labels = expert_batch([([5, 6, 7, 8, 9], 3), ([1, 2, 3], 1)], pad_id=0)
    logits = torch.randn(2, 5, 10, dtype=torch.float64)
    total, count = bc_loss(logits, labels)
    logp = logits.log_softmax(-1)
    # position t predicts token t + 1: row 0's targets 8, 9 from positions 2, 3; row 1's 2, 3 from positions 0, 1
    by_hand = -(logp[0, 2, 8] + logp[0, 3, 9] + logp[1, 0, 2] + logp[1, 1, 3])
    assert count.item() == 4 and total.item() == pytest.approx(by_hand.item())
    # Logits that predict prompt tokens (or come after the response) change nothing; one that predicts a
    # response token does.
    moved = logits.clone()
    moved[0, :2] += torch.randn(2, 10, dtype=torch.float64)
    moved[0, 4] += 5.0
    moved[1, 2:] += 3.0
    assert bc_loss(moved, labels)[0].item() == pytest.approx(total.item())
    moved[0, 2, 8] += 1.0
    assert bc_loss(moved, labels)[0].item() < total.item()


# ---- the warm start's plans and RAIF's format --------------------------------------------------------------------

def test_the_plan_states_each_constraints_measured_target():
    constraints = [{"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
                    "range": {"max": 2}},
                   {"scope": [{"unit": "paragraph", "select": "at", "index": 0}],
                    "target": {"count": "occurrence", "of": "river"}, "range": {"eq": 1}},
                   {"scope": [], "target": {"count": "word"}, "range": {"min": 5, "max": 12}},
                   {"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "word"},
                    "range": {"gt": "previous"}}]
    witness = "The river runs. A bird sings.\n\nThe stone waits here now."
    assert synth.plan(constraints, witness).splitlines() == [
        "each paragraph: sentences <=2 -> 2 1", 'paragraph 1: "river" =1 -> 1', "response: words 5-12 -> 11",
        "each paragraph: words > previous -> 5"]


def test_expert_responses_satisfy_their_instruction_under_raifs_format_gate():
    rng = random.Random(4)
    for _ in range(100):
        inst = synth.instruction(rng)
        response = synth.raif_response(synth.plan(inst["constraints"], inst["witness"]), inst["witness"])
        s = score_response(response, parse_label(inst["constraints"]), kind="raif", think="raif")
        assert s["reward"] == 3.0 and s["answer"].strip() == inst["witness"], response
    # RAIF's no-think rollouts end their prompt with the empty block that an expert response without reasoning has.
    assert synth.raif_response("", "x").startswith(NOTHINK_PREFIX)


def test_the_training_prompt_is_the_preliminary_studys_cot_prompt(tokenizer):
    from ifcore.bench.cot_study import COT_SYSTEM, cot_messages

    assert RAIF_SYSTEM == COT_SYSTEM  # one RAIF trigger for notebooks 01 and 02
    from ifcore.train.sft import raif_prompt

    assert raif_prompt(tokenizer, "Hi") == tokenizer.apply_chat_template(cot_messages("Hi"), tokenize=False,
                                                                         add_generation_prompt=True)
    assert raif_prompt(tokenizer, "Hi", nothink=True) == raif_prompt(tokenizer, "Hi") + "<think>\n\n</think>\n"


def test_write_dataset_writes_the_expert_responses_of_the_training_prompts(tmp_path):
    synth.write_dataset(tmp_path, n_train=20, n_test=5, seed=3)
    train_rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    experts = [json.loads(x) for x in (tmp_path / "expert.jsonl").read_text().splitlines()]
    assert [e["prompt"] for e in experts] == [r["prompt"] for r in train_rows]
    for row, e in zip(train_rows, experts):
        assert score_response(e["response"], parse_label(row["label"]), kind="raif", think="raif")["reward"] == 3.0


# ---- training: a tiny policy that has learnt RAIF's format ---------------------------------------------------------

# Every warm-start pair in RAIF's format, so that 300 steps teach it (a quarter with the empty think block).
TINY_MODEL = dict(vocab_size=1024, hidden_size=64, layers=1, heads=4, kv_heads=2, intermediate_size=128,
                  max_positions=512, pairs=800, steps=300, batch_size=16, train_rows=64, test_rows=8, raif_share=1.0)
RAIF_RUN = dict(reward="raif", prompts_per_step=4, group_size=4, max_new_tokens=80, micro_batch=16, eval_prompts=4,
                eval_samples=1, eval_every=2, save_every=2, lr=1e-3, threads=1, nothink_share=0.25,
                superior_cot="group", bc_coef=1.0, bc_batch=8)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("raif_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IFCORE_CACHE", str(root))
        return default_assets(WarmStartConfig(**TINY_MODEL), progress=False)


def _rows(metrics: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
            for line in metrics.read_text().splitlines()]


def _run(assets, out: Path, **over) -> list[dict]:
    return _rows(train(load_config(None, **{**RAIF_RUN, **assets, "steps": 3, **over}, output_dir=str(out)),
                       progress=False))


@pytest.mark.slow
def test_rollouts_of_several_rounds_merge_without_changing_their_log_probs(assets):
    """Refills are separate generate calls (their own prompt and response widths); merged into one batch, every
    rollout keeps its tokens, its response mask and its log-probabilities."""
    from contextlib import nullcontext

    from ifcore.train.grpo import _merge, _prompt, generate, read_rows, response_logprobs
    from ifcore.train.model import load_policy

    model, tokenizer = load_policy(assets["model"])
    rows = read_rows(assets["test_data"])
    cfg = load_config(None, reward="raif")
    torch.manual_seed(0)
    chunks = []
    for prompts, new_tokens in (([rows[0][0], rows[1][0]], 40), ([rows[2][0] + " Be brief and clear."], 25)):
        seqs, attention, n_prompt, mask, _, _ = generate(model, tokenizer, [_prompt(tokenizer, p, cfg) for p in prompts],
                                                         new_tokens, "cpu", nullcontext(), sample=True)
        chunks.append({"seqs": seqs, "attention": attention, "n_prompt": n_prompt, "mask": mask})
    assert chunks[0]["n_prompt"] != chunks[1]["n_prompt"]
    seqs, attention, n_prompt, mask = _merge(chunks, tokenizer.pad_token_id)
    with torch.no_grad():
        merged = response_logprobs(model, seqs, attention, n_prompt)[0]
        row = 0
        for c in chunks:
            own = response_logprobs(model, c["seqs"], c["attention"], c["n_prompt"])[0]
            k, t = own.shape
            assert torch.equal(mask[row:row + k, :t], c["mask"]) and not mask[row:row + k, t:].any()
            assert torch.equal(seqs[row:row + k, n_prompt:n_prompt + t], c["seqs"][:, c["n_prompt"]:])
            assert torch.allclose(merged[row:row + k, :t][c["mask"]], own[c["mask"]], atol=1e-5)
            row += k


@pytest.mark.slow
def test_a_raif_run_logs_its_keep_ratio_reasoning_and_bc_loss(assets, tmp_path):
    rows = _run(assets, tmp_path / "run")
    evals = [r for r in rows if r["type"] == "eval"]
    rows = [r for r in rows if r["type"] == "train"]
    for r in rows:
        assert 0 <= r["keep_ratio"] <= 1 and r["groups_sampled"] == 4 and r["refill_rounds"] == 0
        assert r["rollouts_sampled"] == 16 and r["rollouts_trained"] <= 12  # the no-think quarter never trains
        assert r["reasoning_tokens"] > 0 and r["bc_loss"] > 0 and r["nothink_reward_mean"] is not None
        assert 0 <= r["empty_reasoning"] <= 1
    # The tiny policy writes RAIF's format often enough for rewards above the format failure's -3.
    assert max(r["cot_reward_mean"] for r in rows) > -3 and max(r["nothink_reward_mean"] for r in rows) > -3
    assert evals[0]["eval_reasoning_tokens"] > 0
    assert all(-3 <= e[k] <= 3 for e in evals for k in ("eval_reward", "eval_nothink_reward"))
    for e in evals:  # each held-out prompt's mean reward, with and without reasoning: intervals over prompts
        for k in ("eval_reward", "eval_nothink_reward"):
            assert len(e[f"{k}_by_prompt"]) == RAIF_RUN["eval_prompts"]
            assert np.mean(e[f"{k}_by_prompt"]) == pytest.approx(e[k], abs=1e-3)


@pytest.mark.slow
def test_behaviour_cloning_pulls_the_policy_to_the_expert(assets, tmp_path):
    # The same 8 expert pairs each step (bc_batch covers the file). Against a run whose BC term is negligible (same
    # seed, so the same first rollouts), minimizing bc_coef x NLL leaves the experts more likely after a few steps.
    experts = tmp_path / "expert.jsonl"
    experts.write_text("".join(Path(assets["bc_data"]).read_text().splitlines(keepends=True)[:8]))
    bc = {}
    for coef in (1e-6, 1.0):
        rows = [r for r in _run({**assets, "bc_data": str(experts)}, tmp_path / f"run{coef}", bc_coef=coef,
                                superior_cot="off", nothink_share=0.0, steps=4) if r["type"] == "train"]
        bc[coef] = [r["bc_loss"] for r in rows]
    assert bc[1e-6][0] == pytest.approx(bc[1.0][0])  # the same policy before any update
    assert bc[1.0][-1] < bc[1e-6][-1] and bc[1.0][-1] < bc[1.0][0]


@pytest.mark.slow
def test_a_killed_raif_run_resumes_exactly(assets, tmp_path):
    steps = 5
    uninterrupted = _run(assets, tmp_path / "whole", steps=steps)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**RAIF_RUN, **assets, "steps": steps, "output_dir": str(tmp_path / "killed")}))
    cmd = [sys.executable, "-m", "ifcore", "train", "--config", str(config)]
    metrics = tmp_path / "killed" / "metrics.jsonl"
    env = train_killed_at_step(cmd, metrics, step=3)  # past the step-2 checkpoint
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _rows(metrics) == uninterrupted
    assert (tmp_path / "killed" / "rollouts.jsonl").read_text() == (tmp_path / "whole" / "rollouts.jsonl").read_text()


# ---- named sweep arms -------------------------------------------------------------------------------------------------

def test_named_arms_are_checked_before_anything_starts(tmp_path):
    from ifcore.run.sweep import run_arms

    runs_dir = tmp_path / "runs"
    for arms, config, match in [
        ([("grpo", {"seed": 3})], {}, "grpo: seed is set per run"),
        ([("a b", {})], {}, "must be letters, digits"), ([("a-seed1", {})], {}, "must be letters, digits"),
        ([("x", {"superior_cot": "yes"})], {}, "superior_cot"), ([("x", {}), ("x", {"lr": 1.0})], {}, "two arms"),
        ([["x", {}]], {}, "neither a reward kind nor"), (["ila", ("x", {})], {"reward": "raif"}, "config: reward"),
    ]:
        with pytest.raises(ValueError, match=match):
            run_arms(arms, [0], 2, runs_dir, config=config, progress=False)
    assert not runs_dir.exists()


@pytest.mark.slow
def test_no_think_rollouts_get_no_gradient_and_the_cot_rollouts_the_authors_advantages(assets, tmp_path,
                                                                                       monkeypatch):
    """One training step, watched: the rollouts whose log-probs carry gradient are exactly those superior-CoT lets
    train (never a no-think one), and their advantages are the authors' (experience_maker.py:1737-1742: the group's
    mean and std over all G rollouts, the no-think one included)."""
    seen = {}
    real_groups, real_loss = grpo.rollout_groups, grpo.grpo_loss

    def groups(*a, **k):
        seen["got"] = got = real_groups(*a, **k)
        return got

    def loss(logp, old_logp, ref_logp, advantages, mask, *a):
        logp.retain_grad()
        seen.setdefault("calls", []).append((logp, advantages.detach().clone(), mask.clone()))
        return real_loss(logp, old_logp, ref_logp, advantages, mask, *a)

    monkeypatch.setattr(grpo, "rollout_groups", groups)
    monkeypatch.setattr(grpo, "grpo_loss", loss)
    _run(assets, tmp_path / "run", steps=1, ppo_epochs=1, bc_coef=0.0)
    got = seen["got"]
    (logp, advantages, mask), = seen["calls"]  # one epoch, one micro-batch
    rewards = torch.tensor([s["reward"] for s in got["scores"]], dtype=torch.float64).reshape(-1, 4)
    authors = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)).reshape(-1)
    train = torch.tensor(got["train"])
    assert not train[torch.tensor(got["nothink"])].any() and len(logp) == int(train.sum())
    # the loss's rows are the trained rollouts, in order, each with the authors' advantage on its tokens
    torch.testing.assert_close(advantages[:, 0].double(), authors[train], rtol=0, atol=1e-6)
    assert torch.equal(mask, got["mask"][train])
    assert logp.grad is not None  # the trained rows have a gradient; the others are not in the graph at all


def test_a_truncated_reasoning_counts_as_truncated_not_as_zero_tokens(tokenizer):
    from ifcore.train.grpo import reasoning_summary, reasoning_tokens

    ended = "<think>a b c</think><answer>a</answer>"
    cut = "<think>a b c a b c a b"  # the rollout limit reached inside the plan
    assert reasoning_tokens(tokenizer, ended) > 0
    assert reasoning_tokens(tokenizer, cut) is None
    assert reasoning_tokens(tokenizer, "<answer>a</answer>") == 0  # no think block at all: no reasoning
    summary = reasoning_summary(tokenizer, [ended, cut, cut, "<think></think><answer>a</answer>"], "eval_")
    assert summary["eval_reasoning_truncated"] == 0.5
    assert summary["eval_reasoning_tokens"] == reasoning_tokens(tokenizer, ended) / 2  # over the two that ended
    assert reasoning_summary(tokenizer, [cut])["reasoning_tokens"] is None


@pytest.mark.slow
def test_the_default_expert_fits_the_rollout_budget_and_is_cut_there_as_the_plugin_cuts_it(assets, tmp_path):
    """bc_expert "plan" (the default): the expert writes the warm start's own plan format, so its responses fit the
    rollout budget; an expert longer than max_new_tokens is cut there (its end token then lost), as the OpenRLHF
    plug-in's expert_batch cuts it: a step's expert target tokens never exceed bc_batch x max_new_tokens."""
    from transformers import AutoTokenizer

    from ifcore.jsonl import read_jsonl

    tok = AutoTokenizer.from_pretrained(assets["model"])
    lengths = [len(tok(r["response"], add_special_tokens=False).input_ids) + 1
               for r in read_jsonl(assets["bc_data"])]
    assert np.median(lengths) <= RAIF_RUN["max_new_tokens"]
    rows = [r for r in _run(assets, tmp_path / "cut", steps=1, max_new_tokens=6) if r["type"] == "train"]
    assert 0 < rows[0]["bc_tokens"] <= RAIF_RUN["bc_batch"] * 6
    with pytest.raises(ValueError, match="bc_expert: must be plan or deep"):
        load_config(None, bc_expert="expert")
