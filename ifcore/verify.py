"""Deterministic verification of schema-v1 constraints: `verify(constraint, response) -> Verdict`.

A constraint is compiled once (cached on the Constraint) into three parts that read like the schema:
- the scope: selection steps mapping each current segment to its sub-segments (Traversal, Position,
  Condition, slices), remembering each segment's parent so that "previous" stays within one parent;
- the target: one entry of `TARGETS`, a small measuring function `(doc, span) -> (value, evidence spans)`;
- the range: bounds that may refer to the previous segment or to another measurement of the response.
Verifying yields one record (lo, hi, actual, span) per selected segment, as ScopeIF's tool-grounded judge
does (section 5.1), and the evidence spans that decided the verdict (RTT's relevance labels).
"""
from __future__ import annotations

import bisect
import contextvars
import datetime
import itertools
import json
import math
import re
import threading
import unicodedata
from collections import OrderedDict
from xml.etree import ElementTree
from dataclasses import dataclass, field
from functools import lru_cache

import emoji
import yaml

from ifcore import reward_math
from ifcore.jsonl import iter_jsonl
from ifcore.patterns import code_point_runs, compile_pattern, cpu_clock
from ifcore.schema import Constraint, ConstraintError
from ifcore.text import Doc, Span, json_depth, markup_delimiters, strip_markup, strip_span, word_texts

# Part of every training run's identity and every cached asset's key (ifcore.train): bump it when a change of
# segmentation or measurement moves verdicts, so that no run rewarded by the old verifier is reused as new.
# 3: reader semantics (issue 13): prose sentences with abbreviations, paragraphs without non-prose lines, words
#    split at dashes and trimmed of markup, markup-free character counts, "Text\n---" a paragraph and a rule.
VERIFY_VERSION = 3

# CPU seconds that label regular expressions may take in one verify() call: base + per character of the
# response. Only a pattern that backtracks badly comes near it (RE2 runs the rest in linear time); a segment
# whose search runs out is scored unevaluated and the verdict says `budget_exceeded`.
REGEX_CPU_SECONDS = (0.25, 1e-5)
_REGEX_BUDGET: contextvars.ContextVar = contextvars.ContextVar("regex_budget", default=None)
# Segmentations of recently verified response strings, so that verify(c, text) called once per constraint
# segments the response once, as verify_all does. Bounded in entries and in response characters.
DOC_CACHE_ENTRIES = 32
DOC_CACHE_CHARS = 1_000_000
_DOCS: OrderedDict = OrderedDict()
_DOCS_CHARS = 0
_DOCS_LOCK = threading.Lock()

Measure = tuple[int, list[Span]]
_MARKUP_CHAR_RE = re.compile(r"[*_`~]")


@dataclass
class Record:
    lo: float | None
    hi: float | None
    actual: int | None
    span: Span

    @property
    def ok(self) -> bool:
        return self.actual is not None and (self.lo is None or self.actual >= self.lo) and (
            self.hi is None or self.actual <= self.hi)

    def to_dict(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "actual": self.actual, "span": list(self.span)}


@dataclass
class Verdict:
    satisfied: bool
    records: list[Record]
    evidence: list[Span] = field(default_factory=list)
    budget_exceeded: bool = False  # a label regex ran out of REGEX_CPU_SECONDS; its segments count violated
    selected: int = 0  # existing segments the scope selected; 0 says that a pass was vacuous

    def graded(self, alpha: float = 3.0) -> float:
        """g_i, ScopeIF eq. 6: the geometric mean of the records' graded rewards (eq. 5, 8, 9); 1 with no
        records (vacuous truth), 0 when any record is a missing segment. alpha must be finite and positive."""
        alpha = reward_math.check_alpha(alpha)
        if not self.records:
            return 1.0
        logs = 0.0
        for r in self.records:
            g = reward_math.graded(r.lo, r.hi, r.actual, alpha)
            if g <= 0.0:
                return 0.0
            logs += math.log(g)
        return math.exp(logs / len(self.records))

    def to_dict(self, alpha: float = 3.0) -> dict:
        out = {"satisfied": self.satisfied, "records": [r.to_dict() for r in self.records],
               "evidence": [list(e) for e in self.evidence], "graded": self.graded(alpha),
               "selected": self.selected}
        if self.budget_exceeded:
            out["budget_exceeded"] = True
        return out


def _doc(response: str | Doc) -> Doc:
    """The response's segmentation, reused while the string is among the recently verified ones."""
    global _DOCS_CHARS
    if isinstance(response, Doc):
        return response
    with _DOCS_LOCK:
        doc = _DOCS.get(response) if isinstance(response, str) else None
        if doc is not None:
            _DOCS.move_to_end(response)
            return doc
    doc = Doc(response)
    if len(response) <= DOC_CACHE_CHARS:
        with _DOCS_LOCK:
            if response not in _DOCS:
                _DOCS[response] = doc
                _DOCS_CHARS += len(response)
            while len(_DOCS) > DOC_CACHE_ENTRIES or _DOCS_CHARS > DOC_CACHE_CHARS:
                _DOCS_CHARS -= len(_DOCS.popitem(last=False)[0])
    return doc


def verify(constraint: Constraint | dict, response: str | Doc) -> Verdict:
    """Verify one constraint against one response (a str, or a `Doc` shared by all its constraints)."""
    c = constraint if isinstance(constraint, Constraint) else Constraint.from_dict(constraint)
    if c.judge:
        raise ConstraintError("", f"{c.text[:60]!r} is a judged constraint: an LLM judge verifies it "
                                  "(score_response(..., judge=...), ifcore.judge.tgv)")
    doc = _doc(response)
    if c._plan is None:
        last = (c.scope[-1]["unit"], c.scope[-1].get("kind")) if c.scope else ("response", None)
        c._plan = (_compile_scope(c.scope), _compile_target(c.target, last), _compile_range(c.range),
                   _has_key([c.scope, c.target, c.range], "matches"))
    if not c._plan[3]:
        return _verify(c, doc, None)
    base, per_char = REGEX_CPU_SECONDS
    budget = [cpu_clock() + base + per_char * len(doc.text), False]  # deadline (a cpu_clock() value), exceeded
    token = _REGEX_BUDGET.set(budget)
    try:
        return _verify(c, doc, budget)
    finally:
        _REGEX_BUDGET.reset(token)


def _has_key(x, key: str) -> bool:
    stack = [x]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if key in x:
                return True
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def _verify(c: Constraint, doc: Doc, budget: list | None) -> Verdict:
    select, measure, (bounds, uses_previous), _ = c._plan
    records, ev_all, ev_bad = [], [], []
    prev_value, prev_group, existing = None, object(), 0
    selected = select(doc, doc.root)
    if not selected and c.nonempty:  # the instruction presupposes what the scope looks for: a missing record
        return Verdict(False, [Record(None, None, None, doc.root)], [doc.root], bool(budget and budget[1]), 0)
    for span, missing, group, parent in selected:
        if missing:
            if uses_previous:
                prev_group = object()  # nothing to compare the next segment with
                continue
            lo, hi, _ = bounds(doc, None, span, parent)
            rec, ev = Record(lo, hi, None, span), [span]
        else:
            existing += 1
            value, ev = measure(doc, span)
            has_prev = group == prev_group
            prev, prev_value, prev_group = prev_value, value, group
            if uses_previous and not has_prev:
                continue
            lo, hi, resolved = bounds(doc, prev, span, parent)
            rec = Record(lo, hi, value if resolved else None, span)
        records.append(rec)
        ev_all.extend(ev)
        if not rec.ok:
            ev_bad.extend(ev)
    satisfied = not ev_bad
    return Verdict(satisfied, records, _merge(ev_bad if ev_bad else ev_all), bool(budget and budget[1]), existing)


def verify_all(constraints: list[Constraint | dict], response: str | Doc) -> list[Verdict]:
    """All constraints of one response against one shared segmentation."""
    doc = _doc(response)
    return [verify(c, doc) for c in constraints]


def verify_jsonl(fin, fout, alpha: float = 3.0, constraints: list | None = None) -> dict:
    """The `ifcore verify` command: every line of `fin` (bytes or str lines, each a JSON object with "response"
    and "constraints", or "response" alone when `constraints`, a shared list of constraint dicts, is given) gets
    exactly one line in `fout`, flushed: {"line": N, "id": the row's id if it has one, "verdicts": [each with its
    constraint's "id"], rewards}, or {"line": N, "id"?, "error": "line N: ..."}; a blank line gets an error line
    too, so that output line N answers input line N. Whatever goes wrong on a line stays on that line; a line that
    is not UTF-8 is read with replacement characters and its result carries a "warning". Output is strict JSON
    (never NaN). Returns {"lines": ..., "ok": ..., "errors": ...}; ValueError naming alpha unless it is finite
    and positive, and naming the input when its first line opens a pretty-printed JSON document (not JSON Lines)."""
    alpha = reward_math.check_alpha(alpha)
    shared = None if constraints is None else [Constraint.from_dict(c, f"--constraints[{i}]")
                                               for i, c in enumerate(constraints)]
    lines = iter(fin)
    head = next(lines, None)  # json.dump(indent=...) opens with `{` or `[` alone on the first line
    if head is not None and (head.decode("utf-8", "replace") if isinstance(head, bytes) else head).strip() in ("{", "[", "[{"):
        raise ValueError("the input is one pretty-printed JSON document, not JSON Lines (one object per line): "
                         "write each {response, constraints} object on a line of its own (`jq -c`)")
    counts = {"lines": 0, "ok": 0, "errors": 0}
    for n, obj, problem in iter_jsonl(itertools.chain([] if head is None else [head], lines), blank="blank line"):
        counts["lines"] += 1
        out = {"line": n}
        try:
            if obj is None:
                raise ValueError(problem)
            if "id" in obj:
                out["id"] = obj["id"]
            if not isinstance(obj.get("response"), str):
                raise ValueError('"response": expected a string')
            if shared is not None and "constraints" in obj:
                raise ValueError('"constraints": given on the line and by --constraints; give them one way')
            if shared is None and not isinstance(obj.get("constraints"), list):
                raise ValueError('"constraints": expected a list of constraints (or give --constraints FILE)')
            cs = shared or [Constraint.from_dict(c, f"constraints[{i}]") for i, c in enumerate(obj["constraints"])]
            verdicts = verify_all(cs, obj["response"])
            sat = [v.satisfied for v in verdicts]
            g = [v.graded(alpha) for v in verdicts]
            line = json.dumps({**out, "verdicts": [{"id": c.id, **v.to_dict(alpha)} for c, v in zip(cs, verdicts)],
                               "ila": reward_math.ila(sat), "cla": reward_math.cla(sat),
                               "scopeif": reward_math.scopeif(sat, g), "scopeif_flat": reward_math.scopeif_flat(g),
                               **({"warning": f"line {n}: {problem}"} if problem else {})},
                              allow_nan=False, ensure_ascii=False)
            counts["ok"] += 1
        except Exception as e:  # anything, RecursionError and MemoryError included: the next line goes on
            counts["errors"] += 1
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            try:
                line = json.dumps({**out, "error": f"line {n}: {' '.join(why.split())}"}, ensure_ascii=False)
            except (TypeError, ValueError):  # an id JSON cannot carry back (NaN): the line number joins it
                line = json.dumps({"line": n, "error": f"line {n}: {' '.join(why.split())}"}, ensure_ascii=False)
        fout.write(line + "\n")
        fout.flush()
    return counts


# ---- scope ----------------------------------------------------------------------------------------------

def _unit_getter(d: dict, unit_key: str = "unit", parent: tuple | None = None):
    """`(doc, seg) -> spans` for a unit with its kind and filter options (extensions X6, X7). When the
    segments are themselves units of the same kind (`parent`), a segment is not one of its own parts: the
    list items of a list item are its sub-items."""
    # prose: True keeps CommonMark paragraphs outside lists and tables (X7); "all" reads every run of
    # non-blank lines as a paragraph and every text leaf (headings, cells, code) as sentences, as v1 did.
    unit, kind = d[unit_key], d.get("kind")
    prose = True if d.get("prose") else ("all" if d.get("all_text") else False)
    filters = []
    if parent == (unit, kind) and unit in ("block", "element", "section"):
        filters.append(lambda doc, sp, seg: sp != seg)
    if "level" in d:
        filters.append(lambda doc, sp, seg, v=d["level"]: doc.markdown.level.get(sp) == v)
    if "ordered" in d:
        filters.append(lambda doc, sp, seg, v=d["ordered"]: doc.markdown.ordered.get(sp) == v)
    if "lang" in d:
        filters.append(lambda doc, sp, seg, v=d["lang"].lower(): doc.markdown.lang.get(sp) == v)
    if "column" in d:
        col = d["column"]
        if isinstance(col, int):
            filters.append(lambda doc, sp, seg: doc.markdown.column.get(sp, (None, ""))[0] == col)
        else:
            want = _bare(col).casefold()  # "**Price:**" is the Price column
            filters.append(lambda doc, sp, seg: _bare(doc.markdown.column.get(sp, (None, ""))[1]).casefold() == want)

    own = bool(d.get("exclude_nested"))

    def get(doc: Doc, seg: Span) -> list[Span]:
        spans = doc.within(unit, seg, kind, prose)
        for f in filters:
            spans = [sp for sp in spans if f(doc, sp, seg)]
        if own:  # extension X6b: a list item without its nested sub-lists
            spans = [doc.markdown.item_own[sp] for sp in spans]
        return spans

    return get


def _compile_scope(scope: list[dict]):
    """The scope as a function doc, root -> [(span, missing, group)] in document order; `group` identifies
    the parent segment of the last step, so that "previous" never crosses parents."""
    steps = []
    parent = ("response", None)
    for step in scope:
        get = _unit_getter(step, parent=parent)
        parent = (step["unit"], step.get("kind"))
        sel = step["select"]
        if sel == "each":
            steps.append(lambda doc, seg, get=get: [(u, False) for u in get(doc, seg)])
        elif sel == "at":
            idx = step["indices"] if "indices" in step else [step["index"]]

            def at(doc, seg, get=get, idx=idx):
                units = get(doc, seg)
                n = len(units)
                return [(units[i], False) if -n <= i < n else (seg, True) for i in idx]
            steps.append(at)
        elif sel == "slice":
            def cut(doc, seg, get=get, a=step.get("start"), b=step.get("stop")):
                units = get(doc, seg)[a:b]
                return [((units[0][0], units[-1][1]), False)] if units else [(seg, True)]
            steps.append(cut)
        else:
            cond = _compile_condition(step["if"], parent)
            steps.append(lambda doc, seg, get=get, cond=cond: [(u, False) for u in get(doc, seg) if cond(doc, u)])

    def select(doc: Doc, root: Span):
        """[(span, missing, parent_id, parent_span)]; parent_id tells siblings apart for "previous"."""
        current = [(root, False, 0, root)]
        for step in steps:
            nxt = []
            for parent_id, (seg, missing, _, _) in enumerate(current):
                if missing:  # a missing segment has no parts; it stays one missing record
                    nxt.append((seg, True, parent_id, seg))
                else:
                    nxt.extend((sp, miss, parent_id, seg) for sp, miss in step(doc, seg))
            current = nxt
        return current

    return select


def _compile_condition(cond, parent: tuple | None = None, count: bool = False):
    """A unit's condition(s): all must hold (`count`: how many hold, extension X8). A condition with its own
    `scope` (extension X10) holds when that scope selects parts of the unit and every part passes."""
    parts = []
    for c in cond if isinstance(cond, list) else [cond]:
        sub = c.get("scope")
        last = (sub[-1]["unit"], sub[-1].get("kind")) if sub else parent
        parts.append((_compile_scope(sub) if sub else None, _compile_target(c["target"], last),
                      _compile_range(c["range"])[0]))

    def passes(doc: Doc, span: Span, measure, bounds) -> bool:
        value = measure(doc, span)[0]
        if value is None:  # a label regex out of budget
            return False
        lo, hi, resolved = bounds(doc, None, span, span)
        return resolved and (lo is None or value >= lo) and (hi is None or value <= hi)

    def one(doc: Doc, span: Span, select, measure, bounds) -> bool:
        if select is None:
            return passes(doc, span, measure, bounds)
        picked = select(doc, span)
        return bool(picked) and all(not miss and passes(doc, sp, measure, bounds) for sp, miss, _, _ in picked)

    if count:
        return lambda doc, span: sum(one(doc, span, *p) for p in parts)
    return lambda doc, span: all(one(doc, span, *p) for p in parts)


# ---- range ----------------------------------------------------------------------------------------------

def _compile_range(r: dict):
    """`(bounds(doc, previous_value) -> (lo, hi, resolved), uses_previous)`; None bounds are infinite."""
    uses_previous = False
    parts = []
    for key, v in r.items():
        value, prev = _compile_value(v)
        uses_previous |= prev
        parts.append((key, value))

    def bounds(doc: Doc, previous, seg: Span, parent: Span):
        lo = hi = None
        for key, value in parts:
            x = value(doc, previous, seg, parent)
            if x is None:
                return None, None, False
            if key in ("min", "ge", "eq", "gt"):
                x_lo = x + 1 if key == "gt" else x
                lo = x_lo if lo is None else max(lo, x_lo)
            if key in ("max", "le", "eq", "lt"):
                x_hi = x - 1 if key == "lt" else x
                hi = x_hi if hi is None else min(hi, x_hi)
        return lo, hi, True

    return bounds, uses_previous


def _compile_value(v):
    """A bound's value: a number, "previous", a reference, or k times / plus such a value. Each compiles to
    `(doc, previous, seg, parent) -> number | None` (None: the reference did not resolve)."""
    if v == "previous":
        return (lambda doc, prev, seg, parent: prev), True
    if isinstance(v, dict) and ("times" in v or "plus" in v):
        inner, prev = _compile_value(v["of"])
        k, times = (v["times"], True) if "times" in v else (v["plus"], False)

        def arithmetic(doc, p, seg, parent):
            x = inner(doc, p, seg, parent)
            if x is None:
                return None
            y = k * x if times else x + k
            # Validation keeps k within float range, but k times a count can still overflow: unresolved.
            return _num(y) if isinstance(y, int) or math.isfinite(y) else None
        return arithmetic, prev
    if isinstance(v, dict):
        ref_scope = v.get("scope", [])
        if ref_scope in ("self", "parent"):  # extension X9: measured on this segment or its parent
            measure = _compile_target(v["target"])
            pick_parent = ref_scope == "parent"
            return (lambda doc, p, seg, parent: measure(doc, parent if pick_parent else seg)[0]), False
        last = (ref_scope[-1]["unit"], ref_scope[-1].get("kind")) if ref_scope else ("response", None)
        select, measure = _compile_scope(ref_scope), _compile_target(v["target"], last)

        def ref(doc: Doc, p, seg, parent):
            # A reference must select exactly one existing segment; otherwise the bound is unresolved.
            picked = select(doc, doc.root)
            if len(picked) != 1 or picked[0][1]:
                return None
            return measure(doc, picked[0][0])[0]
        return ref, False
    return (lambda doc, p, seg, parent: v), False


def _num(x):
    return int(x) if isinstance(x, float) and x.is_integer() else x


# ---- targets --------------------------------------------------------------------------------------------
# One table from a target's head key to its compiler; each compiled measure is (doc, span) -> (int, evidence).

def _count(t: dict, parent: tuple | None = None):
    what = t["count"]
    if what == "occurrence":
        return _occurrences(t["any_of"] if "any_of" in t else [t["of"]], t.get("match", "word"),
                            t.get("case", "insensitive"))
    if what == "class":
        return _CLASS[t["of"]]
    get = _unit_getter(t, "count", parent)
    if "where" in t:  # extension X1: count only the units that meet the condition
        cond = _compile_condition(t["where"], (t["count"], t.get("kind")))

        def count_where(doc, span):
            units = [u for u in get(doc, span) if cond(doc, u)]
            return len(units), units or [span]
        return count_where
    if what in ("block", "element", "section"):
        def count_structures(doc, span):
            units = get(doc, span)
            return len(units), units or [span]
        return count_structures
    if what == "char":  # characters a reader sees: inline markup (**, _, `) is not counted
        def count_chars(doc, span):
            s, e = span
            if not _MARKUP_CHAR_RE.search(doc.text, s, e):
                return e - s, [span]
            code = doc.markdown.blocks["code"] if doc.text.find("`", s, e) >= 0 or doc.text.find("~~~", s, e) >= 0 \
                or doc.text.find("    ", s, e) >= 0 else []
            if _contained_any(code, span):
                return e - s, [span]  # code is counted as written
            # The markup of the text around the code blocks inside the segment.
            cuts = [(a, b) for a, b in code if s <= a and b <= e]
            edges = [s] + [x for ab in cuts for x in ab] + [e]
            marks = sum(len(d) for a, b in zip(edges[::2], edges[1::2]) for d in markup_delimiters(doc.text, a, b))
            return e - s - 2 * marks, [span]
        return count_chars
    return lambda doc, span: (len(get(doc, span)), [span])


@lru_cache(maxsize=4096)
def _phrase_re(s: str, match: str, case: str) -> re.Pattern:
    body = r"\s+".join(re.escape(w) for w in s.split()) if s.strip() else re.escape(s)
    if match == "word":
        body = rf"(?<!\w){body}(?!\w)"
    return re.compile(body, 0 if case == "sensitive" else re.IGNORECASE)


def _occurrences(strings: list[str], match: str, case: str):
    patterns = [_phrase_re(s, match, case) for s in strings]

    def measure(doc, span):
        s, e = span
        text = doc.text[s:e]
        hits = [(s + m.start(), s + m.end()) for p in patterns for m in p.finditer(text)]
        return len(hits), hits or [span]
    return measure


def _regex_class(pattern: str):
    rx = re.compile(pattern)  # "[...]+": maximal runs, already sorted and apart (one object per run)

    def measure(doc, span):
        s, e = span
        hits = [m.span() for m in rx.finditer(doc.text, s, e)]  # offsets into the whole text
        return sum(b - a for a, b in hits), hits or [span]
    return measure


def _word_class(test):
    def measure(doc, span):
        hits = [w for w in doc.within("word", span) if test(doc.text[w[0]:w[1]])]
        return len(hits), hits or [span]
    return measure


@lru_cache(maxsize=1)
def _punctuation_measure():
    # Unicode punctuation (categories P*) in the Basic Multilingual Plane, built on first use.
    chars = "".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)).startswith("P"))
    return _regex_class("[" + re.escape(chars) + "]+")


def _emoji(doc, span):
    s, e = span
    hits = [(s + m["match_start"], s + m["match_end"]) for m in emoji.emoji_list(doc.text[s:e])]
    return len(hits), hits or [span]


def _letters(word: str) -> str:
    return "".join(ch for ch in word if ch.isalpha())


@lru_cache(maxsize=None)
def _char_class_measure(test):
    # The code points that pass `test` as one character class: runs are found by the regex engine, without a
    # Python object per character (the class is built on first use).
    runs = code_point_runs(test)
    return _regex_class("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in runs) + "]+")


def _char_class(test):
    return lambda doc, span: _char_class_measure(test)(doc, span)


def _punctuation(doc, span):
    """Unicode punctuation, not counting the asterisks and underscores of inline markup."""
    n, hits = _punctuation_measure()(doc, span)
    s, e = span
    if not _MARKUP_CHAR_RE.search(doc.text, s, e):
        return n, hits
    return n - 2 * sum(len(d) for d in markup_delimiters(doc.text, s, e) if d[0] in "*_"), hits


_CLASS = {
    "digit": _regex_class(r"\d+"),
    "letter": _regex_class(r"[^\W\d_]+"),
    "uppercase": _char_class(str.isupper),
    "lowercase": _char_class(str.islower),
    "punctuation": _punctuation,
    "vowel": _regex_class(r"[aeiouAEIOU]+"),
    "consonant": _regex_class(r"[b-df-hj-np-tv-zB-DF-HJ-NP-TV-Z]+"),
    "emoji": _emoji,
    "uppercase_word": _word_class(lambda w: w.isupper() and any(c.isalpha() for c in w)),
    "capitalized_word": _word_class(lambda w: bool(_letters(w)) and _letters(w)[0].isupper()),
    "lowercase_word": _word_class(lambda w: w.islower()),
}


def _contained_any(spans: list[Span], span: Span) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b in spans)


def _inside(items: list, span: Span) -> list:
    """The (span, value) items, sorted by span, whose span lies inside `span`: bisection, not a scan of all."""
    s, e = span
    out = []
    for k in range(bisect.bisect_left(items, s, key=lambda x: x[0][0]), len(items)):
        sp = items[k][0]
        if sp[0] > e:
            break
        if sp[1] <= e:
            out.append(items[k])
    return out


def _depth(t: dict):
    if t["depth"] == "list":
        def list_depth(doc, span):
            # Lists inside the segment, and the part of an outermost list that a paragraph holds when CommonMark
            # merged the lists of neighbouring paragraphs (Doc.within does the same for list counts).
            lists = _inside(doc.markdown.list_depths, span) + [(p, 1) for p in doc._lists_crossing(*span)]
            if not lists:
                return 0, [span]
            base = min(d for _, d in lists)
            return max(d for _, d in lists) - base + 1, [sp for sp, _ in lists]
        return list_depth

    def deepest_json(doc, span):
        docs = _inside(doc.markdown.json_docs, span)
        if not docs:
            return 0, [span]
        return max(json_depth(j) for _, j in docs), [sp for sp, _ in docs]
    return deepest_json


def _has(t: dict):
    wanted, how = t["has"], t.get("as", "text")
    if how == "text":
        patterns = [_phrase_re(s, t.get("match", "word"), t.get("case", "insensitive")) for s in wanted]

        def present(doc, span):
            s, e = span
            text = doc.text[s:e]
            hits = [m for m in (p.search(text) for p in patterns) if m]
            ev = [(s + m.start(), s + m.end()) for m in hits]
            return len(hits), ev if len(hits) == len(patterns) else ev + [span]
        return present
    fold = (lambda x: x) if t.get("case") == "sensitive" else str.casefold
    keys = [fold(_bare(s)) for s in wanted]

    def present_structure(doc, span):
        if how == "heading":
            found = {fold(_bare(doc.text[a:b])): (a, b) for a, b in doc.within("element", span, "heading")}
        else:
            found = {}
            for sp, j in _inside(doc.markdown.json_docs, span):
                found.update((fold(k), sp) for k in _json_keys(j))
        ev = [found[k] for k in keys if k in found]
        return len(ev), ev if len(ev) == len(keys) else ev + [span]
    return present_structure


def _bare(s: str) -> str:
    """Heading or header text without Markdown emphasis, surrounding punctuation or a trailing colon."""
    return strip_markup(s.strip()).strip("*_`#").strip().rstrip(":").strip()


def _json_keys(doc):
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield from (str(k) for k in x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


_FENCED = re.compile(r"\A```[^\n]*\n(.*?)\n?```\Z", re.S)


def _valid(t: dict):
    fmt = t["valid"]

    def check(doc, span):
        text = doc.text[span[0]:span[1]]
        return int(_is_valid(fmt, text)), [span]
    return check


def _is_valid(fmt: str, text: str) -> bool:
    text = text.strip()
    if fmt in ("json", "yaml"):
        m = _FENCED.match(text)
        body = m.group(1) if m else text
        try:
            if fmt == "json":
                json.loads(body)
                return True
            return isinstance(yaml.safe_load(body), (dict, list))
        except (ValueError, RecursionError, yaml.YAMLError):
            return False
    if fmt == "xml":
        try:
            ElementTree.fromstring(text)
            return True
        except (ElementTree.ParseError, RecursionError, ValueError):
            return False
    if fmt == "integer":
        return re.fullmatch(r"[+-]?\d+", text) is not None
    if fmt == "decimal":
        return re.fullmatch(r"[+-]?(?:\d+\.\d+|\.\d+)", text) is not None
    if fmt == "number":
        return re.fullmatch(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?", text) is not None
    if fmt == "date":
        try:
            datetime.date.fromisoformat(text)
            return True
        except ValueError:
            return False
    if fmt == "email":
        return re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s.]+", text) is not None
    if fmt == "url":
        return re.fullmatch(r"https?://[^\s/$.?#][^\s]*", text) is not None
    letters = [c for c in text if c.isalpha()]
    if fmt == "uppercase":
        return bool(letters) and not any(c.islower() for c in letters)
    if fmt == "lowercase":
        return bool(letters) and not any(c.isupper() for c in letters)
    # title_case: every word that has letters starts with an uppercase letter.
    words = [_letters(w) for w in word_texts(text)]
    return any(words) and all(w[0].isupper() for w in words if w)


def _matches(t: dict):
    search = compile_pattern(t["matches"])  # RE2 (linear), or backtracking under the verify() call's budget

    def count(doc, span):
        s, e = span
        budget = _REGEX_BUDGET.get() or [math.inf, False]
        hits = search(doc.text[s:e], budget[0])
        if hits is None:
            budget[1] = True
            return None, [span]
        if s:
            hits = [(s + a, s + b) for a, b in hits]
        return len(hits), hits or [span]
    return count


def _boundary(t: dict):
    head = next(k for k in ("starts_with", "ends_with", "wrapped") if k in t)
    fold = (lambda x: x) if t.get("case", "sensitive") == "sensitive" else str.casefold
    if head == "wrapped":
        left, right = t["wrapped"]
    else:
        left, right = (t[head], None) if head == "starts_with" else (None, t[head])

    def holds(text: str) -> bool:
        ok = (left is None or text.startswith(fold(left))) and (right is None or text.endswith(fold(right)))
        if head == "wrapped":  # "()" wraps nothing when the two markers overlap
            ok = ok and len(text) >= len(left) + len(right)
        return ok

    def check(doc, span):
        s, e = strip_span(doc.text, *span)
        text = fold(doc.text[s:e])
        # As written, or as a reader sees it: "**Scene 1**: ..." starts with "Scene".
        if not (ok := holds(text)):
            # Markup pairs are at most ~300 characters long: the ends of the text decide, not all of it.
            w = 700 + len(left or "") + len(right or "")
            bare = strip_markup(text if len(text) <= 2 * w else text[:w] + "\n" + text[-w:]).strip()
            ok = holds(bare)
        ev = []
        if left is not None:
            ev.append((s, min(e, s + max(len(left), 1))))
        if right is not None:
            ev.append((max(s, e - max(len(right), 1)), e))
        return int(ok), ev or [span]
    return check


_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)]|#{1,6})\s+")


def _unit_texts(doc, get, span):
    units = get(doc, span)
    return units, [doc.text[a:b] for a, b in units]


def _sorted(t: dict):
    get = _unit_getter(t)
    numeric = t["sorted"] == "numeric"
    descending = t.get("order") == "descending"

    def key(text: str):
        text = _MARKER.sub("", text)
        if numeric:
            m = re.search(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
            return float(m.group()) if m else None
        return re.sub(r"^[\W_]+", "", text).casefold()

    def out_of_order(doc, span):
        units, texts = _unit_texts(doc, get, span)
        keyed = [(u, k) for u, k in zip(units, map(key, texts)) if k is not None]
        bad = [(a, b) for (a, ka), (b, kb) in zip(keyed, keyed[1:]) if (kb > ka if descending else kb < ka)]
        return len(bad), [sp for pair in bad for sp in pair] or [span]
    return out_of_order


def _chain(t: dict):
    get = _unit_getter(t)

    def links(doc, span):
        units = get(doc, span)
        ends = []
        for u in units:
            words = doc.within("word", u)
            ends.append((words[0], words[-1]) if words else None)
        norm = lambda w: _norm(doc.text[w[0]:w[1]])
        n = sum(1 for x, y in zip(ends, ends[1:]) if x and y and norm(x[1]) == norm(y[0]))
        return n, [w for e in ends if e for w in e] or [span]
    return links


def _norm(text: str) -> str:
    """The text without leading and trailing non-alphanumerics, casefolded. A loop, not re.sub with
    `[\\W_]+$`, which retries at every position of a long run of symbols (quadratic)."""
    i, j = 0, len(text)
    while i < j and not text[i].isalnum():
        i += 1
    while j > i and not text[j - 1].isalnum():
        j -= 1
    return text[i:j].casefold()


def _acrostic(t: dict):
    get = _unit_getter(t)
    word = t["acrostic"]
    fold = (lambda x: x) if t.get("case") == "sensitive" else str.casefold

    def mismatches(doc, span):
        units = get(doc, span)
        firsts, ev = [], []
        for a, b in units:
            i = next((k for k in range(a, b) if doc.text[k].isalpha()), None)
            firsts.append(fold(doc.text[i]) if i is not None else "")
            if i is not None:
                ev.append((i, i + 1))
        target = [fold(ch) for ch in word if not ch.isspace()]
        bad = sum(1 for x, y in zip(firsts, target) if x != y) + abs(len(firsts) - len(target))
        return bad, ev or [span]
    return mismatches


def _key_fn(key: str):
    """A unit's key for distinct and pairs (extensions X3, X4); dot-composed keys apply left to right."""
    steps = key.split(".")

    def apply(text: str):
        x = text
        for k in steps:
            if x is None:
                return None
            if k == "text":
                x = _norm(x)
            elif k in ("first_word", "last_word"):
                words = word_texts(x)
                x = (words[0] if k == "first_word" else words[-1]) if words else None
                x = _norm(x) if x is not None and steps[-1] == k else x
            elif k in ("first_letter", "last_letter"):
                letters = [c for c in x if c.isalpha()]
                x = (letters[0] if k == "first_letter" else letters[-1]).casefold() if letters else None
            elif k in ("first_char", "last_char"):
                x = (x[0] if k == "first_char" else x[-1]) if x else None
            elif k == "letters":
                x = sum(1 for c in x if c.isalpha())
            elif k == "words":
                x = len(word_texts(x))
            else:
                x = len(x)
        return x
    return apply


def _distinct(t: dict):
    get = _unit_getter(t, "distinct")
    key = _key_fn(t.get("by", "text"))
    need = t.get("min_occurrences", 1)

    def count(doc, span):
        units, texts = _unit_texts(doc, get, span)
        seen: dict = {}
        for u, x in zip(units, map(key, texts)):
            if x is not None:
                seen.setdefault(x, []).append(u)
        kept = [us for us in seen.values() if len(us) >= need]
        return len(kept), [u for us in kept for u in us] or [span]
    return count


_REL = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _pairs(t: dict):
    get = _unit_getter(t, "pairs")
    left, right, rel = _key_fn(t["left"]), _key_fn(t["right"]), _REL[t["rel"]]

    def count(doc, span):
        units, texts = _unit_texts(doc, get, span)
        hits = []
        for (u, x), (v, y) in zip(zip(units, texts), zip(units[1:], texts[1:])):
            a, b = left(x), right(y)
            if a is not None and b is not None and type(a) is type(b) and rel(a, b):
                hits += [u, v]
        return len(hits) // 2, _merge(hits) or [span]
    return count


def _satisfies(t: dict):
    holds = _compile_condition(t["satisfies"], count=True)
    return lambda doc, span: (holds(doc, span), [span])


TARGETS = {
    "satisfies": _satisfies,
    "count": _count, "depth": _depth, "has": _has, "valid": _valid, "matches": _matches,
    "starts_with": _boundary, "ends_with": _boundary, "wrapped": _boundary, "sorted": _sorted,
    "chain": _chain, "acrostic": _acrostic, "distinct": _distinct, "pairs": _pairs,
}


def _compile_target(t: dict, parent: tuple | None = None):
    """`parent` is the unit (and kind) of the segments the target is measured on."""
    head = next(k for k in TARGETS if k in t)
    return TARGETS[head](t, parent) if head == "count" else TARGETS[head](t)


def _merge(spans: list[Span]) -> list[Span]:
    """Sorted spans with overlapping or touching ones joined."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


__all__ = ["Record", "Verdict", "verify", "verify_all", "verify_jsonl", "TARGETS", "ConstraintError"]
