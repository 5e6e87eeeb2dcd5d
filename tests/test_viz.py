"""ifcore.viz for notebook 03: figures a reviewer can read and conclusions that say when the seeds cannot decide.

The data are made-up sweep metrics in the schema of ifcore.train (load_metrics' rows), so nothing trains here.
"""
import json

import matplotlib
import pandas as pd
import pytest

from ifcore import stats, viz

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ARMS = ["ila", "scopeif_flat"]
END_CSR = {("ila", 0): 0.60, ("ila", 1): 0.66, ("ila", 2): 0.70,
           ("scopeif_flat", 0): 0.62, ("scopeif_flat", 1): 0.65, ("scopeif_flat", 2): 0.68}


def sweep(seeds=(0, 1, 2)) -> pd.DataFrame:
    rows = []
    for arm in ARMS:
        for seed in seeds:
            for step in (0, 2, 4):
                csr = 0.55 + (END_CSR[arm, seed] - 0.55) * step / 4
                rows.append({"type": "eval", "step": step, "arm": arm, "seed": seed, "eval_csr": csr,
                             "eval_isr": csr / 2, "eval_csr_global": csr, "eval_csr_nested": None})
                rows.append({"type": "train", "step": step + 1, "arm": arm, "seed": seed,
                             "identical_pair_fraction": (0.8 if arm == "ila" else 0.5) + 0.01 * seed + 0.001 * step})
    return pd.DataFrame(rows)


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def all_text(ax) -> str:
    legend = ax.get_legend()
    return " ".join([ax.get_xlabel(), ax.get_ylabel(), ax.get_title(), legend.get_title().get_text()]
                    + legend_texts(ax) + [t.get_text() for t in ax.get_xticklabels()])


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("band, caption", [("range", "lowest to highest seed"), ("ci", "95% t-interval")])
def test_curves_name_the_arms_count_seeds_and_say_what_the_band_is(band, caption):
    fig, ax = plt.subplots()
    viz.curves(ax, sweep(), "eval_csr", arms=ARMS, band=band)
    assert legend_texts(ax) == ["RL-ILA (3 seeds)", "ScopeIF wo HRA (3 seeds)"]
    assert caption in ax.get_legend().get_title().get_text()
    assert ax.get_xlabel() == "training step" and ax.get_ylabel()
    assert "scopeif_flat" not in all_text(ax) and "n=" not in all_text(ax)


def test_the_ci_band_is_the_t_interval_of_the_seeds():
    fig, ax = plt.subplots()
    viz.curves(ax, sweep(), "eval_csr", arms=["ila"], band="ci")
    _, lo, hi, _ = stats.mean_ci([END_CSR["ila", s] for s in range(3)])
    ys = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(lo) and max(ys) == pytest.approx(hi)


def test_one_seed_is_named_in_the_singular():
    fig, ax = plt.subplots()
    viz.curves(ax, sweep(seeds=(0,)), "eval_csr", arms=ARMS)
    assert legend_texts(ax) == ["RL-ILA (1 seed)", "ScopeIF wo HRA (1 seed)"]


def test_final_bars_show_the_constraints_behind_each_bar_and_the_interval():
    fig, ax = plt.subplots()
    viz.final_bars(ax, sweep(), ["eval_csr_global", "eval_csr_nested"], arms=ARMS, labels=["Global", "Nested"],
                   counts=[120, 7])
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["Global\n(120 constraints)", "Nested\n(7 constraints)"]
    assert legend_texts(ax) == ["RL-ILA (3 seeds)", "ScopeIF wo HRA (3 seeds)"]
    assert "whiskers: 95% t-interval" in ax.get_legend().get_title().get_text()
    whisker = ax.containers[1].lines[2][0].get_segments()[0]  # RL-ILA's Global whisker
    _, lo, hi, _ = stats.mean_ci([END_CSR["ila", s] for s in range(3)])
    assert [y for _, y in whisker] == pytest.approx([lo, hi])


def test_reward_distributions_are_ecdfs_that_count_seeds_and_rollouts():
    rollouts = pd.DataFrame({"arm": ["ila"] * 4 + ["scopeif_flat"] * 6, "seed": [0, 0, 1, 1] + [0] * 6,
                             "reward": [0, 1, 1, 0, 0.2, 0.4, 0.5, 0.6, 0.9, 1.0]})
    fig, ax = plt.subplots()
    viz.distributions(ax, rollouts, arms=ARMS)
    assert legend_texts(ax) == ["RL-ILA (2 seeds, 4 rollouts)", "ScopeIF wo HRA (1 seed, 6 rollouts)"]
    assert ax.get_xlabel() == "reward" and "fraction of rollouts" in ax.get_ylabel()
    ecdf = ax.get_lines()[1].get_ydata()
    assert max(ecdf) == 1 and sorted(ecdf) == list(ecdf)  # a cumulative curve, not a histogram


def test_tables_per_seed_and_with_intervals():
    df = sweep()
    end = viz.by_seed(viz.last_eval(df), "eval_csr", ARMS)
    pairs = viz.by_seed(df[df["type"] == "train"], "identical_pair_fraction", ARMS)
    assert end.loc[1, "ila"] == pytest.approx(0.66)
    assert pairs.loc[2, "ila"] == pytest.approx(0.82 + 0.002)  # the mean over its training steps (0, 2, 4)
    per_seed = viz.seed_table({"CSR end": end, "identical pairs": pairs})
    assert list(per_seed.index) == [(a, s) for a in ("RL-ILA", "ScopeIF wo HRA") for s in (0, 1, 2)]
    assert per_seed.loc[("ScopeIF wo HRA", 2), "CSR end"] == pytest.approx(0.68)
    table = viz.ci_table({"CSR end": end})
    mean, lo, hi, _ = stats.mean_ci(end["ila"])
    assert table.loc["RL-ILA", "CSR end"] == f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"
    assert list(table["seeds"]) == [3, 3]
    one = viz.ci_table({"CSR end": viz.by_seed(viz.last_eval(sweep(seeds=(0,))), "eval_csr", ARMS)})
    assert one.loc["RL-ILA", "CSR end"] == "0.600 (1 seed)"


def test_compare_decides_a_sign_only_when_the_paired_interval_excludes_zero():
    up = viz.compare("x", {0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.5, 1: 0.61, 2: 0.69})
    assert up.startswith("x = +0.100 (95% CI") and up.endswith(": positive.")
    assert viz.compare("x", {0: 0.5, 1: 0.61, 2: 0.69}, {0: 0.6, 1: 0.7, 2: 0.8}).endswith(": negative.")
    unsure = viz.compare("x", {0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.7, 1: 0.6, 2: 0.79})
    assert "the interval includes 0, so these seeds cannot decide its sign" in unsure
    single = viz.compare("x", {0: 0.6}, {0: 0.5})
    assert "from one seed: no spread can be estimated" in single and "positive" not in single


def test_conclusions_with_three_seeds_say_when_the_data_cannot_decide():
    df = sweep()
    ev, train = df[df["type"] == "eval"], df[df["type"] == "train"]
    start = viz.by_seed(ev[ev["step"] == 0], "eval_csr", ARMS)
    end = viz.by_seed(viz.last_eval(df), "eval_csr", ARMS)
    pairs = viz.by_seed(train, "identical_pair_fraction", ARMS)
    lines = viz.arm_conclusions(start, end, pairs)
    text = "\n".join(lines)
    assert lines[0].startswith("3 seeds (0, 1, 2)")
    assert lines[1].startswith("The 3 comparisons below are one family") and "Holm" in lines[1]
    # Both arms gain on average; RL-ILA's seeds gain 0.05 to 0.15, too spread for three seeds to decide.
    assert lines[2].startswith("RL-ILA: held-out CSR at the end minus at step 0 = +0.103 (95% CI -0.022 to +0.228")
    assert lines[2].endswith("cannot decide its sign.")
    # ScopeIF wo HRA gains in every seed, but three seeds under Holm's correction over 3 comparisons do not decide it
    _, lo, _, _, p = stats.paired_t(end["scopeif_flat"], start["scopeif_flat"])
    assert lo > 0 and 3 * p > 0.05 or p < 0.05 / 3
    assert lines[3].startswith("ScopeIF wo HRA: held-out CSR at the end minus at step 0 = +0.100")
    assert lines[3].endswith(": positive." if 3 * min(p, 1) < 0.05 else "so its sign is not decided.")
    assert "Identical-reward-pair fraction (mean over training), ScopeIF wo HRA minus RL-ILA = -0.300" in text
    assert not any(w in text for w in ("Highest", "next:", "best"))  # no sentence ranks undecided means


def test_holm_controls_the_family_and_a_single_comparison_is_uncorrected():
    # Holm 1979's step-down: sorted p's times m, m-1, ...; monotone; NaN does not count.
    assert stats.holm([0.01, 0.04, 0.03, float("nan")]) == pytest.approx([0.03, 0.06, 0.06, float("nan")],
                                                                          nan_ok=True)
    assert stats.holm([0.5, 0.6]) == [1.0, 1.0]
    same = {0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.5, 1: 0.62, 2: 0.68}
    mean, lo, hi, n, p = stats.paired_t(*same)
    assert n == 3 and lo > 0 and p < 0.05  # the t-test the interval inverts
    assert viz.compare("x", *same).endswith(": positive.")
    # the same comparison among 10 others that test nothing new: Holm over 11 keeps it undecided
    family = [("x", *same)] + [(f"y{i}", {0: 0.5, 1: 0.6, 2: 0.4}, {0: 0.5, 1: 0.5, 2: 0.5}) for i in range(10)]
    first = viz.decide(family)[0]
    assert "Holm-adjusted over 11 comparisons" in first and first.endswith("so its sign is not decided.")
    assert stats.paired_t({0: 1.0, 1: 1.0}, {0: 0.0, 1: 0.0})[4] == 0.0  # a constant non-zero difference
    assert stats.paired_t({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0})[4] == 1.0


def test_conclusions_with_one_seed_state_that_no_spread_can_be_estimated():
    df = sweep(seeds=(0,))
    ev, train = df[df["type"] == "eval"], df[df["type"] == "train"]
    lines = viz.arm_conclusions(viz.by_seed(ev[ev["step"] == 0], "eval_csr", ARMS),
                                viz.by_seed(viz.last_eval(df), "eval_csr", ARMS),
                                viz.by_seed(train, "identical_pair_fraction", ARMS))
    assert lines[0].startswith("Only 1 seed (0): no spread over seeds can be estimated")
    assert not any(line.endswith(("positive.", "negative.")) for line in lines)


def test_a_run_s_held_out_constraints_per_scope(tmp_path):
    test_data = tmp_path / "test.jsonl"
    label = [{"scope": [], "target": {"count": "word"}, "range": {"max": 5}},
             {"scope": [{"unit": "sentence", "select": "each"}], "target": {"count": "word"}, "range": {"max": 9}}]
    test_data.write_text("".join(json.dumps({"prompt": f"p{i}", "label": label[: 1 + i % 2]}) + "\n"
                                 for i in range(5)))
    run = tmp_path / "run"
    run.mkdir()
    config = {"identity": {"reward": "scopeif_flat", "seed": 3, "eval_prompts": 4},
              "paths": {"test_data": str(test_data)}}
    (run / "config.json").write_text(json.dumps(config))
    # Only the first eval_prompts rows are evaluated: 4 Global constraints, 2 Traversal ones.
    assert viz.heldout_scope_counts(run) == {"Global": 4, "Traversal": 2, "Position": 0, "Condition": 0, "Nested": 0}
    test_data.write_text('{"prompt": "p", "label": [{"scope": [], "target": {"count": "word"}}]}\n')
    with pytest.raises(ValueError, match=r"test.jsonl:1 label"):
        viz.heldout_scope_counts(run)


def test_conclusions_are_the_planned_comparisons_once_each():
    end = pd.DataFrame({"ila": [0.70, 0.72, 0.71], "cla": [0.60, 0.61, 0.62], "scopeif": [0.69, 0.70, 0.72]})
    start = end * 0 + 0.5
    lines = viz.arm_conclusions(start, end, end * 0 + 0.5)
    csr = [line.split(" = ")[0] for line in lines if line.startswith("Held-out CSR at the end,")]
    # Table 1's order: ScopeIF against every other arm, RL-CLA against RL-ILA
    assert csr == ["Held-out CSR at the end, ScopeIF minus RL-ILA", "Held-out CSR at the end, ScopeIF minus RL-CLA",
                   "Held-out CSR at the end, RL-CLA minus RL-ILA"]
    assert next(line for line in lines if "ScopeIF minus RL-CLA" in line).endswith(": positive.")
    # Fig. 4b: RL-CLA and ScopeIF against RL-ILA, ScopeIF against RL-CLA
    assert sum("Identical-reward-pair fraction" in line for line in lines) == 3
    assert "Holm-adjusted over 9 comparisons" in lines[2]


def test_saving_a_figure_again_writes_the_same_bytes(tmp_path):
    """A rerun that reproduces a result leaves figures/ unchanged (no date, no random ids in the SVG)."""
    def draw():
        fig, ax = plt.subplots()
        ax.fill_between([0, 1, 2], [0, 1, 0], alpha=0.2)
        ax.plot([0, 1, 2], [1, 0, 1], marker="o")
        return fig

    first = viz.save(draw(), tmp_path / "a" / "fig")
    again = viz.save(draw(), tmp_path / "b" / "fig")
    for x, y in zip(first, again):
        assert open(x, "rb").read() == open(y, "rb").read(), x
    plt.close("all")


# ---- notebook 02 (RAIF) ---------------------------------------------------------------------------------------

RAIF_ARMS = ["grpo", "supcot", "supcot_bc", "bc"]


def test_raif_pairs_are_table_4s_rows_and_clonings_own():
    assert viz.raif_pairs(RAIF_ARMS) == [("supcot", "grpo"), ("supcot_bc", "grpo"), ("bc", "grpo"),
                                         ("supcot_bc", "supcot")]


def test_raif_conclusions_decide_one_family_and_rank_nothing_undecided():
    seeds = [0, 1, 2]

    def table(f):
        return pd.DataFrame({arm: [f(i, s) for s in seeds] for i, arm in enumerate(RAIF_ARMS)}, index=seeds)

    names = ["CSR step 0", "CSR end", "reasoning step 0", "reasoning end", "reward step 0", "reward end",
             "reward w/o reasoning step 0", "reward w/o reasoning end", "KL late", "entropy late", "keep early",
             "keep late"]
    tables = {n: table(lambda i, s, k=k: 0.5 + 0.01 * k + 0.003 * ((i + s + k) % 3)) for k, n in enumerate(names)}
    for n in ("keep early", "keep late"):  # the filter's keep ratio: superior-CoT arms only
        tables[n][["grpo", "bc"]] = float("nan")
    lines = viz.raif_conclusions(tables)
    # 4 CSR gains, 4 arm pairs, 4 reward gaps, 4 gap changes, 4 reasoning lengths, 2 x 2 cloning pairs, 2 keep
    assert "The 26 comparisons below are one family" in lines[1] and len(lines) == 28
    kl = [line.split(" = ")[0] for line in lines if line.startswith("KL to the initial policy")]
    assert kl == ["KL to the initial policy over the last third of training, + BC only minus GRPO (RAIF reward)",
                  "KL to the initial policy over the last third of training, + superior CoT (the authors') + BC minus "
                  "+ superior CoT (the authors')"]
    assert not any(w in " ".join(lines) for w in ("Highest", "best", "next:"))


def test_keep_table_pools_counts_into_wilson_intervals_inside_0_1():
    train = pd.DataFrame([{"arm": "supcot", "step": step, "seed": seed, "keep_ratio": 1.0, "groups_kept": 4,
                           "groups_sampled": 4, "groups_cot_tied": 1} for step in range(1, 7) for seed in (0, 1)]
                         + [{"arm": "grpo", "step": 1, "seed": 0, "keep_ratio": None, "groups_kept": 0,
                             "groups_sampled": 4, "groups_cot_tied": 0}])
    got = viz.keep_table(train, ["grpo", "supcot"], steps=6)
    assert list(got["steps"]) == ["first third", "last third"] and (got["sampled"] == 16).all()
    p, lo, hi, _ = stats.wilson(16, 16)
    assert got["95% Wilson"].iloc[0] == f"[{lo:.3f}, {hi:.3f}]" and hi <= 1.0 and got["CoT all alike"].iloc[0] == 0.25


def test_seed_table_has_no_empty_rows_for_an_arm_run_on_fewer_seeds():
    end = viz.by_seed(viz.last_eval(sweep()), "eval_csr", ARMS)
    fewer = viz.by_seed(viz.last_eval(sweep(seeds=(0,))), "eval_csr", ARMS)
    table = viz.seed_table({"CSR end": end.assign(**{ARMS[1]: fewer[ARMS[1]]})})
    assert list(table.index) == [("RL-ILA", 0), ("RL-ILA", 1), ("RL-ILA", 2), ("ScopeIF wo HRA", 0)]


def test_final_bars_mark_each_arms_start_so_that_gains_can_be_read():
    import matplotlib.pyplot as plt

    df = sweep()
    fig, ax = plt.subplots()
    viz.final_bars(ax, df, ["eval_csr"], arms=ARMS, start_step=0)
    marks = [c for c in ax.collections if c.get_label() == "step 0"]
    assert len(marks) == 1 and "dash: mean at step 0" in ax.get_legend().get_title().get_text()
    assert list(marks[0].get_offsets()[:, 1]) == pytest.approx([0.55])  # every arm starts at 0.55 in this sweep


def test_mode_scores_draw_bootstrap_intervals_over_prompts():
    import matplotlib.pyplot as plt

    from ifcore.bench import cot_study as cs

    prompts = pd.DataFrame([{"benchmark": "scopeif", "view": v, "mode": m, "CSR": x, "ISR": float(x == 1), "n": 1}
                            for v in cs.VIEWS for m in ("io", "cot") for x in (0.0, 0.5, 1.0, 1.0)])
    scores = cs.headline(prompts, level=0.9, resamples=500)
    row = scores[(scores["metric"] == "CSR") & (scores["mode"] == cs.MODE_LABELS["io"])].iloc[0]
    assert row["score"] == pytest.approx(62.5) and row["lo"] < 62.5 < row["hi"] <= 100
    fig, axes = plt.subplots(1, 1, squeeze=False)
    viz.mode_scores(axes[0], scores, ["scopeif"])
    assert axes[0][0].containers and any(len(c.lines) > 1 and c.lines[1] for c in axes[0][0].containers
                                         if hasattr(c, "lines"))


def test_a_policy_whose_plans_all_collapsed_is_said_in_a_sentence():
    samples = {"initial policy": [{"reasoning_tokens": 12}, {"reasoning_tokens": 0}],
               "GRPO (RAIF reward)": [{"reasoning_tokens": 0}] * 3, "+ BC only": []}
    assert viz.collapse_notes(samples) == [
        "GRPO (RAIF reward): all 3 sampled responses have an empty plan (0 reasoning tokens): its reasoning collapsed "
        "in this run (the per-seed reasoning length below shows whether other seeds did too)."]


def test_record_curve_marks_each_measurement_on_the_curve_of_its_range():
    from ifcore import rewards
    from ifcore.verify import Record

    records = [Record(None, 4, 3, (0, 1)), Record(None, 4, 7, (2, 3)), Record(None, 4, 9, (4, 5))]
    fig, ax = plt.subplots()
    viz.record_curve(ax, records, alpha=3.0)
    points = {tuple(p) for c in ax.collections for p in c.get_offsets()}
    assert points == {(r.actual, rewards.graded(None, 4, r.actual, 3.0)) for r in records}
    x, y = ax.lines[0].get_data()
    assert x.max() >= 9 and y.max() == 1.0 and y.min() < rewards.graded(None, 4, 9, 3.0)
    moved = plt.subplots()[1]
    viz.record_curve(moved, records, alpha=6.0)  # the slider's move: the violated records' r fall
    assert {tuple(p) for c in moved.collections for p in c.get_offsets()} != points
    empty = plt.subplots()[1]
    viz.record_curve(empty, [Record(1, None, None, (0, 0))], alpha=3.0)
    assert not empty.lines and "no measured segment" in empty.texts[0].get_text()
    plt.close("all")
