"""Schema v1 of a constraint (docs: constraint-schema.md): parsing, validation and writing back.

A constraint is data: `scope` (a path of selection steps), `target` (the integer measured on each selected
segment) and `range` (its admissible interval). `Constraint.from_dict` checks every field and raises a
`ConstraintError` naming the offending field path (`scope[1].index`) and what was expected; nothing is guessed.
The dicts are kept as given (so `to_dict` round-trips); `ifcore.verify` compiles them on first use.
"""
from __future__ import annotations

import copy
import difflib
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from ifcore.patterns import compile_pattern
from ifcore.text import BLOCK_KINDS, ELEMENT_KINDS, UNITS

SCHEMA_VERSION = 1

# The ScopeIF taxonomy labels, exactly as the ScopeIF-Test data spells them.
SCOPE_SELECTORS = ("Global", "Traversal", "Position", "Condition")
SCOPE_UNITS = ("Entire Response", "Paragraph", "Sentence", "Line", "Word", "Character", "Structural Block",
               "Structural Element")
TARGETS = {
    "Capacity": ("Text Length", "Unit Count"),
    "Literals": ("Specific Strings", "Literal Classes"),
    "Structure": ("Containers", "Members", "Nesting Depth"),
    "Checklist": ("Presence", "Validity"),
    "Pattern": ("Boundary", "Skeleton", "Surface"),
    "Relations": ("Ordering Relations", "Chaining Relations", "Positional Relations"),
}
RANGES = ("One-Sided Bounds", "Prohibition", "Equality", "Intervals", "Comparison", "Arithmetic Relations")

CLASSES = ("digit", "letter", "uppercase", "lowercase", "vowel", "consonant", "punctuation", "emoji",
           "uppercase_word", "capitalized_word", "lowercase_word")
VALID_FORMATS = ("json", "yaml", "xml", "integer", "decimal", "number", "date", "email", "url", "title_case",
                 "uppercase", "lowercase")
DEPTH_KINDS = ("list", "json")
BOUND_KEYS = ("min", "max", "eq", "gt", "lt", "ge", "le")
COUNTABLE = tuple(u for u in UNITS if u != "response") + ("occurrence", "class")
# The deepest nesting of objects and lists in one constraint (the shipped ones reach 7): deeper labels are
# rejected before anything recurses into them.
MAX_DEPTH = 32


class ConstraintError(ValueError):
    """A malformed constraint; the message starts with the field path that is wrong."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass(eq=False)
class Constraint:
    scope: list[dict]
    target: dict
    range: dict
    id: str | None = None
    text: str | None = None
    category: dict | None = None
    nonempty: bool = False  # the scope must select something: an empty selection is one missing record
    judge: bool = False  # X15: only `text` (and maybe `targets`), verified by the LLM judge (ifcore.judge.tgv)
    targets: list | None = None  # X15: the counting objects of `text`, when synthesis already extracted them
    _plan: Any = field(default=None, repr=False)  # compiled by ifcore.verify on first use

    @classmethod
    def from_dict(cls, d: Any, path: str = "") -> "Constraint":
        if not isinstance(d, dict):
            raise ConstraintError(path, f"expected a constraint object, got {_show(d)}")
        _check_depth(d, path)
        p = _join(path)
        if "judge" in d:
            return cls._judged(d, p)
        _check_fields(d, {"id", "text", "scope", "target", "range", "category", "nonempty", "judge"}, p,
                      "a constraint")
        for k in ("target", "range"):
            if k not in d:
                raise ConstraintError(p(k), "missing (a constraint needs scope, target and range)")
        scope = d.get("scope", [])
        if scope is None:
            scope = []
        check_scope(scope, p("scope"))
        check_target(d["target"], p("target"))
        check_range(d["range"], p("range"), allow_previous=True)
        if "id" in d and not isinstance(d["id"], (str, int)):
            raise ConstraintError(p("id"), f"expected a string, got {_show(d['id'])}")
        if "text" in d and not isinstance(d["text"], str):
            raise ConstraintError(p("text"), f"expected a string, got {_show(d['text'])}")
        if "category" in d:
            check_category(d["category"], p("category"))
        if "nonempty" in d and not isinstance(d["nonempty"], bool):
            raise ConstraintError(p("nonempty"), f"expected true or false, got {_show(d['nonempty'])}")
        d = copy.deepcopy(d)
        return cls(scope=d.get("scope", []) or [], target=d["target"], range=d["range"], id=d.get("id"),
                   text=d.get("text"), category=d.get("category"), nonempty=d.get("nonempty", False))

    @classmethod
    def _judged(cls, d: dict, p) -> "Constraint":
        """X15, a judged constraint: {"text": ..., "judge": true} with optional id, category and targets (a list
        of counting objects), no scope, target or range: what the schema cannot express, an LLM judge verifies."""
        if d["judge"] is not True:
            raise ConstraintError(p("judge"), f"expected true (a judged constraint), got {_show(d['judge'])}")
        allowed = {"id", "text", "judge", "category", "targets"}
        for k in d:
            if k not in allowed:
                raise ConstraintError(p(k), f"a judged constraint has no {k}; expected fields {sorted(allowed)}")
        if not isinstance(d.get("text"), str) or not d["text"].strip():
            raise ConstraintError(p("text"), "a judged constraint needs its text, the constraint in words")
        if "id" in d and not isinstance(d["id"], (str, int)):
            raise ConstraintError(p("id"), f"expected a string, got {_show(d['id'])}")
        if "category" in d:
            check_category(d["category"], p("category"))
        targets = d.get("targets")
        if targets is not None and (not isinstance(targets, list) or not targets
                                    or not all(isinstance(t, (str, dict)) for t in targets)):
            raise ConstraintError(p("targets"), f"expected a non-empty list of counting objects, got {_show(targets)}")
        d = copy.deepcopy(d)
        return cls(scope=[], target={}, range={}, id=d.get("id"), text=d["text"], category=d.get("category"),
                   judge=True, targets=d.get("targets"))

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.id is not None:
            out["id"] = self.id
        if self.text is not None:
            out["text"] = self.text
        if self.judge:
            out["judge"] = True
            if self.category is not None:
                out["category"] = copy.deepcopy(self.category)
            if self.targets is not None:
                out["targets"] = copy.deepcopy(self.targets)
            return out
        out["scope"] = copy.deepcopy(self.scope)
        out["target"] = copy.deepcopy(self.target)
        out["range"] = copy.deepcopy(self.range)
        if self.category is not None:
            out["category"] = copy.deepcopy(self.category)
        if self.nonempty:
            out["nonempty"] = True
        return out

    @property
    def selector(self) -> str:
        """The ScopeIF selector of the scope: Global, Traversal, Position, Condition or Nested."""
        return scope_selector(self.scope)


def scope_selector(scope: list[dict]) -> str:
    if not scope:
        return "Global"
    if len(scope) > 1:
        return "Nested"
    return {"each": "Traversal", "at": "Position", "slice": "Position", "where": "Condition"}[scope[0]["select"]]


def parse_label(label: Any, where: str = "label") -> list[Constraint]:
    """The constraints of one dataset sample. A label is `{"constraints": [...]}` or a bare list of
    constraints, as a JSON string or already decoded. Errors name `where` and the field path."""
    if isinstance(label, (bytes, bytearray)):
        label = label.decode("utf-8", "replace")
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except ValueError as e:
            raise ConstraintError(where, f"not valid JSON ({e})") from None
        except RecursionError:
            raise ConstraintError(where, "not valid JSON (nested too deeply)") from None
    if isinstance(label, dict):
        if "constraints" not in label:
            raise ConstraintError(where, 'expected an object with a "constraints" list')
        items, base = label["constraints"], f"{where}.constraints"
    else:
        items, base = label, where
    if not isinstance(items, list):
        raise ConstraintError(base, f"expected a list of constraints, got {_show(items)}")
    return [Constraint.from_dict(c, f"{base}[{i}]") for i, c in enumerate(items)]


# ---- validation -----------------------------------------------------------------------------------------

def _join(path: str):
    return lambda k: f"{path}.{k}" if path else str(k)


def _check_fields(d: dict, allowed, p, what: str) -> None:
    """Unknown keys first (a typo `slect` is named as itself, not as a missing `select`), with a did-you-mean."""
    for k in d:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), sorted(allowed), 1)
            raise ConstraintError(p(k), f"unknown field{f' (did you mean {close[0]!r}?)' if close else ''}; "
                                        f"{what} takes {sorted(allowed)}")


def _show(x: Any) -> str:
    try:
        s = json.dumps(x, ensure_ascii=False, default=str) if not isinstance(x, str) else repr(x)
    except (ValueError, RecursionError):  # a circular or too deeply nested value
        s = f"a {type(x).__name__}"
    return s if len(s) <= 60 else s[:57] + "..."


def _check_depth(d: Any, path: str) -> None:
    """Iteratively, so that a label nested thousands deep is an error naming where, not a RecursionError."""
    stack = [(d, path, 1)]
    while stack:
        x, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConstraintError(where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(x, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(x))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    """A finite number within float range: bounds meet float arithmetic in the graded rewards."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) <= sys.float_info.max


def _need_str(x: Any, path: str, nonempty: bool = True) -> None:
    if not isinstance(x, str) or (nonempty and not x):
        raise ConstraintError(path, f"expected a non-empty string, got {_show(x)}")


def _need_choice(x: Any, choices, path: str) -> None:
    if x not in choices:
        raise ConstraintError(path, f"expected one of {list(choices)}, got {_show(x)}")


UNIT_OPTIONS = ("kind", "level", "ordered", "lang", "column", "prose", "all_text", "exclude_nested")


def _unit_kind(d: dict, path: str, unit_key: str = "unit", units=UNITS) -> None:
    """A unit name, with the `kind` that `block` and `element` need and the options that filter units
    (extension X6: heading/section `level`, list `ordered`, code `lang`, table cell `column`; X7: `prose`)."""
    p = _join(path)
    unit = d.get(unit_key)
    _need_choice(unit, units, p(unit_key))
    kind = d.get("kind")
    if unit in ("block", "element"):
        kinds = BLOCK_KINDS if unit == "block" else ELEMENT_KINDS
        if "kind" not in d:
            raise ConstraintError(p("kind"), f"unit {unit!r} needs a kind, one of {list(kinds)}")
        _need_choice(kind, kinds, p("kind"))
    elif "kind" in d:
        raise ConstraintError(p("kind"), f"only block and element units take a kind, not {unit!r}")
    where = {"level": (unit == "section" or kind == "heading", "section and heading units"),
             "ordered": (kind in ("list", "list_item"), "list blocks and list_item elements"),
             "lang": (kind == "code", "code blocks"),
             "column": (kind == "table_cell", "table_cell elements"),
             "prose": (unit in ("paragraph", "sentence"), "paragraph and sentence units"),
             "all_text": (unit in ("paragraph", "sentence") and not d.get("prose"),
                          "paragraph and sentence units without prose"),
             "exclude_nested": (kind == "list_item", "list_item elements")}
    for opt, (ok, who) in where.items():
        if opt not in d:
            continue
        if not ok:
            raise ConstraintError(p(opt), f"only {who} take {opt!r}")
        v = d[opt]
        good = {"level": _is_int(v) and 1 <= v <= 6, "ordered": isinstance(v, bool), "prose": isinstance(v, bool),
                "all_text": isinstance(v, bool), "exclude_nested": isinstance(v, bool),
                "lang": isinstance(v, str) and v != "",
                "column": (_is_int(v) and v >= 0) or (isinstance(v, str) and v != "")}[opt]
        if not good:
            want = {"level": "an integer 1-6", "ordered": "true or false", "prose": "true or false",
                    "all_text": "true or false", "exclude_nested": "true or false",
                    "lang": "a non-empty string", "column": "a column index (0-based) or header text"}[opt]
            raise ConstraintError(p(opt), f"expected {want}, got {_show(v)}")


def check_scope(scope: Any, path: str) -> None:
    if not isinstance(scope, list):
        raise ConstraintError(path, f"expected a list of selection steps ([] for Global), got {_show(scope)}")
    for i, step in enumerate(scope):
        sp = f"{path}[{i}]"
        p = _join(sp)
        if not isinstance(step, dict):
            raise ConstraintError(sp, f"expected a step object, got {_show(step)}")
        _check_fields(step, {"unit", "select", *UNIT_OPTIONS, "index", "indices", "if", "start", "stop"}, p,
                      "a selection step")
        _unit_kind(step, sp)
        sel = step.get("select")
        _need_choice(sel, ("each", "at", "where", "slice"), p("select"))
        allowed = {"unit", "select", *UNIT_OPTIONS} | {"each": set(), "at": {"index", "indices"},
                                                       "where": {"if"}, "slice": {"start", "stop"}}[sel]
        for k in step:
            if k not in allowed:
                raise ConstraintError(p(k), f"not a field of a{'n' * (sel in ('each', 'at'))} {sel!r} step; "
                                            f"expected {sorted(allowed)}")
        if sel == "at":
            if ("index" in step) == ("indices" in step):
                raise ConstraintError(p("index"), 'an "at" step needs exactly one of index or indices')
            if "index" in step and not _is_int(step["index"]):
                raise ConstraintError(p("index"), f"expected an integer, got {_show(step['index'])}")
            if "indices" in step:
                ix = step["indices"]
                if not isinstance(ix, list) or not ix:
                    raise ConstraintError(p("indices"), f"expected a non-empty list of integers, got {_show(ix)}")
                for j, v in enumerate(ix):
                    if not _is_int(v):
                        raise ConstraintError(f"{p('indices')}[{j}]", f"expected an integer, got {_show(v)}")
        elif sel == "where":
            if "if" not in step:
                raise ConstraintError(p("if"), 'a "where" step needs an "if" condition')
            check_condition(step["if"], p("if"))
        elif sel == "slice":
            for k in ("start", "stop"):
                if k in step and not _is_int(step[k]):
                    raise ConstraintError(p(k), f"expected an integer, got {_show(step[k])}")


def check_condition(cond: Any, path: str) -> None:
    """`{"target": T, "range": R}` or a non-empty list of them (all must hold)."""
    conds = cond if isinstance(cond, list) else [cond]
    if not conds:
        raise ConstraintError(path, "expected a condition or a non-empty list of conditions")
    for j, c in enumerate(conds):
        cp = f"{path}[{j}]" if isinstance(cond, list) else path
        if not isinstance(c, dict) or not {"target", "range"} <= set(c) or set(c) - {"scope", "target", "range"}:
            raise ConstraintError(cp, f'expected {{"target": ..., "range": ...}} (and optionally "scope"), '
                                      f'got {_show(c)}')
        if "scope" in c:  # extension X10: measured on parts of the unit; holds when all selected parts pass
            check_scope(c["scope"], f"{cp}.scope")
        check_target(c["target"], f"{cp}.target")
        check_range(c["range"], f"{cp}.range", allow_previous=False)


TARGET_HEADS = ("count", "depth", "has", "valid", "matches", "starts_with", "ends_with", "wrapped", "sorted",
                "chain", "acrostic", "distinct", "pairs", "satisfies")
# Keys of a unit for distinct and pairs (extensions X3, X4); they compose with a dot, left to right.
KEYS = ("text", "first_word", "last_word", "first_letter", "last_letter", "first_char", "last_char", "letters",
        "words", "chars")
RELATIONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _check_key(v: Any, path: str) -> None:
    if not isinstance(v, str) or not all(part in KEYS for part in v.split(".")):
        raise ConstraintError(path, f"expected a key from {list(KEYS)} (dot-composed, e.g. last_word.first_letter), "
                                    f"got {_show(v)}")


_UNIT_OPTS = set(UNIT_OPTIONS)
TARGET_FIELDS = {  # the fields each kind of target (by its head key) takes
    "count": {"count", "of", "any_of", "match", "case", "where"} | _UNIT_OPTS,
    "depth": {"depth"},
    "has": {"has", "as", "match", "case"},
    "valid": {"valid"},
    "matches": {"matches"},
    "starts_with": {"starts_with", "case"},
    "ends_with": {"ends_with", "case"},
    "wrapped": {"wrapped"},
    "sorted": {"sorted", "unit", "order"} | _UNIT_OPTS,
    "chain": {"chain", "unit"} | _UNIT_OPTS,
    "acrostic": {"acrostic", "unit", "case"} | _UNIT_OPTS,
    "distinct": {"distinct", "by", "min_occurrences"} | _UNIT_OPTS,
    "pairs": {"pairs", "left", "rel", "right"} | _UNIT_OPTS,
    "satisfies": {"satisfies"},
}


def check_target(t: Any, path: str) -> None:
    p = _join(path)
    if not isinstance(t, dict) or not t:
        raise ConstraintError(path, f"expected a target object, got {_show(t)}")
    _check_fields(t, set().union(*TARGET_FIELDS.values()), p, "a target")
    heads = [k for k in TARGET_HEADS if k in t]
    if len(heads) != 1:
        raise ConstraintError(path, f"expected exactly one of {', '.join(TARGET_HEADS)}; got {sorted(t)}")
    head = heads[0]
    allowed = TARGET_FIELDS[head]
    for k in t:
        if k not in allowed:
            raise ConstraintError(p(k), f"not a field of a {head!r} target; expected {sorted(allowed)}")
    if "case" in t:
        _need_choice(t["case"], ("insensitive", "sensitive"), p("case"))
    if "match" in t:
        _need_choice(t["match"], ("word", "substring"), p("match"))
    v = t[head]
    if head == "count":
        _need_choice(v, COUNTABLE, p("count"))
        literal = v in ("occurrence", "class")
        for k in ("any_of", "match", "case") if v != "occurrence" else ():
            if k in t:
                raise ConstraintError(p(k), "only occurrence counts take this field")
        for k in (*UNIT_OPTIONS, "where") if literal else ("of",):
            if k in t:
                raise ConstraintError(p(k), f"a {v!r} count does not take this field" if literal
                                      else "only occurrence and class counts take this field")
        if v == "occurrence":
            if ("of" in t) == ("any_of" in t):
                raise ConstraintError(p("of"), 'an occurrence count needs exactly one of "of" or "any_of"')
            if "of" in t:
                _need_str(t["of"], p("of"))
            else:
                if not isinstance(t["any_of"], list) or not t["any_of"]:
                    raise ConstraintError(p("any_of"), f"expected a non-empty list of strings, got {_show(t['any_of'])}")
                for j, s in enumerate(t["any_of"]):
                    _need_str(s, f"{p('any_of')}[{j}]")
        elif v == "class":
            _need_choice(t.get("of"), CLASSES, p("of"))
        else:
            _unit_kind(t, path, "count", COUNTABLE)
            if "where" in t:
                check_condition(t["where"], p("where"))
    elif head == "depth":
        _need_choice(v, DEPTH_KINDS, p("depth"))
    elif head == "has":
        if not isinstance(v, list) or not v:
            raise ConstraintError(p("has"), f"expected a non-empty list of strings, got {_show(v)}")
        for j, s in enumerate(v):
            _need_str(s, f"{p('has')}[{j}]")
        if "as" in t:
            _need_choice(t["as"], ("text", "heading", "json_key"), p("as"))
    elif head == "valid":
        _need_choice(v, VALID_FORMATS, p("valid"))
    elif head == "satisfies":  # extension X8: how many of the conditions hold
        if not isinstance(v, list) or not v:
            raise ConstraintError(p("satisfies"), f"expected a non-empty list of conditions, got {_show(v)}")
        check_condition(v, p("satisfies"))
    elif head == "matches":
        _need_str(v, p("matches"))
        try:
            compile_pattern(v)
        except ValueError as e:
            raise ConstraintError(p("matches"), f"cannot be used as a regular expression: {e}") from None
    elif head in ("starts_with", "ends_with"):
        _need_str(v, p(head))
    elif head == "wrapped":
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(s, str) and s for s in v)):
            raise ConstraintError(p("wrapped"), f"expected [left, right], two non-empty strings, got {_show(v)}")
    elif head in ("distinct", "pairs"):
        _unit_kind(t, path, head)
        if head == "distinct":
            _check_key(t.get("by", "text"), p("by"))
            m = t.get("min_occurrences", 1)
            if not _is_int(m) or m < 1:
                raise ConstraintError(p("min_occurrences"), f"expected an integer >= 1, got {_show(m)}")
        else:
            for k in ("left", "right"):
                if k not in t:
                    raise ConstraintError(p(k), "a pairs target needs left, rel and right")
                _check_key(t[k], p(k))
            _need_choice(t.get("rel"), RELATIONS, p("rel"))
    else:  # sorted, chain, acrostic relate units of one kind
        if head == "sorted":
            _need_choice(v, ("alphabetical", "numeric"), p("sorted"))
            if "order" in t:
                _need_choice(t["order"], ("ascending", "descending"), p("order"))
        elif head == "chain":
            _need_choice(v, ("last_first",), p("chain"))
        else:
            _need_str(v, p("acrostic"))
        if "unit" not in t:
            raise ConstraintError(p("unit"), f"a {head!r} target needs the unit it relates")
        _unit_kind(t, path)


def check_range(r: Any, path: str, allow_previous: bool) -> None:
    p = _join(path)
    if not isinstance(r, dict) or not r:
        raise ConstraintError(path, f"expected a range object such as {{\"min\": 1}}, got {_show(r)}")
    for k in r:
        if k not in BOUND_KEYS:
            close = difflib.get_close_matches(str(k), BOUND_KEYS, 1)
            raise ConstraintError(p(k), f"unknown bound{f' (did you mean {close[0]!r}?)' if close else ''}; "
                                        f"expected one of {list(BOUND_KEYS)}")
    if "eq" in r and len(r) > 1:
        raise ConstraintError(p("eq"), "eq cannot be combined with other bounds")
    for k, v in r.items():
        _check_value(v, p(k), allow_previous)
    lo = [r[k] for k in ("min", "ge") if k in r and _is_num(r[k])]
    hi = [r[k] for k in ("max", "le") if k in r and _is_num(r[k])]
    if lo and hi and max(lo) > min(hi):
        raise ConstraintError(path, f"empty interval: lower bound {max(lo)} above upper bound {min(hi)}")


def _check_value(v: Any, path: str, allow_previous: bool) -> None:
    if _is_num(v):
        return
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise ConstraintError(path, f"expected a finite number within float range, got {_show(v)}")
    if v == "previous":
        if not allow_previous:
            raise ConstraintError(path, '"previous" is not allowed here (a condition compares a unit with itself)')
        return
    if isinstance(v, dict) and ("times" in v or "plus" in v):
        p = _join(path)
        op = "times" if "times" in v else "plus"
        if set(v) != {op, "of"}:
            raise ConstraintError(path, f'expected {{"{op}": k, "of": REF}}, got {_show(v)}')
        if not _is_num(v[op]):
            raise ConstraintError(p(op), f"expected a finite number within float range, got {_show(v[op])}")
        _check_value(v["of"], p("of"), allow_previous)
        if _is_num(v["of"]):
            raise ConstraintError(p("of"), "expected a reference or \"previous\", not a number")
        return
    if isinstance(v, dict) and "target" in v:
        p = _join(path)
        if set(v) - {"scope", "target"}:
            raise ConstraintError(path, f'a reference has only "scope" and "target", got {sorted(v)}')
        if v.get("scope") in ("self", "parent"):  # extension X9: the segment being checked, or its parent
            if not allow_previous:
                raise ConstraintError(p("scope"), f'"{v["scope"]}" is not allowed in a condition')
        else:
            check_scope(v.get("scope", []), p("scope"))
        check_target(v["target"], p("target"))
        return
    raise ConstraintError(path, 'expected a number, "previous", a reference {"scope": [...], "target": {...}} '
                                f'or {{"times"|"plus": k, "of": ...}}, got {_show(v)}')


def check_category(c: Any, path: str) -> None:
    p = _join(path)
    if not isinstance(c, dict):
        raise ConstraintError(path, f"expected an object, got {_show(c)}")
    for k, v in c.items():
        if k not in ("scope", "primary_target", "secondary_target", "range"):
            raise ConstraintError(p(k), "unknown field; expected scope, primary_target, secondary_target, range")
        if not isinstance(v, str):
            raise ConstraintError(p(k), f"expected a string, got {_show(v)}")
    if "primary_target" in c:
        _need_choice(c["primary_target"], TARGETS, p("primary_target"))
        if "secondary_target" in c:
            _need_choice(c["secondary_target"], TARGETS[c["primary_target"]], p("secondary_target"))
    if "range" in c:
        _need_choice(c["range"], RANGES, p("range"))
    if "scope" in c:
        for part in c["scope"].split(" -> "):
            m = re.fullmatch(r"(\w+)\((.+)\)", part.strip())
            if not m or m.group(1) not in SCOPE_SELECTORS or m.group(2) not in SCOPE_UNITS:
                raise ConstraintError(p("scope"), f"expected Selector(Unit) parts joined by ' -> ' from "
                                                  f"{list(SCOPE_SELECTORS)} x {list(SCOPE_UNITS)}, got {part!r}")
