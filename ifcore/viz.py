"""Tables, HTML and figures for the notebooks, so that the notebooks themselves hold no logic.

pandas, matplotlib and seaborn are imported inside the functions: the core never needs them.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from ifcore import rewards, stats
from ifcore.jsonl import read_jsonl
from ifcore.schema import Constraint, parse_label, scope_selector

# Colour-blind-safe highlight colours (Okabe-Ito), one per constraint.
PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]


def verdict_table(constraints: list[Constraint], verdicts: list, alpha: float = 3.0):
    """One row per constraint: its selector, records, verdict and graded value g_i (ScopeIF eq. 6)."""
    import pandas as pd

    rows = []
    for c, v in zip(constraints, verdicts):
        worst = min(v.records, key=lambda r: rewards.graded(r.lo, r.hi, r.actual, alpha), default=None)
        rows.append({"id": c.id, "constraint": c.text or "", "selector": scope_selector(c.scope),
                     "records": len(v.records), "violated records": sum(not r.ok for r in v.records),
                     "worst (lo, hi, actual)": (worst.lo, worst.hi, worst.actual) if worst else None,
                     "satisfied": v.satisfied, "graded g": round(v.graded(alpha), 6)})
    return pd.DataFrame(rows)


def records_table(verdict, response: str, alpha: float = 3.0):
    """One row per record: bounds, measured value, the segment's text and its graded reward r (eq. 5)."""
    import pandas as pd

    return pd.DataFrame([{"lo": r.lo, "hi": r.hi, "actual": r.actual, "ok": r.ok,
                          "r": round(rewards.graded(r.lo, r.hi, r.actual, alpha), 6),
                          "segment": _clip(response[r.span[0]:r.span[1]])} for r in verdict.records])


def _clip(s: str, n: int = 60) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def highlight_html(response: str, layers: list[tuple[str, list[tuple[int, int]]]]) -> str:
    """The response with each layer's spans marked in its own colour (a later layer paints over an earlier
    one where they overlap), and a legend. `layers` is [(label, spans), ...]."""
    paint = [None] * len(response)
    for i, (_, spans) in enumerate(layers):
        for a, b in spans:
            for k in range(max(0, a), min(b, len(response))):
                paint[k] = i
    out, k = [], 0
    while k < len(response):
        j = k
        while j < len(response) and paint[j] == paint[k]:
            j += 1
        text = html.escape(response[k:j])
        if paint[k] is None:
            out.append(text)
        else:
            colour = PALETTE[paint[k] % len(PALETTE)]
            out.append(f'<mark style="background:{colour}55;border-bottom:2px solid {colour}" '
                       f'title="{html.escape(layers[paint[k]][0])}">{text}</mark>')
        k = j
    legend = " ".join(f'<span style="background:{PALETTE[i % len(PALETTE)]}55;padding:0 4px">'
                      f'{html.escape(label)}</span>' for i, (label, _) in enumerate(layers))
    return (f'<div style="font-size:90%">{legend}</div>'
            f'<pre style="white-space:pre-wrap;font-family:inherit;line-height:1.5">{"".join(out)}</pre>')


def graded_curves(ax, lo, hi, actual_range, alphas=(1.0, 3.0, 5.0)):
    """r = exp(-alpha d / s) against the measured value for one range (ScopeIF eq. 5, 8, 9)."""
    xs = list(actual_range)
    for a in alphas:
        ax.plot(xs, [rewards.graded(lo, hi, x, a) for x in xs], label=f"alpha = {a:g}")
    ax.axvspan(lo if lo is not None else xs[0], hi if hi is not None else xs[-1], color="0.9", zorder=0,
               label="admissible")
    ax.set_xlabel("measured value")
    ax.set_ylabel("graded reward r")
    ax.legend(frameon=False)


def coverage_bars(axes, cov: dict, groups=("scope", "primary_target", "range")):
    """Fraction of real ScopeIF-Test constraints expressed, per category (ifcore.coverage.coverage)."""
    for ax, g in zip(axes, groups):
        names = sorted(cov[g], key=lambda k: -cov[g][k]["n"])
        v1 = [cov[g][k]["frac_v1"] for k in names]
        adopted = [cov[g][k]["frac_adopted"] for k in names]
        y = range(len(names))
        ax.barh(y, adopted, color="#56B4E9", label="schema v1 + adopted extensions")
        ax.barh(y, v1, color="#0072B2", label="schema v1 as specified")
        ax.set_yticks(list(y), [f"{k} ({cov[g][k]['n']})" for k in names])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of constraints expressed")
        ax.set_ylabel(f"{g.replace('_', ' ')} (constraints)")
        ax.set_title(g.replace("_", " ").capitalize())
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].figure.legend(handles, labels, loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, -0.06))


def save(fig, stem: str | Path) -> list[str]:
    """Write the figure as PNG and SVG; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [str(stem.with_suffix(".png")), str(stem.with_suffix(".svg"))]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


# One name and one colour per reward arm in every figure and table: the paper's names (ScopeIF section 6).
ARM_LABELS = {"ila": "RL-ILA", "cla": "RL-CLA", "scopeif": "ScopeIF", "scopeif_flat": "ScopeIF wo HRA",
              "raif": "RAIF"}
ARM_COLOURS = {"ila": "#0072B2", "cla": "#D55E00", "scopeif": "#009E73", "scopeif_flat": "#CC79A7",
               "raif": "#E69F00"}
SELECTORS = ("Global", "Traversal", "Position", "Condition", "Nested")
BANDS = {"range": "line: mean over seeds\nband: lowest to highest seed",
         "ci": "line: mean over seeds\nband: {level} t-interval of the mean"}


def arm_label(arm: str) -> str:
    return ARM_LABELS.get(arm, arm)


def _colour(arm: str, i: int) -> str:
    return ARM_COLOURS.get(arm, PALETTE[i % len(PALETTE)])


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def last_eval(df):
    """The eval rows of each (arm, seed) run's last evaluation."""
    ev = df[df["type"] == "eval"]
    return ev[ev["step"] == ev.groupby(["arm", "seed"])["step"].transform("max")]


def by_seed(rows, metric: str, arms: list[str]):
    """A seeds x arms table of `metric` (the mean where a run has several rows, e.g. every training step)."""
    values = rows[metric].astype(float)
    return values.groupby([rows["seed"], rows["arm"]]).mean().unstack("arm").reindex(columns=arms)


def seed_table(tables: dict):
    """The per-seed values behind the conclusions: one row per (arm, seed), one column per named by_seed table."""
    import pandas as pd

    arms = list(next(iter(tables.values())).columns)
    seeds = sorted(set().union(*(t.index for t in tables.values())))
    index = pd.MultiIndex.from_product([[arm_label(a) for a in arms], seeds], names=["arm", "seed"])
    return pd.DataFrame({name: [t[a].get(s) for a in arms for s in seeds] for name, t in tables.items()},
                        index=index)


def ci_table(tables: dict, level: float = 0.95):
    """One row per arm, one column per named by_seed table: "mean [lo, hi]", the t-interval over seeds
    (stats.mean_ci), or "mean (1 seed)" where no interval exists; the last column counts the seeds."""
    import pandas as pd

    def cell(values) -> str:
        mean, lo, hi, n = stats.mean_ci(values, level)
        return "no data" if n == 0 else f"{mean:.3f} (1 seed)" if n == 1 else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"

    arms = list(next(iter(tables.values())).columns)
    out = pd.DataFrame({name: [cell(t[a]) for a in arms] for name, t in tables.items()},
                       index=pd.Index([arm_label(a) for a in arms], name="arm"))
    out["seeds"] = [max(int(t[a].notna().sum()) for t in tables.values()) for a in arms]
    out.columns.name = f"mean [{_pct(level)} t-interval over seeds]"
    return out


def compare(what: str, a_by_seed, b_by_seed, level: float = 0.95) -> str:
    """One sentence on `what` = a - b, paired by seed (stats.paired_diff_ci): positive or negative when its
    interval excludes 0; undecided when the interval includes 0, or when a single seed gives no interval."""
    mean, lo, hi, n = stats.paired_diff_ci(a_by_seed, b_by_seed, level)
    if n == 0:
        return f"{what}: no seed has both values, nothing to compare."
    if n == 1:
        return f"{what} = {mean:+.3f} from one seed: no spread can be estimated, so its sign is not decided."
    head = f"{what} = {mean:+.3f} ({_pct(level)} CI {lo:+.3f} to {hi:+.3f}, paired over {n} seeds)"
    if lo > 0 or hi < 0:
        return f"{head}: {'positive' if lo > 0 else 'negative'}."
    return f"{head}: the interval includes 0, so these seeds cannot decide its sign."


def arm_conclusions(start, end, identical_pairs, level: float = 0.95) -> list[str]:
    """The closing statements of a comparison of reward arms, each decided by a paired t-interval over seeds
    (compare): how many seeds stand behind them (with one, that no spread can be estimated); each arm's held-out
    CSR at the end against step 0; the arm with the highest mean against the runner-up; ScopeIF against every
    other arm; every arm's identical-reward-pair fraction against RL-ILA's (ScopeIF Fig. 4b). `start` and `end`
    (held-out CSR) and `identical_pairs` are by_seed tables. The best and the runner-up are picked by the same
    data that compares them, so a sign decided there is on the optimistic side."""
    seeds = [s for s in end.index if end.loc[s].notna().any()]
    if len(seeds) <= 1:
        lines = [f"Only {_seeds(len(seeds))} ({', '.join(map(str, seeds)) or 'none'}): no spread over seeds can be "
                 "estimated, so no confidence interval is given and no difference below is decided by these runs."]
    else:
        lines = [f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): intervals are {_pct(level)} Student-t "
                 "intervals over seeds; differences are paired by seed."]
    for arm in end.columns:
        lines.append(compare(f"{arm_label(arm)}: held-out CSR at the end minus at step 0", end[arm], start[arm],
                             level))
    ranked, pairs = list(end.mean().sort_values(ascending=False).index), []
    if len(ranked) >= 2:
        best, second = ranked[:2]
        lines.append(f"Highest mean held-out CSR at the end: {arm_label(best)} ({end[best].mean():.3f}); "
                     f"next: {arm_label(second)} ({end[second].mean():.3f}).")
        pairs.append((best, second))
    if "scopeif" in end.columns:
        pairs += [("scopeif", arm) for arm in end.columns if arm != "scopeif" and {"scopeif", arm} != set(pairs[0])]
    for a, b in pairs:
        lines.append(compare(f"Held-out CSR at the end, {arm_label(a)} minus {arm_label(b)}", end[a], end[b], level))
    if "ila" in identical_pairs.columns:
        for arm in identical_pairs.columns.drop("ila"):
            lines.append(compare(f"Identical-reward-pair fraction (mean over training), {arm_label(arm)} minus "
                                 f"RL-ILA", identical_pairs[arm], identical_pairs["ila"], level))
    return lines


def curves(ax, df, metric: str, row_type: str = "eval", arms=None, band: str = "range", level: float = 0.95,
           legend: bool = True):
    """metric against step for each arm: the mean over seeds and a band, either from the lowest to the highest
    seed (band="range") or the t-interval of the mean (band="ci"; none where one seed). The legend says how many
    seeds stand behind each line and what the band is."""
    if band not in BANDS:
        raise ValueError(f"band={band!r}: one of {sorted(BANDS)}")
    rows = df[(df["type"] == row_type) & df[metric].notna()]
    for i, arm in enumerate(arms or sorted(rows["arm"].unique())):
        sub = rows[rows["arm"] == arm]
        by_step = sub.groupby("step")[metric]
        mean = by_step.mean()
        if band == "range":
            lo, hi = by_step.min().to_numpy(float), by_step.max().to_numpy(float)
        else:
            cis = [stats.mean_ci(values, level) for _, values in by_step]
            lo, hi = [c[1] for c in cis], [c[2] for c in cis]
        ax.plot(mean.index, mean.values, color=_colour(arm, i),
                label=f"{arm_label(arm)} ({_seeds(sub['seed'].nunique())})")
        ax.fill_between(mean.index, lo, hi, color=_colour(arm, i), alpha=0.15, linewidth=0)
    ax.set_xlabel("training step")
    ax.set_ylabel(metric.replace("_", " "))
    if legend:  # beside the axes, where it hides no line
        ax.legend(title=BANDS[band].format(level=_pct(level)), frameon=False, fontsize=8, title_fontsize=8,
                  alignment="left", loc="upper left", bbox_to_anchor=(1.01, 1))


def final_bars(ax, df, metrics: list[str], arms=None, labels=None, counts=None, unit: str = "constraints",
               level: float = 0.95):
    """Each arm's value of each metric at its last evaluation: bars are the mean over seeds, whiskers its
    t-interval (none where one seed), dots the seeds. `counts[j]`, when given, is the number of held-out `unit`
    behind metrics[j] (the same for every arm), written under its label."""
    import numpy as np

    last = last_eval(df)
    arms = arms or sorted(last["arm"].unique())
    width = 0.8 / len(arms)
    x = np.arange(len(metrics))
    for i, arm in enumerate(arms):
        sub = last[last["arm"] == arm]
        mean, lo, hi, _ = np.array([stats.mean_ci(sub[m], level) for m in metrics]).T
        ax.bar(x + i * width, mean, width, color=_colour(arm, i),
               label=f"{arm_label(arm)} ({_seeds(sub['seed'].nunique())})")
        ax.errorbar(x + i * width, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor="black", elinewidth=1,
                    capsize=2)
        for j, m in enumerate(metrics):
            ax.scatter(np.full(len(sub), x[j] + i * width), sub[m].astype(float), color="black", s=6, zorder=3)
    names = list(labels or metrics)
    if counts is not None:
        names = [f"{name}\n({n} {unit})" for name, n in zip(names, counts)]
    ax.set_xticks(x + width * (len(arms) - 1) / 2, names)
    ax.legend(title=f"bars: mean over seeds; whiskers: {_pct(level)} t-interval; dots: seeds", frameon=False,
              fontsize=8, title_fontsize=8, ncol=min(len(arms), 4), loc="lower center", bbox_to_anchor=(0.5, 1))


def heldout_scope_counts(run) -> dict[str, int]:
    """The held-out constraints per ScopeIF selector behind a run's eval_csr_<selector>: those of the first
    `eval_prompts` rows of its test data, as the run's config.json (ifcore.train.grpo) records them."""
    from collections import Counter

    cfg = json.loads((Path(run) / "config.json").read_text())
    test_data = cfg["paths"]["test_data"]
    rows = read_jsonl(test_data, required=("label",))[: cfg["identity"]["eval_prompts"]]
    counts = Counter(c.selector for n, row in enumerate(rows, 1)
                     for c in parse_label(row["label"], where=f"{test_data}:{n} label"))
    return {s: counts[s] for s in SELECTORS}


def distributions(ax, rollouts, arms=None, xlabel: str = "reward"):
    """The empirical CDF of every rollout's reward per arm (the arm, seed and reward columns of
    ifcore.train.sweep.load_rollouts), so that no arm's distribution hides another's; the legend counts the seeds
    and rollouts behind each curve."""
    import seaborn as sns

    for i, arm in enumerate(arms or sorted(rollouts["arm"].unique())):
        sub = rollouts[rollouts["arm"] == arm]
        sns.ecdfplot(x=sub["reward"].to_numpy(float), ax=ax, color=_colour(arm, i),
                     label=f"{arm_label(arm)} ({_seeds(sub['seed'].nunique())}, {len(sub):,} rollouts)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"fraction of rollouts with {xlabel} ≤ x")
    ax.legend(title="all steps and seeds pooled", frameon=False, fontsize=8, title_fontsize=8, alignment="left",
              loc="upper left", bbox_to_anchor=(1.01, 1))
