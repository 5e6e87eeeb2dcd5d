"""The OpenRLHF, TRL and verl adapters, each called the way its framework calls it, and validate-dataset."""
import asyncio
import importlib.util
import json
import logging
import re
import shlex
import subprocess
import sys
import types
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ifcore.cli import main
from ifcore.integrations import load_constraints, log_keys, sample_logs, scope_class
from ifcore.rewards import score_response
from ifcore.run import openrlhf
from ifcore.schema import Constraint, ConstraintError

REPO = Path(__file__).resolve().parents[1]
MODULE = "ifcore/integrations/openrlhf_reward.py"

R = """The river runs cold. It carries snow from the hills.

A heron waits by the river. The water moves fast. Fish hide under stones.

Night falls."""
CONSTRAINTS = [  # E1 (satisfied), E2 (g = 0.670320), E4 (g = 0.049787) of the schema's examples
    {"scope": [], "target": {"count": "word"}, "range": {"min": 20, "max": 30}},
    {"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
     "range": {"min": 2, "max": 3}},
    {"scope": [{"unit": "paragraph", "select": "at", "index": 0}], "target": {"count": "occurrence", "of": "river"},
     "range": {"eq": 0}},
]
LABEL = json.dumps({"constraints": CONSTRAINTS})
SCOPEIF_R = (1 + (0.670320046 + 0.049787068) / 2) / 3
PROMPT = "<|im_start|>user\nWrite three short paragraphs about a river.<|im_end|>\n<|im_start|>assistant\n"
NASTY = ["", "<think>", "</think>", "<think></think><think>", "<answer>", "\x00\ud800", "- " * 3000, "{" * 5000,
         "x" * 200000]


# ---- OpenRLHF: the launch command against the pinned release's own parser ----------------------------------

def _launch_commands() -> list[list[str]]:
    """Every bash block of the README and docs/ that launches OpenRLHF's PPO/GRPO trainer."""
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        if doc.exists():
            for block in re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
                if "openrlhf.cli.train_ppo_ray" in block:
                    out.append(shlex.split(block.replace("\\\n", " "), comments=True))
    return out


def test_launch_command_matches_openrlhf_0_11_2(capsys):
    commands = _launch_commands()
    assert commands, "docs/integrations.md has no OpenRLHF launch command"
    for tokens in commands:
        i = tokens.index("openrlhf.cli.train_ppo_ray")
        env = dict(t.split("=", 1) for t in tokens[:i] if "=" in t)
        argv = tokens[i + 1:]
        try:
            parser, args = openrlhf.parse(argv)
        except SystemExit:
            pytest.fail(f"openrlhf 0.11.2 rejects the command: {capsys.readouterr().err}")
        for flag in (t for t in argv if t.startswith("--")):  # exact names: argparse would accept prefixes
            assert flag in parser._option_string_actions, f"{flag} is not an openrlhf 0.11.2 flag"
        assert args.reward.remote_url == [MODULE] and (REPO / MODULE).is_file()
        assert args.algo.advantage.estimator == "group_norm" and args.rollout.n_samples_per_prompt > 1
        assert args.data.label_key == "label"
        assert set(env) <= {"IFCORE_REWARD", "IFCORE_THINK", "IFCORE_ALPHA", "IFCORE_EOS", "IFCORE_BUDGET_S",
                            "IFCORE_MAX_RESPONSE_CHARS"}


def test_parser_check_catches_a_bad_flag(capsys):
    with pytest.raises(SystemExit):
        openrlhf.parse(["--reward.remote_url", MODULE, "--advantage_estimator", "group_norm"])
    assert "unrecognized arguments" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="n_samples_per_prompt"):  # the script's own check runs too
        openrlhf.parse(["--reward.remote_url", MODULE, "--algo.advantage.estimator", "group_norm"])


# ---- OpenRLHF: the module run by the release's own SingleTurnAgentExecutor ---------------------------------

@pytest.fixture
def executor_cls(monkeypatch):
    """SingleTurnAgentExecutor from the wheel's openrlhf/utils/agent.py; aiohttp (HTTP rewards only) and
    OpenRLHF's logger are stubbed so that the module runs without its GPU dependencies."""
    stubs = {"aiohttp": types.ModuleType("aiohttp"), "openrlhf": types.ModuleType("openrlhf"),
             "openrlhf.utils": types.ModuleType("openrlhf.utils"),
             "openrlhf.utils.logging_utils": types.ModuleType("openrlhf.utils.logging_utils")}
    stubs["openrlhf.utils.logging_utils"].init_logger = logging.getLogger
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    ns = {"__name__": "openrlhf.utils.agent"}
    exec(compile(openrlhf._wheel_source("utils/agent.py"), "openrlhf/utils/agent.py", "exec"), ns)
    return ns["SingleTurnAgentExecutor"]


class CharTokenizer:
    """One token per character, so decode(encode(x)) == x and special tokens survive decoding."""

    def __call__(self, text, add_special_tokens=False, return_tensors="pt"):
        return {"input_ids": torch.tensor([[ord(c) for c in text]])}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def _rollout(executor, label, generated: str, finish_reason: str = "stop") -> dict:
    async def generate(prompt_ids, params, multi_modal_data=None):
        out = types.SimpleNamespace(token_ids=[ord(c) for c in generated], finish_reason=finish_reason,
                                    logprobs=None)
        return types.SimpleNamespace(outputs=[out])

    params = types.SimpleNamespace(max_tokens=1 << 20, logprobs=None)
    engine = types.SimpleNamespace(generate=generate)
    return asyncio.run(executor.execute(PROMPT, label, params, 1 << 21, CharTokenizer(), engine))


def test_openrlhf_executor_calls_the_module(executor_cls, monkeypatch):
    monkeypatch.chdir(REPO)  # the launch command's relative --reward.remote_url
    executor = executor_cls([MODULE])
    out = _rollout(executor, LABEL, "<think>\nThree paragraphs.\n</think>\n\n" + R + "<|im_end|>")
    # samples_generator: torch.tensor([reward]), and each extra log becomes info[key] = torch.tensor([value])
    assert torch.tensor([out["reward"]]).flatten().tolist() == pytest.approx([SCOPEIF_R], abs=1e-6)
    assert torch.tensor([out["scores"]]).flatten().tolist() == pytest.approx([SCOPEIF_R], abs=1e-6)
    logs = out["extra_logs"]
    assert all(isinstance(v, float) for v in logs.values())
    assert {k: torch.tensor([v]).item() for k, v in logs.items()} == pytest.approx(logs)
    assert logs["ila"] == 0.0 and logs["cla"] == pytest.approx(1 / 3) and logs["format_fail"] == 0.0
    assert (logs["scope_Global_sat"], logs["scope_Global_n"], logs["scope_Traversal_n"]) == (1.0, 1.0, 1.0)

    cut = _rollout(executor, LABEL, "<think>\nThree paragraphs.\n</think>\n\n" + R[:40], "length")
    assert cut["truncated"] and cut["reward"] == 0.0 and cut["extra_logs"]["fmt_truncated"] == 1.0
    unclosed = _rollout(executor, LABEL, "<think>\nstill thinking" + "<|im_end|>")
    assert unclosed["reward"] == 0.0 and unclosed["extra_logs"]["fmt_unclosed_think"] == 1.0
    outs = [out, cut, unclosed] + [_rollout(executor, LABEL, t + "<|im_end|>") for t in NASTY]
    # Experience merging needs every sample to carry the same info keys
    assert all(o["reward"] is not None and o["extra_logs"].keys() == logs.keys() for o in outs)


def test_openrlhf_malformed_label_names_the_sample(executor_cls, caplog):
    bad = json.dumps({"constraints": [{"scope": [{"unit": "paragraph", "select": "at", "index": "x"}],
                                       "target": {"count": "word"}, "range": {"min": 1}}]})
    executor = executor_cls([str(REPO / MODULE)])
    with caplog.at_level(logging.INFO):
        out = _rollout(executor, bad, R + "<|im_end|>")
    # OpenRLHF's executor would log a raised exception at INFO and give reward None (the run then fails far from
    # the cause): the reward function logs it itself, with the sample, and gives the floor reward, counted
    assert float(out["reward"]) == 0.0 and out["extra_logs"]["reward_error"] == 1.0
    assert "constraints[0].scope[0].index: expected an integer" in caplog.text
    assert "Write three short paragraphs about a river." in caplog.text


def _openrlhf_module():
    spec = importlib.util.spec_from_file_location("reward_func", REPO / MODULE)  # as OpenRLHF loads it
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def test_openrlhf_recovers_the_response_when_the_prompt_changed():
    reward_func = _openrlhf_module()
    # a tokenizer round trip that rewrote the prompt's head: found by its tail
    out = reward_func(["<s> " + PROMPT[5:] + R + "<|im_end|>"], [PROMPT], [LABEL])
    assert out["rewards"].tolist() == pytest.approx([SCOPEIF_R], abs=1e-6)
    assert out["extra_logs"]["prompt_mismatch"] == 1.0
    out = reward_func([R + "<|eot_id|>"], ["a prompt that is not in the query"], [LABEL])
    assert out["rewards"].tolist() == pytest.approx([SCOPEIF_R], abs=1e-6)
    assert out["extra_logs"]["prompt_not_found"] == 1.0


def test_openrlhf_settings_from_the_environment(monkeypatch):
    reward_func = _openrlhf_module()
    queries = [PROMPT + R + "<|im_end|>", PROMPT + R, PROMPT + "<think>x</think>" + R + "<|im_end|><|endoftext|>"]
    out = reward_func(queries, [PROMPT] * 3, [LABEL] * 3)
    assert out["rewards"].tolist() == pytest.approx([SCOPEIF_R, 0.0, SCOPEIF_R], abs=1e-6)
    assert out["extra_logs"]["fmt_truncated"] == pytest.approx(1 / 3)  # means over the call
    monkeypatch.setenv("IFCORE_REWARD", "raif")
    monkeypatch.setenv("IFCORE_EOS", "")  # no truncation check
    out = reward_func(queries, [PROMPT] * 3, [LABEL] * 3)
    assert out["rewards"].tolist() == pytest.approx([1 + 1 / 3] * 3)
    assert out["scores"].tolist() == pytest.approx([(1 + 1 / 3 + 3) / 6] * 3)  # [-3, 3] -> [0, 1]
    monkeypatch.setenv("IFCORE_REWARD", "binary")
    with pytest.raises(ValueError, match="IFCORE_REWARD"):
        reward_func(queries[:1], [PROMPT], [LABEL])


def test_openrlhf_scoring_errors_are_logged_floored_and_counted(monkeypatch, caplog):
    # OpenRLHF swallows a reward function's exception and the run fails later on reward None, far from the cause
    reward_func = _openrlhf_module()
    queries = [PROMPT + R + "<|im_end|>"] * 3
    labels = [LABEL, json.dumps({"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": "x"}}]}),
              LABEL]
    with caplog.at_level("ERROR"):
        out = reward_func(queries, [PROMPT] * 3, labels)
    assert out["rewards"].tolist() == pytest.approx([SCOPEIF_R, 0.0, SCOPEIF_R], abs=1e-6)  # scopeif's floor: 0
    assert out["extra_logs"]["reward_error"] == pytest.approx(1 / 3)
    assert "scoring sample 1 (prompt ending" in caplog.text and "range.min" in caplog.text
    monkeypatch.setenv("IFCORE_REWARD", "raif")  # RAIF's floor, -3; the failure counts as a failed format
    out = reward_func(queries[:1], [PROMPT], labels[1:2])
    assert out["rewards"].tolist() == [-3.0] and out["extra_logs"]["format_fail"] == 1.0


_REWARD_FUNC = _openrlhf_module()


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["", "<|im_end|>"]))
def test_openrlhf_never_raises_on_text(text, eos):
    out = _REWARD_FUNC([PROMPT + text + eos, text], [PROMPT, PROMPT], [LABEL, LABEL])
    assert out["rewards"].shape == (2,) and out["extra_logs"].keys() == set(log_keys(("prompt_mismatch",
                                                                                     "prompt_not_found",
                                                                                     "reward_error")))
    assert out["extra_logs"]["reward_error"] == 0.0
    assert ((out["rewards"] >= 0) & (out["rewards"] <= 1)).all()


# ---- TRL -------------------------------------------------------------------------------------------------

def _trl_calculate_rewards(reward_func, inputs, prompts, completions, completion_ids_list):
    """The custom-function branch of GRPOTrainer._calculate_rewards (trl 1.16.0), without the trainer."""
    metrics = defaultdict(list)
    keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
    reward_kwargs = {key: [example[key] for example in inputs] for key in keys}
    reward_kwargs["trainer_state"] = types.SimpleNamespace(global_step=3)
    reward_kwargs["log_extra"] = lambda column, values: None
    reward_kwargs["log_metric"] = lambda name, value: metrics[name].append(value)
    output = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids_list,
                         **reward_kwargs)
    output = [reward if reward is not None else torch.nan for reward in output]
    return torch.tensor(output, dtype=torch.float32), metrics


def test_trl_standard_and_conversational():
    from ifcore.integrations.trl import reward_fn

    texts = [R, "<think>open", "x</think>" + R]
    inputs = [{"prompt": "Write about a river.", "label": LABEL, "id": i} for i in range(3)]
    rewards, metrics = _trl_calculate_rewards(reward_fn, inputs, [x["prompt"] for x in inputs], texts, None)
    assert rewards.tolist() == pytest.approx([SCOPEIF_R, 0.0, SCOPEIF_R], abs=1e-6)
    assert metrics["ifcore/format_fail"] == [pytest.approx(1 / 3)]
    # the completion that failed the gate counts its constraints violated
    assert metrics["ifcore/csr_Global"] == [pytest.approx(2 / 3)] and metrics["ifcore/csr_Position"] == [0.0]
    assert "ifcore/csr_Nested" not in metrics  # no Nested constraint in the batch

    chat = [[{"role": "user", "content": "Write about a river."}]] * 2
    completions = [[{"role": "assistant", "content": R}],
                   [{"role": "assistant", "content": [{"type": "text", "text": R}]}]]
    rewards, _ = _trl_calculate_rewards(reward_fn, inputs[:2], chat, completions, None)
    assert rewards.tolist() == pytest.approx([SCOPEIF_R] * 2, abs=1e-6)


def test_trl_partial_settings_truncation_and_label_column():
    from ifcore.integrations.trl import reward_fn

    inputs = [{"prompt": "p", "constraints": LABEL}] * 3
    fn = partial(reward_fn, kind="cla", label_column="constraints", eos_token_ids=[2])
    ids = [[5, 6, 2], [5, 6, 7], []]  # ended with EOS, cut at the limit, empty
    rewards, metrics = _trl_calculate_rewards(fn, inputs, ["p"] * 3, [R] * 3, ids)
    assert rewards.tolist() == pytest.approx([1 / 3, 0.0, 0.0])
    with pytest.raises(ValueError, match="no dataset column 'label'"):
        _trl_calculate_rewards(reward_fn, inputs, ["p"] * 3, [R] * 3, ids)
    bad = [{"prompt": "p", "label": json.dumps({"constraints": [{"target": {"count": "word"}}]})}]
    with pytest.raises(ConstraintError, match=r"label of completion 0 .*constraints\[0\]\.range: missing"):
        _trl_calculate_rewards(reward_fn, bad, ["p"], [R], None)


# ---- verl ------------------------------------------------------------------------------------------------

def test_verl_naive_reward_manager_convention():
    # verl.utils.import_utils.load_module: a file path loaded under a generated module name
    path = REPO / "ifcore" / "integrations" / "verl.py"
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(str(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw_fn = module.compute_score

    def compute_score(*args, **kwargs):  # verl.trainer.ppo.reward._call_with_kwargs with reward_kwargs
        return raw_fn(*args, **{**kwargs, **{"kind": "scopeif"}})

    arrow_row = json.loads(json.dumps({"constraints": [dict(c, id=None, category=None) for c in CONSTRAINTS]}))
    arrow_row["constraints"][1]["scope"][0]["index"] = None  # Arrow's null-filled keys
    parquet_row = {"constraints": np.array(CONSTRAINTS, dtype=object)}
    batch = [(R, LABEL, {}), ("<think>open", LABEL, {}), (R, LABEL, {"response_is_truncated": True}),
             (R, arrow_row, {}), (R, parquet_row, {})] + [(t, LABEL, {}) for t in NASTY]
    reward_extra_info, scores = defaultdict(list), []
    for i, (response, ground_truth, extra) in enumerate(batch):  # NaiveRewardManager.__call__'s loop
        extra_info = {"index": i, **extra, "num_turns": None, "rollout_reward_scores": {}}
        score = compute_score(data_source="scopeinstruct", solution_str=response, ground_truth=ground_truth,
                              extra_info=extra_info)
        scores.append(score["score"])
        for key, value in score.items():
            reward_extra_info[key].append(value)
    assert scores[:5] == pytest.approx([SCOPEIF_R, 0.0, 0.0, SCOPEIF_R, SCOPEIF_R], abs=1e-6)
    assert all(len(v) == len(batch) for v in reward_extra_info.values())  # same keys for every response
    assert reward_extra_info["fmt_truncated"][2] == 1.0 and reward_extra_info["fmt_unclosed_think"][1] == 1.0
    with pytest.raises(ConstraintError, match="ground_truth of scopeinstruct sample 7"):
        compute_score(data_source="scopeinstruct", solution_str=R, ground_truth="{", extra_info={"index": 7})


# ---- shared pieces ---------------------------------------------------------------------------------------

def test_labels_and_scope_classes():
    with pytest.raises(ConstraintError, match="sample 3: no constraints"):
        load_constraints('{"constraints": []}', "sample 3")
    with pytest.raises(ConstraintError, match="sample 4: expected a schema v1 label"):
        load_constraints(None, "sample 4")
    assert len(load_constraints(CONSTRAINTS, "bare list")) == 3
    nested = {"scope": [{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": 0}],
              "target": {"count": "word"}, "range": {"max": 9}}
    where = {"scope": [{"unit": "sentence", "select": "where",
                        "if": {"target": {"count": "word"}, "range": {"min": 3}}}],
             "target": {"count": "word"}, "range": {"max": 9}}
    assert [scope_class(Constraint.from_dict(c)) for c in CONSTRAINTS + [nested, where]] == \
        ["Global", "Traversal", "Position", "Nested", "Condition"]
    # the category label wins over the scope path; "A -> B" is Nested
    labelled = dict(CONSTRAINTS[0], category={"scope": "Traversal(Paragraph) -> Position(Sentence)"})
    assert scope_class(Constraint.from_dict(labelled)) == "Nested"
    labelled = dict(nested, category={"scope": "Condition(Sentence)"})
    assert scope_class(Constraint.from_dict(labelled)) == "Condition"
    cs = load_constraints(LABEL, "x")
    logs = sample_logs(score_response(R, cs), cs)
    assert (logs["scope_Global_sat"], logs["scope_Traversal_sat"], logs["scope_Position_sat"]) == (1.0, 0.0, 0.0)
    assert logs["constraints"] == 3.0 and sum(logs[f"scope_{s}_n"] for s in
                                              ("Global", "Traversal", "Position", "Condition", "Nested")) == 3.0


def test_validate_dataset(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps({"prompt": "p", "label": label})
                              for label in (LABEL, {"constraints": CONSTRAINTS}, CONSTRAINTS)) + "\n")
    assert main(["validate-dataset", str(good)]) == 0
    assert "3 samples, 0 errors" in capsys.readouterr().out

    bad_index = json.dumps({"constraints": [CONSTRAINTS[0], {"scope": [{"unit": "paragraph", "select": "at",
                                                                        "index": "first"}],
                                                             "target": {"count": "word"}, "range": {"min": 1}}]})
    lines = [json.dumps({"prompt": "p", "label": LABEL}), "{not json", json.dumps({"prompt": "p"}),
             json.dumps({"prompt": "p", "label": bad_index}), "", json.dumps({"prompt": "p", "label": "[]"}),
             json.dumps({"label": LABEL}), json.dumps({"prompt": "p", "label": "{\"constraint\": []}"})]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["validate-dataset", str(bad)]) == 1
    captured = capsys.readouterr()
    errors = captured.err.splitlines()
    assert errors[0].startswith("line 2: not JSON")
    assert errors[1] == "line 3: label: missing (the constraints label)"
    assert errors[2] == "line 4: label.constraints[1].scope[0].index: expected an integer, got 'first'"
    assert errors[3].startswith("line 6: label: no constraints")
    assert errors[4] == "line 7: prompt: missing (the prompt field)"
    assert errors[5].startswith('line 8: label: expected an object with a "constraints" list')
    assert len(errors) == 6 and "7 samples, 6 errors" in captured.out

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert main(["validate-dataset", str(empty)]) == 1
    assert "no samples (the file is empty)" in capsys.readouterr().err


def test_cli_commands_run_as_installed(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "p", "constraints": LABEL}) + "\n")
    cmd = [sys.executable, "-m", "ifcore", "validate-dataset", str(data), "--label-key", "constraints",
           "--input-key", "question"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 samples, 0 errors" in done.stdout


def test_core_and_adapters_stay_light():
    # The core never imports torch; no adapter imports the trainer (OpenRLHF's module needs torch, as OpenRLHF).
    code = ("import sys, ifcore.rewards, ifcore.advantages, ifcore.integrations.trl, ifcore.integrations.verl\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "import ifcore.integrations.openrlhf_reward\n"
            "assert not [m for m in sys.modules if m.startswith('ifcore.train')], 'ifcore.train'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
