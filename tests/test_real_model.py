"""Real models end to end (issue 10): `ifcore generate`, `eval --model` (a seeded subset scored alone), `serve` and
`bench generate` on the command line; GRPO on a Llama whose chat template has no think tags (SmolLM2's shape), by
registry name, with and without LoRA, resumed exactly; the trainer's batched generation; the GPU check script on
the CPU. A tiny random Llama (tests/test_infer.py) stands in for SmolLM2, which only the slow tests load.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import USER_CACHE, run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from test_infer import PROMPTS, TEMPLATE, FakeServer, save_tiny_model  # noqa: E402

from ifcore.bench import ifeval  # noqa: E402
from ifcore.infer import registry  # noqa: E402
from ifcore.infer.generate import GenParams, generate  # noqa: E402
from ifcore.jsonl import read_jsonl  # noqa: E402
from ifcore.rewards import score_response  # noqa: E402
from ifcore.schema import parse_label  # noqa: E402
from ifcore.train.grpo import TIMING_KEYS, load_config, resolve_paths, run_identity, train  # noqa: E402
from ifcore.train.grpo import generate as trainer_generate  # noqa: E402
from ifcore.train.model import (CHAT_TEMPLATE, EMPTY_THINK, chat_prompt, has_think_switch,  # noqa: E402
                                load_policy, think_gate, train_tokenizer)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "ifcore-cache"))




def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def word_rows(n: int) -> list[dict]:
    """{prompt, label} rows with one word-count constraint each (a random tiny model meets some)."""
    rows = []
    for i in range(n):
        k = 2 + i % 6
        label = {"constraints": [{"text": f"Answer in at most {k} words.", "scope": [], "target": {"count": "word"},
                                  "range": {"max": k}}]}
        rows.append({"prompt": f"Write about the dog {i}. Answer in at most {k} words.", "label": json.dumps(label)})
    return rows


@pytest.fixture(scope="module")
def stopping_llama(llama, tmp_path_factory):
    """The tiny Llama whose generation config also ends a response at the five tokens it samples most (Qwen3's
    lists two end ids): rollouts of a few tokens stop on their own, so rewards differ within a group."""
    import contextlib

    model, tokenizer = load_policy(llama)
    prompts = [chat_prompt(tokenizer, row["prompt"]) for row in word_rows(8)]
    torch.manual_seed(0)
    seqs, _, n, mask, _, _ = trainer_generate(model, tokenizer, prompts, 16, "cpu", contextlib.nullcontext(), True)
    often = Counter(t for ids, k in zip(seqs[:, n:].tolist(), mask.sum(-1).tolist()) for t in ids[:k])
    model.generation_config.eos_token_id = [tokenizer.eos_token_id] + [t for t, _ in often.most_common(5)]
    out = tmp_path_factory.mktemp("models") / "stopping-llama"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {"train_data": str(write_rows(root / "train.jsonl", word_rows(16))),
            "test_data": str(write_rows(root / "test.jsonl", word_rows(4)))}


@pytest.fixture
def fake_server():
    srv = FakeServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/v1"
    srv.shutdown()
    srv.server_close()


# -- think modes of a chat template without think tags ---------------------------------------------------------

def test_a_template_without_think_tags_gets_both_modes_and_a_free_gate(llama):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(llama)  # TEMPLATE: no think tags, no enable_thinking
    switch = train_tokenizer(["a cat and a dog"] * 5, vocab_size=300)  # the embedded policy's Qwen3-style one
    assert plain.chat_template == TEMPLATE and switch.chat_template == CHAT_TEMPLATE
    assert not has_think_switch(plain) and has_think_switch(switch)
    header = plain.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert chat_prompt(plain, "Hi", think=True) == header  # the response is free
    assert chat_prompt(plain, "Hi", think=False) == header + EMPTY_THINK  # what Qwen3's template would write
    assert chat_prompt(switch, "Hi", think=False).endswith("<|im_start|>assistant\n" + EMPTY_THINK)  # once, not twice
    assert chat_prompt(switch, "Hi", think=True).endswith("<|im_start|>assistant\n")
    assert [think_gate(plain, t) for t in (True, False)] == ["auto", "none"]
    assert [think_gate(switch, t) for t in (True, False)] == ["required", "none"]
    # A model that never writes a think block is verified whole, not failed at the format gate...
    constraints = parse_label(word_rows(1)[0]["label"])
    assert score_response("Two words.", constraints, think=think_gate(plain, True))["reward"] == 1.0
    assert score_response("Two words.", constraints, think=think_gate(switch, True))["reward"] == 0.0
    # ...and one it writes is skipped, one it leaves open fails.
    assert score_response("<think>a b c d e f</think>Two words.", constraints, think="auto")["reward"] == 1.0
    assert not score_response("Two words. <think>a b", constraints, think="auto")["format_ok"]


# -- the trainer's generation ----------------------------------------------------------------------------------

def test_the_trainers_batched_generation_equals_one_by_one_in_chunks_and_stops_at_every_eos(llama):
    import contextlib

    model, tokenizer = load_policy(llama)
    prompts = [chat_prompt(tokenizer, p if isinstance(p, str) else p[-1]["content"]) for p in PROMPTS]

    def run_(batch, subset=prompts):
        return trainer_generate(model, tokenizer, subset, 24, "cpu", contextlib.nullcontext(), sample=False,
                                batch=batch)

    whole, chunked = run_(0), run_(2)
    assert whole[4] == chunked[4] and whole[5] == chunked[5]  # texts and truncation flags
    assert torch.equal(whole[3], chunked[3]) and torch.equal(whole[0], chunked[0])
    assert [run_(0, [p])[4][0] for p in prompts] == whole[4]
    # The tokenizer's end of turn stops a response too, not only the generation config's: make it a token that
    # this model writes often (the config still names <|im_end|>).
    responses = [ids[:n] for ids, n in zip(whole[0][:, whole[2]:].tolist(), whole[3].sum(-1).tolist())]
    often = Counter(t for ids in responses for t in ids).most_common(1)[0][0]
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(often)
    stopped = run_(0)
    lengths = stopped[3].sum(-1).tolist()
    assert sum(often in ids for ids in responses) >= 2
    for before, ids, n in zip(responses, stopped[0][:, stopped[2]:].tolist(), lengths):
        if often in before:  # greedy: the same tokens up to there, and an end at its first occurrence
            assert n == before.index(often) + 1 and ids[:n] == before[:n]


# -- GRPO by registry name, with and without LoRA, resumed exactly -----------------------------------------------

def test_a_registry_name_in_train_config_resolves_to_its_folder(llama, data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(registry, "_registered", {**registry._registered, "ifcore-test-llama": llama})
    named = load_config(None, model="ifcore-test-llama", **data)
    paths = resolve_paths(named, progress=False)
    assert paths["model"] == str(llama.resolve())
    by_path = load_config(None, model=str(llama), **data)
    assert run_identity(named, paths)[1] == run_identity(by_path, resolve_paths(by_path, progress=False))[1]
    with pytest.raises(FileNotFoundError, match="no-such-model: not a registry name"):
        resolve_paths(load_config(None, model="no-such-model", **data))
    status, _, err = run_cli(capsys, "train", "--model", "no-such-model", "--output-dir", tmp_path / "r",
                         "--train-data", data["train_data"], "--test-data", data["test_data"])
    assert status == 2 and len(err) == 1 and err[0].startswith("ifcore train: error: no-such-model: not a registry")


RUN = dict(steps=2, prompts_per_step=4, group_size=2, max_new_tokens=8, eval_prompts=2, eval_samples=1,
           eval_every=1, save_every=1, micro_batch=2, lr=1e-2)


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in path.read_text().splitlines()]


def _digests(ckpt: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in ckpt.iterdir()
            if p.suffix in (".safetensors", ".pt")}


@pytest.mark.parametrize("lora_r", [0, 4])
def test_grpo_on_a_llama_without_think_tags_resumes_exactly(lora_r, stopping_llama, data, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_registered", {**registry._registered, "ifcore-test-llama": stopping_llama})
    cfg = load_config(None, **RUN, **data, model="ifcore-test-llama", lora_r=lora_r, lora_targets="q_proj,v_proj",
                      output_dir=str(tmp_path / "run"))
    metrics = train(cfg, progress=False)
    first = _rows(metrics)
    assert [(r["type"], r["step"]) for r in first] == [("eval", 0), ("train", 1), ("eval", 1), ("train", 2),
                                                       ("eval", 2)]
    assert first[1]["kl"] == 0.0  # the first rollouts come from the reference itself
    assert all(r["reward_std"] > 0 and r["grad_norm"] > 0 for r in first if r["type"] == "train")  # it learns
    ckpts = tmp_path / "run" / "checkpoints"
    saved = _digests(ckpts / "step_000002")
    if lora_r:  # the adapters only; the base model's folder is what the reference reads
        assert set(saved) == {"adapter_model.safetensors", "optimizer.pt"}
        adapters = json.loads((ckpts / "step_000002" / "adapter_config.json").read_text())
        assert adapters["r"] == 4 and sorted(adapters["target_modules"]) == ["q_proj", "v_proj"]
    else:
        assert "model.safetensors" in saved
    # A run killed after the step-1 checkpoint: the rerun resumes from it and ends where the first one did.
    shutil.rmtree(ckpts / "step_000002")
    assert _rows(train(cfg, progress=False)) == first
    assert _digests(ckpts / "step_000002") == saved


def test_lora_trains_the_adapters_only_and_its_reference_is_the_base(llama):
    from ifcore.train.model import load_lora_policy

    policy, _, reference = load_lora_policy(llama, "cpu", 4, 8.0, "all-linear", seed=0)
    base, _ = load_policy(llama)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        for p in policy.parameters():  # move the adapters off zero: the policy now differs from the base
            if p.requires_grad:
                p.add_(0.05)
        ids = torch.tensor([[5, 6, 7, 8]])
        assert torch.equal(reference(input_ids=ids).logits, base(input_ids=ids).logits)
        assert not torch.allclose(policy(input_ids=ids).logits, base(input_ids=ids).logits)
    assert policy.base_model.model.model.layers[0].self_attn.q_proj.disable_adapters is False  # switched back on


# -- the command line -------------------------------------------------------------------------------------------

ERRORS = {
    "generate, missing input": (lambda t, m: ["generate", "--model", m, "--input", t / "nope.jsonl", "--output",
                                              t / "o.jsonl"], "nope.jsonl: no such file"),
    "generate, unknown model": (lambda t, m: ["generate", "--model", "no-org/no-model", "--input", t / "in.jsonl",
                                              "--output", t / "o.jsonl"], "no-org/no-model: not a registry name"),
    "generate, a bad row": (lambda t, m: ["generate", "--model", m, "--input", write_rows(t / "bad.jsonl", [{"x": 1}]),
                                          "--output", t / "o.jsonl"], "bad.jsonl: row 1: needs `prompt`"),
    "generate, max-new-tokens 0": (lambda t, m: ["generate", "--model", m, "--input", t / "in.jsonl", "--output",
                                                 t / "o.jsonl", "--max-new-tokens", "0"], "--max-new-tokens: must be"),
    "generate, top-p 2": (lambda t, m: ["generate", "--model", m, "--input", t / "in.jsonl", "--output", t / "o.jsonl",
                                        "--top-p", "2"], "--top-p: must be in (0, 1]"),
    "generate, temperature nan": (lambda t, m: ["generate", "--model", m, "--input", t / "in.jsonl", "--output",
                                                t / "o.jsonl", "--temperature", "nan"], "--temperature"),
    "eval, neither responses nor model": (lambda t, m: ["eval", "ifeval"], "--responses FILE"),
    "eval, both responses and model": (lambda t, m: ["eval", "ifeval", "--model", m, "--responses", t / "in.jsonl"],
                                       "one of them"),
    "eval, a subset of responses": (lambda t, m: ["eval", "ifeval", "--responses", t / "in.jsonl", "--limit", "3"],
                                    "--limit"),
    "eval, an empty subset": (lambda t, m: ["eval", "ifbench", "--model", m, "--limit", "0"], "--limit"),
    "serve, unknown model": (lambda t, m: ["serve", "--model", "no-org/no-model"], "no-org/no-model: not a registry"),
    "bench generate, unknown model": (lambda t, m: ["bench", "generate", "--model", "no-org/no-model", "--no-server"],
                                      "no-org/no-model: not a registry"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_an_inference_error_is_one_line_with_exit_status_2(case, llama, tmp_path, capsys):
    write_rows(tmp_path / "in.jsonl", [{"prompt": "dog"}])
    argv, expected = ERRORS[case]
    status, out, err = run_cli(capsys, *argv(tmp_path, llama))
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"ifcore {case.split()[0].rstrip(',')}: error: ") and expected in err[0], err[0]


def test_generate_completes_rows_in_process_and_through_a_server(llama, tmp_path, capsys, fake_server):
    rows = [{"id": 1, "prompt": "dog"}, {"id": 2, "messages": PROMPTS[-1]}, {"id": 3, "prompt": "Write a story."}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    status, _, err = run_cli(capsys, "generate", "--model", llama, "--input", src, "--output", tmp_path / "out.jsonl",
                         "--max-new-tokens", "8", "--batch-size", "2")
    assert status == 0 and err[-1] == f"{tmp_path / 'out.jsonl'}: 3 rows"
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [{k: v for k, v in r.items() if k != "response"} for r in out] == rows
    expected = generate(llama, ["dog", PROMPTS[-1], "Write a story."], GenParams(max_new_tokens=8), cache=False,
                        progress=False)
    assert [r["response"] for r in out] == expected
    # The same rows through an OpenAI-compatible server (here one that answers with the prompt reversed).
    status, _, _ = run_cli(capsys, "generate", "--model", "m", "--backend", "openai", "--base-url", fake_server,
                       "--api-key", "sk-test", "--input", src, "--output", tmp_path / "served.jsonl", "--no-cache")
    assert status == 0
    assert [r["response"] for r in read_jsonl(tmp_path / "served.jsonl")] == [
        "dog"[::-1], PROMPTS[-1][-1]["content"][::-1], "Write a story."[::-1]]


def test_eval_with_a_model_scores_a_seeded_subset_alone_as_the_full_benchmark_would(tmp_path, capsys, fake_server):
    common = ["--backend", "openai", "--base-url", fake_server, "--model", "m", "--limit", "5", "--subset-seed", "3"]
    status, out, _ = run_cli(capsys, "eval", "ifeval", *common, "--output-dir", tmp_path / "a")
    assert status == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert out.splitlines()[2] == f"  strict{100 * summary['strict']['prompt_level']:13.2f}" \
                                  f"{100 * summary['strict']['instruction_level']:13.2f}"
    assert summary["strict"]["prompts"] == 5 and summary["generation"]["prompts"] == 5
    assert summary["generation"]["of"] == 541 and summary["generation"]["subset_seed"] == 3
    responses = read_jsonl(tmp_path / "a" / "responses.jsonl")
    everything = [r["prompt"] for r in read_jsonl(ifeval.PROMPTS)]
    picked = [everything.index(r["prompt"]) for r in responses]
    assert picked == sorted(picked) and all(r["response"] == r["prompt"][::-1] for r in responses)
    # The same responses scored by the full benchmark: the subset's records are its records for those prompts;
    # the 536 prompts without a response are scored as failed there, and the status says so.
    status, _, _ = run_cli(capsys, "eval", "ifeval", "--responses", tmp_path / "a" / "responses.jsonl", "--output-dir",
                       tmp_path / "full")
    assert status == 1
    status, _, _ = run_cli(capsys, "eval", "ifeval", "--responses", tmp_path / "a" / "responses.jsonl", "--output-dir",
                           tmp_path / "again", "--allow-missing")  # re-scoring a --limit run's own responses
    assert status == 0 and json.loads((tmp_path / "again" / "summary.json").read_text())["strict"] == summary["strict"]
    for mode in ("strict", "loose"):
        full = {r["prompt"]: r for r in read_jsonl(tmp_path / "full" / f"eval_results_{mode}.jsonl")}
        subset = read_jsonl(tmp_path / "a" / f"eval_results_{mode}.jsonl")
        assert subset == [full[r["prompt"]] for r in responses]
        assert summary[mode]["prompts_followed"] == sum(r["follow_all_instructions"] for r in subset)
    # Another seed, another subset; ScopeIF's subset is scored alone too.
    run_cli(capsys, "eval", "ifeval", *common[:-1], "4", "--output-dir", tmp_path / "b")
    assert read_jsonl(tmp_path / "b" / "responses.jsonl") != responses
    status, out, _ = run_cli(capsys, "eval", "scopeif", *common, "--output-dir", tmp_path / "s")
    assert status == 0 and out.startswith("scopeif: 5 instances scored")
    assert len(read_jsonl(tmp_path / "s" / "responses.jsonl")) == 5


def test_eval_with_a_local_model_counts_the_responses_cut_at_max_new_tokens(llama, tmp_path, capsys):
    status, out, err = run_cli(capsys, "eval", "ifbench", "--model", llama, "--limit", "2", "--max-new-tokens", "6",
                               "--output-dir", tmp_path)
    generation = json.loads((tmp_path / "summary.json").read_text())["generation"]
    # the same printer as --responses: percents, units in the header; and a warning that names the cap
    assert out.startswith("ifbench: 2 prompts, ") and out.splitlines()[1] == "       %       prompt  instruction"
    n = generation["reached_max_new_tokens"]
    assert f"warning: {n} of 2 responses ({50 * n:.0f} %) reached --max-new-tokens 6" in "\n".join(err)
    assert status == 0 and generation["model"] == registry.model_id(llama)
    assert generation["params"]["max_new_tokens"] == 6 and generation["params"]["temperature"] == 0.0
    # A random tiny model rarely stops by itself within 6 tokens; each cut completion is counted.
    cut = [n for _, n in generate(llama, [r["prompt"] for r in read_jsonl(tmp_path / "responses.jsonl")],
                                  GenParams(max_new_tokens=6), progress=False, with_tokens=True)]
    assert generation["reached_max_new_tokens"] == sum(n >= 6 for n in cut) > 0


# -- the GPU check, run on the CPU with tiny settings -------------------------------------------------------------

def test_the_gpu_check_script_runs_on_the_cpu_with_tiny_settings(llama, tmp_path):
    out = tmp_path / "check.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--generation-grpo", "--device", "cpu",
           "--model", str(llama),
           "--output", str(out), "--batch-sizes", "1,3", "--gen-tokens", "4", "--steps", "2", "--prompts-per-step",
           "2", "--group-size", "2", "--max-new-tokens", "8", "--eval-prompts", "2", "--lr", "1e-3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["model"] == registry.model_id(llama)
    assert [g["batch"] for g in report["generate"]] == [1, 3]
    assert all(0 < g["tokens"] <= 4 * g["batch"] and g["tokens_per_s"] > 0 for g in report["generate"])
    grpo = report["grpo"]
    assert len(grpo["step_seconds"]) == 2 and grpo["seconds_per_step_mean"] > 0
    assert [e["step"] for e in grpo["eval"]] == [0, 2] and grpo["config"]["model"] == str(llama)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, env={"CUDA_VISIBLE_DEVICES": "", "PATH": ""})
    assert done.returncode == 2 and "no CUDA device" in done.stderr


@pytest.mark.slow
def test_the_gpu_calibration_runs_dry_on_the_cpu(tmp_path):
    """scripts/gpu_check.py's calibration (the wheel's Actor against the launch planner, the plug-ins' hook and
    CUDA, the baseline, the embedded GRPO) at tiny shapes on the CPU: one table, the same rows as JSON."""
    out = tmp_path / "calibration.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry", "--output", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["check"]: r for r in report["rows"]}
    table = done.stdout[done.stdout.index("check "):].splitlines()
    assert len(table) == len(rows) + 2 and table[-1] == f"written: {out}"  # header, one line per row, the path
    assert report["dry"] and rows["install() CUDA initialized"]["measured"] is False  # the hook leaves CUDA alone
    assert report["install"]["gpu_modules"] == [] and len(report["install"]["patched"]) > 0
    assert rows["baseline: random-weight GRPO step"]["measured"] > 0
    assert report["embedded_grpo"]["steps"] == 3 and report["embedded_grpo"]["device"] == "cpu"
    for name in ("Qwen2.5-0.5B-Instruct", "Qwen3-4B"):
        actor = report["actor"][f"Qwen/{name}"]
        seen, terms = actor["measured"], actor["plan"]["terms"]
        assert all(rows[f"actor {name} entropy={m}"]["planned"] > 0 for m in ("off", "compiled", "eager"))
        # eager: the entropy's fp32 softmax is kept for the backward, exactly the planner's entropy term
        assert seen["eager"]["mib"] - seen["off"]["mib"] == pytest.approx(terms["entropy"] * 1024, abs=0.15)
        assert seen["off"]["mib"] <= seen["compiled"]["mib"] <= seen["eager"]["mib"]  # compiled keeps less
        assert actor["plan"]["tokens_per_gpu"] == 512


def test_the_gpu_check_with_random_weights_needs_no_ifcore_and_runs_on_the_cpu(tmp_path):
    # A bare CUDA machine has torch and transformers but not ifcore's other dependencies: the script alone, run
    # isolated (-I: no PYTHONPATH, no current directory), imports nothing of ifcore. Two of SmolLM2's 30 layers.
    out = tmp_path / "check.json"
    argv = ["gpu_check.py", "--random-weights", "--device", "cpu", "--layers", "2", "--output", str(out),
            "--batch-sizes", "1,3", "--gen-tokens", "4", "--steps", "1", "--prompts-per-step", "1", "--group-size",
            "2", "--max-new-tokens", "4", "--lr", "1e-4"]
    code = ("import runpy, sys\n"
            f"sys.argv = {argv!r}\n"
            "try:\n"
            f"    runpy.run_path({str(ROOT / 'scripts' / 'gpu_check.py')!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ifcore'))\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]"
    report = json.loads(out.read_text())
    assert report["weights"] == "random" and "SmolLM2-135M's shape (2 layers" in report["model"]
    assert [(g["batch"], g["tokens"]) for g in report["generate"]] == [(1, 4), (3, 12)]  # every one to the limit
    assert len(report["grpo"]["step_seconds"]) == 1 and report["grpo"]["seconds_per_step_mean"] > 0
    assert "stand-in" in report["grpo"]["config"]["reward"]


# -- SmolLM2 itself (slow: it loads 135M parameters) --------------------------------------------------------------

@pytest.mark.slow
def test_grpo_trains_smollm2_by_name_with_lora(smollm2, data, tmp_path, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(USER_CACHE))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    assert not has_think_switch(tokenizer) and tokenizer.pad_token_id == tokenizer.eos_token_id  # <|im_end|>
    cfg = load_config(None, **{**RUN, "steps": 1, "max_new_tokens": 16, "lr": 1e-4}, **data, model="smollm2-135m",
                      lora_r=4, output_dir=str(tmp_path / "run"))
    rows = _rows(train(cfg, progress=False))
    assert [(r["type"], r["step"]) for r in rows] == [("eval", 0), ("train", 1), ("eval", 1)]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["identity"]["model"] == str(smollm2)
    assert 0 < rows[1]["response_len"] <= 16 and rows[1]["kl"] == 0.0
