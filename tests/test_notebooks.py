"""Notebooks: sources carry no outputs, and each executes headless under papermill in a small configuration."""
import json
from pathlib import Path

import nbformat
import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Parameters that keep each notebook to seconds or a few minutes in the test suite. Notebook 03 trains for
# real: a tiny warm-started policy (built in a temporary cache) and two arms for a few steps.
TINY_POLICY = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                   max_positions=384, pairs=300, steps=30, batch_size=16, train_rows=64, test_rows=16)
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=24, micro_batch=16, eval_prompts=8,
                eval_samples=2, eval_every=2, save_every=2)
SMALL = {
    "00_constraint_schema.ipynb": {"interactive": False},
    "03_scopeif_graded_reward.ipynb": {"rewards": ["ila", "scopeif"], "seeds": [0, 1], "steps": 3,
                                       "model_size": TINY_POLICY, "train_config": TINY_RUN},
}


def test_source_notebooks_have_no_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def test_make_reproduce_executes_every_notebook():
    makefile = (ROOT / "Makefile").read_text()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name} papermill_runs/{path.name}" in makefile, path.name


def test_every_notebook_is_parameterized():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), path.name
        assert path.name in SMALL, f"{path.name} needs a small test configuration"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_without_error(path, tmp_path, monkeypatch):
    params = {**SMALL[path.name], "figures_dir": str(tmp_path / "figures"), "runs_dir": str(tmp_path / "runs")}
    if "runs_dir" not in papermill.inspect_notebook(str(path)):
        del params["runs_dir"]
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))  # the kernel inherits it
    out = tmp_path / path.name
    papermill.execute_notebook(str(path), str(out), parameters=params, cwd=str(ROOT / "notebooks"),
                               kernel_name="python3", progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert list((tmp_path / "figures").glob("*.png")), "the notebook wrote no figure"
