"""GRPO on the embedded policy (or a real checkpoint): the loop behind `ifcore train`.

One step: take `prompts_per_step` rows, sample `group_size` rollouts of each (temperature 1, top-p 1, KV cache),
score every rollout with ifcore.rewards.score_response (the format gate included), turn each group's rewards
into advantages with ifcore.advantages.group_norm, broadcast them over the response tokens ([B, T]: the hook
where RTT's token-level advantages plug in), then take `ppo_epochs` optimizer steps on the clipped surrogate
with a k3 KL penalty to the frozen initial policy (RAIF eq. 1-3; ScopeIF appendix E.2 uses 1e-3).

Everything random is a function of (seed, step): the prompt order, the sampling noise, and nothing else. So a
run killed after any checkpoint and started again with the same command continues exactly where the
checkpoint left it, and its metrics rows equal those of a run that was never stopped (timings aside).
On CUDA the weights stay fp32 and every forward pass runs under bf16 autocast; on CPU everything is fp32 unless
`precision` is "bf16" (issue 25: then the CPU does as CUDA does; fp32 master weights and AdamW state).

RAIF (notebook 02): with reward "raif" the prompt is RAIF's CoT prompt (sft.raif_prompt) and the format gate wants
`<think>...</think><answer>...</answer>` (eq. 4); empty or placeholder reasoning gets R_accuracy -2 (the authors'
complex_scoring.py:278). `superior_cot` "group" samples `nothink_share` of each group with RAIF's empty think block in
the prompt, for eq. 7's test only: those rollouts and a dropped group's never carry gradient, and their rewards
still enter the group's mean and std (ifcore.advantages.superior_cot_mask, as the authors' replay buffer and
experience maker do); "reference" is the authors' per-sample test against an offline no-reasoning count. The
GRPO baseline ("off") samples no no-think rollouts. `bc_coef` adds behaviour cloning of expert responses (eq. 8,
the authors' PPO-ptx term) to the loss. Named options that are not the paper's, off by default: refill_rounds
(replace dropped groups), nothink_accuracy "authors" (the authors' code scores a no-think rollout -2).

Real models (issue 10, docs/inference.md): `model` is a registry name (smollm2-135m), a folder or a cached hub id;
`lora_r` > 0 trains LoRA adapters (peft) whose model, adapters off, is the KL reference, and checkpoints hold the
adapters only; a chat template without think tags gets both think modes from model.chat_prompt / think_gate.

A run directory belongs to one configuration: config.json holds the run's identity (run_identity: every
TrainConfig field, the warm start with its defaults filled in, the model's and the data files' sha256, the trainer
version) and a rerun resumes only when that matches. Each checkpoint carries the sha256 of its files; a resume skips (and
removes) a checkpoint that no longer matches them, warning with the file's name, and falls back to the previous
one (the last two are kept). A lock file keeps a second trainer out of a directory in use.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from ifcore import tracking
from ifcore.advantages import superior_cot_keep
from ifcore.rtt_labels import criteria_text
from ifcore.train import TRAINER_VERSION
from ifcore.progress import bar as progress_bar
from ifcore.verify import VERIFY_VERSION
# generate lives with the policy (model.py), below both this loop and the RTT data builder that samples with it
from ifcore.train.model import autocast as bf16_autocast
from ifcore.train.model import chat_prompt, generate, load_lora_policy, load_policy, think_gate
from ifcore.train import rtt
from ifcore.train.config import TrainConfig, load_config  # noqa: F401 - load_config's old home
from ifcore.train.sft import NOTHINK_PREFIX, bc_loss, expert_batch, raif_prompt

# Keys of a metrics row that measure wall-clock time rather than the run: the only ones a resume may change.
TIMING_KEYS = ("step_seconds", "eval_seconds", "rtt_seconds")


def run_identity(cfg: TrainConfig, paths: dict) -> tuple[dict, str]:
    """(identity, key): what a run's numbers depend on, and a short hash of it naming the configuration.

    Every TrainConfig field but output_dir; the warm start with its defaults filled in (when the policy is the
    default one: {} and the explicit defaults are one run); the sha256 of the model's files and of the data files
    (changed weights or an edited file are another run); the model's absolute path when one is given; the trainer
    and synth versions. Flat, so that a mismatch names fields.
    """
    from ifcore import synth
    from ifcore.infer.registry import checksums
    from ifcore.train.sft import WarmStartConfig

    identity = {k: v for k, v in asdict(cfg).items() if k not in ("output_dir", "warm_start")}
    if cfg.precision == "fp32":  # the default keeps the identities (and cached runs) made before the option existed
        del identity["precision"]
    if cfg.model is None:
        identity |= {f"warm_start.{k}": v for k, v in asdict(WarmStartConfig(**cfg.warm_start)).items()}
    else:
        identity["model"] = os.path.abspath(paths["model"])  # a registry name: the folder it resolved to
    # The weights too: a default policy rebuilt elsewhere (another machine, another thread count) has the same
    # WarmStartConfig and other bits, and a folder can be retrained in place.
    identity["model_sha256"] = hashlib.sha256(checksums(Path(paths["model"])).encode()).hexdigest()
    for k in ("train_data", "test_data"):
        identity[k] = "default" if getattr(cfg, k) is None else "given"
        identity[f"{k}_sha256"] = hashlib.sha256(Path(paths[k]).read_bytes()).hexdigest()
    if "bc_data" in paths:  # RAIF's behaviour cloning: the expert responses count too
        identity["bc_data"] = "default" if cfg.bc_data is None else "given"
        identity["bc_data_sha256"] = hashlib.sha256(Path(paths["bc_data"]).read_bytes()).hexdigest()
    if cfg.rtt_discriminator is not None:  # RTT: a retrained discriminator is another run, wherever it lies
        if not Path(cfg.rtt_discriminator).is_dir():
            raise FileNotFoundError(f"rtt_discriminator: {cfg.rtt_discriminator} is not a directory")
        identity["rtt_discriminator"] = "given"
        identity["rtt_discriminator_sha256"] = hashlib.sha256(
            checksums(Path(cfg.rtt_discriminator)).encode()).hexdigest()
    identity |= {"trainer_version": TRAINER_VERSION, "synth_version": synth.SYNTH_VERSION,
                 "verify_version": VERIFY_VERSION}
    return identity, hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


def resolve_paths(cfg: TrainConfig, progress: bool = True) -> dict[str, str]:
    """{"model", "train_data", "test_data"} (and "bc_data" when bc_coef is set): the configured ones, the cached
    defaults (built once) for the rest."""
    from ifcore.infer.registry import resolve

    # A registry name (smollm2-135m is dequantized on first use) or a path: the from_pretrained folder.
    paths = {"model": cfg.model and str(resolve(cfg.model)), "train_data": cfg.train_data, "test_data": cfg.test_data}
    if cfg.bc_coef:  # RAIF's behaviour cloning reads expert responses
        paths["bc_data"] = cfg.bc_data
    if None in paths.values():
        from ifcore.train.sft import WarmStartConfig, default_assets

        defaults = default_assets(WarmStartConfig(**cfg.warm_start), progress=progress)
        paths = {k: v if v is not None else defaults[k] for k, v in paths.items()}
        if cfg.bc_coef and cfg.bc_data is None and cfg.bc_expert == "deep":  # a reasoning the warm start never saw
            from ifcore.synth import expert_file

            paths["bc_data"] = expert_file(defaults["train_data"], defaults["bc_data"],
                                           Path(defaults["bc_data"]).with_name("expert_deep.jsonl"))
    return paths


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why checkpoint `ckpt` cannot be trusted, naming the file, or None when every file it was written with is
    there with its recorded size and sha256."""
    try:
        recorded = json.loads((ckpt / "sha256.json").read_text())
    except (OSError, ValueError):
        return f"{ckpt / 'sha256.json'}: missing or unreadable (the checksums written with the checkpoint)"
    for name, want in recorded.items():
        path = ckpt / name
        if not path.is_file():
            return f"{path}: missing"
        if path.stat().st_size != want["bytes"]:
            return f"{path}: {path.stat().st_size} bytes where {want['bytes']} were written (truncated)"
        if _sha256(path) != want["sha256"]:
            return f"{path}: sha256 differs from the one written with it (corrupt)"
    return None


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_eps: float, kl_coef: float):
    """The GRPO objective, negated (RAIF eq. 2-3, after DeepSeekMath): all arguments are [B, T] tensors.

    per token: -min(rho A, clip(rho, 1-eps, 1+eps) A) + kl_coef * k3, rho = exp(logp - old_logp) and
    k3 = pi_ref/pi - log(pi_ref/pi) - 1 (Schulman's low-variance, non-negative KL estimator); each response's
    tokens are averaged (1/|y_i|), then the responses. Returns (loss, kl per token, clipped-token fraction).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
    log_ref_ratio = ref_logp - logp
    k3 = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    per_token = -torch.minimum(unclipped, clipped) + kl_coef * k3
    mask = mask.to(per_token.dtype)
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    n = mask.sum().clamp(min=1)
    return loss, (k3 * mask).sum() / n, ((clipped < unclipped).to(mask.dtype) * mask).sum() / n


def response_logprobs(model, seqs, attention, n_prompt: int, with_entropy: bool = False):
    """log pi(token) of every response position [B, T] (and the full-vocabulary entropy there).

    Position ids come from the attention mask as in generate(), so left-padded prompts score the same tokens
    the sampler produced; only the response positions go through the LM head.
    """
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    n_resp = seqs.shape[1] - n_prompt
    logits = model(input_ids=seqs, attention_mask=attention, position_ids=positions,
                   logits_to_keep=n_resp + 1).logits[:, :-1].float()
    logz = logits.logsumexp(-1)
    logp = logits.gather(-1, seqs[:, n_prompt:, None]).squeeze(-1) - logz
    if not with_entropy:
        return logp, None
    return logp, logz - (logits.softmax(-1) * logits).sum(-1)


def read_rows(path: str) -> list[tuple[str, list]]:
    """(instruction, constraints) for every {"prompt", "label"} row of a JSONL file; errors name file:line."""
    from ifcore.jsonl import JsonlError, iter_jsonl, read_jsonl
    from ifcore.schema import parse_label

    rows = []
    with open(path, "rb") as f:
        for n, row, problem in iter_jsonl(f, required=("prompt", "label")):
            if problem or not isinstance(row["prompt"], str):
                raise JsonlError(f"{path}:{n}: {problem or 'prompt: expected a string'}")
            rows.append((row["prompt"], parse_label(row["label"], where=f"{path}:{n} label")))
    if not rows:
        raise JsonlError(f"{path}: no rows")
    return rows


EVAL_SAMPLES_KEPT = 4  # held-out completions written to samples.jsonl at each evaluation


# What a step-0 evaluation depends on besides the weights and the held-out data (both in the run identity by their
# sha256) and whether the reward is RAIF's: the arms of one seed differ only in fields that act from step 1 on (the
# other reward kinds judge held-out answers alike), and seeds that share a warm start differ only from step 1 on too
# (step 0's sampling is not seeded by the run's seed), so all of them share it: one evaluation per warm start.
EVAL_FIELDS = ("think", "alpha", "eval_prompts", "eval_samples", "max_new_tokens", "temperature", "top_p",
               "generate_batch", "precision", "threads", "lora_r", "lora_alpha", "lora_targets",
               "model_sha256", "test_data_sha256", "trainer_version", "synth_version", "verify_version")


def _step0_file(identity: dict, device) -> Path:
    """Where the step-0 evaluation row of runs with these EVAL_FIELDS lies in the cache ($IFCORE_CACHE/evals);
    the device, torch's version and its kernel level count too (other float results)."""
    from ifcore.train.sft import cache_dir

    key = {k: identity.get(k) for k in EVAL_FIELDS} | {
        "raif": identity.get("reward") == "raif",  # RAIF's prompts and reward; the other kinds evaluate alike
        "device": str(device), "torch": torch.__version__, "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "")}
    return cache_dir() / "evals" / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16] + ".json")


def evaluate(model, tokenizer, rows, cfg: TrainConfig, device, autocast, step: int) -> dict:
    """Held-out ISR, CSR and CSR per ScopeIF selector (ScopeIF eq. 11-12), decoded two ways.

    eval_*: `eval_samples` samples per prompt from the rollout sampler (temperature, top-p), averaged: the
    expected CSR of the distribution GRPO optimizes, with the sampling noise averaged down. eval_greedy_*:
    greedy decoding. For a real LLM the two move together; a 0.5M-parameter policy's greedy output is
    degenerate (one argmax path, often repetitive), so its greedy figures move erratically and are kept for
    reference. A response that fails the format gate (truncated, unclosed think) satisfies none of its
    constraints, as score_response counts it. The prompts and the gate are the rollouts' (RAIF's for reward raif).
    RAIF (reward raif): also eval_reward, RAIF's reward, and the eval_nothink_* figures of the same prompts with
    the empty think block in the prompt: reward with minus without reasoning, measured in every arm (the GRPO
    baseline samples no no-think rollouts in training); eval_reward_by_prompt and eval_nothink_reward_by_prompt
    hold each prompt's mean reward, for intervals over prompts.
    """
    from ifcore.rewards import raif, raif_reasoning_problem, score_response, think_prefix

    t0 = time.time()
    row = {"type": "eval", "step": step}
    modes = [("eval", cfg.eval_samples, False), ("eval_greedy", 0, False)]
    if cfg.reward == "raif" and cfg.think:  # RAIF: the same prompts answered without reasoning (eq. 7's y-hat)
        modes.append(("eval_nothink", cfg.eval_samples, True))
    for prefix, k, nothink in modes:
        prompts = [_prompt(tokenizer, p, cfg, nothink=nothink) for p, _ in rows]
        # apart from the rollout seeds; step 0 (the warm start, shared) apart from the run's seed as well
        torch.manual_seed(2**40 + (cfg.seed * 1_000_003 if step else 0) + step)
        _, _, _, mask, texts, truncated = generate(model, tokenizer, prompts * max(k, 1), cfg.max_new_tokens, device,
                                                   autocast, sample=k > 0, temperature=cfg.temperature,
                                                   top_p=cfg.top_p, batch=cfg.generate_batch)
        per_scope: dict[str, list[bool]] = {s: [] for s in ("Global", "Traversal", "Position", "Condition", "Nested")}
        csr, isr, reward = [], [], []
        for i, (text, trunc) in enumerate(zip(texts, truncated)):
            constraints = rows[i % len(rows)][1]
            # CSR judges every answer; the reward also gives R_accuracy -2 to empty reasoning in CoT mode
            full = think_prefix(prompts[i % len(rows)]) + text if cfg.reward == "raif" else text
            scored = score_response(full, constraints, kind="ila", alpha=cfg.alpha, think=_think_mode(cfg, tokenizer),
                                    truncated=trunc, nothink=True)
            ok = scored["satisfied"]
            csr.append(sum(ok) / len(ok) if ok else 1.0)
            isr.append(all(ok))
            reward.append(float(raif(ok, scored["format_ok"], nothink or raif_reasoning_problem(full) is None)))
            for c, x in zip(constraints, ok):
                per_scope[c.selector].append(x)
        if prefix == "eval":  # the first sample of the first few prompts, kept in samples.jsonl
            row["samples"] = [{"prompt": rows[i][0], "response": texts[i], "truncated": bool(truncated[i]),
                               "csr": csr[i], "isr": bool(isr[i])} for i in range(min(EVAL_SAMPLES_KEPT, len(rows)))]
        row[f"{prefix}_isr"], row[f"{prefix}_csr"] = float(np.mean(isr)), float(np.mean(csr))
        row.update({f"{prefix}_csr_{s.lower()}": (float(np.mean(v)) if v else None) for s, v in per_scope.items()})
        if cfg.reward == "raif":  # RAIF's reward (eq. 6): what reasoning should raise over not reasoning
            row[f"{prefix}_reward"] = float(np.mean(reward))
            if k:  # each prompt's mean over its samples: intervals over prompts (response i answers prompt i % n)
                row[f"{prefix}_reward_by_prompt"] = np.round(np.reshape(reward, (k, len(rows))).mean(0), 4).tolist()
        row[f"{prefix}_response_len"] = float(mask.sum(-1).float().mean())
        row[f"{prefix}_truncated_fraction"] = float(np.mean(truncated))
        if not nothink:
            row |= reasoning_summary(tokenizer, texts, f"{prefix}_")
    row["eval_seconds"] = round(time.time() - t0, 3)
    return row


def _think_mode(cfg: TrainConfig, tokenizer, nothink: bool = False) -> str:
    # A template without think tags (SmolLM2) leaves the response free: a think block is allowed, not demanded.
    return "raif" if cfg.reward == "raif" else think_gate(tokenizer, cfg.think and not nothink)


# ---- RAIF: prompts, paired rollouts, superior-CoT enforcement, reasoning length ----------------------------------

def _prompt(tokenizer, instruction: str, cfg: TrainConfig, nothink: bool = False) -> str:
    """The rollout prompt: RAIF's CoT prompt for reward raif, else the plain chat prompt; `nothink` (or think
    false) supplies the empty think block in the prompt (RAIF's NOTHINK_PREFIX, or the template's)."""
    if cfg.reward == "raif":
        return raif_prompt(tokenizer, instruction, nothink=nothink or not cfg.think)
    return chat_prompt(tokenizer, instruction, think=cfg.think and not nothink)


def _score(text: str, truncated: bool, constraints, cfg: TrainConfig, tokenizer, prompt: str = "",
           nothink: bool = False, kind: str | None = None):
    """score_response of one rollout under the run's format gate. RAIF's gate wants the whole
    `<think>...</think><answer>...</answer>`, so the part of the think block that the prompt holds
    (rewards.think_prefix: a no-think rollout's empty block) is put back first; offset still indexes `text`.
    `nothink`: the rollout is eq. 7's y-hat, whose answer is judged (nothink_accuracy "answer") or, as the RAIF
    authors' code does, not (its empty think block: R_accuracy -2)."""
    from ifcore.rewards import score_response, think_prefix

    prefix = think_prefix(prompt) if cfg.reward == "raif" else ""
    s = score_response(prefix + text, constraints, kind=kind or cfg.reward, alpha=cfg.alpha,
                       think=_think_mode(cfg, tokenizer, nothink), truncated=truncated,
                       nothink=nothink and cfg.nothink_accuracy == "answer")
    s["offset"] -= len(prefix)
    return s


def accuracy(score: dict) -> float:
    """RAIF's R_accuracy (eq. 5) of a scored rollout: +2 all constraints followed, the followed fraction when some
    are, -2 when none are, the format fails or the reasoning is empty (its answer is then not judged). What
    superior-CoT compares."""
    from ifcore.rewards import raif

    ok = score["format_ok"]
    return float(raif(score["satisfied"], ok, score.get("reasoning") is None)) - (1.0 if ok else -1.0)


def reasoning_tokens(tokenizer, text: str) -> int | None:
    """Tokens of reasoning in a response: inside its first <think> ... </think> (RAIF Fig. 3); 0 without a think
    block; None where the block is opened and never closed (the reasoning was truncated: its length is unknown,
    not short; `reasoning_summary` counts such responses apart)."""
    a = text.find("<think>")
    if a < 0:
        return 0
    b = text.find("</think>", a)
    if b < 0:
        return None
    return len(tokenizer(text[a + len("<think>"):b].strip(), add_special_tokens=False).input_ids)


def reasoning_summary(tokenizer, texts: list[str], prefix: str = "") -> dict:
    """{prefix}reasoning_tokens, the mean over responses whose reasoning ended (None if none did), and
    {prefix}reasoning_truncated, the share whose think block never closed."""
    counts = [reasoning_tokens(tokenizer, t) for t in texts]
    ended = [c for c in counts if c is not None]
    return {f"{prefix}reasoning_tokens": float(np.mean(ended)) if ended else None,
            f"{prefix}reasoning_truncated": float(np.mean([c is None for c in counts])) if counts else None}


def read_references(path: str) -> list:
    """Each row's `reference` from its label (the RAIF authors' per-sample filter: which constraints a no-think
    model satisfied, one bool per constraint), or None where the label has none. Rows as read_rows reads them."""
    from ifcore.jsonl import JsonlError, iter_jsonl
    from ifcore.schema import parse_label

    out = []
    with open(path, "rb") as f:
        for n, row, _ in iter_jsonl(f, required=("prompt", "label")):
            label = json.loads(row["label"]) if isinstance(row["label"], str) else row["label"]
            ref = label.get("reference") if isinstance(label, dict) else None
            count = len(parse_label(label, where=f"{path}:{n} label"))
            if ref is not None and not (isinstance(ref, list) and len(ref) == count
                                        and all(isinstance(x, bool) for x in ref)):
                raise JsonlError(f"{path}:{n}: label.reference: expected a list of {count} true/false values (one per "
                                 f"constraint), got {json.dumps(ref)[:60]}")
            out.append(ref)
    return out


def _merge(chunks: list[dict], pad_id: int):
    """One batch of the rollouts of several generate calls: prompts left-padded to the longest, responses
    right-padded (attention 0, response mask false), so that positions and masks stay what they were."""
    width_p = max(c["n_prompt"] for c in chunks)
    width_t = max(c["mask"].shape[1] for c in chunks)
    n = sum(len(c["seqs"]) for c in chunks)
    device = chunks[0]["seqs"].device
    seqs = torch.full((n, width_p + width_t), pad_id, device=device)
    attention = torch.zeros((n, width_p + width_t), dtype=chunks[0]["attention"].dtype, device=device)
    mask = torch.zeros((n, width_t), dtype=torch.bool, device=device)
    row = 0
    for c in chunks:
        k, p, t = len(c["seqs"]), c["n_prompt"], c["mask"].shape[1]
        seqs[row:row + k, width_p - p:width_p + t] = c["seqs"]
        attention[row:row + k, width_p - p:width_p + t] = c["attention"]
        mask[row:row + k, :t] = c["mask"]
        row += k
    return seqs, attention, width_p, mask


def rollout_groups(policy, reference, tokenizer, train_rows, idx: list[int], references, cfg: TrainConfig, device,
                   autocast, step: int) -> dict:
    """G scored rollouts of each training row in `idx`, and which of them train (RAIF's superior-CoT enforcement).

    superior_cot "group": the last round(nothink_share G) rollouts of each group have RAIF's empty think block in
    the prompt; they are sampled for eq. 7's test only. "reference": each CoT rollout's count of satisfied
    constraints against the row's offline no-reasoning count (its label's `reference`, else the frozen initial
    policy's greedy no-think answer). Both decisions are ifcore.advantages.superior_cot_mask's (the test, the
    masking of no-think rollouts and dropped groups, as the authors' replay buffer does it); a dropped group stays
    in the batch without gradient. refill_rounds > 0 (NOT in RAIF) replaces dropped groups with rows drawn with
    (seed, step, round) instead.

    Returns the groups' rollouts (seqs, attention, n_prompt, mask, texts, truncated, scores, rows: the training
    rows, nothink and train: one flag per rollout) and `stats`, over every group sampled this step: keep_ratio
    (groups kept by eq. 7, None without its test) with groups_kept / groups_sampled and groups_cot_tied (groups
    whose CoT rollouts all scored the same R_accuracy: kept, as the authors keep them), train_share (rollouts that
    train, the authors' logged keep_ratio, ppo_trainer_prm800k_box.py:404, 483) with rollouts_trained /
    rollouts_sampled, refill_rounds; over the step's own rows: cot_reward_mean, nothink_reward_mean,
    reasoning_tokens (over rollouts whose reasoning ended), reasoning_truncated (the share whose think block never
    closed) and empty_reasoning (the share of CoT rollouts whose reasoning is empty or the placeholder).
    """
    from ifcore.advantages import reference_superior, superior_cot_mask

    G = cfg.group_size
    n_nothink = round(cfg.nothink_share * G)
    nothink = np.array([False] * (G - n_nothink) + [True] * n_nothink)
    chunks, stats = [], {}
    sampled = kept_groups = passed_groups = rounds = tied = 0
    while True:
        rows = [train_rows[i] for i in idx]
        prompts = [_prompt(tokenizer, p, cfg, nothink=nt) for p, _ in rows for nt in nothink]
        seqs, attention, n_prompt, mask, texts, truncated = generate(
            policy, tokenizer, prompts, cfg.max_new_tokens, device, autocast, sample=True,
            temperature=cfg.temperature, top_p=cfg.top_p, batch=cfg.generate_batch)
        scores = [_score(texts[i], truncated[i], rows[i // G][1], cfg, tokenizer, prompts[i], bool(nothink[i % G]))
                  for i in range(len(texts))]
        acc = np.array([accuracy(s) for s in scores]).reshape(len(rows), G)
        sample_ok = None
        if "reference" in cfg.superior_cot:
            ref = [references[i] for i in idx]
            missing = [k for k, r in enumerate(ref) if r is None]
            if missing:  # the initial policy's greedy no-think answers (greedy: no sampling noise is drawn)
                ref_prompts = [_prompt(tokenizer, rows[k][0], cfg, nothink=True) for k in missing]
                _, _, _, _, ref_texts, ref_trunc = generate(reference, tokenizer, ref_prompts, cfg.max_new_tokens,
                                                            device, autocast, sample=False, batch=cfg.generate_batch)
                for k, text, trunc, p in zip(missing, ref_texts, ref_trunc, ref_prompts):
                    ref[k] = _score(text, trunc, rows[k][1], cfg, tokenizer, p, nothink=True)["satisfied"]
            sample_ok = reference_superior(
                np.array([sum(s["satisfied"]) for s in scores]).reshape(len(rows), G),
                np.array([s["format_ok"] and s.get("reasoning") is None for s in scores]).reshape(len(rows), G),
                np.array([sum(r) for r in ref])[:, None])
        keep, train = superior_cot_mask(acc, nothink, sample_ok, group="group" in cfg.superior_cot)
        if not stats:  # the step's own rows, before any refill: the policy's behaviour
            reward = np.array([s["reward"] for s in scores]).reshape(len(rows), G)
            cot = [i for i in range(len(texts)) if not nothink[i % G]]
            stats = {"cot_reward_mean": float(reward[:, ~nothink].mean()),
                     "nothink_reward_mean": float(reward[:, nothink].mean()) if n_nothink else None,
                     **reasoning_summary(tokenizer, [texts[i] for i in cot]),
                     "empty_reasoning": float(np.mean([scores[i].get("reasoning") is not None for i in cot]))}
        sampled += len(rows)
        passed_groups += int(keep.sum())
        tied += int((acc[:, ~nothink].min(1) == acc[:, ~nothink].max(1)).sum())  # kept whatever the no-think did
        # Without refills every group stays (a dropped one without gradient); with them, only the kept ones.
        take = keep if cfg.refill_rounds else np.ones(len(rows), dtype=bool)
        sel = [i for i in range(len(texts)) if take[i // G]]
        if sel:
            chunks.append({"seqs": seqs[sel], "attention": attention[sel], "n_prompt": n_prompt, "mask": mask[sel],
                           "texts": [texts[i] for i in sel], "truncated": [truncated[i] for i in sel],
                           "scores": [scores[i] for i in sel], "rows": [r for r, k in zip(rows, take) if k],
                           "nothink": [bool(nothink[i % G]) for i in sel],
                           "train": [bool(train.reshape(-1)[i]) for i in sel]})
        kept_groups += int(take.sum())
        if kept_groups == cfg.prompts_per_step or rounds == cfg.refill_rounds:
            break
        rounds += 1
        # Replacements (not in RAIF): a function of (seed, step, round), so a resumed run draws the same ones.
        idx = [int(i) for i in np.random.default_rng([cfg.seed, step, rounds]).choice(
            len(train_rows), cfg.prompts_per_step - kept_groups, replace=len(train_rows) < cfg.prompts_per_step)]
    flags = {k: [x for c in chunks for x in c[k]] for k in ("texts", "truncated", "scores", "rows", "nothink", "train")}
    trained = sum(flags["train"])
    stats |= {"keep_ratio": passed_groups / sampled if "group" in cfg.superior_cot else None,
              "groups_kept": passed_groups, "groups_sampled": sampled, "groups_cot_tied": tied,
              "train_share": trained / max(len(flags["train"]), 1), "rollouts_trained": trained,
              "rollouts_sampled": len(flags["train"]), "refill_rounds": rounds}
    out = {"stats": stats, **flags}
    if chunks:
        out["seqs"], out["attention"], out["n_prompt"], out["mask"] = _merge(chunks, tokenizer.pad_token_id)
    else:  # nothing kept: an empty batch (the step may still clone the expert)
        out["seqs"], out["attention"] = seqs[:0], attention[:0]
        out["n_prompt"], out["mask"] = n_prompt, mask[:0]
    return out


def sample_responses(run_dir, n: int = 3, initial: bool = False, seed: int = 0) -> list[dict]:
    """What a run's policy writes: one sampled response (the run's temperature and top-p, torch seeded with `seed`)
    to each of the first `n` held-out prompts from its last checkpoint, or from the initial policy (`initial`),
    scored as the run scores rollouts. [{prompt, response, reward, reasoning_tokens}]."""
    run_dir = Path(run_dir)
    saved = json.loads((run_dir / "config.json").read_text())
    cfg = load_config(None, **{k: saved["identity"][k] for k in ("reward", "think", "alpha", "max_new_tokens",
                                                                 "temperature", "top_p")})
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*[0-9]"))
    if not initial and not checkpoints:
        raise FileNotFoundError(f"{run_dir / 'checkpoints'}: no checkpoint yet")
    identity = saved["identity"]
    if identity.get("lora_r") and not initial:  # a LoRA checkpoint holds the adapters only
        model, tokenizer, _ = load_lora_policy(saved["paths"]["model"], "cpu", identity["lora_r"],
                                               identity["lora_alpha"], identity["lora_targets"], checkpoints[-1])
    else:
        model, tokenizer = load_policy(saved["paths"]["model"] if initial else checkpoints[-1])
    rows = read_rows(saved["paths"]["test_data"])[:n]
    torch.manual_seed(seed)
    prompts = [_prompt(tokenizer, p, cfg) for p, _ in rows]
    *_, texts, truncated = generate(model, tokenizer, prompts, cfg.max_new_tokens, "cpu", contextlib.nullcontext(),
                                    sample=True, temperature=cfg.temperature, top_p=cfg.top_p)
    return [{"prompt": p, "response": text, "reward": _score(text, trunc, c, cfg, tokenizer, full)["reward"],
             "reasoning_tokens": reasoning_tokens(tokenizer, text)}
            for (p, c), full, text, trunc in zip(rows, prompts, texts, truncated)]


def train(cfg: TrainConfig, progress: bool = True) -> Path:
    """Run (or resume) GRPO as configured; returns the path of metrics.jsonl.

    Raises ValueError when the output directory holds checkpoints of another configuration or none that
    passes its checksums, BlockingIOError when another trainer holds the directory's lock.
    """
    from torch.utils.tensorboard import SummaryWriter
    from transformers.utils.logging import disable_progress_bar

    from ifcore.advantages import group_norm, identical_pair_fraction
    from ifcore.jsonl import JsonlError, iter_jsonl, read_jsonl

    disable_progress_bar()  # one bar, ours: not one per checkpoint load and save
    cfg = load_config(None, **asdict(cfg))  # checked however it was built
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # One trainer per directory: the lock goes with the process, however it ends.
    with open(out / "train.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise BlockingIOError(f"{out}: another trainer (pid {lock.read().strip() or '?'}) is using this run "
                                  "directory; wait for it to end or stop it") from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        autocast = bf16_autocast(device, cfg.precision)

        # ---- data and the initial policy (the default ones are built once and cached) ----
        paths = resolve_paths(cfg, progress)
        train_rows = read_rows(paths["train_data"])
        test_rows = read_rows(paths["test_data"])[: cfg.eval_prompts]

        # ---- resume from the newest good checkpoint of this output directory, if it holds this configuration ----
        identity, key = run_identity(cfg, paths)
        checkpoints = sorted((out / "checkpoints").glob("step_*[0-9]"))  # not a step_*.tmp cut short
        if checkpoints:
            try:
                there = json.loads((out / "config.json").read_text())["identity"]
            except (OSError, ValueError, KeyError, TypeError):
                there = {}  # none, or an older trainer's: another configuration
            differ = sorted(k for k in identity.keys() | there.keys() if there.get(k) != identity.get(k))
            # More steps and nothing else changed: the run goes on from its last checkpoint (a step's prompts and
            # sampling are seeded by the step, not by the total).
            extend = bool(there) and differ == ["steps"] and identity["steps"] > there["steps"]
            if there != identity and not extend:
                changed = [f"{k} {there.get(k, '(unset)')!r} there, {identity.get(k, '(unset)')!r} now"
                           for k in differ] if there else ["its config.json is missing or an older trainer's"]
                raise ValueError(f"{out} holds checkpoints of another configuration ({'; '.join(changed)}); use "
                                 f"another --output-dir, or delete {out} to start over")
        while checkpoints and (problem := checkpoint_problem(checkpoints[-1])):
            if len(checkpoints) == 1:
                raise ValueError(f"{problem}; no good checkpoint is left in {out / 'checkpoints'}: delete {out} to "
                                 "start over")
            warnings.warn(f"{problem}; resuming from {checkpoints[-2].name} instead (the bad one is removed)",
                          stacklevel=2)
            shutil.rmtree(checkpoints.pop())
        start = int(checkpoints[-1].name.split("_")[1]) if checkpoints else 0
        if start >= cfg.steps:  # nothing to do: no model loaded, no empty TensorBoard file written
            _say(progress, f"{out}: already finished ({start} of {cfg.steps} steps); nothing to do. More steps: "
                           f"--steps N; to start over, delete {out}")
            return out / "metrics.jsonl"
        if start:
            _say(progress, f"{out}: resuming from {checkpoints[-1].name} (step {start} of {cfg.steps})"
                           + (f"; extending the run from {there['steps']} to {cfg.steps} steps" if extend else ""))
        # The code that ran it (not part of the identity: a commit alone changes no number the identity fixes).
        (out / "config.json").write_text(json.dumps({"key": key, "identity": identity, "paths": paths,
                                                     "code": tracking.code_version()}, indent=1))
        if cfg.lora_r:  # adapters on the model, whose own weights stay frozen: they are the reference too
            policy, tokenizer, reference = load_lora_policy(paths["model"], device, cfg.lora_r, cfg.lora_alpha,
                                                            cfg.lora_targets, checkpoints[-1] if checkpoints else None,
                                                            seed=cfg.seed)
        else:
            policy, tokenizer = load_policy(checkpoints[-1] if checkpoints else paths["model"], device)
            reference, _ = load_policy(paths["model"], device)
            reference.eval().requires_grad_(False)
        discriminator = None  # RTT: frozen, reading the policy's own token ids
        if cfg.token_advantages in ("rtt", "rtt_inter") and cfg.rtt_relevance == "discriminator":
            discriminator = rtt.Discriminator.from_pretrained(cfg.rtt_discriminator, device)
            discriminator.eval().requires_grad_(False)
            discriminator.precision = cfg.precision
            discriminator.check_tokenizer(tokenizer)
        opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr,
                                weight_decay=cfg.weight_decay)
        if checkpoints:
            opt.load_state_dict(torch.load(checkpoints[-1] / "optimizer.pt", map_location=device))
        # RAIF: the labels' reference scores; the expert pairs, tokenized once (a response is a whole assistant turn,
        # its think block included, so the prompt is the CoT one; the prompt is masked out of the loss).
        references = read_references(paths["train_data"]) if "reference" in cfg.superior_cot else None
        experts = []
        if cfg.bc_coef:
            with open(paths["bc_data"], "rb") as f:
                for n, pair, problem in iter_jsonl(f, required=("prompt", "response")):
                    if problem or not all(isinstance(pair[k], str) for k in ("prompt", "response")):
                        raise JsonlError(f"{paths['bc_data']}:{n}: "
                                         f"{problem or 'prompt and response: expected strings'}")
                    text = (raif_prompt(tokenizer, pair["prompt"]) if cfg.reward == "raif"
                            else chat_prompt(tokenizer, pair["prompt"], think=True))
                    ids = tokenizer(text, add_special_tokens=False).input_ids
                    answer = tokenizer(pair["response"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
                    # cut at the rollout budget as the OpenRLHF plug-in cuts it (an expert past it ends unfinished)
                    experts.append((ids + answer[:cfg.max_new_tokens], len(ids)))
            if not experts:
                raise JsonlError(f"{paths['bc_data']}: no rows")

        # A killed run may have written rows past its last checkpoint, the last one maybe cut short: keep only the
        # complete rows that the checkpoint covers.
        # rollouts.jsonl holds every rollout's reward per step (a notebook's reward distributions).
        # samples.jsonl: a few held-out completions (prompt, response, verdicts) at every evaluation.
        metrics_path, rollouts_path, samples_path = out / "metrics.jsonl", out / "rollouts.jsonl", out / "samples.jsonl"
        for path in (metrics_path, rollouts_path, samples_path):
            kept = []
            if start and path.exists():
                with open(path, "rb") as f:
                    kept = [row for _, row, _ in iter_jsonl(f, required=("step",))
                            if row is not None and row["step"] <= start]
            path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        writer = SummaryWriter(str(out), purge_step=start + 1 if start else None)
        tracker = tracking.wandb_run(out, out.name, identity)  # None unless IFCORE_WANDB_PROJECT is set

        def log(row: dict) -> None:
            samples = row.pop("samples", [])
            with open(samples_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps({"step": row["step"], **x}, ensure_ascii=False) + "\n" for x in samples)
            with open(metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            for k, v in row.items():
                if k not in ("type", "step") and isinstance(v, (int, float)):
                    writer.add_scalar(f"{row['type']}/{k}", v, row["step"])
            writer.flush()
            if tracker is not None:
                tracker.log(tracking.openrlhf_row(row))

        if start == 0:  # every arm of a seed evaluates the same initial policy the same way: once, then reused
            first = _step0_file(identity, device)
            if first.exists():
                t_read = time.time()
                row = {**json.loads(first.read_text()), "eval_seconds": round(time.time() - t_read, 3)}
            else:
                row = evaluate(policy, tokenizer, test_rows, cfg, device, autocast, step=0)
                first.parent.mkdir(parents=True, exist_ok=True)
                part = first.with_name(f"{first.name}.{os.getpid()}")
                part.write_text(json.dumps(row))
                os.replace(part, first)  # whole or absent: a reader never sees half a row
            log(row)

        B, G = cfg.prompts_per_step, cfg.group_size
        bar = progress_bar(range(start + 1, cfg.steps + 1), desc=f"grpo {cfg.reward}", initial=start,
                           total=cfg.steps, enabled=progress)
        for step in bar:
            t0 = time.time()
            # ---- the step's prompts: a fresh permutation of the training rows per epoch, seeded by (seed, epoch) ----
            idx = []
            for i in range((step - 1) * B, step * B):
                epoch, j = divmod(i, len(train_rows))
                idx.append(int(np.random.default_rng([cfg.seed, epoch]).permutation(len(train_rows))[j]))

            # ---- rollouts: G scored samples per prompt (RAIF: paired no-think ones, superior-CoT's refills) ----
            torch.manual_seed(cfg.seed * 1_000_003 + step)
            policy.eval()
            got = rollout_groups(policy, reference, tokenizer, train_rows, idx, references, cfg, device, autocast, step)
            batch, scores, texts, truncated = got["rows"], got["scores"], got["texts"], got["truncated"]
            seqs, attention, n_prompt, mask = got["seqs"], got["attention"], got["n_prompt"], got["mask"]

            # ---- group-relative advantages ----
            rewards = np.array([s["reward"] for s in scores], dtype=float).reshape(len(batch), G)
            with open(rollouts_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, "rewards": [round(float(r), 6) for r in rewards.reshape(-1)]})
                        + "\n")
            advantages = torch.tensor(group_norm(rewards).reshape(-1), dtype=torch.float32, device=device)
            token_advantages = advantages[:, None].expand_as(mask)  # [B*G, T]; RTT replaces this below
            if cfg.token_advantages != "broadcast":  # RTT-GRPO (eq. 7): alpha A_res + beta A_tok, token by token
                token_advantages, rtt_seconds = rtt.token_advantages(
                    cfg.token_advantages, seqs[:, n_prompt:], mask,
                    [[criteria_text(c) for c in batch[i // G][1]] for i in range(len(scores))],
                    [s["satisfied"] for s in scores], group_norm(rewards), cfg.rtt_alpha, cfg.rtt_beta, tokenizer,
                    discriminator, np.random.default_rng([cfg.seed, step, 0x277]), std_floor=cfg.rtt_std_floor,
                    verified=[(batch[i // G][1], s["verdicts"], s["offset"], texts[i]) for i, s in enumerate(scores)]
                    if cfg.rtt_relevance == "verifier" else None)
            # RAIF: only the rollouts superior-CoT lets train carry gradient (no-think ones never do, nor a dropped
            # group's: superior_cot_mask); their rewards are in the group statistics above, as the authors' are.
            if not all(got["train"]):
                keep = torch.tensor([i for i, t in enumerate(got["train"]) if t], dtype=torch.long,
                                    device=seqs.device)
                seqs, attention, mask, token_advantages = (t[keep] for t in (seqs, attention, mask, token_advantages))
            N = len(seqs)  # rollouts trained

            # ---- the policy update: ppo_epochs optimizer steps, micro-batched ----
            with torch.no_grad(), autocast:
                ref_logp = torch.cat([response_logprobs(reference, seqs[i:i + cfg.micro_batch],
                                                        attention[i:i + cfg.micro_batch], n_prompt)[0]
                                      for i in range(0, N, cfg.micro_batch)]
                                     or [torch.zeros(mask.shape, device=device)])  # N = 0: nothing to train
            policy.train()
            old_logp = torch.empty_like(ref_logp)
            entropy = torch.empty_like(ref_logp)
            if experts:  # RAIF eq. 8: this step's expert pairs, drawn with (seed, step, 0) (refills: rounds 1, 2, ...)
                draw = np.random.default_rng([cfg.seed, step, 0]).choice(len(experts), min(cfg.bc_batch, len(experts)),
                                                                         replace=False)
                bc_ids, bc_attention, bc_labels = (t.to(device) for t in expert_batch([experts[k] for k in draw],
                                                                                      tokenizer.pad_token_id))
                bc_tokens = (bc_labels[:, 1:] != -100).sum()
            for epoch in range(cfg.ppo_epochs):
                opt.zero_grad(set_to_none=True)
                loss_sum = clip_sum = 0.0
                for i in range(0, N, cfg.micro_batch):
                    mb = slice(i, i + cfg.micro_batch)
                    with autocast:
                        logp, ent = response_logprobs(policy, seqs[mb], attention[mb], n_prompt,
                                                      with_entropy=epoch == 0)
                    if epoch == 0:  # the rollout policy's log-probs are the first pass's, taken before any update
                        old_logp[mb], entropy[mb] = logp.detach(), ent.detach()
                    loss, _, clip = grpo_loss(logp, old_logp[mb], ref_logp[mb], token_advantages[mb], mask[mb],
                                              cfg.clip_eps, cfg.kl_coef)
                    share = seqs[mb].shape[0] / N
                    (loss * share).backward()
                    loss_sum += loss.item() * share
                    clip_sum += clip.item() * share
                if experts:  # RAIF eq. 8: + bc_coef x the mean NLL of the expert responses' tokens
                    bc_sum = 0.0
                    for i in range(0, len(bc_ids), cfg.micro_batch):
                        mb = slice(i, i + cfg.micro_batch)
                        with autocast:
                            logits = policy(input_ids=bc_ids[mb], attention_mask=bc_attention[mb]).logits
                        nll = bc_loss(logits, bc_labels[mb])[0] / bc_tokens
                        (cfg.bc_coef * nll).backward()
                        bc_sum += nll.item()
                    if epoch == 0:
                        bc_first = bc_sum  # before this step's updates
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm).item()
                opt.step()

            m = mask.float()
            kl = (torch.exp(ref_logp - old_logp) - (ref_logp - old_logp) - 1) * m  # k3 of the rollout policy
            with warnings.catch_warnings():  # superior-CoT may leave no group to train: those figures are None
                warnings.simplefilter("ignore", RuntimeWarning)
                row = {
                    "type": "train", "step": step,
                    "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                    "identical_pair_fraction": float(identical_pair_fraction(rewards).mean()),
                    # groups whose G rewards are all equal: zero advantage, no signal (ScopeIF's sparsity)
                    "tied_group_fraction": float((identical_pair_fraction(rewards) == 1).mean()),
                    "kl": float(kl.sum() / m.sum()), "entropy": float((entropy * m).sum() / m.sum()),
                    "response_len": float(m.sum(-1).mean()),
                    "truncated_fraction": float(np.mean(truncated)),
                    "format_ok": float(np.mean([s["format_ok"] for s in scores])),
                    "csr": float(np.mean([np.mean(s["satisfied"]) if s["satisfied"] else 1.0 for s in scores])),
                    "loss": loss_sum, "clip_fraction": clip_sum, "grad_norm": grad_norm,
                    "step_seconds": round(time.time() - t0, 3),
                }
            row = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            row |= got["stats"] | ({"bc_loss": bc_first, "bc_tokens": int(bc_tokens)} if experts else {})  # RAIF
            if cfg.token_advantages != "broadcast":  # RTT: the discriminator's time; how much tokens' advantages vary
                spread = [float(a[:n].std()) for a, n in zip(token_advantages, mask.sum(-1).tolist()) if n > 1]
                row |= {"rtt_seconds": round(rtt_seconds, 3),
                        "token_adv_std": float(np.mean(spread)) if spread else None}
            log(row)
            bar.set_postfix(reward=f"{row['cot_reward_mean']:.3f}", trained=f"{row['train_share']:.2f}")
            if step % cfg.eval_every == 0 or step == cfg.steps:
                ev = evaluate(policy, tokenizer, test_rows, cfg, device, autocast, step=step)
                log(ev)
                if progress:
                    bar.write(f"step {step}: eval isr {ev['eval_isr']:.3f} csr {ev['eval_csr']:.3f}")
            if step % cfg.save_every == 0 or step == cfg.steps:
                # Written beside with the sha256 of every file, then renamed: a kill mid-save never leaves a
                # checkpoint that looks complete, and a file changed afterwards no longer matches its sum.
                ckpt = out / "checkpoints" / f"step_{step:06d}"
                tmp = ckpt.with_name(ckpt.name + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                policy.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                torch.save(opt.state_dict(), tmp / "optimizer.pt")
                sums = {str(f.relative_to(tmp)): {"bytes": f.stat().st_size, "sha256": _sha256(f)}
                        for f in sorted(tmp.rglob("*")) if f.is_file()}
                (tmp / "sha256.json").write_text(json.dumps(sums, indent=1))
                os.replace(tmp, ckpt)
                for old in sorted((out / "checkpoints").glob("step_*[0-9]"))[:-2]:  # keep the last two
                    shutil.rmtree(old)
        writer.close()
        if tracker is not None:
            tracker.finish()
        last = next((r for r in reversed(read_jsonl(metrics_path)) if r["type"] == "eval"), None)
        _say(progress, f"done: {cfg.steps} steps" + (f"; held-out ISR {last['eval_isr']:.3f}, CSR {last['eval_csr']:.3f}"
                                                   f" at step {last['step']}" if last else "")
             + f"\n  metrics: {metrics_path} (TensorBoard: tensorboard --logdir {out})\n  held-out samples: "
             f"{samples_path}\n  last checkpoint: {out / 'checkpoints' / f'step_{cfg.steps:06d}'}")
    return metrics_path


def _say(progress: bool, text: str) -> None:
    """A line for the person running `ifcore train` (stderr, beside the progress bar); quiet when progress is off."""
    if progress:
        print(text, file=sys.stderr, flush=True)
