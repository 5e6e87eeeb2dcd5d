"""Notebooks: sources carry no outputs, and each executes headless under papermill in a small configuration."""
import json
from pathlib import Path

import nbformat
import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SMALL = {  # parameters that keep each notebook to seconds or a few minutes in the test suite
    "00_constraint_schema.ipynb": {"interactive": False},
}


def test_source_notebooks_have_no_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def test_every_notebook_is_parameterized():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), path.name
        assert path.name in SMALL, f"{path.name} needs a small test configuration"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_without_error(path, tmp_path):
    params = {**SMALL[path.name], "figures_dir": str(tmp_path / "figures")}
    out = tmp_path / path.name
    papermill.execute_notebook(str(path), str(out), parameters=params, cwd=str(ROOT / "notebooks"),
                               kernel_name="python3", progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert list((tmp_path / "figures").glob("*.png")), "the notebook wrote no figure"
