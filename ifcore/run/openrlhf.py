"""The OpenRLHF 0.11.2 job that trains what `ifcore train` trains with the same TrainConfig.

`job_files(cfg, run_dir)` writes the job's data (the embedded trainer's own rollout prompts) and returns the
keyword arguments of `job_spec`. `command(cfg, run_dir, model=..., prompt_data=...)` is the `python3 -m
openrlhf.cli.train_ppo_ray ...` argv (a list of strings); `reward_env(cfg)` the environment the reward module and
the plug-ins read (IFCORE_REWARD, IFCORE_THINK, IFCORE_ALPHA; IFCORE_RTT_*, IFCORE_RAIF_NOTHINK, IFCORE_BC_* for
RTT/RAIF); `job_spec(...)` both as a Ray job: the entrypoint string and its runtime_env (working_dir, env_vars,
the plug-ins' worker_process_setup_hook). Every command is checked against the pinned release's own argument
parser and checks (`check_flags`: the wheel's train_ppo_ray.py run up to `train(args)`), so a renamed flag fails
here, not on the cluster. `evaluate_checkpoint` scores a saved HF checkpoint with `ifcore eval`.

TrainConfig field -> OpenRLHF (docs/integrations.md, "Notebooks on OpenRLHF"):

| TrainConfig | OpenRLHF 0.11.2 |
| --- | --- |
| reward, alpha, think | env IFCORE_REWARD, IFCORE_ALPHA, IFCORE_THINK (`raif` for reward raif, else `auto`) of ifcore/integrations/openrlhf_reward.py, given as `--reward.remote_url` |
| group_size | `--rollout.n_samples_per_prompt`, `--algo.advantage.estimator group_norm` |
| prompts_per_step | `--rollout.batch_size`; `--train.batch_size` = prompts_per_step x group_size (one optimizer step per epoch, as the embedded trainer) |
| ppo_epochs | `--train.max_epochs` |
| micro_batch | `--train.micro_batch_size`, `--rollout.micro_batch_size`: the largest divisor of the step's rollouts per GPU up to micro_batch (DeepSpeed's train batch = micro x accumulation x GPUs; rollouts per step not a multiple of the GPUs are refused); by default token-budget micro-batches instead (`--train.dynamic_batch_enable`, `--train.max_tokens_per_gpu` / `--rollout.max_tokens_per_gpu` 16384 or --data.max_len), with `--actor.gradient_checkpointing_enable` and `--ds.packing_samples`; the launch planner (`memory_plan`) refuses what cannot fit the stated GPU |
| steps | `--data.max_samples` x `--train.num_episodes` = steps x prompts_per_step (exactly `steps` global steps; with refill_rounds, more, and the plug-ins stop at `steps`) |
| lr, weight_decay, max_grad_norm | `--actor.adam.lr`, `--actor.adam.weight_decay`, `--actor.max_norm`; constant schedule, no warmup |
| clip_eps | `--actor.eps_clip`; loss `seq-mean-token-mean` (each response's tokens averaged, then the responses) |
| kl_coef | `--algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef` |
| max_new_tokens | `--rollout.max_new_tokens`; `--data.max_len` = the longest prompt + max_new_tokens, refused beyond the model's max_position_embeddings |
| temperature, top_p | `--rollout.temperature`, `--rollout.top_p` (and `--eval.temperature`) |
| seed | `--train.seed` |
| eval_every, eval_samples | `--eval.steps`, `--eval.n_samples_per_prompt` (with eval_data); OpenRLHF evaluates at multiples of eval_every only, the embedded trainer also after the last step (evaluate_checkpoint scores RUN/model) |
| save_every | `--ckpt.save_steps`, `--ckpt.save_hf`, `--ckpt.load_enable` (a rerun resumes), `--ckpt.max_num` 3 (DeepSpeed checkpoints kept) |
| lora_r, lora_alpha, lora_targets | `--ds.lora.rank`, `--ds.lora.alpha`, `--ds.lora.target_modules` |
| token_advantages, rtt_beta, rtt_discriminator | IFCORE_RTT_BETA of ifcore/integrations/openrlhf_plugins.py (worker_process_setup_hook); rtt and rtt_inter: IFCORE_RTT_RELEVANCE `ifcore.train.rtt:saved_relevance` with IFCORE_RTT_DISCRIMINATOR = rtt_discriminator (or the rtt_relevance given), rtt_inter also IFCORE_RTT_MODE inter; uniform and random: IFCORE_RTT_RELEVANCE uniform / random (IFCORE_RTT_SEED = seed); rtt_alpha != 1 refused by name |
| superior_cot, nothink_share, refill_rounds, nothink_accuracy | IFCORE_RAIF_NOTHINK = round(nothink_share x group_size), IFCORE_RAIF_TEST = superior_cot (group or group+reference; reference alone refused: the embedded trainer's initial-policy fallback has no counterpart); refill_rounds > 0: IFCORE_RAIF_REFILL = refill_rounds (at most refill_rounds x prompts_per_step replacements a step) and IFCORE_RAIF_STEPS = steps with `--algo.dynamic_filtering_enable --algo.dynamic_filtering_range -0.01 1.01`, and `--data.max_samples` x `--train.num_episodes` leaving every step prompts_per_step x (1 + refill_rounds) rows; nothink_accuracy authors: IFCORE_RAIF_NOTHINK_ACCURACY |
| bc_coef, bc_data, bc_batch | IFCORE_BC_COEF, IFCORE_BC_DATA (a file the cluster sees; required), IFCORE_BC_BATCH (pairs per training step, split over the data-parallel ranks) |
| threads, generate_batch, warm_start, eval_prompts, output_dir | the embedded trainer's own (CPU threads, chunking, the default policy, the eval file's length, run_dir) |

Entropy is logged with `--actor.entropy_coef 0` (logged, not in the loss). TensorBoard goes to
RUN/tensorboard/<run name> (ifcore.run.curves reads it back), HF checkpoints to RUN/checkpoints, the final model
to RUN/model.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import zipfile
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".cache" / "openrlhf-0.11.2"
REWARD_MODULE = "ifcore/integrations/openrlhf_reward.py"  # relative to the job's working_dir (the repository)
PLUGINS_HOOK = "ifcore.integrations.openrlhf_plugins.install"  # Ray's worker_process_setup_hook
SAVED_RELEVANCE = "ifcore.train.rtt:saved_relevance"  # the plug-ins' relevance from a run's rtt_discriminator


def plugin_env(cfg: dict, rtt_relevance: str | None = None) -> dict[str, str]:
    """The variables of ifcore/integrations/openrlhf_plugins.py for the RTT and RAIF options `cfg` turns on; a
    ValueError naming the first option the plug-ins cannot honour as the embedded trainer does. rtt_relevance:
    the plug-ins' IFCORE_RTT_RELEVANCE ("verifier", or "module:function" computing a discriminator's relevance)
    in place of cfg's rtt_discriminator folder (by default the plug-ins load that folder: SAVED_RELEVANCE; the
    folder must be one the cluster sees)."""
    env = {}
    mode = cfg["token_advantages"]
    if mode != "broadcast":
        if cfg["rtt_alpha"] != 1.0:
            raise ValueError(f"rtt_alpha: {cfg['rtt_alpha']} has no OpenRLHF counterpart (the plug-ins add "
                             "beta x A_tok to group_norm's advantages: alpha 1)")
        env["IFCORE_RTT_BETA"] = repr(float(cfg["rtt_beta"]))
        if mode in ("rtt", "rtt_inter"):
            if rtt_relevance is None and not cfg.get("rtt_discriminator"):
                raise ValueError(f"rtt_discriminator: token_advantages {mode} needs a discriminator folder, or "
                                 "rtt_relevance ('verifier' or 'module:function', IFCORE_RTT_RELEVANCE)")
            env["IFCORE_RTT_RELEVANCE"] = rtt_relevance or SAVED_RELEVANCE
            if rtt_relevance is None:
                env["IFCORE_RTT_DISCRIMINATOR"] = str(cfg["rtt_discriminator"])
            if mode == "rtt_inter":
                env["IFCORE_RTT_MODE"] = "inter"
        else:  # RTT's token-weighting ablations: p = 1 (A_tok = 0) or p ~ U[0, 1]
            env["IFCORE_RTT_RELEVANCE"] = mode
            if mode == "random":
                env["IFCORE_RTT_SEED"] = str(cfg["seed"])
    if cfg["superior_cot"] != "off":
        if "group" not in cfg["superior_cot"]:
            raise ValueError("superior_cot: 'reference' alone has no OpenRLHF counterpart (the plug-ins pair "
                             "rollouts: 'group' or 'group+reference')")
        env["IFCORE_RAIF_NOTHINK"] = str(round(cfg["nothink_share"] * cfg["group_size"]))
        env["IFCORE_RAIF_TEST"] = cfg["superior_cot"]
        if cfg.get("refill_rounds"):  # not in RAIF: the dynamic filter refills, refill_rounds x prompts a step
            env["IFCORE_RAIF_REFILL"] = str(cfg["refill_rounds"])
            env["IFCORE_RAIF_STEPS"] = str(cfg["steps"])
        if cfg.get("nothink_accuracy") == "authors":
            env["IFCORE_RAIF_NOTHINK_ACCURACY"] = "authors"
    if cfg["bc_coef"]:
        if cfg["bc_data"] is None:
            raise ValueError("bc_data: the default expert responses live in this machine's cache; give a JSONL of "
                             "{prompt, response} the cluster sees (prompt: the model's input text as is)")
        env |= {"IFCORE_BC_COEF": repr(float(cfg["bc_coef"])), "IFCORE_BC_DATA": cfg["bc_data"],
                "IFCORE_BC_BATCH": str(cfg["bc_batch"])}
    return env


def reward_env(cfg: dict, rtt_relevance: str | None = None, think_gate: str | None = None) -> dict[str, str]:
    """The environment of the job's workers: the reward module's settings and the plug-ins' (plugin_env).
    think_gate: the embedded trainer's gate for this model (job_files reads it from the tokenizer); default raif
    for reward raif, else none with think false, else auto."""
    gate = think_gate or ("raif" if cfg["reward"] == "raif" else "auto" if cfg["think"] else "none")
    return {"IFCORE_REWARD": cfg["reward"], "IFCORE_THINK": gate, "IFCORE_ALPHA": repr(float(cfg["alpha"])),
            **plugin_env(cfg, rtt_relevance)}


def _episodes(steps: int, per_step: int, rows: int) -> tuple[int, int]:
    """(max_samples, num_episodes) with max_samples x num_episodes = steps x per_step and max_samples a multiple of
    per_step within the file's rows: OpenRLHF then runs exactly `steps` global steps (it has no step limit)."""
    for episodes in range(1, steps + 1):
        if steps % episodes == 0 and steps // episodes * per_step <= rows:
            return steps // episodes * per_step, episodes
    raise ValueError(f"prompts_per_step: {per_step} prompts per step, but the prompt file has only {rows} rows")


def command(cfg: dict, run_dir: str, *, model: str | None = None, prompt_data: str, eval_data: str | None = None,
            n_prompts: int | None = None, max_prompt_len: int | None = None, chat_template: bool = True,
            gpus_per_node: int = 8, nodes: int = 1, vllm_engines: int | None = None, vllm_tp: int = 1,
            run_name: str | None = None, rtt_relevance: str | None = None, python: str | None = None,
            model_config: dict | None = None, gpu_gib: float = 80.0, zero_stage: int = 2,
            gradient_checkpointing: bool = True, packing: bool = True, max_tokens_per_gpu: int | None = None,
            vllm_gpu_util: float = 0.5, keep_checkpoints: int = 3, discriminator_config: dict | None = None,
            extra: list[str] = ()) -> list[str]:
    """The `python3 -m openrlhf.cli.train_ppo_ray` argv training what `ifcore train` trains with TrainConfig `cfg`
    (a dict, e.g. dataclasses.asdict), checked by the pinned release's parser (ValueError naming a bad flag).

    model: an HF checkpoint folder or hub id (default: cfg["model"]; the embedded default policy has none: pass
    grpo.resolve_paths(cfg)["model"]). prompt_data / eval_data: JSONL {prompt, label} files the cluster sees;
    n_prompts: prompt_data's row count (read from the file when None). chat_template: the prompts are instructions
    that OpenRLHF wraps in the model's chat template; False: they are already the rollout prompts (RAIF's CoT
    prompt, or think false: ifcore.train.grpo._prompt wrote them). max_prompt_len: the longest prompt in tokens
    (job_files counts it); `--data.max_len` = max_prompt_len + max_new_tokens is vLLM's max_model_len, so a model
    folder with a config.json here is checked against its max_position_embeddings (default: 1024, capped there).
    python: the cluster's interpreter that has openrlhf (default $IFCORE_OPENRLHF_PYTHON, else `python3`): Ray
    runs the entrypoint in a shell on the head, where a bare python3 is whichever comes first on the PATH `ray
    start` had, maybe not the environment with openrlhf. Raises ValueError naming a field with no OpenRLHF
    counterpart.

    The launch plan (memory_plan, per GPU of gpu_gib GiB; model_config: the model's config.json as a dict when
    `model` is neither a local folder nor in KNOWN_CONFIGS): gradient_checkpointing, packing and token-budget
    batching (max_tokens_per_gpu: None is TOKEN_BUDGET, raised to --data.max_len; 0 turns dynamic batching off and
    the micro-batch sizes the step) are on by default, as upstream's examples run; zero_stage (--ds.zero_stage),
    vllm_gpu_util (--vllm.gpu_memory_utilization); a plan whose peak exceeds gpu_gib is refused with the knob that
    lowers its largest term. keep_checkpoints: --ckpt.max_num (DeepSpeed checkpoints kept; job_spec also has the
    plug-ins keep as many HF checkpoints, IFCORE_CKPT_KEEP).
    """
    model = model or cfg.get("model")
    if not model:
        raise ValueError("model: the embedded default policy has no path in the config; pass model= "
                         "(ifcore.train.grpo.resolve_paths(cfg)['model'])")
    if chat_template and cfg["reward"] == "raif":
        raise ValueError("reward: raif rolls out with RAIF's CoT prompt, not the chat template's: write the prompts "
                         "formatted (ifcore.train.grpo._prompt) and pass chat_template=False")
    if chat_template and not cfg["think"]:
        raise ValueError("think: false needs the template's empty think block, which OpenRLHF's chat templating "
                         "cannot ask for: write the prompts formatted and pass chat_template=False")
    if cfg["lora_r"] and cfg["lora_alpha"] != int(cfg["lora_alpha"]):
        raise ValueError(f"lora_alpha: OpenRLHF takes an integer, got {cfg['lora_alpha']}")
    plugins = plugin_env(cfg, rtt_relevance)
    # --data.max_len becomes vLLM's max_model_len, which vLLM refuses beyond the model's positions.
    try:
        config = read_model_config(model, model_config)
    except ValueError:
        config = None  # refused below, after the flags' own checks
    positions = (config or {}).get("max_position_embeddings")
    new_tokens = cfg["max_new_tokens"]
    max_len = (max_prompt_len or 1024) + new_tokens
    if positions and max_prompt_len is None:
        max_len = min(max_len, positions)
    if positions and (max_len > positions or new_tokens >= positions):
        raise ValueError(f"max_new_tokens: {new_tokens} new tokens after prompts of up to "
                         f"{max_prompt_len or 1024} tokens need {(max_prompt_len or 1024) + new_tokens} positions, "
                         f"but {model} has max_position_embeddings {positions}")
    if n_prompts is None:
        with open(prompt_data, "rb") as f:
            n_prompts = sum(1 for line in f if line.strip())
    refill = int(plugins.get("IFCORE_RAIF_REFILL", 0))
    if refill:
        # A step draws up to prompts_per_step x (1 + refill_rounds) prompts and an episode's last, unfilled batch is
        # not trained: every step gets that many rows, and the plug-ins stop the run after `steps` (IFCORE_RAIF_STEPS).
        per_step = cfg["prompts_per_step"] * (1 + refill)
        max_samples = n_prompts // cfg["prompts_per_step"] * cfg["prompts_per_step"]
        if max_samples < per_step:
            raise ValueError(f"refill_rounds: a step may draw {per_step} prompts, but the prompt file has only "
                             f"{n_prompts} rows")
        episodes = -(-cfg["steps"] // (max_samples // per_step))
    else:
        max_samples, episodes = _episodes(cfg["steps"], cfg["prompts_per_step"], n_prompts)
    run = Path(run_dir)
    gpus = nodes * gpus_per_node
    engines = vllm_engines or max(1, gpus // vllm_tp)
    if engines * vllm_tp != gpus:  # train_ppo_ray.train()'s check for colocated models
        raise ValueError(f"vllm_engines: {engines} engines x tensor parallel {vllm_tp} must equal the {gpus} GPUs")
    # DeepSpeed asserts train_batch_size = micro x accumulation steps x GPUs (OpenRLHF's utils/deepspeed/
    # deepspeed.py computes the accumulation by floor division): the step's rollouts split evenly over the GPUs,
    # then into equal micro-batches of at most micro_batch sequences.
    rollouts = cfg["prompts_per_step"] * cfg["group_size"]
    if rollouts % gpus:
        raise ValueError(f"prompts_per_step: {cfg['prompts_per_step']} prompts x group_size {cfg['group_size']} = "
                         f"{rollouts} rollouts per step do not split evenly over {gpus} GPUs (DeepSpeed's "
                         "train batch = micro-batch x accumulation steps x GPUs)")
    if cfg["micro_batch"] < 1:
        raise ValueError(f"micro_batch: must be >= 1, got {cfg['micro_batch']}")
    micro = str(max(d for d in range(1, min(cfg["micro_batch"], rollouts // gpus) + 1) if rollouts // gpus % d == 0))
    argv = [python or os.environ.get("IFCORE_OPENRLHF_PYTHON") or "python3", "-m", "openrlhf.cli.train_ppo_ray",
            "--actor.num_nodes", str(nodes), "--actor.num_gpus_per_node", str(gpus_per_node),
            "--ref.num_nodes", str(nodes), "--ref.num_gpus_per_node", str(gpus_per_node),
            "--vllm.num_engines", str(engines),
            "--vllm.tensor_parallel_size", str(vllm_tp),
            "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep",
            "--vllm.gpu_memory_utilization", repr(float(vllm_gpu_util)), "--ds.zero_stage", str(zero_stage),
            "--actor.model_name_or_path", str(model),
            "--reward.remote_url", REWARD_MODULE,
            "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", str(cfg["group_size"]),
            "--rollout.batch_size", str(cfg["prompts_per_step"]),
            "--rollout.micro_batch_size", micro,
            "--train.batch_size", str(cfg["prompts_per_step"] * cfg["group_size"]),
            "--train.micro_batch_size", micro,
            "--train.max_epochs", str(cfg["ppo_epochs"]),
            "--train.num_episodes", str(episodes), "--data.max_samples", str(max_samples),
            "--data.prompt_dataset", str(prompt_data), "--data.input_key", "prompt", "--data.label_key", "label",
            *(["--data.apply_chat_template"] if chat_template else []),
            "--data.max_len", str(max_len),
            "--rollout.max_new_tokens", str(cfg["max_new_tokens"]),
            "--rollout.temperature", repr(float(cfg["temperature"])), "--rollout.top_p", repr(float(cfg["top_p"])),
            "--actor.adam.lr", repr(float(cfg["lr"])), "--actor.adam.weight_decay", repr(float(cfg["weight_decay"])),
            "--actor.lr_scheduler", "constant", "--actor.lr_warmup_ratio", "0",
            "--actor.max_norm", repr(float(cfg["max_grad_norm"])),
            "--actor.eps_clip", repr(float(cfg["clip_eps"])), "--actor.loss_agg_mode", "seq-mean-token-mean",
            "--actor.entropy_coef", "0",
            "--algo.kl.use_loss", "--algo.kl.estimator", "k3", "--algo.kl.init_coef", repr(float(cfg["kl_coef"])),
            "--train.seed", str(cfg["seed"]),
            "--ckpt.output_dir", str(run / "model"), "--ckpt.path", str(run / "checkpoints"),
            "--ckpt.save_steps", str(cfg["save_every"]), "--ckpt.save_hf", "--ckpt.load_enable",
            "--ckpt.max_num", str(keep_checkpoints),
            "--logger.tensorboard_dir", str(run / "tensorboard"),
            "--logger.wandb.run_name", run_name or run.name]
    if cfg["lora_r"]:
        targets = ["all-linear"] if cfg["lora_targets"] == "all-linear" else \
            [t.strip() for t in cfg["lora_targets"].split(",") if t.strip()]
        argv += ["--ds.lora.rank", str(cfg["lora_r"]), "--ds.lora.alpha", str(int(cfg["lora_alpha"])),
                 "--ds.lora.target_modules", *targets]
    if "IFCORE_RAIF_REFILL" in plugins:  # not in RAIF: a dropped group's score -inf, the dynamic filter refills
        argv += ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "-0.01", "1.01"]
    if eval_data:
        argv += ["--eval.dataset", str(eval_data), "--eval.steps", str(cfg["eval_every"]),
                 "--eval.n_samples_per_prompt", str(cfg["eval_samples"]),
                 "--eval.temperature", repr(float(cfg["temperature"]))]
    if gradient_checkpointing:
        argv += ["--actor.gradient_checkpointing_enable"]
    if packing:
        argv += ["--ds.packing_samples"]
    if max_tokens_per_gpu != 0:  # token-budget micro-batches (OpenRLHF's dynamic batching needs packing)
        budget = str(max(max_tokens_per_gpu or TOKEN_BUDGET, max_len))
        argv += ["--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", budget,
                 "--rollout.max_tokens_per_gpu", budget]
    argv += list(extra)
    check_flags(argv)
    config = read_model_config(model, model_config)
    disc = None
    if plugins.get("IFCORE_RTT_RELEVANCE") == SAVED_RELEVANCE:  # hosted on the reference (or policy) actors' GPUs
        try:  # a discriminator folder only the cluster sees: assume the policy's size (RTT's usual backbone)
            disc = read_model_config(plugins["IFCORE_RTT_DISCRIMINATOR"], discriminator_config)
        except ValueError:
            disc = config
    plan = memory_plan(argv, config, gpu_gib=gpu_gib, bc_batch=int(plugins.get("IFCORE_BC_BATCH", 0)),
                       discriminator=disc)
    if not plan["fits"]:
        raise ValueError(_memory_advice(plan, argv))
    return argv


def _memory_advice(plan: dict, argv: list[str]) -> str:
    """The refusal of a plan that does not fit: its peak, its largest terms and the knob that lowers each."""
    knobs = {"logits": "max_tokens_per_gpu (tokens per GPU and micro-batch; with it 0, micro_batch) or "
                       "max_new_tokens",
             "activations": ("gradient_checkpointing=True" if "--actor.gradient_checkpointing_enable" not in argv
                             else "max_tokens_per_gpu (or micro_batch)"),
             "model_states": "zero_stage=3 (or lora_r)", "reference": "zero_stage=3",
             "behaviour_cloning": "bc_batch", "discriminator": "a smaller rtt_discriminator",
             "vllm": "vllm_gpu_util (--vllm.gpu_memory_utilization)", "reserve": "gpu_gib"}
    training = plan["training_gib"] >= plan["generation_gib"]
    terms = {k: v for k, v in plan["terms"].items() if training != (k == "vllm") or k == "discriminator"}
    top = sorted(terms.items(), key=lambda kv: -kv[1])[:2]
    phase = "training" if training else "generation"
    return (f"memory: the plan needs {plan['peak_gib']:.1f} GiB per GPU in its {phase} "
            f"phase, over the stated {plan['gpu_gib']:g} GiB (gpu_gib); largest terms: "
            + "; ".join(f"{k} {v:.1f} GiB: lower it with {knobs[k]}" for k, v in top)
            + f" ({plan['tokens_per_gpu']} tokens per GPU and micro-batch)")


def job_files(cfg: dict, run_dir) -> dict:
    """The files the job reads, written to RUN/openrlhf/ from the run's own data (grpo.resolve_paths: the
    configured files, or the cached defaults): train.jsonl and test.jsonl (the first eval_prompts rows) with each
    prompt formatted exactly as the embedded trainer's rollout prompt (grpo._prompt: the chat template, RAIF's CoT
    prompt, the empty think block), and with bc_coef expert.jsonl (the prompt formatted, the response ending with
    the EOS text), as the plug-ins read it. Returns the keyword arguments of job_spec: cfg (bc_data pointing at
    that file), model, prompt_data, eval_data, n_prompts, max_prompt_len (the longest prompt in the policy's
    tokens, train and eval, with the no-think suffix under superior_cot; a prompt that leaves less than max_new_tokens
    of the model's positions is refused by file and row, where OpenRLHF would cut it from the left), model_config
    (the model's config.json, for the launch planner), nothink_suffix (under superior_cot: RAIF's empty think block
    for the embedded warm start, which was cloned on it; for a model given by name whose chat template has a
    thinking switch, the block that template writes, Qwen3's "<think>\n\n</think>\n\n"; else None), chat_template
    False and think_gate (the embedded trainer's format gate for this tokenizer). A row whose label has no
    constraints is refused (OpenRLHF's reward
    function cannot score it). The folder must be one the cluster sees, as must the model."""
    from transformers import AutoConfig, AutoTokenizer

    from ifcore.integrations import load_constraints
    from ifcore.jsonl import read_jsonl
    from ifcore.train.grpo import _prompt, _think_mode, load_config, resolve_paths
    from ifcore.train.model import chat_prompt
    from ifcore.train.sft import raif_prompt

    config = load_config(None, **cfg)
    paths = resolve_paths(config, progress=False)
    tokenizer = AutoTokenizer.from_pretrained(paths["model"])
    out = Path(run_dir) / "openrlhf"
    out.mkdir(parents=True, exist_ok=True)

    def write(name: str, rows: list[dict]) -> str:
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return str(out / name)

    def prompts(path: str, limit: int | None = None) -> list[dict]:
        rows = read_jsonl(path, required=("prompt", "label"))[:limit]
        for n, r in enumerate(rows, 1):
            # The reward function and the RTT plug-in refuse a label without constraints: the job would die at
            # its first rollout (OpenRLHF swallows the reward error and fails later, far from the cause).
            load_constraints(r["label"], f"{path}: row {n} label")
        return [{"prompt": _prompt(tokenizer, r["prompt"], config), "label": r["label"]} for r in rows]

    if config.token_advantages in ("rtt", "rtt_inter"):  # RTT's discriminator reads the policy's token ids
        if AutoTokenizer.from_pretrained(config.rtt_discriminator).get_vocab() != tokenizer.get_vocab():
            raise ValueError(f"rtt_discriminator: the tokenizer of {config.rtt_discriminator} differs from the "
                             "policy's (RTT's discriminator reads the policy's token ids)")
    train_rows, eval_rows = prompts(paths["train_data"]), prompts(paths["test_data"], config.eval_prompts)
    extra, suffix = 0, None
    if config.superior_cot != "off":  # the plug-ins append an empty think block to no-think prompts
        from ifcore.integrations.openrlhf_plugins import NOTHINK_SUFFIX
        from ifcore.train.model import has_think_switch

        suffix = NOTHINK_SUFFIX  # RAIF's, which the warm start was cloned on; a real model gets its template's
        if config.model is not None and has_think_switch(tokenizer):  # (Qwen3: "<think>\n\n</think>\n\n")
            turn = [{"role": "user", "content": "x"}]
            plain = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
            bare = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True,
                                                 enable_thinking=False)
            if bare.startswith(plain) and "</think>" in bare[len(plain):]:
                suffix = bare[len(plain):]
        extra = len(tokenizer(suffix, add_special_tokens=False)["input_ids"])
    lengths = [len(tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]) + extra
               for r in train_rows + eval_rows]
    longest = max(lengths)
    model_cfg = AutoConfig.from_pretrained(paths["model"]).to_dict()
    room = (model_cfg.get("max_position_embeddings") or 1 << 30) - config.max_new_tokens
    if longest > room:  # OpenRLHF would cut it from the left (system turn first) and only log a warning
        k = lengths.index(longest)
        where = f"{paths['train_data']}: row {k + 1}" if k < len(train_rows) else \
            f"{paths['test_data']}: row {k - len(train_rows) + 1}"
        raise ValueError(f"{where}: the prompt has {longest} tokens, but {paths['model']}'s "
                         f"{model_cfg.get('max_position_embeddings')} positions leave {room} after max_new_tokens "
                         f"{config.max_new_tokens} (OpenRLHF would cut it from the left)")
    files = {"cfg": dict(cfg), "model": paths["model"], "prompt_data": write("train.jsonl", train_rows),
             "eval_data": write("test.jsonl", eval_rows), "n_prompts": len(train_rows), "max_prompt_len": longest,
             "model_config": model_cfg, "nothink_suffix": suffix,
             "chat_template": False, "think_gate": _think_mode(config, tokenizer)}
    if config.bc_coef:  # RAIF eq. 8: the prompt as the embedded trainer builds it for an expert pair
        experts = [{"prompt": raif_prompt(tokenizer, r["prompt"]) if config.reward == "raif"
                    else chat_prompt(tokenizer, r["prompt"], think=True),
                    "response": r["response"] + tokenizer.eos_token}
                   for r in read_jsonl(paths["bc_data"], required=("prompt", "response"))]
        files["cfg"]["bc_data"] = write("expert.jsonl", experts)
    return files


def _wheel_source(member: str) -> str:
    wheels = sorted(WHEELS.glob("openrlhf-0.11.2-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no openrlhf 0.11.2 wheel in {WHEELS}: `make install` downloads it")
    with zipfile.ZipFile(wheels[0]) as z:
        (name,) = [n for n in z.namelist() if n.endswith(f"openrlhf/{member}")]
        return z.read(name).decode("utf-8")


def parse(argv: list[str]):
    """(parser, args): train_ppo_ray.py's `__main__` block of the pinned wheel run on `argv` (the flags after the
    module name): its parser, then its own checks, stopping before `train(args)`. Raises what they raise."""
    tree = ast.parse(_wheel_source("cli/train_ppo_ray.py"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    body = []
    for node in block.body:
        src = ast.unparse(node)
        if src == "train(args)":
            break
        if src.startswith("from openrlhf.utils.config import"):
            continue  # hierarchize comes from the wheel's config.py below
        if src == "args = parser.parse_args()":
            node = ast.parse("args = parser.parse_args(ARGV)").body[0]
        body.append(node)
    ns = {"argparse": argparse, "datetime": datetime, "ARGV": list(argv)}
    exec(compile(_wheel_source("utils/config.py"), "openrlhf/utils/config.py", "exec"), ns)
    exec(compile(ast.Module(body=body, type_ignores=[]), "openrlhf/cli/train_ppo_ray.py", "exec"), ns)
    return ns["parser"], ns["args"]


def check_flags(argv: list[str]) -> None:
    """ValueError naming the first flag of `argv` (a whole command, or the flags alone) that openrlhf 0.11.2 does
    not know by that exact name (argparse would take a prefix), or what its parser or its checks reject."""
    argv = list(argv)
    if "openrlhf.cli.train_ppo_ray" in argv:
        argv = argv[argv.index("openrlhf.cli.train_ppo_ray") + 1:]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser, _ = parse(argv)
    except SystemExit:
        message = (err.getvalue().strip().splitlines() or ["?"])[-1]
        raise ValueError(f"openrlhf 0.11.2 rejects the command: {message.split('error: ', 1)[-1]}") from None
    except AssertionError as e:
        raise ValueError(f"openrlhf 0.11.2's checks reject the command: {e}") from None
    for flag in argv:
        if flag.startswith("--") and flag.split("=", 1)[0] not in parser._option_string_actions:
            raise ValueError(f"{flag}: not an openrlhf 0.11.2 flag")


def job_spec(cfg: dict, run_dir: str, *, working_dir: str | None = None, think_gate: str | None = None,
             nothink_suffix: str | None = None, **command_kwargs) -> dict:
    """{"entrypoint", "runtime_env"} of the Ray job (POST /api/jobs/ takes both as they are): the command as one
    shell string; the repository as working_dir (ifcore importable in every worker, the reward module's relative
    path valid; runs, caches and the venv left out), the reward and plug-in settings as env_vars, and with RTT or
    RAIF options the plug-ins' install hook run in each worker before OpenRLHF's code (always, in fact: it keeps
    the newest keep_checkpoints HF checkpoints, IFCORE_CKPT_KEEP, and with eval_data evaluates after the last step
    when steps is not a multiple of eval_every, IFCORE_EVAL_LAST). nothink_suffix: the no-think prompts' empty
    think block (job_files reads it from the model's chat template)."""
    argv = command(cfg, run_dir, **command_kwargs)
    env = reward_env(cfg, command_kwargs.get("rtt_relevance"), think_gate)
    if nothink_suffix and "IFCORE_RAIF_NOTHINK" in env:
        env["IFCORE_RAIF_NOTHINK_SUFFIX"] = nothink_suffix
    if command_kwargs.get("eval_data") and cfg["steps"] % cfg["eval_every"]:  # OpenRLHF: multiples of eval_every
        env["IFCORE_EVAL_LAST"] = str(cfg["steps"])
    env["IFCORE_CKPT_KEEP"] = str(command_kwargs.get("keep_checkpoints", 3))  # --ckpt.max_num spares the HF ones
    runtime_env = {"working_dir": str(working_dir or REPO), "env_vars": env,
                   "excludes": [".git", ".venv", ".cache", "runs", "papermill_runs", "figures", "__pycache__"]}
    if env.keys() - {"IFCORE_REWARD", "IFCORE_THINK", "IFCORE_ALPHA"}:
        runtime_env["worker_process_setup_hook"] = PLUGINS_HOOK
    return {"entrypoint": shlex.join(argv), "runtime_env": runtime_env}

# ---- the launch planner: what a GPU holds at the command's settings --------------------------------------------------

# config.json fields of the models the runbook in docs/cluster.md names, for a command built where the hub is not reachable.
# SOURCE: each model's config.json on the Hugging Face hub (Qwen/Qwen3-4B, Qwen/Qwen2.5-0.5B-Instruct).
KNOWN_CONFIGS = {
    "Qwen/Qwen3-4B": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                      "tie_word_embeddings": True, "max_position_embeddings": 40960},
    "Qwen/Qwen2.5-0.5B-Instruct": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                                   "tie_word_embeddings": True, "max_position_embeddings": 32768},
    # SOURCE: ifcore.train.sft.WarmStartConfig's defaults (the embedded warm-start policy notebook 04 trains)
    "ifcore-warm-start": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024,
                          "tie_word_embeddings": True, "max_position_embeddings": 512},
}
# The GPU runbook of docs/cluster.md (one node of 8 x 80 GB): each notebook's heaviest arm at the runbook's settings, and the
# smoke run a user starts with. max_prompt_len: an assumption (job_files measures the real one); `ifcore
# openrlhf-plan --runbook NAME` prints each one's command and memory plan.
RUNBOOK = {
    "smoke": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_prompt_len": 1024,
              "config": {"reward": "scopeif", "steps": 2, "save_every": 2, "eval_every": 2, "max_new_tokens": 512}},
    "02": {"model": "Qwen/Qwen3-4B", "max_prompt_len": 1024,
           "config": {"reward": "raif", "prompts_per_step": 16, "group_size": 4, "max_new_tokens": 112,
                      "eval_prompts": 128, "eval_samples": 2, "eval_every": 8, "save_every": 8, "steps": 500,
                      "superior_cot": "group", "nothink_share": 0.25, "bc_coef": 1.0,
                      "bc_data": "RUN/openrlhf/expert.jsonl"}},
    "03": {"model": "Qwen/Qwen3-4B", "max_prompt_len": 1024,
           "config": {"reward": "scopeif", "group_size": 8, "prompts_per_step": 32, "lr": 2.0e-6, "kl_coef": 0.001,
                      "max_new_tokens": 8192, "steps": 500}},
    "04": {"model": "ifcore-warm-start", "max_prompt_len": 256,
           "config": {"reward": "cla", "token_advantages": "rtt", "rtt_discriminator": "RUN/discriminator",
                      "eval_every": 5, "eval_prompts": 128, "steps": 500}},
}
GIB = 2 ** 30
RESERVE_GIB = 2.0  # CUDA context, NCCL buffers, allocator slack: an allowance, not a measurement
TOKEN_BUDGET = 16384  # tokens per GPU and micro-batch, as upstream's examples (micro 8-16 at ~2k tokens)


def read_model_config(model: str, config: dict | None = None) -> dict:
    """The model's config.json as a dict: `config` when given, else the folder's config.json, else KNOWN_CONFIGS;
    ValueError naming `model` when there is none (the planner cannot size an unknown model)."""
    if config is not None:
        return config
    path = Path(model) / "config.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    if model in KNOWN_CONFIGS:
        return KNOWN_CONFIGS[model]
    raise ValueError(f"model: no config.json at {model} and not one of {', '.join(KNOWN_CONFIGS)}; pass "
                     "model_config= (its config.json as a dict: the planner sizes memory from it)")


def n_params(config: dict) -> int:
    """A decoder's parameter count from its config: embeddings (twice when untied) + per layer attention
    (q, k, v, o with grouped KV heads) and a gated MLP (3 x hidden x intermediate); norms are negligible."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    d = config.get("head_dim") or h // heads
    attention = 2 * h * heads * d + 2 * h * kv * d
    mlp = 3 * h * config["intermediate_size"]
    return vocab * h * (1 if config.get("tie_word_embeddings", True) else 2) + layers * (attention + mlp)


def memory_plan(argv: list[str], config: dict, *, gpu_gib: float = 80.0, bc_batch: int = 0,
                discriminator: dict | None = None) -> dict:
    """Bytes per GPU at the settings of an openrlhf 0.11.2 command (`argv`, parsed by the wheel's parser) for a model
    of `config` (its config.json), every model colocated on every GPU as `command` builds it. Returns {"terms":
    {name: GiB}, "generation_gib", "training_gib", "peak_gib", "gpu_gib", "tokens_per_gpu", "fits"}.

    Terms (N parameters, h hidden size, L layers, V vocabulary, T tokens per GPU and micro-batch, d data-parallel GPUs):
    - model_states: mixed-precision Adam keeps 16 bytes per parameter (bf16 weights 2 + gradients 2 + fp32 master
      weights, momentum, variance 12), partitioned by ZeRO stage: 0: 16N, 1: 4N + 12N/d, 2: 2N + 14N/d, 3: 16N/d
      (Rajbhandari et al. 2020, ZeRO, sec. 3.1 and 5.1, Fig. 1). With LoRA (--ds.lora.rank) only the frozen bf16
      weights count (2N, or 2N/d under stage 3): the adapters' states are negligible.
    - reference: the KL reference model in bf16, 2N (2N/d under stage 3: OpenRLHF's get_ds_eval_config shards it
      only then); absent when --algo.kl.init_coef is 0.
    - activations: 34 x h bytes per token and layer without recomputation (Korthikanti et al. 2022, "Reducing
      Activation Recomputation in Large Transformer Models", sec. 4.1, eq. 1, 16-bit, with flash attention removing
      the 5as/h score term); with --actor.gradient_checkpointing_enable each layer keeps its bf16 input (2 x h) and
      one layer is recomputed at a time: T x h x (2L + 34). T: --train.max_tokens_per_gpu with dynamic batching,
      else micro-batch x --data.max_len (packing or padding, the longest case).
    - logits: the full-vocabulary logits of a micro-batch, 10 bytes per token and vocabulary entry: the model's
      bf16 output (2), OpenRLHF's fp32 copy (4: models/actor.py, "logits.to(torch.float32)") and one fp32
      temporary of the same size (log-softmax in the forward, the logits' gradient in the backward).
    - behaviour_cloning: RAIF eq. 8's forward runs inside the PPO backward (both graphs alive): ceil(bc_batch / d)
      expert sequences of at most --data.max_len tokens, activations and logits as above.
    - discriminator: RTT's discriminator in bf16 (2 bytes per parameter of `discriminator`, its config.json) on the
      GPU of every reference (or policy) actor that hosts it; its no-grad forward is not counted.
    - vllm: --vllm.gpu_memory_utilization x the GPU while vLLM is awake (weights, KV cache, CUDA graphs).
    - reserve: RESERVE_GIB for the CUDA context, NCCL buffers and allocator slack (an allowance).
    Phases: generation = vllm + reserve + discriminator (+ model_states and reference unless --ds.enable_sleep
    offloads them); training = model_states + reference + discriminator + activations + logits +
    behaviour_cloning + reserve (+ vllm unless --vllm.enable_sleep frees it). peak = the larger."""
    _, args = parse(argv[argv.index("openrlhf.cli.train_ppo_ray") + 1:] if "openrlhf.cli.train_ppo_ray" in argv
                    else argv)
    n = n_params(config)
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    d = args.actor.num_nodes * args.actor.num_gpus_per_node // args.ds.ring_attn_size // args.ds.tensor_parallel_size
    stage, lora = args.ds.zero_stage, args.ds.lora.rank > 0
    if lora:
        states = 2 * n / (d if stage == 3 else 1)
    else:
        states = {0: 16 * n, 1: 4 * n + 12 * n / d, 2: 2 * n + 14 * n / d}.get(stage, 16 * n / d)
    reference = 2 * n / (d if stage == 3 else 1) if args.algo.kl.init_coef > 0 else 0
    if args.train.dynamic_batch_enable:
        tokens = max(args.train.max_tokens_per_gpu, args.rollout.max_tokens_per_gpu or 0)
    else:
        tokens = max(args.train.micro_batch_size, args.rollout.micro_batch_size) * args.data.max_len
    per_token = h * (2 * layers + 34) if args.actor.gradient_checkpointing_enable else 34 * h * layers
    bc_tokens = -(-bc_batch // d) * args.data.max_len if bc_batch else 0
    terms = {"model_states": states, "reference": reference,
             "activations": tokens * per_token, "logits": tokens * vocab * 10,
             "behaviour_cloning": bc_tokens * (per_token + vocab * 10),
             "discriminator": 2 * n_params(discriminator) if discriminator else 0,
             "vllm": args.vllm.gpu_memory_utilization * gpu_gib * GIB, "reserve": RESERVE_GIB * GIB}
    generation = terms["vllm"] + terms["reserve"] + terms["discriminator"] + \
        (0 if args.ds.enable_sleep else states + reference)
    training = sum(v for k, v in terms.items() if k != "vllm") + (0 if args.vllm.enable_sleep else terms["vllm"])
    peak = max(generation, training)
    return {"terms": {k: v / GIB for k, v in terms.items()}, "generation_gib": generation / GIB,
            "training_gib": training / GIB, "peak_gib": peak / GIB, "gpu_gib": gpu_gib, "tokens_per_gpu": tokens,
            "parameters": n, "fits": peak <= gpu_gib * GIB}


def describe(cfg: dict, *, model: str, max_prompt_len: int, n_prompts: int = 4000, **command_kwargs) -> str:
    """The launch command for TrainConfig `cfg` (a dict) on `model` and its memory plan, as the runbook prints them
    (`ifcore openrlhf-plan`); prompt files at RUN/openrlhf/ as job_files writes them. Raises command's ValueError."""
    from ifcore.train.grpo import load_config

    cfg = asdict(load_config(None, **cfg))
    chat = cfg["reward"] != "raif" and cfg["think"]
    argv = command(cfg, "RUN", model=model, prompt_data="RUN/openrlhf/train.jsonl",
                   eval_data="RUN/openrlhf/test.jsonl", n_prompts=n_prompts, max_prompt_len=max_prompt_len,
                   chat_template=chat, **command_kwargs)
    config = read_model_config(model, command_kwargs.get("model_config"))
    env = reward_env(cfg)
    disc = config if env.get("IFCORE_RTT_RELEVANCE") == SAVED_RELEVANCE else None
    plan = memory_plan(argv, config, gpu_gib=command_kwargs.get("gpu_gib", 80.0),
                       bc_batch=int(env.get("IFCORE_BC_BATCH", 0)), discriminator=disc)
    lines, line = [], ""
    for token in [shlex.quote(t) for t in argv]:
        if line and (token.startswith("--") and len(line) > 80):
            lines.append(line + " \\")
            line = "  "
        line += ("" if line.strip() == "" else " ") + token
    return "\n".join([*lines, line, f"# longest prompt assumed {max_prompt_len} tokens", format_plan(plan)])


def format_plan(plan: dict) -> str:
    """The memory plan as the runbook prints it: one line per term, then the two phases and the peak."""
    lines = [f"memory per GPU ({plan['parameters'] / 1e9:.2f}B parameters, {plan['tokens_per_gpu']} tokens per GPU "
             "and micro-batch):"]
    lines += [f"  {k:<18} {v:7.1f} GiB" for k, v in plan["terms"].items() if v]
    lines += [f"  generation phase   {plan['generation_gib']:7.1f} GiB",
              f"  training phase     {plan['training_gib']:7.1f} GiB",
              f"  peak               {plan['peak_gib']:7.1f} GiB of {plan['gpu_gib']:g} GiB "
              f"({'fits' if plan['fits'] else 'does NOT fit'})"]
    return "\n".join(lines)



def evaluate_checkpoint(path, benchmark: str, output_dir, *, limit: int | None = None, subset_seed: int = 0,
                        max_new_tokens: int = 512, backend: str = "local", base_url: str | None = None,
                        extra: list[str] = ()) -> dict:
    """A saved HF checkpoint (a run's RUN/model or RUN/checkpoints/... folder) scored on `benchmark` (ifeval,
    ifbench, scopeif) by `ifcore eval BENCH --model PATH`: generated through ifcore.infer, in this machine's
    process (backend local) or by an OpenAI-compatible endpoint serving it (backend openai, base_url: vLLM or
    `transformers serve`), then scored; returns its summary.json. limit: a seeded subset of that many prompts."""
    argv = [sys.executable, "-m", "ifcore", "eval", benchmark, "--model", str(path), "--output-dir", str(output_dir),
            "--max-new-tokens", str(max_new_tokens), "--backend", backend,
            *(["--base-url", base_url] if base_url else []),
            *(["--limit", str(limit), "--subset-seed", str(subset_seed)] if limit is not None else []), *extra]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"ifcore eval {benchmark} --model {path} failed (exit status {done.returncode}):\n{tail}")
    return json.loads((Path(output_dir) / "summary.json").read_text(encoding="utf-8"))
