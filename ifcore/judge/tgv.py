"""Tool-grounded verification, ScopeIF section 5.1: targets -> tool (eq. 2) -> execution (eq. 3) -> tool-grounded
judgment (eq. 4) -> records ([l, u], a) -> the graded value g (eq. 5-6) that the rewards of ifcore.rewards take.

`TGV(client, sandbox)` is a judge: `tgv(instruction, constraint, response)` returns one verdict dict,
{"satisfied", "graded", "records", "source", ...}, and `tgv.many(items)` judges many at once (the client bounds
the requests in flight, the sandbox the tools running). `source` says where the verdict came from:
- "tgv": the judgment's counting results parsed; satisfied iff every actual value lies in its bounds and g is
  their geometric mean of exp(-alpha d / s) (the statistics win over a contradicting conclusion, as in ScopeIF
  appendix E.4; `inconsistent` marks those);
- "fallback": a stage failed on the way (targets unparsed, or the counting results unparsed) and the verdict is
  the judge's binary conclusion, g = 1 or 0;
- None: no verdict at all (the judge's conclusion unparsed after its retries, or the endpoint failed): unjudged,
  with the reason in "error".
A failed or absent tool is not a fallback: the judgment runs without auxiliary results, as the prompt allows.
`counts` tallies every stage's outcome over the judge's life (reports and tests read it).

Modes, the paper's Table 4 rows: "tgv" (the tool sees the response), "static" (w/ Static Tool: the tool is
designed without the response and takes the whole response as its input), "llm" (a pure LLM judge: no tool).
Defaults follow the reference code (thu-coai/ScopeIF, ScopeIF/verl/utils/reward_score/scopeif.py: compute_score,
_generate_code_with_retries, _generate_critique_with_retries, _score_objective_results):
- 2 attempts in total at the tool (code_max_iters = 2), the second when the first did not parse or its tool failed
  to run; 3 attempts in total at the judgment (max_iters = 3), the next when the reply holds no valid counting
  results; every attempt at temperature 0.0 (a retry carries a seed per attempt, so the disk cache does not answer
  it with the first reply and it stays reproducible);
- each record's eq. 5 reward clipped at 1e-5 before the geometric mean of eq. 6 (np.clip(item_rewards, 1e-5, 1));
- a judgment without valid counting results after its attempts is unresolved (source None), and the response's
  reward then falls back to the binary reward (ifcore.rewards.score_response; the reference's `prompt_failed`).
Named options that are not the reference: `retry_temperature` > 0 resamples a retry; `reward_floor=0` is eq. 6
strictly (g = 0 as soon as one record's reward is 0); `verdict_fallback=True` takes the judge's parsed conclusion
(g = 1 or 0) when its counting results do not parse, instead of leaving the constraint unresolved.
"""
from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ifcore.judge.prompts import (JudgeParseError, critique_prompt, parse_critique, parse_targets, parse_tool,
                                  parse_verdict, target_prompt, tool_prompt)
from ifcore.rewards import check_alpha, graded

MODES = ("tgv", "static", "llm")
STATIC_RESPONSE = "(not shown: design a tool for any response to this instruction; its only input is the whole " \
                  "response, so give every parameter the value \"ALL\")"


class TGV:
    def __init__(self, client, sandbox=None, mode: str = "tgv", alpha: float = 3.0, generation_retries: int = 1,
                 critique_retries: int = 2, retry_temperature: float = 0.0, reward_floor: float = 1e-5,
                 verdict_fallback: bool = False, **params):
        """`client`: anything with `complete(prompt, **params) -> str` raising ifcore.judge.client.JudgeError
        (a JudgeClient). `sandbox`: an ifcore.judge.sandbox.Sandbox (needed unless mode is "llm"). `params`:
        sampling parameters for every request (e.g. max_tokens). The other options: the module docstring."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode != "llm" and sandbox is None:
            raise ValueError(f"mode {mode!r} runs the judge's tools: pass a sandbox (ifcore.judge.sandbox.Sandbox)")
        if not 0.0 <= reward_floor < 1.0:
            raise ValueError(f"reward_floor must lie in [0, 1), got {reward_floor!r}")
        if not 0.0 <= retry_temperature <= 2.0:
            raise ValueError(f"retry_temperature must lie in [0, 2], got {retry_temperature!r}")
        self.client, self.sandbox, self.mode, self.alpha = client, sandbox, mode, check_alpha(alpha)
        self.generation_tries, self.critique_tries = generation_retries + 1, critique_retries + 1
        self.retry_temperature, self.reward_floor, self.verdict_fallback = retry_temperature, reward_floor, \
            verdict_fallback
        self.params = params
        self.counts: Counter = Counter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TGV({self.client!r}, mode={self.mode!r})"

    def _count(self, *keys: str) -> None:
        with self._lock:
            self.counts.update(keys)

    def _ask(self, prompt: str, parse, tries: int, first: int = 0):
        """parse(reply) for the first reply that parses; JudgeParseError of the last one when none does. Attempts
        are numbered from `first`; a retry carries its number as the seed."""
        for attempt in range(first, first + tries):
            retry = {} if attempt == 0 else {"temperature": self.retry_temperature, "seed": attempt}
            try:
                return parse(self.client.complete(prompt, **{**self.params, **retry}))
            except JudgeParseError as e:
                last = e
        raise last

    def __call__(self, instruction: str, constraint: str, response: str, targets: list | None = None) -> dict:
        """One constraint of `instruction`, in words, judged on `response`. `targets`: its counting objects when
        already known (synthesis extracts them), else the judge extracts them first (Table 13)."""
        from ifcore.judge.client import JudgeError

        out = {"satisfied": None, "graded": None, "records": [], "source": None, "stage": None, "error": None,
               "tool": None, "inconsistent": False}
        try:
            if targets is None:
                try:
                    targets = self._ask(target_prompt(instruction, constraint), parse_targets, self.generation_tries)
                except JudgeParseError as e:
                    self._count("targets_unparsed")
                    out["stage"], out["error"], targets = "targets", str(e), []
            results = self._tool(instruction, constraint, response, targets, out) if self.mode != "llm" else ""
            prompt = critique_prompt(instruction, constraint, response, targets, results)
            def critique(text: str) -> dict:
                judged = parse_critique(text)
                if not judged["records"] and not self.verdict_fallback:  # the reference: not a valid judgment
                    raise JudgeParseError("the judgment gives no counting results", text)
                return judged

            try:
                judged = self._ask(prompt, critique, self.critique_tries)
            except JudgeParseError as e:
                try:  # the conclusion alone: the binary verdict the graded one falls back to
                    if not self.verdict_fallback:
                        raise
                    verdict = parse_verdict(e.raw)
                except JudgeParseError:
                    self._count("unjudged")
                    out.update(stage="judgment", error=str(e))
                    return out
                self._count("records_unparsed")
                out.update(stage=out["stage"] or "records", error=out["error"] or str(e))
                judged = {"verdict": verdict, "records": []}
        except JudgeError as e:
            self._count("request_failed", "unjudged")
            out.update(stage="request", error=str(e))
            return out
        if out["stage"] is not None or not judged["records"]:
            self._count("fallback")
            satisfied = judged["verdict"]
            return {**out, "satisfied": satisfied, "graded": 1.0 if satisfied else 0.0, "source": "fallback",
                    "verdict": satisfied}
        records = [{"target": r["target"], "lo": r["required"][0], "hi": r["required"][1], "actual": r["actual"]}
                   for r in judged["records"]]
        satisfied = all(r["lo"] <= r["actual"] <= r["hi"] for r in records)
        # eq. 6: the geometric mean of the records' eq. 5 rewards, each clipped at reward_floor as the reference
        # does (with 0: eq. 6 strictly, 0 as soon as one is 0)
        rewards = [max(self.reward_floor, graded(r["lo"], r["hi"], r["actual"], self.alpha)) for r in records]
        g = 0.0 if min(rewards) <= 0.0 else math.exp(sum(map(math.log, rewards)) / len(rewards))
        inconsistent = satisfied != judged["verdict"]
        self._count("tgv", *(["inconsistent"] if inconsistent else []))
        return {**out, "satisfied": satisfied, "graded": g, "records": records, "source": "tgv",
                "verdict": judged["verdict"], "inconsistent": inconsistent}

    def _tool(self, instruction: str, constraint: str, response: str, targets: list, out: dict) -> str | list:
        """Design the tool (Table 15) and run it in the sandbox: its results for the judgment, "" without any."""
        static = self.mode == "static"
        prompt = tool_prompt(instruction, constraint, STATIC_RESPONSE if static else response, targets)
        for attempt in range(self.generation_tries):  # the reference designs anew when a tool fails to parse or run
            if attempt:
                self._count("tool_retry")
            try:
                tool = self._ask(prompt, lambda text: parse_tool(text, response), 1, first=attempt)
            except JudgeParseError as e:
                kind, out["tool"] = "unparsed", {"kind": "unparsed", "error": e.what}
                continue
            if tool is None:  # the judge says no tool is needed: not a failure, no retry
                self._count("tool_none")
                out["tool"] = {"kind": "none"}
                return ""
            args = [response if static else value for value in tool["args"].values()]
            ran = self.sandbox.run(tool["code"], tool["name"], args)
            kind, out["tool"] = ran["kind"], {"kind": ran["kind"], "error": ran["error"]}
            if ran["ok"]:
                break
        self._count(f"tool_{kind}")
        return ran["result"] if kind == "ok" else ""

    def many(self, items: list[tuple], workers: int | None = None) -> list[dict]:
        """Judge (instruction, constraint, response[, targets]) items concurrently; verdicts in their order."""
        if not items:
            return []
        workers = workers or getattr(getattr(self.client, "settings", None), "concurrency", 8)
        with ThreadPoolExecutor(min(workers, len(items))) as pool:
            return list(pool.map(lambda item: self(*item), items))


@contextlib.contextmanager
def judge_session(base_url: str | None = None, model: str | None = None, serve: str | None = None,
                  mode: str = "tgv", concurrency: int = 8, tools: int = 2, max_tokens: int = 4096,
                  retries: int | None = None, **settings):
    """A TGV judge for a block: a JudgeClient on `base_url` / `model` (default $IFCORE_JUDGE_URL /
    $IFCORE_JUDGE_MODEL), or on a registry model `serve`d for the block on loopback (ifcore.infer.serve: vLLM
    where its environment exists, else `transformers serve`), and a sandbox of `tools` workers; all stopped on
    exit. `retries`: resamples of an unparsable reply at every stage (None: the reference code's, 1 at the tool
    and 2 at the judgment). `settings` go to JudgeClient."""
    from ifcore.judge.client import JudgeClient
    from ifcore.judge.sandbox import Sandbox

    for name, value in (("concurrency", concurrency), ("tools", tools), ("max_tokens", max_tokens)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    with contextlib.ExitStack() as stack:
        if serve:
            from ifcore.infer.serve import serve as serve_model  # lazily: only a locally served judge needs it

            endpoint = stack.enter_context(serve_model(serve))
            base_url, model = endpoint.base_url, endpoint.model
            # vLLM batches concurrent requests; transformers serve answers one at a time (its Endpoint says 1): more
            # would only queue into timeouts
            concurrency = min(concurrency, endpoint.concurrency)
        client = JudgeClient(base_url, model, concurrency=concurrency, **settings)
        sandbox = stack.enter_context(Sandbox(workers=tools)) if mode != "llm" else None
        tries = {} if retries is None else {"generation_retries": retries, "critique_retries": retries}
        yield TGV(client, sandbox, mode=mode, max_tokens=max_tokens, **tries)
