"""verl reward function: `custom_reward_function.path=<this file> custom_reward_function.name=compute_score`.

verl's reward managers call `compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=..., **reward_kwargs)` once per response: solution_str is the response decoded without special
tokens, ground_truth is the sample's `reward_model.ground_truth` (schema v1 constraints), and the
`custom_reward_function.reward_kwargs` of the config arrive as keyword arguments (kind, think, alpha,
budget_s, max_response_chars, judge; default IFCORE_REWARD / IFCORE_THINK / IFCORE_ALPHA / IFCORE_BUDGET_S /
IFCORE_MAX_RESPONSE_CHARS, see ifcore.integrations). A returned dict must hold `score`; verl appends
every key to a per-batch list, so every response returns the same keys.

Truncation is read from extra_info["response_is_truncated"], the key of the ScopeIF reference code.
"""
from __future__ import annotations

from ifcore.integrations import load_constraints, sample_logs, score, settings


def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, *,
                  kind: str | None = None, think: str | None = None, alpha: float | None = None,
                  budget_s: float | None = None, max_response_chars: int | None = None, judge=None, **kwargs) -> dict:
    """{"score": reward, **sample_logs}: the `ifcore.rewards.score_response` reward and the fixed set of
    per-sample logs (ILA, CLA, format failures, verifier errors, budget and size limits, per-scope counts)."""
    opts = settings(kind, think, alpha, budget_s, max_response_chars, judge)
    extra_info = extra_info if isinstance(extra_info, dict) else {}
    where = f"{data_source} sample {extra_info.get('index', '?')}"
    constraints = load_constraints(ground_truth, f"ground_truth of {where}")
    result = score(solution_str, constraints, opts, where, bool(extra_info.get("response_is_truncated", False)),
                   str(extra_info.get("prompt", "")))  # the instruction, for a judge of judged constraints
    return {"score": result["reward"], **sample_logs(result, constraints)}
