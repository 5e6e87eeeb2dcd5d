"""The behaviour-cloning warm start and the cache of default assets.

`warm_start` trains a tokenizer on hindsight-relabelled pairs (a witness response and constraints that it
satisfies, RAIF's behaviour cloning, eq. 8), builds the small Qwen3 and fits it to the responses by masked
cross-entropy, so that the policy reads the instruction before GRPO starts. It learns two prompt formats:
- the plain chat prompt: an empty think block, then the answer (what ScopeIF's notebook 03 trains);
- RAIF's CoT prompt (`raif_prompt`: a system prompt asking for `<think>` reasoning and an `<answer>`): a plan in
  the think block (ifcore.synth.plan: each constraint's scope, target, range and the value the answer will have),
  then the answer in <answer> tags; a share of these with RAIF's empty think block already in the prompt (its
  no-think rollouts), so that the policy can answer in both of GRPO's paired modes.
`default_assets` builds the default synthetic dataset and that policy once and caches them under `$IFCORE_CACHE`
(default `~/.cache/ifcore`); moving or deleting the folder is safe, the next run rebuilds what is missing.
`expert_batch` and `bc_loss` are the masked cross-entropy of the warm start, which GRPO's behaviour-cloning
term (RAIF eq. 8) reuses.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ifcore.train.model import EMPTY_THINK, build_policy, chat_prompt, train_tokenizer
from ifcore.progress import bar as progress_bar
from ifcore.verify import VERIFY_VERSION
from ifcore.train.config import WarmStartConfig  # noqa: F401 - its old home

# RAIF's CoT trigger, the system turn of its RL prompts (the authors' code; ifcore.bench.cot_study.COT_SYSTEM, the
# preliminary study's CoT mode, is the same text, which the train part may not import): reason in <think>, answer
# in <answer>.
RAIF_SYSTEM = ("You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and "
               "then provides the user with the answer. The reasoning process and answer are enclosed within <think> "
               "</think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think>"
               "<answer> answer here </answer>.")
# The RAIF authors' no-think rollouts: this empty think block appended to the prompt (ifcore.synth.raif_response
# with no reasoning starts with it).
NOTHINK_PREFIX = "<think>\n\n</think>\n"


def raif_prompt(tokenizer, instruction: str, nothink: bool = False) -> str:
    """RAIF's CoT prompt: RAIF_SYSTEM, the instruction, the assistant header; with `nothink` also NOTHINK_PREFIX."""
    text = tokenizer.apply_chat_template([{"role": "system", "content": RAIF_SYSTEM},
                                         {"role": "user", "content": instruction}],
                                        tokenize=False, add_generation_prompt=True)
    return text + NOTHINK_PREFIX if nothink else text


def expert_batch(examples: list[tuple[list[int], int]], pad_id: int):
    """(input_ids, attention, labels) of [(token ids, prompt length), ...], right-padded; labels are the ids with
    the prompt and the padding masked (-100): only the response is a target."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), -100)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, n_prompt: len(ids)] = torch.tensor(ids[n_prompt:])
        attention[row, : len(ids)] = 1
    return input_ids, attention, labels


def bc_loss(logits, labels):
    """(sum, count): the negative log-likelihood summed over the target tokens (labels != -100; RAIF eq. 8,
    -log pi(y~ | x) of the expert's response), and their number. Logits at position t predict labels[t + 1]."""
    target = labels[:, 1:]
    keep = target != -100
    logp = logits[:, :-1].float().log_softmax(-1).gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)
    return -(logp * keep).sum(), keep.sum()


def warm_start(pairs: list[dict], cfg: WarmStartConfig, out_dir, progress: bool = True) -> Path:
    """Tokenizer + Qwen3 + SFT on `pairs` ({"prompt", "response"} and, for RAIF's format, "plan"); saves a
    from_pretrained directory. Pairs without a plan are all taught in the plain format."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup
    from transformers.utils.logging import disable_progress_bar

    from ifcore.synth import raif_response

    disable_progress_bar()
    out_dir = Path(out_dir)
    # (instruction, format, target): the format drawn per pair, a function of the seed.
    draw = random.Random(cfg.seed + 2)
    texts = []
    for p in pairs:
        if "plan" not in p or draw.random() >= cfg.raif_share:
            texts.append((p["prompt"], "plain", EMPTY_THINK + p["response"]))
        elif draw.random() < cfg.raif_nothink_share:
            texts.append((p["prompt"], "nothink", raif_response("", p["response"])[len(NOTHINK_PREFIX):]))
        else:
            texts.append((p["prompt"], "cot", raif_response(p["plan"], p["response"])))
    tokenizer = train_tokenizer((t for prompt, how, target in texts
                                 for t in ((prompt, target) if how == "plain" else (RAIF_SYSTEM, prompt, target))),
                                cfg.vocab_size)
    model = build_policy(tokenizer, hidden_size=cfg.hidden_size, layers=cfg.layers, heads=cfg.heads,
                         kv_heads=cfg.kv_heads, intermediate_size=cfg.intermediate_size,
                         max_positions=cfg.max_positions, seed=cfg.seed)
    # Prompt tokens are context, not targets; the target is the think block, the answer and <|im_end|>.
    examples = []
    for prompt, how, target in texts:
        text = (chat_prompt(tokenizer, prompt, think=True) if how == "plain"
                else raif_prompt(tokenizer, prompt, nothink=how == "nothink"))
        ids = tokenizer(text, add_special_tokens=False).input_ids
        answer = tokenizer(target, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        examples.append(((ids + answer)[: cfg.max_positions], len(ids)))

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    # Linear warm-up over the first 5% of the steps, then cosine decay to a tenth of the peak.
    sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=max(1, cfg.steps // 20),
                                                        num_training_steps=cfg.steps, min_lr_rate=0.1)
    rng = random.Random(cfg.seed)
    order: list[int] = []
    log = []
    model.train()
    t0 = time.time()
    bar = progress_bar(range(1, cfg.steps + 1), desc="warm start", enabled=progress)
    for step in bar:
        if len(order) < cfg.batch_size:
            # An epoch in random order, sorted by length within windows of 16 batches and those batches shuffled:
            # a RAIF example is about twice a plain one, and padding every batch to its longest would cost that twice.
            perm, window = rng.sample(range(len(examples)), len(examples)), 16 * cfg.batch_size
            batches = [part[j:j + cfg.batch_size] for i in range(0, len(perm), window)
                       for part in [sorted(perm[i:i + window], key=lambda k: len(examples[k][0]))]
                       for j in range(0, len(part), cfg.batch_size)]
            rng.shuffle(batches)
            order += [k for b in batches for k in b]
        input_ids, attention, labels = expert_batch([examples[i] for i in order[: cfg.batch_size]],
                                                    tokenizer.pad_token_id)
        del order[: cfg.batch_size]
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


def _spec(cfg: WarmStartConfig) -> dict:
    from ifcore import synth
    from ifcore.train import TRAINER_VERSION

    return {"warm_start": asdict(cfg), "synth": synth.SYNTH_VERSION, "trainer": TRAINER_VERSION,
            "verify": VERIFY_VERSION}


def _key(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def cache_key(warm_start: dict) -> tuple[str, bool]:
    """(key, built): the cache key of the default assets of WarmStartConfig overrides `warm_start`, and whether
    the cache holds them already."""
    key = _key(_spec(WarmStartConfig(**warm_start)))
    return key, (cache_dir() / f"default-{key}").exists()


def default_assets(cfg: WarmStartConfig, progress: bool = True) -> dict[str, str]:
    """{"model", "train_data", "test_data", "bc_data"}: the cached default dataset, warm-started policy and expert
    responses of the training prompts (RAIF's format, ifcore.synth.write_dataset), built on first use.

    The cache key hashes the warm-start config, the synth version and the trainer version, so changing any of
    them builds a new entry beside the old one. The build goes to a temporary folder renamed into place at the
    end: a killed build leaves no half entry, and two processes racing keep the first finished one.
    """
    from ifcore import synth
    from ifcore.jsonl import read_jsonl

    spec = _spec(cfg)
    key = _key(spec)
    root = cache_dir() / f"default-{key}"
    paths = {"model": str(root / "policy"), "train_data": str(root / "train.jsonl"),
             "test_data": str(root / "test.jsonl"), "bc_data": str(root / "expert.jsonl")}
    if root.exists():
        return paths
    for stale in cache_dir().glob(".building-*-*"):  # a builder killed outright (SIGKILL) could not clean up
        pid = stale.name.rsplit("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = cache_dir() / f".building-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if progress:
        print(f"building the default dataset and warm-started policy in {root} (once): the data, then {cfg.steps} "
              f"warm-start steps, 4-12 minutes on 2 busy cores at the default size (the bar shows the time left); "
              f"Ctrl-C stops it cleanly", flush=True)
    try:
        synth.write_dataset(tmp, n_train=cfg.train_rows, n_test=cfg.test_rows, seed=cfg.seed)
        # Held-out means held out of the warm start too: no behaviour-cloning pair repeats a test prompt.
        test_prompts = {row["prompt"] for row in read_jsonl(tmp / "test.jsonl", required=("prompt",))}
        pairs = [p for p in synth.sft_pairs(cfg.pairs, seed=cfg.seed + 1, plans=True)
                 if p["prompt"] not in test_prompts]
        warm_start(pairs, cfg, tmp / "policy", progress=progress)
        (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
    except BaseException:  # Ctrl-C or an error: no half-built folder is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.rename(tmp, root)
    except OSError:  # another process finished first: keep its entry
        shutil.rmtree(tmp, ignore_errors=True)
    return paths
