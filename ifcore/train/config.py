"""`ifcore train`'s configuration as plain data: TrainConfig (GRPO and its RAIF, RTT and real-model options) and
WarmStartConfig (the embedded policy's size and warm start), each field with its help text and its limits, and
`load_config` (defaults < a JSON or YAML file < flags), which checks every value and names what is wrong.

No torch here: `ifcore train --help` lists every field without loading the trainer.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ifcore.advantages import TOKEN_ADVANTAGES
from ifcore.rewards import KINDS

SUPERIOR_COT = ("off", "group", "reference", "group+reference")


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
    # the prompt formats (module docstring): the share of pairs in RAIF's CoT format, and the share of those with
    # the empty think block in the prompt
    raif_share: float = 0.5
    raif_nothink_share: float = 0.25
    # the default dataset (ScopeInstruct-style rows from ifcore.synth)
    train_rows: int = 4000
    test_rows: int = 256


# What each WarmStartConfig field admits, checked when a TrainConfig is loaded (load_config): (test, what).
WARM_START_LIMITS = {name: (lambda v: v >= 1, "at least 1") for name in
          ("vocab_size", "hidden_size", "layers", "heads", "kv_heads", "intermediate_size", "max_positions", "pairs",
           "steps", "batch_size", "train_rows", "test_rows")}
WARM_START_LIMITS["seed"] = (lambda v: v >= 0, "at least 0")
WARM_START_LIMITS["lr"] = (lambda v: 0 < v < math.inf, "a finite number > 0")
WARM_START_LIMITS["raif_share"] = WARM_START_LIMITS["raif_nothink_share"] = (lambda v: 0 <= v <= 1, "in [0, 1]")


def _arg(default, help: str):
    """A TrainConfig field and the help text `ifcore train --help` shows for it."""
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    reward: str = _arg("scopeif", "ila | cla | scopeif | scopeif_flat | raif (ifcore.rewards.score_response)")
    steps: int = _arg(30, "GRPO steps")
    seed: int = _arg(0, "seeds the prompt order and the sampling noise")
    output_dir: str = _arg("runs/train", "metrics.jsonl, TensorBoard events, checkpoints; rerun to resume")
    model: str | None = _arg(None, "a registry name (smollm2-135m, tiny; ifcore.infer.registry), a from_pretrained "
                                   "directory or a hub id in the local cache; default: the cached warm-started policy")
    train_data: str | None = _arg(None, "JSONL of {prompt, label} rows; default: the cached synthetic dataset")
    test_data: str | None = _arg(None, "held-out JSONL of {prompt, label} rows; default: the cached one")
    think: bool = _arg(True, "false: the chat template supplies an empty think block (RAIF's no-think mode); a "
                             "template without think tags gets it appended (docs/inference.md)")
    alpha: float = _arg(3.0, "graded-reward penalty severity (ScopeIF eq. 5)")
    # On the CPU, 16 x 4 raised held-out CSR more than 8 x 8 at the same cost.
    prompts_per_step: int = _arg(16, "prompts per GRPO step")
    group_size: int = _arg(4, "G rollouts per prompt")
    max_new_tokens: int = _arg(64, "a rollout that reaches it is truncated: reward 0 through the format gate")
    temperature: float = _arg(1.0, "rollout sampling temperature")
    top_p: float = _arg(1.0, "rollout nucleus sampling")
    # For the 0.5M-parameter toy 1e-3 erased what the warm start learned and 2e-4 was slow; ScopeIF app. E.2
    # uses 2e-6 for Qwen3-4B/8B.
    lr: float = _arg(5e-4, "AdamW learning rate")
    weight_decay: float = _arg(0.0, "AdamW weight decay")
    max_grad_norm: float = _arg(1.0, "gradient clipping")
    ppo_epochs: int = _arg(2, "optimizer steps per rollout batch; from the second one on the clip can bite")
    # The fp32 logits are [micro_batch, T, vocab]: a real Qwen3 (vocab 151k) on a GPU wants 1-4 here.
    micro_batch: int = _arg(64, "sequences per forward/backward, accumulated up to the whole batch")
    clip_eps: float = _arg(0.2, "PPO clip range (RAIF eq. 2)")
    kl_coef: float = _arg(1e-3, "k3 KL penalty to the initial policy (ScopeIF app. E.2: 1e-3)")
    token_advantages: str = _arg("broadcast", "broadcast: each response's advantage on all its tokens | rtt: RTT-GRPO "
                                              "(eq. 7) with intra-sample token normalization | rtt_inter: inter-sample "
                                              "| uniform, random: RTT's token-weighting ablations")
    # ---- RTT (notebook 04): token advantages from a frozen relevance discriminator (ifcore.train.rtt) ----
    rtt_discriminator: str | None = _arg(None, "a discriminator folder (ifcore.train.rtt); needed by rtt and rtt_inter")
    rtt_alpha: float = _arg(1.0, "RTT eq. 7: weight of the response-level advantage A_res")
    rtt_beta: float = _arg(0.5, "RTT eq. 7: weight of the token-level advantage A_tok (the paper sweeps 0 to 1)")
    rtt_relevance: str = _arg("discriminator", "rtt, rtt_inter: where the token relevance p comes from: discriminator "
                                               "(rtt_discriminator's, the paper's) | verifier (the oracle the paper's "
                                               "annotator approximates: the verdicts' evidence through RTT's taxonomy, "
                                               "ifcore.rtt_labels.verifier_relevance, as the OpenRLHF plug-in's default)")
    rtt_std_floor: float = _arg(0.0, "NOT in RTT (0: the paper's normalization): a token reward column whose std "
                                     "within the response is below this gives A_tok 0 instead of z-scored noise "
                                     "(ifcore.advantages.token_rtt)")
    eval_every: int = _arg(10, "held-out evaluation every N steps (and at the end)")
    eval_prompts: int = _arg(256, "the first N held-out rows")
    eval_samples: int = _arg(4, "samples per held-out prompt behind eval_csr / eval_isr (greedy: eval_greedy_*)")
    save_every: int = _arg(10, "a checkpoint every N steps (and at the end); the last two are kept")
    threads: int = _arg(0, "torch CPU threads; 0 leaves torch's default")
    warm_start: dict = _arg({}, "overrides of ifcore.train.sft.WarmStartConfig for the default policy")
    # ---- RAIF (notebook 02): superior-CoT enforcement (eq. 7), behaviour cloning (eq. 8) ----
    superior_cot: str = _arg("off", "off: RAIF's GRPO baseline, no no-think rollouts | group: RAIF eq. 7 with "
                                    "no-think rollouts (nothink_share) | reference: the RAIF authors' per-sample test "
                                    "against an offline no-reasoning count (label `reference`, else the initial "
                                    "policy's greedy no-think answer) | group+reference: both, as the authors' "
                                    "--enforce_superior_CoT runs")
    nothink_share: float = _arg(0.0, "superior_cot group: share of each group sampled with RAIF's empty think block "
                                     "in the prompt, for eq. 7's test only (never trained; the RAIF authors: 0.25)")
    nothink_accuracy: str = _arg("answer", "answer: a no-think rollout's answer is judged (RAIF eq. 7) | authors: "
                                           "R_accuracy -2 for its empty think block, as the authors' code scores it "
                                           "(then eq. 7 keeps every group; NOT the paper)")
    refill_rounds: int = _arg(0, "NOT in RAIF (the paper skips dropped groups): rounds of new prompts replacing "
                                 "the groups superior-CoT drops; 0 keeps them in the batch, without gradient")
    bc_coef: float = _arg(0.0, "behaviour cloning: bc_coef x NLL of expert responses (RAIF eq. 8; Table 12's "
                               "ptx_coef is 1)")
    bc_data: str | None = _arg(None, "JSONL of {prompt, response} expert pairs; default: the training prompts' "
                                     "witnesses with the reasoning bc_expert names")
    bc_expert: str = _arg("plan", "the default expert's reasoning: plan (the warm start's plan format, synth.plan: an "
                                  "expert the policy can imitate within its budget and vocabulary) | deep (synth."
                                  "expert_plan: a form the warm start never saw, about twice as long)")
    bc_batch: int = _arg(16, "expert pairs per step")
    # ---- real models (issue 10): LoRA through peft; generation in chunks that bound a real model's KV cache ----
    lora_r: int = _arg(0, "LoRA rank; 0: full fine-tuning. With LoRA the KL reference is the model with its "
                          "adapters off, and checkpoints hold the adapters only")
    lora_alpha: float = _arg(16.0, "LoRA scale numerator: the update is scaled by lora_alpha / lora_r")
    lora_targets: str = _arg("all-linear", "modules given adapters: all-linear, or comma-separated names "
                                           "(q_proj,v_proj)")
    # Chunks of 512 ran a CPU evaluation of 4,096 rollouts 1.5x faster than one batch (the KV cache stays small).
    generate_batch: int = _arg(512, "sequences decoded together in rollouts and evaluation; 0: all at once (a "
                                    "chunked run samples other noise than an unchunked one)")
    precision: str = _arg("fp32", "CPU compute: fp32 | bf16 (forward passes under bf16 autocast, fp32 master weights "
                                  "and optimizer state; fast on CPUs with AVX512-BF16 or AMX). CUDA is always bf16")


_AT_LEAST_1 = (lambda v: v >= 1, "at least 1")
_POSITIVE = (lambda v: 0 < v < math.inf, "a finite number > 0")
_NON_NEGATIVE = (lambda v: 0 <= v < math.inf, "a finite number >= 0")
# What each TrainConfig field admits beyond its type, checked on load: (test, what the field must be).
LIMITS = {
    "reward": (lambda v: v in KINDS, f"one of {', '.join(KINDS)}"),
    "group_size": (lambda v: v >= 2, "at least 2 (GRPO's advantages compare the rollouts of a group)"),
    "seed": (lambda v: v >= 0, "at least 0"), "threads": (lambda v: v >= 0, "at least 0"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"), "clip_eps": (lambda v: 0 < v < 1, "in (0, 1)"),
    "token_advantages": (lambda v: v in TOKEN_ADVANTAGES, f"one of {', '.join(TOKEN_ADVANTAGES)}"),
    "rtt_alpha": _NON_NEGATIVE, "rtt_beta": _NON_NEGATIVE,
    "rtt_relevance": (lambda v: v in ("discriminator", "verifier"), "discriminator or verifier"),
    "rtt_std_floor": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "output_dir": (lambda v: v != "", "a directory"),
    **{k: _AT_LEAST_1 for k in ("steps", "prompts_per_step", "max_new_tokens", "ppo_epochs", "micro_batch",
                                 "eval_every", "eval_prompts", "eval_samples", "save_every")},
    **{k: _POSITIVE for k in ("temperature", "lr", "alpha", "max_grad_norm")},
    **{k: _NON_NEGATIVE for k in ("weight_decay", "kl_coef")},
}
# RAIF's options (cross-field checks in load_config).
LIMITS.update({
    "nothink_share": (lambda v: 0 <= v < 1, "in [0, 1)"), "refill_rounds": (lambda v: v >= 0, "at least 0"),
    "superior_cot": (lambda v: v in SUPERIOR_COT, f"one of {', '.join(SUPERIOR_COT)}"),
    "nothink_accuracy": (lambda v: v in ("answer", "authors"), "answer or authors"),
    "bc_coef": _NON_NEGATIVE, "bc_batch": _AT_LEAST_1,
    "bc_expert": (lambda v: v in ("plan", "deep"), "plan or deep"),
})
# Real models' options.
LIMITS.update({
    "lora_r": (lambda v: v >= 0, "at least 0 (0: full fine-tuning)"), "lora_alpha": _POSITIVE,
    "lora_targets": (lambda v: v.strip(" ,") != "", "all-linear or module names"),
    "generate_batch": (lambda v: v >= 0, "at least 0 (0: all at once)"),
    "precision": (lambda v: v in ("fp32", "bf16"), "fp32 or bf16"),
})


def _checked(cls, values: dict, limits: dict, prefix: str = "") -> dict:
    """`values` for dataclass `cls`, each of its field's type and within `limits`; ValueError("field: reason").
    Float fields take integers and numeric strings (YAML 1.1 reads 1e-3, without a dot, as a string)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for name, value in values.items():
        if name not in hints:
            close = difflib.get_close_matches(name, hints, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known fields: {', '.join(hints)}"
            raise ValueError(f"{prefix}{name}: unknown {cls.__name__} field ({hint})")
        kind = hints[name]
        if value is None and type(None) in typing.get_args(kind):
            out[name] = None
            continue
        kind = typing.get_args(kind)[0] if typing.get_args(kind) else kind
        if kind is float and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            what = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}
            raise ValueError(f"{prefix}{name}: expected {what[kind]}, got {value!r}")
        test, what = limits.get(name, (None, None))
        if test and not test(value):
            raise ValueError(f"{prefix}{name}: must be {what}, got {value!r}")
        out[name] = value
    return out


def load_config(path: str | None = None, **overrides) -> TrainConfig:
    """Defaults, then a JSON or YAML file, then explicit overrides (the CLI flags that were given).

    Every value is checked against its field's type and range: a bad one raises ValueError("field: reason"),
    prefixed with the file when the value came from it; an unknown key names the closest known field.
    """
    values: dict = {}
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 (byte {e.start})") from None
        if path.endswith((".yaml", ".yml")):
            import yaml

            try:
                values = yaml.safe_load(text) or {}
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f"{path}:{mark.line + 1}" if mark else path
                raise ValueError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
        else:
            try:
                values = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of TrainConfig fields, got {type(values).__name__}")
    given = {k: v for k, v in overrides.items() if v is not None}
    source = {k: f"{path}: " for k in values if k not in given}
    values.update(given)
    checked = {}
    for name, value in values.items():
        try:
            checked |= _checked(TrainConfig, {name: value}, LIMITS)
            if name == "warm_start":
                checked[name] = _checked(WarmStartConfig, value, WARM_START_LIMITS, "warm_start.")
                warm = WarmStartConfig(**checked[name])
                if warm.hidden_size % warm.heads or warm.heads % warm.kv_heads:  # Qwen3's attention shapes
                    raise ValueError(f"warm_start: hidden_size ({warm.hidden_size}) must be a multiple of heads "
                                     f"({warm.heads}), and heads of kv_heads ({warm.kv_heads})")
        except ValueError as e:
            raise ValueError(f"{source.get(name, '')}{e}") from None
    cfg = TrainConfig(**checked)
    # RAIF: no-think rollouts exist only for eq. 7's test (the authors add them only with --enforce_superior_CoT,
    # experience_maker.py:3175-3193), and a group needs both kinds.
    nothink = round(cfg.nothink_share * cfg.group_size)
    if "group" in cfg.superior_cot and not (cfg.think and 1 <= nothink < cfg.group_size):
        raise ValueError(f"nothink_share: superior_cot {cfg.superior_cot!r} compares CoT with no-think rollouts "
                         f"(RAIF eq. 7); {cfg.nothink_share} of group_size {cfg.group_size} gives {nothink} per group, "
                         "and it needs think true and between 1 and group_size - 1 (the RAIF authors: 0.25)")
    if cfg.nothink_share and "group" not in cfg.superior_cot:
        raise ValueError(f"nothink_share: no-think rollouts are sampled for superior-CoT's group test only; "
                         f"superior_cot is {cfg.superior_cot!r} (RAIF's GRPO baseline has none)")
    if cfg.bc_coef and cfg.bc_data is None and cfg.reward != "raif":
        raise ValueError("bc_coef: the default expert responses are in RAIF's format (reward raif); give bc_data for "
                         f"reward {cfg.reward}")
    if cfg.token_advantages in ("rtt", "rtt_inter") and cfg.rtt_relevance == "discriminator" and \
            cfg.rtt_discriminator is None:  # RTT
        raise ValueError(f"rtt_discriminator: token_advantages {cfg.token_advantages} needs a discriminator folder "
                         "(ifcore.train.rtt.train_discriminator writes one), or rtt_relevance verifier")
    return cfg
