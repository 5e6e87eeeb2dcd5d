"""What ran a run, and where its curves go besides metrics.jsonl and TensorBoard.

- `code_version()`: the git commit of the ifcore checkout that runs, and whether it had uncommitted changes; every
  training run keeps it in config.json and every evaluation in summary.json (`ifcore runs` shows it).
- An optional Weights & Biases logger for `ifcore train` (`pip install 'ifcore[tracking]'`): set
  IFCORE_WANDB_PROJECT (and WANDB_MODE=offline where there is no network; `wandb sync` uploads later). It logs
  under the keys OpenRLHF 0.11.2 logs (`train/<key>` against `train/global_step`, `eval/<key>` against
  `eval/global_step`, OpenRLHF's names where the two mean the same: OPENRLHF_NAMES), so embedded and OpenRLHF runs
  sit in one dashboard.

Stdlib only (wandb is imported only when asked for); train/ and run/ both import it.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

# OpenRLHF 0.11.2 key -> ifcore metric, where the two mean the same (ifcore.run.curves documents each).
OPENRLHF_NAMES = {
    "rollout/reward_mean": "reward_mean", "rollout/reward_std": "reward_std",
    "rollout/response_length_mean": "response_len", "rollout/truncated_rate": "truncated_fraction",
    "kl": "kl", "entropy_loss": "entropy", "ppo_clip_ratio": "clip_fraction", "actor_grad_norm": "grad_norm",
    "timing/step_total": "step_seconds", "cla": "csr",
    "eval_response_length_mean": "eval_response_len", "eval_truncated_rate": "eval_truncated_fraction",
    "raif_keep": "keep_ratio", "cot_reward_mean": "cot_reward_mean", "nothink_reward_mean": "nothink_reward_mean",
}
_IFCORE_TO_OPENRLHF = {v: k for k, v in OPENRLHF_NAMES.items()}


def code_version() -> dict:
    """{"commit": the checkout's HEAD, "dirty": whether tracked files differ from it}, both None when ifcore does
    not run from a git checkout (a wheel) or git is missing."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=60)
        if commit.returncode != 0 or not (root / "pyproject.toml").is_file():
            return {"commit": None, "dirty": None}
        # GIT_OPTIONAL_LOCKS=0: a look only; runs side by side never contend for the index lock.
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=60, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def openrlhf_row(row: dict) -> dict:
    """A metrics.jsonl row ({"type": "train" | "eval", "step", metric: value}) as OpenRLHF logs it to W&B:
    `<type>/<OpenRLHF's name, or ifcore's where OpenRLHF has none>` and `<type>/global_step`; format_ok becomes
    OpenRLHF's format_fail (1 - it). Values that are not numbers are left out."""
    kind = row["type"]
    out = {f"{kind}/global_step": row["step"]}
    for key, value in row.items():
        if key in ("type", "step") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key == "format_ok":
            out[f"{kind}/format_fail"] = 1.0 - value
        else:
            out[f"{kind}/{_IFCORE_TO_OPENRLHF.get(key, key)}"] = value
    return out


def wandb_run(run_dir: Path, name: str, config: dict):
    """A W&B run for `ifcore train` when IFCORE_WANDB_PROJECT is set, else None. Its id is the run folder's name,
    so a resumed run logs into the same W&B run; its files go under run_dir. Its steps are OpenRLHF's
    (define_metric as OpenRLHF's trainer sets them)."""
    project = os.environ.get("IFCORE_WANDB_PROJECT")
    if not project:
        return None
    try:
        import wandb
    except ImportError:
        raise ImportError("IFCORE_WANDB_PROJECT is set but wandb is not installed: pip install 'ifcore[tracking]' "
                          "(or unset it)") from None
    run = wandb.init(project=project, name=name, id=Path(run_dir).name.replace("/", "-"), resume="allow",
                     dir=str(run_dir), config=config, group=os.environ.get("IFCORE_WANDB_GROUP"))
    for kind in ("train", "eval"):
        run.define_metric(f"{kind}/global_step")
        run.define_metric(f"{kind}/*", step_metric=f"{kind}/global_step", step_sync=True)
    return run
