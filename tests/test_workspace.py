"""The workspace contract: the two set-up files agree, CI runs `make test`, the core stays light."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _requirements(lines) -> dict:
    """{name: (extras, specifier, marker)} of requirement strings, names normalized as pip compares them."""
    from packaging.requirements import Requirement

    out = {}
    for line in lines:
        r = Requirement(line)
        out[re.sub(r"[-_.]+", "-", r.name).lower()] = (sorted(r.extras), str(r.specifier), str(r.marker or ""))
    return out


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = list(project["dependencies"])
    for name, extra in extras.items():
        if name != "gpu":  # built in a second pip call (make gpu-env): environment.yml's header says why
            declared += [d for d in extra if not d.startswith("ifcore[")]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(p for p in pip if p != "-e .") == sorted(set(declared))  # no duplicates, same strings
    # versions: one name, one specifier, in every extra and in environment.yml (a name listed twice agrees)
    seen: dict = {}
    for line in declared + pip[1:]:
        for name, spec in _requirements([line]).items():
            assert seen.setdefault(name, spec)[1] == spec[1], f"{name}: {seen[name][1]} and {spec[1]}"
    assert seen["torch"][1] == "==2.13.0" and seen["ray"] == (["default"], "==2.55.0", "")
    gpu = _requirements(extras["gpu"])
    assert set(gpu) == {"openrlhf", "vllm", "deepspeed"} and all(v[1].startswith("==") for v in gpu.values())
    cpu_path = extras["cpu"]
    assert not any("gpu" in d for d in cpu_path)  # the CPU stack never pulls the GPU extra
    assert "make gpu-env PY=python" in (ROOT / "environment.yml").read_text()


def test_the_gpu_pins_are_the_openrlhf_wheels_own():
    """The gpu and cluster extras and `make gpu-env`'s torch and flash-attn pins are those of the openrlhf 0.11.2
    wheel's METADATA (Ray, vLLM through its [vllm] extra, DeepSpeed, flash-attn): pip resolves them together
    (`make gpu-resolve`), and the CPU Ray cluster of the tests is the Ray the jobs run on."""
    import zipfile

    wheels = sorted((ROOT / ".cache" / "openrlhf-0.11.2").glob("openrlhf-0.11.2-*.whl"))
    if not wheels:
        pytest.fail("no openrlhf 0.11.2 wheel in .cache/openrlhf-0.11.2: run `make install` (it downloads it)")
    with zipfile.ZipFile(wheels[0]) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    base = _requirements([r for r in requires if "extra ==" not in r])
    vllm_extra = _requirements([r.split(";")[0] for r in requires if 'extra == "vllm"' in r])
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    gpu, cluster = _requirements(extras["gpu"]), _requirements(extras["cluster"])
    assert gpu["openrlhf"] == (["vllm"], "==0.11.2", "")
    assert gpu["vllm"][1] == vllm_extra["vllm"][1] == "==0.29.0"
    assert gpu["deepspeed"][1] == base["deepspeed"][1]
    assert cluster["ray"] == base["ray"]  # ray[default]==2.55.0
    make = (ROOT / "Makefile").read_text()
    pins = dict(re.findall(r"^(TORCH_PIN|FLASH_ATTN_PIN)\s*:=\s*(\S+)$", make, re.M))
    assert _requirements([pins["FLASH_ATTN_PIN"]])["flash-attn"] == base["flash-attn"]
    assert _requirements([pins["TORCH_PIN"]])["torch"][1] == _requirements(extras["train"])["torch"][1]
    # the install order: torch, then flash-attn without build isolation, then the extras
    recipe = make.split("\ngpu-env:\n", 1)[1].split("\n\n", 1)[0]
    steps = [recipe.index(s) for s in ("'$(TORCH_PIN)'", "--no-build-isolation '$(FLASH_ATTN_PIN)'",
                                       "-e '.[cpu,dev,cluster,gpu]'")]
    assert steps == sorted(steps) and "command -v nvcc" in recipe


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
