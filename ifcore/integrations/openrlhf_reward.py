"""OpenRLHF 0.11.x reward function: pass this file's path as `--reward.remote_url`.

OpenRLHF loads the file with importlib (so imports here are absolute) and calls
`reward_func(queries, prompts, labels)` from a thread, once per rollout: `queries` are
`tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)`, `prompts` the chat-templated prompt
strings, `labels` the `--data.label_key` column (schema v1 constraints). It reads back `rewards` (advantages),
`scores` (dynamic filtering, in [0, 1]) and `extra_logs` (one scalar per key, averaged over samples; every
sample must carry the same keys).

Settings: IFCORE_REWARD, IFCORE_THINK, IFCORE_ALPHA, IFCORE_BUDGET_S, IFCORE_MAX_RESPONSE_CHARS, and for
judged constraints IFCORE_JUDGE_URL / IFCORE_JUDGE_MODEL (see ifcore.integrations) and IFCORE_EOS, the comma-separated end-of-sequence strings a finished response ends
with. OpenRLHF does not tell a reward function that a response hit the length limit, but a finished one ends
with its EOS token's text; a response ending with none of them is truncated and gated to 0 (ScopeIF
appendix D). IFCORE_EOS="" turns that detection off.
"""
from __future__ import annotations

import logging
import os

import torch

from ifcore.integrations import load_constraints, log_keys, sample_logs, score, settings
from ifcore.rewards import RANGES, think_prefix

# ChatML/Qwen, GPT-style, Llama 2/Mistral, Llama 3, DeepSeek, Gemma, Phi-3, gpt-oss.
DEFAULT_EOS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>",
               "<end_of_turn>", "<eos>", "<|end|>", "<|return|>")
# Anomalies of recovering the response from the query, and samples whose scoring raised, logged next to
# sample_logs' keys.
RECOVERY_KEYS = ("prompt_mismatch", "prompt_not_found", "reward_error")
logger = logging.getLogger(__name__)


def _split_query(query: str, prompt: str) -> tuple[str, str | None]:
    """(response, anomaly). The query normally starts with the prompt; a tokenizer round trip or a
    left-truncated prompt can change its head, so fall back to the prompt's tail, then to the whole query."""
    if query.startswith(prompt):
        return query[len(prompt):], None
    for k in (256, 64, 16):
        tail = prompt[-k:]
        i = query.find(tail) if tail else -1
        if i >= 0:
            return query[i + len(tail):], "prompt_mismatch"
    return query, "prompt_not_found"


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's `reward_func` convention (examples/python/reward_func.py): rewards and scores are float
    tensors [len(queries)], extra_logs maps each of a fixed set of names to the batch mean (a float)."""
    if not (len(queries) == len(prompts) == len(labels)):
        raise ValueError(f"reward_func: {len(queries)} queries, {len(prompts)} prompts, {len(labels)} labels")
    opts = settings()
    lo, hi = RANGES[opts["kind"]]
    eos = tuple(m for m in os.environ.get("IFCORE_EOS", ",".join(DEFAULT_EOS)).split(",") if m)
    rewards, scores = [], []
    totals = dict.fromkeys(log_keys(RECOVERY_KEYS), 0.0)
    for i, (query, prompt, label) in enumerate(zip(queries, prompts, labels)):
        prompt = prompt if isinstance(prompt, str) else str(prompt)
        where = f"sample {i} (prompt ending {' '.join(prompt[-1000:].split())[-100:]!r})"
        try:
            constraints = load_constraints(label, f"label of {where}")
            response, anomaly = _split_query(query if isinstance(query, str) else "", prompt)
            # A finished response ends with an EOS token's text (and maybe a second one, as ChatML + endoftext).
            response, finished = response.rstrip(), False
            while any(response.endswith(m) for m in eos):
                m = next(m for m in eos if response.endswith(m))
                response, finished = response[:-len(m)].rstrip(), True
            sample_opts = opts
            if opts["think"] == "raif":
                # RAIF: score from the think block's head the prompt holds on (rewards.think_prefix), as the embedded
                # trainer does; a block wholly in the prompt is a no-think rollout (eq. 7's y-hat), its answer judged
                # unless IFCORE_RAIF_NOTHINK_ACCURACY=authors (the authors' code gives it R_accuracy -2).
                head = think_prefix(prompt)
                authors = os.environ.get("IFCORE_RAIF_NOTHINK_ACCURACY") == "authors"
                sample_opts = {**opts, "nothink": "</think>" in head and not authors}
                response = head + response
            elif "</think>" in think_prefix(prompt):
                # A no-think rollout (the RAIF plug-in's empty think block ends its prompt): no think block to demand
                # in the response, the embedded trainer's gate for it (think_gate(tokenizer, False)).
                sample_opts = {**opts, "think": "none"}
            result = score(response, constraints, sample_opts, where, truncated=bool(eos) and not finished,
                           prompt=prompt)
        except Exception:
            # OpenRLHF swallows a reward function's exception (utils/agent.py logs one line at INFO) and the run
            # dies later on reward None, far from the cause: log it here with the sample, give the floor reward
            # (format failed, as RAIF's accuracy -2), count it in reward_error
            logger.exception("ifcore reward_func: scoring %s failed; it gets the floor reward %s", where, lo)
            rewards.append(float(lo))
            scores.append(0.0)
            totals["reward_error"] += 1.0
            totals["format_fail"] += 1.0
            continue
        rewards.append(result["reward"])
        # Dynamic filtering reads scores in [0, 1]: RAIF's [-3, 3] is mapped linearly, the others already are.
        scores.append((result["reward"] - lo) / (hi - lo))
        for k, v in sample_logs(result, constraints).items():
            totals[k] += v
        if anomaly:
            totals[anomaly] += 1.0
    n = max(len(queries), 1)
    return {"rewards": torch.tensor(rewards, dtype=torch.float32),
            "scores": torch.tensor(scores, dtype=torch.float32),
            "extra_logs": {k: v / n for k, v in totals.items()}}
