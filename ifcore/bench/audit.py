"""Fidelity audit of the ScopeIF-Test formalizations: do their verdicts agree with a careful reader?

Two hand-written sets, both judged by reading the instruction, never by running the verifier:
- whole-instruction responses (tests/data/scopeif_whole.jsonl): `{"instruction_id", "violates": null | k,
  "response", "why"}`. With `violates` null the response satisfies the whole instruction, so every formalized
  constraint of it must pass; with `violates` k it is a minimal edit that breaks constraint k only, which must
  fail while every other formalized constraint passes. This catches formalizations that contradict their
  siblings (a formalization that rejects the structure another constraint requires). A constraint that no
  response can break alone (breaking "at least 3 paragraphs" always breaks a 4-paragraph acrostic) has a row
  with `"response": null` and the reason in `why`: it is listed as such, never counted as tested. An instruction
  that contradicts itself (its constraints cannot all hold) has a `"violates": null, "response": null` row saying
  why; it is listed as unsatisfiable.
- probes (tests/data/scopeif_probes.jsonl): `{"instruction_id", "constraint_index", "response", "expected":
  bool, "reason"}`: one constraint, one response with the ordinary features of real answers, the reader's
  verdict and why. Agreement with the verifier is the fidelity figure of docs/verification.md.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ifcore.coverage import category_groups, load_formalized
from ifcore.jsonl import JsonlError, iter_jsonl
from ifcore.schema import Constraint
from ifcore.text import Doc
from ifcore.verify import verify

WHOLE_FIELDS = ("instruction_id", "violates", "response", "why")
PROBE_FIELDS = ("instruction_id", "constraint_index", "response", "expected", "reason")


def _read(path: str | Path, fields: tuple) -> list[dict]:
    rows = []
    with open(path, "rb") as f:
        for n, row, problem in iter_jsonl(f, fields):
            if problem:
                raise JsonlError(f"{path}:{n}: {problem}")
            row["line"] = n
            rows.append(row)
    return rows


def _constraint_verdicts(rows: list[dict], doc: Doc) -> dict[int, bool]:
    """constraint_index -> satisfied (all of its schema constraints hold), for the formalized rows of one
    instruction."""
    return {r["constraint_index"]: all(verify(Constraint.from_dict(d), doc).satisfied for d in r["schema"])
            for r in rows if r["schema"]}


def audit_whole(rows: list[dict], whole: list[dict]) -> dict:
    """{"responses", "failures": [line, instruction, violates, the constraints that disagree], "instructions":
    formalized instructions with a satisfying response, "missing_instructions", "missing_violations":
    formalized constraints without a violating edit, "cannot_violate_alone": [constraint, why], "unsatisfiable":
    [instruction, why]}."""
    by_key = {(r["instruction_id"], r["constraint_index"]): r for r in rows}
    by_instruction = defaultdict(list)
    for r in rows:
        by_instruction[r["instruction_id"]].append(r)
    failures, satisfied_ids, violated, alone, unsatisfiable = [], set(), set(), [], []
    for w in whole:
        iid, k = w["instruction_id"], w["violates"]
        if k is not None and (iid, k) not in by_key:
            raise ValueError(f'whole line {w["line"]}: instruction {iid} has no constraint {k}')
        if w["response"] is None:
            if not w["why"]:
                raise ValueError(f'whole line {w["line"]}: a null response needs the reason in `why`')
            if k is None:
                unsatisfiable.append({"instruction_id": iid, "why": w["why"]})
            else:
                alone.append({"constraint": f"{iid}/{k}", "why": w["why"]})
            continue
        got = _constraint_verdicts(by_instruction[iid], Doc(w["response"]))
        wrong = sorted(j for j, ok in got.items() if ok != (j != k))
        if k is not None and not by_key[(iid, k)]["schema"]:
            wrong.append(f"{k} (not formalized)")
        if wrong:
            failures.append({"line": w["line"], "instruction_id": iid, "violates": k, "disagree": wrong})
        elif k is None:
            satisfied_ids.add(iid)
        else:
            violated.add((iid, k))
    formalized = {k for k, r in by_key.items() if r["schema"]}
    declared = {a["constraint"] for a in alone}
    contradictory = {u["instruction_id"] for u in unsatisfiable}
    return {"responses": len(whole) - len(alone) - len(unsatisfiable), "failures": failures,
            "instructions": len(satisfied_ids),
            "missing_instructions": sorted({i for i, _ in formalized} - satisfied_ids - contradictory),
            "missing_violations": sorted(f"{i}/{k}" for i, k in formalized - violated
                                         if f"{i}/{k}" not in declared and i not in contradictory),
            "cannot_violate_alone": alone, "unsatisfiable": unsatisfiable}


def audit_probes(rows: list[dict], probes: list[dict]) -> dict:
    """{"n", "agree", "disagreements": [probe + got], "by_group": {group: {label: [n, agree]}}}."""
    by_key = {(r["instruction_id"], r["constraint_index"]): r for r in rows}
    disagreements, by_group = [], defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for p in probes:
        row = by_key.get((p["instruction_id"], p["constraint_index"]))
        if row is None or not row["schema"]:
            raise ValueError(f'probe line {p["line"]}: {p["instruction_id"]}/{p["constraint_index"]} is not formalized')
        doc = Doc(p["response"])
        got = all(verify(Constraint.from_dict(d), doc).satisfied for d in row["schema"])
        agree = got == p["expected"]
        if not agree:
            disagreements.append({**p, "got": got})
        for group, label in category_groups(row).items():
            cell = by_group[group][label]
            cell[0] += 1
            cell[1] += agree
    n = len(probes)
    return {"n": n, "agree": n - len(disagreements), "disagreements": disagreements,
            "by_group": {g: dict(v) for g, v in by_group.items()}}


def report(formalized: str | Path, whole: str | Path | None, probes: str | Path | None) -> tuple[str, bool]:
    """The audit as text, and whether it passes (every whole-instruction response as intended)."""
    rows = load_formalized(formalized)
    lines, ok = [], True
    if whole:
        w = audit_whole(rows, _read(whole, WHOLE_FIELDS))
        ok = not w["failures"]
        lines.append(f'whole-instruction responses: {w["responses"]}, failures {len(w["failures"])}; '
                     f'instructions with a satisfying response {w["instructions"]}, without '
                     f'{len(w["missing_instructions"])}; formalized constraints without a violating edit '
                     f'{len(w["missing_violations"])}')
        for f in w["failures"]:
            lines.append(f'  FAIL line {f["line"]}: instruction {f["instruction_id"]} violates={f["violates"]}: '
                         f'verdict disagrees on constraint(s) {f["disagree"]}')
        if w["missing_instructions"]:
            lines.append(f'  no satisfying response: {w["missing_instructions"]}')
        if w["missing_violations"]:
            lines.append(f'  no violating edit: {" ".join(w["missing_violations"])}')
        for a in w["cannot_violate_alone"]:
            lines.append(f'  cannot be violated alone: {a["constraint"]}: {a["why"]}')
        for u in w["unsatisfiable"]:
            lines.append(f'  unsatisfiable instruction {u["instruction_id"]}: {u["why"]}')
    if probes:
        p = audit_probes(rows, _read(probes, PROBE_FIELDS))
        lines.append(f'probes: {p["n"]}, verifier agrees on {p["agree"]} ({p["agree"] / max(p["n"], 1):.1%})')
        for group, cells in p["by_group"].items():
            lines.append(f"  by {group}: " + "; ".join(f"{label} {a}/{n}" for label, (n, a) in sorted(cells.items())))
        for d in p["disagreements"]:
            lines.append(f'  DISAGREE line {d["line"]}: {d["instruction_id"]}/{d["constraint_index"]} reader '
                         f'{d["expected"]}, verifier {d["got"]}: {d["reason"]}')
    return "\n".join(lines), ok
