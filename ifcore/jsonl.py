"""The one JSON Lines reader of the package: every error names the file and the line.

Two ways to read: `read_jsonl` for files that must be whole (a bad line is an error, raised as JsonlError
naming `file:line` and the field), and `iter_jsonl` for streams where a bad line is reported and the rest goes
on (`ifcore verify`, `validate-dataset`): it yields (line number, row or None, error or None) for every
non-blank line, decoding bytes with replacement so that one stray byte costs one line, not the run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator


class JsonlError(ValueError):
    """A JSONL file or line the caller cannot use; str() starts with `file:line:` when a line is to blame."""


def _decode(raw: bytes | str) -> tuple[str, str | None]:
    if isinstance(raw, str):
        return raw, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return raw.decode("utf-8", errors="replace"), f"not UTF-8 at byte {e.start} (decoded with U+FFFD)"


def parse_line(text: str, required: tuple[str, ...] = ()) -> dict:
    """One JSONL line as an object with the `required` fields; ValueError (without a location) otherwise."""
    try:
        row = json.loads(text)
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    missing = [k for k in required if k not in row]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    return row


def iter_jsonl(lines: Iterable[bytes | str], required: tuple[str, ...] = (), blank: str | None = None
               ) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, row, None) for a good line and (line number, None, reason) for a bad one; blank lines
    are skipped, or reported as bad with the reason `blank` when it is given. A line that is not UTF-8 is still
    parsed after replacement, and its problem reported."""
    for number, raw in enumerate(lines, 1):
        text, decode_problem = _decode(raw)
        if not text.strip():
            if blank:
                yield number, None, blank
            continue
        try:
            row = parse_line(text, required)
        except ValueError as e:
            yield number, None, f"{decode_problem}; {e}" if decode_problem else str(e)
            continue
        yield number, row, decode_problem


def read_jsonl(path: str | Path, required: tuple[str, ...] = (), allow_empty: bool = False) -> list[dict]:
    """Every row of a JSONL file, each an object with the `required` fields. The first bad line raises
    JsonlError("path:line: reason"); a missing or unreadable file raises JsonlError naming it; so does a file
    without rows unless `allow_empty`."""
    try:
        with open(path, "rb") as f:
            rows = []
            for number, row, problem in iter_jsonl(f, required):
                if row is None or problem:
                    raise JsonlError(f"{path}:{number}: {problem}")
                rows.append(row)
    except FileNotFoundError:
        raise JsonlError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise JsonlError(f"{path}: is a directory, expected a JSONL file") from None
    except PermissionError:
        raise JsonlError(f"{path}: permission denied") from None
    if not rows and not allow_empty:
        raise JsonlError(f"{path}: no rows (the file is empty)")
    return rows
