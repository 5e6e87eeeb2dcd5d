"""Tables, HTML and figures for the notebooks, so that the notebooks themselves hold no logic.

pandas, matplotlib and seaborn are imported inside the functions: the core never needs them.
"""
from __future__ import annotations

import html
import json
import math
import textwrap
from pathlib import Path

from ifcore import rewards, stats
# show_primary's output, which `ifcore report` records in metadata and writes into docs/results.md
from ifcore.report import PRIMARY_MIME, primary_markdown  # noqa: F401 - primary_markdown is viz's too
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
            f'<pre style="white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;font-family:inherit;line-height:1.5">{"".join(out)}</pre>')


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


def record_curve(ax, records: list, alpha: float) -> None:
    """The graded reward r against the measured value (ScopeIF eq. 5, 8, 9) at this alpha, for the range of a
    verdict's worst record, each record of that range marked at its measurement (red: violated): where the
    constraint's g comes from, redrawn as alpha moves. A verdict without measurements says so."""
    import numpy as np

    measured = [r for r in records if r.actual is not None]
    if not measured:
        _no_data(ax, "no measured segment: g = 1 (nothing selected) or 0 (a missing segment)")
        return
    worst = min(measured, key=lambda r: rewards.graded(r.lo, r.hi, r.actual, alpha))
    marked = [r for r in measured if (r.lo, r.hi) == (worst.lo, worst.hi)]
    ends = [v for v in (worst.lo, worst.hi, *(r.actual for r in marked)) if v is not None and math.isfinite(v)]
    xs = np.linspace(min(0.0, *ends), max(ends) * 1.5 + 2, 400)
    ax.plot(xs, rewards.graded(worst.lo, worst.hi, xs, alpha), color="#0072B2", label=f"alpha = {alpha:g}")
    ax.axvspan(xs[0] if worst.lo is None else worst.lo, xs[-1] if worst.hi is None else worst.hi, color="0.9",
               zorder=0, label="admissible")
    for ok, colour, label in ((True, "#009E73", "record within range"), (False, "#D55E00", "violated record")):
        pts = [r for r in marked if r.ok == ok]
        if pts:
            ax.scatter([r.actual for r in pts], [rewards.graded(r.lo, r.hi, r.actual, alpha) for r in pts],
                       color=colour, zorder=3, label=f"{label} ({len(pts)})")
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("measured value")
    ax.set_ylabel("graded reward r")
    ax.legend(frameon=False, fontsize="small")


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


def judge_accuracy_bars(axes, pointwise: dict, groups=("scope_selector", "primary_target", "range")):
    """A judge's pointwise accuracy per category with its Wilson 95 % interval (ifcore.judge.meta.pointwise), and
    the accuracy of always giving the majority verdict (dashed) for scale."""
    for ax, g in zip(axes, groups):
        cells = pointwise["by_category"][g]
        names = sorted(cells, key=lambda k: -cells[k]["n"])
        acc = [cells[k]["accuracy"] for k in names]
        err = [[a - cells[k]["lo"] for a, k in zip(acc, names)], [cells[k]["hi"] - a for a, k in zip(acc, names)]]
        y = range(len(names))
        ax.barh(y, acc, xerr=err, color="#009E73", ecolor="#333333", capsize=3)
        ax.axvline(pointwise["majority"], color="#D55E00", linestyle="--", label="always the majority verdict")
        ax.set_yticks(list(y), [f"{k} ({cells[k]['n']})" for k in names])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("judge accuracy (95% Wilson interval)")
        ax.set_title(g.replace("_", " ").capitalize())
    axes[0].legend(loc="lower right", frameon=False)


def save(fig, stem: str | Path) -> list[str]:
    """Write the figure as PNG and SVG; returns both paths. The same figure gives the same bytes: the SVG carries no
    date and its element ids are salted with the file name, so a rerun that reproduces a result changes no file."""
    import matplotlib

    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [str(stem.with_suffix(".png")), str(stem.with_suffix(".svg"))]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    with matplotlib.rc_context({"svg.hashsalt": stem.name}):
        fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
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
    """The per-seed values behind the conclusions: one row per (arm, seed) that has a value, one column per named
    by_seed table (an arm run on fewer seeds than another gets no empty rows)."""
    import pandas as pd

    arms = list(next(iter(tables.values())).columns)
    seeds = sorted(set().union(*(t.index for t in tables.values())))
    index = pd.MultiIndex.from_product([[arm_label(a) for a in arms], seeds], names=["arm", "seed"])
    return pd.DataFrame({name: [t[a].get(s) for a in arms for s in seeds] for name, t in tables.items()},
                        index=index, dtype=float).dropna(how="all")


def ci_table(tables: dict, level: float = 0.95, bounds=None):
    """One row per arm, one column per named by_seed table: "mean [lo, hi]", the t-interval over seeds
    (stats.mean_ci), or "mean (1 seed)" where no interval exists; the last column counts the seeds. `bounds`: the
    range each table's quantity cannot leave, intervals kept inside it -- one (a, b) for every table, or a dict
    from table name to (a, b) (tables it does not name are unbounded)."""
    import pandas as pd

    def cell(values, name) -> str:
        limits = bounds.get(name) if isinstance(bounds, dict) else bounds
        mean, lo, hi, n = stats.mean_ci(values, level, limits)
        return "no data" if n == 0 else f"{mean:.3f} (1 seed)" if n == 1 else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"

    arms = list(next(iter(tables.values())).columns)
    out = pd.DataFrame({name: [cell(t[a], name) for a in arms] for name, t in tables.items()},
                       index=pd.Index([arm_label(a) for a in arms], name="arm"))
    out["seeds"] = [max(int(t[a].notna().sum()) for t in tables.values()) for a in arms]
    out.columns.name = f"mean [{_pct(level)} t-interval over seeds]"
    return out


def decide(comparisons, level: float = 0.95, unit: str = "seeds") -> list[str]:
    """One sentence per comparison (what, a_by_seed, b_by_seed) on `what` = a - b, paired by seed
    (stats.paired_t), the list being one family: a sign is decided (positive, negative) only where the p-value of
    the paired t-test, Holm-adjusted over the family (stats.holm), is below 1 - level, which bounds the chance of
    any false sign among them by 1 - level. The interval shown is each comparison's own (unadjusted) t-interval; a
    single seed gives none and decides nothing. `unit` names what the values are paired over when it is not seeds
    (notebook 04 pairs its discriminator's metrics over held-out instructions)."""
    one = unit[:-1] if unit.endswith("s") else unit  # "seed", "held-out instruction"
    tests = [stats.paired_t(a, b, level) for _, a, b in comparisons]
    adjusted = stats.holm([t[4] for t in tests])
    m = sum(1 for p in adjusted if p == p)
    lines = []
    for (what, _, _), (mean, lo, hi, n, p), q in zip(comparisons, tests, adjusted):
        if n == 0:
            lines.append(f"{what}: no {one} has both values, nothing to compare.")
        elif n == 1:
            lines.append(f"{what} = {mean:+.3f} from one {one}: no spread can be estimated, so its sign is not "
                         "decided.")
        else:
            head = (f"{what} = {mean:+.3f} ({_pct(level)} CI {lo:+.3f} to {hi:+.3f}, paired over {n} {unit}; "
                    f"p = {p:.3g}" + (f", Holm-adjusted over {m} comparisons: {q:.3g})" if m > 1 else ")"))
            if q < 1 - level:
                lines.append(f"{head}: {'positive' if mean > 0 else 'negative'}.")
            elif lo > 0 or hi < 0:
                lines.append(f"{head}: its own interval excludes 0, but not after correcting for the {m} "
                             "comparisons, so its sign is not decided.")
            else:
                lines.append(f"{head}: the interval includes 0, so these {unit} cannot decide its sign.")
    return lines


def compare(what: str, a_by_seed, b_by_seed, level: float = 0.95) -> str:
    """decide() for a family of one comparison."""
    return decide([(what, a_by_seed, b_by_seed)], level)[0]


def family_note(n: int, level: float = 0.95, exploratory: bool = False) -> str:
    """The line that introduces a family of n comparisons decided by `decide` (`exploratory`: outside the
    notebook's primary question, said first)."""
    return (("Exploratory (not the primary question; its own family): " if exploratory else "")
            + f"The {n} comparisons below are one family: a sign counts as decided only where the paired t-test's "
            f"p-value, Holm-adjusted over all {n}, is below {1 - level:.2g} (family-wise error at most "
            f"{_pct(1 - level)}). Intervals are each comparison's own {_pct(level)} t-interval over seeds.")


def arm_comparisons(start, end, identical_pairs) -> list[tuple]:
    """The planned comparisons of reward arms (ScopeIF Table 1 and Fig. 4b), for `decide`: each arm's held-out CSR
    at the end against step 0; ScopeIF against every other arm and RL-CLA against RL-ILA on held-out CSR at the end
    (Table 1's order ILA < CLA < ScopeIF, and ScopeIF against wo HRA); every arm's identical-reward-pair fraction
    against RL-ILA's, and ScopeIF's against RL-CLA's (Fig. 4b). `start`, `end` (held-out CSR) and
    `identical_pairs` are by_seed tables; arms a table lacks are skipped."""
    out = [(f"{arm_label(arm)}: held-out CSR at the end minus at step 0", end[arm], start[arm]) for arm in end.columns]
    pairs = [("scopeif", arm) for arm in end.columns if "scopeif" in end.columns and arm != "scopeif"]
    pairs += [("cla", "ila")] if {"cla", "ila"} <= set(end.columns) else []
    out += [(f"Held-out CSR at the end, {arm_label(a)} minus {arm_label(b)}", end[a], end[b]) for a, b in pairs]
    cols = set(identical_pairs.columns)
    ip = [(arm, "ila") for arm in identical_pairs.columns if "ila" in cols and arm != "ila"]
    ip += [("scopeif", "cla")] if {"scopeif", "cla"} <= cols else []
    out += [(f"Identical-reward-pair fraction (mean over training), {arm_label(a)} minus {arm_label(b)}",
             identical_pairs[a], identical_pairs[b]) for a, b in ip]
    return out


def seeds_note(table, level: float = 0.95) -> str:
    """How many seeds stand behind a by_seed table's conclusions (with one, that nothing can be decided)."""
    seeds = [s for s in table.index if table.loc[s].notna().any()]
    if len(seeds) <= 1:
        return (f"Only {_seeds(len(seeds))} ({', '.join(map(str, seeds)) or 'none'}): no spread over seeds can be "
                "estimated, so no confidence interval is given and no difference below is decided by these runs.")
    return (f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): intervals are {_pct(level)} Student-t intervals "
            "over seeds; differences are paired by seed.")


def arm_conclusions(start, end, identical_pairs, level: float = 0.95) -> list[str]:
    """The closing statements of a comparison of reward arms: how many seeds stand behind them, then the planned
    comparisons (arm_comparisons) decided as one family with Holm's correction (decide). No sentence ranks arms
    by their means: an order is stated only where a comparison decides it."""
    comparisons = arm_comparisons(start, end, identical_pairs)
    return [seeds_note(end, level), family_note(len(comparisons), level)] + decide(comparisons, level)


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
               level: float = 0.95, bounds: tuple[float, float] | None = None, start_step: int | None = None):
    """Each arm's value of each metric at its last evaluation: bars are the mean over seeds, whiskers its
    t-interval (none where one seed; kept inside `bounds`, the range the metrics cannot leave), dots the seeds.
    `counts[j]`, when given, is the number of held-out `unit` behind metrics[j] (the same for every arm), written
    under its label. `start_step` (e.g. 0): a white-edged bar marker at each arm's mean at that evaluation, so that
    the gain of every bar can be read off (ScopeIF Fig. 3 shows the base model beside the trained ones)."""
    import numpy as np

    last = last_eval(df)
    arms = arms or sorted(last["arm"].unique())
    width = 0.8 / len(arms)
    x = np.arange(len(metrics))
    for i, arm in enumerate(arms):
        sub = last[last["arm"] == arm]
        mean, lo, hi, _ = np.array([stats.mean_ci(sub[m], level, bounds) for m in metrics]).T
        ax.bar(x + i * width, mean, width, color=_colour(arm, i),
               label=f"{arm_label(arm)} ({_seeds(sub['seed'].nunique())})")
        ax.errorbar(x + i * width, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor="black", elinewidth=1,
                    capsize=2)
        for j, m in enumerate(metrics):
            ax.scatter(np.full(len(sub), x[j] + i * width), sub[m].astype(float), color="black", s=6, zorder=3)
        if start_step is not None:
            at = df[(df["type"] == "eval") & (df["step"] == start_step) & (df["arm"] == arm)]
            ax.scatter(x + i * width, [at[m].astype(float).mean() for m in metrics], marker="_", s=width * 900,
                       color="black", linewidths=2, zorder=4, label=f"step {start_step}" if i == 0 else None)
    names = list(labels or metrics)
    if counts is not None:
        names = [f"{name}\n({n} {unit})" for name, n in zip(names, counts)]
    ax.set_xticks(x + width * (len(arms) - 1) / 2, names)
    ax.legend(title=f"bars: mean over seeds; whiskers: {_pct(level)} t-interval; dots: seeds"
              + (f"; dash: mean at step {start_step}" if start_step is not None else ""), frameon=False,
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
    ifcore.run.sweep.load_rollouts), so that no arm's distribution hides another's; the legend counts the seeds
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


# ---- RTT token relevance (notebook 04) ------------------------------------------------------------------------------

# Relevance is shaded on a log scale from P_FLOOR to 1: a discriminator's p on the few relevant tokens of a LOCAL
# constraint is often 0.05 against 0.001 elsewhere, an order that intra-sample normalization uses in full but that a
# linear 0-1 scale paints white on white.
P_FLOOR = 1e-3


def relevance_shade(p) -> float:
    """p in [0, 1] as a shade in [0, 1] on the log scale from P_FLOOR (0) to 1 (1)."""
    import math

    return (math.log10(min(max(float(p), P_FLOOR), 1.0)) - math.log10(P_FLOOR)) / -math.log10(P_FLOOR)


def token_heatmap_html(pieces: list[str], scores, labels=None, title: str = "", caption: str = "") -> str:
    """A response's tokens shaded by relevance, darker = more relevant on a log scale (`relevance_shade`; the
    analog of RTT Table 6). `pieces` are the tokens' texts, `scores` their relevance in [0, 1]; `labels` (0/1),
    when given, mark the tokens that the verifier finds relevant with a thick orange underline and frame, visible
    however pale the shade; `caption` (what the example shows, e.g. success or failure) goes under the title.
    Hovering a token shows its score."""
    labels = [0] * len(pieces) if labels is None else labels
    out = []
    for piece, p, y in zip(pieces, scores, labels):
        shade = relevance_shade(p)
        line = "border-bottom:3px solid #D55E00;outline:1px solid #D55E00;" if y else ""
        out.append(f'<span style="background:rgba(0,114,178,{shade:.2f});{line}color:'
                   f'{"white" if shade > 0.6 else "black"}" title="p = {float(p):.4f}">{html.escape(piece)}</span>')
    head = f'<div style="font-size:90%;margin-top:6px"><b>{html.escape(title)}</b></div>' if title else ""
    head += f'<div style="font-size:85%">{html.escape(caption)}</div>' if caption else ""
    key = (f'<div style="font-size:80%">shade: discriminator relevance p, log scale (white p <= {P_FLOOR:g}, '
           'mid-blue 0.03, dark blue 1); '
           + ('framed and underlined in orange: relevant by the verifier\'s labels' if any(labels)
              else 'no token relevant by the labels') + "</div>")
    return (f'{head}{key}<pre style="white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;font-family:inherit;line-height:1.7">{"".join(out)}'
            "</pre>")


def relevance_matrix(ax, pieces: list[str], rows: list[str], matrix, labels=None):
    """Constraints x tokens: one row of relevance per constraint (darker = more relevant, log colour scale from
    P_FLOOR to 1 so that small but raised p stay visible); `labels`, a matrix of the same shape, frames the cells
    the verifier marks relevant in thick orange."""
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    m = np.clip(np.asarray(matrix, dtype=float), P_FLOOR, 1.0)
    image = ax.imshow(m, aspect="auto", cmap="Blues", norm=LogNorm(vmin=P_FLOOR, vmax=1.0), interpolation="nearest")
    if labels is not None:
        for r, c in zip(*np.nonzero(np.asarray(labels))):
            ax.add_patch(Rectangle((c - 0.45, r - 0.45), 0.9, 0.9, fill=False, edgecolor="#D55E00", linewidth=2.5))
    ax.set_xticks(range(len(pieces)), [repr(p)[1:-1] for p in pieces], rotation=90, fontsize=7, family="monospace")
    # A long constraint is wrapped, never clipped: its key word (the counted literal, the bound) is often at the end.
    ax.set_yticks(range(len(rows)), ["\n".join(textwrap.wrap(r, 48)) for r in rows], fontsize=7)
    ax.set_xlabel("response token")
    ax.figure.colorbar(image, ax=ax, label="relevance p (log scale)", fraction=0.03, pad=0.01)


# ---- notebook 02: RAIF's ablation (GRPO with its reward, + superior-CoT enforcement, + behaviour cloning) ----------

ARM_LABELS.update({"grpo": "GRPO (RAIF reward)", "supcot": "+ superior CoT (the authors')",
                   "supcot_bc": "+ superior CoT (the authors') + BC", "bc": "+ BC only",
                   "hybrid": "+ superior CoT (hybrid: no-think judged)"})
ARM_COLOURS.update({"grpo": "#0072B2", "supcot": "#E69F00", "supcot_bc": "#009E73", "bc": "#CC79A7",
                    "hybrid": "#D55E00"})
# RAIF's superior-CoT enforcement as the authors' code runs it (--enforce_superior_CoT): a quarter of each group
# without reasoning, the per-sample reference test, and a no-think rollout's R_accuracy -2 (its empty think block),
# so eq. 7's group drop never fires; and this workspace's earlier hybrid (no-think answers judged, eq. 7 alone).
RAIF_AUTHORS = {"superior_cot": "group+reference", "nothink_share": 0.25, "nothink_accuracy": "authors"}
RAIF_ARMS = {"grpo": {}, "supcot": RAIF_AUTHORS, "supcot_bc": {**RAIF_AUTHORS, "bc_coef": 1.0}, "bc": {"bc_coef": 1.0},
             "hybrid": {"superior_cot": "group", "nothink_share": 0.25}}


def raif_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """Notebook 02's planned arm comparisons (RAIF Table 4's rows): every arm against the first (the GRPO
    baseline), and an arm against the one whose name it extends (supcot_bc against supcot: what cloning adds)."""
    pairs = [(a, arms[0]) for a in arms[1:]]
    return pairs + [(a, b) for a in arms for b in arms if a.startswith(b + "_") and (a, b) not in pairs]


def raif_conclusions(tables: dict, level: float = 0.95, skip: str | None = None) -> list[str]:
    """The closing statements of notebook 02, one family decided with Holm's correction (decide). `tables` holds
    by_seed tables (arms in ablation order) named "CSR step 0", "CSR end", "reasoning step 0", "reasoning end"
    (held-out reasoning tokens per response), "reward step 0", "reward end", "reward w/o reasoning step 0",
    "reward w/o reasoning end" (held-out RAIF reward with the CoT prompt and with the empty think block), "KL late"
    and "entropy late" (the last third of training), "keep early" and "keep late" (eq. 7's keep ratio over the
    first and the last third). Comparisons: each arm's held-out CSR at the end against step 0; the planned arm
    pairs (raif_pairs) on held-out CSR; each arm's reward with minus without reasoning at the end, and its change
    from step 0 (does reasoning come to pay, RAIF's premise); each arm's reasoning length at the end against
    step 0 (RAIF Fig. 3; a collapse is a negative sign); cloning's effect on KL and entropy (each pair whose first
    arm clones and whose second does not); each filtered arm's keep ratio late against early (RAIF Fig. 5).
    `skip`: a comparison (by its text) decided elsewhere, as the notebook's primary question: left out, and the
    family is labelled exploratory."""
    csr_end = tables["CSR end"]
    arms = list(csr_end.columns)
    pairs = raif_pairs(arms)
    comparisons = [(f"{arm_label(arm)}: held-out CSR at the end minus at step 0", csr_end[arm],
                    tables["CSR step 0"][arm]) for arm in arms]
    comparisons += [(f"Held-out CSR at the end, {arm_label(a)} minus {arm_label(b)}", csr_end[a], csr_end[b])
                    for a, b in pairs]
    gap = {when: tables[f"reward {when}"] - tables[f"reward w/o reasoning {when}"] for when in ("step 0", "end")}
    comparisons += [(f"{arm_label(arm)}: held-out reward with minus without reasoning at the end",
                     tables["reward end"][arm], tables["reward w/o reasoning end"][arm]) for arm in arms]
    comparisons += [(f"{arm_label(arm)}: that reward gap at the end minus at step 0", gap["end"][arm],
                     gap["step 0"][arm]) for arm in arms]
    comparisons += [(f"{arm_label(arm)}: reasoning tokens per held-out response at the end minus at step 0",
                     tables["reasoning end"][arm], tables["reasoning step 0"][arm]) for arm in arms]
    # cloning's own effect: pairs that differ by cloning alone (bc against the baseline, supcot_bc against supcot)
    cloning = [(a, b) for a, b in pairs
               if "bc" in a.split("_") and b == ("_".join(x for x in a.split("_") if x != "bc") or arms[0])]
    for metric in ("KL late", "entropy late"):
        what = "KL to the initial policy" if metric.startswith("KL") else "entropy"
        comparisons += [(f"{what} over the last third of training, {arm_label(a)} minus {arm_label(b)}",
                         tables[metric][a], tables[metric][b]) for a, b in cloning]
    comparisons += [(f"{arm_label(arm)}: keep ratio over the last third of training minus the first third",
                     tables["keep late"][arm], tables["keep early"][arm])
                    for arm in arms if tables["keep late"][arm].notna().any()]
    if skip:  # the notebook's primary comparison, decided on its own: not in this (exploratory) family
        comparisons = [c for c in comparisons if c[0] != skip]
    return ([seeds_note(csr_end, level), family_note(len(comparisons), level, exploratory=skip is not None)]
            + decide(comparisons, level))


def collapse_notes(samples: dict) -> list[str]:
    """The policies whose every sampled response has an empty plan (0 reasoning tokens; a truncated plan, None, is
    not empty), said in a sentence each: RAIF's warning sign (reasoning that collapses under RL), visible otherwise
    only in the samples table. `samples`: policy name -> grpo.sample_responses rows."""
    return [f"{who}: all {len(rows)} sampled responses have an empty plan (0 reasoning tokens): its reasoning "
            "collapsed in this run (the per-seed reasoning length below shows whether other seeds did too)."
            for who, rows in samples.items() if rows and all(r["reasoning_tokens"] == 0 for r in rows)]


def keep_table(train, arms: list[str], steps: int, level: float = 0.95):
    """Eq. 7's keep ratio per arm over the first and the last third of training, pooled over seeds and steps:
    kept / sampled groups with its Wilson interval (stats.wilson, inside [0, 1]), and the share of sampled
    groups whose CoT rollouts all scored alike (kept whatever the no-think rollouts did, as the authors keep
    them). The interval treats the pooled groups as independent draws: it covers which groups happen to pass, not
    the spread between seeds, nor the dependence between the groups of one step."""
    import pandas as pd

    third = max(1, steps // 3)
    out = []
    for arm in arms:
        sub = train[(train["arm"] == arm) & train["keep_ratio"].notna()] if "keep_ratio" in train else train[:0]
        for name, part in (("first third", sub[sub["step"] <= third]),
                           ("last third", sub[sub["step"] > steps - third])):
            if part.empty:
                continue
            k, n = int(part["groups_kept"].sum()), int(part["groups_sampled"].sum())
            p, lo, hi, _ = stats.wilson(k, n, level)
            out.append({"arm": arm_label(arm), "steps": name, "kept": k, "sampled": n, "keep ratio": round(p, 3),
                        f"{_pct(level)} Wilson": f"[{lo:.3f}, {hi:.3f}]",
                        "CoT all alike": round(int(part["groups_cot_tied"].sum()) / n, 3) if n else math.nan})
    return pd.DataFrame(out)


def raif_keyword_table(responses: dict, keywords=None):
    """RAIF Fig. 4's analogue: occurrences per 1000 words of step-by-step keywords in the reasoning (the think
    blocks) of sampled responses, one column per source ({name: [response texts]}, e.g. the initial policy and
    each arm after RL), its word count in the header (ifcore.bench.cot_study.keyword_counts)."""
    import re

    import pandas as pd

    from ifcore.bench.cot_study import KEYWORDS, keyword_counts

    keywords = keywords or KEYWORDS
    table = {}
    for name, texts in responses.items():
        thinking = [m for t in texts for m in re.findall(r"<think>(.*?)</think>", t, re.S)]
        counts, total = keyword_counts(thinking, keywords)
        table[f"{name} ({total:,} words)"] = {k: 1000 * counts[k] / total if total else math.nan for k in keywords}
    return pd.DataFrame(table).rename_axis("keyword (per 1000 reasoning words)")


# ---- RAIF preliminary study (notebook 01) ---------------------------------------------------------------------------

MODE_COLOURS = {"I/O": "#0072B2", "CoT": "#D55E00", "SDC": "#009E73"}


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def mode_scores(axes, scores, benchmarks):
    """One panel per benchmark: each metric's score per mode (ifcore.bench.cot_study.headline). Bars: "as
    answered" (the whole output), with their bootstrap intervals over prompts; diamonds: "answer-extracted" (the
    <answer> block or what the tags leave), equal to the bar where the model used no tags. The title counts the
    prompts."""
    import numpy as np

    for ax, benchmark in zip(axes, benchmarks):
        sub = scores[scores["benchmark"] == benchmark]
        if sub.empty:
            _no_data(ax, f"{benchmark}: not run")
            continue
        names, modes = list(dict.fromkeys(sub["metric"])), list(dict.fromkeys(sub["mode"]))
        width = 0.8 / len(modes)
        x = np.arange(len(names))
        for i, mode in enumerate(modes):
            view = {v: sub[(sub["mode"] == mode) & (sub["view"] == v)].set_index("metric")["score"].reindex(names)
                    .to_numpy(float) for v in ("as answered", "answer-extracted")}
            colour = MODE_COLOURS.get(mode, PALETTE[i % len(PALETTE)])
            answered = sub[(sub["mode"] == mode) & (sub["view"] == "as answered")].set_index("metric").reindex(names)
            err = np.array([answered["score"] - answered["lo"], answered["hi"] - answered["score"]], dtype=float)
            ax.bar(x + i * width, view["as answered"], width, color=colour, label=f"{mode}: as answered",
                   yerr=np.nan_to_num(err) if "lo" in sub else None, error_kw={"elinewidth": 0.8, "capsize": 2})
            ax.scatter(x + i * width, view["answer-extracted"], marker="D", s=22, color="white", edgecolor="black",
                       zorder=3, label="answer-extracted" if i == 0 else None)
            for xi in x[np.isnan(view["as answered"])]:  # e.g. ISR where no instance is wholly formalized
                ax.text(xi + i * width, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_xticks(x + width * (len(modes) - 1) / 2, names)
        ax.set_title(f"{benchmark} ({int(sub['prompts'].iloc[0])} prompts)")
        ax.set_ylabel("score (%)")
        top = sub["hi"] if "hi" in sub else sub["score"]
        ax.set_ylim(0, min(105.0, max(5.0, float(np.nanmax(top.to_numpy(float), initial=0)) * 1.15)))
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].figure.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False,
                          bbox_to_anchor=(0.5, -0.08), fontsize=8)


def type_effects(ax, types, benchmark: str, level: float = 0.95):
    """Per instruction type of one benchmark, each mode's strict followed rate minus I/O's, paired over the prompts
    holding that type (ifcore.bench.cot_study.by_type): dots the difference, whiskers its bootstrap interval
    (none for a type on too few prompts, drawn hollow). Types sorted by CoT's difference; n prompts in the label."""
    sub = types[types["benchmark"] == benchmark]
    if sub.empty:
        _no_data(ax, f"{benchmark}: no instruction type to compare")
        return
    order = (sub[sub["mode"] == sub["mode"].iloc[0]].sort_values("diff")["type"].tolist())
    y = {t: i for i, t in enumerate(order)}
    modes = list(dict.fromkeys(sub["mode"]))
    for j, mode in enumerate(modes):
        m = sub[sub["mode"] == mode]
        offset = (j - (len(modes) - 1) / 2) * 0.3
        decided = m["verdict"] != "too few prompts"
        colour = MODE_COLOURS.get(mode, PALETTE[j % len(PALETTE)])
        ys = [y[t] + offset for t in m["type"]]
        ax.errorbar([d for d, k in zip(m["diff"], decided) if k], [v for v, k in zip(ys, decided) if k],
                    xerr=[[d - lo for d, lo, k in zip(m["diff"], m["lo"], decided) if k],
                          [hi - d for d, hi, k in zip(m["diff"], m["hi"], decided) if k]],
                    fmt="o", color=colour, ms=4, elinewidth=1, capsize=2, label=f"{mode} - I/O")
        ax.scatter([d for d, k in zip(m["diff"], decided) if not k], [v for v, k in zip(ys, decided) if not k],
                   facecolor="white", edgecolor=colour, s=16, zorder=3)
    counts = sub.groupby("type")["prompts"].max()
    ax.set_yticks(range(len(order)), [f"{_clip(t, 45)} ({counts[t]})" for t in order], fontsize=7)
    ax.axvline(0, color="0.5", linewidth=0.8)
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel("strict followed rate, mode minus I/O")
    ax.set_title(f"{benchmark}: type (prompts)")
    ax.legend(title=f"whiskers: {_pct(level)} paired\nbootstrap over prompts;\nhollow: too few prompts", frameon=False,
              fontsize=7, title_fontsize=7, alignment="left", loc="upper left", bbox_to_anchor=(1.01, 1))


def length_ecdfs(ax, series: dict, xlabel: str):
    """The empirical CDF of each named sample of lengths; the legend gives n and the median. An empty sample is
    listed as such."""
    import numpy as np

    drawn = 0
    for i, (name, values) in enumerate(series.items()):
        v = np.sort(np.asarray([x for x in values if x is not None and x == x], dtype=float))
        colour = MODE_COLOURS.get(name.split()[0], PALETTE[i % len(PALETTE)])
        if len(v) == 0:
            ax.plot([], [], color=colour, label=f"{name}: none")
            continue
        ax.step(np.concatenate([[0], v]), np.arange(len(v) + 1) / len(v), where="post", color=colour,
                label=f"{name} (n={len(v)}, median {np.median(v):.0f})")
        drawn += 1
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of outputs with length ≤ x")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, fontsize=7, loc="lower right")
    if not drawn:
        ax.set_title("no sample has any value", fontsize=8)


def keyword_bars(ax, table):
    """Keyword frequency per 1000 words in each text source (ifcore.bench.cot_study.keyword_table; the analog of
    RAIF Fig. 4), one bar per source and keyword."""
    import numpy as np

    if table.empty or table.isna().all().all():
        _no_data(ax, "no text to count keywords in")
        return
    width = 0.8 / len(table.columns)
    y = np.arange(len(table.index))
    for i, column in enumerate(table.columns):
        colour = MODE_COLOURS.get(column.split()[0], PALETTE[i % len(PALETTE)])
        ax.barh(y + i * width, table[column].fillna(0).to_numpy(float), width, color=colour,
                alpha=1.0 if "answer" in column or "response" in column else 0.55, label=column)
    ax.set_yticks(y + width * (len(table.columns) - 1) / 2, list(table.index))
    ax.invert_yaxis()
    ax.set_xlabel("occurrences per 1000 words")
    ax.legend(frameon=False, fontsize=7, loc="lower right")


def format_bars(ax, table):
    """Per mode, the share of outputs in each form (ifcore.bench.cot_study.format_table): RAIF's think/answer
    format (eq. 4), some tags, no tags; the number of outputs under each bar."""
    import numpy as np

    forms = [("think+answer", "#009E73"), ("partial tags", "#E69F00"), ("no tags", "#999999")]
    x = np.arange(len(table.index))
    bottom = np.zeros(len(x))
    for form, colour in forms:
        v = table[form].to_numpy(float)
        ax.bar(x, v, 0.6, bottom=bottom, color=colour, label=form)
        bottom += v
    ax.set_xticks(x, [f"{m}\n({int(n)} outputs)" for m, n in zip(table.index, table["outputs"])])
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of final outputs")
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def overlap_hist(ax, values: dict, threshold: float):
    """Histograms of the restatement measure (share of the reasoning's word n-grams found in the instruction) per
    named sample, with the superficial-reasoning threshold."""
    import numpy as np

    bins = np.linspace(0, 1, 21)
    drawn = 0
    for i, (name, v) in enumerate(values.items()):
        v = [x for x in v if x is not None and x == x]
        colour = MODE_COLOURS.get(name.split()[0], PALETTE[i % len(PALETTE)])
        if v:
            ax.hist(v, bins=bins, histtype="step", linewidth=1.5, color=colour,
                    label=f"{name} (n={len(v)}, {100 * np.mean(np.asarray(v) >= threshold):.0f}% ≥ {threshold:g})")
            drawn += 1
        else:
            ax.plot([], [], color=colour, label=f"{name}: no reasoning")
    ax.axvline(threshold, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("restatement: share of reasoning n-grams found in the instruction")
    ax.set_ylabel("outputs")
    ax.legend(frameon=False, fontsize=7, loc="upper right")
    if not drawn:
        ax.set_title("no reasoning to measure", fontsize=8)


def mode_examples_html(outputs, prompts, benchmark: str, key, view: str = "as answered") -> str:
    """One item under every mode, side by side: the instruction, then per mode its scores on the item (`view`), the
    reasoning (SDC: the reasoning shown back to pass 2) and the final output, all escaped
    (ifcore.bench.cot_study.run_study's outputs and prompts)."""
    from ifcore.bench.cot_study import METRICS, MODE_LABELS, words

    rows = outputs[(outputs["benchmark"] == benchmark) & (outputs["key"] == key)]
    if rows.empty:
        return f"<p>{html.escape(f'{benchmark} {key}: no such item')}</p>"
    scored = prompts[(prompts["benchmark"] == benchmark) & (prompts["key"] == key) & (prompts["view"] == view)]
    cells = []
    for r in rows.itertuples():
        s = scored[scored["mode"] == r.mode]
        score = " ".join(f"{m} {s[m].iloc[0]:.2f}" for m in METRICS[benchmark]
                         if len(s) and s[m].iloc[0] == s[m].iloc[0])  # NaN: not defined for this item
        head = html.escape(f"{MODE_LABELS.get(r.mode, r.mode)} · {score or 'not scored'} ({view})")
        reasoning = ("" if not isinstance(r.reasoning, str) else  # None, or NaN once in a DataFrame
                     f'<div style="font-size:80%;color:#555">reasoning ({html.escape(str(r.reasoning_source))}, '
                     f'{len(words(r.reasoning))} words)</div><pre style="{_PRE};background:#f4f4f4">'
                     f"{html.escape(_clip_block(r.reasoning))}</pre>")
        cells.append(f'<td style="vertical-align:top;width:{100 // len(rows)}%"><b>{head}</b>{reasoning}'
                     f'<div style="font-size:80%;color:#555">output ({html.escape(r.form)}, {r.output_words} words'
                     f'{", cut at max_new_tokens" if r.truncated else ""})</div>'
                     f'<pre style="{_PRE}">{html.escape(_clip_block(r.output))}</pre></td>')
    return (f'<div style="font-size:85%"><b>{html.escape(f"{benchmark} · {key}")}</b>'
            f'<pre style="{_PRE};background:#eef5fb">{html.escape(_clip_block(rows["prompt"].iloc[0]))}</pre>'
            f'<table style="width:100%;table-layout:fixed"><tr>{"".join(cells)}</tr></table></div>')


_PRE = "white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;font-family:inherit;line-height:1.4;margin:2px 0;padding:4px;text-align:left"


def _clip_block(text: str, n: int = 1500) -> str:
    return text if len(text) <= n else text[:n] + f" … [{len(text) - n} more characters]"


# ---- `ifcore runs` and `ifcore compare`: what a folder of runs holds, and two of them compared ------------------

def _find_runs(paths) -> list[tuple[str, Path]]:
    """(kind, folder) for every training run ("train": config.json with an identity, beside metrics.jsonl) and
    every eval output ("eval": summary.json of `ifcore eval`) at or under the paths, in order, each once."""
    found = []
    for root in map(Path, paths):
        if not root.exists():
            raise ValueError(f"{root}: no such folder")
        for cfg in sorted([root / "config.json", *root.rglob("config.json")]):
            if cfg.is_file() and (cfg.parent / "metrics.jsonl").is_file() and "checkpoints" not in cfg.parts[-3:-1]:
                found.append(("train", cfg.parent))
        for summary in sorted([root / "summary.json", *root.rglob("summary.json")]):
            if summary.is_file():
                found.append(("eval", summary.parent))
    seen = set()
    return [(k, p) for k, p in found if not (p in seen or seen.add(p))]


def _train_run(path: Path) -> dict:
    """A training run's identity, arm, seed, progress, its last held-out evaluation and the code that ran it."""
    saved = json.loads((path / "config.json").read_text())
    identity = saved["identity"]
    rows = [r for r in read_jsonl(path / "metrics.jsonl", allow_empty=True)]
    done = max((r["step"] for r in rows if r.get("type") == "train"), default=0)
    last = next((r for r in reversed(rows) if r.get("type") == "eval"), {})
    sweep = path / "sweep.json"
    arm = json.loads(sweep.read_text())["arm"] if sweep.is_file() else None
    return {"path": path, "identity": identity, "arm": arm, "seed": identity["seed"], "code": saved.get("code"),
            "model": identity.get("model") or "tiny (warm start)",
            "status": "finished" if (path / "checkpoints" / f"step_{identity['steps']:06d}").is_dir()
            else f"step {done} of {identity['steps']}", "eval_step": last.get("step"),
            "eval_isr": last.get("eval_isr"), "eval_csr": last.get("eval_csr")}


_NOT_AN_ARM = {"seed", "output_dir"}  # what differs between the seeds of one arm
# The parameters `ifcore runs` shows for every run, whether or not they differ.
TRAIN_KEYS = ("reward", "steps", "lr", "prompts_per_step", "group_size")
EVAL_KEYS = ("max_new_tokens", "temperature", "limit")


def _differences(settings: list[dict]) -> list[str]:
    """Per run, the settings whose values differ among the runs (data and model hashes left out: they follow from
    the fields), as `key=value`."""
    keys = sorted({k for r in settings for k in r} - _NOT_AN_ARM)
    varying = [k for k in keys if not k.endswith("_sha256")
               and len({json.dumps(r.get(k), sort_keys=True) for r in settings}) > 1]
    return [" ".join(f"{k}={json.dumps(r.get(k))}" for k in varying) for r in settings]


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _eval_output(path: Path) -> dict:
    """An `ifcore eval` output: its benchmark, headline scores (fractions) over n items, the model and generation
    settings that made the responses (none for --responses), and the code that scored them."""
    summary = json.loads((path / "summary.json").read_text())
    benchmark = summary.get("benchmark", "scopeif" if "CSR" in summary else "?")
    if benchmark == "scopeif":
        scores, n = {"CSR": summary["CSR"], "ISR": summary["ISR"]}, summary["instances"]
    elif benchmark == "muldimif":
        scores = {"all-pass": summary["all"]["rate"], "macro": summary["macro"]["rate"],
                  "micro": summary["micro"]["rate"]}
        n = summary["items"]
    elif benchmark == "followbench":
        levels = summary["levels"].values()
        scores, n = {"HSR": _mean(x["HSR"] for x in levels), "SSR": _mean(x["SSR"] for x in levels)}, summary["answered"]
    else:
        scores = {"P-S": summary["strict"]["prompt_level"], "I-S": summary["strict"]["instruction_level"],
                  "P-L": summary["loose"]["prompt_level"], "I-L": summary["loose"]["instruction_level"]}
        n = summary["strict"]["prompts"]
    generation = summary.get("generation") or {}
    settings = {"benchmark": benchmark, "model": generation.get("model", "--responses"),
                **{k: v for k, v in generation.get("params", {}).items()},
                "limit": generation.get("prompts") if generation.get("subset_seed") is not None else None,
                **{k: summary[k] for k in ("mode", "letter_seed") if k in summary}}
    return {"path": path, "benchmark": benchmark, "n": n, "scores": scores, "settings": settings,
            "model": settings["model"], "code": summary.get("code")}


def _commit(code: dict | None) -> str:
    """A run's code as `ifcore runs` shows it: the short commit, `+dirty` with uncommitted changes."""
    if not code or not code.get("commit"):
        return "-"
    return code["commit"][:10] + ("+dirty" if code.get("dirty") else "")


def runs_table(paths):
    """`ifcore runs`: one row per training run and per eval output under `paths`: where, what (arm or benchmark),
    the model, seed, status, the key parameters, the headline metrics (training runs: the last held-out ISR and
    CSR, with its step; evals: the benchmark's own metrics over n items), the commit that ran it and the settings
    that differ among the training runs, and among the evals of each benchmark (the model, generation settings)."""
    import pandas as pd

    found = _find_runs(paths)
    train = [_train_run(p) for k, p in found if k == "train"]
    rows = [{"run": str(r["path"]), "kind": "train", "what": r["arm"] or r["identity"]["reward"],
             "model": r["model"], "seed": r["seed"], "status": r["status"],
             "parameters": " ".join(f"{k}={r['identity'][k]}" for k in TRAIN_KEYS if k in r["identity"]),
             "metrics": "no evaluation yet" if r["eval_step"] is None else
             f"held-out ISR {r['eval_isr']:.3f} CSR {r['eval_csr']:.3f} at step {r['eval_step']}",
             "commit": _commit(r["code"]), "differs in": d}
            for r, d in zip(train, _differences([r["identity"] for r in train]))]
    evals = [_eval_output(p) for k, p in found if k == "eval"]
    differs = {}  # among the evals of one benchmark: like compared with like
    for benchmark in {e["benchmark"] for e in evals}:
        group = [e for e in evals if e["benchmark"] == benchmark]
        differs.update(zip(map(id, group), _differences([e["settings"] for e in group])))
    for e, d in ((e, differs[id(e)]) for e in evals):
        rows.append({"run": str(e["path"]), "kind": "eval", "what": e["benchmark"], "model": e["model"],
                     "seed": e["settings"].get("seed", "-"), "status": "scored",
                     "parameters": " ".join(f"{k}={e['settings'][k]}" for k in EVAL_KEYS
                                            if e["settings"].get(k) is not None),
                     "metrics": " ".join(f"{m} {'n/a' if v is None else f'{100 * v:.2f} %'}"
                                         for m, v in e["scores"].items()) + f" over {e['n']}",
                     "commit": _commit(e["code"]), "differs in": d})
    return pd.DataFrame(rows, columns=["run", "kind", "what", "model", "seed", "status", "parameters", "metrics",
                                       "commit", "differs in"])


def _per_item(path: Path, benchmark: str) -> dict:
    """Item id -> (metric name -> (value, weight)) of one eval output, for paired comparisons over shared items."""
    out = {}
    if benchmark == "scopeif":
        for row in read_jsonl(path / "verdicts.jsonl"):
            known = [v["satisfied"] for v in row["verdicts"] if v["satisfied"] is not None]
            out[row["id"]] = {"CSR": (sum(known) / len(known), 1) if known else (None, 0),
                              "ISR": (float(all(known)), 1) if known and len(known) == len(row["verdicts"])
                              else (None, 0)}
        return out
    for mode, tag in (("strict", "S"), ("loose", "L")):
        for row in read_jsonl(path / f"eval_results_{mode}.jsonl"):
            follow = row["follow_instruction_list"]
            item = out.setdefault(row["prompt"], {})
            item[f"P-{tag}"] = (float(row["follow_all_instructions"]), 1)
            item[f"I-{tag}"] = (sum(follow) / len(follow), len(follow)) if follow else (None, 0)
    return out


def compare_runs(paths, level: float = 0.95, resamples: int = 10_000) -> list[str]:
    """`ifcore compare`: every other arm (or eval output) against the first one given, as the notebooks compare.

    Training runs are grouped into arms (their sweep arm, else the configuration fields that differ), paired by
    seed on the last held-out ISR and CSR and decided as one family (`decide`: paired t-test, Holm). Eval outputs
    of one benchmark are paired over the prompts (instances) both scored, with a percentile bootstrap
    (stats.paired_bootstrap; instruction-level rates weighted by each prompt's instruction count); the family is
    corrected with Bonferroni: each interval is at level 1 - (1 - level) / m, and a sign is decided only where it
    excludes 0."""
    found = _find_runs(paths)
    kinds = {k for k, _ in found}
    if not found:
        raise ValueError(f"no training run (config.json + metrics.jsonl) or eval output (summary.json) under "
                         f"{', '.join(map(str, paths))}")
    if len(kinds) > 1:
        raise ValueError("training runs and eval outputs cannot be compared with each other; give one kind")
    if kinds == {"train"}:
        runs = [_train_run(p) for _, p in found]
        for r, d in zip(runs, _differences([r["identity"] for r in runs])):
            r["arm"] = r["arm"] or d or "(same configuration)"
        arms = list(dict.fromkeys(r["arm"] for r in runs))
        if len(arms) < 2:
            raise ValueError(f"all {len(runs)} runs are one arm ({arms[0]}): nothing to compare")
        steps = {r["eval_step"] for r in runs}
        by = {a: {r["seed"]: r for r in runs if r["arm"] == a} for a in arms}
        lines = [f"{len(runs)} runs, {len(arms)} arms; baseline: {arms[0]}; the last held-out evaluation "
                 f"(step {', '.join(map(str, sorted(s for s in steps if s is not None))) or 'none'})."]
        comparisons = [(f"{m} {a} minus {arms[0]}", {s: r[m] for s, r in by[a].items()},
                        {s: r[m] for s, r in by[arms[0]].items()}) for a in arms[1:] for m in ("eval_csr", "eval_isr")]
        return lines + [family_note(len(comparisons), level)] + decide(comparisons, level)
    evals = [_eval_output(p) for _, p in found]
    if len({e["benchmark"] for e in evals}) > 1:
        raise ValueError(f"eval outputs of different benchmarks: {sorted({e['benchmark'] for e in evals})}")
    if len(evals) < 2:
        raise ValueError("one eval output: nothing to compare")
    items = [_per_item(e["path"], e["benchmark"]) for e in evals]
    metrics = list(evals[0]["scores"])
    m = (len(evals) - 1) * len(metrics)
    corrected = 1 - (1 - level) / m
    lines = [f"{len(evals)} {evals[0]['benchmark']} outputs; baseline: {evals[0]['path']}. Paired over the items both "
             f"scored; {m} comparisons, each interval at {_pct(corrected)} (Bonferroni), so that all hold together "
             f"at {_pct(level)}; a sign is decided only where its interval excludes 0."]
    for e, mine in zip(evals[1:], items[1:]):
        shared = [k for k in items[0] if k in mine]
        for metric in metrics:
            a = [mine[k][metric][0] for k in shared]
            b = [items[0][k][metric][0] for k in shared]
            w = [mine[k][metric][1] if mine[k][metric][0] is not None and items[0][k][metric][0] is not None else 0
                 for k in shared]
            diff, lo, hi, n = stats.paired_bootstrap(a, b, w, corrected, resamples)
            what = f"{metric} {e['path']} minus baseline"
            if n < 2:
                lines.append(f"{what}: {n} shared items, nothing can be decided.")
                continue
            verdict = ("positive" if lo > 0 else "negative") if lo > 0 or hi < 0 else "its sign is not decided"
            lines.append(f"{what} = {100 * diff:+.2f} points ({_pct(corrected)} paired bootstrap CI "
                         f"{100 * lo:+.2f} to {100 * hi:+.2f}, {n} items): {verdict}.")
    return lines


# ---- the primary question ------------------------------------------------------------------------------------------



def show_primary(result: dict) -> None:
    """Display the primary result as Markdown, with the data itself beside it (PRIMARY_MIME) for `ifcore report`,
    which records it in the rendering's metadata (ifcore.primary) and leads the notebook's card with it."""
    from IPython.display import display

    display({"text/markdown": primary_markdown(result), PRIMARY_MIME: result}, raw=True)
