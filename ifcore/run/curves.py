"""A run's curves as rows of the embedded trainer's metrics.jsonl, whichever engine trained it.

`read_curves(run_dir)` returns [{"type": "train" | "eval", "step": int, <metric>: float, ...}], sorted by step
(a step's train row before its eval row), from:

1. TensorBoard event files under run_dir, read with tensorboard's own EventAccumulator: the embedded trainer's
   (in run_dir itself, tags `train/<metric>` and `eval/<metric>` named as in metrics.jsonl, taken as they are)
   or OpenRLHF's (in a folder below, `<logger.tensorboard_dir>/<run name>`, the same two tag prefixes, keys
   renamed by the table below);
2. else the OpenRLHF PPO trainer's stdout in run_dir/train.log: lines "Global step N: {...}" (train; the
   synchronous trainer prefixes them with a sparkle) and "Evaluation completed in ..., global_step N,
   eval_metrics: {...}" or "Eval at step N: {...}" (eval), the dicts as Python prints them.

OpenRLHF 0.11.2 key -> ifcore metric, where the two mean the same:

| OpenRLHF | ifcore | meaning |
| --- | --- | --- |
| rollout/reward_mean, rollout/reward_std | reward_mean, reward_std | the step's rollout rewards |
| rollout/response_length_mean | response_len | response tokens per rollout |
| rollout/truncated_rate | truncated_fraction | rollouts cut at max_new_tokens |
| kl | kl | k3 KL to the reference per response token (with --algo.kl.estimator k3) |
| entropy_loss | entropy | policy entropy per response token (logged with --actor.entropy_coef 0) |
| ppo_clip_ratio | clip_fraction | share of tokens whose ratio was clipped |
| actor_grad_norm | grad_norm | gradient norm of the last optimizer step |
| timing/step_total | step_seconds | wall time of the step |
| cla | csr | per rollout the share of its constraints satisfied (0 when the format gate failed), averaged (the reward module's extra log) |
| format_fail | format_ok | 1 - the share of rollouts failing the format gate |
| eval_response_length_mean | eval_response_len | held-out response tokens |
| eval_truncated_rate | eval_truncated_fraction | held-out responses cut at the limit |
| raif_keep | keep_ratio | RAIF superior-CoT: the share of groups eq. 7 keeps (the plug-in's per-rollout flag, averaged; without refill) |
| cot_reward_mean, nothink_reward_mean | cot_reward_mean, nothink_reward_mean | RAIF superior-CoT: the mean reward of the reasoning and of the no-think rollouts (the plug-in logs each scaled so that the mean over rollouts is it) |

Every other OpenRLHF key is kept as `openrlhf/<key>` (e.g. openrlhf/policy_loss: OpenRLHF's loss leaves out the
KL term that the embedded `loss` holds; openrlhf/eval_<source>_pass1: the mean reward of the held-out samples, not
ISR or CSR: those come from evaluating the saved checkpoints). Non-finite values become None, as in
metrics.jsonl. TensorBoard keeps floats in 32 bits: values read back equal metrics.jsonl's to about 1e-7.
"""
from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from ifcore.tracking import OPENRLHF_NAMES

PREFIX = "openrlhf/"
RENAMES = OPENRLHF_NAMES  # one table, kept in ifcore.tracking (its W&B logger writes these names)
_TRANSFORMS = {"format_fail": ("format_ok", lambda v: 1.0 - v)}
_LINES = {  # the PPO trainer actor's log lines (openrlhf/trainer/ppo_trainer.py, ppo_trainer_async.py)
    "train": re.compile(r"Global step (\d+): (\{.*)$"),
    "eval": re.compile(r"(?:global_step (\d+), eval_metrics: |Eval at step (\d+): )(\{.*)$"),
}
_NON_FINITE = {"nan": math.nan, "inf": math.inf}


def _openrlhf_key(key: str, value: float) -> tuple[str, float]:
    if key in _TRANSFORMS:
        name, f = _TRANSFORMS[key]
        return name, f(value)
    return RENAMES.get(key, PREFIX + key), value


def _finite(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _rows(points: dict[tuple[str, int], dict]) -> list[dict]:
    order = {"train": 0, "eval": 1}
    return [{"type": kind, "step": step, **values}
            for (kind, step), values in sorted(points.items(), key=lambda kv: (kv[0][1], order[kv[0][0]]))]


def _from_events(run: Path, folders: list[Path]) -> list[dict]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: dict[tuple[str, int], dict] = {}
    for folder in folders:  # sorted: a later folder's value wins at the same step
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: every point, not a sample
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            kind, _, key = tag.partition("/")
            if kind not in ("train", "eval") or not key:
                continue
            for event in acc.Scalars(tag):
                name, value = (key, event.value) if folder == run else _openrlhf_key(key, event.value)
                points.setdefault((kind, int(event.step)), {})[name] = _finite(value)
    return _rows(points)


def _literal(text: str, where: str) -> dict:
    """A dict as Python prints it (nan and inf included), never evaluated as code."""
    try:
        tree = ast.parse(text, mode="eval")
        tree = ast.fix_missing_locations(_NonFinite().visit(tree))
        value = ast.literal_eval(tree)
    except (SyntaxError, ValueError) as e:
        raise ValueError(f"{where}: not a metrics dict ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: not a metrics dict")
    return value


class _NonFinite(ast.NodeTransformer):
    def visit_Name(self, node):
        return ast.Constant(_NON_FINITE[node.id]) if node.id in _NON_FINITE else node


def _from_log(path: Path) -> list[dict]:
    points: dict[tuple[str, int], dict] = {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for n, line in enumerate(lines, 1):
        for kind, pattern in _LINES.items():
            if not (m := pattern.search(line)):
                continue
            *steps, text = m.groups()
            try:
                values = _literal(text, f"{path}:{n}")
            except ValueError:
                if n == len(lines):  # the last line of a job killed mid-write
                    break
                raise
            row = points.setdefault((kind, int(next(s for s in steps if s))), {})
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    name, value = _openrlhf_key(str(key), value)
                    row[name] = _finite(value)
            break
    return _rows(points)


def read_curves(run_dir) -> list[dict]:
    """The run's metrics rows in metrics.jsonl's schema, from its TensorBoard events, else from train.log's
    OpenRLHF lines; FileNotFoundError when run_dir has neither."""
    run = Path(run_dir)
    folders = sorted({p.parent for p in run.rglob("events.out.tfevents.*") if p.is_file()})
    if folders:
        return _from_events(run, folders)
    if (run / "train.log").is_file():
        return _from_log(run / "train.log")
    raise FileNotFoundError(f"{run}: no TensorBoard events under it and no train.log")
