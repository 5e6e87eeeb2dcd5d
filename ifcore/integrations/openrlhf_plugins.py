"""RTT token advantages, RAIF's superior-CoT filter and RAIF's behaviour cloning inside OpenRLHF 0.11.2's Ray workers.

How it is loaded: OpenRLHF runs its trainer, policy and vLLM actors in Ray worker processes, which import
OpenRLHF afresh, so patching classes in the job's entrypoint would miss them. Ray runs a job's
`worker_process_setup_hook` in every worker before any actor code; `install` is that hook:

    ray job submit --address http://HEAD:8265 --runtime-env-json '{"worker_process_setup_hook":
        "ifcore.integrations.openrlhf_plugins.install", "env_vars": {"IFCORE_RTT_BETA": "0.5"}}' \
        -- python3 -m openrlhf.cli.train_ppo_ray ...

`install` reads the environment and replaces, for each feature that is on, one method of an OpenRLHF class with a
wrapper that calls the original (`method.__wrapped__` is the original; nothing is patched when every variable is
unset, so the unpatched path is OpenRLHF's own). It imports no OpenRLHF module: the hook runs before Ray sets the
worker's CUDA_VISIBLE_DEVICES, and OpenRLHF's modules import deepspeed, which would initialize CUDA on every GPU;
a sys.meta_path finder patches each class when OpenRLHF itself imports its module:

- IFCORE_RTT_BETA=b (> 0): RemoteExperienceMaker.compute_advantages_and_returns runs OpenRLHF's, then adds
  b x A_tok (RTT eq. 7: ifcore.advantages.token_rtt_groups) to each response's answer tokens. Needs
  --algo.advantage.estimator group_norm. IFCORE_RTT_MODE: "intra" (default, RTT's intra-sample token
  normalization) or "inter" (the inter-sample ablation). IFCORE_RTT_STD_FLOOR=f (NOT in RTT; unset: the paper's
  normalization): a token-reward column whose std is below f gives A_tok 0 (ifcore.advantages.token_rtt). The relevance p comes from IFCORE_RTT_RELEVANCE:
  "verifier" (default) -- the verifier's evidence spans through RTT's taxonomy (ifcore.rtt_labels; the paper's
  labels, or IFCORE_RTT_LABELS=scoped for the scope-restricted variant) for the label's schema constraints;
  judged ones are left out of every relevance, their verdict being the reward function's judge's --, "uniform" (p = 1: A_tok = 0, RTT's uniform ablation), "random"
  (p ~ U[0, 1] from a generator seeded by IFCORE_RTT_SEED, default 0: RTT's random ablation) or "module:function",
  a callable(criteria texts, response token ids) -> one array of p per response token (the signature of
  ifcore.train.rtt.Discriminator.relevance; ifcore.train.rtt:saved_relevance loads the discriminator saved at
  IFCORE_RTT_DISCRIMINATOR, bf16 on a GPU), run where there is a GPU: OpenRLHF's trainer actor, where the
  advantages are computed, has none, so a "module:function" relevance is called by name in the reference model's
  actors (the policy's without a reference model) through Ray's `__ray_call__`, once per step over all (criteria,
  response) pairs split between them; its cost is logged per step as rtt_seconds and rtt_tokens. Why not from the reward function: OpenRLHF keeps one float per `extra_logs` key and sample
  (samples_generator: `value.flatten()[0].item()`), so token spans cannot pass through it; the verdicts are
  recomputed here from the decoded response and its label.
- IFCORE_RAIF_NOTHINK=k (>= 1): RAIF's superior-CoT enforcement. SamplesGenerator.generate_samples (training
  rollouts only; evaluation is never paired) samples the last k rollouts of each group with RAIF's empty think
  block (IFCORE_RAIF_NOTHINK_SUFFIX, default "<think>\\n\\n</think>\\n") appended to the prompt. Each group's
  decision is ifcore.advantages.superior_cot_mask's, from the reward function's logs (R_accuracy, eq. 5, from ila /
  cla / format_fail / no_reasoning): IFCORE_RAIF_TEST "group" (default, eq. 7), "reference" (the authors'
  per-sample test against the label's `reference` count; 0 where it has none) or "group+reference". OpenRLHF's
  group_norm then normalises all n rollouts, no-think ones included (as the authors' experience maker), and
  RemoteExperienceMaker.compute_advantages_and_returns clears the action mask of every rollout that does not train
  (no-think ones, a dropped group's, a failed per-sample test): no gradient, and out of the loss's token and sample
  counts. IFCORE_RAIF_REFILL=R (NOT in RAIF; "on" is 1, "off" the default): up to R x --rollout.batch_size dropped
  groups per step get the score -inf instead, so that OpenRLHF's dynamic filter drops each and draws a replacement
  prompt (needs --algo.dynamic_filtering_enable, with a range wider than [0, 1], e.g. `-0.01 1.01`); a batch the
  prompt loader could not fill ends the episode untrained, and IFCORE_RAIF_STEPS=S ends the run after S global
  steps (refills draw prompts beyond S x batch, so the builder gives the run more). The reward function (IFCORE_THINK=raif) judges a no-think rollout's answer;
  IFCORE_RAIF_NOTHINK_ACCURACY=authors gives it -2 as the authors' code does.
- IFCORE_EVAL_LAST=S: BasePPOTrainer.train_step also evaluates after global step S (the run's last) when S is not a
  multiple of --eval.steps. IFCORE_CKPT_KEEP=K: DeepspeedStrategy.save_model keeps the newest K HF checkpoints
  (global_step<N>_hf) of --ckpt.save_hf (--ckpt.max_num prunes only DeepSpeed's).
- IFCORE_BC_COEF=c (> 0) with IFCORE_BC_DATA=JSONL of {prompt, response}: RAIF eq. 8's behaviour cloning. 0.11
  removed the ptx loss, so ActorPPOTrainer.training_step hands `loss + c x NLL` to the strategy's backward at the
  first micro-batch of each optimizer step, the NLL being the token mean over the step's IFCORE_BC_BATCH (default 4)
  expert pairs: one draw per training step (ActorPPOTrainer.ppo_train, seeded by --train.seed and the step, the same
  pairs in every PPO epoch as the embedded trainer), split over the data-parallel ranks (ceil(batch / dp) each),
  the responses cut to --rollout.max_new_tokens and the sequences to --data.max_len, scored by the policy's own
  forward at temperature 1; `prompt` is the model's input text as is (chat template applied), `response` the
  target text (with its end-of-turn text). Logged as bc_loss.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from functools import wraps

import numpy as np
import torch

from ifcore.advantages import ablation_relevance, token_rtt_groups
from ifcore.integrations import load_constraints, settings
from ifcore.rewards import score_response
from ifcore.rtt_labels import LABELS, criteria_text, verifier_relevance

NOTHINK_SUFFIX = "<think>\n\n</think>\n"  # RAIF's empty think block (ifcore.train.sft.NOTHINK_PREFIX)
THINK_CLOSE = "</think>"


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {raw!r}")
    return value


def _patch(cls, name: str, make, tag: str):
    """cls.name = make(current), once per feature `tag`: a second install in the same process (the hook, then a
    test) keeps it, and two features may wrap the same method (RTT, then RAIF's masking)."""
    current = getattr(cls, name)
    if tag in getattr(current, "_ifcore", ()):
        return
    wrapper = wraps(current)(make(current))
    wrapper._ifcore = (*getattr(current, "_ifcore", ()), tag)
    setattr(cls, name, wrapper)


EXPERIENCE_MAKER = "openrlhf.trainer.ppo_utils.experience_maker"
SAMPLES_GENERATOR = "openrlhf.trainer.ppo_utils.samples_generator"
PPO_ACTOR = "openrlhf.trainer.ray.ppo_actor"
PPO_TRAINER = "openrlhf.trainer.ppo_trainer"
DEEPSPEED = "openrlhf.utils.deepspeed.deepspeed"


class _PatchOnImport:
    """A sys.meta_path finder that patches a module's classes right after OpenRLHF imports the module. Why not
    import it in the hook: ppo_actor and experience_maker import deepspeed, which initializes CUDA before Ray has
    set the worker's CUDA_VISIBLE_DEVICES, so every rank would land on GPU 0."""

    def __init__(self):
        self.pending = {}  # module name -> [(class name, method, make, tag)], in install's order

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            for cls, method, make, tag in self.pending.pop(name, []):
                _patch(getattr(module, cls), method, make, tag)

        spec.loader.exec_module = exec_and_patch
        return spec


_FINDER = _PatchOnImport()


def install() -> list[str]:
    """Ray's worker_process_setup_hook: patch the OpenRLHF classes of the features the environment turns on, now
    if OpenRLHF imported them already, else when it imports them (never importing OpenRLHF, deepspeed or vllm
    here). Returns the patched methods' names (empty when every IFCORE_RTT_/RAIF_/BC_ variable is unset)."""
    patches = []  # (module, class, method, make, tag)
    if os.environ.get("IFCORE_RAIF_FILTER"):
        raise ValueError("IFCORE_RAIF_FILTER is gone: RAIF's GRPO baseline samples no no-think rollouts (unset "
                         "IFCORE_RAIF_NOTHINK); IFCORE_RAIF_REFILL=on is what replaced dropped groups")
    beta = _env_float("IFCORE_RTT_BETA")
    if beta:
        spec = os.environ.get("IFCORE_RTT_RELEVANCE") or "verifier"
        _relevance_fn(spec, load=False)  # a bad spec fails here; a module:function loads with the class
        mode = os.environ.get("IFCORE_RTT_MODE") or "intra"
        if mode not in ("intra", "inter"):
            raise ValueError(f"IFCORE_RTT_MODE must be 'intra' or 'inter', got {mode!r}")
        labels = os.environ.get("IFCORE_RTT_LABELS") or "paper"
        if labels not in LABELS:
            raise ValueError(f"IFCORE_RTT_LABELS must be one of {', '.join(LABELS)}, got {labels!r}")

        floor = _env_float("IFCORE_RTT_STD_FLOOR") or 0.0  # NOT in RTT: ifcore.advantages.token_rtt's std_floor
        if not 0 <= floor < 1:
            raise ValueError(f"IFCORE_RTT_STD_FLOOR must be in [0, 1), got {floor!r}")
        hosted = spec if ":" in spec else None  # a model-bound relevance: run on the GPU actors

        def rtt(original):
            # hosted: the trainer actor sends the function's name to the GPU actors and loads nothing itself
            relevance_fn = None if hosted else _relevance_fn(spec)
            return lambda self, experiences: add_rtt(self, original(self, experiences), beta, relevance_fn, mode,
                                                     labels, hosted, floor)

        patches.append((EXPERIENCE_MAKER, "RemoteExperienceMaker", "compute_advantages_and_returns", rtt, "rtt"))
    nothink = os.environ.get("IFCORE_RAIF_NOTHINK")
    if nothink:
        if not nothink.isdigit() or int(nothink) < 1:
            raise ValueError(f"IFCORE_RAIF_NOTHINK must be a positive integer (no-think rollouts per group), "
                             f"got {nothink!r}")
        suffix = os.environ.get("IFCORE_RAIF_NOTHINK_SUFFIX", NOTHINK_SUFFIX)
        test = os.environ.get("IFCORE_RAIF_TEST") or "group"
        if test not in ("group", "reference", "group+reference"):
            raise ValueError(f"IFCORE_RAIF_TEST must be 'group', 'reference' or 'group+reference', got {test!r}")
        raw = os.environ.get("IFCORE_RAIF_REFILL") or "off"
        refill = {"on": 1, "off": 0}.get(raw, int(raw) if raw.isdigit() else None)
        if refill is None:
            raise ValueError(f"IFCORE_RAIF_REFILL must be 'off', 'on' or a number of rounds, got {raw!r}")
        steps = os.environ.get("IFCORE_RAIF_STEPS") or "0"
        if not steps.isdigit():
            raise ValueError(f"IFCORE_RAIF_STEPS must be a number of steps (0: no limit), got {steps!r}")
        if int(steps):  # the step limit reads the trainer's global step after each step
            patches.append((PPO_TRAINER, "BasePPOTrainer", "train_step", _count_steps, "raif"))
        patches += [(SAMPLES_GENERATOR, "SamplesGenerator", "generate_samples",
                     lambda original: _paired_generate(original, int(nothink), suffix, test, refill, int(steps)),
                     "raif"),
                    (EXPERIENCE_MAKER, "RemoteExperienceMaker", "compute_advantages_and_returns",
                     lambda original: lambda self, experiences: mask_untrained(original(self, experiences)), "raif")]
    coef = _env_float("IFCORE_BC_COEF")
    if coef:
        path = os.environ.get("IFCORE_BC_DATA")
        if not path or not os.path.isfile(path):
            raise ValueError(f"IFCORE_BC_COEF needs IFCORE_BC_DATA, a JSONL file of {{prompt, response}} expert "
                             f"pairs; got {path!r}")
        batch = os.environ.get("IFCORE_BC_BATCH", "4")
        if not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"IFCORE_BC_BATCH must be a positive integer, got {batch!r}")
        experts = read_experts(path)
        patches += [(PPO_ACTOR, "ActorPPOTrainer", "ppo_train",
                     lambda original: _bc_ppo_train(original, experts, int(batch)), "bc"),
                    (PPO_ACTOR, "ActorPPOTrainer", "training_step",
                     lambda original: _bc_training_step(original, coef), "bc")]
    last = os.environ.get("IFCORE_EVAL_LAST")
    if last:
        if not last.isdigit() or int(last) < 1:
            raise ValueError(f"IFCORE_EVAL_LAST must be the run's last global step, got {last!r}")
        patches.append((PPO_TRAINER, "BasePPOTrainer", "train_step",
                        lambda original: _eval_last(original, int(last)), "eval"))
    keep = os.environ.get("IFCORE_CKPT_KEEP")
    if keep:
        if not keep.isdigit() or int(keep) < 1:
            raise ValueError(f"IFCORE_CKPT_KEEP must be a positive number of HF checkpoints, got {keep!r}")
        patches.append((DEEPSPEED, "DeepspeedStrategy", "save_model",
                        lambda original: _prune_hf(original, int(keep)), "ckpt"))
    _FINDER.pending = {}  # this call's features only (a test's install after another's)
    for module, cls, method, make, tag in patches:
        if module in sys.modules:
            _patch(getattr(sys.modules[module], cls), method, make, tag)
        else:
            _FINDER.pending.setdefault(module, []).append((cls, method, make, tag))
    if _FINDER.pending and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return [f"{cls}.{method}" for _, cls, method, _, _ in patches]


# ---- RTT: token advantages on top of OpenRLHF's group_norm ------------------------------------------------------

def _relevance_fn(spec: str, load: bool = True):
    if spec == "verifier":
        return None
    if spec in ("uniform", "random"):  # RTT Table 4's weightings, as the embedded trainer draws them
        seed = os.environ.get("IFCORE_RTT_SEED") or "0"
        if not seed.isdigit():
            raise ValueError(f"IFCORE_RTT_SEED must be a non-negative integer, got {seed!r}")
        rng = np.random.default_rng(int(seed))  # one stream for the run: step after step in the trainer actor
        return lambda criteria, responses: [p[:, 0] for ids in responses
                                            for p in ablation_relevance(spec, [len(ids)], 1, rng)]
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"IFCORE_RTT_RELEVANCE must be 'verifier', 'uniform', 'random' or 'module:function', "
                         f"got {spec!r}")
    return getattr(importlib.import_module(module), name) if load else None


def response_relevance(tokenizer, ids: list[int], label, opts: dict, relevance_fn=None, where: str = "sample",
                       labels: str = "paper", probs=None):
    """(scored, p, satisfied) of one response: the indices into `ids` of its answer tokens (after the last
    </think>, before the first special token: the tokens ifcore.train.rtt.answer_tokens scores), p [len(scored), C]
    and the verifier's verdicts, over the label's C schema constraints (judged ones are left out; a label of judged
    constraints only gets no scored token). p is the verifier's relevance (RTT app. C.3 by `labels`, "paper" or "scoped"
    as ifcore.rtt_labels defines them: evidence spans mapped to tokens by the tokenizer's offsets), or
    relevance_fn's. A response whose text does not re-tokenize to `ids` gets no scored token (A_tok = 0:
    OpenRLHF's advantage alone). probs: relevance_fn's arrays for this response (one per schema constraint),
    computed beforehand (add_rtt batches them over the step)."""
    # Judged constraints (X15) have no columns: the reward function's judge verdict cannot reach this actor
    # (one float per extra_logs key), and score_response without a judge would count them violated (Score -1).
    constraints = [c for c in load_constraints(label, f"label of {where}") if not c.judge]
    if not constraints:
        return [], np.zeros((0, 0)), []
    special = set(tokenizer.all_special_ids)
    k = next((t for t, i in enumerate(ids) if i in special), len(ids))
    text = tokenizer.decode(ids[:k], skip_special_tokens=False)
    # No end-of-turn token: cut at the length limit, gated to 0 as the reward function gates it.
    result = score_response(text, constraints, think=opts["think"], truncated=k == len(ids), budget_s=opts["budget_s"],
                            max_response_chars=opts["max_response_chars"])
    scored, oracle = verifier_relevance(tokenizer, ids, constraints, result["verdicts"], result["offset"], labels)
    if not scored:
        return [], np.zeros((0, len(constraints))), result["satisfied"]
    if probs is None and relevance_fn is not None:
        probs = relevance_fn([criteria_text(c) for c in constraints], [list(ids)] * len(constraints))
    if probs is not None:
        p = np.stack([np.asarray(x, dtype=float)[scored] for x in probs], axis=1)
    else:
        p = np.asarray(oracle, dtype=float)
    return scored, p.reshape(len(scored), len(constraints)), result["satisfied"]


def _hosted_relevance(actor, spec: str, criteria: list[str], responses: list[list[int]]) -> list[np.ndarray]:
    """Run in a GPU actor of OpenRLHF's (Ray's `__ray_call__` passes the actor first): the relevance function
    `spec` ("module:function", e.g. ifcore.train.rtt:saved_relevance, which loads its discriminator once per
    process, bf16 on the actor's GPU) over one chunk of the step's (criteria, response) pairs."""
    if spec not in _HOSTED:
        _HOSTED[spec] = _relevance_fn(spec)
    return [np.asarray(x, dtype=np.float32) for x in _HOSTED[spec](criteria, responses)]


_HOSTED = {}  # spec -> the relevance function loaded in this (GPU actor's) process


def _relevance_batch(maker, relevance_fn, hosted: str | None, criteria: list[str], responses: list[list[int]]):
    """relevance_fn over all the step's pairs at once; with `hosted` (its "module:function"), in the reference
    model's actors (else the policy's): OpenRLHF's trainer actor, where add_rtt runs, has no GPU. The pairs are
    split in contiguous chunks, one per actor, each run by _hosted_relevance."""
    group = getattr(maker, "initial_model_group", None) or getattr(maker, "actor_model_group", None)
    hosts = getattr(group, "_actor_handlers", None) or []
    if not criteria:
        return []
    if not hosted:
        return relevance_fn(criteria, responses)
    if not hosts:  # no actor to host it (a test's maker): loaded here
        return _hosted_relevance(None, hosted, criteria, responses)
    import ray

    size = -(-len(criteria) // len(hosts))
    refs = [h.__ray_call__.remote(_hosted_relevance, hosted, criteria[k:k + size], responses[k:k + size])
            for h, k in zip(hosts, range(0, len(criteria), size))]
    return [p for chunk in ray.get(refs) for p in chunk]


@torch.no_grad()
def add_rtt(maker, experiences, beta: float, relevance_fn=None, mode: str = "intra", labels: str = "paper",
            hosted: str | None = None, std_floor: float = 0.0):
    """RTT-GRPO (eq. 7) on OpenRLHF's experiences: advantages (alpha = 1: OpenRLHF's group_norm advantage on every
    action token) + beta x A_tok on each response's scored answer tokens, A_tok from
    ifcore.advantages.token_rtt_groups (the embedded trainer's function; `mode` intra or inter) over each prompt's
    group (the samples whose `index` // n_samples_per_prompt agree, OpenRLHF's grouping). relevance_fn runs once
    over the step's (criteria, response) pairs; `hosted` (its "module:function" name) runs it on the GPU actors
    (_relevance_batch). Logged per step: rtt_seconds (the relevance's wall time, verifier included) and rtt_tokens
    (response tokens scored, one pass per constraint)."""
    args = maker.strategy.args
    if args.algo.advantage.estimator != "group_norm":
        raise ValueError(f"IFCORE_RTT_BETA: RTT adds token advantages to group_norm's, but "
                         f"--algo.advantage.estimator is {args.algo.advantage.estimator!r}")
    n = args.rollout.n_samples_per_prompt
    opts = settings(judge=_NO_JUDGE)
    rows = {i: (e, j) for e in experiences for j, i in enumerate(e.index)}
    groups = len(rows) // n
    members = [rows[i] for i in range(groups * n)]  # group order: sample g*n + k is rollout k of prompt g
    start = time.perf_counter()
    inputs = []
    for e, j in members:
        mask = e.action_mask[j].bool()
        ids = e.sequences[j, 1:1 + mask.shape[0]][mask].tolist()  # action_mask[t] marks sequences[t + 1]
        criteria = [criteria_text(c) for c in load_constraints(e.labels[j], f"label of sample {len(inputs)}")
                    if not c.judge]  # response_relevance's columns
        inputs.append((torch.nonzero(mask).flatten(), ids, criteria))
    probs = None
    if relevance_fn is not None or hosted:
        flat = _relevance_batch(maker, relevance_fn, hosted, [c for _, _, cs in inputs for c in cs],
                                [ids for _, ids, cs in inputs for _ in cs])
        bounds = np.cumsum([0] + [len(cs) for _, _, cs in inputs])
        probs = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    got = []
    for k, ((e, j), (positions, ids, criteria)) in enumerate(zip(members, inputs)):
        scored, p, sat = response_relevance(maker.tokenizer, ids, e.labels[j], opts, None, f"sample {k}",
                                            labels, probs=None if probs is None else probs[k])
        got.append((positions[scored], p, sat))
    seconds, tokens = time.perf_counter() - start, sum(len(ids) * len(cs) for _, ids, cs in inputs)
    for e in experiences:
        e.info["rtt_seconds"] = torch.full((len(e.index),), seconds)
        e.info["rtt_tokens"] = torch.full((len(e.index),), float(tokens))
    for g in range(groups):
        if len({len(sat) for _, _, sat in got[g * n:(g + 1) * n]}) > 1:
            raise ValueError(f"IFCORE_RTT_BETA: the samples of group {g} have labels with different constraint "
                             "counts; a group answers one prompt")
    a_tok = token_rtt_groups([p for _, p, _ in got], [sat for _, _, sat in got], np.zeros((groups, n)),
                             alpha=0.0, beta=beta, mode=mode, std_floor=std_floor)
    for (e, j), (pos, _, _), a in zip(members, got, a_tok):
        e.advantages[j, pos] += torch.from_numpy(a).to(e.advantages.dtype)
    return experiences


def _NO_JUDGE(prompt, text, answer, targets):
    # settings() would otherwise build IFCORE_JUDGE_URL's judge in this actor; judged constraints are left out.
    return {"satisfied": None, "error": "not judged again for RTT relevance"}


# ---- RAIF: paired no-think rollouts and the superior-CoT filter ---------------------------------------------------

def raif_accuracy(extra_logs: dict) -> float:
    """RAIF eq. 5's R_accuracy of one rollout from the reward function's logs: +2 when every constraint holds,
    the followed fraction when some do, -2 when none do, the format fails, the reasoning is empty (the authors'
    complex_scoring.py:278) or the reward function failed."""
    if (not extra_logs or float(extra_logs.get("format_fail", 1.0)) >= 0.5
            or float(extra_logs.get("no_reasoning", 0.0)) >= 0.5):
        return -2.0
    if float(extra_logs["ila"]) >= 0.5:
        return 2.0
    cla = float(extra_logs["cla"])
    return cla if cla > 0 else -2.0


def _reference_count(label) -> float:
    """The label's offline no-reasoning count (`reference`: one bool per constraint, or a count); 0 without one,
    as the authors' check_qa.py:66-70 default it."""
    try:
        label = json.loads(label) if isinstance(label, (str, bytes)) else label
    except ValueError:
        return 0.0
    ref = label.get("reference") if isinstance(label, dict) else None
    return float(sum(ref)) if isinstance(ref, list) else float(ref or 0)


def superior_cot_group(think: list[dict], nothink: list[dict], test: str = "group"):
    """One prompt's rollouts (CoT ones first), each with extra_logs raif_nothink, raif_keep (eq. 7's decision for
    the group) and raif_train (whether it carries gradient), from ifcore.advantages.superior_cot_mask."""
    from ifcore.advantages import reference_superior, superior_cot_mask

    out = think + nothink
    logs = [r.get("extra_logs") or {} for r in out]
    acc = np.array([[raif_accuracy(x) for x in logs]])
    flags = np.array([[False] * len(think) + [True] * len(nothink)])
    sample_ok = None
    if "reference" in test:
        judged = [bool(x) and x.get("format_fail", 1.0) < 0.5 and x.get("no_reasoning", 0.0) < 0.5 for x in logs]
        count = [round(float(x.get("cla", 0.0)) * float(x.get("constraints", 0.0))) for x in logs]
        sample_ok = reference_superior(np.array([count]), np.array([judged]), _reference_count(out[0].get("label")))
    keep, train = superior_cot_mask(acc, flags, sample_ok, group="group" in test)
    n, k = len(out), len(nothink)
    for r, nt, tr in zip(out, flags[0], train[0]):
        reward = 0.0 if r.get("reward") is None else float(np.asarray(r["reward"], dtype=float).reshape(-1)[0])
        # scaled so that their mean over the step's samples (OpenRLHF logs that) is the embedded trainer's
        # cot_reward_mean / nothink_reward_mean: every group has n - k CoT and k no-think rollouts
        r["extra_logs"] = {**(r.get("extra_logs") or {}), "raif_nothink": float(nt), "raif_keep": float(keep[0]),
                           "raif_train": float(tr), "cot_reward_mean": 0.0 if nt else reward * n / (n - k),
                           "nothink_reward_mean": reward * n / k if nt else 0.0}
    return out


@torch.no_grad()
def mask_untrained(experiences):
    """After OpenRLHF's advantages (group_norm over all n rollouts, no-think ones included): the rollouts whose
    raif_train is 0 get an empty action mask (no policy, KL or entropy gradient; out of the loss's token and
    sample counts, OpenRLHF's aggregate_loss) and zero advantages and returns."""
    for e in experiences:
        train = e.info.get("raif_train")
        if train is None:
            continue
        off = train.reshape(-1) < 0.5
        e.action_mask[off] = False
        e.advantages[off] = 0.0
        e.returns[off] = 0.0
    return experiences


class _PairedEngine:
    """A vLLM engine handle whose generate_responses samples the group's last `nothink` rollouts with the no-think
    suffix and returns one object ref of the whole group, the superior-CoT test applied (a Ray task)."""

    def __init__(self, engine, nothink: int, suffix: str, combine, test: str):
        self.engine, self.nothink, self.suffix, self.combine, self.test = engine, nothink, suffix, combine, test
        self.generate_responses = self  # engine.generate_responses.remote(...) -> self.remote(...)

    def __getattr__(self, name):  # get_num_unfinished_requests and the rest: the engine's
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def remote(self, *, prompt, num_samples, **kwargs):
        if num_samples <= self.nothink:
            raise ValueError(f"IFCORE_RAIF_NOTHINK={self.nothink} leaves no CoT rollout in a group of {num_samples}")
        think = self.engine.generate_responses.remote(prompt=prompt, num_samples=num_samples - self.nothink, **kwargs)
        plain = self.engine.generate_responses.remote(prompt=prompt + self.suffix, num_samples=self.nothink, **kwargs)
        return self.combine.remote(think, plain, self.test)


def _paired_generate(original, nothink: int, suffix: str, test: str = "group", refill: int = 0, steps: int = 0):
    """SamplesGenerator.generate_samples (the training rollouts) with paired engines. refill (NOT in RAIF): at most
    refill x --rollout.batch_size dropped groups of a step get the score -inf, so that OpenRLHF's dynamic filter
    draws a replacement prompt for each (the embedded trainer's refill_rounds bound; later ones stay in the batch
    without gradient, as with refill off). Refills eat prompts beyond steps x batch, so a batch the loader could
    not fill is not trained (the wheel's trainer would fail it: fewer micro-batches than actors) and ends the
    episode, and steps > 0 ends the run after that many global steps (the builder gives refill runs more prompts)."""
    import ray

    combine = ray.remote(num_cpus=0)(superior_cot_group)

    def generate_samples(self, **generate_kwargs):
        if refill and not self.args.algo.dynamic_filtering_enable:
            raise ValueError("IFCORE_RAIF_REFILL: dropped groups are replaced through OpenRLHF's dynamic filter; "
                             "add --algo.dynamic_filtering_enable")
        if steps and getattr(self, "_ifcore_step", 0) >= steps:
            return [], None, 0, True
        engines, process = self.vllm_engines, self._process_response_into_experience
        self.vllm_engines = [_PairedEngine(e, nothink, suffix, combine, test) for e in engines]
        n = generate_kwargs.get("n_samples_per_prompt", self.args.rollout.n_samples_per_prompt)
        budget, seen, drop = refill * self.args.rollout.batch_size, 0, False

        def process_with_refill(response, **kwargs):
            # The responses of one prompt arrive together, n of them: decide once per group.
            nonlocal budget, seen, drop
            if seen % n == 0:
                drop = budget > 0 and not (response.get("extra_logs") or {}).get("raif_keep", 1.0)
                budget -= drop
            seen += 1
            return process({**response, "scores": -math.inf} if drop else response, **kwargs)

        if refill:
            self._process_response_into_experience = process_with_refill
        try:
            samples, rate, consumed, exhausted = original(self, **generate_kwargs)
        finally:
            self.vllm_engines = engines
            self.__dict__.pop("_process_response_into_experience", None)
        if refill and len(samples) < self.args.rollout.batch_size * n:
            return [], rate, consumed, True  # the loader ran out mid-batch: fit ends the episode, the model is saved
        return samples, rate, consumed, exhausted

    return generate_samples


def _count_steps(original):
    """BasePPOTrainer.train_step that tells the samples generator the global step (IFCORE_RAIF_STEPS' limit; a
    resumed run's too, as fit restores it)."""
    def train_step(self, rollout_samples, global_step):
        status, global_step = original(self, rollout_samples, global_step)
        self.samples_generator._ifcore_step = global_step
        return status, global_step

    return train_step


# ---- the run's end: evaluation at the last step, HF checkpoints kept ------------------------------------------------

def _eval_last(original, last: int):
    """BasePPOTrainer.train_step that also evaluates after global step `last` when it is not a multiple of
    --eval.steps (OpenRLHF evaluates at the multiples only; the embedded trainer also after its last step), as
    PPOTrainer.fit evaluates."""
    def train_step(self, rollout_samples, global_step):
        status, global_step = original(self, rollout_samples, global_step)
        if global_step == last and global_step % self.args.eval.steps and getattr(self, "eval_dataloader", None):
            self.evaluate(global_step, **{**self.generate_kwargs, "temperature": self.args.eval.temperature,
                                          "n_samples_per_prompt": self.args.eval.n_samples_per_prompt})
        return status, global_step

    return train_step


def _prune_hf(original, keep: int):
    """DeepspeedStrategy.save_model that, after saving a step's HF checkpoint (CKPT/global_step<N>_hf, written by
    --ckpt.save_hf every --ckpt.save_steps), removes all but the newest `keep` of them on rank 0: --ckpt.max_num
    prunes DeepSpeed's own checkpoints (CKPT/_actor) only. The best checkpoint (best_global_step<N>_hf) and the
    final model (--ckpt.output_dir) are never touched."""
    import re
    import shutil

    def save_model(self, model, tokenizer, output_dir, **kwargs):
        result = original(self, model, tokenizer, output_dir, **kwargs)
        folder = os.path.dirname(os.path.abspath(output_dir))
        if re.fullmatch(r"global_step\d+_hf", os.path.basename(os.path.normpath(output_dir))) and self.is_rank_0():
            steps = sorted((int(m.group(1)), name) for name in os.listdir(folder)
                           if (m := re.fullmatch(r"global_step(\d+)_hf", name)))
            for _, name in steps[:-keep]:
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        return result

    return save_model


# ---- RAIF: behaviour cloning (eq. 8) -------------------------------------------------------------------------------

def read_experts(path: str) -> list[dict]:
    from ifcore.jsonl import JsonlError, iter_jsonl

    with open(path, "rb") as f:
        rows = [row for _, row, _ in iter_jsonl(f, required=("prompt", "response"))]
    for n, row in enumerate(rows, 1):
        if not (isinstance(row["prompt"], str) and isinstance(row["response"], str) and row["response"]):
            raise JsonlError(f"{path}: row {n}: prompt and response must be strings, response non-empty")
    if not rows:
        raise JsonlError(f"{path}: no expert pairs")
    return rows


def expert_batch(tokenizer, pairs: list[dict], max_new_tokens: int | None = None, max_len: int | None = None):
    """(sequences, attention_mask, action_mask) in OpenRLHF's layout: prompt + response ids right-padded, and
    action_mask[t] marking sequences[t + 1] as a response token (the expert's tokens are the targets). The response
    is cut to max_new_tokens (a rollout's limit) and the prompt from the left to fit max_len (--data.max_len), as
    OpenRLHF cuts a rollout's."""
    rows = []
    for pair in pairs:
        p = list(tokenizer(pair["prompt"], add_special_tokens=False)["input_ids"])
        r = list(tokenizer(pair["response"], add_special_tokens=False)["input_ids"])[:max_new_tokens]
        if max_len is not None:
            p = p[max(0, len(p) - max(max_len - len(r), 1)):]
        rows.append((p + r, len(p)))
    width = max(len(ids) for ids, _ in rows)
    seqs = torch.full((len(rows), width), tokenizer.pad_token_id or 0, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    action = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for i, (ids, n_prompt) in enumerate(rows):
        seqs[i, :len(ids)] = torch.tensor(ids)
        attention[i, :len(ids)] = 1
        action[i, max(n_prompt - 1, 0):len(ids) - 1] = True
    return seqs, attention, action


def _bc_ppo_train(original, experts: list[dict], batch: int):
    """ActorPPOTrainer.ppo_train (once per training step, all its epochs) that draws the step's expert pairs first:
    ceil(batch / dp) x dp of them from (--train.seed, step), the same draw on every rank, each data-parallel rank
    taking its own share (ranks of one ring-attention or tensor-parallel group the same share). Every rank gets as
    many pairs, so ZeRO-3's gathers stay in step."""
    def ppo_train(self, *args, **kwargs):
        import torch.distributed as dist

        group = self.args.ds.ring_attn_size * self.args.ds.tensor_parallel_size
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() \
            else (0, 1)
        dp, dp_rank = max(world // group, 1), rank // group
        share = -(-batch // dp)
        self._ifcore_bc_step = getattr(self, "_ifcore_bc_step", 0) + 1
        draw = np.random.default_rng([self.args.train.seed, self._ifcore_bc_step]).choice(
            len(experts), share * dp, replace=share * dp > len(experts))
        batch_all = expert_batch(self.tokenizer, [experts[k] for k in draw], self.args.rollout.max_new_tokens,
                                 self.args.data.max_len)
        mine = slice(dp_rank * share, (dp_rank + 1) * share)
        # the whole draw's target tokens: each rank's NLL sum over it, x dp (DeepSpeed averages the ranks' gradients)
        self._ifcore_bc = ([t[mine] for t in batch_all], int(batch_all[2].sum()), dp)
        return original(self, *args, **kwargs)

    return ppo_train


def _bc_training_step(original, coef: float):
    def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
        # RAIF eq. 8 once per optimizer step (its first micro-batch), on this rank's share of the step's draw
        # (_bc_ppo_train): coef x the token mean of the expert NLL over the whole draw, as the embedded trainer.
        dynamic = self.args.train.dynamic_batch_enable
        gas = 1 if dynamic else max(int(self.strategy.accumulated_gradient), 1)
        first = (step == 0 or self.replay_buffer.dynamic_optimizer_step[step - 1]) if dynamic else step % gas == 0
        if not first:
            status = original(self, experience, kl_ctl, step, loss_batch_info)
        else:
            (seqs, attention, action), total, dp = self._ifcore_bc
            device = experience.sequences.device
            seqs, attention, action = seqs.to(device), attention.to(device), action.to(device)
            backward, bc = self.strategy.backward, {}

            def backward_with_bc(loss, model, optimizer, *a, **kw):
                # NLL of the expert tokens under the policy itself: temperature 1, not the rollout's (Actor.forward
                # divides the logits by its temperature); a ring-attention group reads the same share
                temperature = getattr(model, "temperature", 1.0)
                model.temperature = 1.0
                try:
                    logp = model(seqs, action, attention_mask=attention,
                                 ring_attn_group=self.strategy.ring_attn_group)
                finally:
                    model.temperature = temperature
                nll_sum = -(logp.float() * action).sum()
                bc["nll"] = (nll_sum / action.sum().clamp(min=1)).detach()
                # DeepSpeed divides every micro-batch's loss by gas and averages the ranks: x gas x dp / tokens
                return backward(loss + coef * nll_sum * gas * dp / max(total, 1), model, optimizer, *a, **kw)

            self.strategy.backward = backward_with_bc
            try:
                status = original(self, experience, kl_ctl, step, loss_batch_info)
            finally:
                self.strategy.backward = backward
            self._ifcore_bc_nll = bc["nll"]
        status["metrics"]["bc_loss"] = self._ifcore_bc_nll  # the window's NLL on every micro-batch: its mean
        status["weights"]["bc_loss"] = "sample"
        return status

    return training_step
