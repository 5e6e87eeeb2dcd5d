"""The openrlhf backend's pieces: the OpenRLHF command of notebooks 02-04 against the pinned release's own parser,
curves read back from TensorBoard events (OpenRLHF's tags, the embedded trainer's own) and from the PPO trainer's
stdout, and a saved checkpoint evaluated through `ifcore eval`."""
from __future__ import annotations

import ast
import json
import logging
import math
import re
import shlex
from dataclasses import asdict
from pathlib import Path

import papermill
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ifcore.run import curves, openrlhf
from ifcore.run.curves import read_curves
from ifcore.train.grpo import load_config

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
TINY = REPO / "tests" / "data" / "tiny_chat_llama"


def _params(name: str) -> dict:
    return {k: ast.literal_eval(v["default"]) for k, v in
            papermill.inspect_notebook(str(NOTEBOOKS / name)).items()}


def _rows_file(path: Path, n: int) -> Path:
    label = json.dumps({"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": 3, "max": 30}},
                                        {"scope": [], "target": {"count": "occurrence", "of": "river"},
                                         "range": {"min": 1}}]})
    path.write_text("".join(json.dumps({"prompt": f"Write about a river, take {i}.", "label": label}) + "\n"
                            for i in range(n)))
    return path


def _notebook_configs() -> list[tuple[str, dict]]:
    """(arm, TrainConfig dict) of every run notebooks 02, 03 and 04 train at their default parameters, built as
    their run_arms call builds them (the notebooks' config dicts, replicated)."""
    out = []
    p = _params("02_raif_superior_cot.ipynb")
    config = {"reward": "raif", "prompts_per_step": 16, "group_size": 4,
              "max_new_tokens": 112, "eval_prompts": 128, "eval_samples": 2, "eval_every": 8, "save_every": 8,
              **p["train_config"]}
    out += [(f"02/{arm}", {**config, **over, "steps": p["steps"]}) for arm, over in p["arms"].items()]
    p = _params("03_scopeif_graded_reward.ipynb")
    out += [(f"03/{kind}", {**p["train_config"], "reward": kind, "steps": p["steps"]}) for kind in p["rewards"]]
    p = _params("04_rtt_token_rewards.ipynb")
    rtt = {"token_advantages": "rtt", "rtt_discriminator": "/cluster/disc"}
    arms = {"grpo": {}, "rtt": rtt, **{f"rtt_beta{b:g}": {**rtt, "rtt_beta": b} for b in p["beta_sweep"]},
            **{m: {**rtt, "token_advantages": m} if m == "rtt_inter" else {"token_advantages": m}
               for m in p["ablations"]}}
    out += [(f"04/{arm}", {**p["train_config"], **over, "reward": p["reward"], "steps": p["steps"]})
            for arm, over in arms.items()]
    return [(arm, asdict(load_config(None, **cfg))) for arm, cfg in out]


CONFIGS = _notebook_configs()
TINY_CONFIG = json.loads((TINY / "config.json").read_text())
QWEN = openrlhf.KNOWN_CONFIGS["Qwen/Qwen3-4B"]  # the runbook's policy: "/cluster/policy" below has its config


def _command(cfg: dict, run: str = "/cluster/runs/x", **kw) -> list[str]:
    chat = cfg["reward"] != "raif"  # RAIF's CoT prompts are written formatted
    kw = {"n_prompts": 4000, "model_config": QWEN, **kw}
    return openrlhf.command(cfg, run, model="/cluster/policy", prompt_data="/cluster/train.jsonl",
                            eval_data="/cluster/test.jsonl", chat_template=chat, **kw)


@pytest.mark.parametrize("arm,cfg", CONFIGS, ids=[a for a, _ in CONFIGS])
def test_notebook_commands_parse(arm, cfg):
    if cfg["bc_coef"]:
        cfg = dict(cfg, bc_data="/cluster/expert.jsonl")
    argv = _command(cfg)
    assert argv[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    parser, args = openrlhf.parse(argv[3:])
    assert all(t in parser._option_string_actions for t in argv[3:] if t.startswith("--"))
    assert args.reward.remote_url == [openrlhf.REWARD_MODULE] and (REPO / openrlhf.REWARD_MODULE).is_file()
    assert args.algo.advantage.estimator == "group_norm"
    assert args.rollout.n_samples_per_prompt == cfg["group_size"]
    assert args.rollout.batch_size == cfg["prompts_per_step"]
    assert args.train.batch_size == cfg["prompts_per_step"] * cfg["group_size"]
    assert args.train.max_epochs == cfg["ppo_epochs"]
    # exactly `steps` global steps: every episode takes max_samples prompts, prompts_per_step at a time
    assert args.data.max_samples * args.train.num_episodes == cfg["steps"] * cfg["prompts_per_step"]
    assert args.data.max_samples % cfg["prompts_per_step"] == 0 and args.data.max_samples <= 4000
    assert (args.actor.adam.lr, args.algo.kl.init_coef, args.actor.eps_clip) == (cfg["lr"], cfg["kl_coef"],
                                                                                 cfg["clip_eps"])
    assert args.algo.kl.use_loss and args.algo.kl.estimator == "k3"
    assert args.rollout.max_new_tokens == cfg["max_new_tokens"] and args.train.seed == cfg["seed"]
    assert (args.rollout.temperature, args.rollout.top_p) == (cfg["temperature"], cfg["top_p"])
    assert args.eval.steps == cfg["eval_every"] and args.ckpt.save_steps == cfg["save_every"]
    assert args.logger.tensorboard_dir == "/cluster/runs/x/tensorboard" and args.logger.wandb.run_name == "x"
    assert args.actor.entropy_coef == 0  # entropy logged, not in the loss
    assert args.data.apply_chat_template == (cfg["reward"] != "raif")

    env = openrlhf.reward_env(cfg)
    assert env["IFCORE_REWARD"] == cfg["reward"] and float(env["IFCORE_ALPHA"]) == cfg["alpha"]
    assert env["IFCORE_THINK"] == ("raif" if cfg["reward"] == "raif" else "auto")
    mode, paired = cfg["token_advantages"], bool(cfg["nothink_share"])
    assert ("IFCORE_RTT_BETA" in env) == (mode != "broadcast") and ("IFCORE_RAIF_NOTHINK" in env) == paired
    assert paired == (cfg["superior_cot"] != "off")  # RAIF's GRPO baseline samples no no-think rollouts
    assert ("IFCORE_BC_COEF" in env) == bool(cfg["bc_coef"]) and not args.algo.dynamic_filtering_enable  # no refill
    if mode != "broadcast":  # every token-advantage arm of notebook 04, as the plug-ins read it
        seed = str(cfg["seed"])
        assert float(env["IFCORE_RTT_BETA"]) == cfg["rtt_beta"]
        assert {k: v for k, v in env.items() if k.startswith("IFCORE_RTT_") and k != "IFCORE_RTT_BETA"} == {
            "rtt": {"IFCORE_RTT_RELEVANCE": openrlhf.SAVED_RELEVANCE, "IFCORE_RTT_DISCRIMINATOR": "/cluster/disc"},
            "rtt_inter": {"IFCORE_RTT_RELEVANCE": openrlhf.SAVED_RELEVANCE, "IFCORE_RTT_DISCRIMINATOR": "/cluster/disc",
                          "IFCORE_RTT_MODE": "inter"},
            "uniform": {"IFCORE_RTT_RELEVANCE": "uniform"},
            "random": {"IFCORE_RTT_RELEVANCE": "random", "IFCORE_RTT_SEED": seed}}[mode]
    if paired:  # 02's superior-CoT arms: a quarter of each group without reasoning, for eq. 7's test only
        assert env["IFCORE_RAIF_NOTHINK"] == "1" and env["IFCORE_RAIF_TEST"] == cfg["superior_cot"]
        assert "IFCORE_RAIF_REFILL" not in env and "IFCORE_RAIF_NOTHINK_ACCURACY" not in env
    on = mode != "broadcast" or paired or bool(cfg["bc_coef"])

    spec = openrlhf.job_spec(cfg, "/cluster/runs/x", model="/cluster/policy", prompt_data="/cluster/train.jsonl",
                             n_prompts=4000, chat_template=cfg["reward"] != "raif", model_config=QWEN)
    assert shlex.split(spec["entrypoint"])[:3] == argv[:3]
    assert spec["runtime_env"]["working_dir"] == str(REPO)
    # the hook is always there: it keeps the newest HF checkpoints (IFCORE_CKPT_KEEP) and evaluates after the last
    # step (IFCORE_EVAL_LAST, with eval data and steps not a multiple of eval_every)
    assert spec["runtime_env"]["worker_process_setup_hook"] == openrlhf.PLUGINS_HOOK
    assert env.items() <= spec["runtime_env"]["env_vars"].items()
    assert spec["runtime_env"]["env_vars"]["IFCORE_CKPT_KEEP"] == "3"
    assert on == bool(env.keys() - {"IFCORE_REWARD", "IFCORE_THINK", "IFCORE_ALPHA"})  # the arm's own plug-ins


def test_bad_flag_is_named():
    cfg = dict(CONFIGS[0][1], reward="scopeif", nothink_share=0.0, superior_cot="off")
    argv = _command(cfg)
    openrlhf.check_flags(argv)
    with pytest.raises(ValueError, match="--advantage_estimator"):
        openrlhf.check_flags(argv + ["--advantage_estimator", "group_norm"])
    with pytest.raises(ValueError, match=r"--actor\.adam\.l: not an openrlhf 0\.11\.2 flag"):  # a prefix argparse takes
        openrlhf.check_flags(argv + ["--actor.adam.l", "1e-6"])
    with pytest.raises(ValueError, match="n_samples_per_prompt"):  # the script's own checks run too
        openrlhf.check_flags(argv + ["--rollout.n_samples_per_prompt", "1"])
    with pytest.raises(ValueError, match="--not.a_flag"):
        _command(cfg, extra=["--not.a_flag"])


def test_unsupported_options_are_refused_by_name():
    by_arm = dict(CONFIGS)
    with pytest.raises(ValueError, match="^rtt_discriminator: token_advantages rtt_inter needs a discriminator"):
        _command(dict(by_arm["04/rtt_inter"], rtt_discriminator=None))
    assert openrlhf.reward_env(by_arm["04/rtt"], "verifier")["IFCORE_RTT_RELEVANCE"] == "verifier"  # in its place
    with pytest.raises(ValueError, match="^rtt_alpha: 0.5 has no OpenRLHF counterpart"):
        _command(dict(by_arm["04/rtt"], rtt_alpha=0.5))
    with pytest.raises(ValueError, match="^superior_cot: 'reference'"):
        _command(dict(by_arm["02/supcot"], superior_cot="reference", nothink_share=0.0))
    refill = _command(dict(by_arm["02/supcot"], refill_rounds=2))  # not in RAIF: through the dynamic filter
    assert refill[refill.index("--algo.dynamic_filtering_range") + 1:][:2] == ["-0.01", "1.01"]
    env = openrlhf.reward_env(dict(by_arm["02/supcot"], refill_rounds=2))
    assert (env["IFCORE_RAIF_REFILL"], env["IFCORE_RAIF_STEPS"]) == ("2", str(by_arm["02/supcot"]["steps"]))
    # refills draw prompts beyond steps x prompts_per_step: every step gets prompts_per_step x 3 rows (the plug-ins
    # stop after `steps`), whatever the file's length
    for rows in (4000, 100, 48):
        cfg = dict(by_arm["02/supcot"], refill_rounds=2)
        _, args = openrlhf.parse(_command(cfg, n_prompts=rows)[3:])
        per_step = cfg["prompts_per_step"] * 3
        assert args.data.max_samples <= rows and args.data.max_samples % cfg["prompts_per_step"] == 0
        assert args.data.max_samples // per_step * args.train.num_episodes >= cfg["steps"]
    with pytest.raises(ValueError, match="refill_rounds: a step may draw 48 prompts, but the prompt file has only 47"):
        _command(dict(by_arm["02/supcot"], refill_rounds=2), n_prompts=47)
    with pytest.raises(ValueError, match="^bc_data: "):
        _command(by_arm["02/supcot_bc"])
    plain = by_arm["03/scopeif"]
    with pytest.raises(ValueError, match="^reward: raif"):
        openrlhf.command(by_arm["02/supcot"], "/r", model="/m", prompt_data="/p", n_prompts=4000)
    with pytest.raises(ValueError, match="^think: false"):
        openrlhf.command(dict(plain, think=False), "/r", model="/m", prompt_data="/p", n_prompts=4000)
    with pytest.raises(ValueError, match="^model: "):
        openrlhf.command(plain, "/r", prompt_data="/p", n_prompts=4000)
    with pytest.raises(ValueError, match="^prompts_per_step: 16 prompts per step, but the prompt file has only 8"):
        openrlhf.command(plain, "/r", model="/m", prompt_data="/p", n_prompts=8)
    with pytest.raises(ValueError, match="^vllm_engines: "):
        openrlhf.command(plain, "/r", model="/m", prompt_data="/p", n_prompts=4000, vllm_engines=3)


def test_steps_beyond_the_prompt_file_take_episodes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"p{i}", "label": "{}"}) + "\n" for i in range(100)))
    cfg = dict(CONFIGS[0][1], reward="scopeif", nothink_share=0.0, superior_cot="off", steps=40,
               prompts_per_step=16)
    _, args = openrlhf.parse(openrlhf.command(cfg, "/r", model="/m", prompt_data=str(data),
                                                      model_config=QWEN)[3:])
    assert (args.data.max_samples, args.train.num_episodes) == (80, 8)  # 40 x 16 = 8 episodes of 5 steps


def test_job_files_hold_the_embedded_trainers_prompts(tmp_path):
    """RAIF with superior-CoT and BC on the tiny chat model: the job's prompt files hold the embedded trainer's own
    rollout prompts, which the wheel's PromptDataset passes through unchanged without --data.apply_chat_template."""
    from transformers import AutoTokenizer

    from ifcore.integrations.openrlhf_plugins import NOTHINK_SUFFIX
    from ifcore.jsonl import read_jsonl
    from ifcore.train.grpo import _prompt

    data = _rows_file(tmp_path / "rows.jsonl", 6)
    experts = tmp_path / "expert.jsonl"
    experts.write_text(json.dumps({"prompt": "Write about a river.", "response": "<think>plan</think><answer>The "
                                   "river runs.</answer>"}) + "\n")
    cfg = asdict(load_config(None, model=str(TINY), train_data=str(data), test_data=str(data), reward="raif",
                             nothink_share=0.25, superior_cot="group", bc_coef=0.1, bc_data=str(experts),
                             eval_prompts=2, steps=3, prompts_per_step=2))
    files = openrlhf.job_files(cfg, tmp_path / "run")
    assert files["prompt_data"] == str(tmp_path / "run" / "openrlhf" / "train.jsonl") and files["n_prompts"] == 6
    tokenizer = AutoTokenizer.from_pretrained(TINY)
    config = load_config(None, **cfg)
    ns = {}
    exec(compile(openrlhf._wheel_source("datasets/prompts_dataset.py"), "prompts_dataset.py", "exec"), ns)
    rows, source = read_jsonl(files["prompt_data"]), read_jsonl(data)
    for row, original in zip(rows, source):
        assert ns["preprocess_data"](row, None, "prompt", "label", None) == (
            _prompt(tokenizer, original["prompt"], config), original["label"])
    assert len(read_jsonl(files["eval_data"])) == 2
    (expert,) = read_jsonl(files["cfg"]["bc_data"])
    assert expert["prompt"].endswith(tokenizer.apply_chat_template([{"role": "user", "content": "x"}],
                                                                   tokenize=False, add_generation_prompt=True)[-12:])
    assert expert["response"].endswith("</answer>" + tokenizer.eos_token)
    assert files["think_gate"] == "raif"
    spec = openrlhf.job_spec(files.pop("cfg"), tmp_path / "run", **files)
    env = spec["runtime_env"]["env_vars"]
    assert env["IFCORE_THINK"] == "raif" and env["IFCORE_RAIF_NOTHINK"] == "1"
    assert env["IFCORE_BC_DATA"] == str(tmp_path / "run" / "openrlhf" / "expert.jsonl")
    argv = shlex.split(spec["entrypoint"])
    assert "--data.apply_chat_template" not in argv and "--algo.dynamic_filtering_enable" not in argv  # no refill
    assert argv[argv.index("--data.max_samples") + 1] == "6" and argv[argv.index("--train.num_episodes") + 1] == "1"
    longest = max(len(tokenizer(r["prompt"], add_special_tokens=False)["input_ids"])
                  for r in read_jsonl(files["prompt_data"]) + read_jsonl(files["eval_data"]))
    suffix = len(tokenizer(NOTHINK_SUFFIX, add_special_tokens=False)["input_ids"])  # superior_cot's no-think prompts
    assert files["max_prompt_len"] == longest + suffix
    assert int(argv[argv.index("--data.max_len") + 1]) == longest + suffix + cfg["max_new_tokens"]
    # a label without constraints (the schema allows it): the reward function and the RTT plug-in refuse it, so
    # the job is refused before it is submitted, not when a worker meets the row
    with data.open("a") as f:
        f.write(json.dumps({"prompt": "Say anything.", "label": json.dumps({"constraints": []})}) + "\n")
    with pytest.raises(ValueError, match=r"rows.jsonl: row 7 label: no constraints"):
        openrlhf.job_files(cfg, tmp_path / "run2")
    # the no-think suffix: RAIF's block for a template without a thinking switch (this one); a model whose template
    # has one (Qwen3's, as the embedded policy's template) gets the block that template writes
    assert files["nothink_suffix"] == NOTHINK_SUFFIX and env["IFCORE_RAIF_NOTHINK_SUFFIX"] == NOTHINK_SUFFIX
    import shutil

    from ifcore.train.model import CHAT_TEMPLATE
    qwen_like = tmp_path / "qwen_like"
    shutil.copytree(TINY, qwen_like)
    (qwen_like / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    data.write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(data)[:6]))
    got = openrlhf.job_files(dict(cfg, model=str(qwen_like)), tmp_path / "run4")
    assert got["nothink_suffix"] == "<think>\n\n</think>\n\n"
    # a prompt longer than the model's positions leave after max_new_tokens: refused by row, not cut from the left
    label = read_jsonl(data)[0]["label"]
    data.write_text("".join(json.dumps({"prompt": p, "label": label}) + "\n"
                            for p in ["Short.", "river " * 5000, "Also short."]))
    with pytest.raises(ValueError, match=r"rows.jsonl: row 2: the prompt has \d+ tokens, but .* 4096 positions leave "
                                         r"\d+ after max_new_tokens"):
        openrlhf.job_files(dict(cfg, bc_coef=0.0), tmp_path / "run3")


@settings(max_examples=40, deadline=None)
@given(prompts=st.integers(1, 40), group=st.integers(2, 8), micro=st.integers(1, 16), gpus=st.sampled_from([1, 2, 4, 8]))
def test_batch_sizes_satisfy_deepspeeds_identity(prompts, group, micro, gpus):
    # DeepSpeed asserts train_batch_size == micro x accumulation x GPUs; the wheel's deepspeed.py floors the
    # accumulation (train_batch // micro // world), so e.g. 12 rollouts on 8 GPUs crashed at initialization.
    cfg = asdict(load_config(None, prompts_per_step=prompts, group_size=group, micro_batch=micro))
    if prompts * group % gpus:
        with pytest.raises(ValueError, match=f"prompts_per_step: .* {prompts * group} rollouts per step do not "
                                             f"split evenly over {gpus} GPUs"):
            _command(cfg, gpus_per_node=gpus, model_config=TINY_CONFIG)
        return
    _, args = openrlhf.parse(_command(cfg, gpus_per_node=gpus, model_config=TINY_CONFIG)[3:])
    mb, train = args.train.micro_batch_size, args.train.batch_size
    accumulation = train // mb // gpus  # the wheel's own formula
    assert train == mb * accumulation * gpus and 1 <= mb <= micro and args.rollout.micro_batch_size == mb


def test_the_entrypoint_runs_the_given_python(monkeypatch):
    # Ray runs the entrypoint in the head's shell: a bare python3 may be an interpreter without openrlhf
    cfg = CONFIGS[0][1]
    monkeypatch.delenv("IFCORE_OPENRLHF_PYTHON", raising=False)
    assert _command(cfg)[0] == "python3"
    monkeypatch.setenv("IFCORE_OPENRLHF_PYTHON", "/opt/rl/bin/python")
    assert _command(cfg)[0] == "/opt/rl/bin/python"
    spec = openrlhf.job_spec(cfg, "/cluster/runs/x", model="/cluster/policy", prompt_data="/cluster/train.jsonl",
                             n_prompts=4000, chat_template=False, python="/venv/bin/python", model_config=QWEN)
    assert shlex.split(spec["entrypoint"])[:3] == ["/venv/bin/python", "-m", "openrlhf.cli.train_ppo_ray"]


def test_max_len_fits_the_models_positions(tmp_path):
    # --data.max_len is vLLM's max_model_len: the default warm-start policy has 512 positions
    model = tmp_path / "policy"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**TINY_CONFIG, "max_position_embeddings": 512}))
    cfg = asdict(load_config(None, max_new_tokens=64))

    def max_len(**kw):
        argv = openrlhf.command(cfg | kw.pop("cfg", {}), "/cluster/runs/x", model=str(model),
                                prompt_data="/cluster/train.jsonl", n_prompts=4000, **kw)
        return int(argv[argv.index("--data.max_len") + 1])

    assert max_len() == 512  # no prompt length given: the model's window
    assert max_len(max_prompt_len=400) == 464
    with pytest.raises(ValueError, match="max_new_tokens: 64 new tokens after prompts of up to 449 tokens need 513 "
                                         "positions, but .* has max_position_embeddings 512"):
        max_len(max_prompt_len=449)
    with pytest.raises(ValueError, match="max_position_embeddings 512"):
        max_len(cfg={"max_new_tokens": 512})
    tiny = json.loads((TINY / "config.json").read_text())["max_position_embeddings"]
    argv = openrlhf.command(cfg, "/cluster/runs/x", model=str(TINY), prompt_data="/cluster/train.jsonl",
                            n_prompts=4000)
    assert int(argv[argv.index("--data.max_len") + 1]) == min(1024 + 64, tiny)


def test_an_rtt_run_hands_its_discriminator_to_the_plugins(tmp_path, monkeypatch):
    """Notebook 04's RTT arm on OpenRLHF: the job's environment names the run's discriminator folder, the plug-ins'
    relevance (ifcore.train.rtt:saved_relevance) is that discriminator's, and one trained on another tokenizer is
    refused before anything is submitted."""
    import shutil

    import numpy as np
    from transformers import AutoTokenizer

    from ifcore.train import rtt

    disc = rtt.Discriminator.from_backbone(str(TINY), seed=3)
    disc.save_pretrained(tmp_path / "disc")
    data = _rows_file(tmp_path / "rows.jsonl", 4)
    cfg = asdict(load_config(None, model=str(TINY), train_data=str(data), test_data=str(data), reward="scopeif",
                             token_advantages="rtt_inter", rtt_discriminator=str(tmp_path / "disc"), rtt_beta=0.25,
                             eval_prompts=2, steps=2, prompts_per_step=2))
    files = openrlhf.job_files(cfg, tmp_path / "run")
    env = openrlhf.job_spec(files.pop("cfg"), tmp_path / "run", **files)["runtime_env"]["env_vars"]
    assert (env["IFCORE_RTT_BETA"], env["IFCORE_RTT_MODE"], env["IFCORE_RTT_DISCRIMINATOR"]) == (
        "0.25", "inter", str(tmp_path / "disc"))
    module, _, name = env["IFCORE_RTT_RELEVANCE"].partition(":")
    relevance = getattr(__import__(module, fromlist=[name]), name)
    ids = AutoTokenizer.from_pretrained(TINY)("The river runs cold.", add_special_tokens=False).input_ids
    monkeypatch.setenv("IFCORE_RTT_DISCRIMINATOR", env["IFCORE_RTT_DISCRIMINATOR"])
    got = relevance(["Use the word river.", "Two sentences."], [ids, ids])
    want = disc.eval().relevance(["Use the word river.", "Two sentences."], [ids, ids])
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(got, want)) and len(got[0]) == len(ids)

    other = tmp_path / "other"
    shutil.copytree(tmp_path / "disc", other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["zzqx"])
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match="^rtt_discriminator: the tokenizer of .* differs from the policy's"):
        openrlhf.job_files(dict(cfg, rtt_discriminator=str(other)), tmp_path / "run2")


# ---- curves ---------------------------------------------------------------------------------------------------

def _close(got: dict, want: dict) -> bool:
    """Same keys; numbers equal to float32's precision (TensorBoard keeps 32 bits), anything else equal."""
    return got.keys() == want.keys() and all(
        math.isclose(got[k], v, rel_tol=1e-6, abs_tol=1e-7) if isinstance(v, float) and isinstance(got[k], float)
        else got[k] == v for k, v in want.items())


def _openrlhf_events(folder: Path) -> None:
    """Events as OpenRLHF's TensorboardLogger writes them (log_train / log_eval: add_scalar per key, the sample
    as text)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in (1, 2):
        status = {"rollout/reward_mean": 0.25 * step, "rollout/reward_std": 0.5, "rollout/response_length_mean": 30.0,
                  "rollout/truncated_rate": 0.125, "kl": 0.001 * step, "entropy_loss": 2.5, "ppo_clip_ratio": 0.0625,
                  "actor_grad_norm": 1.5, "timing/step_total": 12.0, "cla": 0.75, "format_fail": 0.25,
                  "policy_loss": -0.5, "actor_lr": 2e-6, "scope_Global_n": float("nan")}
        for k, v in status.items():
            writer.add_scalar(f"train/{k}", v, step)
        writer.add_text("train/generated_samples", "Sample:\\nhi\\n\\nReward: 1.0000", step)
    writer.add_scalar("eval/eval_default_pass1", 0.5, 2)
    writer.add_scalar("eval/eval_response_length_mean", 20.0, 2)
    writer.add_scalar("eval/eval_truncated_rate", 0.0, 2)
    writer.close()


def test_curves_from_openrlhf_events(tmp_path):
    _openrlhf_events(tmp_path / "run" / "tensorboard" / "x")
    rows = read_curves(tmp_path / "run")
    assert [(r["type"], r["step"]) for r in rows] == [("train", 1), ("train", 2), ("eval", 2)]
    first = rows[0]
    assert _close(first, {
        "type": "train", "step": 1, "reward_mean": 0.25, "reward_std": 0.5, "response_len": 30.0,
        "truncated_fraction": 0.125, "kl": 0.001, "entropy": 2.5, "clip_fraction": 0.0625, "grad_norm": 1.5,
        "step_seconds": 12.0, "csr": 0.75, "format_ok": 0.75, "openrlhf/policy_loss": -0.5,
        "openrlhf/actor_lr": 2e-6, "openrlhf/scope_Global_n": None}), first
    assert rows[1]["reward_mean"] == 0.5 and rows[1]["kl"] == pytest.approx(0.002)
    assert rows[2] == {"type": "eval", "step": 2, "openrlhf/eval_default_pass1": 0.5, "eval_response_len": 20.0,
                       "eval_truncated_fraction": 0.0}


def _wheel_line(member: str, pattern: str, **names) -> str:
    """The message of the wheel's own `logger.info(f"...")` call matching `pattern`, formatted with `names`."""
    tree = ast.parse(openrlhf._wheel_source(member))
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "logger.info"
               and re.search(pattern, ast.unparse(n.args[0]))]
    return eval(compile(ast.Expression(call.args[0]), member, "eval"), {}, dict(names))  # an f-string


def test_curves_from_openrlhf_stdout(tmp_path):
    fmt = re.search(r'_FORMAT = "(.*)"', openrlhf._wheel_source("utils/logging_utils.py")).group(1)
    formatter = logging.Formatter(fmt, datefmt="%m-%d %H:%M:%S")

    def line(message: str) -> str:  # as the trainer actor prints it, with the prefix Ray gives an actor's output
        record = logging.LogRecord("openrlhf", logging.INFO, "ppo_trainer.py", 551, message, None, None)
        return "(PPOTrainer pid=4242) " + formatter.format(record)

    status = {"policy_loss": -0.25, "rollout/reward_mean": 0.5, "kl": float("nan"), "format_fail": 0.0,
              "timing/step_total": 3.5, "cla": 1.0}
    log = ["$ python3 -m openrlhf.cli.train_ppo_ray ...", "Episode [1/1]:  50%|#####     | 1/2",
           line(_wheel_line("trainer/ppo_trainer.py", "Global step", global_step=1, log_status=status)),
           line(_wheel_line("trainer/ppo_trainer_async.py", "Global step", global_step=2,
                            log_status=dict(status, cla=0.5))),
           line(_wheel_line("trainer/ppo_trainer.py", "Evaluation completed", time_str="0:00:07", global_step=2,
                            logs={"eval_default_pass1": 0.375, "eval_truncated_rate": 0.0})),
           line(_wheel_line("trainer/ppo_trainer_async.py", "Eval at step", eval_step=4,
                            eval_metrics={"eval_default_pass1": 0.5}))]
    (tmp_path / "train.log").write_text("\n".join(log) + "\n")
    rows = read_curves(tmp_path)
    assert rows == [
        {"type": "train", "step": 1, "openrlhf/policy_loss": -0.25, "reward_mean": 0.5, "kl": None, "format_ok": 1.0,
         "step_seconds": 3.5, "csr": 1.0},
        {"type": "train", "step": 2, "openrlhf/policy_loss": -0.25, "reward_mean": 0.5, "kl": None, "format_ok": 1.0,
         "step_seconds": 3.5, "csr": 0.5},
        {"type": "eval", "step": 2, "openrlhf/eval_default_pass1": 0.375, "eval_truncated_fraction": 0.0},
        {"type": "eval", "step": 4, "openrlhf/eval_default_pass1": 0.5}]
    # A job killed mid-line loses that line only; a broken line in the middle is named
    (tmp_path / "train.log").write_text("\n".join(log[:3]) + "\n" + log[3][:-20])
    assert len(read_curves(tmp_path)) == 1
    (tmp_path / "train.log").write_text("\n".join([log[2][:-20]] + log[3:]) + "\n")
    with pytest.raises(ValueError, match=r"train\.log:1: not a metrics dict"):
        read_curves(tmp_path)
    with pytest.raises(FileNotFoundError, match="no TensorBoard events"):
        read_curves(tmp_path / "nothing")


def _rows_like_jsonl(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


def test_embedded_trainer_events_read_back_as_its_metrics(tmp_path):
    """The embedded trainer's own TensorBoard events, read with metrics.jsonl hidden, equal metrics.jsonl (its
    None values are the figures TensorBoard never got)."""
    from ifcore.jsonl import read_jsonl
    from ifcore.train.grpo import train

    data = _rows_file(tmp_path / "rows.jsonl", 4)
    cfg = load_config(None, model=str(TINY), train_data=str(data), test_data=str(data), steps=2, prompts_per_step=2,
                      group_size=2, max_new_tokens=8, micro_batch=4, eval_every=1, eval_prompts=2, eval_samples=1,
                      save_every=2, threads=1, output_dir=str(tmp_path / "run"))
    metrics = train(cfg, progress=False)
    want = read_jsonl(metrics)
    metrics.rename(metrics.with_name("hidden.jsonl"))
    got = read_curves(tmp_path / "run")
    assert [(r["type"], r["step"]) for r in got] == [(r["type"], r["step"]) for r in want]
    for g, w in zip(got, _rows_like_jsonl(want)):
        assert _close(g, w), (g, w)
    assert {"reward_mean", "kl", "entropy", "csr", "step_seconds"} <= got[1].keys()
    assert {"eval_isr", "eval_csr"} <= got[0].keys()


def test_mapping_table_is_documented():
    doc = (REPO / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = doc.split("## Notebooks on OpenRLHF: the openrlhf backend", 1)[1].split("\n## ", 1)[0]
    for key, name in curves.RENAMES.items():
        assert f"| {key} | {name} |" in section or f"| `{key}` | `{name}` |" in section, key
    assert curves.__doc__.count("| ") >= len(curves.RENAMES)


def test_evaluate_checkpoint_on_the_tiny_model(tmp_path, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    summary = openrlhf.evaluate_checkpoint(TINY, "ifeval", tmp_path / "eval", limit=2, max_new_tokens=16)
    assert summary["generation"]["prompts"] == 2 and summary["strict"]["prompts"] == 2
    responses = [json.loads(x) for x in (tmp_path / "eval" / "responses.jsonl").read_text().splitlines()]
    assert len(responses) == 2 and all(isinstance(r["response"], str) for r in responses)
    assert summary["generation"]["model"].startswith("tiny_chat_llama")
    assert 0 <= summary["strict"]["instruction_level"] <= 1 and not math.isnan(summary["loose"]["prompt_level"])
    with pytest.raises(RuntimeError, match="ifcore eval ifeval --model .*nowhere failed"):
        openrlhf.evaluate_checkpoint(tmp_path / "nowhere", "ifeval", tmp_path / "eval2", limit=2)


@pytest.mark.slow
def test_evaluate_checkpoint_through_an_endpoint(tmp_path, monkeypatch):
    """The same checkpoint served by `transformers serve` on loopback (what vLLM would serve on a cluster):
    the same greedy responses and scores as in-process."""
    from ifcore.infer.serve import serve

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    local = openrlhf.evaluate_checkpoint(TINY, "ifeval", tmp_path / "local", limit=2, max_new_tokens=16)
    with serve(str(TINY), engine="transformers") as endpoint:
        served = openrlhf.evaluate_checkpoint(TINY, "ifeval", tmp_path / "served", limit=2, max_new_tokens=16,
                                              backend="openai", base_url=endpoint.base_url)
    assert served["generation"]["model"] != local["generation"]["model"]  # not answered from the local cache
    assert ((tmp_path / "served" / "responses.jsonl").read_text()
            == (tmp_path / "local" / "responses.jsonl").read_text())
    assert served["strict"] == local["strict"] and served["loose"] == local["loose"]


# ---- the launch planner ----------------------------------------------------------------------------------------------

def _runbook(name: str, **kw) -> tuple[list[str], dict]:
    r = openrlhf.RUNBOOK[name]
    cfg = asdict(load_config(None, **r["config"]))
    argv = openrlhf.command(cfg, "/cluster/runs/x", model=r["model"], prompt_data="/cluster/train.jsonl",
                            n_prompts=4000, max_prompt_len=r["max_prompt_len"],
                            chat_template=cfg["reward"] != "raif", **kw)
    config = openrlhf.KNOWN_CONFIGS[r["model"]]
    env = openrlhf.reward_env(cfg)
    plan = openrlhf.memory_plan(argv, config, bc_batch=int(env.get("IFCORE_BC_BATCH", 0)),
                                discriminator=config if "IFCORE_RTT_DISCRIMINATOR" in env else None)
    return argv, plan


def test_n_params_matches_the_published_sizes():
    # Qwen3-4B: 4.0B parameters, 3.6B without the embedding (its model card); the warm start: about 0.5M
    qwen = openrlhf.KNOWN_CONFIGS["Qwen/Qwen3-4B"]
    assert openrlhf.n_params(qwen) == pytest.approx(4.02e9, rel=0.01)
    assert openrlhf.n_params(qwen) - qwen["vocab_size"] * qwen["hidden_size"] == pytest.approx(3.6e9, rel=0.02)
    assert openrlhf.n_params(openrlhf.KNOWN_CONFIGS["Qwen/Qwen2.5-0.5B-Instruct"]) == pytest.approx(0.49e9, rel=0.02)
    assert openrlhf.n_params(openrlhf.KNOWN_CONFIGS["ifcore-warm-start"]) == pytest.approx(0.5e6, rel=0.2)


def test_the_runbooks_old_notebook_03_settings_are_refused_and_the_planners_fit():
    # The review's arithmetic: micro 32 x 9,216 tokens of fp32 full-vocabulary logits is ~179 GB before anything
    # else, and without gradient checkpointing every layer's activations stay: refused, naming the knobs.
    with pytest.raises(ValueError, match=r"memory: the plan needs \d+\.\d GiB per GPU in its training phase, over the "
                                         r"stated 80 GiB .*activations .*gradient_checkpointing=True.*logits .*"
                                         r"max_tokens_per_gpu.* \(294912 tokens per GPU"):
        _runbook("03", gradient_checkpointing=False, packing=False, max_tokens_per_gpu=0)
    argv, plan = _runbook("03")  # the planner's defaults: checkpointing, packing, a 16k-token budget per GPU
    _, args = openrlhf.parse(argv[3:])
    assert args.actor.gradient_checkpointing_enable and args.ds.packing_samples and args.train.dynamic_batch_enable
    assert args.train.max_tokens_per_gpu == args.rollout.max_tokens_per_gpu == 16384 >= args.data.max_len == 9216
    assert plan["fits"] and plan["peak_gib"] <= 80
    # 16 bytes per parameter under ZeRO-2 on 8 GPUs: 2N + 14N/8; the logits 16,384 x 151,936 x 10 bytes
    n = plan["parameters"]
    assert plan["terms"]["model_states"] == pytest.approx((2 * n + 14 * n / 8) / 2 ** 30)
    assert plan["terms"]["logits"] == pytest.approx(16384 * 151936 * 10 / 2 ** 30)
    # the same 80 GB stated as 40 GiB is refused by name; ZeRO-3 lowers the model states
    with pytest.raises(ValueError, match=r"over the stated 40 GiB"):
        _runbook("03", gpu_gib=40)
    _, plan3 = _runbook("03", zero_stage=3)
    assert plan3["terms"]["model_states"] == pytest.approx(16 * n / 8 / 2 ** 30)
    assert plan3["terms"]["model_states"] < plan["terms"]["model_states"]
    # vLLM's share and the reserve over the GPU: the generation phase is refused, naming gpu_memory_utilization
    with pytest.raises(ValueError, match=r"generation phase.*vllm .*vllm_gpu_util"):
        _runbook("03", vllm_gpu_util=0.99)


@pytest.mark.parametrize("name", list(openrlhf.RUNBOOK))
def test_every_runbook_configuration_fits_one_80gb_gpu(name):
    argv, plan = _runbook(name)
    assert plan["fits"], openrlhf.format_plan(plan)
    _, args = openrlhf.parse(argv[3:])
    positions = openrlhf.KNOWN_CONFIGS[openrlhf.RUNBOOK[name]["model"]]["max_position_embeddings"]
    assert args.data.max_len <= positions and args.ckpt.max_num == 3
    if name == "02":  # RAIF's behaviour cloning: ceil(16 / 8) expert sequences per GPU on top of the PPO step
        assert plan["terms"]["behaviour_cloning"] > 0
    if name == "04":  # RTT's discriminator, bf16, on the reference actors' GPUs
        assert plan["terms"]["discriminator"] > 0


@settings(max_examples=50, deadline=None)
@given(prompts=st.sampled_from([8, 16, 32, 64]), group=st.sampled_from([2, 4, 8, 16]),
       micro=st.integers(1, 64), new=st.sampled_from([64, 512, 2048, 8192, 30000]),
       prompt_len=st.sampled_from([128, 1024, 4096]), stage=st.sampled_from([0, 1, 2, 2, 3, 3]),
       ckpt=st.sampled_from([True, True, False]), budget=st.sampled_from([0, None, None, 4096, 65536]),
       gib=st.sampled_from([24, 80, 141, 141]), util=st.sampled_from([0.3, 0.5, 0.8]),
       gpus=st.sampled_from([1, 8, 8]))  # weighted towards plans that fit: about half are accepted
def test_accepted_plans_fit_their_gpus(prompts, group, micro, new, prompt_len, stage, ckpt, budget, gib, util, gpus):
    cfg = asdict(load_config(None, prompts_per_step=prompts, group_size=group, micro_batch=micro, max_new_tokens=new))
    try:
        argv = _command(cfg, gpus_per_node=gpus, max_prompt_len=prompt_len, zero_stage=stage,
                        gradient_checkpointing=ckpt, max_tokens_per_gpu=budget, gpu_gib=gib, vllm_gpu_util=util)
    except ValueError as e:
        assert re.match(r"(memory|max_new_tokens|prompts_per_step): ", str(e)), e
        return
    _, args = openrlhf.parse(argv[3:])
    rollouts = prompts * group
    assert rollouts % (gpus * args.train.micro_batch_size) == 0  # DeepSpeed's batch identity
    assert args.data.max_len == prompt_len + new <= QWEN["max_position_embeddings"]
    tokens = args.train.max_tokens_per_gpu if args.train.dynamic_batch_enable else \
        args.train.micro_batch_size * args.data.max_len
    assert tokens >= args.data.max_len  # one whole sequence fits a micro-batch
    plan = openrlhf.memory_plan(argv, QWEN, gpu_gib=gib)
    assert plan["peak_gib"] <= gib
    # independently of the plan's sum: the fp32 logits of a micro-batch and the ZeRO-partitioned Adam states alone
    n = openrlhf.n_params(QWEN)
    states = {0: 16 * n, 1: 4 * n + 12 * n / gpus, 2: 2 * n + 14 * n / gpus, 3: 16 * n / gpus}[stage]
    assert tokens * QWEN["vocab_size"] * 4 + states <= gib * 2 ** 30


def test_the_job_evaluates_its_last_step_and_keeps_k_hf_checkpoints():
    cfg = dict(CONFIGS[0][1], steps=10, eval_every=4)  # OpenRLHF evaluates at 4 and 8; the plug-in adds 10
    kw = dict(model="/cluster/policy", prompt_data="/cluster/train.jsonl", n_prompts=4000, chat_template=False,
              model_config=QWEN)
    env = openrlhf.job_spec(cfg, "/r", eval_data="/cluster/test.jsonl", keep_checkpoints=2, **kw)["runtime_env"]
    assert env["env_vars"]["IFCORE_EVAL_LAST"] == "10" and env["env_vars"]["IFCORE_CKPT_KEEP"] == "2"
    assert env["worker_process_setup_hook"] == openrlhf.PLUGINS_HOOK
    env = openrlhf.job_spec(dict(cfg, steps=8), "/r", eval_data="/cluster/test.jsonl", **kw)["runtime_env"]
    assert "IFCORE_EVAL_LAST" not in env["env_vars"]  # 8 is a multiple of 4: OpenRLHF's own evaluation
    argv = openrlhf.command(cfg, "/r", keep_checkpoints=2, **kw)
    assert argv[argv.index("--ckpt.max_num") + 1] == "2"


def test_the_docs_runbook_is_the_planners_output():
    # docs/cluster.md's GPU runbook shows `ifcore openrlhf-plan --runbook NAME` for each configuration, and each
    # runbook line's comment the planner's peak: regenerate them (the CLI's output) when the planner changes
    readme = (REPO / "docs" / "cluster.md").read_text(encoding="utf-8")
    for name, r in openrlhf.RUNBOOK.items():
        text = openrlhf.describe(r["config"], model=r["model"], max_prompt_len=r["max_prompt_len"])
        assert f"```\n{text}\n```" in readme, name
        peak = re.search(r"peak\s+([\d.]+) GiB", text).group(1)
        label = {"smoke": "Smoke run", "02": "Notebook 02", "03": "Notebook 03", "04": "Notebook 04"}[name]
        assert f"# {label} (8 x 80 GB; planner peak {peak} GiB per GPU" in readme, name


def test_the_plan_command_line(capsys):
    from ifcore.cli import main

    assert main(["openrlhf-plan", "--runbook", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("python3 -m openrlhf.cli.train_ppo_ray") and "(fits)" in out
    with pytest.raises(SystemExit) as stop:
        main(["openrlhf-plan", "--runbook", "03", "--no-gradient-checkpointing", "--max-tokens-per-gpu", "0"])
    assert stop.value.code == 2
    assert "ifcore openrlhf-plan: error: memory: the plan needs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["openrlhf-plan", "--config", "{}"])
    assert "--model: give a hub id or folder, or --runbook" in capsys.readouterr().err
