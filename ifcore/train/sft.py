"""The behaviour-cloning warm start and the cache of default assets.

`warm_start` trains a tokenizer on hindsight-relabelled pairs (a witness response and constraints that it
satisfies, RAIF's behaviour cloning, eq. 8), builds the small Qwen3 and fits it to the responses by masked
cross-entropy, so that the policy reads the instruction before GRPO starts. `default_assets` builds the
default synthetic dataset and that policy once and caches them under `$IFCORE_CACHE` (default
`~/.cache/ifcore`); moving or deleting the folder is safe, the next run rebuilds what is missing.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ifcore.train.model import EMPTY_THINK, build_policy, chat_prompt, train_tokenizer


@dataclass
class WarmStartConfig:
    # the model: about 0.5M parameters, half of them the tied embedding
    vocab_size: int = 1024
    hidden_size: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 512
    # behaviour cloning
    pairs: int = 20000
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0
    # the default dataset (ScopeInstruct-style rows from ifcore.synth)
    train_rows: int = 4000
    test_rows: int = 256


# What each WarmStartConfig field admits, checked when a TrainConfig is loaded (grpo.load_config): (test, what).
LIMITS = {name: (lambda v: v >= 1, "at least 1") for name in
          ("vocab_size", "hidden_size", "layers", "heads", "kv_heads", "intermediate_size", "max_positions", "pairs",
           "steps", "batch_size", "train_rows", "test_rows")}
LIMITS["seed"] = (lambda v: v >= 0, "at least 0")
LIMITS["lr"] = (lambda v: 0 < v < math.inf, "a finite number > 0")


def warm_start(pairs: list[dict], cfg: WarmStartConfig, out_dir, progress: bool = True) -> Path:
    """Tokenizer + Qwen3 + SFT on `pairs` ({"prompt", "response"}); saves a from_pretrained directory."""
    from tqdm import tqdm  # text: redrawn in JupyterLab, kept in papermill output (a widget keeps its first frame)
    from transformers import get_cosine_with_min_lr_schedule_with_warmup
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()
    out_dir = Path(out_dir)
    tokenizer = train_tokenizer((t for p in pairs for t in (p["prompt"], p["response"])), cfg.vocab_size)
    model = build_policy(tokenizer, hidden_size=cfg.hidden_size, layers=cfg.layers, heads=cfg.heads,
                         kv_heads=cfg.kv_heads, intermediate_size=cfg.intermediate_size,
                         max_positions=cfg.max_positions, seed=cfg.seed)
    # Prompt tokens are context, not targets; the target is the empty think block, the answer and <|im_end|>.
    examples = []
    for p in pairs:
        prompt = tokenizer(chat_prompt(tokenizer, p["prompt"], think=True)).input_ids
        answer = tokenizer(EMPTY_THINK + p["response"]).input_ids + [tokenizer.eos_token_id]
        ids = (prompt + answer)[: cfg.max_positions]
        examples.append((ids, len(prompt)))

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    # Linear warm-up over the first 5% of the steps, then cosine decay to a tenth of the peak.
    sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=max(1, cfg.steps // 20),
                                                        num_training_steps=cfg.steps, min_lr_rate=0.1)
    rng = random.Random(cfg.seed)
    order: list[int] = []
    log = []
    model.train()
    t0 = time.time()
    bar = tqdm(range(1, cfg.steps + 1), desc="warm start", disable=not progress, dynamic_ncols=True)
    for step in bar:
        if len(order) < cfg.batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch = [examples[i] for i in order[: cfg.batch_size]]
        del order[: cfg.batch_size]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, n_prompt) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, n_prompt: len(ids)] = torch.tensor(ids[n_prompt:])
            attention[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == cfg.steps:
            log.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(time.time() - t0, 1)})
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "warm_start.json").write_text(json.dumps({"config": asdict(cfg), "log": log}, indent=1))
    return out_dir


def cache_dir() -> Path:
    return Path(os.environ.get("IFCORE_CACHE") or "~/.cache/ifcore").expanduser()


def default_assets(cfg: WarmStartConfig, progress: bool = True) -> dict[str, str]:
    """{"model", "train_data", "test_data"}: the cached default dataset and warm-started policy, built on first use.

    The cache key hashes the warm-start config, the synth version and the trainer version, so changing any of
    them builds a new entry beside the old one. The build goes to a temporary folder renamed into place at the
    end: a killed build leaves no half entry, and two processes racing keep the first finished one.
    """
    from ifcore import synth
    from ifcore.jsonl import read_jsonl
    from ifcore.train import TRAINER_VERSION

    spec = {"warm_start": asdict(cfg), "synth": synth.SYNTH_VERSION, "trainer": TRAINER_VERSION}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    root = cache_dir() / f"default-{key}"
    paths = {"model": str(root / "policy"), "train_data": str(root / "train.jsonl"),
             "test_data": str(root / "test.jsonl")}
    if root.exists():
        return paths
    tmp = cache_dir() / f".building-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if progress:
        print(f"building the default dataset and warm-started policy in {root} (once)", flush=True)
    synth.write_dataset(tmp, n_train=cfg.train_rows, n_test=cfg.test_rows, seed=cfg.seed)
    # Held-out means held out of the warm start too: no behaviour-cloning pair repeats a test prompt.
    test_prompts = {row["prompt"] for row in read_jsonl(tmp / "test.jsonl", required=("prompt",))}
    pairs = [p for p in synth.sft_pairs(cfg.pairs, seed=cfg.seed + 1) if p["prompt"] not in test_prompts]
    warm_start(pairs, cfg, tmp / "policy", progress=progress)
    (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
    try:
        os.rename(tmp, root)
    except OSError:  # another process finished first: keep its entry
        shutil.rmtree(tmp, ignore_errors=True)
    return paths
