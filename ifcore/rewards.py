"""Response-level rewards: ScopeIF's graded and hierarchical reward (eq. 5-10), the ILA/CLA baselines and
RAIF's rule-centric reward (eq. 4-6), plus the format gate and the one composite every adapter calls.

Every reward is a pure function of verdict data. The per-response ones take one response's constraints as a
1-D sequence and return a float, or a batch ([B, C] array, or a ragged list of rows) and return a [B] array;
torch tensors are accepted by duck typing (torch is never imported here). RANGES holds each kind's range,
which its docstring derives from the paper's equations; the adapters assert every reward lies in it.
"""
from __future__ import annotations

import re
from time import perf_counter

import numpy as np

# The shared arithmetic lives a level down (verify needs it too); re-exported here, where the adapters look.
from ifcore.reward_math import (_as_array, _rowwise, check_alpha, cla, graded, ila, scopeif,  # noqa: F401
                                scopeif_flat)
from ifcore.text import Doc
from ifcore.verify import verify

KINDS = ("ila", "cla", "scopeif", "scopeif_flat", "raif")
RANGES = {"ila": (0.0, 1.0), "cla": (0.0, 1.0), "scopeif": (0.0, 1.0), "scopeif_flat": (0.0, 1.0),
          "raif": (-3.0, 3.0)}
THINK_MODES = ("auto", "required", "none", "raif")
SELECTORS = ("Global", "Traversal", "Position", "Condition", "Nested")


def _raif(s, ok):
    n = s.shape[-1]
    nsat = s.sum(axis=-1)
    frac = nsat / max(n, 1)
    accuracy = np.where(nsat == n, 2.0, np.where(nsat > 0, frac, -2.0))
    return np.where(ok, 1.0 + accuracy, -1.0 - 2.0)


def raif(satisfied, format_ok, reasoning_ok=True):
    """RAIF rule-centric reward, eq. 4-6: R = R_format + R_accuracy.

    R_format = +1 if the format holds, else -1 (eq. 4). R_accuracy (eq. 5) = +2 when every constraint is
    followed, the followed fraction when some are, -2 when none are; the answer is only extracted and
    judged when the format holds, so a format failure also gets -2 (R = -3). `reasoning_ok` false (an empty or
    placeholder think block, `raif_reasoning_problem`) leaves the answer unjudged too: R_accuracy -2, R = -1, as
    the authors' complex_scoring.py:278 and ifeval/check_qa.py:89 score it.

    Range [-3, 3]: R = -3 (format fails), -1 (no constraint followed, or no reasoning), 1 + k/|C| in (1, 2) (k of
    |C| followed, 0 < k < |C|), 3 (all followed, or no constraints).
    """
    r = _rowwise(_raif, (satisfied, bool), (format_ok, bool))
    bad = ~_as_array(reasoning_ok, bool) & _as_array(format_ok, bool)
    r = np.where(bad, -1.0, r)
    return float(r) if np.ndim(r) == 0 else r


RAIF_PLACEHOLDER = "reasoning process here"  # the template's words in RAIF's CoT system prompt
_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_PROMPT_THINK = re.compile(r"<think>(?:(?!</?think>).)*(?:</think>)?\s*\Z", re.S)


def raif_reasoning_problem(response: str) -> str | None:
    """Why a RAIF response's reasoning earns nothing: "empty" (its last think block holds only whitespace, e.g.
    `<think>\n\n</think>`) or "placeholder" (the CoT system prompt's "reasoning process here", any case), else
    None. The authors extract the last `<think>(.*?)</think>`, stripped (kk.py:18-22), and give R_accuracy -2 to
    an empty or placeholder one (complex_scoring.py:278; ifeval/check_qa.py:89, which lowercases it)."""
    blocks = _THINK.findall(response)
    if not blocks:
        return None  # no think block: the format gate's business
    text = blocks[-1].strip()
    if not text:
        return "empty"
    return "placeholder" if text.lower() == RAIF_PLACEHOLDER else None


def think_prefix(prompt: str) -> str:
    """The head of the response's think block that the prompt already holds: the prompt's trailing `<think>` (a
    template that opens the block) or its whole trailing `<think>...</think>` (RAIF's no-think rollouts, eq. 7's
    y-hat: `<think>\n\n</think>\n`), else "". Prepended to a rollout before scoring, so that RAIF's format gate
    reads the response as the authors' code reads it: from the assistant turn's `<think>` on
    (experience_maker.py:600-602). A `<think>` inside the system turn (RAIF's CoT prompt quotes the format) is
    followed by more text and is not a prefix."""
    m = _PROMPT_THINK.search(prompt)
    return m.group(0) if m else ""


def format_gate(response: str, think: str = "auto", truncated: bool = False) -> tuple[int, int, str | None]:
    """The format reward of ScopeIF appendix D (eq. 10) and RAIF eq. 4: where the answer lies, or why not.

    Returns (start, end, problem): response[start:end] holds the text to verify, and problem is None when
    the format reward is 1 (RAIF: +1). Problems: "truncated" (cut at the generation limit), "unclosed_think"
    (a `<think>` after the last `</think>`, or none closed), "missing_think" (think="required" without
    `</think>`), "raif_format" (think="raif" without `<think>...</think><answer>...</answer>` at the end).
    Modes: "auto" verifies the text after the last `</think>` when there is one; "required" also demands
    it (the template may have opened `<think>` in the prompt); "none" requires no think block (the text
    after a stray `</think>` is still what gets verified); "raif" verifies what lies inside `<answer>`.
    """
    if think not in THINK_MODES:
        raise ValueError(f"think must be one of {THINK_MODES}, got {think!r}")
    close = response.rfind("</think>")
    start = 0 if close < 0 else close + len("</think>")
    if truncated:
        return start, len(response), "truncated"
    if think == "none":
        return start, len(response), None
    if response.rfind("<think>") > close:
        return start, len(response), "unclosed_think"
    if think == "auto":
        return start, len(response), None
    if close < 0:
        return 0, len(response), "missing_think" if think == "required" else "raif_format"
    if think == "required":
        return start, len(response), None
    # RAIF: <think>...</think> then <answer>...</answer> closing the response (whitespace aside).
    tail = response[start:]
    body = tail.strip()
    if (response.find("<think>") < 0 or not body.startswith("<answer>") or not body.endswith("</answer>")
            or len(body) < len("<answer></answer>")):
        return start, len(response), "raif_format"
    a = start + tail.index("<answer>") + len("<answer>")
    return a, start + tail.rindex("</answer>"), None


def score_response(response: str, constraints, kind: str = "scopeif", alpha: float = 3.0, think: str = "auto",
                   truncated: bool = False, budget_s: float | None = None,
                   max_response_chars: int | None = None, judge=None, prompt: str = "",
                   nothink: bool = False) -> dict:
    """The reward of one response under every constraint of its instruction: the one composite that the
    OpenRLHF, TRL and verl adapters and the embedded trainer call.

    Gate (format_gate), then one `Doc` per response shared by all its constraints, `verify` each, and the
    `kind` reward: "ila", "cla", "scopeif" (eq. 7), "scopeif_flat" (wo HRA) -- each times the format reward
    (eq. 10, 0 or 1) -- or "raif" (eq. 4-6, -3 on a format failure); RANGES[kind] holds the result. A failed
    gate verifies nothing and counts every constraint violated with g = 0. Never raises on the response
    text: a verifier exception is recorded in "errors" and its constraint counted violated with g = 0.

    Limits for a reward worker (the adapters set them; None is no limit): `budget_s` seconds for all of the
    response's constraints -- the first is always checked, and once the budget is spent the rest count
    violated with g = 0; "over_budget" counts them, and the constraints whose label regex ran out of its own
    CPU time in verify (Verdict.budget_exceeded); `max_response_chars` -- the text to verify (after the think
    block, or inside <answer>) is cut to that many characters first ("clipped"). The gate still reads the
    whole response.

    Judged constraints (`"judge": true`, X15: only the constraint in words) go to `judge(prompt, text, answer,
    targets)` -- an ifcore.judge.tgv.TGV, or any callable returning {"satisfied", "graded", ...} -- outside the
    time budget (the judge has its own timeouts). Without a judge, or when it leaves one unjudged
    (satisfied None), the constraint counts violated with g = 0 and "errors" says why; and, as the ScopeIF
    reference code does for a prompt with an unresolved judgment (scopeif.py compute_score: `prompt_failed`), the
    graded kinds ("scopeif", "scopeif_flat") fall back to the binary reward, the satisfied fraction ("unresolved"
    counts those constraints).

    RAIF's format (think="raif"): a response whose last think block is empty or the template's placeholder
    (`raif_reasoning_problem`) has its answer left unjudged, every constraint violated (R_accuracy -2, the authors'
    complex_scoring.py:278), unless `nothink`: the rollout was sampled with the empty think block in its prompt
    (RAIF eq. 7's y-hat), whose answer the paper judges ("receives its accuracy reward").

    Returns reward, satisfied (list of bool), graded (list of g_i, eq. 6), format_ok, problem (format_gate's),
    reasoning (raif_reasoning_problem's, None when judged),
    answer (the verified text), offset (add it to a verdict span to index `response`), verdicts (one per
    constraint, None where nothing was verified: their evidence spans are RTT's relevance labels), errors,
    over_budget (constraints left unchecked or cut short), clipped, and judged (the judge's verdict dicts,
    None for schema constraints).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    alpha = check_alpha(alpha)
    deadline = None if budget_s is None else perf_counter() + budget_s
    if not isinstance(response, str):
        response = "" if response is None else str(response)
    start, end, problem = format_gate(response, think, truncated)
    n = len(constraints)
    verdicts, errors, judged, unresolved = [None] * n, [], [None] * n, 0
    satisfied, grades = [False] * n, [0.0] * n
    offset, answer, over_budget, clipped = 0, "", 0, False
    reasoning = raif_reasoning_problem(response) if think == "raif" and problem is None and not nothink else None
    if problem is None and reasoning is None:
        clipped = max_response_chars is not None and end - start > max_response_chars
        if clipped:
            end = start + max_response_chars
        # Outside RAIF the Doc finds the answer after the last </think> itself, so spans index `response`.
        offset = start if think == "raif" else 0
        doc = Doc(response[start:end] if think == "raif" else response[:end] if clipped else response)
        answer = doc.text[doc.root[0]:doc.root[1]]
        for i, c in enumerate(constraints):
            if getattr(c, "judge", False) or (isinstance(c, dict) and c.get("judge") is True):
                text, targets = (c.text, c.targets) if not isinstance(c, dict) else (c.get("text"), c.get("targets"))
                unresolved += 1  # until the judge resolves it
                if judge is None:
                    errors.append(f"constraint {i}: a judged constraint and no judge (judge=, IFCORE_JUDGE_URL)")
                    continue
                try:
                    judged[i] = v = judge(prompt, text, answer, targets)
                    if v["satisfied"] is None:
                        errors.append(f"constraint {i}: unjudged: {v.get('error')}")
                    else:
                        satisfied[i], grades[i] = bool(v["satisfied"]), float(v["graded"])
                        unresolved -= 1
                except Exception as e:  # a judge bug or outage must not stop a training run either
                    errors.append(f"constraint {i}: judge: {type(e).__name__}: {e}")
                continue
            if i and deadline is not None and perf_counter() >= deadline:
                over_budget += 1  # and on to the next: a judged constraint after it is still judged
                continue
            try:
                verdicts[i] = verify(c, doc)
                satisfied[i], grades[i] = bool(verdicts[i].satisfied), float(verdicts[i].graded(alpha))
                over_budget += verdicts[i].budget_exceeded
            except Exception as e:  # a verifier bug must not stop a training run; it is reported
                verdicts[i] = None
                errors.append(f"constraint {i}: {type(e).__name__}: {e}")
    ok = problem is None
    if kind == "raif":
        reward = raif(satisfied, ok, reasoning is None)
    elif not ok:
        reward = 0.0
    elif kind == "ila":
        reward = ila(satisfied)
    elif kind == "cla":
        reward = cla(satisfied)
    elif unresolved:  # the reference's fallback for a prompt whose judgment did not resolve: the binary reward
        reward = cla(satisfied)
    elif kind == "scopeif":
        reward = scopeif(satisfied, grades)
    else:
        reward = scopeif_flat(grades)
    return {"reward": float(reward), "satisfied": satisfied, "graded": grades, "format_ok": ok,
            "problem": problem, "reasoning": reasoning, "answer": answer, "offset": offset, "verdicts": verdicts,
            "errors": errors, "over_budget": over_budget, "clipped": clipped, "judged": judged,
            "unresolved": unresolved}
