"""GRPO on the embedded policy (or a real checkpoint): the loop behind `ifcore train`.

One step: take `prompts_per_step` rows, sample `group_size` rollouts of each (temperature 1, top-p 1, KV cache),
score every rollout with ifcore.rewards.score_response (the format gate included), turn each group's rewards
into advantages with ifcore.advantages.group_norm, broadcast them over the response tokens ([B, T]: the hook
where RTT's token-level advantages plug in), then take `ppo_epochs` optimizer steps on the clipped surrogate
with a k3 KL penalty to the frozen initial policy (RAIF eq. 1-3; ScopeIF appendix E.2 uses 1e-3).

Everything random is a function of (seed, step): the prompt order, the sampling noise, and nothing else. So a
run killed after any checkpoint and started again with the same command continues exactly where the
checkpoint left it, and its metrics rows equal those of a run that was never stopped (timings aside).
On CUDA the weights stay fp32 and every forward pass runs under bf16 autocast; on CPU everything is fp32.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from ifcore.train.model import chat_prompt, load_policy

# Keys of a metrics row that measure wall-clock time rather than the run: the only ones a resume may change.
TIMING_KEYS = ("step_seconds", "eval_seconds")


@dataclass
class TrainConfig:
    reward: str = "scopeif"  # ila | cla | scopeif | scopeif_flat | raif (ifcore.rewards.score_response)
    steps: int = 30
    seed: int = 0
    output_dir: str = "runs/train"
    model: str | None = None  # a from_pretrained directory; None: the cached warm-started small policy
    train_data: str | None = None  # JSONL of {"prompt", "label"} rows; None: the cached default dataset
    test_data: str | None = None
    think: bool = True  # False: the chat template supplies an empty think block (RAIF's no-think mode)
    alpha: float = 3.0  # graded-reward penalty severity (ScopeIF eq. 5)
    prompts_per_step: int = 16  # on the CPU, 16 x 4 raised held-out CSR more than 8 x 8 at the same cost
    group_size: int = 4  # G rollouts per prompt
    max_new_tokens: int = 64  # a rollout that reaches it is truncated: reward 0 through the format gate
    temperature: float = 1.0
    top_p: float = 1.0
    lr: float = 5e-4  # for the 0.5M-parameter toy (1e-3 erased what the warm start learned, 2e-4 was slow);
    #                   ScopeIF app. E.2 uses 2e-6 for Qwen3-4B/8B
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    ppo_epochs: int = 2  # optimizer steps per rollout batch; from the second one on the clip can bite
    # Sequences per forward/backward, accumulated up to the whole batch. The fp32 logits are [micro_batch, T,
    # vocab]: a real Qwen3 (vocab 151k) on a GPU wants 1-4 here.
    micro_batch: int = 64
    clip_eps: float = 0.2
    kl_coef: float = 1e-3
    token_advantages: str = "broadcast"  # broadcast: each response's advantage on all its tokens
    eval_every: int = 10
    eval_prompts: int = 256  # the first N held-out rows
    eval_samples: int = 4  # samples per held-out prompt behind eval_csr / eval_isr (greedy: eval_greedy_*)
    save_every: int = 10
    threads: int = 0  # torch CPU threads; 0 leaves torch's default
    warm_start: dict = field(default_factory=dict)  # overrides of sft.WarmStartConfig for the default policy


def load_config(path: str | None = None, **overrides) -> TrainConfig:
    """Defaults, then a JSON or YAML file, then explicit overrides (the CLI flags that were given)."""
    values: dict = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith((".yaml", ".yml")):
            import yaml

            values = yaml.safe_load(text) or {}
        else:
            values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of TrainConfig fields")
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown train config field(s) {unknown}; known fields: {sorted(known)}")
    return TrainConfig(**values)


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


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, device, autocast,
             sample: bool, temperature: float = 1.0, top_p: float = 1.0):
    """Rollouts with the KV cache: (sequences, attention, n_prompt, response mask, texts, truncated)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    # Explicit settings override a checkpoint's generation_config (Qwen3 ships top_k=20, temperature 0.6).
    how = dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if sample else dict(do_sample=False)
    with torch.no_grad(), autocast:
        seqs = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                              **how)
    n_prompt = enc.input_ids.shape[1]
    gen = seqs[:, n_prompt:]
    eos = model.generation_config.eos_token_id
    is_eos = torch.isin(gen, torch.tensor(eos if isinstance(eos, list) else [eos], device=gen.device))
    has_eos = is_eos.any(-1)
    # The response is every token up to and including the first EOS (stopping is an action too).
    length = torch.where(has_eos, is_eos.int().argmax(-1) + 1, gen.shape[1])
    mask = torch.arange(gen.shape[1], device=gen.device)[None] < length[:, None]
    attention = torch.cat([enc.attention_mask, torch.ones_like(gen)], dim=1)
    texts = [tokenizer.decode(ids[: n - int(e)], skip_special_tokens=True)
             for ids, n, e in zip(gen.tolist(), length.tolist(), has_eos.tolist())]
    truncated = (~has_eos).tolist()
    return seqs, attention, n_prompt, mask, texts, truncated


def read_rows(path: str) -> list[tuple[str, list]]:
    """(instruction, constraints) for every {"prompt", "label"} row of a JSONL file."""
    from ifcore.schema import parse_label

    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                row = json.loads(line)
                rows.append((row["prompt"], parse_label(row["label"], where=f"{path}:{n} label")))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def evaluate(model, tokenizer, rows, cfg: TrainConfig, device, autocast, step: int) -> dict:
    """Held-out ISR, CSR and CSR per ScopeIF selector (ScopeIF eq. 11-12), decoded two ways.

    eval_*: `eval_samples` samples per prompt from the rollout sampler (temperature, top-p), averaged: the
    expected CSR of the distribution GRPO optimizes, with the sampling noise averaged down. eval_greedy_*:
    greedy decoding. For a real LLM the two move together; a 0.5M-parameter policy's greedy output is
    degenerate (one argmax path, often repetitive), so its greedy figures move erratically and are kept for
    reference. A response that fails the format gate (truncated, unclosed think) satisfies none of its
    constraints, as score_response counts it.
    """
    from ifcore.rewards import score_response

    t0 = time.time()
    prompts = [chat_prompt(tokenizer, p, think=cfg.think) for p, _ in rows]
    row = {"type": "eval", "step": step}
    for prefix, k in (("eval", cfg.eval_samples), ("eval_greedy", 0)):
        torch.manual_seed(2**40 + cfg.seed * 1_000_003 + step)  # apart from the rollout seeds
        _, _, _, mask, texts, truncated = generate(model, tokenizer, prompts * max(k, 1), cfg.max_new_tokens, device,
                                                   autocast, sample=k > 0, temperature=cfg.temperature,
                                                   top_p=cfg.top_p)
        per_scope: dict[str, list[bool]] = {s: [] for s in ("Global", "Traversal", "Position", "Condition", "Nested")}
        csr, isr = [], []
        for i, (text, trunc) in enumerate(zip(texts, truncated)):
            constraints = rows[i % len(rows)][1]
            ok = score_response(text, constraints, kind="ila", alpha=cfg.alpha, think=_think_mode(cfg),
                                truncated=trunc)["satisfied"]
            csr.append(sum(ok) / len(ok) if ok else 1.0)
            isr.append(all(ok))
            for c, x in zip(constraints, ok):
                per_scope[c.selector].append(x)
        row[f"{prefix}_isr"], row[f"{prefix}_csr"] = float(np.mean(isr)), float(np.mean(csr))
        row.update({f"{prefix}_csr_{s.lower()}": (float(np.mean(v)) if v else None) for s, v in per_scope.items()})
        row[f"{prefix}_response_len"] = float(mask.sum(-1).float().mean())
        row[f"{prefix}_truncated_fraction"] = float(np.mean(truncated))
    row["eval_seconds"] = round(time.time() - t0, 3)
    return row


def _think_mode(cfg: TrainConfig) -> str:
    return "required" if cfg.think else "none"


def train(cfg: TrainConfig, progress: bool = True) -> Path:
    """Run (or resume) GRPO as configured; returns the path of metrics.jsonl."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm
    from transformers.utils.logging import disable_progress_bar

    from ifcore.advantages import group_norm, identical_pair_fraction
    from ifcore.rewards import score_response

    disable_progress_bar()  # one bar, ours: not one per checkpoint load and save
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext())
    if cfg.token_advantages != "broadcast":
        raise ValueError(f"token_advantages={cfg.token_advantages!r}: only 'broadcast' is wired so far")

    # ---- data and the initial policy (the default ones are built once and cached) ----
    paths = {"model": cfg.model, "train_data": cfg.train_data, "test_data": cfg.test_data}
    if None in paths.values():
        from ifcore.train.sft import WarmStartConfig, default_assets

        defaults = default_assets(WarmStartConfig(**cfg.warm_start), progress=progress)
        paths = {k: v if v is not None else defaults[k] for k, v in paths.items()}
    train_rows = read_rows(paths["train_data"])
    test_rows = read_rows(paths["test_data"])[: cfg.eval_prompts]

    # ---- resume from the newest checkpoint of this output directory, if any ----
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("steps", "output_dir")} | paths
    checkpoints = sorted(p for p in (out / "checkpoints").glob("step_*") if not p.name.endswith(".tmp"))
    start = int(checkpoints[-1].name.split("_")[1]) if checkpoints else 0
    if checkpoints:
        saved = json.loads((out / "config.json").read_text())
        if saved != settings:
            changed = sorted(k for k in settings.keys() | saved.keys() if settings.get(k) != saved.get(k))
            raise ValueError(f"{out} holds a run with other settings ({changed}); use another --output-dir "
                             f"or delete {out / 'checkpoints'} to start over")
    else:
        (out / "config.json").write_text(json.dumps(settings, indent=1))
    policy, tokenizer = load_policy(checkpoints[-1] if checkpoints else paths["model"], device)
    reference, _ = load_policy(paths["model"], device)
    reference.eval().requires_grad_(False)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if checkpoints:
        opt.load_state_dict(torch.load(checkpoints[-1] / "optimizer.pt", map_location=device))

    # A killed run may have written rows past its last checkpoint, the last one maybe cut short: keep only the
    # complete rows that the checkpoint covers.
    # rollouts.jsonl holds every rollout's reward per step (a notebook's reward distributions).
    metrics_path, rollouts_path = out / "metrics.jsonl", out / "rollouts.jsonl"
    for path in (metrics_path, rollouts_path):
        kept = []
        if start and path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    if json.loads(line)["step"] <= start:
                        kept.append(line)
        path.write_text("".join(line + "\n" for line in kept))
    writer = SummaryWriter(str(out), purge_step=start + 1 if start else None)

    def log(row: dict) -> None:
        with open(metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in row.items():
            if k not in ("type", "step") and isinstance(v, (int, float)):
                writer.add_scalar(f"{row['type']}/{k}", v, row["step"])
        writer.flush()

    if start == 0:
        log(evaluate(policy, tokenizer, test_rows, cfg, device, autocast, step=0))

    B, G = cfg.prompts_per_step, cfg.group_size
    bar = tqdm(range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc=f"grpo {cfg.reward}",
               disable=not progress, dynamic_ncols=True)
    for step in bar:
        t0 = time.time()
        # ---- the step's prompts: a fresh permutation of the training rows per epoch, seeded by (seed, epoch) ----
        batch = []
        for i in range((step - 1) * B, step * B):
            epoch, j = divmod(i, len(train_rows))
            batch.append(train_rows[np.random.default_rng([cfg.seed, epoch]).permutation(len(train_rows))[j]])

        # ---- rollouts: G samples per prompt ----
        torch.manual_seed(cfg.seed * 1_000_003 + step)
        policy.eval()
        prompts = [chat_prompt(tokenizer, p, think=cfg.think) for p, _ in batch for _ in range(G)]
        seqs, attention, n_prompt, mask, texts, truncated = generate(
            policy, tokenizer, prompts, cfg.max_new_tokens, device, autocast, sample=True,
            temperature=cfg.temperature, top_p=cfg.top_p)

        # ---- rewards and group-relative advantages ----
        scores = [score_response(texts[i], batch[i // G][1], kind=cfg.reward, alpha=cfg.alpha,
                                 think=_think_mode(cfg), truncated=truncated[i]) for i in range(B * G)]
        rewards = np.array([s["reward"] for s in scores], dtype=float).reshape(B, G)
        with open(rollouts_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "rewards": [round(float(r), 6) for r in rewards.reshape(-1)]}) + "\n")
        advantages = torch.tensor(group_norm(rewards).reshape(-1), dtype=torch.float32, device=device)
        token_advantages = advantages[:, None].expand_as(mask)  # [B*G, T]; RTT replaces this later

        # ---- the policy update: ppo_epochs optimizer steps, micro-batched ----
        with torch.no_grad(), autocast:
            ref_logp = torch.cat([response_logprobs(reference, seqs[i:i + cfg.micro_batch],
                                                    attention[i:i + cfg.micro_batch], n_prompt)[0]
                                  for i in range(0, B * G, cfg.micro_batch)])
        policy.train()
        old_logp = torch.empty_like(ref_logp)
        entropy = torch.empty_like(ref_logp)
        for epoch in range(cfg.ppo_epochs):
            opt.zero_grad(set_to_none=True)
            loss_sum = clip_sum = 0.0
            for i in range(0, B * G, cfg.micro_batch):
                mb = slice(i, i + cfg.micro_batch)
                with autocast:
                    logp, ent = response_logprobs(policy, seqs[mb], attention[mb], n_prompt, with_entropy=epoch == 0)
                if epoch == 0:  # the rollout policy's log-probs are the first pass's, taken before any update
                    old_logp[mb], entropy[mb] = logp.detach(), ent.detach()
                loss, _, clip = grpo_loss(logp, old_logp[mb], ref_logp[mb], token_advantages[mb], mask[mb],
                                          cfg.clip_eps, cfg.kl_coef)
                share = seqs[mb].shape[0] / (B * G)
                (loss * share).backward()
                loss_sum += loss.item() * share
                clip_sum += clip.item() * share
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm).item()
            opt.step()

        m = mask.float()
        kl = (torch.exp(ref_logp - old_logp) - (ref_logp - old_logp) - 1) * m  # k3 of the rollout policy
        row = {
            "type": "train", "step": step,
            "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "identical_pair_fraction": float(identical_pair_fraction(rewards).mean()),
            "kl": float(kl.sum() / m.sum()), "entropy": float((entropy * m).sum() / m.sum()),
            "response_len": float(m.sum(-1).mean()),
            "truncated_fraction": float(np.mean(truncated)),
            "format_ok": float(np.mean([s["format_ok"] for s in scores])),
            "csr": float(np.mean([np.mean(s["satisfied"]) if s["satisfied"] else 1.0 for s in scores])),
            "loss": loss_sum, "clip_fraction": clip_sum, "grad_norm": grad_norm,
            "step_seconds": round(time.time() - t0, 3),
        }
        log(row)
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", csr=f"{row['csr']:.3f}")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = evaluate(policy, tokenizer, test_rows, cfg, device, autocast, step=step)
            log(ev)
            if progress:
                bar.write(f"step {step}: eval isr {ev['eval_isr']:.3f} csr {ev['eval_csr']:.3f}")
        if step % cfg.save_every == 0 or step == cfg.steps:
            # Written beside, then renamed: a kill mid-save never leaves a checkpoint that looks complete.
            ckpt = out / "checkpoints" / f"step_{step:06d}"
            tmp = ckpt.with_name(ckpt.name + ".tmp")
            policy.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            torch.save(opt.state_dict(), tmp / "optimizer.pt")
            os.replace(tmp, ckpt)
    writer.close()
    return metrics_path
