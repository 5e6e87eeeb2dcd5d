"""Hostile labels and responses against the verifier core (issue 9; issue 8.9): for each class of attack, the
property that must hold. Costs are pinned as ratios (to a normal input, or 10x the input), never as absolute
times; memory as bytes per response character."""
import io
import json
import math
import re
import sys
import threading
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ifcore
from ifcore import Constraint, ConstraintError
from ifcore.patterns import compile_pattern
from ifcore.text import Doc
from ifcore.verify import Record, Verdict, verify_jsonl

from helpers import cpu_seconds

V = sys.modules["ifcore.verify"]  # the module (ifcore.verify is also the function)


def matches(pattern: str, **range_):
    return Constraint.from_dict({"scope": [], "target": {"matches": pattern}, "range": range_ or {"min": 0}})


PROSE = ("The river runs cold. It carries snow from the hills, and a heron waits by the water. Fish hide under "
         "stones.\n\n")


# ---- 9.1 regular-expression denial of service -----------------------------------------------------------

@pytest.mark.parametrize("pattern,tail", [
    (r"(a+)+$", "a" * 28 + "!"),
    (r"(\w+\s?)+$", "word " * 14 + "!"),
    (r"(x+x+)+y", "x" * 30),
    (r"(?m)^(\w+\s?)*$", "a long line made of words " * 2 + "!"),  # matches empty: the backtracking engine
])
def test_nested_quantifiers_cost_what_a_plain_pattern_costs(pattern, tail):
    """A 10 KB response ending in the pattern's worst case: Python's re takes seconds to hours; here no
    longer than a plain pattern over the same text (the ratio is ~1)."""
    response = PROSE * 60 + tail
    hostile, plain = matches(pattern), matches(r"\w+")
    assert compile_pattern(pattern).linear == ("(?m)" not in pattern)
    ratio = cpu_seconds(ifcore.verify, hostile, response) / cpu_seconds(ifcore.verify, plain, response)
    assert ratio < 20


def test_nested_quantifier_counts_are_python_counts():
    for pattern, text in [(r"(a+)+b", "aaab aab xab"), (r"(\w+\s?)+\.", "one two. three four."),
                          (r"(?:x+x+)+y", "xxy xy xxxxy")]:
        assert ifcore.verify(matches(pattern), text).records[0].actual == len(re.findall(pattern, text))


@pytest.mark.parametrize("target,path", [
    ({"matches": "a{100000}"}, "target.matches"),
    ({"matches": "(?:(?:a{1000}){1000}){1000}"}, "target.matches"),
    ({"matches": "(" * 5000 + ")" * 5000}, "target.matches"),
    ({"matches": "x" * 20_000}, "target.matches"),
    ({"matches": "(?<=a+)b"}, "target.matches"),  # Python itself rejects variable-width lookbehind
    ({"count": "word", "where": {"target": {"matches": "[z-a]"}, "range": {"min": 1}}}, "target.where.target.matches"),
])
def test_patterns_no_engine_can_run_are_rejected_naming_the_field(target, path):
    with pytest.raises(ConstraintError) as e:
        Constraint.from_dict({"scope": [], "target": target, "range": {"min": 1}})
    assert e.value.path == path
    assert str(e.value).startswith(f"{path}: cannot be used as a regular expression: ")
    with pytest.raises(ConstraintError, match=rf"^sample 3\.constraints\[0\]\.range\.eq\.of\.{re.escape(path)}: "):
        ifcore.parse_label({"constraints": [{"scope": [], "target": {"count": "word"},
                                             "range": {"eq": {"times": 1, "of": {"scope": [], "target": target}}}}]},
                           where="sample 3")


@pytest.mark.parametrize("pattern,text", [(r"(?=(a|aa)+$)a", "a" * 40 + "!"), (r"(a|a)*\1$", "a" * 40 + "!")])
def test_a_pattern_that_needs_backtracking_stops_at_the_budget(monkeypatch, pattern, text):
    """Lookaround and backreferences run on the backtracking engine under a CPU budget per verify() call; a
    hostile one is cut there and scored unevaluated (never satisfied), and the verdict says so."""
    monkeypatch.setattr(V, "REGEX_CPU_SECONDS", (0.05, 0.0))
    c = Constraint.from_dict({"scope": [{"unit": "paragraph", "select": "each"}], "target": {"matches": pattern},
                              "range": {"min": 0}})
    response = "\n\n".join([text] * 200)  # 200 segments: the budget is per call, not per segment
    v = ifcore.verify(c, response)
    assert v.budget_exceeded and not v.satisfied and v.graded() == 0.0
    assert v.to_dict()["budget_exceeded"] is True
    # The first segment's search is cut at the budget; the other 199 are not searched at all.
    assert len(v.records) == 200 and all(r.actual is None for r in v.records)
    ok = ifcore.verify(matches(r"(?<=a)a"), response)  # a harmless lookbehind within the same budget
    assert not ok.budget_exceeded and ok.records[0].actual == 200 * 39


def test_garbage_collection_is_not_charged_to_a_patterns_budget(monkeypatch):
    """A full collection of a large heap inside a verify() call (a reward worker with torch loaded spends ~0.3 s
    there) is not the pattern's CPU time: an ordinary lookbehind keeps its verdict. Charged, it ran out of the
    budget and flipped a ScopeIF-Test verdict in a full test run."""
    import gc

    monkeypatch.setattr(V, "REGEX_CPU_SECONDS", (0.05, 0.0))
    heap = []
    while True:  # a heap whose full collection costs several budgets on this machine
        heap += [{"x": [i]} for i in range(200_000)]
        start = time.thread_time()
        gc.collect()
        if time.thread_time() - start > 0.15 or len(heap) > 5_000_000:
            break
    real = V.compile_pattern

    def collecting(pattern):
        search = real(pattern)
        return lambda text, deadline: (gc.collect(), search(text, deadline))[1]

    monkeypatch.setattr(V, "compile_pattern", collecting)
    v = ifcore.verify(matches(r"(?<=a)a", min=1), "a" * 40 + "!")
    assert not v.budget_exceeded and v.satisfied and v.records[0].actual == 39
    del heap


# The exactness of the translation: random patterns from a grammar of the constructs labels use, on texts
# over an alphabet with the characters where Python's rules differ from other engines' (Unicode words, digits
# and spaces, dotless i, Kelvin sign, long s, final sigma, newlines).
ATOMS = st.sampled_from([r"a", r"b", r"I", r"\w", r"\W", r"\d", r"\s", r"\S", r".", r"[a-c]", r"[^\W_]", r"[^a]",
                         r"\b", r"\B", r"^", r"$", r"\A", r"\Z", r"(?i:k)", r"(?i:s)", r"(?i:[a-z])", r"\n",
                         r"(?=a)", r"(?!b)", r"(?<=\w)", r"(?<!\s)", r"(?s:.)", r"[\s\S]"])
QUANT = st.sampled_from(["", "", "*", "+", "?", "*?", "+?", "{1,2}", "{2}", "*+"])


@st.composite
def python_patterns(draw, depth=0):
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.booleans()) and draw(st.booleans()):
            inner = draw(python_patterns(depth + 1))
            alt = draw(python_patterns(depth + 1)) if draw(st.booleans()) else None
            atom = f"(?:{inner}|{alt})" if alt else f"({inner})"
        else:
            atom = draw(ATOMS)
        q = draw(QUANT) if not atom.startswith(("(?=", "(?!", "(?<", "^", "$", "\\A", "\\Z", "\\b", "\\B")) else ""
        parts.append(atom + q)
    flags = draw(st.sampled_from(["", "", "(?m)", "(?i)", "(?s)", "(?a)"]))
    return flags + "".join(parts)


TEXTS = st.text(alphabet="ab IıİkKKſsSσςΣ_1٣²\n\t é\u00a0.-", max_size=24)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(python_patterns(), TEXTS)
def test_label_patterns_find_what_python_re_finds(pattern, text):
    try:
        rx = re.compile(pattern)
    except re.error:
        return
    want = [m.span() for m in rx.finditer(text) if m.end() > m.start()]
    assert compile_pattern(pattern)(text, time.thread_time() + 10) == want


def test_shipped_patterns_keep_their_engine():
    """Most label patterns of the shipped data and mappings run on RE2; the ones with lookaround or
    backreferences on the backtracking engine, with the same matches (tests/test_mapping.py, test_scopeif_*)."""
    assert compile_pattern(r"\A {0,3}##[ \t]+Usage[ \t]*#*[ \t]*(?:\n|\Z)").linear
    assert compile_pattern(r"(?i)\Aonly output this sentence here\.\Z").linear
    assert not compile_pattern(r"(?<!\w)'[^'\n]+'(?!\w)").linear
    assert not compile_pattern(r"^(.)(?:.*\1)?$").linear
    text = "$x$ is 'quoted' and ‘not’\n"
    for p in (r"(?<!\w)'[^'\n]+'(?!\w)", r"^\s*\S+\s*$", r"[,!]\s*$", r"\bis\b"):
        assert compile_pattern(p)(text, time.thread_time() + 10) == [m.span() for m in re.finditer(p, text)]


# ---- 9.2 `ifcore verify`: one output line per input line --------------------------------------------------

GOOD = {"response": "One. Two.", "constraints": [{"scope": [], "target": {"count": "sentence"}, "range": {"eq": 2}}]}
BAD_LINES = [
    b"{not json",
    b"[1, 2]",
    json.dumps({"response": 3, "constraints": []}).encode(),
    json.dumps({"response": "x", "constraints": [{"scope": [], "target": {"count": "word"},
                                                  "range": {"max": 10 ** 400}}]}).encode(),
    json.dumps({"response": "x", "constraints": [{"scope": [], "target": {"matches": "a{99999}"},
                                                  "range": {"min": 1}}]}).encode(),
    b'{"response": "x", "constraints": [{"scope": [], "target": {"count": "word"}, "range": {"max": NaN}}]}',
    b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
    b'{"response": "x", "constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": ' + b"[" * 5000
    + b"]" * 5000 + b"}}]}",
    b'{"response": "\xff\xfe caf\xe9", "constraints": []}',
]


def _strict(line: str):
    def no_constant(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(line, parse_constant=no_constant)


class FlushCounter(io.StringIO):
    flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([json.dumps(GOOD).encode()] + BAD_LINES + [b"", b"   "]), max_size=12),
       st.booleans())
def test_every_input_line_gets_exactly_one_output_line(lines, as_text):
    data = [ln.decode("utf-8", "replace") if as_text else ln for ln in lines]
    out = FlushCounter()
    counts = verify_jsonl([ln + ("\n" if as_text else b"\n") for ln in data], out)
    expected = list(range(1, len(lines) + 1))  # blank lines too: output line N answers input line N
    rows = [_strict(x) for x in out.getvalue().splitlines()]
    assert [row["line"] for row in rows] == expected
    assert len(rows) == len(expected) == counts["lines"] == counts["ok"] + counts["errors"]
    assert out.flushes >= len(expected)
    for n, row in zip(expected, rows):
        if "error" in row:
            assert row["error"].startswith(f"line {n}: ")
        else:
            assert all(math.isfinite(x) for x in (row["ila"], row["cla"], row["scopeif"], row["scopeif_flat"]))
    assert counts["errors"] == sum(1 for r in rows if "error" in r)


def test_verify_errors_name_the_line_and_field_and_decoding_is_reported():
    out = io.StringIO()
    lines = [json.dumps(GOOD).encode(), BAD_LINES[3], b"", BAD_LINES[8], BAD_LINES[6]]
    assert verify_jsonl(lines, out) == {"lines": 5, "ok": 2, "errors": 3}
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    assert rows[1]["error"].startswith("line 2: constraints[0].range.max: expected a finite number within float")
    assert rows[2]["error"] == "line 3: blank line"
    assert rows[3]["warning"].startswith("line 4: not UTF-8 at byte")
    assert rows[4]["error"].startswith("line 5: not JSON: nested too deeply")


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -1.0, 0.0, None])
def test_alpha_must_be_finite_and_positive(alpha):
    with pytest.raises(ValueError, match="alpha"):
        verify_jsonl([json.dumps(GOOD)], io.StringIO(), alpha=alpha)
    with pytest.raises(ValueError, match="alpha"):
        Verdict(True, []).graded(alpha)
    with pytest.raises(ValueError, match="alpha"):
        Verdict(False, [Record(1, 2, 5, (0, 1))]).graded(alpha)


# ---- 9.3 linear-time list, section and key paths ---------------------------------------------------------

def _growth(constraint, make, n: int) -> float:
    """CPU time (segmentation included) on make(10 n) over make(n): ~10 when linear, ~100 when quadratic."""
    small, big = make(n), make(10 * n)
    ifcore.verify(constraint, Doc(make(n // 10)))  # first-use tables out of the way
    run = lambda text: ifcore.verify(constraint, Doc(text))  # noqa: E731
    return cpu_seconds(run, big) / cpu_seconds(run, small)


@pytest.mark.parametrize("name,constraint,make,n", [
    ("sibling lists", {"scope": [], "target": {"count": "block", "kind": "list"}, "range": {"min": 1}},
     lambda n: "- item\n\ntext\n\n" * n, 800),
    ("headings", {"scope": [{"unit": "section", "select": "each"}], "target": {"count": "word"}, "range": {"min": 1}},
     lambda n: "#\n" * n, 4000),
    ("symbol run, distinct", {"scope": [], "target": {"distinct": "word"}, "range": {"min": 1}},
     lambda n: "a" + "." * (20 * n) + "b", 150),
    ("symbol run, pairs", {"scope": [], "target": {"pairs": "line", "left": "text", "rel": "eq", "right": "text"},
                           "range": {"min": 0}}, lambda n: "x" + "-" * (20 * n) + "y\nz", 150),
    ("lists per paragraph", {"scope": [{"unit": "paragraph", "select": "each"}], "target": {"depth": "list"},
                             "range": {"max": 3}}, lambda n: "- a\n  - b\n\n" * n, 600),
])
def test_adversarial_structure_costs_grow_linearly(name, constraint, make, n):
    assert _growth(Constraint.from_dict(constraint), make, n) < 30, name


# ---- 9.4 / 9.5 numbers: finite, within float range, never NaN out --------------------------------------

HUGE = st.one_of(st.integers(min_value=2 ** 1024), st.integers(max_value=-(2 ** 1024)),
                 st.sampled_from([math.nan, math.inf, -math.inf]))


@settings(max_examples=100, deadline=None)
@given(HUGE, st.sampled_from(["min", "max", "eq", "times", "plus"]))
def test_numbers_beyond_float_range_are_rejected_naming_the_field(x, where):
    ref = {"scope": [], "target": {"count": "word"}}
    rng, path = ({where: x}, f"range.{where}") if where not in ("times", "plus") else (
        {"max": {where: x, "of": ref}}, f"range.max.{where}")
    with pytest.raises(ConstraintError) as e:
        Constraint.from_dict({"scope": [], "target": {"count": "word"}, "range": rng})
    assert e.value.path == path and "finite number within float range" in str(e.value)


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=1e300, max_value=1.7e308), st.sampled_from(["min", "max"]), st.text(max_size=30))
def test_a_reference_that_overflows_is_unresolved_not_nan(k, key, text):
    c = Constraint.from_dict({"scope": [], "target": {"count": "char"},
                              "range": {key: {"times": k, "of": {"scope": [], "target": {"count": "word"}}}}})
    v = ifcore.verify(c, text + " word " * 200)
    g = v.graded()
    assert math.isfinite(g) and 0.0 <= g <= 1.0
    for r in v.records:
        assert r.lo is None or math.isfinite(r.lo)
        assert r.hi is None or math.isfinite(r.hi)
    out = io.StringIO()
    verify_jsonl([json.dumps({"response": text, "constraints": [c.to_dict()]})], out)
    _strict(out.getvalue())


# ---- 9.6 deep nesting ----------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [40, 3000, 100_000])
def test_deeply_nested_labels_are_constraint_errors(depth):
    cond = {"target": {"count": "word"}, "range": {"min": 1}}
    for _ in range(depth // 4 if depth < 5000 else 1000):
        cond = {"scope": [{"unit": "sentence", "select": "where", "if": cond}], "target": {"count": "word"},
                "range": {"min": 1}}
    with pytest.raises(ConstraintError, match="nested more than 32 levels deep"):
        Constraint.from_dict({"scope": [{"unit": "paragraph", "select": "where", "if": cond}],
                              "target": {"count": "word"}, "range": {"min": 1}})
    deep = "[" * depth + "]" * depth
    with pytest.raises(ConstraintError) as e:
        ifcore.parse_label('{"constraints": ' + deep + "}", where="row 9")
    assert str(e.value).startswith("row 9")


# ---- 9.7 memory bounded by the response size -----------------------------------------------------------

@pytest.mark.parametrize("target", [{"count": "char"}, {"count": "class", "of": "uppercase"},
                                    {"count": "class", "of": "lowercase"}, {"matches": r"[A-Z]+"}])
def test_character_counts_need_no_object_per_character(target):
    c = Constraint.from_dict({"scope": [], "target": target, "range": {"min": 1}})
    text = ("SHOUTING" * 100 + " whisper ") * 2400  # 2 MB: long runs of one case, so a per-run object is cheap
    doc = Doc(text)
    ifcore.verify(c, Doc("Warm Up"))
    tracemalloc.start()
    try:
        v = ifcore.verify(c, doc)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert v.records[0].actual > 0
    assert peak / len(text) < 8, f"{peak / len(text):.0f} bytes per character"  # was ~130 for a char count


# ---- 8.9 the natural loop reuses the segmentation ------------------------------------------------------

def test_verify_once_per_constraint_segments_the_response_once(monkeypatch):
    made = []
    real = V.Doc

    class Counting(real):
        def __init__(self, text):
            made.append(text)
            super().__init__(text)

    monkeypatch.setattr(V, "Doc", Counting)
    monkeypatch.setattr(V, "_DOCS", type(V._DOCS)())
    monkeypatch.setattr(V, "_DOCS_CHARS", 0)
    cs = [Constraint.from_dict({"scope": [], "target": {"count": u}, "range": {"min": 1}})
          for u in ("word", "sentence", "paragraph", "line", "char")]
    response = PROSE * 3 + " (a unique response)"
    loop = [ifcore.verify(c, response) for c in cs]
    assert len(made) == 1
    assert [v.to_dict() for v in loop] == [v.to_dict() for v in ifcore.verify_all(cs, response)]
    assert len(made) == 1
    ifcore.verify(cs[0], response + "!")
    assert len(made) == 2


def test_the_segmentation_cache_is_bounded_in_characters(monkeypatch):
    monkeypatch.setattr(V, "_DOCS", type(V._DOCS)())
    monkeypatch.setattr(V, "_DOCS_CHARS", 0)
    c = Constraint.from_dict({"scope": [], "target": {"count": "word"}, "range": {"min": 1}})
    for i in range(12):
        ifcore.verify(c, f"{i} " + "x" * 300_000)
        assert sum(map(len, V._DOCS)) == V._DOCS_CHARS <= V.DOC_CACHE_CHARS
        assert len(V._DOCS) <= V.DOC_CACHE_ENTRIES
    ifcore.verify(c, "y" * (V.DOC_CACHE_CHARS + 1))  # too large to keep at all
    assert all(len(k) <= V.DOC_CACHE_CHARS for k in V._DOCS)


def test_reward_threads_share_the_cache_safely():
    cs = [Constraint.from_dict({"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
                                "range": {"min": 1, "max": 2}}),
          Constraint.from_dict({"scope": [], "target": {"matches": r"(?<!\w)heron\b"}, "range": {"min": 1}})]
    responses = [PROSE * k + f"end {k}." for k in range(1, 9)]
    expected = [[v.to_dict() for v in ifcore.verify_all(cs, Doc(r))] for r in responses]
    errors = []

    def work(seed):
        try:
            for i in range(40):
                k = (seed + i) % len(responses)
                got = [ifcore.verify(c, responses[k]).to_dict() for c in cs]
                assert got == expected[k]
        except Exception as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
