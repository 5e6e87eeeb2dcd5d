"""RTT relevance labels for free: the verifier's evidence spans through RTT's annotation taxonomy (appendix C.3).

RTT's annotator sorts each constraint into GLOBAL (it concerns the response as a whole: every token is relevant),
LOCAL positive (something must be present: the spans that satisfy it are relevant when it is satisfied, nothing
when it is not) and LOCAL negative (something must be absent: the spans that violate it are relevant when it is
violated, nothing when it is satisfied). Here the class comes from the schema, and the spans from
`Verdict.evidence` and `Verdict.records`, so no LLM is asked.

The rule table (`taxonomy`, first match wins; "locatable" targets are the ones whose measurement points at
pieces of text: occurrence and class counts, counts of blocks, elements and sections, counts with a `where`
condition, and `matches`):

| target | range (integer bounds lo..hi as the verifier reads them) | class |
| --- | --- | --- |
| `has` (Checklist / Presence) | any | LOCAL positive |
| `starts_with`, `ends_with`, `wrapped` (Pattern / Boundary) | any | LOCAL positive |
| any count or `matches` | hi <= 0 ("no X", ScopeIF's Prohibition) | LOCAL negative |
| locatable | lo >= 1, no hi ("include X", "at least k X") | LOCAL positive |
| locatable | hi >= 1, lo absent or 0 ("at most k X") | LOCAL negative |
| locatable | lo >= 1 and hi (exactly k, between a and b: a frequency) | GLOBAL |
| any other target (unit counts, depth, valid, sorted, chain, acrostic, distinct, pairs, satisfies) | any | GLOBAL |
| any | a bound that refers to another measurement or to "previous" | GLOBAL |

GLOBAL marks every token of the segments the scope selects: the whole answer for a Global scope (the paper's
"all_relevant"), the selected paragraph for "the first paragraph has at most 20 words", and so on; the think
block is never relevant. Pure Python; the core imports no torch.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ifcore.schema import Constraint
from ifcore.text import Span

GLOBAL, LOCAL_POSITIVE, LOCAL_NEGATIVE = "global", "local_positive", "local_negative"
CLASSES = (GLOBAL, LOCAL_POSITIVE, LOCAL_NEGATIVE)


def _int_bounds(r: dict) -> tuple[float | None, float | None] | None:
    """(lo, hi) of a numeric range over integer counts, as verify's bounds() reads them (gt k is k + 1, lt k is
    k - 1); None when a bound refers to another measurement or to "previous"."""
    lo = hi = None
    for key, v in r.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if key in ("min", "ge", "eq", "gt"):
            x = math.floor(v) + 1 if key == "gt" else math.ceil(v)
            lo = x if lo is None else max(lo, x)
        if key in ("max", "le", "eq", "lt"):
            x = math.ceil(v) - 1 if key == "lt" else math.floor(v)
            hi = x if hi is None else min(hi, x)
    return lo, hi


def taxonomy(constraint: Constraint | dict) -> str:
    """GLOBAL, LOCAL_POSITIVE or LOCAL_NEGATIVE by the rule table of this module's docstring (RTT app. C.3)."""
    c = constraint if isinstance(constraint, Constraint) else Constraint.from_dict(constraint)
    t = c.target
    if "has" in t or any(k in t for k in ("starts_with", "ends_with", "wrapped")):
        return LOCAL_POSITIVE
    if "count" not in t and "matches" not in t:
        return GLOBAL
    bounds = _int_bounds(c.range)
    if bounds is None:
        return GLOBAL
    lo, hi = bounds
    if hi is not None and hi <= 0:
        return LOCAL_NEGATIVE
    locatable = "matches" in t or "where" in t or t["count"] in ("occurrence", "class", "block", "element", "section")
    if not locatable:
        return GLOBAL
    if hi is None:
        return LOCAL_POSITIVE if lo is not None and lo >= 1 else GLOBAL
    return LOCAL_NEGATIVE if lo is None or lo <= 0 else GLOBAL


def relevant_spans(constraint: Constraint | dict, verdict) -> list[Span]:
    """The character spans relevant to the constraint in the verified response (RTT app. C.3), sorted and
    disjoint: GLOBAL, the segments its scope selected (verdict.records); LOCAL positive, the evidence when
    satisfied and nothing otherwise; LOCAL negative, the violating evidence when violated and nothing otherwise.
    `verdict` is ifcore.verify.verify's for this constraint; its spans index the response string."""
    kind = taxonomy(constraint)
    if kind == GLOBAL:
        return merge([r.span for r in verdict.records])
    if (kind == LOCAL_POSITIVE) == bool(verdict.satisfied):
        return merge(verdict.evidence)
    return []


def merge(spans) -> list[Span]:
    """Sorted spans with overlapping or touching ones joined, empty ones dropped."""
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in spans if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def token_labels(spans: Sequence[Span], offsets: Sequence[Span]) -> list[int]:
    """1 for each token with any character inside a span, else 0 (RTT app. C.3's substring-to-token mapping).

    `offsets` are a fast tokenizer's (start, end) character offsets of each token (`return_offsets_mapping`);
    a token with no characters (start == end: a special token, or a byte-level piece of a character whose
    other bytes carry the offsets) is never relevant. Linear in tokens + spans: both are walked in order."""
    spans = merge(spans)
    k = 0
    order = sorted(range(len(offsets)), key=lambda i: offsets[i][0])
    labels = [0] * len(offsets)
    for i in order:
        a, b = offsets[i]
        while k < len(spans) and spans[k][1] <= a:
            k += 1
        # spans are disjoint and sorted; a token [a, b) overlaps one when some span starts before b and ends after a
        labels[i] = int(b > a and k < len(spans) and spans[k][0] < b)
    return labels
