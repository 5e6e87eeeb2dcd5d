"""Fidelity of the shipped ScopeIF-Test formalizations against a careful reader (issue 13).

tests/data/scopeif_whole.jsonl: per formalized instruction, a response that satisfies the whole instruction and,
per formalized constraint, a minimal edit that breaks only it (written by reading the instruction).
tests/data/scopeif_probes.jsonl: human-judged probes, the reader's verdict and why; the verifier must agree on at
least 97 % of them (the rest are listed by `ifcore audit` with their reasons).
tests/data/scopeif_probes_blind.jsonl: 200 probes on formalized constraints drawn at random (seed 13), written by
readers who saw only the instruction texts (never a formalization or a verdict): the independent estimate.
"""
import json
from pathlib import Path

import pytest

from ifcore.bench.audit import PROBE_FIELDS, WHOLE_FIELDS, _read, audit_probes, audit_whole
from ifcore.coverage import load_formalized, scope_selector
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
ROWS = load_formalized(DATA / "scopeif_formalized.jsonl")
WHOLE = _read(DATA / "scopeif_whole.jsonl", WHOLE_FIELDS)
PROBES = _read(DATA / "scopeif_probes.jsonl", PROBE_FIELDS)
BLIND = _read(DATA / "scopeif_probes_blind.jsonl", PROBE_FIELDS)


@pytest.mark.parametrize("row", WHOLE, ids=lambda w: f'{w["instruction_id"]}-{w["violates"]}-line{w["line"]}')
def test_whole_instruction_response_verifies_as_the_reader_judged(row):
    result = audit_whole(ROWS, [row])
    assert not result["failures"], f'{row["why"]}: {result["failures"]}'


def test_every_formalized_instruction_and_constraint_has_whole_instruction_responses():
    result = audit_whole(ROWS, WHOLE)
    assert result["missing_instructions"] == []
    assert result["missing_violations"] == []


def test_probes_agree_with_the_reader_on_at_least_97_percent():
    result = audit_probes(ROWS, PROBES)
    assert result["n"] >= 300
    assert result["agree"] / result["n"] >= 0.97, [
        (d["instruction_id"], d["constraint_index"], d["reason"]) for d in result["disagreements"]]
    assert {p["expected"] for p in PROBES} == {True, False}


def test_blind_probes_agree_with_the_reader_on_at_least_97_percent():
    result = audit_probes(ROWS, BLIND)
    assert result["n"] == 200 and {p["expected"] for p in BLIND} == {True, False}
    assert result["agree"] / result["n"] >= 0.97, [
        (d["instruction_id"], d["constraint_index"], d["reason"]) for d in result["disagreements"]]


def test_probes_cover_every_scope_target_and_range_category():
    by_key = {(r["instruction_id"], r["constraint_index"]): r["category"] for r in ROWS}
    cats = [by_key[(p["instruction_id"], p["constraint_index"])] for p in PROBES]
    assert {scope_selector(c["scope"]) for c in cats} == {"Global", "Traversal", "Position", "Condition", "Nested"}
    assert {c["primary_target"] for c in cats} == {"Capacity", "Literals", "Structure", "Checklist", "Pattern",
                                                   "Relations"}
    assert len({(c["primary_target"], c["secondary_target"]) for c in cats}) == 15
    assert {c["range"] for c in cats} == {"One-Sided Bounds", "Prohibition", "Equality", "Intervals", "Comparison",
                                          "Arithmetic Relations"}


def test_audit_command_reports_failures_and_disagreements(tmp_path, capsys):
    row = next(r for r in ROWS if r["schema"] and r["schema"][0]["target"] == {"count": "word"}
               and r["schema"][0].get("scope") == [])
    iid, k = row["instruction_id"], row["constraint_index"]
    whole = tmp_path / "whole.jsonl"
    whole.write_text(json.dumps({"instruction_id": iid, "violates": None, "response": "Too short.", "why": "x"}) + "\n")
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"instruction_id": iid, "constraint_index": k, "response": "Too short.",
                                  "expected": True, "reason": "a reader who miscounted"}) + "\n")
    status, out, _ = run_cli(capsys, "audit", "--whole", whole, "--probes", probes)
    assert status == 1
    assert f"FAIL line 1: instruction {iid} violates=None" in out
    assert "probes: 1, verifier agrees on 0 (0.0%)" in out
    assert "a reader who miscounted" in out
    status, out, _ = run_cli(capsys, "audit", "--whole", "", "--probes", DATA / "scopeif_probes.jsonl")
    assert status == 0 and "probes:" in out


def test_a_probe_of_an_unformalized_constraint_is_an_error(tmp_path, capsys):
    row = next(r for r in ROWS if r["schema"] is None)
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"instruction_id": row["instruction_id"], "constraint_index": row["constraint_index"],
                                  "response": "x", "expected": True, "reason": "y"}) + "\n")
    status, _, err = run_cli(capsys, "audit", "--whole", "", "--probes", probes)
    assert status == 2 and "is not formalized" in err[-1]
