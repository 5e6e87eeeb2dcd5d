"""The command line's contract: a bad file, line or config key is one line on stderr naming it, with exit
status 2 (nothing done) or 1 (done, some lines bad); never a traceback. In-process through ifcore.cli.main."""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import run_cli

import ifcore
from ifcore.bench import ifeval
from ifcore.jsonl import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
GOOD = json.dumps({"response": "One two three.", "constraints": [{"scope": [], "target": {"count": "word"},
                                                                   "range": {"min": 1}}]})




def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


FIRST_PROMPTS = [r["prompt"] for r in read_jsonl(ifeval.PROMPTS, ("prompt",))[:2]]  # of IFEval


def scopeif_files(tmp_path):
    test = [{"id": i, "prompt": f"p{i}", "constraints": [], "targets": []} for i in (7, 8)]
    (tmp_path / "test.json").write_text(json.dumps(test))
    write(tmp_path / "f.jsonl", json.dumps({"instruction_id": 7, "constraint_index": 0, "schema": None}))
    return ["--test", tmp_path / "test.json", "--formalized", tmp_path / "f.jsonl"]


# Each case: (argv built from tmp_path, what the one stderr line must contain).
ERRORS = {
    "verify, missing input": (lambda t: ["verify", "--input", t / "nope.jsonl"], "nope.jsonl: No such file"),
    "verify, output in a missing folder": (
        lambda t: ["verify", "--input", write(t / "in.jsonl", GOOD), "--output", t / "no" / "out.jsonl"],
        "out.jsonl: No such file"),
    "verify, alpha not a positive number": (
        lambda t: ["verify", "--input", write(t / "in.jsonl", GOOD), "--alpha", "nan"], "alpha"),
    "validate-dataset, missing file": (lambda t: ["validate-dataset", t / "nope.jsonl"], "nope.jsonl: No such file"),
    "train, missing config": (lambda t: ["train", "--config", t / "nope.yaml"], "nope.yaml: No such file"),
    "train, broken YAML": (lambda t: ["train", "--config", write(t / "c.yaml", "steps: 3", "lr: [1")], "c.yaml:3"),
    "train, broken JSON": (lambda t: ["train", "--config", write(t / "c.json", '{"steps": 3,')], "c.json:2"),
    "train, unknown key": (lambda t: ["train", "--config", write(t / "c.yaml", "stepz: 3")], "stepz"),
    "train, bad value": (lambda t: ["train", "--config", write(t / "c.yaml", "group_size: 1")], "group_size"),
    "train, bad value in a flag": (lambda t: ["train", "--steps", "-1"], "steps"),
    "eval, a bad letter seed": (lambda t: ["eval", "ifeval", "--responses", t / "r.jsonl", "--letter-seed", "x"],
                                "--letter-seed"),
    "eval, missing responses": (lambda t: ["eval", "ifbench", "--responses", t / "nope.jsonl"], "nope.jsonl"),
    "eval, empty responses": (lambda t: ["eval", "ifeval", "--responses", write(t / "r.jsonl")],
                              "r.jsonl: no responses"),
    "eval, blank lines only": (lambda t: ["eval", "ifeval", "--responses", write(t / "r.jsonl", "", " ")],
                               "r.jsonl: no responses"),
    "eval, a JSON array line": (
        lambda t: ["eval", "ifeval", "--responses", write(t / "r.jsonl", json.dumps({"prompt": "p", "response": "r"}),
                                                          "[1, 2]")], "r.jsonl:2: expected a JSON object"),
    "eval, a prompt that is no string": (
        lambda t: ["eval", "ifeval", "--responses", write(t / "r.jsonl", json.dumps({"prompt": 3, "response": "r"}))],
        'r.jsonl:1: "prompt": expected a string'),
    "eval, a response that is no string": (
        lambda t: ["eval", "ifbench", "--responses", write(t / "r.jsonl", json.dumps({"prompt": "p", "response": 1}))],
        'r.jsonl:1: "response": expected a string'),
    "eval, a non-UTF-8 line": (
        lambda t: ["eval", "ifeval", "--responses", t / "r.jsonl"], "r.jsonl:1: not UTF-8"),
    "eval, a duplicated prompt": (
        lambda t: ["eval", "ifeval", "--output-dir", t, "--responses", write(t / "r.jsonl", *(
            json.dumps({"prompt": p, "response": "r"}) for p in [*FIRST_PROMPTS, " \n" + FIRST_PROMPTS[0]]))],
        "r.jsonl:3: a second response to the prompt of line 1"),
    "eval scopeif, a duplicated instance": (
        lambda t: ["eval", "scopeif", "--output-dir", t, *scopeif_files(t), "--responses", write(
            t / "r.jsonl", json.dumps({"id": 7, "response": "a"}), json.dumps({"prompt": "p7", "response": "b"}))],
        "r.jsonl:2: a second response to the instance of line 1"),
    "eval scopeif, empty responses": (
        lambda t: ["eval", "scopeif", "--output-dir", t, *scopeif_files(t), "--responses", write(t / "r.jsonl")],
        "r.jsonl: no responses"),
    "eval scopeif, a prompt that is no string": (
        lambda t: ["eval", "scopeif", "--output-dir", t, *scopeif_files(t), "--responses", write(
            t / "r.jsonl", json.dumps({"prompt": ["p7"], "response": "a"}))], 'r.jsonl:1: "prompt": expected a string'),
    "eval scopeif, a JSON array line": (
        lambda t: ["eval", "scopeif", "--output-dir", t, *scopeif_files(t), "--responses", write(t / "r.jsonl", "[]")],
        "r.jsonl:1: expected a JSON object"),
    "eval scopeif, a bad formalization line": (
        lambda t: ["eval", "scopeif", "--output-dir", t, "--test", scopeif_files(t)[1], "--formalized",
                   write(t / "f.jsonl", "{}", "{oops"), "--responses", write(t / "r.jsonl", "{}")],
        "f.jsonl:1: missing"),
    "labels, missing input": (lambda t: ["labels", "ifeval", "--input", t / "nope.jsonl"], "nope.jsonl: No such file"),
    "labels, empty input": (lambda t: ["labels", "ifeval", "--input", write(t / "rows.jsonl")], "rows.jsonl: no rows"),
    "synth, output folder is a file": (lambda t: ["synth", "--output-dir", write(t / "f.txt", "x"), "--train", "2",
                                                  "--test", "1"], "f.txt"),
    "bench ifeval, missing responses": (lambda t: ["bench", "ifeval", "--responses", t / "nope.jsonl"], "nope.jsonl"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_an_error_is_one_line_naming_the_file_and_exit_status_2(case, tmp_path, capsys, monkeypatch):
    argv, expected = ERRORS[case]
    if case.startswith("train"):  # these must stop before training; should one not, it fails here, fast
        from ifcore.train import grpo

        monkeypatch.setattr(grpo, "train", lambda config: pytest.fail(f"trained with {config}"))
    (tmp_path / "r.jsonl").write_bytes(b'{"prompt": "p", "response": "caf\xe9"}\n')  # overwritten by most cases
    status, out, err = run_cli(capsys, *argv(tmp_path))
    command = "eval" if case.startswith("eval") else case.split(",")[0].split()[0]
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"ifcore {command}: error: ") and expected in err[0], err[0]


def test_verify_answers_every_line_and_summarizes(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join([GOOD.encode(), b"{not json", b"[1]", b'{"response": "caf\xe9", "constraints": []}',
                                b"", GOOD.encode()]) + b"\n")
    status, out, err = run_cli(capsys, "verify", "--input", src, "--output", tmp_path / "out.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert status == 1 and len(rows) == 6  # output line N answers input line N, the blank line included
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [("error" in r) for r in rows] == [False, True, True, False, True, False]
    assert "line 2" in rows[1]["error"] and "line 3" in rows[2]["error"] and "line 4" in rows[3]["warning"]
    assert rows[4]["error"] == "line 5: blank line"
    assert err == ["6 lines: 3 ok, 3 errors"]
    status, out, err = run_cli(capsys, "verify", "--input", write(tmp_path / "ok.jsonl", GOOD))
    assert status == 0 and json.loads(out)["ila"] == 1.0 and err == ["1 line: 1 ok, 0 errors"]


def test_verify_echoes_ids_and_reads_a_shared_constraint_set(tmp_path, capsys):
    words = {"id": "short", "scope": [], "target": {"count": "word"}, "range": {"max": 3}}
    shared = write(tmp_path / "c.json", json.dumps([words, {**words, "id": "long", "range": {"min": 3}}]))
    src = write(tmp_path / "in.jsonl", json.dumps({"id": "a", "response": "Two words"}),
                json.dumps({"id": 2, "response": "one two three four"}),
                json.dumps({"id": "c", "response": "x", "constraints": [words]}))
    status, out, err = run_cli(capsys, "verify", "--input", src, "--constraints", shared)
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 1 and [r.get("id") for r in rows] == ["a", 2, "c"]
    assert [[(v["id"], v["satisfied"]) for v in r["verdicts"]] for r in rows[:2]] == [
        [("short", True), ("long", False)], [("short", False), ("long", True)]]
    assert "given on the line and by --constraints" in rows[2]["error"]  # one way or the other, never both
    jsonl = write(tmp_path / "c.jsonl", json.dumps(words))  # one constraint per line works too
    status, out, _ = run_cli(capsys, "verify", "--input", src, "--constraints", jsonl)
    assert [v["id"] for v in json.loads(out.splitlines()[0])["verdicts"]] == ["short"]


def test_verify_refuses_a_pretty_printed_document_and_warns_on_empty_input(tmp_path, capsys):
    pretty = write(tmp_path / "p.json", json.dumps([json.loads(GOOD)], indent=2))
    status, out, err = run_cli(capsys, "verify", "--input", pretty)
    assert status == 2 and out == "" and "pretty-printed JSON document, not JSON Lines" in err[0]
    status, out, err = run_cli(capsys, "verify", "--input", write(tmp_path / "empty.jsonl"))
    assert status == 0 and out == "" and "is empty: nothing verified" in err[0]


def test_verify_into_a_reader_that_goes_away_is_quiet(tmp_path):
    src = write(tmp_path / "many.jsonl", *[GOOD] * 2000)
    head = subprocess.run(f"{sys.executable} -m ifcore verify --input {src} | head -1", shell=True,
                          capture_output=True, text=True, cwd=ROOT, executable="/bin/bash")
    assert json.loads(head.stdout)["line"] == 1 and "Broken pipe" not in head.stderr and "Error" not in head.stderr


def test_validate_dataset_names_every_bad_line_and_refuses_an_empty_file(tmp_path, capsys):
    label = json.dumps({"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": 1}}]})
    src = write(tmp_path / "d.jsonl", json.dumps({"prompt": "p", "label": label}), "[1]", "{oops",
                json.dumps({"prompt": "p", "label": label}))
    status, out, err = run_cli(capsys, "validate-dataset", src)
    assert status == 1 and [e.split(":")[0] for e in err] == ["line 2", "line 3"]
    assert "4 samples, 2 errors" in out
    status, out, err = run_cli(capsys, "validate-dataset", write(tmp_path / "empty.jsonl"))
    assert status == 1 and err == ["no samples (the file is empty)"]


def test_labels_names_each_bad_row_and_writes_the_others(tmp_path, capsys):
    row = {"prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    src = write(tmp_path / "rows.jsonl", json.dumps({**row, "instruction_id_list": ["x:y"]}), "[]",
                json.dumps({**row, "instruction_id_list": 3}), json.dumps(row))
    status, out, err = run_cli(capsys, "labels", "ifeval", "--input", src, "--output", tmp_path / "out.jsonl")
    assert status == 1 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 1
    assert all(e.startswith(f"ifcore labels: error: {src}:{n}: ") for n, e in zip((1, 2, 3), err))
    assert "unknown instruction id 'x:y'" in err[0]
    assert "1 of 1 rows written" in err[3] and "3 bad rows" in err[3] and len(err) == 4


@pytest.mark.parametrize("choice, kept", [("first", "one"), ("last", "two")])
def test_eval_keeps_the_chosen_duplicate(choice, kept, tmp_path, capsys):
    prompt = FIRST_PROMPTS[0]
    src = write(tmp_path / "r.jsonl", json.dumps({"prompt": prompt, "response": "one"}),
                json.dumps({"prompt": prompt + " ", "response": "two"}))
    status, _, _ = run_cli(capsys, "eval", "ifeval", "--responses", src, "--output-dir", tmp_path, "--on-duplicate", choice,
                           "--allow-missing")
    strict = json.loads((tmp_path / "eval_results_strict.jsonl").read_text().splitlines()[0])
    assert status == 0 and strict["response"] == kept
    assert json.loads((tmp_path / "summary.json").read_text())["unmatched_responses"] == 0

    src = write(tmp_path / "s.jsonl", json.dumps({"id": 7, "response": "one"}), json.dumps({"id": 8, "response": "x"}),
                json.dumps({"prompt": "p7", "response": "two"}))
    status, out, _ = run_cli(capsys, "eval", "scopeif", *scopeif_files(tmp_path), "--responses", src, "--output-dir",
                         tmp_path, "--on-duplicate", choice, "--allow-missing")
    verdicts = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    assert status == 0 and out.startswith("scopeif: 2 instances scored")  # not 3: the duplicate counts once
    assert [(v["id"], v["response"]) for v in verdicts] == [(7, kept), (8, "x")]


def test_train_help_lists_every_config_field_with_its_default(capsys, monkeypatch):
    from dataclasses import MISSING, fields

    from ifcore.train.grpo import TrainConfig

    monkeypatch.setenv("COLUMNS", "1000")  # argparse would wrap the help, at hyphens too
    status, out, _ = run_cli(capsys, "train", "--help")
    assert status == 0
    # One block per option, from its "  --flag" line to the next.
    blocks = {b.split()[0].rstrip(","): " ".join(b.split()) for b in re.split(r"\n(?=  --)", out)}
    for f in fields(TrainConfig):
        block = blocks["--" + f.name.replace("_", "-")]
        assert f.metadata["help"] in block, f.name
        default = f.default_factory() if f.default is MISSING else f.default
        if default is not None:
            assert f"(default: {default if isinstance(default, str) else json.dumps(default)})" in block, f.name
    assert blocks["--think"].startswith("--think, --no-think") and "--config" in blocks


def test_train_precedence_is_defaults_then_config_then_flags(tmp_path, capsys, monkeypatch):
    from ifcore.train import grpo

    seen = []
    monkeypatch.setattr(grpo, "train", seen.append)
    config = write(tmp_path / "c.yaml", "steps: 5", "lr: 0.01", "warm_start: {steps: 3}")
    status, _, err = run_cli(capsys, "train", "--config", config, "--steps", "7", "--no-think",
                         "--warm-start", '{"steps": 4}', "--output-dir", tmp_path / "run")
    assert status == 0 and err == []
    (cfg,) = seen
    assert (cfg.steps, cfg.lr, cfg.think, cfg.warm_start, cfg.output_dir) == (7, 0.01, False, {"steps": 4},
                                                                             str(tmp_path / "run"))
    assert cfg.seed == grpo.TrainConfig().seed and cfg.reward == grpo.TrainConfig().reward
    status, _, err = run_cli(capsys, "train", "--warm-start", "[1]")
    assert status == 2 and "expected a JSON object" in err[-1]


def test_synth_output_dir_and_its_hidden_old_spelling(tmp_path, capsys):
    for flag in ("--output-dir", "--out"):
        status, out, _ = run_cli(capsys, "synth", flag, tmp_path / flag, "--train", "4", "--test", "2")
        assert status == 0 and json.loads(out)["instructions"] == 4
        assert (tmp_path / flag / "train.jsonl").exists()
    status, out, _ = run_cli(capsys, "synth", "--help")
    assert "--output-dir" in out and "--out " not in out and "--out\n" not in out


def test_version_is_the_package_version(capsys):
    status, out, _ = run_cli(capsys, "--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert status == 0 and out.strip() == f"ifcore {version}" and ifcore.__version__ == version


def test_installed_command_gives_no_traceback_and_loads_no_torch(tmp_path):
    ifcore_cmd = [sys.executable, "-m", "ifcore"]
    done = subprocess.run(ifcore_cmd + ["--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ifcore ") and not done.stderr
    done = subprocess.run(ifcore_cmd + ["verify", "--input", str(tmp_path / "nope.jsonl")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.splitlines() == [f"ifcore verify: error: {tmp_path / 'nope.jsonl'}: No such file or directory"]
    # `ifcore --help` and `ifcore verify` run on reward workers: neither may load torch.
    code = ("import sys; from ifcore.cli import main\n"
            "for argv in (['--help'], ['verify', '--input', sys.argv[1]]):\n"
            "    try: main(argv)\n"
            "    except SystemExit: pass\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code, str(write(tmp_path / "in.jsonl", GOOD))], capture_output=True,
                          text=True, timeout=120)
    assert done.stderr.splitlines()[-1] == "False"


GPT4 = ROOT / "tests" / "data" / "ifeval" / "input_response_data_gpt4_20231107_145030.jsonl"


def fake_run(path: Path, reward: str, seed: int, csr: float, steps: int = 4, finished: bool = True) -> Path:
    """A training run folder as `ifcore train` leaves it, reduced to what `runs` and `compare` read."""
    path.mkdir(parents=True)
    identity = {"reward": reward, "seed": seed, "steps": steps, "lr": 5e-4, "model_sha256": f"{seed}"}
    (path / "config.json").write_text(json.dumps({"key": "k", "identity": identity, "paths": {}}))
    rows = [{"type": "train", "step": s} for s in range(1, steps + 1 if finished else 2)]
    rows.append({"type": "eval", "step": rows[-1]["step"], "eval_isr": csr / 2, "eval_csr": csr})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        (path / "checkpoints" / f"step_{steps:06d}").mkdir(parents=True)
    return path


def test_runs_lists_training_runs_and_eval_outputs_with_what_differs(tmp_path, capsys):
    fake_run(tmp_path / "a" / "ila-seed0", "ila", 0, 0.5)
    fake_run(tmp_path / "a" / "cla-seed0", "cla", 0, 0.25, finished=False)
    gpt4 = GPT4
    assert run_cli(capsys, "eval", "ifeval", "--responses", gpt4, "--output-dir", tmp_path / "e")[0] == 0
    status, out, _ = run_cli(capsys, "runs", tmp_path)
    lines = out.splitlines()
    assert status == 0 and len(lines) == 4
    cla, ila, ev = (next(ln for ln in lines if key in ln) for key in ("cla-seed0", "ila-seed0", "/e "))
    assert "step 1 of 4" in cla and 'reward="cla"' in cla and "CSR 0.250 at step 1" in cla
    assert "finished" in ila and "lr=0.0005" in ila and ila.rstrip().endswith('reward="ila"')  # differs: reward only
    assert "P-S 76.89 % I-S 83.57 %" in ev and "over 541" in ev and " nan " not in ev.lower()
    assert "--responses" in ev and re.search(r" [0-9a-f]{10}(\+dirty)? ", ev)  # no model; the scoring commit
    assert run_cli(capsys, "runs", tmp_path / "nothing-here")[0] == 2


def test_runs_tells_apart_two_evaluations_of_one_model_that_differ_in_max_new_tokens(tmp_path, capsys):
    for name, tokens in (("short", 128), ("long", 256)):
        assert run_cli(capsys, "eval", "ifeval", "--responses", GPT4, "--output-dir", tmp_path / name)[0] == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        summary["generation"] = {"model": "smollm2-135m", "params": {"max_new_tokens": tokens, "temperature": 0.0},
                                 "prompts": 541, "of": 541, "subset_seed": None}  # as `--model` writes it
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    status, out, _ = run_cli(capsys, "runs", tmp_path)
    short, long = (next(ln for ln in out.splitlines() if f"/{n} " in ln) for n in ("short", "long"))
    assert "smollm2-135m" in short and "max_new_tokens=128" in short
    assert short.rstrip().endswith("max_new_tokens=128") and long.rstrip().endswith("max_new_tokens=256")
    assert run_cli(capsys, "runs", tmp_path / "nothing-here")[0] == 2


def test_compare_decides_arms_over_seeds_with_holm(tmp_path, capsys):
    for seed, (base, better) in enumerate([(0.30, 0.50), (0.35, 0.52), (0.32, 0.49)]):
        fake_run(tmp_path / f"ila-seed{seed}", "ila", seed, base)
        fake_run(tmp_path / f"scopeif-seed{seed}", "scopeif", seed, better)
    status, out, _ = run_cli(capsys, "compare", *[tmp_path / f"ila-seed{s}" for s in range(3)], tmp_path)
    assert status == 0 and 'baseline: reward="ila"' in out and "Holm-adjusted over 2 comparisons" in out
    assert re.search(r'eval_csr reward="scopeif" minus reward="ila" = \+0\.180 .*: positive\.', out)
    status, _, err = run_cli(capsys, "compare", tmp_path / "ila-seed0", tmp_path / "ila-seed1")
    assert status == 2 and "one arm" in err[0]


def test_compare_eval_outputs_pairs_prompts_with_a_corrected_bootstrap(tmp_path, capsys):
    gpt4 = read_jsonl(GPT4)
    worse = write(tmp_path / "worse.jsonl", *[json.dumps({**r, "response": r["response"] if i % 2 else ""})
                                             for i, r in enumerate(gpt4)])
    for name, src in (("base", GPT4), ("worse", worse)):
        run_cli(capsys, "eval", "ifeval", "--responses", src, "--output-dir", tmp_path / name)
    status, out, _ = run_cli(capsys, "compare", tmp_path / "base", tmp_path / "worse")
    assert status == 0 and "4 comparisons, each interval at 98.75% (Bonferroni)" in out
    assert re.search(r"P-S .*worse minus baseline = -\d+\.\d\d points .*541 items\): negative\.", out)
    run_cli(capsys, "eval", "ifeval", "--responses", GPT4, "--output-dir", tmp_path / "same")
    status, out, _ = run_cli(capsys, "compare", tmp_path / "base", tmp_path / "same")
    assert out.count("its sign is not decided") == 4 and out.count("= +0.00 points") == 4


def test_every_option_has_a_help_line_that_shows_its_default(monkeypatch):
    import argparse

    from ifcore import cli

    built = []

    def keep(self, args=None, namespace=None):  # the parser main() builds, before it parses anything
        built.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    with pytest.raises(SystemExit):
        cli.main(["verify"])
    subcommands = next(a for a in built[0]._actions if isinstance(a, argparse._SubParsersAction)).choices
    lacking = [f"{name} {a.option_strings[0]}" for name, sub in subcommands.items() for a in sub._actions
               if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS
               and (not a.help or (a.default not in (None, False, argparse.SUPPRESS) and "default" not in a.help))]
    assert len(subcommands) >= 13 and lacking == []


def test_train_help_lists_every_field_without_loading_torch():
    code = ("import sys\nfrom ifcore import cli\ntry:\n    cli.main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.splitlines()[-1] == "False False"
    assert "--precision" in done.stdout and "--warm-start JSON" in done.stdout and "(default: 30)" in done.stdout


def test_eval_takes_several_benchmarks_and_prints_one_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))  # its completions stay out of the user's cache
    model = ROOT / "tests" / "data" / "tiny_chat_llama"
    status, out, err = run_cli(capsys, "eval", "ifeval", "muldimif", "--model", model, "--limit", 2,
                               "--max-new-tokens", 4, "--output-dir", tmp_path / "out")
    assert status == 0, err
    assert {p.parent.name for p in (tmp_path / "out").glob("*/summary.json")} == {"ifeval", "muldimif"}
    table = out[out.index("    what"):].splitlines()
    assert len(table) == 3 and table[1].split()[:2] == ["ifeval", f"tiny_chat_llama@{table[1].split('@')[1][:16]}"]
    assert "all-pass" in table[2] and "max_new_tokens=4" in table[2]
    status, _, err = run_cli(capsys, "eval", "ifeval", "ifbench", "--responses", GPT4, "--output-dir", tmp_path)
    assert status == 2 and "several benchmarks need --model" in err[0]
