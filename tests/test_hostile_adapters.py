"""Hostile labels and responses through the OpenRLHF, TRL and verl adapters (issue 9): the time budget, the
maximum response size, finite rewards in range, validate-dataset on any bytes, the label cache bounded in
characters, and a nested-quantifier `matches` label. Each property is checked on generated inputs."""
import contextlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ifcore.integrations as integrations
from ifcore import rewards
from ifcore.integrations import load_constraints, log_keys, validate_dataset
from ifcore.integrations.trl import reward_fn as trl_reward_fn
from ifcore.integrations.verl import compute_score
from ifcore.schema import ConstraintError
from helpers import cpu_seconds
from test_integrations import LABEL, PROMPT, R, SCOPEIF_R, _openrlhf_module

REPO = Path(__file__).resolve().parents[1]
OPENRLHF = _openrlhf_module()
OPENRLHF_KEYS = set(log_keys(("prompt_mismatch", "prompt_not_found", "reward_error")))


def _openrlhf_logged(caplog, match, *args):
    """OpenRLHF swallows a reward function's exception (and fails later on reward None): ifcore's logs it with
    the sample, gives the floor reward and counts reward_error instead of raising."""
    caplog.clear()
    with caplog.at_level("ERROR"):
        out = OPENRLHF(*args)
    assert re.search(match, caplog.text), caplog.text[-2000:]
    assert out["extra_logs"]["reward_error"] > 0
    return out
IFCORE_VARS = ("IFCORE_REWARD", "IFCORE_THINK", "IFCORE_ALPHA", "IFCORE_BUDGET_S", "IFCORE_MAX_RESPONSE_CHARS",
               "IFCORE_EOS")
WORDS = {"scope": [], "target": {"count": "word"}, "range": {"min": 1}}
# A `times` reference that overflows to infinity at verify time: 1e308 x the word count.
OVERFLOW = {"scope": [], "target": {"count": "word"},
            "range": {"min": {"times": 1e308, "of": {"scope": [], "target": {"count": "word"}}}}}


@contextlib.contextmanager
def ifcore_env(**variables):
    """The IFCORE_* environment for OpenRLHF (its only way to take settings), restored afterwards."""
    saved = {k: os.environ.pop(k) for k in IFCORE_VARS if k in os.environ}
    os.environ.update({"IFCORE_REWARD" if k == "kind" else f"IFCORE_{k.upper()}": str(v) for k, v in variables.items()})
    try:
        yield
    finally:
        for k in IFCORE_VARS:
            os.environ.pop(k, None)
        os.environ.update(saved)


def run_adapters(responses, label, **opts):
    """Score `responses` under one label through each adapter as its framework calls it. Returns, per adapter,
    (rewards, logs): OpenRLHF's extra_logs means, TRL's logged metrics, verl's per-sample dicts."""
    with ifcore_env(**opts):
        out = OPENRLHF([PROMPT + r + "<|im_end|>" for r in responses], [PROMPT] * len(responses),
                       [label] * len(responses))
    metrics = {}
    trl = trl_reward_fn(prompts=["p"] * len(responses), completions=list(responses), label=[label] * len(responses),
                        log_metric=metrics.__setitem__, **opts)
    verl = [compute_score("d", r, label, {"index": i}, **opts) for i, r in enumerate(responses)]
    return {"openrlhf": (out["rewards"].tolist(), out["extra_logs"]), "trl": (trl, metrics),
            "verl": ([v["score"] for v in verl], verl)}


def _label(*constraints):
    return json.dumps({"constraints": list(constraints)})


def _in_range(kind, reward):
    """The documented ranges: RAIF eq. 4-6 in [-3, 3], the others (ScopeIF eq. 7, 10 and the baselines) in [0, 1]."""
    lo, hi = (-3.0, 3.0) if kind == "raif" else (0.0, 1.0)
    return lo <= reward <= hi  # False for NaN


# ---- 9.1: a time budget for all of a response's constraints ----------------------------------------------

def test_budget_zero_checks_only_the_first_constraint_in_every_adapter():
    full = run_adapters([R], LABEL)
    assert [rw for rw, _ in full.values()] == [pytest.approx([SCOPEIF_R], abs=1e-6)] * 3
    out = run_adapters([R], LABEL, budget_s=0)
    # E1 (satisfied) is checked; E2 and E4 are over budget: violated with g = 0, eq. 7 gives (1 + 0) / 3
    for name, (rw, logs) in out.items():
        assert rw == pytest.approx([1 / 3]), name
    assert out["openrlhf"][1]["over_budget"] == 2.0 and out["verl"][1][0]["over_budget"] == 2.0
    assert out["trl"][1]["ifcore/over_budget"] == 2.0
    assert full["openrlhf"][1]["over_budget"] == 0.0  # 2 s by default: nothing left unchecked here


def test_budget_by_a_clock_that_advances_a_second_per_reading(monkeypatch):
    five = _label(WORDS, WORDS, WORDS, WORDS, WORDS)
    monkeypatch.setattr(rewards, "perf_counter", itertools.count(0.0, 1.0).__next__, raising=False)
    # deadline 0 + 2.5: constraints 0, 1, 2 are checked at t = -, 1, 2; at t = 3 the budget is spent
    out = compute_score("d", R, five, {"index": 0}, budget_s=2.5, kind="cla")
    assert out["score"] == pytest.approx(3 / 5) and out["over_budget"] == 2.0
    assert compute_score("d", R, five, {"index": 0}, budget_s="inf", kind="cla")["over_budget"] == 0.0


@pytest.mark.parametrize("bad", ["-1", "nan", "soon"])
def test_budget_setting_is_checked(bad):
    with ifcore_env(budget_s=bad), pytest.raises(ValueError, match="IFCORE_BUDGET_S"):
        OPENRLHF([PROMPT + R], [PROMPT], [LABEL])
    with pytest.raises(ValueError, match="budget_s"):
        compute_score("d", R, LABEL, {}, budget_s=bad)
    with ifcore_env():
        assert integrations.settings()["budget_s"] == 2.0


# ---- 9.3: a maximum response size --------------------------------------------------------------------------

THINK = st.sampled_from(["", "<think>plan the answer</think>"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(codec="utf-8"), max_size=200).filter(lambda t: "think>" not in t),
       st.integers(1, 60), THINK)
@example("The river runs cold. " * 10, 20, "")
def test_an_oversized_response_is_scored_on_its_first_characters(text, limit, think):
    response = think + text
    out = compute_score("d", response, LABEL, {"index": 0}, max_response_chars=limit, budget_s="inf")
    cut = rewards.score_response(response[:len(think) + limit], load_constraints(LABEL, "x"))
    assert out["score"] == cut["reward"]
    assert out["clipped"] == float(len(text) > limit)


def test_the_size_limit_bounds_the_cost_of_a_huge_response():
    # Growth as a ratio (no absolute time): with a 20,000-character limit, a 1 MB response costs about what a
    # 25 KB one does; without the limit it would cost ~40x.
    unit = "The river runs cold. It carries snow.\n\n"
    small, huge = unit * (25_000 // len(unit)), unit * (1_000_000 // len(unit))

    def score(response):
        return compute_score("d", response, LABEL, {"index": 0}, max_response_chars=20_000, budget_s="inf")

    assert score(small)["clipped"] == score(huge)["clipped"] == 1.0
    t_small, t_huge = cpu_seconds(score, small), cpu_seconds(score, huge)
    assert t_huge < 5 * t_small, (t_small, t_huge)


def test_size_setting_from_the_environment():
    long = R + "\n\n" + "More words here. " * 200
    with ifcore_env(max_response_chars=len(R)):
        out = OPENRLHF([PROMPT + long + "<|im_end|>"], [PROMPT], [LABEL])
    assert out["extra_logs"]["clipped"] == 1.0 and out["rewards"].tolist() == pytest.approx([SCOPEIF_R], abs=1e-6)
    for bad in ("0", "-5", "2.5", "many"):
        with ifcore_env(max_response_chars=bad), pytest.raises(ValueError, match="IFCORE_MAX_RESPONSE_CHARS"):
            OPENRLHF([PROMPT + R], [PROMPT], [LABEL])


# ---- 9.4: alpha finite and positive; every reward finite and in range ----------------------------------------

@pytest.mark.parametrize("alpha", ["nan", "inf", "-inf", "-1", "0", "three"])
def test_a_bad_alpha_is_refused_everywhere(alpha):
    with ifcore_env(alpha=alpha), pytest.raises(ValueError, match="IFCORE_ALPHA"):
        OPENRLHF([PROMPT + R], [PROMPT], [LABEL])
    with ifcore_env(alpha=alpha), pytest.raises(ValueError, match="alpha"):
        compute_score("d", R, LABEL, {})
    with pytest.raises(ValueError, match="alpha"):
        trl_reward_fn(["p"], [R], label=[LABEL], alpha=alpha)
    cs = load_constraints(LABEL, "x")
    for call in (lambda a: rewards.score_response(R, cs, alpha=a), lambda a: rewards.graded(2, 3, 1, a),
                 lambda a: rewards.graded([2], [3], [1], a)):
        with pytest.raises(ValueError, match="alpha"):
            call(float(alpha) if alpha != "three" else alpha)


def test_graded_is_finite_when_a_reference_overflows():
    # lo = +inf (a `times` reference that overflowed): d / s = inf / inf, taken at its limit 1 (eq. 8-9)
    assert rewards.graded(math.inf, None, 5) == pytest.approx(math.exp(-3))
    assert rewards.graded(math.inf, math.inf, 5, 2.0) == pytest.approx(math.exp(-2))
    assert rewards.graded([math.inf, 2], [None, 3], [5, math.inf]).tolist() == pytest.approx([math.exp(-3), 0.0])
    assert rewards.graded(None, -math.inf, 5) == 0.0 and rewards.graded(1, 2, math.nan) == 0.0


@pytest.mark.parametrize("kind", rewards.KINDS)
def test_an_overflowing_reference_gives_a_finite_reward_in_range(kind):
    label = _label(OVERFLOW, WORDS)
    try:
        load_constraints(label, "label")
    except ConstraintError as e:  # rejected at validation is fine too, with the field named
        assert "range" in str(e)
        return
    for name, (rw, _) in run_adapters([R, "one", ""], label, kind=kind).items():
        assert all(_in_range(kind, r) for r in rw), (name, rw)


def test_a_reward_out_of_range_is_an_error_naming_the_sample(monkeypatch, caplog):
    for kind in ("scopeif", "raif"):  # a bug in the math, simulated
        monkeypatch.setattr(rewards, kind, lambda *args: math.nan)
    out = _openrlhf_logged(caplog, r"sample 0 \(prompt ending .*assistant'\): scopeif reward nan outside",
                           [PROMPT + R + "<|im_end|>"] * 2, [PROMPT] * 2, [LABEL] * 2)
    assert out["rewards"].tolist() == [0.0, 0.0] and out["extra_logs"]["reward_error"] == 1.0
    with pytest.raises(ValueError, match=r"completion 0 \(prompt ending 'Write about rivers\.'\).*outside"):
        trl_reward_fn(["Write about rivers."], [R], label=[LABEL])
    with pytest.raises(ValueError, match=r"scopeinstruct sample 7: raif reward nan outside \[-3.0, 3.0\]"):
        compute_score("scopeinstruct", R, LABEL, {"index": 7}, kind="raif")


# ---- 9.6: validate-dataset and adapter errors name the line or sample ------------------------------------

DEEP = "[" * 100_000
GOOD_ROW = {"prompt": "p", "label": LABEL}
BAD_LINES = {  # a line that must be reported, with (part of) its reason
    "not JSON": b"{not json",
    "not UTF-8": json.dumps(GOOD_ROW).encode().replace(b'"p"', b'"\xff"'),
    "nested too deeply": DEEP.encode(),
    "label nested": json.dumps({"prompt": "p", "label": DEEP}).encode(),
    "array": b"[1, 2]",
    "missing label": json.dumps({"prompt": "p"}).encode(),
    "bad label": json.dumps({"prompt": "p", "label": _label({"scope": [], "target": {"count": "word"}})}).encode(),
    "no constraints": json.dumps({"prompt": "p", "label": "[]"}).encode(),
    "huge number": b'{"prompt": "p", "label": {"constraints": [{"scope": [], "target": {"count": "word"}, '
                   b'"range": {"min": 1' + b"0" * 5000 + b"}}]}}",
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["good", "blank", *BAD_LINES]), max_size=12), st.booleans())
def test_validate_dataset_reports_every_bad_line_and_never_raises(kinds, as_text):
    lines = [b"\n" if k == "blank" else json.dumps(GOOD_ROW).encode() if k == "good" else BAD_LINES[k]
             for k in kinds]
    if as_text:
        lines = [raw.decode("utf-8", "replace") for raw in lines]
    n, errors = validate_dataset(lines)
    samples = [i for i, k in enumerate(kinds, 1) if k != "blank"]
    assert n == len(samples)
    if not samples:
        assert errors == ["no samples (the file is empty)"]
        return
    flagged = {int(e.split(":")[0].split()[1]) for e in errors}
    bad = {i for i, k in enumerate(kinds, 1) if k in BAD_LINES and not (as_text and k == "not UTF-8")}
    assert bad <= flagged <= bad | {i for i, k in enumerate(kinds, 1) if k == "not UTF-8"}
    assert all(e.startswith("line ") and "\n" not in e for e in errors)


@pytest.mark.parametrize("label,reason", [(DEEP, "nested too deeply"), (b"\xff\xfe", "not UTF-8"),
                                          (json.loads(json.dumps({"constraints": [[[[]]]]})), "constraints[0]")])
def test_adapters_name_the_sample_of_a_hostile_label(label, reason, caplog):
    reason = re.escape(reason)
    _openrlhf_logged(caplog, rf"label of sample 0 \(prompt ending .*\).*{reason}", [PROMPT + R], [PROMPT], [label])
    with pytest.raises(ConstraintError, match=rf"label of completion 0 \(prompt ending 'p'\).*{reason}"):
        trl_reward_fn(["p"], [R], label=[label])
    with pytest.raises(ConstraintError, match=rf"ground_truth of d sample 4.*{reason}"):
        compute_score("d", R, label, {"index": 4})


def test_a_deeply_nested_decoded_label_names_the_sample():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConstraintError, match="ground_truth of d sample 2: nested too deeply"):
        compute_score("d", R, {"constraints": deep}, {"index": 2})


# ---- 9.7: the parsed-label cache is bounded in characters ----------------------------------------------

def test_label_cache_is_bounded_in_characters(monkeypatch):
    monkeypatch.setattr(integrations, "_PARSED", {})
    monkeypatch.setattr(integrations, "_PARSED_CHARS", 0, raising=False)
    monkeypatch.setattr(integrations, "PARSED_MAX_CHARS", 20_000, raising=False)
    for i in range(60):
        # distinct labels of ~3,000 characters (an id pads them), as a dataset of large labels would give
        label = json.dumps({"constraints": [dict(WORDS, id=f"{i}-" + "x" * 3000)]})
        assert len(load_constraints(label, f"sample {i}")) == 1
        assert sum(len(k) for k in integrations._PARSED) <= 20_000
        assert label in integrations._PARSED  # the newest label is always kept
    assert sum(len(k) for k in integrations._PARSED) == integrations._PARSED_CHARS  # the accounting is exact
    big = json.dumps({"constraints": [dict(WORDS, id="y" * 30_000)]})
    assert len(load_constraints(big, "big")) == 1 and big not in integrations._PARSED  # parsed, never cached
    assert sum(len(k) for k in integrations._PARSED) == integrations._PARSED_CHARS <= 20_000


# ---- strange responses never crash a run ---------------------------------------------------------------

HOSTILE = st.one_of(
    st.text(st.characters(codec=None), max_size=300),  # any code point, control characters included
    st.text(st.characters(categories=["Cs", "Cc", "Zl", "Zp"]), max_size=50),  # lone surrogates, controls
    st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "\n\n", "- a", "# H", "|", "{",
                              "```", "1.", "\x00", "\ud800", "The river.", " "]), max_size=40).map("".join),
    st.tuples(st.sampled_from(["x", "- ", "{", "word ", "a\n\n", "<think>"]), st.integers(1, 60_000))
    .map(lambda t: t[0] * t[1]),
)
KINDS_AND_THINK = st.tuples(st.sampled_from(rewards.KINDS), st.sampled_from(rewards.THINK_MODES))
_candidates = [LABEL, _label(OVERFLOW, WORDS), _label({"scope": [], "target": {"matches": "r[a-z]+r"},
                                                      "range": {"min": 1}})]
LABELS = []
for _label_text in _candidates:  # the overflowing one may be rejected at validation, which is fine too
    with contextlib.suppress(ConstraintError):
        load_constraints(_label_text, "label")
        LABELS.append(_label_text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(HOSTILE, min_size=1, max_size=3), KINDS_AND_THINK, st.sampled_from(LABELS))
@example(["\ud800\udfff\x00", "<think>" * 3, "x" * 300_000], ("raif", "raif"), LABELS[-1])
def test_every_adapter_gives_finite_rewards_in_range_and_fixed_keys(responses, kind_think, label):
    kind, think = kind_think
    out = run_adapters(responses, label, kind=kind, think=think)
    for name, (rw, _) in out.items():
        assert len(rw) == len(responses) and all(_in_range(kind, r) for r in rw), (name, rw)
    assert out["openrlhf"][1].keys() == OPENRLHF_KEYS
    assert all(v.keys() == {"score", *log_keys()} for v in out["verl"][1])
    assert {"ifcore/ila", "ifcore/cla", "ifcore/format_fail", "ifcore/verify_errors", "ifcore/over_budget",
            "ifcore/clipped"} <= out["trl"][1].keys()
    assert out["openrlhf"][1]["verify_errors"] == 0.0  # a verifier exception is caught, but is a bug


# ---- Done when: a nested-quantifier `matches` label on a 10 KB response ----------------------------------

REDOS_SCRIPT = r"""
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("reward_func", "ifcore/integrations/openrlhf_reward.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from ifcore.schema import ConstraintError

prompt, pattern, unit, repeat, tail = sys.argv[1:]
response = unit * int(repeat) + tail
def label(*targets):
    return json.dumps({"constraints": [{"scope": [], "target": t, "range": {"min": 1}} for t in targets]})

def best(lab):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = module.reward_func([prompt + response + "<|im_end|>"], [prompt], [lab])
        times.append(time.perf_counter() - t0)
    return min(times), out["extra_logs"]["over_budget"]

plain, _ = best(label({"count": "word"}, {"matches": "river"}))
try:
    nested, over_budget = best(label({"matches": pattern}))
    print(json.dumps({"plain": plain, "nested": nested, "over_budget": over_budget}))
except ConstraintError as e:
    print(json.dumps({"rejected": str(e)}))
"""


@pytest.mark.parametrize("pattern,unit,repeat", [
    ("(a+)+$", "a", 10_000),  # nested quantifier: exponential backtracking in Python `re`
    (r"^(\w+\s?)*$", "river ", 1_700),  # "a line made of words"
])
def test_a_nested_quantifier_label_scores_fast_or_is_rejected(pattern, unit, repeat):
    # A 10 KB response, in a subprocess: a backtracking engine never finishes here, and holds the GIL while it
    # tries. The timeout only guards against that hang; the property is the ratio to a plain label.
    try:
        done = subprocess.run([sys.executable, "-c", REDOS_SCRIPT, PROMPT, pattern, unit, str(repeat), "!"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"matches {pattern!r} on {unit!r} x {repeat} + '!' did not finish (a backtracking engine)")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    if "rejected" in out:
        assert "constraints[0].target.matches" in out["rejected"], out
    else:  # RE2 runs both in linear time; the rare pattern it cannot run backtracks under a CPU deadline
        assert out["nested"] < 100 * out["plain"], out
