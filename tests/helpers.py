"""Helpers several test files share (pytest puts tests/ on sys.path: `from helpers import ...`)."""
from __future__ import annotations

import gc
import math
import os
import signal
import subprocess
import time
from pathlib import Path

from ifcore.cli import main
from ifcore.infer import registry

REPO = Path(__file__).resolve().parents[1]
# Read at collection, before any test moves IFCORE_CACHE: the dequantized SmolLM2 lives in the user's cache.
USER_CACHE = registry.cache_dir()


def cpu_seconds(fn, *args, repeat: int = 3) -> float:
    """The least CPU time of `repeat` calls of fn(*args), the cyclic GC paused while each runs. Growth tests compare
    these: late in a pytest run a full collection walks every object earlier tests left, and one landing in a timed
    call made a linear 11x read 34x on CI. Other load only ever adds time, hence the least."""
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            fn(*args)
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best


def run_cli(capsys, *argv) -> tuple:
    """(exit status, stdout, stderr lines) of `ifcore ARGV` run in this process."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


def train_killed_at_step(cmd: list, metrics: Path, step: int = 3, timeout: float = 300) -> dict:
    """Start `ifcore train` (cmd) from the repository and SIGKILL it once metrics.jsonl holds the train row of
    `step` (past a checkpoint, with a row the checkpoint does not cover). Returns the environment to rerun it in."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and f'"type": "train", "step": {step},' in metrics.read_text():
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    assert proc.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    return env
