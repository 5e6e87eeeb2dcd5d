"""The sweep behind notebook 03 (ifcore.run.sweep): runs are identified by their configuration (a changed
steps, learning rate or model size never shows an old run's rows), an interrupted or killed sweep leaves no
trainer behind, a failed run is reported with its log tail while the others finish, and bad arguments are
refused before anything starts.

Each run is a real `ifcore train` child on a tiny default policy built in a temporary IFCORE_CACHE.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("torch")
pytest.importorskip("pandas")

from ifcore.train.grpo import TIMING_KEYS, load_config, resolve_paths, run_identity  # noqa: E402
from ifcore.train.sft import WarmStartConfig, default_assets  # noqa: E402
from ifcore.run.sweep import finished, load_metrics, load_rollouts, run_arms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Just enough warm start that rollouts earn rewards, so that a changed learning rate changes the rows.
TINY_MODEL = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                  max_positions=256, pairs=300, steps=120, batch_size=16, train_rows=64, test_rows=8)
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=32, micro_batch=16, eval_prompts=4,
                eval_samples=1, eval_every=2, save_every=1, warm_start=TINY_MODEL)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache holding the tiny default policy and data, built once for the module."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IFCORE_CACHE", str(root))
        default_assets(WarmStartConfig(**TINY_MODEL), progress=False)
    return root


@pytest.fixture
def env(cache, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return os.environ.copy()


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
            for line in (path / "metrics.jsonl").read_text().splitlines()]


# ---- runs are identified by their configuration -----------------------------------------------------------------

@pytest.mark.slow
def test_changed_steps_lr_or_model_size_never_show_stale_rows(env, tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    first = run_arms(["cla", "scopeif"], [0], 2, runs_dir, config=TINY_RUN)
    assert list(first.status) == ["trained", "trained"]
    captured = capsys.readouterr()
    assert "done in" in captured.out and "reused: 0, resumed: 0, trained from scratch: 2" in captured.out
    assert "sweep: 4/4 step in " in captured.err  # one bar over both runs' steps; nobody watches: its summary line
    df = load_metrics(first["path"])
    assert sorted(set(zip(df["arm"], df["seed"]))) == [("cla", 0), ("scopeif", 0)]
    assert [p.name.rsplit("-", 1)[0] for p in first["path"]] == ["cla-seed0", "scopeif-seed0"]
    rollouts = load_rollouts(first["path"])
    assert list(rollouts.columns) == ["arm", "seed", "step", "reward"] and len(rollouts) == 2 * 2 * 16

    again = run_arms(["cla"], [0], 2, runs_dir, config=TINY_RUN, progress=False)
    assert list(again.status) == ["reused"] and again["path"][0] == first["path"][0]
    assert "reused: 1, resumed: 0, trained from scratch: 0" in capsys.readouterr().out
    # A run stopped after its step-1 checkpoint resumes from it and ends with the rows it would have had.
    old = _rows(first["path"][0])
    shutil.rmtree(first["path"][0] / "checkpoints" / "step_000002")
    resumed = run_arms(["cla"], [0], 2, runs_dir, config=TINY_RUN, progress=False)
    assert list(resumed.status) == ["resumed"] and resumed["from_step"][0] == 1
    assert "to resume: 1" in capsys.readouterr().out and _rows(first["path"][0]) == old

    changes = [(1, TINY_RUN, "steps"), (2, {**TINY_RUN, "lr": 2e-3}, "lr"),
               (2, {**TINY_RUN, "warm_start": {**TINY_MODEL, "hidden_size": 48}}, "warm_start.hidden_size")]
    seen = {first["path"][0]}
    for steps, config, field in changes:
        runs = run_arms(["cla"], [0], steps, runs_dir, config=config, progress=False)
        path = runs["path"][0]
        assert list(runs.status) == ["trained"] and path not in seen, field
        seen.add(path)
        identity = json.loads((path / "config.json").read_text())["identity"]
        assert identity[field] == {"steps": steps, "lr": config.get("lr"),
                                   "warm_start.hidden_size": config["warm_start"]["hidden_size"]}[field]
        df = load_metrics(runs["path"])
        assert df["step"].max() == steps, field
        assert list(zip(df["type"], df["step"])) == [(r["type"], r["step"]) for r in _rows(path)]
        assert _rows(path) != old, field  # the new run's rows, not the old run's
    assert "(4 other run folders" in capsys.readouterr().out


def test_bad_arguments_are_refused_before_anything_starts(tmp_path):
    runs_dir = tmp_path / "runs"
    for kwargs, match in [({"workers": 0}, "workers"), ({"arms": ["ila", "binary"]}, "reward"),
                          ({"steps": 0}, "steps"), ({"seeds": [-1]}, "seed"),
                          ({"config": {"steps": 3}}, "steps"), ({"config": {"group_size": 1}}, "group_size"),
                          ({"config": {"lr": "fast"}}, "lr"), ({"backend": "slurm"}, "backend"),
                          # OpenRLHF's job options: only for that backend, only command's own keywords
                          ({"openrlhf_options": {"gpus_per_node": 1}}, "openrlhf_options: backend 'openrlhf' takes"),
                          ({"openrlhf_options": {"model": "x"}, "backend": "openrlhf"}, "gpu_gib.*gpus_per_node"),
                          ({"placement_timeout": 0}, "placement_timeout: seconds > 0")]:
        args = {"arms": ["ila"], "seeds": [0], "steps": 2, "runs_dir": runs_dir, "progress": False, **kwargs}
        with pytest.raises(ValueError, match=match):
            run_arms(**args)
    assert not runs_dir.exists()


# ---- failures, locks, interrupts -----------------------------------------------------------------------------------

def _run_path(runs_dir: Path, arm: str, seed: int, steps: int, config: dict) -> Path:
    """The folder run_arms gives a run: <arm>-seed<seed>-<hash of its identity>."""
    cfg = load_config(None, **{"threads": 1, **config}, steps=steps, reward=arm, seed=seed)
    return runs_dir / f"{arm}-seed{seed}-{run_identity(cfg, resolve_paths(cfg, progress=False))[1]}"


@pytest.mark.slow
def test_a_failed_run_is_reported_with_its_log_tail_and_the_others_finish(env, tmp_path):
    runs_dir = tmp_path / "runs"
    busy = _run_path(runs_dir, "ila", 0, 2, TINY_RUN)
    busy.mkdir(parents=True)
    with open(busy / "train.lock", "w") as lock:  # another trainer holds this run's directory
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("424242")
        lock.flush()
        with pytest.raises(RuntimeError) as failure:
            run_arms(["ila", "cla"], [0], 2, runs_dir, config=TINY_RUN, progress=False)
    message = str(failure.value)
    assert "1 of 2 runs" in message and busy.name in message
    assert "another trainer (pid 424242)" in message  # from the tail of the failed run's train.log
    (done,) = [p for p in runs_dir.iterdir() if p.name.startswith("cla-seed0-")]
    assert finished(done, json.loads((done / "config.json").read_text())["key"], 2)
    # The lock went with its holder: the same sweep now trains the missing run and reuses the other.
    runs = run_arms(["ila", "cla"], [0], 2, runs_dir, config=TINY_RUN, progress=False)
    assert list(runs.status) == ["trained", "reused"]


# A kernel turns SIGINT into KeyboardInterrupt whatever it inherited; a process started in the background by a
# non-interactive shell inherits SIGINT ignored, and Python then installs no handler: restore it as a kernel would.
SWEEP = """
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from ifcore.run.sweep import run_arms
run_arms(["ila", "cla"], [0], 10_000, sys.argv[1], config=json.loads(sys.argv[2]), progress=False)
"""


def _trainers(runs_dir: Path, reapers: bool = True) -> list:
    """The processes of `ifcore train` runs under runs_dir, zombies included (on a machine whose PID 1 does not
    reap, a zombie stays for good), with or without their ifcore.reaper parents."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        reaper = any(part.endswith("reaper.py") for part in cmdline)
        if "--config" in cmdline and str(runs_dir) in " ".join(cmdline) and (reapers or not reaper):
            found.append(proc)
    return found


def _start_sweep(runs_dir: Path, env: dict):
    """A sweep of two endless runs in a child process, once both of its trainers have started."""
    sweep = subprocess.Popen([sys.executable, "-c", SWEEP, str(runs_dir), json.dumps(TINY_RUN)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(_trainers(runs_dir, reapers=False)) < 2 and sweep.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert len(_trainers(runs_dir, reapers=False)) == 2, "the sweep did not start its two trainers"
    return sweep


@pytest.mark.slow
@pytest.mark.parametrize("how", ["interrupt", "kill"])
def test_a_stopped_sweep_leaves_no_trainer_running(env, tmp_path, how):
    """SIGINT (a notebook's stop button) stops the children before the sweep returns; SIGKILL (a restarted
    kernel) leaves them orphaned, and their reapers notice, stop them and say so in their logs."""
    runs_dir = tmp_path / "runs"
    sweep = _start_sweep(runs_dir, env)
    try:
        sweep.send_signal(signal.SIGINT if how == "interrupt" else signal.SIGKILL)
        assert sweep.wait(timeout=120) != 0
        if how == "interrupt":
            assert _trainers(runs_dir) == []
        else:
            deadline = time.time() + 120
            while _trainers(runs_dir) and time.time() < deadline:
                time.sleep(0.2)
            assert _trainers(runs_dir) == []
            assert any("is gone" in p.read_text() for p in runs_dir.glob("*/train.log"))
    finally:
        for proc in _trainers(runs_dir):  # never leave a failing test's trainers behind
            proc.kill()


@pytest.mark.slow
def test_resampling_the_warm_start_gives_each_seed_its_own_data_and_policy(env, tmp_path, capsys):
    from ifcore.train.sft import cache_key

    warm = TINY_RUN["warm_start"]
    assert not any(cache_key({**warm, "seed": s})[1] for s in (7, 8))
    # two warm starts to build: side by side, one process of one thread each, before any run starts
    run_arms(["ila"], [7, 8], 1, tmp_path / "built", config={**TINY_RUN, "eval_every": 1}, workers=2,
             resample_warm_start=True)
    assert "building 2 warm starts, 2 at a time (one torch thread each)" in capsys.readouterr().out
    assert all(cache_key({**warm, "seed": s})[1] for s in (7, 8))
    runs = run_arms(["ila", "cla"], [0, 1], 1, tmp_path / "runs", config={**TINY_RUN, "eval_every": 1},
                    progress=False, resample_warm_start=True)
    configs = {(r.arm, r.seed): json.loads((r.path / "config.json").read_text()) for r in runs.itertuples()}
    ident = {k: {f: c["identity"][f] for f in ("warm_start.seed", "model_sha256", "train_data_sha256")}
             for k, c in configs.items()}
    # one warm start and dataset per seed, shared by the arms of that seed (differences stay paired)
    assert ident[("ila", 0)] == ident[("cla", 0)] and ident[("ila", 1)] == ident[("cla", 1)]
    assert ident[("ila", 0)]["warm_start.seed"] == 0 and ident[("ila", 1)]["warm_start.seed"] == 1
    assert ident[("ila", 0)]["model_sha256"] != ident[("ila", 1)]["model_sha256"]
    assert ident[("ila", 0)]["train_data_sha256"] != ident[("ila", 1)]["train_data_sha256"]
