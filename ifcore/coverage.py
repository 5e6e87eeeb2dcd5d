"""How much of ScopeIF-Test schema v1 expresses: coverage of hand formalizations by taxonomy category.

The formalizations (tests/data/scopeif_formalized.jsonl, one line per natural-language constraint) give each
constraint's `schema` (a list of schema constraints, all of which must hold) or null with the `reason` it
cannot be expressed, and name in `extension` the proposed schema extensions (docs/schema_extensions.md) the
formalization needs. A constraint counts as expressed only when its whole meaning is encoded: a partial
encoding has a null `schema` (its objective part may sit in `partial_schema`, which is never counted).

`coverage(rows)` reports two fractions per group: `v1`, expressed by the schema as written in the spec
(no extension), and `adopted`, expressed once the extensions in `adopted` are part of the schema (by default
those the lead adopted). Groups follow the paper's figures: the Scope selector (Global, Traversal, Position,
Condition, or Nested when the label chains two or more parts), the primary and secondary Target, the Range.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from ifcore.jsonl import JsonlError, iter_jsonl

# Extensions of docs/schema_extensions.md that ifcore.schema accepts (a "Decision: adopted" line). X11 is
# `has` with match/case, adopted as clarification 1 of that file.
ADOPTED = frozenset({"X1", "X2", "X3", "X4", "X5", "X6", "X6b", "X7", "X8", "X9", "X10", "X11", "X12", "X13",
                     "X14"})

FIELDS = ("instruction_id", "constraint_index", "text", "category", "schema", "reason")


def load_formalized(path: str | Path) -> list[dict]:
    """The rows of a formalization file; each must have the FIELDS, and exactly one of schema / reason.
    A bad line raises JsonlError naming the file and line."""
    rows = []
    with open(path, "rb") as f:
        for n, row, problem in iter_jsonl(f, FIELDS):
            if not problem and (row["schema"] is None) == (row["reason"] is None):
                problem = "exactly one of schema and reason must be null"
            if problem:
                raise JsonlError(f"{path}:{n}: {problem}")
            rows.append(row)
    return rows


def scope_selector(label: str) -> str:
    """The paper's Scope class of a category label: `Global(Entire Response)` -> Global, any chain -> Nested."""
    parts = label.split(" -> ")
    return "Nested" if len(parts) > 1 else parts[0].split("(", 1)[0]


def category_groups(row: dict) -> dict[str, str]:
    c = row["category"]
    return {"scope": scope_selector(c["scope"]), "primary_target": c["primary_target"],
            "secondary_target": f'{c["primary_target"]} / {c["secondary_target"]}', "range": c["range"]}


def coverage(rows: list[dict], adopted=ADOPTED) -> dict:
    """{"overall": cell, "scope": {name: cell}, "primary_target": ..., "secondary_target": ..., "range": ...,
    "extensions": {name: constraints whose formalization needs it}, "reasons": {tag: count}}, where a cell is
    {"n", "v1", "adopted", "all", "frac_v1", "frac_adopted", "frac_all"}: v1 = expressed with no extension,
    adopted = with adopted extensions only, all = with every proposed extension."""
    adopted = frozenset(adopted)

    def cell() -> dict:
        return {"n": 0, "v1": 0, "adopted": 0, "all": 0}

    out: dict = {"overall": cell(), "scope": {}, "primary_target": {}, "secondary_target": {}, "range": {}}
    ext_use: Counter = Counter()
    reasons: Counter = Counter()
    for row in rows:
        ext = set(row.get("extension") or [])
        expressed = row["schema"] is not None
        hits = {"n": 1, "v1": expressed and not ext, "adopted": expressed and ext <= adopted, "all": expressed}
        cells = [out["overall"]] + [out[g].setdefault(v, cell()) for g, v in category_groups(row).items()]
        for c in cells:
            for k, v in hits.items():
                c[k] += int(v)
        if expressed:
            ext_use.update(ext)
        else:
            # The reason starts with its kind ("semantic: ...", "JSON values: ..."): the grouping in the docs.
            reasons[row["reason"].split(":", 1)[0].strip()] += 1
    for c in [out["overall"]] + [c for g in ("scope", "primary_target", "secondary_target", "range")
                                 for c in out[g].values()]:
        for k in ("v1", "adopted", "all"):
            c[f"frac_{k}"] = round(c[k] / c["n"], 4) if c["n"] else 0.0
    for g in ("scope", "primary_target", "secondary_target", "range"):
        out[g] = dict(sorted(out[g].items(), key=lambda kv: (-kv[1]["n"], kv[0])))
    out["extensions"] = dict(sorted(ext_use.items(), key=lambda kv: (-kv[1], kv[0])))
    out["reasons"] = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def table(cov: dict, group: str) -> str:
    """One coverage group as a Markdown table (for docs/coverage.md and docs/verification.md)."""
    rows = [("all constraints", cov["overall"])] if group == "overall" else list(cov[group].items())
    lines = ["| category | n | v1 | v1 + adopted | v1 + all proposed |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, c in rows:
        lines.append(f'| {name} | {c["n"]} | {c["v1"]} ({c["frac_v1"]:.0%}) | {c["adopted"]} ({c["frac_adopted"]:.0%})'
                     f' | {c["all"]} ({c["frac_all"]:.0%}) |')
    return "\n".join(lines)
