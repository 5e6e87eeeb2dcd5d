"""ifcore.stats: Student-t intervals over seeds, against closed forms, scipy's t distribution and properties."""
import math

import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st

from ifcore.stats import mean_ci, paired_diff_ci

values = st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30)
levels = st.floats(0.5, 0.999)


def test_two_and_three_seeds_match_the_closed_form_t_quantiles():
    # df = 1 is the Cauchy distribution: t_p = tan(pi (p - 1/2)); df = 2: t_p = (2p - 1) / sqrt(2 p (1 - p)).
    mean, lo, hi, n = mean_ci([0.5, 0.7], level=0.9)
    half = math.tan(math.pi * (0.95 - 0.5)) * (0.2 / math.sqrt(2)) / math.sqrt(2)
    assert n == 2 and mean == pytest.approx(0.6) and (lo, hi) == pytest.approx((0.6 - half, 0.6 + half))
    mean, lo, hi, n = mean_ci([1.0, 2.0, 3.0])  # s = 1
    half = (2 * 0.975 - 1) / math.sqrt(2 * 0.975 * 0.025) / math.sqrt(3)
    assert (mean, n) == (2.0, 3) and (lo, hi) == pytest.approx((2 - half, 2 + half), rel=1e-12)


@given(values, levels)
def test_agrees_with_scipy_t_interval(xs, level):
    mean, lo, hi, n = mean_ci(xs, level)
    sem = scipy.stats.sem(xs)
    if sem == 0:
        assert lo == hi == mean
        return
    expected = scipy.stats.t.interval(level, len(xs) - 1, loc=sum(xs) / len(xs), scale=sem)
    assert n == len(xs)
    assert (lo, hi) == pytest.approx(expected, rel=1e-9, abs=1e-6)


@given(values, levels)
def test_the_interval_contains_the_mean(xs, level):
    mean, lo, hi, _ = mean_ci(xs, level)
    assert lo <= mean <= hi


@given(values, levels, levels)
def test_a_higher_level_gives_a_wider_interval(xs, a, b):
    a, b = sorted((a, b))
    _, lo_a, hi_a, _ = mean_ci(xs, a)
    _, lo_b, hi_b, _ = mean_ci(xs, b)
    assert hi_b - lo_b >= (hi_a - lo_a) * (1 - 1e-12)


@given(values, st.floats(-1e3, 1e3))
def test_shifting_the_values_shifts_the_interval(xs, c):
    mean, lo, hi, n = mean_ci(xs)
    assert mean_ci([x + c for x in xs]) == pytest.approx((mean + c, lo + c, hi + c, n), abs=1e-6)


@given(st.floats(-1e6, 1e6), levels)
def test_one_seed_gives_a_mean_and_no_interval(x, level):
    mean, lo, hi, n = mean_ci([x], level)
    assert (mean, n) == (x, 1) and math.isnan(lo) and math.isnan(hi)


def test_missing_values_are_dropped_and_counted_out():
    assert mean_ci([1.0, float("nan"), None, 2.0, 3.0, float("inf")]) == mean_ci([1.0, 2.0, 3.0])
    mean, lo, hi, n = mean_ci([None, float("nan")])
    assert n == 0 and all(math.isnan(v) for v in (mean, lo, hi))
    assert mean_ci([])[3] == 0


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, float("nan")])
def test_a_level_outside_zero_one_is_refused(level):
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level)


def test_differences_are_paired_by_seed_not_by_position():
    # Seed 2's run is good under both arms: the seed effect cancels in each pair, so the paired interval is
    # tight around +0.1, whereas the arms' own intervals overlap widely.
    a = {0: 0.60, 1: 0.70, 2: 0.90}
    b = {2: 0.80, 0: 0.50, 1: 0.60}
    mean, lo, hi, n = paired_diff_ci(a, b)
    assert n == 3 and mean == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    _, a_lo, a_hi, _ = mean_ci(a.values())
    _, b_lo, b_hi, _ = mean_ci(b.values())
    assert a_lo < b_hi  # unpaired, the arms cannot be told apart


def test_only_seeds_both_arms_have_count():
    pd = pytest.importorskip("pandas")
    a = pd.Series({0: 0.5, 1: 0.7, 2: float("nan"), 3: 0.9})
    b = {0: 0.4, 1: 0.5, 2: 0.6, 4: 0.1}
    assert paired_diff_ci(a, b) == pytest.approx(mean_ci([0.1, 0.2]))
    assert paired_diff_ci({0: 1.0}, {1: 1.0})[3] == 0
    mean, lo, hi, n = paired_diff_ci({0: 0.7}, {0: 0.5})
    assert n == 1 and mean == pytest.approx(0.2) and math.isnan(lo) and math.isnan(hi)


@given(st.dictionaries(st.integers(0, 20), st.floats(-1, 1), min_size=2),
       st.dictionaries(st.integers(0, 20), st.floats(-1, 1), min_size=2))
def test_swapping_the_arms_mirrors_the_interval(a, b):
    mean, lo, hi, n = paired_diff_ci(a, b)
    assert paired_diff_ci(b, a) == pytest.approx((-mean, -hi, -lo, n), abs=1e-12, nan_ok=True)


def test_an_interval_of_a_rate_stays_in_its_range():
    mean, lo, hi, n = mean_ci([0.98, 1.0, 0.9])
    assert hi > 1.0  # the plain t-interval leaves [0, 1]
    assert mean_ci([0.98, 1.0, 0.9], bounds=(0, 1)) == (mean, lo, 1.0, n)
    assert mean_ci([0.0, 0.05, 0.01], bounds=(0, 1))[1] == 0.0


# ---- the primary question: power, TOST, the three-valued verdict --------------------------------------------------

import numpy as np
from hypothesis import settings

from ifcore import stats


@settings(max_examples=8, deadline=None)
@given(st.floats(0.01, 0.2), st.floats(0.5, 2.0), st.sampled_from([0.05, 0.1]), st.integers(0, 2**31))
def test_the_chosen_seed_count_reaches_the_stated_power_on_simulated_data(sd, ratio, alpha, seed):
    # Simulated experiments with the pilot's variance, decided by primary_verdict's rule: at a true difference of
    # sesoi the verdict is "effect found", at 0 and at sesoi / 2 "no effect as large as the smallest of interest",
    # each at least `power` of the time (4,000 experiments: Monte Carlo sd 0.0063 at 0.8); one seed fewer falls
    # short of one of the three (the count is the smallest).
    sesoi, power, sims = sd * ratio, 0.8, 4000
    plan = stats.seeds_for_power(sesoi, sd, alpha, power)
    n = plan["seeds"]
    rng = np.random.default_rng(seed)
    for true, key in ((sesoi, "power_found"), (0.0, "power_equivalence"), (sesoi / 2, "power_halfway")):
        x = rng.normal(true, sd, size=(sims, n))
        mean, se = x.mean(1), x.std(1, ddof=1) / math.sqrt(n)
        found = np.abs(mean / se) > scipy.stats.t.ppf(1 - alpha / 2, n - 1)
        half = scipy.stats.t.ppf(1 - alpha, n - 1) * se
        equivalent = (mean - half > -sesoi) & (mean + half < sesoi)
        hit = (found & ~equivalent) if key == "power_found" else equivalent
        # found & ~equivalent: at most alpha below the t-test's power (TOST's size at the margin)
        assert hit.mean() >= power - 0.03 - (alpha if key == "power_found" else 0)
        assert hit.mean() == pytest.approx(plan[key], abs=0.03 + (alpha if key == "power_found" else 0))
    if n > 2:
        fewer = (stats.paired_power(sesoi, sd, n - 1, alpha), stats.equivalence_power(sesoi, sd, n - 1, alpha),
                 stats.equivalence_power(sesoi, sd, n - 1, alpha, true=sesoi / 2))
        assert min(fewer) < power


def test_power_is_a_number_where_the_noncentral_t_fails():
    # statsmodels' (and scipy's) noncentral t returns NaN past a noncentrality of about 10: a precise pilot (sd a
    # fifth of sesoi) must still get a plan, not a NaN that is never "enough"
    powers = [stats.paired_power(0.03, 0.0057, n) for n in (2, 3, 4, 8, 43)]
    assert all(math.isfinite(p) for p in powers) and powers == sorted(powers) and powers[-1] > 0.999999
    assert stats.paired_power(0.03, 0.0057, 3) == pytest.approx(0.98347, abs=1e-4)  # statsmodels' own, where it works
    assert stats.seeds_for_power(0.03, 0.0033)["seeds"] == 3


def test_power_agrees_with_the_normal_approximation_for_many_seeds():
    # For large n the paired t-test's power tends to Phi(d sqrt(n) - z_{1-alpha/2}); TOST's to 2 Phi(...) - 1.
    d, n = 0.5, 200
    z = scipy.stats.norm.ppf(0.975)
    assert stats.paired_power(0.5, 1.0, n) == pytest.approx(scipy.stats.norm.cdf(d * math.sqrt(n) - z), abs=2e-3)
    approx = 2 * scipy.stats.norm.cdf(d * math.sqrt(n) - scipy.stats.norm.ppf(0.95)) - 1
    assert stats.equivalence_power(0.5, 1.0, n) == pytest.approx(approx, abs=2e-3)


def test_the_verdict_has_three_values_and_only_two_decide():
    found = stats.primary_verdict([0.05, 0.04, 0.06, 0.05, 0.045], sesoi=0.03)
    assert found["verdict"] == stats.FOUND and found["direction"] == "positive" and found["ci_lo"] > 0
    assert found["p"] < 0.05 and not found["below_sesoi"]
    worse = stats.primary_verdict([-0.05, -0.04, -0.06, -0.05], sesoi=0.03)
    assert worse["verdict"] == stats.FOUND and worse["direction"] == "negative"
    null = stats.primary_verdict([0.002, -0.003, 0.001, 0.0, -0.001, 0.002], sesoi=0.03)
    assert null["verdict"] == stats.EQUIVALENT and -0.03 < null["tost_lo"] < null["tost_hi"] < 0.03
    assert null["p_tost"] < 0.05 and null["direction"] is None
    noisy = stats.primary_verdict([0.1, -0.08, 0.05, -0.02], sesoi=0.03)
    assert noisy["verdict"] == stats.UNDECIDED
    # different from 0 and equivalent (Lakens et al. 2018): the registered question, an effect as large as sesoi, is
    # answered no; the direction stays
    tiny = stats.primary_verdict([0.011, 0.01, 0.009, 0.0105, 0.0095, 0.01], sesoi=0.03)
    assert tiny["verdict"] == stats.EQUIVALENT and tiny["below_sesoi"] and tiny["direction"] == "positive"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=20), st.floats(0.01, 1), st.sampled_from([0.01, 0.05, 0.1]))
def test_the_verdict_follows_its_intervals(xs, sesoi, alpha):
    v = stats.primary_verdict(xs, sesoi, alpha)
    assert v["ci_lo"] <= v["tost_lo"] <= v["estimate"] <= v["tost_hi"] <= v["ci_hi"]
    excludes_zero = v["ci_lo"] > 0 or v["ci_hi"] < 0
    inside = -sesoi < v["tost_lo"] and v["tost_hi"] < sesoi
    if v["sd"] > 1e-9 * max(1.0, abs(v["estimate"])):  # away from float-noise spreads the tests invert the intervals
        assert (v["verdict"] == stats.EQUIVALENT) == inside or abs(v["p_tost"] - alpha) < 1e-9
        if not inside:
            assert (v["verdict"] == stats.FOUND) == excludes_zero or abs(v["p"] - alpha) < 1e-9
        assert v["below_sesoi"] == (v["verdict"] == stats.EQUIVALENT and v["direction"] is not None)


def test_bad_primary_input_names_what_is_wrong():
    one = stats.primary_verdict([0.1, None, float("nan")], 0.03)  # one seed: no spread, nothing decided
    assert one["verdict"] == stats.UNDECIDED and one["n"] == 1 and math.isnan(one["ci_lo"])
    with pytest.raises(ValueError, match="sesoi must be > 0"):
        stats.primary_verdict([0.1, 0.2], 0)
    with pytest.raises(ValueError, match="more than 5 seeds"):
        stats.seeds_for_power(0.001, 1.0, max_seeds=5)
