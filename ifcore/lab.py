"""JupyterLab for this workspace (`make lab`): the source notebooks are written to disk as git stores them.

The git filter `make install` sets (nbstripout, see the Makefile) keeps outputs out of git whatever saves a notebook,
but git still lists a notebook saved with outputs as modified until a `git add` (its size changed, so git does not
re-read it). Under `make lab` the server passes each notebooks/*.ipynb it saves (a save or an autosave) through that
same filter first, so a Run All + save leaves the file as committed and `git status` clean. A copy saved elsewhere
(File > Save Notebook As..., e.g. into runs/) keeps its outputs, as does everything without the filter configured.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

SOURCES = re.compile(r"notebooks/[^/]+\.ipynb")  # the tracked source notebooks, relative to the server's root


def strip_on_save(model: dict, path: str, contents_manager, **kwargs) -> None:
    """A Jupyter server pre-save hook (ContentsManager.pre_save_hook): replaces a source notebook's content with
    the git clean filter's output. Any failure is the server's to log; it then saves the notebook unchanged."""
    if model.get("type") != "notebook" or not SOURCES.fullmatch(path.strip("/")):
        return
    root = Path(contents_manager.root_dir)
    clean = subprocess.run(["git", "config", "--get", "filter.nbstripout.clean"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    if not clean:
        return
    import nbformat

    text = nbformat.writes(nbformat.from_dict(model["content"]))
    done = subprocess.run(clean, shell=True, cwd=root, input=text, capture_output=True, text=True, check=True)
    model["content"] = json.loads(done.stdout)
