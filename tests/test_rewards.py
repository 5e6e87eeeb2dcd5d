"""ifcore.rewards: every formula against values worked by hand from the papers, and its properties."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ifcore import rewards
from ifcore.schema import Constraint
from ifcore.verify import Record, Verdict

E = math.exp


# ---- graded(), ScopeIF eq. 5, 8, 9 -------------------------------------------------------------------------

@pytest.mark.parametrize("lo,hi,actual,alpha,expected", [
    (2, 3, 2, 3.0, 1.0),                 # inside: d = 0
    (2, 3, 1, 3.0, E(-3 * 1 / 2.5)),     # s = (2 + 3) / 2
    (None, 4, 6, 3.0, E(-3 * 2 / 2)),    # lo = -inf counts as 0 in s: (0 + 4) / 2
    (0, 0, 1, 3.0, E(-3)),               # prohibition: s = max(1, 0)
    (15, None, 2, 3.0, E(-3 * 13 / 15)),  # hi = +inf: s = max(1, lo)
    (80, 120, 60, 3.0, E(-3 * 20 / 100)),
    (10, None, 4, 3.0, E(-3 * 6 / 10)),
    (None, 10, 15, 3.0, E(-3 * 5 / 5)),
    (-5, -1, 1, 3.0, E(-3 * 2 / 1)),     # negative bounds clip to 0 in s
    (0, 0, 2, 1.0, E(-2)),               # alpha scales the penalty
    (1, None, None, 3.0, 0.0),           # a missing segment
    (2, 2, 2.0, 3.0, 1.0),
])
def test_graded_by_hand(lo, hi, actual, alpha, expected):
    assert rewards.graded(lo, hi, actual, alpha) == pytest.approx(expected, rel=1e-12)


# The spec's examples E2-E7: their records, and g = the geometric mean (eq. 6) through Verdict.graded.
SPEC_RECORDS = [
    ([(2, 3, 2), (2, 3, 3), (2, 3, 1)], 0.670320),
    ([(None, 4, 6), (None, 4, 4), (None, 4, 2)], 0.367879),
    ([(0, 0, 1)], 0.049787),
    ([(None, 5, 4), (None, 5, 6)], 0.548812),
    ([(11, None, 14), (15, None, 2)], 0.272532),
    ([(2, 2, 3)], 0.223130),
    ([(1, None, None)], 0.0),
]


@pytest.mark.parametrize("records,g", SPEC_RECORDS)
def test_verdict_graded_is_the_geometric_mean(records, g):
    verdict = Verdict(False, [Record(lo, hi, a, (0, 1)) for lo, hi, a in records])
    assert verdict.graded(3.0) == pytest.approx(g, abs=5e-7)
    r = [rewards.graded(lo, hi, a) for lo, hi, a in records]
    assert verdict.graded(3.0) == pytest.approx(float(np.prod(r)) ** (1 / len(r)), abs=1e-12)


bound = st.one_of(st.none(), st.integers(-50, 500))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(bound, bound, st.one_of(st.none(), st.integers(-50, 500)))
                .filter(lambda t: t[0] is None or t[1] is None or t[0] <= t[1]), min_size=1, max_size=20),
       st.floats(0.1, 10))
def test_graded_batch_matches_scalar_and_properties(rows, alpha):
    lo, hi, actual = zip(*rows)
    batch = rewards.graded(list(lo), list(hi), list(actual), alpha)
    for (l, h, a), b in zip(rows, batch):
        r = rewards.graded(l, h, a, alpha)
        assert b == pytest.approx(r, rel=1e-12, abs=1e-300)
        assert 0.0 <= r <= 1.0
        inside = a is not None and (l is None or a >= l) and (h is None or a <= h)
        if a is None:
            assert r == 0.0
        elif inside:
            assert r == 1.0
        else:  # one step further out grades strictly lower (until exp underflows to 0)
            assert r < 1.0
            step = 1 if h is not None and a > h else -1
            further = rewards.graded(l, h, a + step, alpha)
            assert further < r or further == r == 0.0


def test_graded_accepts_numpy_and_torch():
    import torch  # in the cpu extra; the core itself never imports it
    lo, hi, a = torch.tensor([2.0, 0.0]), torch.tensor([3.0, 0.0]), torch.tensor([1.0, 1.0])
    np.testing.assert_allclose(rewards.graded(lo, hi, a), [E(-1.2), E(-3)])
    np.testing.assert_allclose(rewards.graded(np.array([np.nan]), np.array([4.0]), np.array([6.0])), [E(-3)])


# ---- response-level rewards --------------------------------------------------------------------------------

def test_binary_baselines():
    assert rewards.ila([True, True, True]) == 1.0
    assert rewards.ila([True, False, True]) == 0.0
    assert rewards.cla([True, False, True, True]) == 0.75
    np.testing.assert_array_equal(rewards.ila([[1, 1], [1, 0]]), [1.0, 0.0])
    np.testing.assert_allclose(rewards.cla([[1, 1, 0], [1, 0]]), [2 / 3, 0.5])  # ragged batch


def test_scopeif_eq7_by_hand():
    # 1 of 3 satisfied; violated g = 0.5, 0.2: (1 + (0.5 + 0.2) / 2) / 3
    assert rewards.scopeif([True, False, False], [1.0, 0.5, 0.2]) == pytest.approx(0.45)
    assert rewards.scopeif([True, True], [1.0, 1.0]) == 1.0  # F empty: graded term 0
    assert rewards.scopeif([False, False], [0.3, 0.1]) == pytest.approx(0.2 / 2)
    # the graded values of satisfied constraints do not enter eq. 7
    assert rewards.scopeif([True, False], [0.0, 0.4]) == pytest.approx((1 + 0.4) / 2)
    np.testing.assert_allclose(rewards.scopeif([[1, 0, 0], [0, 0, 0]], [[1, .5, .2], [.3, .3, .3]]), [0.45, 0.1])
    # ragged: 2 and 3 constraints
    np.testing.assert_allclose(rewards.scopeif([[1, 0], [1, 1, 0]], [[1, .6], [1, 1, .3]]), [0.8, 2.3 / 3])


def test_scopeif_flat_is_the_mean_of_g():
    assert rewards.scopeif_flat([1.0, 0.5, 0.2]) == pytest.approx(1.7 / 3)
    # the ablation lets partial credit outweigh a full satisfaction, which eq. 7 forbids
    assert rewards.scopeif_flat([0.9, 0.9]) > rewards.scopeif_flat([1.0, 0.0])
    assert rewards.scopeif([False, False], [0.9, 0.9]) < rewards.scopeif([True, False], [1.0, 0.0])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0.0, 0.999999)), min_size=1, max_size=12))
def test_scopeif_bounds_by_satisfied_count(items):
    satisfied = [s for s, _ in items]
    g = [1.0 if s else v for s, v in items]  # eq. 5 gives g < 1 to a violated constraint
    m, n = sum(satisfied), len(items)
    r = rewards.scopeif(satisfied, g)
    assert m / n <= r < (m + 1) / n
    assert rewards.ila(satisfied) == float(m == n) and rewards.cla(satisfied) == pytest.approx(m / n)


def test_raif_eq4_to_6_by_hand():
    assert rewards.raif([True, True, True], True) == 3.0          # +1 format, +2 all followed
    assert rewards.raif([True, False, True, False, False], True) == pytest.approx(1 + 0.4)
    assert rewards.raif([False, False], True) == -1.0              # +1 - 2
    assert rewards.raif([True, True], False) == -3.0               # format fails: -1, accuracy -2
    np.testing.assert_allclose(rewards.raif([[1, 0], [0, 0], [1, 1]], [True, True, False]), [1.5, -1, -3])


def test_rewards_accept_torch_tensors():
    import torch  # in the cpu extra; the core itself never imports it
    s, g = torch.tensor([[True, False, False]]), torch.tensor([[1.0, 0.5, 0.2]])
    np.testing.assert_allclose(rewards.scopeif(s, g), [0.45])
    np.testing.assert_allclose(rewards.cla(s), [1 / 3])


# ---- the format gate (ScopeIF appendix D, RAIF eq. 4) -------------------------------------------------------

@pytest.mark.parametrize("text,think,truncated,answer,problem", [
    ("Plain answer.", "auto", False, "Plain answer.", None),
    ("<think>plan</think>\n\nThe answer.", "auto", False, "\n\nThe answer.", None),
    ("plan</think>The answer.", "auto", False, "The answer.", None),           # template opened <think>
    ("<think>a</think>b<think>c</think>d", "auto", False, "d", None),        # the last </think> counts
    ("<think>never closed", "auto", False, None, "unclosed_think"),
    ("<think>a</think>b<think>again", "auto", False, None, "unclosed_think"),
    ("<think>a</think>The answer.", "auto", True, None, "truncated"),
    ("No think at all.", "required", False, None, "missing_think"),
    ("x</think>The answer.", "required", False, "The answer.", None),
    ("<think>open", "none", False, "<think>open", None),
    ("<think>r</think>\n<answer>The answer.</answer>\n", "raif", False, "The answer.", None),
    ("<think>r</think>The answer.", "raif", False, None, "raif_format"),
    ("<answer>x</answer>", "raif", False, None, "raif_format"),
    ("<think>r</think><answer>unclosed", "raif", False, None, "raif_format"),
])
def test_format_gate(text, think, truncated, answer, problem):
    start, end, got = rewards.format_gate(text, think, truncated)
    assert got == problem
    if answer is not None:
        assert text[start:end] == answer


# ---- the composite ---------------------------------------------------------------------------------------

R = """The river runs cold. It carries snow from the hills.

A heron waits by the river. The water moves fast. Fish hide under stones.

Night falls.
"""
E1 = Constraint.from_dict({"scope": [], "target": {"count": "word"}, "range": {"min": 20, "max": 30}})
E2 = Constraint.from_dict({"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
                           "range": {"min": 2, "max": 3}})
E4 = Constraint.from_dict({"scope": [{"unit": "paragraph", "select": "at", "index": 0}],
                           "target": {"count": "occurrence", "of": "river"}, "range": {"eq": 0}})
G2, G4 = 0.670320046, 0.049787068


@pytest.mark.parametrize("kind,expected", [
    ("scopeif", (1 + (G2 + G4) / 2) / 3),
    ("scopeif_flat", (1 + G2 + G4) / 3),
    ("ila", 0.0),
    ("cla", 1 / 3),
    ("raif", 1 + 1 / 3),
])
def test_score_response_kinds(kind, expected):
    out = rewards.score_response("<think>\nCount the words.\n</think>\n\n" + R, [E1, E2, E4], kind=kind)
    assert out["reward"] == pytest.approx(expected, abs=1e-7)
    assert out["satisfied"] == [True, False, False]
    assert out["graded"] == pytest.approx([1.0, G2, G4], abs=1e-8)
    assert out["format_ok"] and out["problem"] is None and out["errors"] == []
    assert out["answer"] == R.strip()


def test_score_response_gate_zeroes_the_reward_and_maps_spans():
    cs = [E1, E2, E4]
    for text, kw in [("<think>endless", {}), (R, {"truncated": True}), (R, {"think": "required"})]:
        out = rewards.score_response(text, cs, **kw)
        assert out["reward"] == 0.0 and not out["format_ok"] and out["satisfied"] == [False] * 3
    assert rewards.score_response("<think>endless", cs, kind="raif")["reward"] == -3.0
    # RAIF's form: the answer inside <answer>, spans shifted by offset back onto the response
    text = f"<think>plan</think>\n<answer>{R}</answer>"
    out = rewards.score_response(text, cs, kind="raif", think="raif")
    assert out["reward"] == pytest.approx(1 + 1 / 3) and out["answer"] == R.strip()
    (a, b) = out["verdicts"][2].evidence[0]
    assert text[a + out["offset"]:b + out["offset"]] == "river"


NASTY = ["", " ", "</think>", "<think>", "<think></think>", "</think><think>", "<answer></answer>",
         "\x00\ud800\uffff", "\n" * 1000, "# " * 500, "- " * 2000, "|" * 3000, "{" * 5000, "```" * 100,
         "word " * 60000, "<think>" + "x" * 100000 + "</think>" + "y. " * 20000]


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_score_response_never_raises_on_text(text):
    for kind in rewards.KINDS:
        out = rewards.score_response(text, [E1, E2, E4], kind=kind)
        assert out["errors"] == []  # a verifier exception would be caught, but is a bug: none expected
        assert (-3.0 if kind == "raif" else 0.0) <= out["reward"] <= (3.0 if kind == "raif" else 1.0)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400)
       | st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "\n\n", "The river.", "- a",
                                   "# H", " ", "1."]), max_size=30).map("".join),
       st.sampled_from(rewards.THINK_MODES))
def test_score_response_total_on_any_text(text, think):
    out = rewards.score_response(text, [E1, E2, E4], think=think)
    assert out["errors"] == []
    assert 0.0 <= out["reward"] <= 1.0
    m = sum(out["satisfied"])
    assert m / 3 <= out["reward"] < (m + 1) / 3 or (m == 3 and out["reward"] == 1.0) or not out["format_ok"]


def test_score_response_counts_a_regex_out_of_time(monkeypatch):
    real = rewards.verify  # score_response's verifier

    def slow_regex(c, doc):  # as verify reports a label regex that ran out of REGEX_CPU_SECONDS
        v = real(c, doc)
        return Verdict(False, v.records, v.evidence, budget_exceeded=True) if c is E1 else v

    monkeypatch.setattr(rewards, "verify", slow_regex)
    out = rewards.score_response(R, [E1, E2, E4])
    assert out["over_budget"] == 1 and out["satisfied"] == [False, False, False]


def test_score_response_reports_a_verifier_exception(monkeypatch):
    real = rewards.verify

    def flaky(c, doc):
        if c is E2:
            raise RecursionError("deep")
        return real(c, doc)

    monkeypatch.setattr(rewards, "verify", flaky)
    out = rewards.score_response(R, [E1, E2, E4])
    assert out["errors"] == ["constraint 1: RecursionError: deep"] and out["verdicts"][1] is None
    assert out["satisfied"] == [True, False, False] and out["graded"][1] == 0.0
    assert out["reward"] == pytest.approx((1 + (0.0 + G4) / 2) / 3)


def test_score_response_rejects_bad_settings():
    with pytest.raises(ValueError, match="kind"):
        rewards.score_response(R, [E1], kind="binary")
    with pytest.raises(ValueError, match="think"):
        rewards.score_response(R, [E1], think="maybe")
    for alpha in (math.nan, math.inf, -1.0, 0.0):
        with pytest.raises(ValueError, match="alpha must be a finite positive number"):
            rewards.score_response(R, [E1], alpha=alpha)


def test_score_response_limits():
    cs = [E1, E2, E4]
    full = rewards.score_response(R, cs)
    assert full["over_budget"] == 0 and not full["clipped"]
    # budget 0: the first constraint is checked, the rest count violated with g = 0 and no verdict
    out = rewards.score_response(R, cs, budget_s=0.0)
    assert out["over_budget"] == 2 and out["satisfied"] == [True, False, False] and out["graded"] == [1.0, 0, 0]
    assert out["verdicts"][1:] == [None, None] and out["reward"] == pytest.approx(1 / 3)
    # the verified text is cut after the think block (the gate still sees the whole response)
    text = "<think>" + "plan " * 50 + "</think>" + R + "\n\nMore. " * 100
    out = rewards.score_response(text, cs, max_response_chars=len(R))
    assert out["clipped"] and out["answer"] == R.strip() and out["reward"] == pytest.approx(full["reward"])
    raif = f"<think>p</think><answer>{R}{'x' * 50}</answer>"
    out = rewards.score_response(raif, cs, kind="raif", think="raif", max_response_chars=len(R))
    assert out["clipped"] and out["answer"] == R.strip()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), max_size=12), st.booleans())
def test_raif_range(satisfied, format_ok):
    # eq. 4-6: -3 (format fails), -1 (none followed), 1 + k/|C| (some), 3 (all); so within RANGES["raif"]
    r = rewards.raif(satisfied, format_ok)
    lo, hi = rewards.RANGES["raif"]
    assert lo <= r <= hi
    k, n = sum(satisfied), len(satisfied)
    assert r == (-3.0 if not format_ok else 3.0 if k == n else -1.0 if k == 0 else pytest.approx(1 + k / n))


# ---- RAIF: empty or placeholder reasoning, the prompt's think head -----------------------------------------------

RAIF_ONE = [Constraint.from_dict({"scope": [], "target": {"count": "word"}, "range": {"max": 3}})]


@pytest.mark.parametrize("response, problem, reward", [
    ("<think>\n\n</think>\n<answer>a b</answer>", "empty", -1.0),  # an empty think block (kk.py:18-22 strips)
    ("<think>reasoning process here</think><answer>a b</answer>", "placeholder", -1.0),
    ("<think> Reasoning Process Here </think><answer>a b</answer>", "placeholder", -1.0),  # check_qa.py lowercases
    ("<think>x</think><think> </think><answer>a b</answer>", "empty", -1.0),  # the last block counts
    ("<think>two words</think><answer>a b</answer>", None, 3.0),
    ("<think></think><answer>a b c d</answer>", "empty", -1.0),  # -2 whatever the answer: it is not judged
])
def test_empty_reasoning_scores_minus_2(response, problem, reward):
    """complex_scoring.py:278 and ifeval/check_qa.py:89: R_accuracy -2 (R = +1 - 2) for empty or placeholder
    reasoning; the format itself holds."""
    assert rewards.raif_reasoning_problem(response) == problem
    got = rewards.score_response(response, RAIF_ONE, kind="raif", think="raif")
    assert (got["reward"], got["reasoning"], got["format_ok"]) == (reward, problem, True)
    if problem:
        assert got["satisfied"] == [False] and got["verdicts"] == [None]
        # eq. 7's y-hat: the empty block was the prompt's, and its answer is judged
        assert rewards.score_response(response, RAIF_ONE, kind="raif", think="raif", nothink=True)["reasoning"] is None
    assert rewards.raif([True], True, reasoning_ok=False) == -1.0 and rewards.raif([], True, False) == -1.0
    assert rewards.raif([False], False, reasoning_ok=False) == -3.0  # a format failure stays -3


def test_think_prefix_takes_only_a_trailing_think_block():
    system = "<|im_start|>system\n... i.e., <think> reasoning process here </think><answer> answer here </answer>."
    head = system + "<|im_end|>\n<|im_start|>assistant\n"
    assert rewards.think_prefix(head) == ""
    assert rewards.think_prefix(head + "<think>\n\n</think>\n") == "<think>\n\n</think>\n"
    assert rewards.think_prefix(head + "<think>\n") == "<think>\n"
    assert rewards.think_prefix(head + "<think>x</think>\nmore") == ""
