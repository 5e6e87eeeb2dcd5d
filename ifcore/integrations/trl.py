"""TRL GRPOTrainer reward function: `GRPOTrainer(..., reward_funcs=reward_fn)`.

TRL calls `reward_fn(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=...,
log_extra=..., log_metric=...)` with one entry per completion, each dataset column (other than prompt,
completion, completion_ids) as a list, and expects one float per completion. Completions are strings, or
message lists for conversational datasets.

Settings are keyword arguments, so bind them with functools.partial (TRL names a partial after the
function): kind, think, alpha, budget_s, max_response_chars (default: IFCORE_REWARD / IFCORE_THINK /
IFCORE_ALPHA / IFCORE_BUDGET_S / IFCORE_MAX_RESPONSE_CHARS, see ifcore.integrations), judge (for judged
constraints; default: IFCORE_JUDGE_URL's, see ifcore.integrations), label_column (default "label"), and eos_token_ids: TRL decodes completions without special tokens, so a truncated completion is
one whose ids do not end with an EOS id; without eos_token_ids nothing is counted truncated
(GRPOConfig.mask_truncated_completions then keeps such completions out of the loss instead).
"""
from __future__ import annotations

from ifcore.integrations import load_constraints, sample_logs, score, settings
from ifcore.rewards import SELECTORS


def _completion_text(completion) -> str:
    """The text to score: a string as is; for a conversation, the last message's content (text parts joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return content if isinstance(content, str) else ""
    return ""


def reward_fn(prompts, completions, completion_ids=None, *, kind: str | None = None, think: str | None = None,
              alpha: float | None = None, budget_s: float | None = None, max_response_chars: int | None = None,
              label_column: str = "label", eos_token_ids=None, judge=None, **kwargs) -> list[float]:
    """One reward per completion (`ifcore.rewards.score_response`), constraints from the `label_column`
    dataset column. With TRL's `log_metric`, logs ILA, CLA, format failures, verifier errors, constraints
    left unchecked by the time budget, clipped responses and the CSR of each scope class."""
    opts = settings(kind, think, alpha, budget_s, max_response_chars, judge)
    if label_column not in kwargs:
        columns = sorted(k for k, v in kwargs.items() if isinstance(v, list))
        raise ValueError(f"reward_fn: no dataset column {label_column!r} (columns: {columns}); pass "
                         f"label_column= to name the one holding the constraints")
    labels = kwargs[label_column]
    if len(labels) != len(completions):
        raise ValueError(f"reward_fn: {len(completions)} completions but {len(labels)} {label_column!r} values")
    eos = set(eos_token_ids or ())
    rewards, totals = [], {}
    for i, (completion, label) in enumerate(zip(completions, labels)):
        prompt = prompts[i] if prompts is not None and i < len(prompts) else ""
        excerpt = " ".join(str(prompt if isinstance(prompt, str) else _completion_text(prompt))[-1000:].split())
        where = f"completion {i} (prompt ending {excerpt[-100:]!r})"
        constraints = load_constraints(label, f"{label_column} of {where}")
        ids = completion_ids[i] if completion_ids is not None else None
        truncated = bool(eos) and ids is not None and (len(ids) == 0 or int(ids[-1]) not in eos)
        instruction = prompt if isinstance(prompt, str) else _completion_text(prompt)
        result = score(_completion_text(completion), constraints, opts, where, truncated, instruction)
        rewards.append(result["reward"])
        for k, v in sample_logs(result, constraints).items():
            totals[k] = totals.get(k, 0.0) + v
    log_metric = kwargs.get("log_metric")
    if callable(log_metric) and rewards:
        n = len(rewards)
        for k in ("ila", "cla", "format_fail", "verify_errors", "over_budget", "clipped"):
            log_metric(f"ifcore/{k}", totals[k] / n)
        for s in SELECTORS:  # the batch is pooled here, so the CSR itself can be logged
            if totals[f"scope_{s}_n"]:
                log_metric(f"ifcore/csr_{s}", totals[f"scope_{s}_sat"] / totals[f"scope_{s}_n"])
    return rewards
