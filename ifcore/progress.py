"""Progress bars where a person watches, one line per long step where nobody does (papermill, logs, CI).

A headless papermill run keeps every redraw of a text bar as output (notebook 03's rendering was 89 % progress
lines) and shows a widget bar as an empty box, so ifcore draws bars only when someone watches: a terminal (text), or a
kernel started by a Jupyter server (JupyterLab, Notebook: a notebook widget). Elsewhere `bar` returns a stand-in that prints one
summary line when it closes, and the libraries' own bars (transformers' "Loading weights", the hub's) are turned
off. IFCORE_PROGRESS=1 or 0 overrides the guess. Stdlib only: every part may import it.
"""
from __future__ import annotations

import functools
import os
import sys
import time

# A kernel whose parent process is one of these has a person at a browser; papermill, nbconvert and
# jupyter-execute also start kernels, but nobody watches those.
_JUPYTER_SERVERS = ("jupyter-lab", "jupyter-notebook", "jupyter-server", "jupyterhub-singleuser", "jupyterlab",
                    "jupyter_server", "notebook.app", "voila")


@functools.lru_cache(maxsize=1)
def watched() -> bool:
    """Whether a person watches this process's output (decided once; IFCORE_PROGRESS=1/0 decides instead). When
    nobody does, the progress bars of transformers and huggingface_hub are switched off too."""
    forced = os.environ.get("IFCORE_PROGRESS")
    if forced in ("0", "1"):
        yes = forced == "1"
    elif "ipykernel" in sys.modules:
        try:
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                parent = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            parent = ""
        yes = any(name in parent for name in _JUPYTER_SERVERS)
    else:
        yes = sys.stderr.isatty()
    if not yes:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when transformers is imported
        if "transformers" in sys.modules:
            from transformers.utils.logging import disable_progress_bar

            disable_progress_bar()
    return yes


def bar(iterable=None, *, desc: str, total: int | None = None, initial: int = 0, unit: str = "it",
        enabled: bool = True):
    """tqdm's text bar when `enabled` and watched(); else a stand-in with the same methods that prints
    `desc: N/TOTAL unit in S s (postfix)` once, when it closes (nothing when not `enabled`)."""
    if enabled and watched():
        if "ipykernel" in sys.modules:  # a kernel of JupyterLab: a widget, not stderr text on a pink background
            try:
                from tqdm.notebook import tqdm as notebook_tqdm

                return notebook_tqdm(iterable, desc=desc, total=total, initial=initial, unit=unit)
            except ImportError:  # no ipywidgets: the text bar below
                pass
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, initial=initial, unit=unit, dynamic_ncols=True)
    return _Summary(iterable, desc, total, initial, unit, enabled)


def quiet_interrupts() -> None:
    """In an IPython kernel, a KeyboardInterrupt (the stop button, or Ctrl-C) prints one line instead of the
    traceback through the sweep and the trainer: stopping is what the person asked for, and the runs stop cleanly.
    Other errors keep their tracebacks. Nothing happens outside IPython."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is None:
        return

    def one_line(shell, etype, value, tb, tb_offset=None):
        print("Interrupted: the cell stopped cleanly (what finished is kept; run it again to go on).")

    shell.set_custom_exc((KeyboardInterrupt,), one_line)


class _Summary:
    """What `bar` gives when nobody watches: counts like tqdm, says it once at the end."""

    def __init__(self, iterable, desc, total, initial, unit, enabled):
        self.iterable, self.desc, self.unit, self.enabled = iterable, desc, unit, enabled
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.n = self.initial = initial
        self.postfix, self.closed, self.t0 = "", False, time.time()

    def __iter__(self):
        try:
            for x in self.iterable:
                yield x
                self.n += 1
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, **kv) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kv.items())

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def write(self, text: str) -> None:
        if self.enabled:
            print(text, file=sys.stderr, flush=True)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.enabled and self.n > self.initial:
            of = f"/{self.total}" if self.total is not None else ""
            print(f"{self.desc}: {self.n}{of} {self.unit} in {time.time() - self.t0:.0f} s"
                  + (f" ({self.postfix})" if self.postfix else ""), file=sys.stderr, flush=True)
