"""Several reward arms x seeds of `ifcore train`, run side by side: what a paper-stage notebook executes.

Each run is its own `ifcore train` process with one torch thread, `workers` at a time, logging to its folder;
a finished run is kept and an interrupted one resumes from its last checkpoint, so re-executing a notebook
only trains what is missing.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = ("local",)


def run_dir(runs_dir, arm: str, seed: int) -> Path:
    return Path(runs_dir) / f"{arm}-seed{seed}"


def finished(path: Path, steps: int) -> bool:
    metrics = path / "metrics.jsonl"
    if not metrics.exists():
        return False
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return any(r["type"] == "eval" and r["step"] == steps for r in rows)


def run_arms(arms: list[str], seeds: list[int], steps: int, runs_dir, config: dict | None = None,
             workers: int = 2, backend: str = "local", progress: bool = True) -> list[Path]:
    """Train every (arm, seed); returns the run folders in (arm, seed) order.

    `config` holds TrainConfig fields shared by all runs (model size, G, learning rate, ...). The default
    dataset and warm-started policy are built first, in this process, so that the workers never race to build
    them."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: this workspace trains with {BACKENDS} so far "
                         "(the OpenRLHF cluster backend is on the road map, not built)")
    from ifcore.train.grpo import load_config
    from ifcore.train.sft import WarmStartConfig, default_assets

    config = dict(config or {})
    base = load_config(None, **config)  # validates the field names before anything starts
    if None in (base.model, base.train_data, base.test_data):
        default_assets(WarmStartConfig(**base.warm_start), progress=progress)
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    pending = []
    for arm in arms:
        for seed in seeds:
            path = run_dir(runs_dir, arm, seed)
            if not finished(path, steps):
                path.mkdir(parents=True, exist_ok=True)
                (path / "sweep_config.json").write_text(json.dumps({**config, "threads": 1}, indent=1))
                pending.append((arm, seed, path))
    running: list[tuple[subprocess.Popen, Path, object]] = []
    failed = []
    t0 = time.time()
    while pending or running:
        while pending and len(running) < workers:
            arm, seed, path = pending.pop(0)
            log = open(path / "train.log", "a")
            cmd = [sys.executable, "-m", "ifcore", "train", "--reward", arm, "--seed", str(seed), "--steps",
                   str(steps), "--output-dir", str(path), "--config", str(path / "sweep_config.json")]
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), path, log))
        time.sleep(0.5)
        for job in [j for j in running if j[0].poll() is not None]:
            proc, path, log = job
            log.close()
            running.remove(job)
            if proc.returncode != 0:
                failed.append(path)
            elif progress:
                print(f"{path.name}: done ({time.time() - t0:.0f}s since the sweep started)", flush=True)
    if failed:
        raise RuntimeError("training failed in " + ", ".join(f"{p} (see {p / 'train.log'})" for p in failed))
    return [run_dir(runs_dir, arm, seed) for arm in arms for seed in seeds]


def load_metrics(paths: list[Path]):
    """All rows of the runs' metrics.jsonl as one DataFrame, with `arm` and `seed` columns."""
    import pandas as pd

    frames = []
    for path in paths:
        arm, seed = path.name.rsplit("-seed", 1)
        rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
        frame = pd.DataFrame(rows)
        frame["arm"], frame["seed"] = arm, int(seed)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
