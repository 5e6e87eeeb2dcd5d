"""TRL for real (issue 15, item 4): trl 1.16.0's own GRPOTrainer runs two steps on the embedded policy (a tiny Qwen3
built as ifcore.train.model builds it, saved and loaded from its folder by TRL) with ifcore.integrations.trl.reward_fn
on ifcore's synthetic prompts, on the CPU, with no network. The rewards TRL saw are read back from TRL's own
completion logs (log_completions) and compared with score_response on the same completions."""
from __future__ import annotations

import json
import socket
from functools import partial

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")

from transformers import AutoTokenizer  # noqa: E402

from ifcore import synth  # noqa: E402
from ifcore.cli import main  # noqa: E402
from ifcore.integrations.trl import reward_fn  # noqa: E402
from ifcore.rewards import SELECTORS, score_response  # noqa: E402
from ifcore.schema import parse_label  # noqa: E402
from ifcore.train.model import build_policy, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The embedded trainer's policy (a Qwen3 with its byte-level BPE and think-tag template), tiny and untrained."""
    folder = tmp_path_factory.mktemp("trl") / "policy"
    tokenizer = train_tokenizer([r["prompt"] for r in synth.dataset(200, seed=1)], vocab_size=400)
    build_policy(tokenizer, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, max_positions=512,
                 seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_grpo_trainer_two_steps_with_the_ifcore_reward(policy, tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(policy)
    rows = synth.dataset(4, seed=0)
    labels = {r["prompt"]: r["label"] for r in rows}
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "label": r["label"]}
                                          for r in rows])

    connects = []  # any connection attempt (hub look-ups included) is recorded and refused

    def refuse(sock, address):
        connects.append(address)
        raise OSError(f"test_trl_real: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    # cla under the "none" gate: an untrained policy's noise satisfies some constraints and not others, so the
    # rewards differ and a wrong label or setting would show
    reward = partial(reward_fn, kind="cla", think="none")
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4,
                          num_generations=2, max_completion_length=12, learning_rate=1e-3, beta=1e-3,
                          logging_steps=1, log_completions=True, num_completions_to_print=0, report_to="none",
                          save_strategy="no", use_cpu=True, bf16=False, activation_checkpointing=False, seed=0)
    trainer = trl.GRPOTrainer(model=str(policy), reward_funcs=reward, args=args, train_dataset=dataset,
                              processing_class=tokenizer)
    trainer.train()

    assert trainer.state.global_step == 2 and not connects
    assert trainer.accelerator.device.type == "cpu" and next(trainer.model.parameters()).device.type == "cpu"
    steps = [log for log in trainer.state.log_history if "ifcore/cla" in log]
    assert [log["step"] for log in steps] == [1, 2]
    for log in steps:
        for key in ("ila", "cla", "format_fail", "verify_errors", "over_budget", "clipped"):
            assert f"ifcore/{key}" in log
        assert any(f"ifcore/csr_{s}" in log for s in SELECTORS)

    seen = []  # (step, completion text, the reward TRL recorded, the label of its prompt)
    for step in (1, 2):
        table = pd.read_parquet(tmp_path / "out" / "completions" / f"completions_{step:05d}.parquet")
        assert len(table) == 4  # 2 prompts x 2 generations
        for prompt, completion, r in zip(table["prompt"], table["completion"], table["reward_fn"]):
            seen.append((step, completion[-1]["content"], r, labels[prompt[-1]["content"]]))
    expected = [score_response(text, parse_label(label), kind="cla", think="none")["reward"]
                for _, text, _, label in seen]
    assert [r for _, _, r, _ in seen] == pytest.approx(expected, abs=1e-6)
    assert len(set(expected)) > 1  # not a batch of equal rewards that any label would reproduce
    for log in steps:  # what reward_fn logged through log_metric is the mean of that step's rewards
        step_rewards = [e for (step, *_), e in zip(seen, expected) if step == log["step"]]
        assert log["ifcore/cla"] == pytest.approx(sum(step_rewards) / len(step_rewards), abs=1e-6)


def test_bench_train_times_both_trainers_on_the_same_batch(policy, capsys):
    assert main(["bench", "train", "--model", str(policy), "--max-new-tokens", "8"]) == 0
    out = json.loads(capsys.readouterr().out)  # the trainers' own prints went to stderr
    assert out["benchmark"] == "train" and out["rollouts_per_step"] == out["prompts"] * out["group_size"]
    assert len(out["embedded_seconds"]) == len(out["trl_seconds"]) == out["steps_timed"]
    assert out["trl_over_embedded"] == pytest.approx(out["trl_seconds_per_step"] / out["embedded_seconds_per_step"],
                                                     rel=0.02)
    assert 0 < out["embedded_response_len"] <= 8 and 0 < out["trl_response_len"] <= 8
    assert len(out["embedded_bf16_seconds"]) == out["steps_timed"] and 0 < out["embedded_bf16_response_len"] <= 8
    assert out["fp32_over_bf16"] == pytest.approx(out["embedded_seconds_per_step"]
                                                  / out["embedded_bf16_seconds_per_step"], rel=0.02)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "train", "--model", "no-org/no-such-model"])
    assert exit_info.value.code == 2 and "no-such-model" in capsys.readouterr().err
