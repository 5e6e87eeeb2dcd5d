"""ScopeIF-Test: the official test.json format, CSR / ISR (ScopeIF appendix E.1, eq. 11-12) and the breakdown
by Scope, Target and Range category (the paper's Figure 3 and Tables 6-8).

A constraint's verdict comes from its schema formalization when it has one (all of its schema constraints must
hold); otherwise from `judge` (ScopeIF's tool-grounded LLM judge, ifcore.judge.tgv), or it stays unjudged;
"judged_by" counts each way. Unjudged constraints are
reported, never guessed: CSR averages over the instances with at least one judged constraint (each over its
judged constraints), ISR over the instances whose constraints are all judged.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from importlib import resources
from pathlib import Path
from typing import Callable

from ifcore.coverage import scope_selector
from ifcore.judge.prompts import shipped_targets
from ifcore.jsonl import JsonlError, iter_jsonl
from ifcore.schema import Constraint
from ifcore.text import Doc
from ifcore.verify import verify

GROUPS = ("scope_selector", "scope", "primary_target", "secondary_target", "range")


def _data(name: str) -> Path:
    return Path(str(resources.files("ifcore") / "data" / "scopeif_test" / name))


def load_test(path: str | Path | None = None) -> list[dict]:
    """Instances of the official test.json format: [{id, prompt, constraints: [{constraint, category}], targets}].
    The default is the packaged sample (the first 268 instances)."""
    path = path or _data("test_sample.json")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON array of test instances")
    for i, inst in enumerate(data):
        if not isinstance(inst, dict):
            raise ValueError(f"{path}: instance {i}: expected an object, got {type(inst).__name__}")
        for key in ("id", "prompt", "constraints"):
            if key not in inst:
                raise ValueError(f"{path}: instance {i}: missing {key!r}")
        for j, c in enumerate(inst["constraints"]):
            if not isinstance(c, dict) or "constraint" not in c or "category" not in c:
                raise ValueError(f"{path}: instance {i} constraint {j}: needs constraint and category")
    return data


def load_formalizations(path: str | Path | None = None) -> dict[tuple[int, int], list[Constraint]]:
    """(instance id, constraint index) -> parsed schema constraints, for the formalized constraints only."""
    path = path or _data("formalized.jsonl")
    out = {}
    with open(path, "rb") as f:
        for n, row, problem in iter_jsonl(f, ("instruction_id", "constraint_index")):
            if problem:
                raise JsonlError(f"{path}:{n}: {problem}")
            if row.get("schema"):
                if not isinstance(row["schema"], list):
                    raise JsonlError(f"{path}:{n}: schema: expected a list of constraints")
                out[(row["instruction_id"], row["constraint_index"])] = [
                    Constraint.from_dict(c, f"{path}:{n}: schema[{k}]") for k, c in enumerate(row["schema"])]
    return out


def judge_instance(inst: dict, response: str, formalized: dict, judge: Callable | None = None) -> list[dict]:
    """One verdict per constraint (see judge_all)."""
    return judge_all([(inst, response)], formalized, judge)[0]


def judge_all(pairs: list[tuple[dict, str]], formalized: dict, judge: Callable | None = None) -> list[list[dict]]:
    """Verdicts for (instance, response) pairs, one per constraint: {"satisfied": bool | None, "source"}.

    source "schema": every schema constraint of its formalization holds. The rest go to `judge`, called as
    judge(instruction, constraint, response, targets) (an ifcore.judge.tgv.TGV, whose `many` judges them all
    concurrently) with the counting objects the test file ships for that constraint: source "tgv", or
    "fallback" (the judge's binary conclusion), with "graded" and "records"; an unjudged one keeps source
    None and the judge's reason in "error"."""
    out, asks = [], []
    for k, (inst, response) in enumerate(pairs):
        doc, verdicts = Doc(response), []
        for j, c in enumerate(inst["constraints"]):
            schema = formalized.get((inst["id"], j))
            if schema is not None:
                verdicts.append({"satisfied": all(verify(s, doc).satisfied for s in schema), "source": "schema"})
                continue
            verdicts.append({"satisfied": None, "source": None})
            if judge is not None:
                asks.append((k, j, (inst["prompt"], c["constraint"], response, shipped_targets(inst, j))))
        out.append(verdicts)
    if asks:
        items = [item for _, _, item in asks]
        results = judge.many(items) if hasattr(judge, "many") else [judge(*item) for item in items]
        for (k, j, _), v in zip(asks, results):
            if v["satisfied"] is None:
                out[k][j] = {"satisfied": None, "source": None, "error": v.get("error")}
            else:
                out[k][j] = {"satisfied": bool(v["satisfied"]), "source": v["source"], "graded": v["graded"],
                             "records": v["records"]}
    return out


def metrics(instances: list[dict], verdicts: list[list[dict]]) -> dict:
    """CSR (eq. 11) and ISR (eq. 12) over what was judged, and CSR per category of every taxonomy group."""
    csr_terms, isr_terms = [], []
    per: dict[str, dict[str, list[int]]] = {g: defaultdict(lambda: [0, 0]) for g in GROUPS}
    judged = total = 0
    for inst, vs in zip(instances, verdicts):
        known = [v["satisfied"] for v in vs if v["satisfied"] is not None]
        total += len(vs)
        judged += len(known)
        if known:
            csr_terms.append(sum(known) / len(known))
        if vs and len(known) == len(vs):
            isr_terms.append(float(all(known)))
        for c, v in zip(inst["constraints"], vs):
            if v["satisfied"] is None:
                continue
            cat = c["category"]
            keys = {"scope_selector": scope_selector(cat["scope"]), "scope": cat["scope"],
                    "primary_target": cat["primary_target"],
                    "secondary_target": f'{cat["primary_target"]} / {cat["secondary_target"]}',
                    "range": cat["range"]}
            for g, k in keys.items():
                per[g][k][0] += v["satisfied"]
                per[g][k][1] += 1
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    sources = Counter(v["source"] for vs in verdicts for v in vs)
    return {"CSR": mean(csr_terms), "ISR": mean(isr_terms), "instances": len(instances),
            "instances_in_CSR": len(csr_terms), "instances_in_ISR": len(isr_terms),
            "constraints": total, "judged_constraints": judged,
            "judged_by": {"schema": sources["schema"], "tgv": sources["tgv"], "fallback": sources["fallback"],
                          "unjudged": sources[None]},
            "by_category": {g: {k: {"csr": s / n, "n": n} for k, (s, n) in sorted(d.items())}
                            for g, d in per.items()}}


def evaluate(responses_path: str | Path, output_dir: str | Path, test_path=None, formalized_path=None,
             judge: Callable | None = None, on_duplicate: str = "error") -> dict:
    """`ifcore eval scopeif`: responses JSONL {id or prompt, response} -> verdicts.jsonl and summary.json.
    Every problem is a JsonlError naming the file and line; two responses to one instance are an error naming
    both lines unless `on_duplicate` is "first" or "last", the one kept."""
    if on_duplicate not in ("error", "first", "last"):
        raise ValueError(f"on_duplicate must be error, first or last, not {on_duplicate!r}")
    instances = load_test(test_path)
    formalized = load_formalizations(formalized_path)
    by_id = {inst["id"]: inst for inst in instances}
    by_prompt = {inst["prompt"]: inst for inst in instances}
    chosen = {}  # instance id -> (line, instance, response)
    with open(responses_path, "rb") as f:
        for n, r, problem in iter_jsonl(f, ("response",)):
            key = "id" if r is not None and "id" in r else "prompt"
            if problem is None and not isinstance(r["response"], str):
                problem = f'"response": expected a string, got {type(r["response"]).__name__}'
            if problem is None and key not in r:
                problem = 'needs "id" or "prompt"'
            if problem is None and not isinstance(r[key], (int, str) if key == "id" else str):
                what = "an integer" if key == "id" else "a string"
                problem = f'"{key}": expected {what}, got {type(r[key]).__name__}'
            if problem:
                raise JsonlError(f"{responses_path}:{n}: {problem}")
            inst = (by_id if key == "id" else by_prompt).get(r[key])
            if inst is None:
                raise JsonlError(f"{responses_path}:{n}: no test instance with this {key}")
            if inst["id"] in chosen and on_duplicate != "last":
                if on_duplicate == "error":
                    raise JsonlError(f"{responses_path}:{n}: a second response to the instance of line "
                                     f"{chosen[inst['id']][0]} (--on-duplicate first|last keeps one)")
                continue
            chosen[inst["id"]] = n, inst, r["response"]
    if not chosen:
        raise JsonlError(f"{responses_path}: no responses (the file is empty)")
    picked = [inst for _, inst, _ in chosen.values()]
    verdicts = judge_all([(inst, response) for _, inst, response in chosen.values()], formalized, judge)
    rows = [{"id": inst["id"], "response": response, "verdicts": vs}
            for (_, inst, response), vs in zip(chosen.values(), verdicts)]
    summary = {**metrics(picked, verdicts), "missing_responses": len(instances) - len(chosen)}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "verdicts.jsonl", "w", encoding="utf-8", errors="backslashreplace") as f:  # a lone surrogate: its escape
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
