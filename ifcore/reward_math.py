"""The reward arithmetic the verifier and the rewards share: ScopeIF's graded reward of one record (eq. 5, 8, 9)
and the response-level aggregations of verdict data (ILA, CLA, eq. 7, its flat ablation). Pure functions over
numpy; below both ifcore.verify (Verdict.graded, `ifcore verify`'s rewards) and ifcore.rewards (which re-exports
them), so neither imports the other's way back."""
from __future__ import annotations

import math

import numpy as np


def _as_array(x, dtype=float) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _rowwise(fn, *columns):
    """fn over [..., C] arrays; a ragged batch (rows with different |C|) is taken row by row."""
    try:
        arrays = [_as_array(x, dtype) for x, dtype in columns]
    except ValueError:  # numpy refuses ragged nesting
        rows = len(columns[0][0])
        return np.array([_rowwise(fn, *[(x[i], dtype) for x, dtype in columns]) for i in range(rows)])
    out = fn(*arrays)
    return float(out) if np.ndim(out) == 0 else out


def check_alpha(alpha) -> float:
    """alpha as a float; ValueError naming alpha unless it is finite and positive (eq. 5 needs alpha > 0 for
    g <= 1: a negative alpha turns the penalty into a bonus, NaN poisons every reward)."""
    try:
        if 0.0 < float(alpha) < math.inf:
            return float(alpha)
    except (TypeError, ValueError):
        pass
    raise ValueError(f"alpha must be a finite positive number, got {alpha!r}")


def graded(lo, hi, actual, alpha: float = 3.0):
    """Graded reward of one record, ScopeIF eq. 5, 8, 9: r = exp(-alpha d / s), in [0, 1].

    d = max(lo - a, a - hi, 0) (eq. 8); s = max(1, (max(lo,0) + max(hi,0)) / 2) when hi is finite, else
    max(1, max(lo,0)) (eq. 9). A None (or NaN) bound is infinite; a None (or NaN, or infinite) actual is a
    missing segment and grades 0. A lower bound of +inf (a `times` reference that overflowed) gives
    d / s = inf / inf, taken at its limit 1. alpha must be finite and positive (ValueError naming it).
    Scalars give a float; arrays broadcast and give an array.
    """
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha < math.inf):
        alpha = check_alpha(alpha)
    if all(v is None or isinstance(v, (int, float)) for v in (lo, hi, actual)):
        # Verdict.graded calls this once per record: the scalar path stays in plain floats.
        if actual is None or not -math.inf < actual < math.inf:
            return 0.0
        lo = -math.inf if lo is None or lo != lo else float(lo)
        hi = math.inf if hi is None or hi != hi else float(hi)
        d = max(lo - actual, actual - hi, 0.0)
        if d == 0.0:
            return 1.0
        lbar = max(lo, 0.0)
        s = max(1.0, (lbar + max(hi, 0.0)) / 2) if hi < math.inf else max(1.0, lbar)
        return math.exp(-alpha * d / s) if s < math.inf else math.exp(-alpha)
    lo, hi, a = (_as_array(v) for v in (lo, hi, actual))  # None -> NaN under dtype=float
    lo = np.where(np.isnan(lo), -np.inf, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    with np.errstate(invalid="ignore"):  # inf - inf when actual is itself infinite
        d = np.fmax(np.fmax(lo - a, a - hi), 0.0)
        lbar = np.maximum(lo, 0.0)
        s = np.where(np.isfinite(hi), np.maximum(1.0, (lbar + np.maximum(hi, 0.0)) / 2), np.maximum(1.0, lbar))
        ratio = np.where(np.isinf(s), 1.0, d / s)
    r = np.where(np.isfinite(a), np.exp(-alpha * ratio), 0.0)
    return float(r) if r.ndim == 0 else r


def ila(satisfied):
    """Instruction-level accuracy (ScopeIF section 3, the RL-ILA baseline): 1 iff every constraint holds, else 0."""
    return _rowwise(lambda s: s.all(axis=-1).astype(float), (satisfied, bool))


def cla(satisfied):
    """Constraint-level accuracy (ScopeIF section 3, the RL-CLA baseline): the satisfied fraction, in [0, 1].

    An empty constraint set is vacuously satisfied and scores 1.
    """
    return _rowwise(lambda s: s.mean(axis=-1) if s.shape[-1] else np.ones(s.shape[:-1]), (satisfied, float))


def _hierarchical(s, g):
    n = s.shape[-1]
    if n == 0:
        return np.ones(s.shape[:-1])
    violated = ~s
    nviol = violated.sum(axis=-1)
    graded_mean = np.where(violated, g, 0.0).sum(axis=-1) / np.maximum(nviol, 1)
    return (s.sum(axis=-1) + graded_mean) / n


def scopeif(satisfied, graded):
    """ScopeIF hierarchical reward, eq. 7: R = (sum_i I_i + mean_{i in F} g_i) / |C|.

    F is the set of violated constraints; the graded term is 0 when F is empty. With m constraints
    satisfied (and g_i < 1 for the violated ones, as eq. 5 guarantees) m/|C| <= R < (m+1)/|C|; so R lies
    in [0, 1], and is 1 only when every constraint holds.
    """
    return _rowwise(_hierarchical, (satisfied, bool), (graded, float))


def scopeif_flat(graded):
    """ScopeIF "wo HRA" ablation (Table 1): the plain mean of the graded rewards g_i (eq. 6), in [0, 1]."""
    return _rowwise(lambda g: g.mean(axis=-1) if g.shape[-1] else np.ones(g.shape[:-1]), (graded, float))
