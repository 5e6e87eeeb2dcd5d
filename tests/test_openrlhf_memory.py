"""The launch planner's terms (ifcore.run.openrlhf.memory_plan) against the openrlhf 0.11.2 wheel's code paths that
decide them, run on the CPU: the entropy its training step computes with gradient when --actor.entropy_coef is 0,
what --ds.enable_sleep moves off the GPU (offload_deepspeed_states), and where the reference model lives
(DeepspeedStrategy.get_ds_eval_config). The wheel's modules are imported as tests/test_openrlhf_plugins.py does."""
import ast
import copy
import importlib
import importlib.util
import sys
import types
import zipfile
from dataclasses import asdict
from enum import Enum
from pathlib import Path

import pytest
import torch
from test_openrlhf_plugins import _policy_experience, _policy_trainer, openrlhf, wheel_dir  # noqa: F401 (fixtures)

from ifcore.run import openrlhf as planner
from ifcore.train.grpo import load_config

REPO = Path(__file__).resolve().parents[1]
SMOKE = planner.RUNBOOK["smoke"]
QWEN05 = planner.KNOWN_CONFIGS[SMOKE["model"]]
GIB = 2 ** 30


def _plan(**kw) -> tuple[object, dict]:
    """The smoke run's command (8 GPUs unless told) with `kw`, parsed by the wheel, and its memory plan."""
    cfg = asdict(load_config(None, **SMOKE["config"]))
    argv = planner.command(cfg, "/cluster/runs/x", model=SMOKE["model"], prompt_data="/cluster/train.jsonl",
                           n_prompts=4000, max_prompt_len=SMOKE["max_prompt_len"], **kw)
    return planner.parse(argv[3:])[1], planner.memory_plan(argv, QWEN05)


def _saved_bytes(run) -> int:
    """Bytes of the distinct storages autograd saves for the backward while `run()` builds its graph."""
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(storages.values())


def test_entropy_is_computed_with_gradient_when_its_coefficient_is_zero(openrlhf, monkeypatch):
    """The command logs entropy with --actor.entropy_coef 0. The wheel's training step then asks its Actor for the
    entropy (return_entropy: the coefficient is not None), computed from the fp32 logits with gradient: autograd
    keeps its fp32 softmax, 4 bytes per token and vocabulary entry, the planner's entropy term. Eager here; the
    wheel decorates compute_entropy with torch.compile, whose partition keeps less (the term is the bound)."""
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.bert_padding", types.SimpleNamespace(
        index_first_axis=None, pad_input=None, rearrange=None, unpad_input=None))
    monkeypatch.setitem(sys.modules, "flash_attn.utils.distributed", types.SimpleNamespace(all_gather=None))
    from transformers import LlamaConfig, LlamaForCausalLM

    actor_module = importlib.import_module("openrlhf.models.actor")
    loss_module = importlib.import_module("openrlhf.models.loss")
    from openrlhf.trainer.ray import ppo_actor

    monkeypatch.setattr(ppo_actor, "aggregate_loss", loss_module.aggregate_loss)
    monkeypatch.setattr(actor_module, "compute_entropy", actor_module.compute_entropy._torchdynamo_orig_callable)
    vocab = 4096
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))
    actor = actor_module.Actor(model)
    actor.packing_samples = False  # set only on the path that loads a checkpoint by name
    args, plan = _plan(gpus_per_node=1)
    assert args.actor.entropy_coef == 0.0 and plan["terms"]["entropy"] > 0

    def step(coef):
        trainer, _ = _policy_trainer(ppo_actor.ActorPPOTrainer, temperature=1.0)
        trainer.actor, trainer.args.actor.entropy_coef = actor, coef
        status = {}
        experience = copy.deepcopy(_policy_experience())
        tokens = experience.sequences.numel()
        saved = _saved_bytes(lambda: status.update(ppo_actor.ActorPPOTrainer.training_step(
            trainer, experience, 0.0, 0, {})))
        return saved, tokens, status

    without, tokens, _ = step(None)  # the flag absent: no entropy asked for
    with_zero, _, status = step(args.actor.entropy_coef)
    assert "entropy_loss" in status["metrics"]  # logged, not in the loss
    per_entry = plan["terms"]["entropy"] * GIB / (plan["tokens_per_gpu"] * QWEN05["vocab_size"])
    assert per_entry == 4
    assert with_zero - without == pytest.approx(per_entry * tokens * vocab, rel=0.01)
    argv_none = [a for a in planner.command(asdict(load_config(None, **SMOKE["config"])), "/r", model=SMOKE["model"],
                                            prompt_data="/p", n_prompts=4000, max_prompt_len=1024)]
    i = argv_none.index("--actor.entropy_coef")
    del argv_none[i:i + 2]
    assert planner.memory_plan(argv_none, QWEN05)["terms"]["entropy"] == 0


class OffloadStateTypeEnum(Enum):  # deepspeed.runtime.zero.offload_config's, DeepSpeed 0.19.6
    optim_states = "optim_states"
    hp_params = "hp_params"
    lp_params = "lp_params"
    lp_grads = "lp_grads"
    contiguous_grad_buffer = "contiguous_grad_buffer"


@pytest.fixture
def deepspeed_utils(wheel_dir, monkeypatch):
    """The wheel's utils/deepspeed/deepspeed_utils.py, with a DeepSpeed 0.19.6 stand-in of the names it imports."""
    ds = types.ModuleType("deepspeed")
    ds.__version__ = "0.19.6"
    zero = "deepspeed.runtime.zero"
    for name, attrs in {"deepspeed": {}, "deepspeed.runtime": {}, zero: {},
                        f"{zero}.partition_parameters": {"ZeroParamStatus": Enum("ZeroParamStatus", "AVAILABLE")},
                        f"{zero}.offload_config": {"OffloadStateTypeEnum": OffloadStateTypeEnum,
                                                   "OffloadDeviceEnum": Enum("OffloadDeviceEnum", "cpu none")}}.items():
        module = ds if name == "deepspeed" else types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("wheel_deepspeed_utils",
                                                  Path(wheel_dir) / "utils" / "deepspeed" / "deepspeed_utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What each of DeepSpeed's offloadable states weighs under ZeRO stage s on d GPUs (bytes per parameter): the bf16
# weights (partitioned by stage 3), their gradients (stage 2+), the fp32 master weights and Adam's two moments (1+).
def _state_bytes(n: float, stage: int, d: int) -> dict:
    return {"lp_params": 2 * n / (d if stage == 3 else 1),
            "lp_grads": 2 * n / (d if stage >= 2 else 1), "contiguous_grad_buffer": 0,
            "hp_params": 4 * n / (d if stage >= 1 else 1), "optim_states": 8 * n / (d if stage >= 1 else 1)}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_enable_sleep_leaves_the_bf16_policy_weights_on_the_gpu(deepspeed_utils, monkeypatch, stage):
    moved = []
    engine = types.SimpleNamespace(
        zero_optimization_stage=lambda: stage, config={"zero_optimization": {"offload_optimizer": {"device": "none"}}},
        optimizer=types.SimpleNamespace(offload_states=lambda include, **kw: moved.extend(t.name for t in include)),
        empty_partition_cache=lambda: None)
    for name in ("empty_cache", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda: None)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    deepspeed_utils.offload_deepspeed_states(engine)  # what --ds.enable_sleep calls after each training phase
    assert set(moved) == {"optim_states", "contiguous_grad_buffer", "hp_params", "lp_grads"}
    args, plan = _plan(zero_stage=stage, gpu_gib=141 if stage == 0 else 80)
    n, d = plan["parameters"], args.actor.num_gpus_per_node
    states = _state_bytes(n, stage, d)
    assert sum(states.values()) == pytest.approx(plan["terms"]["model_states"] * GIB)  # the planner's ZeRO model
    left = sum(v for k, v in states.items() if k not in moved)
    assert plan["terms"]["policy_asleep"] * GIB == pytest.approx(left)
    # the generation phase holds what stays beside vLLM, the reference and the reserve
    assert plan["generation_gib"] == pytest.approx(sum(plan["terms"][k] for k in (
        "vllm", "reserve", "reference", "policy_asleep", "discriminator")))


def _wheel_method(wheel_dir, path: str, cls: str, name: str, namespace: dict):
    """A method of one of the wheel's classes, compiled from its source alone (its module imports GPU-only code)."""
    tree = ast.parse((Path(wheel_dir) / path).read_text())
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (fn,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name]
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)
    return namespace[name], klass


@pytest.mark.parametrize("stage", [0, 2, 3])
@pytest.mark.parametrize("offload", [False, True])
def test_the_reference_stays_on_the_gpu_unless_zero3_offloads_it(deepspeed_utils, wheel_dir, stage, offload):
    method, _ = _wheel_method(wheel_dir, "utils/deepspeed/deepspeed.py", "DeepspeedStrategy", "get_ds_eval_config",
                              {"get_eval_ds_config": deepspeed_utils.get_eval_ds_config})
    strategy = types.SimpleNamespace(stage=stage, param_dtype="bf16", deepcompile=False, ds_tensor_parallel_size=1,
                                     micro_train_batch_size=1, train_batch_size=8, ring_attn_size=1)
    ds_config = method(strategy, offload=offload)["zero_optimization"]
    # DeepSpeed's offload_param is a ZeRO-3 feature: under stage 0 the whole bf16 reference stays on each GPU
    on_gpu = not (ds_config["stage"] == 3 and ds_config["offload_param"]["device"] == "cpu")
    args, plan = _plan(zero_stage=stage, extra=["--ref.offload"] if offload else [],
                       gpu_gib=141 if stage == 0 else 80)
    n, d = plan["parameters"], args.actor.num_gpus_per_node
    want = 2 * n / (d if ds_config["stage"] == 3 else 1) if on_gpu else 0
    assert plan["terms"]["reference"] * GIB == pytest.approx(want)
    assert args.ref.offload == offload
    # and the wheel's reference actor builds its engine with that config (--ref.offload as given)
    source = (Path(wheel_dir) / "trainer" / "ray" / "launcher.py").read_text()
    (actor,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "ReferenceModelActor"]
    assert "strategy.get_ds_eval_config(offload=strategy.args.ref.offload)" in ast.unparse(actor)
