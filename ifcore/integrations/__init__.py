"""Reward adapters for OpenRLHF, TRL and verl, and what they share: reading a sample's label, the run's
settings, the per-sample logs, and `ifcore validate-dataset`.

Every adapter scores a response with `ifcore.rewards.score_response`. Settings come from keyword arguments
where the framework passes them (TRL partials, verl's reward_kwargs) and otherwise from the environment:
IFCORE_REWARD (ila, cla, scopeif, scopeif_flat, raif; default scopeif), IFCORE_THINK (auto, required, none,
raif; default auto), IFCORE_ALPHA (default 3.0). This package and the TRL and verl adapters import no torch
(the OpenRLHF module does, as OpenRLHF's reward functions return tensors); none imports `ifcore.train`.
"""
from __future__ import annotations

import json
import os

from ifcore.rewards import KINDS, SELECTORS, THINK_MODES
from ifcore.schema import Constraint, ConstraintError, parse_label

# One response's problems as format_gate names them; each gets a log key so a broken run shows at once.
PROBLEMS = ("truncated", "unclosed_think", "missing_think", "raif_format")


def settings(kind: str | None = None, think: str | None = None, alpha: float | None = None):
    """(kind, think, alpha): the arguments given, else IFCORE_REWARD / IFCORE_THINK / IFCORE_ALPHA, else
    scopeif / auto / 3.0. A bad value raises naming the variable."""
    kind = kind or os.environ.get("IFCORE_REWARD") or "scopeif"
    think = think or os.environ.get("IFCORE_THINK") or "auto"
    if kind not in KINDS:
        raise ValueError(f"IFCORE_REWARD / kind must be one of {KINDS}, got {kind!r}")
    if think not in THINK_MODES:
        raise ValueError(f"IFCORE_THINK / think must be one of {THINK_MODES}, got {think!r}")
    if alpha is None:
        raw = os.environ.get("IFCORE_ALPHA") or "3.0"
        try:
            alpha = float(raw)
        except ValueError:
            raise ValueError(f"IFCORE_ALPHA must be a number, got {raw!r}") from None
    return kind, think, float(alpha)


# A prompt's G rollouts share one label: parse it, and let verify compile its plans, once. Keyed by the label
# alone (the error message names the sample, so failures are not cached).
_PARSED: dict[str, tuple[Constraint, ...]] = {}


def _drop_nulls(x):
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # numpy arrays from a parquet column
        x = x.tolist()
    if isinstance(x, dict):
        return {k: _drop_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_nulls(v) for v in x]
    return x


def load_constraints(label, where: str) -> tuple[Constraint, ...]:
    """The constraints of one sample's label (schema v1: a JSON string, or the decoded object). A malformed
    label raises ConstraintError whose message starts with `where` and the field path.

    A decoded label has its null fields dropped first: a dataset column of JSON objects goes through Arrow,
    which gives every row every key seen in the column, the missing ones as null.
    """
    if isinstance(label, (dict, list)) or hasattr(label, "tolist"):
        label = _drop_nulls(label)
        key = json.dumps(label, sort_keys=True, default=str)
    elif isinstance(label, str):
        key = label
    else:
        raise ConstraintError(where, f"expected a schema v1 label (JSON string or object), got "
                                     f"{type(label).__name__}")
    constraints = _PARSED.get(key)
    if constraints is None:
        constraints = tuple(parse_label(label, where))
        if not constraints:
            raise ConstraintError(where, "no constraints: every response would get full reward")
        if len(_PARSED) >= 8192:
            _PARSED.clear()
        _PARSED[key] = constraints
    return constraints


def scope_class(c: Constraint) -> str:
    """The ScopeIF scope class (Global, Traversal, Position, Condition, Nested) of a constraint: from its
    `category.scope` label when present ("A -> B" is Nested), else from its scope path."""
    label = (c.category or {}).get("scope")
    if label:
        return "Nested" if "->" in label else label.split("(", 1)[0].strip()
    return c.selector


def log_keys(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The fixed names of `sample_logs`: OpenRLHF and verl need every sample to carry the same keys."""
    scopes = tuple(k for s in SELECTORS for k in (f"scope_{s}_sat", f"scope_{s}_n"))
    return ("ila", "cla", "format_fail", *(f"fmt_{p}" for p in PROBLEMS), "verify_errors", "constraints",
            *scopes, *extra)


def sample_logs(result: dict, constraints) -> dict[str, float]:
    """One scored response as flat floats under `log_keys()`. ILA and CLA count a failed format as 0.

    Per-scope counts instead of rates: a sample without Nested constraints has no Nested CSR, and the
    frameworks average each key over samples, so CSR(S) = mean(scope_S_sat) / mean(scope_S_n).
    """
    sat = result["satisfied"]
    logs = {k: 0.0 for k in log_keys()}
    logs["ila"] = float(all(sat))
    logs["cla"] = sum(sat) / len(sat) if sat else 1.0
    logs["format_fail"] = float(not result["format_ok"])
    if result["problem"]:
        logs[f"fmt_{result['problem']}"] = 1.0
    logs["verify_errors"] = float(len(result["errors"]))
    logs["constraints"] = float(len(sat))
    for c, ok in zip(constraints, sat):
        s = scope_class(c)
        logs[f"scope_{s}_n"] += 1.0
        logs[f"scope_{s}_sat"] += float(ok)
    return logs


def validate_dataset(lines, label_key: str = "label", input_key: str | None = "prompt") -> tuple[int, list[str]]:
    """`ifcore validate-dataset`: check every sample of a JSONL prompt dataset before a run.

    Returns (samples read, errors); each error names its line and the field path that is wrong.
    """
    errors, n = [], 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        n += 1
        where = f"line {lineno}"
        try:
            row = json.loads(line)
        except ValueError as e:
            errors.append(f"{where}: not valid JSON ({e})")
            continue
        if not isinstance(row, dict):
            errors.append(f"{where}: expected a JSON object, got {type(row).__name__}")
            continue
        if input_key and input_key not in row:
            errors.append(f"{where}: {input_key}: missing (the prompt field)")
        if label_key not in row:
            errors.append(f"{where}: {label_key}: missing (the constraints label)")
            continue
        try:
            load_constraints(row[label_key], f"{where}: {label_key}")
        except ConstraintError as e:
            errors.append(str(e))
    return n, errors
