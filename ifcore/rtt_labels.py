"""RTT relevance labels for free: the verifier's evidence spans through RTT's annotation taxonomy (appendix C.3).

RTT's annotator sorts each constraint into GLOBAL (it concerns the response as a whole: every token is relevant),
LOCAL positive (something must be present: the spans that satisfy it are relevant when it is satisfied, nothing
when it is not) and LOCAL negative (something must be absent: the spans that violate it are relevant when it is
violated, nothing when it is satisfied). Here the class comes from the schema, and the spans from
`Verdict.evidence` and `Verdict.records`, so no LLM is asked.

Two label sets (`LABELS`), chosen by name wherever labels are made (`DiscConfig.labels`, the plug-ins'
IFCORE_RTT_LABELS):

- "paper" (the default): RTT app. C.3 as its annotation prompt (C.4) words it. GLOBAL ("word count limit,
  paragraph count limit, ... count, frequency, or numeric threshold") marks every answer token relevant
  ("all_relevant"), whatever the scope, so under intra-sample normalization a GLOBAL constraint has a constant
  token reward and contributes exactly 0 to A_tok (section 4.2.2: normalization "naturally neutraliz[es] ...
  uniformly relevant" tokens). LOCAL is presence ("a specific phrase must appear", "should start with Y":
  positive) and absence ("do not use X", "must not include Y": negative). The authors' code ships no
  annotator (their discriminator reads LLM labels), so the prompt's wording is the rule: "at most k X" (k >= 1) and
  "at least k X" (k >= 2) are numeric thresholds, GLOBAL; "at least one X" is presence, LOCAL positive.
- "scoped" (this workspace's earlier variant, off by default): GLOBAL marks only the segments the scope selects
  (the first paragraph for "the first paragraph has at most 20 words"), "at most k X" is LOCAL negative (the
  excess is what violates it) and "at least k X" LOCAL positive, so scoped GLOBAL and counted constraints move
  token advantages where the paper's labels would not.

The rule table (`taxonomy`, first match wins; "locatable" targets are the ones whose measurement points at
pieces of text: occurrence and class counts, counts of blocks, elements and sections, counts with a `where`
condition, and `matches`; lo..hi are the integer bounds as the verifier reads them):

| target | range | paper | scoped |
| --- | --- | --- | --- |
| `has` (Checklist / Presence) | any | LOCAL positive | LOCAL positive |
| `starts_with`, `ends_with`, `wrapped` (Pattern / Boundary) | any | LOCAL positive | LOCAL positive |
| any count or `matches` | hi <= 0 ("no X", ScopeIF's Prohibition) | LOCAL negative | LOCAL negative |
| locatable | lo = 1, no hi ("include X") | LOCAL positive | LOCAL positive |
| locatable | lo >= 2, no hi ("at least k X") | GLOBAL | LOCAL positive |
| locatable | hi >= 1, lo absent or 0 ("at most k X") | GLOBAL | LOCAL negative |
| locatable | lo >= 1 and hi (exactly k, between a and b: a frequency) | GLOBAL | GLOBAL |
| any other target (unit counts, depth, valid, sorted, chain, acrostic, distinct, pairs, satisfies) | any | GLOBAL | GLOBAL |
| any | a bound that refers to another measurement or to "previous" | GLOBAL | GLOBAL |

The think block is never relevant. Pure Python; the core imports no torch.

For a constraint the schema does not express, RTT's own LLM annotator is here too: `annotation_prompt` (its full
annotation prompt, app. C.4) and `parse_annotation` (its JSON answer to character spans); the call through a model
or an OpenAI-compatible server is `ifcore.train.rtt.llm_labels`.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

from ifcore.schema import Constraint
from ifcore.text import Span

GLOBAL, LOCAL_POSITIVE, LOCAL_NEGATIVE = "global", "local_positive", "local_negative"
CLASSES = (GLOBAL, LOCAL_POSITIVE, LOCAL_NEGATIVE)
LABELS = ("paper", "scoped")  # RTT app. C.3 as written (the default), and the scope-restricted variant


def criteria_text(c: Constraint) -> str:
    """The constraint as the discriminator reads it (RTT app. C.1's "Criteria: {c}"): its wording, or its schema
    JSON when it has none. The trainer, the data builder and the OpenRLHF plug-ins all read it from here."""
    return c.text or json.dumps({k: v for k, v in c.to_dict().items() if k not in ("id", "category")})


def template(criteria: str) -> str:
    """A constraint text's template family: quoted literals, numbers and number words masked ("at most 2
    occurrences of the word \"bright\"" and "at most 3 occurrences of the word \"warm\"" are one family). The
    discriminator's held-out-by-template split (ifcore.train.rtt.build_pairs) keeps whole families out of
    training."""
    t = re.sub(r'"[^"]*"|\u201c[^\u201d]*\u201d', '"#"', criteria)  # not single quotes: apostrophes
    t = re.sub(r"\d+(\.\d+)?", "#", t)
    return re.sub(_NUMBER_WORDS, "#", t.casefold())


_NUMBER_WORDS = (r"\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|once|twice|thrice|"
                 r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\b")


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


def taxonomy(constraint: Constraint | dict, labels: str = "paper") -> str:
    """GLOBAL, LOCAL_POSITIVE or LOCAL_NEGATIVE by the rule table of this module's docstring (RTT app. C.3);
    `labels` "paper" (the default) or "scoped"."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
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
    if labels == "paper":  # C.4: presence is LOCAL, any other count or threshold GLOBAL
        return LOCAL_POSITIVE if hi is None and lo == 1 else GLOBAL
    if hi is None:
        return LOCAL_POSITIVE if lo is not None and lo >= 1 else GLOBAL
    return LOCAL_NEGATIVE if lo is None or lo <= 0 else GLOBAL


def relevant_spans(constraint: Constraint | dict, verdict, answer: Span, labels: str = "paper") -> list[Span]:
    """The character spans relevant to the constraint in the verified response (RTT app. C.3), sorted and
    disjoint: GLOBAL, all of `answer` under the paper's labels ("all_relevant") or the segments its scope selected
    (verdict.records) under "scoped"; LOCAL positive, the evidence when satisfied and nothing otherwise; LOCAL
    negative, the violating evidence when violated and nothing otherwise. `verdict` is ifcore.verify.verify's for
    this constraint and `answer` the (start, end) of the answer after the think block, both indexing one string."""
    kind = taxonomy(constraint, labels)
    if kind == GLOBAL:
        return merge([answer] if labels == "paper" else [r.span for r in verdict.records])
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


# RTT app. C.4, "Greedy baseline prompt" (Table 4's Greedy row: span extraction without the taxonomy), verbatim but
# for its typographic quotes.
GREEDY_PROMPT = """You are a professional text analysis assistant. Your task is to extract text segments from the Response that are relevant to the given Criteria.

Criteria: {criteria}

Response: {response}

Please carefully analyze the Response and extract the text segments that address or relate to the Criteria. Even if the entire response seems broadly related, you should identify and extract the MOST RELEVANT and SPECIFIC segments that directly match the Criteria.
Key Principles:
Just extract the most relevant segments instead of the entire response.
Focus on segments that specifically address the Criteria, not general context or background information.
Be precise: exclude indirect references, examples that don't directly relate, or supporting information that doesn't directly address the Criteria.
If no segments are directly relevant, indicate that the response is "all_irrelevant"
If you are sure that all contents are relevant, indicate that the response is "all_relevant"
Please strictly follow the JSON format below and do not add any other text:
1. If the entire response is relevant to the Criteria, output: {{"type": "all_relevant"}}
2. If the entire response is irrelevant to the Criteria, output: {{"type": "all_irrelevant"}}
3. If partially relevant, output: {{"type": "partial_relevant", "relevant_texts": ["relevant text segment 1", "relevant text segment 2", ...]}}
Important Notes:
The text segments in relevant_texts must be exact original text from the Response (exact match, including punctuation and spaces).
Each text segment should be a continuous, complete sentence or phrase.
Output only JSON format, without any markdown code block markers or other text. Ensure the JSON format is correct and can be directly parsed."""
PROMPTS = {"full": ANNOTATION_PROMPT, "greedy": GREEDY_PROMPT}


def annotation_prompt(criteria: str, response: str, prompt: str = "full") -> str:
    """RTT's annotation prompt (app. C.4) for one (constraint text, response) pair: "full" (the taxonomy) or
    "greedy" (Table 4's Greedy annotator); both answer in the JSON forms parse_annotation reads."""
    if prompt not in PROMPTS:
        raise ValueError(f"prompt must be one of {tuple(PROMPTS)}, got {prompt!r}")
    return PROMPTS[prompt].format(criteria=criteria, response=response)


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


def verifier_relevance(tokenizer, ids: Sequence[int], constraints: Sequence[Constraint], verdicts, offset: int,
                       labels: str = "paper", text: str | None = None) -> tuple[list[int], list[list[float]]]:
    """RTT's oracle relevance of one response, the one both engines train with (the embedded trainer's
    rtt_relevance "verifier", the OpenRLHF plug-ins' IFCORE_RTT_RELEVANCE=verifier): (scored, p) with scored the
    indices into `ids` of the answer tokens (after the last `</think>`, before the first special token) and p, one
    row per scored token, one 0/1 column per constraint: `relevant_spans` of its verdict mapped to the tokens by the
    tokenizer's offsets (app. C.3). `verdicts` and `offset` are score_response's for the text `ids` decode to up to
    their first special token (a verdict of None, a constraint not verified, gives a column of 0).

    The response is decoded and tokenized again for the offsets; where that does not give `ids` back, or `text`
    (the text the verdicts were computed on, when given) is not that decode, no token is scored (scored empty: the
    response keeps its response-level advantage alone)."""
    special = set(tokenizer.all_special_ids)
    k = next((t for t, i in enumerate(ids) if i in special), len(ids))
    decoded = tokenizer.decode(list(ids[:k]), skip_special_tokens=False)
    if text is not None and decoded != text:
        return [], []
    text = decoded
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(ids[:k]):
        return [], []
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    close = text.rfind("</think>")
    start = close + len("</think>") if close >= 0 else 0
    scored = [t for t, (a, _) in enumerate(offsets) if a >= start]
    cols = []
    for c, v in zip(constraints, verdicts):
        # verdict spans index text[offset:]; the paper's GLOBAL spans the whole answer
        spans = [(a + offset, b + offset) for a, b in relevant_spans(c, v, (start - offset, len(text) - offset),
                                                                    labels)] if v else []
        cols.append(token_labels(spans, offsets))
    return scored, [[float(col[t]) for col in cols] for t in scored]
