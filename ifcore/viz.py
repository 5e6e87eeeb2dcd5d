"""Tables, HTML and figures for the notebooks, so that the notebooks themselves hold no logic.

pandas and matplotlib are imported inside the functions: the core never needs them.
"""
from __future__ import annotations

import html
from pathlib import Path

from ifcore import rewards
from ifcore.schema import Constraint, scope_selector

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
        ax.set_yticks(list(y), [f"{k} (n={cov[g][k]['n']})" for k in names])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
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


ARM_LABELS = {"ila": "RL-ILA", "cla": "RL-CLA", "scopeif": "ScopeIF", "scopeif_flat": "ScopeIF wo HRA",
              "raif": "RAIF"}


def _arm_colour(i: int) -> str:
    return PALETTE[(i + 4) % len(PALETTE)] if i < 4 else PALETTE[i % len(PALETTE)]


def curves(ax, df, metric: str, row_type: str = "eval", arms=None):
    """metric against step for each arm: the mean over seeds and the band between the lowest and highest seed."""
    rows = df[(df["type"] == row_type) & df[metric].notna()]
    for i, arm in enumerate(arms or sorted(rows["arm"].unique())):
        g = rows[rows["arm"] == arm].groupby("step")[metric]
        mean, lo, hi = g.mean(), g.min(), g.max()
        colour = _arm_colour(i)
        ax.plot(mean.index, mean.values, color=colour, label=f"{ARM_LABELS.get(arm, arm)} (n={g.count().max()})")
        ax.fill_between(mean.index, lo.values, hi.values, color=colour, alpha=0.15, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(metric.replace("_", " "))


def final_bars(ax, df, metrics: list[str], arms=None, labels=None):
    """Each arm's value of each metric at its last evaluation: mean over seeds, with the seeds as dots."""
    import numpy as np

    ev = df[df["type"] == "eval"]
    last = ev[ev["step"] == ev.groupby(["arm", "seed"])["step"].transform("max")]
    arms = arms or sorted(last["arm"].unique())
    width = 0.8 / len(arms)
    x = np.arange(len(metrics))
    for i, arm in enumerate(arms):
        sub = last[last["arm"] == arm]
        means = [sub[m].mean() for m in metrics]
        ax.bar(x + i * width, means, width, color=_arm_colour(i), label=ARM_LABELS.get(arm, arm))
        for j, m in enumerate(metrics):
            ax.scatter(np.full(len(sub), x[j] + i * width), sub[m], color="black", s=6, zorder=3)
    ax.set_xticks(x + width * (len(arms) - 1) / 2, labels or metrics)


def distributions(ax, values_by_arm: dict, bins=30, xlabel: str = "reward"):
    """Histograms (as step outlines) of per-rollout values, one per arm."""
    for i, (arm, values) in enumerate(values_by_arm.items()):
        ax.hist(values, bins=bins, histtype="step", density=True, linewidth=1.5, color=_arm_colour(i),
                label=ARM_LABELS.get(arm, arm))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
