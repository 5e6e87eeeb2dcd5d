"""Reward adapters for OpenRLHF, TRL and verl, and what they share: reading a sample's label, the run's
settings, scoring one sample with its checks, the per-sample logs, and `ifcore validate-dataset`.

Every adapter scores a response with `ifcore.rewards.score_response` (through `score`). Settings come from
keyword arguments where the framework passes them (TRL partials, verl's reward_kwargs) and otherwise from the
environment: IFCORE_REWARD (ila, cla, scopeif, scopeif_flat, raif; default scopeif), IFCORE_THINK (auto,
required, none, raif; default auto), IFCORE_ALPHA (finite, > 0; default 3.0), IFCORE_BUDGET_S (seconds for
all of one response's constraints, the rest count violated; default 2.0, "inf" for none) and
IFCORE_MAX_RESPONSE_CHARS (the verified text is cut to this many characters; default 200000). Judged
constraints (X15) need an LLM judge: a `judge=` argument, else IFCORE_JUDGE_URL and IFCORE_JUDGE_MODEL (and
IFCORE_JUDGE_KEY) make one per process, ScopeIF's tool-grounded verification (ifcore.judge.tgv) with
IFCORE_JUDGE_TOOLS sandbox workers (default 2), imported only then. This package
and the TRL and verl adapters import no torch (the OpenRLHF module does, as OpenRLHF's reward functions
return tensors); none imports `ifcore.train`.
"""
from __future__ import annotations

import json
import math
import os
import threading

from ifcore.jsonl import iter_jsonl
from ifcore.rewards import KINDS, RANGES, SELECTORS, THINK_MODES, check_alpha, score_response
from ifcore.schema import Constraint, ConstraintError, parse_label

# One response's problems as format_gate names them; each gets a log key so a broken run shows at once.
PROBLEMS = ("truncated", "unclosed_think", "missing_think", "raif_format")


def settings(kind: str | None = None, think: str | None = None, alpha: float | None = None,
             budget_s: float | None = None, max_response_chars: int | None = None, judge=None) -> dict:
    """score_response's keyword arguments for a run: the arguments given, else IFCORE_REWARD / IFCORE_THINK /
    IFCORE_ALPHA / IFCORE_BUDGET_S / IFCORE_MAX_RESPONSE_CHARS, else scopeif / auto / 3.0 / 2.0 / 200000;
    the judge given, else `env_judge()`. A bad value raises ValueError naming the variable."""
    env = os.environ.get
    kind = kind or env("IFCORE_REWARD") or "scopeif"
    think = think or env("IFCORE_THINK") or "auto"
    if kind not in KINDS:
        raise ValueError(f"IFCORE_REWARD / kind must be one of {KINDS}, got {kind!r}")
    if think not in THINK_MODES:
        raise ValueError(f"IFCORE_THINK / think must be one of {THINK_MODES}, got {think!r}")
    alpha = (env("IFCORE_ALPHA") or "3.0") if alpha is None else alpha
    budget = (env("IFCORE_BUDGET_S") or "2.0") if budget_s is None else budget_s
    chars = (env("IFCORE_MAX_RESPONSE_CHARS") or "200000") if max_response_chars is None else max_response_chars
    try:
        alpha = check_alpha(alpha)
    except ValueError:
        raise ValueError(f"IFCORE_ALPHA / alpha must be a finite positive number, got {alpha!r}") from None
    try:
        budget_s = float(budget)
    except (TypeError, ValueError):
        budget_s = math.nan
    if not budget_s >= 0:
        raise ValueError(f"IFCORE_BUDGET_S / budget_s must be seconds >= 0 (inf: no budget), got {budget!r}")
    try:
        max_response_chars = int(str(chars))  # str(): a float or a bool is no integer here
    except ValueError:
        max_response_chars = 0
    if max_response_chars <= 0:
        raise ValueError(f"IFCORE_MAX_RESPONSE_CHARS / max_response_chars must be a positive integer, got {chars!r}")
    return {"kind": kind, "think": think, "alpha": alpha, "budget_s": None if budget_s == math.inf else budget_s,
            "max_response_chars": max_response_chars, "judge": judge if judge is not None else env_judge()}


_JUDGE: dict = {}
_JUDGE_LOCK = threading.Lock()


def env_judge():
    """The process's judge from IFCORE_JUDGE_URL / IFCORE_JUDGE_MODEL (None when the URL is unset): a TGV over a
    JudgeClient with a sandbox of IFCORE_JUDGE_TOOLS workers, made on first use and shared by every sample."""
    url = os.environ.get("IFCORE_JUDGE_URL")
    if not url:
        return None
    key = (url, os.environ.get("IFCORE_JUDGE_MODEL"), os.environ.get("IFCORE_JUDGE_TOOLS", "2"))
    with _JUDGE_LOCK:
        if key not in _JUDGE:
            from ifcore.judge.client import JudgeClient  # lazy: a run without judged constraints stays light
            from ifcore.judge.sandbox import Sandbox
            from ifcore.judge.tgv import TGV
            try:
                workers = int(key[2])
            except ValueError:
                workers = 0
            if workers < 1:
                raise ValueError(f"IFCORE_JUDGE_TOOLS must be a positive integer, got {key[2]!r}")
            _JUDGE[key] = TGV(JudgeClient(url, key[1]), Sandbox(workers=workers))
        return _JUDGE[key]


def score(response, constraints, opts: dict, where: str, truncated: bool = False, prompt: str = "") -> dict:
    """score_response under the run's settings `opts`, and the reward checked: a value outside its kind's
    range (RANGES, NaN included) raises ValueError naming the sample `where` instead of poisoning a batch.
    `prompt` is the instruction a judge reads for judged constraints."""
    result = score_response(response, constraints, truncated=truncated, prompt=prompt, **opts)
    lo, hi = RANGES[opts["kind"]]
    if not lo <= result["reward"] <= hi:
        raise ValueError(f"{where}: {opts['kind']} reward {result['reward']!r} outside [{lo}, {hi}] "
                         f"(satisfied {result['satisfied']}, graded {result['graded']}): a bug in ifcore")
    return result


# A prompt's G rollouts share one label: parse it, and let verify compile its plans, once. Keyed by the label
# alone (the error message names the sample, so failures are not cached); bounded in label characters as
# well as entries, as a label may be large. The lock keeps the accounting right under OpenRLHF's threads.
_PARSED: dict[str, tuple[Constraint, ...]] = {}
_PARSED_CHARS = 0
PARSED_MAX_CHARS, PARSED_MAX_ENTRIES = 64 << 20, 8192
_PARSED_LOCK = threading.Lock()


def _drop_nulls(x):
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # numpy arrays from a parquet column
        x = x.tolist()
    if isinstance(x, dict):
        return {k: _drop_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_nulls(v) for v in x]
    return x


def load_constraints(label, where: str) -> tuple[Constraint, ...]:
    """The constraints of one sample's label (schema v1: a JSON string, UTF-8 bytes, or the decoded object).
    A malformed label raises ConstraintError whose message starts with `where` and the field path; so does
    one that is nested too deeply or holds numbers Python cannot take.

    A decoded label has its null fields dropped first: a dataset column of JSON objects goes through Arrow,
    which gives every row every key seen in the column, the missing ones as null.
    """
    global _PARSED_CHARS
    try:
        if isinstance(label, (bytes, bytearray)):
            label = bytes(label).decode("utf-8")
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
            with _PARSED_LOCK:
                if len(_PARSED) >= PARSED_MAX_ENTRIES or _PARSED_CHARS + len(key) > PARSED_MAX_CHARS:
                    _PARSED.clear()
                    _PARSED_CHARS = 0
                if len(key) <= PARSED_MAX_CHARS and key not in _PARSED:
                    _PARSED[key] = constraints
                    _PARSED_CHARS += len(key)
        return constraints
    except ConstraintError:
        raise
    except UnicodeDecodeError as e:
        raise ConstraintError(where, f"not UTF-8 at byte {e.start}") from None
    except RecursionError:
        raise ConstraintError(where, "nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as e:  # whatever parse_label did not name a field for
        raise ConstraintError(where, f"{type(e).__name__}: {e}") from None


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
    return ("ila", "cla", "format_fail", *(f"fmt_{p}" for p in PROBLEMS), "verify_errors", "over_budget",
            "clipped", "constraints", "no_reasoning", "judged", "judge_fallback", "unjudged", *scopes, *extra)


def sample_logs(result: dict, constraints) -> dict[str, float]:
    """One scored response as flat floats under `log_keys()`. ILA and CLA count a failed format as 0;
    over_budget counts the constraints left unchecked when the time budget ran out (or whose label regex ran
    out of its CPU time), clipped is 1 when the response was cut to the maximum size.

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
    logs["over_budget"] = float(result["over_budget"])
    logs["clipped"] = float(result["clipped"])
    logs["constraints"] = float(len(sat))
    logs["no_reasoning"] = float(result.get("reasoning") is not None)  # RAIF: empty or placeholder think block
    for v in result.get("judged") or ():  # judged constraints: by TGV's records, its binary fallback, or not at all
        if v is not None:
            key = {"tgv": "judged", "fallback": "judge_fallback"}.get(v.get("source"), "unjudged")
            logs[key] += 1.0
    for c, ok in zip(constraints, sat):
        s = scope_class(c)
        logs[f"scope_{s}_n"] += 1.0
        logs[f"scope_{s}_sat"] += float(ok)
    return logs


def validate_dataset(lines, label_key: str = "label", input_key: str | None = "prompt") -> tuple[int, list[str]]:
    """`ifcore validate-dataset`: check every sample of a JSONL prompt dataset before a run.

    `lines` are bytes (a file opened in binary mode: a stray byte is reported, decoded with U+FFFD) or str.
    Returns (samples read, errors): one error per problem, each starting with "line N: " and naming the field
    path that is wrong; a file without samples gives the error "no samples (the file is empty)". Never raises
    on the content.
    """
    errors, n = [], 0
    for lineno, row, problem in iter_jsonl(lines):
        n += 1
        where = f"line {lineno}"
        if problem:
            errors.append(f"{where}: {problem}")
        if row is None:
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
        except Exception as e:  # a bug in the checks must not hide the lines after it
            errors.append(f"{where}: {label_key}: {type(e).__name__}: {e}")
    if n == 0:
        errors.append("no samples (the file is empty)")
    return n, errors
