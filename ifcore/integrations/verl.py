"""verl reward function: `custom_reward_function.path=<this file> custom_reward_function.name=compute_score`.

verl's reward managers call `compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=..., **reward_kwargs)` once per response: solution_str is the response decoded without special
tokens, ground_truth is the sample's `reward_model.ground_truth` (schema v1 constraints), and the
`custom_reward_function.reward_kwargs` of the config arrive as keyword arguments (kind, think, alpha;
default IFCORE_REWARD / IFCORE_THINK / IFCORE_ALPHA). A returned dict must hold `score`; verl appends
every key to a per-batch list, so every response returns the same keys.

Truncation is read from extra_info["response_is_truncated"], the key of the ScopeIF reference code.
"""
from __future__ import annotations

from ifcore.integrations import load_constraints, sample_logs, settings
from ifcore.rewards import score_response


def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, *,
                  kind: str | None = None, think: str | None = None, alpha: float | None = None, **kwargs) -> dict:
    """{"score": reward, **sample_logs}: the `ifcore.rewards.score_response` reward and the fixed set of
    per-sample logs (ILA, CLA, format failures, per-scope counts)."""
    kind, think, alpha = settings(kind, think, alpha)
    extra_info = extra_info if isinstance(extra_info, dict) else {}
    where = f"ground_truth of {data_source} sample {extra_info.get('index', '?')}"
    constraints = load_constraints(ground_truth, where)
    truncated = bool(extra_info.get("response_is_truncated", False))
    result = score_response(solution_str, constraints, kind, alpha, think, truncated)
    return {"score": result["reward"], **sample_logs(result, constraints)}
