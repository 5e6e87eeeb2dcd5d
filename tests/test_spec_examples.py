"""The 11 examples of constraint-schema.md must verify exactly as stated, through the API and the CLI."""
import json
import subprocess
import sys

import pytest

import ifcore

R = """The river runs cold. It carries snow from the hills.

A heron waits by the river. The water moves fast. Fish hide under stones.

Night falls.
"""

INF = None
EXAMPLES = [  # (name, scope, target, range, records (lo, hi, actual), satisfied, graded)
    ("E1", [], {"count": "word"}, {"min": 20, "max": 30}, [(20, 30, 26)], True, 1.0),
    ("E2", [{"unit": "paragraph", "select": "each"}], {"count": "sentence"}, {"min": 2, "max": 3},
     [(2, 3, 2), (2, 3, 3), (2, 3, 1)], False, 0.670320),
    ("E3", [{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": -1}],
     {"count": "word"}, {"max": 4}, [(INF, 4, 6), (INF, 4, 4), (INF, 4, 2)], False, 0.367879),
    ("E4", [{"unit": "paragraph", "select": "at", "index": 0}], {"count": "occurrence", "of": "river"}, {"eq": 0},
     [(0, 0, 1)], False, 0.049787),
    ("E5", [{"unit": "sentence", "select": "where",
             "if": {"target": {"count": "occurrence", "of": "river"}, "range": {"min": 1}}}],
     {"count": "word"}, {"max": 5}, [(INF, 5, 4), (INF, 5, 6)], False, 0.548812),
    ("E6", [{"unit": "paragraph", "select": "each"}], {"count": "word"}, {"gt": "previous"},
     [(11, INF, 14), (15, INF, 2)], False, 0.272532),
    ("E7", [{"unit": "paragraph", "select": "at", "index": 1}], {"count": "sentence"},
     {"eq": {"times": 2, "of": {"scope": [{"unit": "paragraph", "select": "at", "index": 2}],
                                "target": {"count": "sentence"}}}}, [(2, 2, 3)], False, 0.223130),
    ("E8", [], {"starts_with": "The"}, {"eq": 1}, [(1, 1, 1)], True, 1.0),
    ("E9", [], {"acrostic": "TAN", "unit": "paragraph"}, {"eq": 0}, [(0, 0, 0)], True, 1.0),
    ("E10", [], {"count": "class", "of": "digit"}, {"eq": 0}, [(0, 0, 0)], True, 1.0),
    ("E11", [{"unit": "paragraph", "select": "at", "index": 5}], {"count": "word"}, {"min": 1},
     [(1, INF, None)], False, 0.0),
]


@pytest.mark.parametrize("name,scope,target,rng,records,satisfied,graded", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_api(name, scope, target, rng, records, satisfied, graded):
    c = ifcore.Constraint.from_dict({"id": name, "scope": scope, "target": target, "range": rng})
    v = ifcore.verify(c, R)
    assert [(r.lo, r.hi, r.actual) for r in v.records] == records
    assert v.satisfied is satisfied
    assert v.graded(alpha=3.0) == pytest.approx(graded, abs=5e-7)
    for r in v.records:  # every record's span is a real segment of R
        assert 0 <= r.span[0] <= r.span[1] <= len(R)


def test_paragraph_facts_stated_in_the_spec():
    doc = ifcore.Doc(R)
    assert [len(doc.within("word", p)) for p in doc.paragraphs] == [10, 14, 2]
    assert [len(doc.within("sentence", p)) for p in doc.paragraphs] == [2, 3, 1]


def test_cli_verifies_all_examples_in_one_run():
    lines = [json.dumps({"response": R, "constraints": [{"scope": s, "target": t, "range": r}]})
             for _, s, t, r, *_ in EXAMPLES]
    out = subprocess.run([sys.executable, "-m", "ifcore", "verify"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(EXAMPLES)
    for line, (_, _, _, _, records, satisfied, graded) in zip(out, EXAMPLES):
        v = json.loads(line)["verdicts"][0]
        assert [(r["lo"], r["hi"], r["actual"]) for r in v["records"]] == records
        assert v["satisfied"] is satisfied
        assert v["graded"] == pytest.approx(graded, abs=5e-7)


def test_cli_reports_a_bad_line_and_goes_on(tmp_path):
    good = json.dumps({"response": R, "constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": 1}}]})
    bad = json.dumps({"response": R, "constraints": [{"scope": [{"unit": "paragraph", "select": "at", "index": "x"}],
                                                      "target": {"count": "word"}, "range": {"min": 1}}]})
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([good, "{not json", bad, good]) + "\n")
    dst = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ifcore", "verify", "--input", str(src), "--output", str(dst)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    rows = [json.loads(x) for x in dst.read_text().splitlines()]
    assert len(rows) == 4
    assert rows[0]["ila"] == 1.0 and rows[3]["ila"] == 1.0
    assert "error" in rows[1] and "line 2" in rows[1]["error"]
    assert "constraints[0].scope[0].index" in rows[2]["error"]
