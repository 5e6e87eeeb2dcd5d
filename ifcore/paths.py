"""Where the notebooks write by default (figures/, runs/), whatever the working directory they run in."""
from __future__ import annotations

from pathlib import Path


def repo_path(path: str | Path | None, default: str) -> Path:
    """`path` as given (relative to the working directory), or, when it is None, `default` under the repository
    root: the checkout that holds the imported ifcore (an editable install or the source tree, recognized by the
    pyproject.toml beside the package), else the working directory (ifcore installed from a wheel)."""
    if path is not None:
        return Path(path)
    root = Path(__file__).resolve().parents[1]
    return (root if (root / "pyproject.toml").is_file() else Path.cwd()) / default
