"""Judge meta-evaluation (ScopeIF section 6.3, Table 4): how often a judge agrees with the truth.

ScopeIF measures its judges against human labels. Here the formalized ScopeIF-Test constraints give labels for
free: the deterministic verifier's verdict of a formalized constraint on a response is its ground truth (the
formalizations agree with careful readers on 99.5 % of blind probes, `ifcore audit`). The judge sees only what it
would see in training -- the instruction, the constraint in words, its shipped counting objects, the response --
never the formalization.

- pointwise accuracy: the share of judged (response, constraint) items whose verdict equals the truth, with a
  Wilson 95 % interval, overall and per Scope selector, primary Target and Range category; items the judge left
  unjudged are counted apart (coverage), never as right or wrong;
- pairwise agreement: for two responses to one instruction, win / tie / lose by the number of constraints each
  satisfies (over the constraints judged for both), by the truth and by the judge; the share of pairs where the
  two labels agree (ScopeIF appendix E.4);
- the static-tool ablation is the same run with a judge in mode "static" (and "llm" for a pure LLM judge).
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from itertools import combinations

from ifcore.coverage import scope_selector
from ifcore.judge.prompts import shipped_targets
from ifcore.stats import wilson
from ifcore.text import Doc
from ifcore.verify import verify

GROUPS = ("scope_selector", "primary_target", "range")


def items(responses: list[tuple[int, str]], instances: list[dict], formalized: dict) -> list[dict]:
    """One item per formalized constraint of each (instance id, response): the judge's inputs and the truth.
    `instances` and `formalized` as ifcore.bench.scopeif loads them."""
    by_id = {inst["id"]: inst for inst in instances}
    out = []
    for r, (instance_id, response) in enumerate(responses):
        inst = by_id.get(instance_id)
        if inst is None:
            raise ValueError(f"response {r}: no test instance with id {instance_id!r}")
        doc = Doc(response)
        for j, c in enumerate(inst["constraints"]):
            schema = formalized.get((instance_id, j))
            if schema is None:
                continue
            cat = c["category"]
            out.append({"response_index": r, "id": instance_id, "constraint_index": j,
                        "instruction": inst["prompt"], "constraint": c["constraint"], "response": response,
                        "targets": shipped_targets(inst, j), "truth": all(verify(s, doc).satisfied for s in schema),
                        "scope_selector": scope_selector(cat["scope"]), "primary_target": cat["primary_target"],
                        "range": cat["range"]})
    return out


def sample_responses(responses: list[tuple[int, str]], limit: int | None, seed: int = 0) -> list[tuple[int, str]]:
    """`limit` responses drawn by instruction: instructions in a seeded order, each contributing its responses in
    the file's order until `limit` are taken, so that responses to one instruction stay together (pairs remain).
    In the file's order."""
    if limit is None or limit >= len(responses):
        return responses
    ids = sorted({i for i, _ in responses})
    random.Random(seed).shuffle(ids)
    rank = {i: k for k, i in enumerate(ids)}
    by_instruction = sorted(range(len(responses)), key=lambda r: (rank[responses[r][0]], r))
    return [responses[r] for r in sorted(by_instruction[:limit])]


def _proportion(k: int, n: int) -> dict:
    p, lo, hi, n = wilson(k, n)
    return {"accuracy": p, "lo": lo, "hi": hi, "n": n}


def pointwise(rows: list[dict], verdicts: list[dict]) -> dict:
    """Accuracy over the judged items, overall and per category of each group, the judge's coverage, and
    `majority`: the accuracy of always giving the more common true verdict on the same items (the floor a judge
    must clear to tell anything)."""
    judged = [(row, v) for row, v in zip(rows, verdicts) if v["satisfied"] is not None]
    right = [row for row, v in judged if bool(v["satisfied"]) == row["truth"]]
    per = {g: defaultdict(lambda: [0, 0]) for g in GROUPS}
    for row, v in judged:
        for g in GROUPS:
            per[g][row[g]][0] += bool(v["satisfied"]) == row["truth"]
            per[g][row[g]][1] += 1
    confusion = {f"truth {t} / judge {j}": sum(1 for row, v in judged if (row["truth"], bool(v["satisfied"])) == (t, j))
                 for t in (True, False) for j in (True, False)}
    truths = [row["truth"] for row, _ in judged]
    majority = max(sum(truths), len(truths) - sum(truths)) / len(truths) if truths else math.nan
    return {**_proportion(len(right), len(judged)), "majority": majority, "items": len(rows), "judged": len(judged),
            "unjudged": len(rows) - len(judged), "confusion": confusion,
            "by_category": {g: {k: _proportion(*kn) for k, kn in sorted(d.items())} for g, d in per.items()}}


def pairwise(rows: list[dict], verdicts: list[dict]) -> dict:
    """Agreement of win/tie/lose labels between truth and judge over pairs of responses to one instance, each
    pair compared on the constraints judged for both responses (pairs with none in common are left out)."""
    by_response = defaultdict(dict)  # response index -> {constraint index: (truth, judge)}
    instance_of = {}
    for row, v in zip(rows, verdicts):
        if v["satisfied"] is not None:
            by_response[row["response_index"]][row["constraint_index"]] = (row["truth"], bool(v["satisfied"]))
        instance_of[row["response_index"]] = row["id"]
    groups = defaultdict(list)
    for r, instance_id in instance_of.items():
        groups[instance_id].append(r)
    agree = pairs = 0
    sign = lambda x: (x > 0) - (x < 0)
    for members in groups.values():
        for a, b in combinations(sorted(members), 2):
            shared = by_response[a].keys() & by_response[b].keys()
            if not shared:
                continue
            truth = sign(sum(by_response[a][j][0] - by_response[b][j][0] for j in shared))
            judge = sign(sum(by_response[a][j][1] - by_response[b][j][1] for j in shared))
            pairs += 1
            agree += truth == judge
    p, lo, hi, n = wilson(agree, pairs)
    return {"agreement": p, "lo": lo, "hi": hi, "pairs": n}


def evaluate(judge, rows: list[dict]) -> dict:
    """Judge every item (concurrently through `judge.many` when it has it) and measure it; returns the summary and
    the per-item verdicts."""
    asks = [(row["instruction"], row["constraint"], row["response"], row["targets"]) for row in rows]
    verdicts = judge.many(asks) if hasattr(judge, "many") else [judge(*a) for a in asks]
    sources = defaultdict(int)
    for v in verdicts:
        sources[str(v.get("source"))] += 1
    summary = {"pointwise": pointwise(rows, verdicts), "pairwise": pairwise(rows, verdicts),
               "sources": dict(sorted(sources.items())),
               "counts": dict(sorted(getattr(judge, "counts", {}).items()))}
    return {"summary": summary, "verdicts": verdicts}


def read_responses(path) -> list[tuple[int, str]]:
    """(instance id, response) rows of a JSONL file: {"id" or "instruction_id", "response"} (the format of
    `ifcore eval scopeif`, and of tests/data/scopeif_whole.jsonl); rows whose response is null are skipped."""
    from ifcore.jsonl import JsonlError, iter_jsonl

    out = []
    with open(path, "rb") as f:
        for n, row, problem in iter_jsonl(f, ("response",)):
            key = "id" if row is not None and "id" in row else "instruction_id"
            if problem is None and key not in row:
                problem = 'needs "id" or "instruction_id"'
            if problem is None and row["response"] is not None and not isinstance(row["response"], str):
                problem = f'"response": expected a string or null, got {type(row["response"]).__name__}'
            if problem is None and (not isinstance(row[key], int) or isinstance(row[key], bool)):
                problem = f'"{key}": expected an integer instance id'
            if problem:
                raise JsonlError(f"{path}:{n}: {problem}")
            if row["response"] is not None:
                out.append((row[key], row["response"]))
    if not out:
        raise JsonlError(f"{path}: no responses")
    return out


def report(summary: dict) -> str:
    """The summary as text: overall accuracy, coverage and agreement, then accuracy per category."""
    pw, pr = summary["pointwise"], summary["pairwise"]
    pct = lambda x: "  n/a" if x != x else f"{100 * x:5.1f}"
    lines = [f"pointwise accuracy {pct(pw['accuracy'])} % [{pct(pw['lo'])}, {pct(pw['hi'])}] over {pw['judged']} "
             f"judged of {pw['items']} items ({pw['unjudged']} unjudged)",
             f"pairwise agreement {pct(pr['agreement'])} % [{pct(pr['lo'])}, {pct(pr['hi'])}] over {pr['pairs']} pairs",
             f"verdict sources {summary['sources']}"]
    for g in GROUPS:
        lines.append(f"{g}:")
        for k, cell in pw["by_category"][g].items():
            lines.append(f"  {k:<28} {pct(cell['accuracy'])} % [{pct(cell['lo'])}, {pct(cell['hi'])}]  n={cell['n']}")
    return "\n".join(lines)


def conclusion(summary: dict) -> str:
    """One sentence computed from the numbers: is the judge better than always giving the majority verdict?"""
    pw = summary["pointwise"]
    if not pw["judged"]:
        return f"The judge judged none of the {pw['items']} items: nothing can be concluded about its accuracy."
    acc, lo, hi, base = pw["accuracy"], pw["lo"], pw["hi"], pw["majority"]
    where = f"{acc:.1%} [{lo:.1%}, {hi:.1%}] over {pw['judged']} judged items ({pw['unjudged']} unjudged)"
    if lo > base:
        return f"The judge beats always giving the majority verdict ({base:.1%}): accuracy {where}."
    if hi < base:
        return f"The judge is worse than always giving the majority verdict ({base:.1%}): accuracy {where}."
    return (f"The data cannot tell the judge from always giving the majority verdict ({base:.1%}): accuracy {where}; "
            "judge more items (or a stronger judge) to decide.")
