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

For a constraint the schema does not express, RTT's own LLM annotator is here too: `annotation_prompt` (its full
annotation prompt, app. C.4) and `parse_annotation` (its JSON answer to character spans); the call through a model
or an OpenAI-compatible server is `ifcore.train.rtt.llm_labels`.
"""
from __future__ import annotations

import json
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


# RTT app. C.4, "Full annotation prompt", verbatim but for its typographic quotes (straight ones here, so that the
# JSON it asks for is the JSON it shows).
ANNOTATION_PROMPT = """You are a training data annotator for a token-level discriminator model. Your task is to classify the Criteria and label which tokens in the Response are relevant to it.

Criteria: {criteria}

Response: {response}

Please follow these steps:
Step 1: Scope Classification
Determine whether this criteria is GLOBAL or LOCAL:
- GLOBAL: The criteria applies to ALL tokens of the response as a whole (e.g., language/writing style requirement, tone requirement, word count limit, paragraph count limit, overall format/structure requirement, topic requirement, count, frequency, or numeric threshold)
- LOCAL: The criteria only concerns SPECIFIC parts of the response (e.g., a specific phrase must appear, a specific section must exist, certain keywords must/must not be used, a particular element must be included/excluded)
Step 2: Polarity Classification
If criteria is LOCAL, then determine whether this criteria is POSITIVE or NEGATIVE:
- POSITIVE: Requires something to be present or done (e.g., "must include X", "should start with Y", "the first paragraph should be X")
- NEGATIVE: Requires something to be absent or avoided (e.g., "do not use X", "must not include Y", "exclude the word Z", "avoid mentioning W")
Step 3: Output
- If GLOBAL, then output: {{"type": "all_relevant"}}
- If LOCAL + POSITIVE:
If relevant text segments EXIST in the response (i.e., the criteria IS satisfied by some portion of the text), then output: {{"type": "partial_relevant", "relevant_texts": ["exact segment 1", "exact segment 2", ...]}}
If NO relevant text segments exist (i.e., the criteria is NOT satisfied at all), then output: {{"type": "all_irrelevant"}}
- If LOCAL + NEGATIVE:
If text segments that VIOLATE the criteria EXIST in the response, then output: {{"type": "partial_relevant", "relevant_texts": ["exact violating segment 1", ...]}}
If NO violating text exists (i.e., the criteria IS satisfied / not violated), then output: {{"type": "all_irrelevant"}}
Important Notes:
The text segments in relevant_texts must be exact original text from the Response (exact match, including punctuation and spaces).
Each text segment should be a continuous, complete sentence or phrase.
Output only JSON format, without any markdown code block markers or other text. Ensure the JSON format is correct and can be directly parsed."""


def annotation_prompt(criteria: str, response: str) -> str:
    """RTT's annotation prompt (app. C.4) for one (constraint text, response) pair."""
    return ANNOTATION_PROMPT.format(criteria=criteria, response=response)


def parse_annotation(answer: str, response: str) -> dict:
    """The LLM annotator's answer as {"type", "spans", "unmatched"} (RTT app. C.3): all_relevant gives the whole
    response, all_irrelevant nothing, partial_relevant every occurrence of each relevant text (exact match, as the
    prompt demands; a text not found in the response is counted in "unmatched" and marks nothing). An answer that
    is none of the three JSON forms (a small model's prose, a cut-off object) has type None: the pair gets no
    label. Never raises on the answer's text."""
    text = answer.strip()
    if text.startswith("```"):  # the prompt forbids code fences; models write them anyway
        text = text.strip("`").removeprefix("json").strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        obj = json.loads(text[start:end + 1]) if 0 <= start < end else None
    except (ValueError, RecursionError):
        obj = None
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind == "all_relevant":
        return {"type": kind, "spans": [(0, len(response))] if response else [], "unmatched": 0}
    if kind == "all_irrelevant":
        return {"type": kind, "spans": [], "unmatched": 0}
    texts = obj.get("relevant_texts") if kind == "partial_relevant" else None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return {"type": None, "spans": [], "unmatched": 0}
    spans, unmatched = [], 0
    for t in filter(None, texts):
        at = response.find(t)
        unmatched += at < 0
        while at >= 0:
            spans.append((at, at + len(t)))
            at = response.find(t, at + 1)
    return {"type": kind, "spans": merge(spans), "unmatched": unmatched}
