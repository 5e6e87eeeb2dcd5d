"""Where the notebooks write by default (figures/, runs/), whatever the working directory they run in."""
from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
from pathlib import Path

from ifcore import progress


def repo_path(path: str | Path | None, default: str) -> Path:
    """`path` as given (relative to the working directory), or, when it is None, `default` under the repository
    root: the checkout that holds the imported ifcore (an editable install or the source tree, recognized by the
    pyproject.toml beside the package), else the working directory (ifcore installed from a wheel)."""
    if path is not None:
        return Path(path)
    root = Path(__file__).resolve().parents[1]
    return (root if (root / "pyproject.toml").is_file() else Path.cwd()) / default


def notebook_figures(name: str, namespace: dict) -> Path:
    """A notebook's first step: refuse unknown parameters, then say where its figures go (and create the folder);
    progress bars are drawn only when a person watches, and an interrupt says so in one line (ifcore.progress).

    Papermill only warns about a parameter the notebook does not declare (`-p step 2`) and then starts the full
    default run; here it stops the notebook before any work, with a did-you-mean. Declared: the parameters cell's
    annotated names (`__annotations__`); given: the names papermill's injected cell assigns (IPython's `In`).

    Figures go to `figures_dir` when it is set. Otherwise only `make reproduce` (IFCORE_REPRODUCE=1) writes the
    repository's tracked figures/; any other run writes runs/figures/NAME-KEY/, KEY a hash of every parameter's
    value, with those values in parameters.json: a smoke run overwrites neither the committed figures nor the
    figures of a run with other parameters.
    """
    progress.watched()  # decided before any model loads: no bars (ours or the libraries') where nobody watches
    progress.quiet_interrupts()  # the stop button prints one line, not a traceback through the sweep
    declared = list(namespace.get("__annotations__", {}))
    injected = [cell for cell in namespace.get("In", []) if cell.startswith("# Parameters\n")]
    given = [t.id for node in ast.parse(injected[-1]).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)] if injected else []
    unknown = [g for g in given if g not in declared]
    if unknown:
        hints = [f"{u!r}" + "".join(f" (did you mean {m!r}?)" for m in difflib.get_close_matches(u, declared, 1))
                 for u in unknown]
        raise ValueError(f"{name}: unknown parameter {', '.join(hints)}; this notebook's parameters: "
                         f"{', '.join(declared)}")
    if namespace.get("figures_dir") is not None:
        figures, note = Path(namespace["figures_dir"]), ""
    elif os.environ.get("IFCORE_REPRODUCE") == "1":
        figures, note = repo_path(None, "figures"), " (the repository's, tracked: make reproduce)"
    else:
        values = json.dumps({k: namespace[k] for k in declared if k in namespace}, sort_keys=True, default=repr,
                            indent=1)
        figures = repo_path(None, f"runs/figures/{name}-{hashlib.sha256(values.encode()).hexdigest()[:8]}")
        figures.mkdir(parents=True, exist_ok=True)
        (figures / "parameters.json").write_text(values + "\n")
        note = " (this run's own; only make reproduce writes the repository's figures/, figures_dir chooses)"
    figures.mkdir(parents=True, exist_ok=True)
    print(f"figures: {figures}{note}")
    print(machine())
    return figures


def machine() -> str:
    """Which machine and software ran this: CPU model and the flags that change the numbers (bf16, AMX, AVX-512),
    cores, thread settings, torch and transformers versions, and the UTC time. Float results are bit-for-bit
    reproducible only on the same CPU kind, libraries and threads."""
    import datetime
    import platform
    from importlib import metadata

    cpu, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), cpu)
        flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    except OSError:
        pass
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    # torch's vectorized kernels can be held to a lower instruction set: other float results, as on an older CPU
    aten = os.environ.get("ATEN_CPU_CAPABILITY")
    kernels = f", ATEN_CPU_CAPABILITY {aten}" if aten else ""
    return (f"machine: {cpu} ({', '.join(shown) or 'no AVX2'}), {os.cpu_count()} cores, OMP_NUM_THREADS {threads}"
            f"{kernels}; "
            f"torch {version('torch')}, transformers {version('transformers')}, python {platform.python_version()}; "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
