"""Confidence intervals over seeds, behind the conclusions the notebooks print.

A training notebook affords a handful of seeds, so the intervals are Student-t intervals of the mean: exact when
seed-to-seed noise is normal, and honest about how wide three seeds leave them (t = 4.30 at 95 % with two
degrees of freedom). A percentile bootstrap of three values has ten distinct resamples and covers far less than
its nominal level, so it is not offered. Arms trained with the same seeds share the warm start, the data order
and the evaluation draws of each seed; differences between them are taken seed by seed (paired), which removes
that shared noise.

scipy is imported inside the functions (it comes with the notebooks extra); the core never needs it.
"""
from __future__ import annotations

import math

import numpy as np


def mean_ci(values, level: float = 0.95, bounds: tuple[float, float] | None = None) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n): the mean of the finite values and its two-sided Student-t interval,
    mean -/+ t_{(1 + level) / 2, n - 1} * s / sqrt(n), with s the sample standard deviation (ddof = 1).
    `bounds` (a, b): the range the quantity cannot leave (a rate: (0, 1)); the interval is intersected with it,
    which loses no coverage since the true mean lies there.

    None, NaN and infinite values are dropped; n counts the values kept. With n = 1 no spread can be estimated:
    lo and hi are NaN. With n = 0 the mean is NaN too."""
    if not 0 < level < 1:
        raise ValueError(f"level={level!r}: a confidence level lies strictly between 0 and 1")
    x = np.array([np.nan if v is None else v for v in values], dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(x.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    from scipy.stats import t

    half = float(t.ppf((1 + level) / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return mean, lo, hi, n


def paired_diff_ci(a_by_seed, b_by_seed, level: float = 0.95) -> tuple[float, float, float, int]:
    """mean_ci of a[seed] - b[seed] over the seeds both have (mappings or pandas Series indexed by seed).

    A seed whose value is missing, None or NaN in either is left out; n counts the pairs kept."""
    a, b = dict(a_by_seed), dict(b_by_seed)
    shared = [s for s in a if s in b]
    diffs = [np.nan if a[s] is None or b[s] is None else float(a[s]) - float(b[s]) for s in shared]
    return mean_ci(diffs, level)


def paired_bootstrap(a, b, weights=None, level: float = 0.95, resamples: int = 10_000,
                     seed: int = 0, with_p: bool = False) -> tuple:
    """(diff, lo, hi, n): the weighted mean of a minus that of b over paired items (prompts) and a percentile
    bootstrap interval, the items resampled with replacement, pairs kept together, `resamples` times from
    numpy's default_rng(seed). `with_p`: also the two-sided p-value of that interval's inversion, twice the
    smaller share of resampled differences on either side of 0 (at most 1; NaN without an interval): below
    1 - level where the interval excludes 0 (up to the quantiles' interpolation), and `holm` corrects a family.

    `a`, `b` (and `weights`) are aligned sequences, one value per item (pandas Series are aligned by position);
    a weighted mean is sum(w x) / sum(w), so per-prompt shares weighted by their instruction counts give the
    instruction-level rate. An item missing (None, NaN) in a or b, or weighing 0, is left out; n counts the
    items kept. With n = 0 everything is NaN; with n = 1 no spread can be estimated: lo and hi are NaN. Over few
    items a percentile bootstrap covers less than its nominal level, as over few
    seeds; callers leave such items undecided."""
    if not 0 < level < 1:
        raise ValueError(f"level={level!r}: a confidence level lies strictly between 0 and 1")
    if resamples < 1:
        raise ValueError(f"resamples={resamples!r}: at least 1")
    x = np.array([np.nan if v is None else v for v in a], dtype=float)
    y = np.array([np.nan if v is None else v for v in b], dtype=float)
    w = np.ones(len(x)) if weights is None else np.array([np.nan if v is None else v for v in weights], dtype=float)
    if not len(x) == len(y) == len(w):
        raise ValueError(f"paired values differ in length: {len(x)}, {len(y)}, {len(w)} weights")
    keep = np.isfinite(x) & np.isfinite(y) & np.isfinite(w) & (w > 0)
    x, y, w = x[keep], y[keep], w[keep]
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0) + ((math.nan,) if with_p else ())
    diff = float((w * x).sum() / w.sum() - (w * y).sum() / w.sum())
    if n == 1:
        return (diff, math.nan, math.nan, 1) + ((math.nan,) if with_p else ())
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    for start in range(0, resamples, 1000):  # chunks: a resample matrix of all prompts stays small
        counts = rng.multinomial(n, np.full(n, 1 / n), size=min(1000, resamples - start)) * w
        draws[start:start + len(counts)] = (counts @ (x - y)) / counts.sum(axis=1)
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    if not with_p:
        return diff, float(lo), float(hi), n
    return diff, float(lo), float(hi), n, float(min(1.0, 2 * min((draws <= 0).mean(), (draws >= 0).mean())))


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float, float, int]:
    """(k / n, lo, hi, n): a proportion and its Wilson score interval, which stays inside [0, 1] and keeps its
    coverage at the extremes (9 of 9 correct is not "100 % +/- 0"). n = 0 gives NaN throughout."""
    if not 0 < level < 1:
        raise ValueError(f"level={level!r}: a confidence level lies strictly between 0 and 1")
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    from statistics import NormalDist

    z = NormalDist().inv_cdf((1 + level) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half), n


def paired_t(a_by_seed, b_by_seed, level: float = 0.95) -> tuple[float, float, float, int, float]:
    """(mean, lo, hi, n, p): paired_diff_ci of a - b and the two-sided p-value of the paired t-test of a mean
    difference of 0 (the test that interval inverts: p < 1 - level exactly when the interval excludes 0).
    p is NaN where no spread can be estimated (n < 2); 0 when every difference is the same non-zero value, 1
    when every difference is 0."""
    mean, lo, hi, n = paired_diff_ci(a_by_seed, b_by_seed, level)
    if n < 2:
        return mean, lo, hi, n, math.nan
    if lo == hi:  # no spread at all: the t statistic is infinite (or 0/0 when every difference is 0)
        return mean, lo, hi, n, 1.0 if mean == 0 else 0.0
    from scipy.stats import t

    se = (hi - mean) / float(t.ppf((1 + level) / 2, n - 1))
    return mean, lo, hi, n, float(2 * t.sf(abs(mean) / se, n - 1))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979) for one family of comparisons, in the given order:
    the i-th smallest of m p-values is multiplied by m - i + 1, then made non-decreasing along that order and
    capped at 1. Rejecting where the adjusted p is below a level controls the family-wise error rate at that level
    under any dependence. NaN (a comparison that tests nothing) stays NaN and does not count in m."""
    p = np.array([np.nan if v is None else v for v in pvalues], dtype=float)
    finite = np.flatnonzero(np.isfinite(p))
    out = np.full(len(p), np.nan)
    m, running = len(finite), 0.0
    for rank, i in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return [float(v) for v in out]


# ---- a notebook's pre-registered primary question: power, the three-valued verdict ----------------------------------

FOUND, EQUIVALENT, UNDECIDED = "effect found", "no effect as large as the smallest of interest", "undecided"


def _over_sample_sd(prob, n: int, top: float = math.inf) -> float:
    """The mean of prob(x) over x = (n-1) s^2 / sd^2 ~ chi2_{n-1} (the sample sd of n pairs), up to `top`: both
    powers below integrate a normal probability given s so. quad stops where s^2's mass ends (a long empty tail
    would hide the peak from it), with the peak marked."""
    from scipy import integrate
    from scipy.stats import chi2

    top = min(top, chi2.isf(1e-14, n - 1))
    return float(integrate.quad(lambda x: prob(x) * chi2.pdf(x, n - 1), 0, top, points=[min(n - 1, top / 2)],
                                limit=200)[0])


def paired_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level `alpha` to find a mean difference `effect` over n pairs whose
    differences have standard deviation `sd` (statsmodels' TTestPower, the noncentral t)."""
    from statsmodels.stats.power import TTestPower

    if n < 2 or sd <= 0:
        raise ValueError(f"paired_power: needs n >= 2 and sd > 0, got n={n}, sd={sd}")
    power = float(TTestPower().power(effect_size=abs(effect) / sd, nobs=n, alpha=alpha, alternative="two-sided"))
    if math.isnan(power):  # the noncentral t (statsmodels', scipy's) fails past a noncentrality of about 10
        from scipy.stats import norm, t

        q, se, d = float(t.ppf(1 - alpha / 2, n - 1)), sd / math.sqrt(n), abs(effect)

        def found(x: float) -> float:  # |mean| > q s / sqrt(n)
            cut = q * sd * math.sqrt(x / (n - 1)) / math.sqrt(n)
            return norm.sf((cut - d) / se) + norm.cdf((-cut - d) / se)

        power = _over_sample_sd(found, n)
    return power


def equivalence_power(margin: float, sd: float, n: int, alpha: float = 0.05, true: float = 0.0) -> float:
    """Power of TOST (two one-sided t-tests at `alpha`, i.e. the 1 - 2 alpha t-interval inside +-margin) over n
    pairs of difference sd `sd` when the true mean difference is `true`. statsmodels tests TOST but has no power for
    it, so this integrates over the sample standard deviation s (s^2 ~ sd^2 chi2_{n-1} / (n-1)): the interval
    mean -/+ t s / sqrt(n) lies inside +-margin iff the sample mean is within margin - t s / sqrt(n) of 0."""
    from scipy.stats import norm, t

    if n < 2 or sd <= 0 or margin <= 0:
        raise ValueError(f"equivalence_power: needs n >= 2, sd > 0 and margin > 0, got n={n}, sd={sd}, "
                         f"margin={margin}")
    q, se = float(t.ppf(1 - alpha, n - 1)), sd / math.sqrt(n)

    def inside(x: float) -> float:
        half = margin - q * sd * math.sqrt(x / (n - 1)) / math.sqrt(n)
        return norm.cdf((half - true) / se) - norm.cdf((-half - true) / se) if half > 0 else 0.0

    # beyond top the interval is wider than 2 margin
    return _over_sample_sd(inside, n, top=(n - 1) * (margin * math.sqrt(n) / (q * sd)) ** 2)


def seeds_for_power(sesoi: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                    max_seeds: int = 200) -> dict:
    """The fewest seeds (paired differences) with which a primary question is decided, the same way on any machine,
    with probability at least `power` wherever the true difference lies: the paired t-test finds a true difference
    of `sesoi` (the smallest effect of interest); TOST excludes an effect that large when the true difference is 0,
    and when it is sesoi / 2 (halfway: both verdicts' intervals can then hold, and `primary_verdict` gives such an
    effect "no effect as large as the smallest of interest"; a design powered only at 0 and sesoi decides an
    effect halfway by a coin flip, as two machines' runs of 2026-12-07 did). `sd`: the standard deviation of the
    paired differences, from a pilot. {"seeds", "power_found", "power_equivalence", "power_halfway"}; ValueError
    past max_seeds."""
    if sesoi <= 0 or sd <= 0 or not 0 < alpha < 0.5 or not 0 < power < 1:
        raise ValueError(f"seeds_for_power: needs sesoi > 0, sd > 0, 0 < alpha < 0.5 and 0 < power < 1, got "
                         f"sesoi={sesoi}, sd={sd}, alpha={alpha}, power={power}")

    def plan(n: int) -> dict:
        return {"seeds": n, "power_found": paired_power(sesoi, sd, n, alpha),
                "power_equivalence": equivalence_power(sesoi, sd, n, alpha),
                "power_halfway": equivalence_power(sesoi, sd, n, alpha, true=sesoi / 2)}

    def enough(p: dict) -> bool:
        return min(p["power_found"], p["power_equivalence"], p["power_halfway"]) >= power

    # each power grows with n: double to a count that is enough, then bisect (a few dozen integrals, not hundreds)
    lo, hi = 1, 2  # lo: a count known to fall short (1 decides nothing)
    while not enough(plan(hi)):
        if hi >= max_seeds:
            raise ValueError(f"seeds_for_power: more than {max_seeds} seeds are needed to decide a difference of "
                             f"{sesoi} against a seed-to-seed sd of {sd} (a larger smallest effect, or less noise)")
        lo, hi = hi, min(2 * hi, max_seeds)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(plan(mid)) else (mid, hi)
    return plan(hi)


def primary_verdict(diffs, sesoi: float, alpha: float = 0.05) -> dict:
    """The three-valued verdict of a primary question from its paired differences (one per seed, arm minus
    comparator; None/NaN dropped): "effect found" where the two-sided 1 - alpha t-interval excludes 0 (the paired
    t-test, p < alpha); "no effect as large as the smallest of interest" where TOST at alpha excludes +-sesoi (the
    1 - 2 alpha interval lies inside it); "undecided" otherwise (always with fewer than 2 differences: no spread,
    the intervals NaN). Only the first two decide. Where both intervals hold (an effect other than 0 but smaller
    than the smallest of interest: Lakens, Scheel & Isager 2018's "statistically different and equivalent") the
    verdict answers the registered question, whether an effect as large as sesoi exists: "no effect as large as
    the smallest of interest", with `below_sesoi` true and its direction kept.

    Returns plain data (a rendering's metadata): estimate, ci_lo, ci_hi (1 - alpha), tost_lo, tost_hi (1 - 2 alpha),
    p (t-test), p_tost, n, sd, verdict, direction (positive / negative / None), below_sesoi."""
    from statsmodels.stats.weightstats import DescrStatsW

    x = np.array([np.nan if v is None else v for v in diffs], dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if sesoi <= 0:
        raise ValueError(f"primary_verdict: sesoi must be > 0, got {sesoi}")
    if n < 2:  # no spread can be estimated: nothing is decided
        nan = math.nan
        return {"estimate": float(x.mean()) if n else nan, "ci_lo": nan, "ci_hi": nan, "tost_lo": nan, "tost_hi": nan,
                "p": nan, "p_tost": nan, "n": n, "sd": nan, "alpha": alpha, "sesoi": sesoi, "verdict": UNDECIDED,
                "direction": None, "below_sesoi": False}
    d = DescrStatsW(x)
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if sd == 0:  # no spread: the t statistics are infinite, the intervals points
        p = 1.0 if mean == 0 else 0.0
        p_tost = 0.0 if abs(mean) < sesoi else 1.0
        (lo, hi), (tlo, thi) = (mean, mean), (mean, mean)
    else:
        p = float(d.ttest_mean(0.0)[1])
        p_tost = float(d.ttost_mean(-sesoi, sesoi)[0])
        lo, hi = (float(v) for v in d.tconfint_mean(alpha))
        tlo, thi = (float(v) for v in d.tconfint_mean(2 * alpha))
    found, equivalent = p < alpha, p_tost < alpha
    return {"estimate": mean, "ci_lo": lo, "ci_hi": hi, "tost_lo": tlo, "tost_hi": thi, "p": p, "p_tost": p_tost,
            "n": n, "sd": sd, "alpha": alpha, "sesoi": sesoi,
            "verdict": EQUIVALENT if equivalent else FOUND if found else UNDECIDED,
            "direction": ("positive" if mean > 0 else "negative") if found else None,
            "below_sesoi": bool(found and equivalent)}


def primary_result(question: dict, diffs, pilot: dict, power: float = 0.8) -> dict:
    """A notebook's primary result as plain data (its rendering's metadata `ifcore.primary`, the report's card):
    `question` as registered before the run (question, endpoint, comparison, sesoi, alpha), the design
    (`pilot`: {"sd", "n", "source"}, the paired differences' sd from a pilot and where it came from;
    planned_seeds, `seeds_for_power`'s count for `power`), and `primary_verdict` of the paired differences `diffs`
    (one per seed), with the power those seeds had at the pilot's sd. Numbers that do not exist (the intervals of
    a single seed) are None."""
    missing = [k for k in ("question", "endpoint", "comparison", "sesoi", "alpha") if k not in question]
    if missing:
        raise ValueError(f"primary_result: the question lacks {', '.join(missing)}")
    sesoi, alpha = float(question["sesoi"]), float(question["alpha"])
    sd = float(pilot["sd"])
    plan = seeds_for_power(sesoi, sd, alpha, power)
    verdict = primary_verdict(diffs, sesoi, alpha)
    n = verdict["n"]
    out = {**question, "pilot": dict(pilot), "power": power, "planned_seeds": plan["seeds"], "seeds": n,
           "power_found": paired_power(sesoi, sd, n, alpha) if n >= 2 else 0.0,
           "power_equivalence": equivalence_power(sesoi, sd, n, alpha) if n >= 2 else 0.0,
           "power_halfway": equivalence_power(sesoi, sd, n, alpha, true=sesoi / 2) if n >= 2 else 0.0,
           **verdict}
    # JSON data (a rendering's metadata): a number that does not exist (no interval from one seed) is null
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in out.items()}
