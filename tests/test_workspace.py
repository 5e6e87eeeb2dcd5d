"""The workspace contract: the two set-up files agree, CI runs `make test`, the core stays light."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += [d for d in extra if not d.startswith("ifcore[")]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(set(p for p in pip if p != "-e .")) == sorted(set(declared))
    assert any(d.startswith("torch==2.13.0") for d in project["optional-dependencies"]["train"])
    gpu = project["optional-dependencies"]["gpu"]
    assert {re.split("[=<>]", d)[0] for d in gpu} == {"openrlhf", "vllm", "deepspeed"}
    cpu_path = project["optional-dependencies"]["cpu"]
    assert not any("gpu" in d for d in cpu_path)  # the CPU stack never pulls the GPU extra


def test_ci_runs_make_test_and_the_readme_opens_with_make_install():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```", 2)[1].strip().splitlines()
    assert first_block[0].startswith("make install")  # first, before the slow ones
    assert [line.split()[1] for line in first_block] == ["install", "lab", "test", "reproduce"]


def test_the_core_imports_neither_torch_nor_the_trainer():
    # (The OpenRLHF adapter returns torch tensors, as OpenRLHF expects: it imports torch, never the trainer.)
    code = ("import sys, ifcore, ifcore.rewards, ifcore.advantages, ifcore.synth, ifcore.integrations.verl; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'ifcore.train', 'spacy'))]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_quick_start_commands_are_ones_the_cli_accepts(tmp_path, monkeypatch, capsys):
    """Every `ifcore` line of the README's quick start parses (the first verify runs for real, on its own input)."""
    import shlex

    from ifcore import cli

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    jsonl = block.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    commands = [shlex.split(line.split("  #")[0]) for line in lines if line.startswith("ifcore ")]
    assert [c[1] for c in commands] == ["verify", "eval", "train", "runs", "compare"]
    (tmp_path / "runs" / "quickstart").mkdir(parents=True)
    (tmp_path / "runs" / "quickstart" / "bullets.jsonl").write_text(jsonl + "\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(commands[0][1:]) == 0
    assert '"satisfied": false' in capsys.readouterr().out
    parsed = []
    monkeypatch.setattr(cli, "_run", lambda args: parsed.append(args.command) or 0)
    for argv in commands[1:]:
        assert cli.main(argv[1:]) == 0, argv
    assert parsed == ["eval", "train", "runs", "compare"]
