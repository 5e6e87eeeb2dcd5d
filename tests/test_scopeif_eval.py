"""ScopeIF-Test: CSR / ISR as eq. 11-12 define them, the category breakdown, and the evaluate command."""
import json
import subprocess
import sys

import pytest

from ifcore.bench import scopeif

CAT = {"scope": "Traversal(Paragraph)", "primary_target": "Capacity", "secondary_target": "Text Length",
       "range": "Intervals"}


def inst(i, n):
    return {"id": i, "prompt": f"p{i}", "constraints": [{"constraint": f"c{j}", "category": CAT} for j in range(n)],
            "targets": []}


def v(*flags):
    return [{"satisfied": f, "source": None if f is None else "schema"} for f in flags]


def test_csr_and_isr_by_hand():
    instances = [inst(0, 2), inst(1, 3), inst(2, 1)]
    verdicts = [v(True, True), v(True, False, False), v(False)]
    m = scopeif.metrics(instances, verdicts)
    assert m["CSR"] == pytest.approx((1 + 1 / 3 + 0) / 3)  # eq. 11: mean over instances of per-instance fractions
    assert m["ISR"] == pytest.approx(1 / 3)  # eq. 12
    cell = m["by_category"]["scope_selector"]["Traversal"]
    assert cell == {"csr": pytest.approx(3 / 6), "n": 6}  # per category: over its constraints


def test_unjudged_constraints_are_left_out_not_guessed():
    m = scopeif.metrics([inst(0, 2), inst(1, 2)], [v(True, None), v(None, None)])
    assert m["CSR"] == 1.0 and m["instances_in_CSR"] == 1
    assert m["ISR"] is None and m["instances_in_ISR"] == 0
    assert m["judged_constraints"] == 1 and m["constraints"] == 4


def test_evaluate_end_to_end(tmp_path):
    test = [inst(7, 2)]
    (tmp_path / "test.json").write_text(json.dumps(test))
    rows = [{"instruction_id": 7, "constraint_index": 0, "text": "c0", "category": CAT, "reason": None,
             "schema": [{"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "word"},
                         "range": {"min": 2, "max": 3}}]},
            {"instruction_id": 7, "constraint_index": 1, "text": "c1", "category": CAT, "schema": None,
             "reason": "semantic"}]
    (tmp_path / "f.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": 7, "response": "One two.\n\nThree four five six."}) + "\n")
    out = subprocess.run([sys.executable, "-m", "ifcore", "eval", "scopeif", "--responses", str(tmp_path / "r.jsonl"),
                          "--test", str(tmp_path / "test.json"), "--formalized", str(tmp_path / "f.jsonl"),
                          "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, check=True)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["CSR"] == 0.0 and summary["judged_constraints"] == 1  # the second paragraph has 4 words
    verdicts = json.loads((tmp_path / "out" / "verdicts.jsonl").read_text())["verdicts"]
    assert verdicts == [{"satisfied": False, "source": "schema"}, {"satisfied": None, "source": None}]
    assert out.stdout.splitlines()[:3] == ["scopeif: 1 instances scored; 1 of 2 constraints judged (schema 1, tgv 0, "
                                           "fallback 0, unjudged 1)", "       %     CSR     ISR",
                                           "            0.00     n/a"]


def test_judge_fills_what_the_schema_cannot_express():
    calls = []

    def judge(instruction, constraint, response, targets):
        calls.append((instruction, constraint, response, targets))
        if constraint == "c2":
            return {"satisfied": None, "error": "the judge gave no verdict"}
        ok = constraint == "c0"
        return {"satisfied": ok, "graded": 1.0 if ok else 0.25, "records": [], "source": "tgv"}

    instance = dict(inst(1, 3), targets=['```json\n[{"Counting Object": "words", "Type": "Specific"}]\n```'])
    vs = scopeif.judge_instance(instance, "text", {}, judge=judge)
    assert vs == [{"satisfied": True, "source": "tgv", "graded": 1.0, "records": []},
                  {"satisfied": False, "source": "tgv", "graded": 0.25, "records": []},
                  {"satisfied": None, "source": None, "error": "the judge gave no verdict"}]
    # the shipped counting objects reach the judge (no extraction needed); a constraint without them gets None
    assert calls[0] == ("p1", "c0", "text", [{"counting_object": "words", "type": "specific"}])
    assert calls[1][3] is None
    m = scopeif.metrics([instance], [vs])
    assert m["judged_by"] == {"schema": 0, "tgv": 2, "fallback": 0, "unjudged": 1}


def test_the_shipped_sample_loads():
    data = scopeif.load_test()
    assert len(data) == 268 and data[0]["id"] == 0
    assert sum(len(d["constraints"]) for d in data) == 1413
