"""Bad input: malformed constraints name their field path; no response text makes `verify` raise; a response no
UTF-8 file can hold is scored like any other, on every evaluation path."""
import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ifcore
from ifcore import Constraint, ConstraintError

from helpers import cpu_seconds, run_cli

REPO = Path(__file__).resolve().parents[1]

OK = {"scope": [], "target": {"count": "word"}, "range": {"min": 1}}


def bad(**change):
    d = json.loads(json.dumps(OK))
    d.update(change)
    return d


MALFORMED = [
    (bad(scope={"unit": "paragraph"}), "scope"),
    (bad(scope=[{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": "x"}]),
     "scope[1].index"),
    (bad(scope=[{"unit": "stanza", "select": "each"}]), "scope[0].unit"),
    (bad(scope=[{"unit": "block", "select": "each"}]), "scope[0].kind"),
    (bad(scope=[{"unit": "block", "kind": "poem", "select": "each"}]), "scope[0].kind"),
    (bad(scope=[{"unit": "word", "select": "pick"}]), "scope[0].select"),
    (bad(scope=[{"unit": "word", "select": "at"}]), "scope[0].index"),
    (bad(scope=[{"unit": "word", "select": "where", "if": {"target": {"count": "char"}, "range": {"gt": "previous"}}}]),
     "scope[0].if.range.gt"),
    (bad(target={"count": "word", "starts_with": "A"}), "target"),
    (bad(target={"count": "occurrence"}), "target.of"),
    (bad(target={"count": "class", "of": "glyph"}), "target.of"),
    (bad(target={"matches": "(unclosed"}), "target.matches"),
    (bad(target={"acrostic": "CAT"}), "target.unit"),
    (bad(range={"minimum": 3}), "range.minimum"),
    (bad(range={"min": 5, "max": 2}), "range"),
    (bad(range={"eq": {"times": 2, "of": {"scope": [], "target": {"count": "bogus"}}}}), "range.eq.of.target.count"),
    (bad(range={"min": True}), "range.min"),
    (bad(category={"scope": "Everywhere(Paragraph)"}), "category.scope"),
    (bad(category={"primary_target": "Capacity", "secondary_target": "Nesting Depth"}), "category.secondary_target"),
    (bad(colour="red"), "colour"),
    ({"scope": [], "range": {"min": 1}}, "target"),
    ([], ""),
]


@pytest.mark.parametrize("d,path", MALFORMED, ids=[p or "not-an-object" for _, p in MALFORMED])
def test_malformed_constraint_names_the_field(d, path):
    with pytest.raises(ValueError) as e:
        Constraint.from_dict(d)
    assert isinstance(e.value, ConstraintError)
    assert e.value.path == path
    assert str(e.value).startswith(f"{path}: " if path else "expected")


def test_parse_label_names_the_sample_and_field():
    with pytest.raises(ConstraintError, match=r"^sample 7\.constraints\[1\]\.range\.max: "):
        ifcore.parse_label(json.dumps({"constraints": [OK, bad(range={"max": "many"})]}), where="sample 7")
    with pytest.raises(ConstraintError, match="^label: not valid JSON"):
        ifcore.parse_label("{oops")
    assert len(ifcore.parse_label([OK, OK])) == 2


def test_round_trip():
    d = {"id": "c1", "text": "Each paragraph must contain between 2 and 3 sentences.",
         "scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
         "range": {"min": 2, "max": 3},
         "category": {"scope": "Traversal(Paragraph)", "primary_target": "Capacity",
                      "secondary_target": "Unit Count", "range": "Intervals"}}
    assert Constraint.from_dict(d).to_dict() == d


# Constraints that between them exercise every target and selector; the fuzzer throws text at all of them.
EVERY_KIND = [Constraint.from_dict(c) for c in [
    {"scope": [{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": -1}],
     "target": {"count": "word"}, "range": {"max": 4}},
    {"scope": [{"unit": "section", "select": "each"}], "target": {"count": "element", "kind": "list_item"},
     "range": {"gt": "previous"}},
    {"scope": [{"unit": "line", "select": "where", "if": {"target": {"count": "occurrence", "of": "a"},
                                                          "range": {"min": 1}}}],
     "target": {"count": "class", "of": "punctuation"}, "range": {"eq": 0}},
    {"scope": [{"unit": "block", "kind": "json", "select": "each"}], "target": {"depth": "json"}, "range": {"max": 3}},
    {"scope": [], "target": {"depth": "list"}, "range": {"max": 2}},
    {"scope": [{"unit": "element", "kind": "table_cell", "select": "each"}], "target": {"valid": "integer"},
     "range": {"eq": 1}},
    {"scope": [], "target": {"valid": "json"}, "range": {"eq": 1}},
    {"scope": [], "target": {"valid": "yaml"}, "range": {"eq": 1}},
    {"scope": [], "target": {"has": ["Intro", "x"], "as": "heading"}, "range": {"eq": 2}},
    {"scope": [], "target": {"has": ["k"], "as": "json_key"}, "range": {"eq": 1}},
    {"scope": [{"unit": "word", "select": "slice", "start": -5}], "target": {"count": "class", "of": "emoji"},
     "range": {"min": 1}},
    {"scope": [], "target": {"matches": r"^\d+\."}, "range": {"min": 1}},
    {"scope": [], "target": {"wrapped": ["```", "```"]}, "range": {"eq": 1}},
    {"scope": [], "target": {"sorted": "alphabetical", "unit": "line"}, "range": {"eq": 0}},
    {"scope": [], "target": {"sorted": "numeric", "unit": "element", "kind": "list_item"}, "range": {"eq": 0}},
    {"scope": [], "target": {"chain": "last_first", "unit": "sentence"}, "range": {"min": 1}},
    {"scope": [], "target": {"acrostic": "ABC", "unit": "paragraph", "prose": True}, "range": {"eq": 0}},
    {"scope": [], "target": {"distinct": "word", "by": "last_word.first_letter", "min_occurrences": 2},
     "range": {"max": 3}},
    {"scope": [], "target": {"pairs": "word", "left": "letters", "rel": "lt", "right": "letters"}, "range": {"min": 1}},
    {"scope": [], "target": {"count": "sentence", "where": {"target": {"count": "word"}, "range": {"max": 3}}},
     "range": {"eq": {"times": 2, "of": {"scope": [{"unit": "paragraph", "select": "at", "index": 0}],
                                         "target": {"count": "sentence"}}}}},
    {"scope": [{"unit": "element", "kind": "heading", "level": 2, "select": "each"}],
     "target": {"count": "class", "of": "uppercase_word"}, "range": {"eq": 0}},
]]

MARKDOWNISH = st.sampled_from(["# ", "## ", "- ", "* ", "1. ", "> ", "| a | b |\n|---|---|\n", "```", "```json\n",
                               "\n", "\n\n", "    ", "{", "}", "[", "]", '"k": ', "</think>", "<think>", "***",
                               "Mr. ", "e.g. ", "3.14", "...", "😀", "中文", "\u200b", "\r\n", "\t"])


@st.composite
def responses(draw):
    parts = draw(st.lists(st.one_of(st.text(max_size=40), MARKDOWNISH), max_size=40))
    return "".join(parts)


def _verify_all(text):
    doc = ifcore.Doc(text)
    for c in EVERY_KIND:
        v = ifcore.verify(c, doc)
        assert isinstance(v.satisfied, bool)
        g = v.graded()
        assert 0.0 <= g <= 1.0
        for r in v.records:
            assert 0 <= r.span[0] <= r.span[1] <= len(text)
        for a, b in v.evidence:
            assert 0 <= a <= b <= len(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_arbitrary_unicode_never_raises(text):
    _verify_all(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses())
def test_markdown_fragments_never_raise(text):
    _verify_all(text)


@pytest.mark.parametrize("text", [
    "", " ", "\n\n\n", "```", "```python\nprint(1)\n", "```json\n{\"a\": [1, {\"b\": 2}]}\n",  # unclosed fences
    "- " * 500 + "x", "> " * 500 + "x", "  " * 300 + "- deep", "[" * 100000, "{\"a\":" * 5000 + "1" + "}" * 5000,
    "#" * 1000, "|" * 5000, "<think>never closed", "</think>", "\x00\x01\x02", "\ud800" if False else "\U0010ffff",
])
def test_edge_responses_never_raise(text):
    _verify_all(text)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=20))
def test_from_dict_only_raises_constraint_errors(obj):
    for d in (obj, {"scope": obj, "target": {"count": "word"}, "range": {"min": 1}},
              {"scope": [], "target": obj, "range": {"min": 1}}, {"scope": [], "target": {"count": "word"}, "range": obj}):
        try:
            Constraint.from_dict(d)
        except ConstraintError:
            pass


def test_verification_grows_linearly_from_100_kb_to_1_mb():
    """A 1 MB response against a 100 KB one of the same text: about 10x the CPU time, not 100x. (Absolute
    figures are in `ifcore bench verify`; a timed bound here would fail on a busy machine.)"""
    from ifcore.bench.speed import large_response

    cs = [EVERY_KIND[0], EVERY_KIND[1], EVERY_KIND[2], EVERY_KIND[4], EVERY_KIND[5], EVERY_KIND[17],
          Constraint.from_dict({"scope": [], "target": {"count": "block", "kind": "list"}, "range": {"min": 1}}),
          Constraint.from_dict({"scope": [], "target": {"count": "word"}, "range": {"max": 10}})]

    def verify_all(text):
        doc = ifcore.Doc(text)
        return [ifcore.verify(c, doc) for c in cs]

    small, big = (cpu_seconds(verify_all, large_response(n)) for n in (100_000, 1_000_000))
    assert len(verify_all(large_response(1_000_000))[0].records) > 5000
    assert big / small < 30, f"1 MB took {big / small:.1f}x the time of 100 KB"


@pytest.mark.parametrize("d, where, suggestion", [
    (bad(scope=[{"unit": "sentence", "slect": "each"}]), "scope[0].slect", "select"),  # not "select: got null"
    (bad(scope=[{"unit": "list_item", "select": "each", "exclude_nestd": True}]), "scope[0].exclude_nestd",
     "exclude_nested"),
    ({"scope": [], "taget": {"count": "word"}, "range": {"min": 1}}, "taget", "target"),
    (bad(target={"cout": "word"}), "target.cout", "count"),
    (bad(target={"count": "word", "off": "x"}), "target.off", "of"),
    (bad(range={"mni": 1}), "range.mni", "min"),
])
def test_a_misspelled_key_is_named_as_unknown_with_the_key_it_resembles(d, where, suggestion):
    with pytest.raises(ConstraintError) as e:
        Constraint.from_dict(d)
    assert e.value.path == where and f"did you mean {suggestion!r}?" in str(e.value)


# ---- a response no UTF-8 file can hold (a lone surrogate, as a JSON "\ud800" escape gives) ----------------------

def _first_rows(path: Path, key: str, n: int = 3) -> list[dict]:
    """The first n rows of a reference file with distinct `key` values."""
    rows, seen = [], set()
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as f:
        for line in f:
            row = json.loads(line)
            if row[key] not in seen:
                seen.add(row[key])
                rows.append(row)
            if len(rows) == n:
                return rows
    return rows


SURROGATE_INPUTS = {  # benchmark: (reference responses, the key that names the prompt)
    "ifeval": ("tests/data/ifeval/input_response_data_gpt4_20231107_145030.jsonl", "prompt"),
    "ifbench": ("tests/data/ifbench/sample_output.jsonl", "prompt"),
    "muldimif": ("tests/data/muldimif/reference.jsonl.gz", "id"),
    "followbench": ("tests/data/followbench/rule_reference.jsonl.gz", "prompt"),
    "scopeif": ("tests/data/scopeif_whole.jsonl", "instruction_id"),
}


@pytest.mark.parametrize("benchmark", list(SURROGATE_INPUTS))
def test_a_response_with_a_lone_surrogate_is_scored_and_the_evaluation_goes_on(benchmark, tmp_path, capsys):
    path, key = SURROGATE_INPUTS[benchmark]
    rows = _first_rows(REPO / path, key)
    if benchmark == "scopeif":
        rows = [{"id": r["instruction_id"], "response": r["response"]} for r in rows]
    bad = rows[1]["response"][:20] + "\ud800 lone" + rows[1]["response"][20:]
    rows[1]["response"] = bad
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))  # ensure_ascii: the file holds "\ud800"
    status, out, err = run_cli(capsys, "eval", benchmark, "--responses", responses, "--allow-missing",
                               "--output-dir", tmp_path / "out")
    assert status == 0, err
    written = [json.loads(line) for f in sorted((tmp_path / "out").glob("*.jsonl"))
               for line in f.read_text(encoding="utf-8").splitlines()]
    name = "id" if benchmark in ("scopeif", "muldimif") else "prompt"
    assert {str(r[name]).strip() for r in rows} <= {str(r.get(name)).strip() for r in written}  # the bad one too
    if any("response" in r for r in written):  # written as its escape, read back as the same string
        assert bad in [r.get("response") for r in written]
