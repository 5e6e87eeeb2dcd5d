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
