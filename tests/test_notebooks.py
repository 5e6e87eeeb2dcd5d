"""Notebooks: sources carry no outputs, parameters are typed and explained, and each executes headless under
papermill (without --cwd) from the repository root and from notebooks/ in a small configuration."""
import ast
import contextlib
import json
import re
from importlib import resources
from pathlib import Path

import nbformat
import papermill
import pytest

import scripted_judge
from helpers import browser_check, chromium
from ifcore.paths import repo_path
from ifcore.report import build as build_report
from test_report import PAGE_BUDGET

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Parameters that keep each notebook to seconds or a few minutes in the test suite; the stage notebooks' are their
# `test` preset (ifcore.presets: a tiny warm-started policy built in a temporary cache, a few steps).
SMALL = {
    "00_constraint_schema.ipynb": {"interactive": False, "judge_responses": 4, "judge_model": "scripted"},
    "01_cot_preliminary_study.ipynb": {"model": str(ROOT / "tests/data/tiny_chat_llama"), "subset": 3,
                                       "max_new_tokens": 8},
    "02_raif_superior_cot.ipynb": {"preset": "test"},
    "03_scopeif_graded_reward.ipynb": {"preset": "test"},  # ifcore.presets: the same table Run All reads
    "04_rtt_token_rewards.ipynb": {"preset": "test"},
}
FIGURES = {"00_constraint_schema.ipynb": ["00_graded_reward_curves", "00_judge_accuracy", "00_scopeif_test_coverage"],
           # the tiny test model writes no tags and no reasoning: those figures would be empty and are not drawn
           "01_cot_preliminary_study.ipynb": ["01_cot_effect_by_type", "01_reasoning_length", "01_scores_by_mode"],
           "02_raif_superior_cot.ipynb": ["02_heldout_isr_csr_reasoning", "02_reasoning_keywords",
                                          "02_reasoning_length_per_seed", "02_training_dynamics"],
           "03_scopeif_graded_reward.ipynb": ["03_csr_per_scope", "03_heldout_isr_csr", "03_identical_pair_fraction",
                                              "03_reward_distributions"],
           "04_rtt_token_rewards.ipynb": ["04_discriminator_training", "04_rtt_vs_grpo",
                                          "04_token_heatmap"]}


def test_source_notebooks_have_no_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def test_make_reproduce_executes_every_notebook_without_cwd():
    makefile = (ROOT / "Makefile").read_text()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name} papermill_runs/{path.name}" in makefile, path.name
    papermill = [line for line in makefile.splitlines() if "bin/papermill" in line]
    assert papermill and not any("--cwd" in line for line in papermill), papermill


def test_every_parameter_has_a_type_and_a_comment():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(cells) == 1, f"{path.name} needs one cell tagged parameters"
        assert path.name in SMALL, f"{path.name} needs a small test configuration"
        assert path.name in FIGURES, f"{path.name}: list the figures it writes in FIGURES"
        assigned = [node for node in ast.parse(cells[0].source).body if isinstance(node, (ast.Assign, ast.AnnAssign))]
        assert all(isinstance(node, ast.AnnAssign) for node in assigned), f"{path.name}: a parameter lacks a type"
        shown = papermill.inspect_notebook(str(path))  # what `papermill --help-notebook` prints
        assert list(shown) == [node.target.id for node in assigned], f"{path.name}: papermill misses a parameter"
        for name, p in shown.items():
            assert p["inferred_type_name"] != "None" and p["help"], f"{path.name}: {name} {p}"


def test_defaults_are_found_from_the_package_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert repo_path(None, "figures") == ROOT / "figures"
    assert repo_path(None, "runs/03_scopeif_graded_reward") == ROOT / "runs" / "03_scopeif_graded_reward"
    assert repo_path("elsewhere", "figures") == Path("elsewhere")  # an explicit path is the caller's
    # Notebook 00 reads the package's copy of the formalizations: the same file the tests read.
    shipped = resources.files("ifcore") / "data" / "scopeif_test" / "formalized.jsonl"
    assert shipped.read_bytes() == (ROOT / "tests" / "data" / "scopeif_formalized.jsonl").read_bytes()


def test_a_parameter_the_notebook_does_not_declare_stops_it_with_a_did_you_mean(tmp_path, monkeypatch, capsys):
    from ifcore import paths

    monkeypatch.setattr(paths, "repo_path", lambda path, default: tmp_path / default)
    monkeypatch.delenv("IFCORE_REPRODUCE", raising=False)
    params = "# Parameters (papermill overrides these)\nsteps: int = 40\nseeds: list = [0]\nfigures_dir: str = None\n"
    ns = {"__annotations__": {"steps": int, "seeds": list, "figures_dir": str}, "steps": 2, "seeds": [0],
          "figures_dir": None, "In": ["", params, "# Parameters\nstep = 2\nseeds = [0]\n"]}
    with pytest.raises(ValueError, match=r"unknown parameter 'step' \(did you mean 'steps'\?\)"):
        paths.notebook_figures("03_x", ns)
    # Declared names only: figures go to a folder of this run's own, never to the repository's tracked figures/.
    ns["In"][-1] = "# Parameters\nsteps = 2\n"
    mine = paths.notebook_figures("03_x", ns)
    assert mine.parent == tmp_path / "runs" / "figures" and mine.name.startswith("03_x-")
    assert json.loads((mine / "parameters.json").read_text()) == {"figures_dir": None, "seeds": [0], "steps": 2}
    assert paths.notebook_figures("03_x", {**ns, "steps": 3}) != mine  # other values, another folder
    assert paths.notebook_figures("03_x", {**ns, "figures_dir": str(tmp_path / "f")}) == tmp_path / "f"
    monkeypatch.setenv("IFCORE_REPRODUCE", "1")  # make reproduce alone writes the committed figures
    assert paths.notebook_figures("03_x", ns) == tmp_path / "figures"
    # Every rendering says which machine and software produced it.
    assert re.search(r"^machine: .+ \d+ cores, OMP_NUM_THREADS .*; torch .+, transformers .+; 20\d\d-\d\d-\d\d",
                     capsys.readouterr().out, re.M)


@pytest.mark.slow
def test_a_typo_in_a_papermill_parameter_stops_notebook_03_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))  # nothing may be built there
    with pytest.raises(papermill.PapermillExecutionError, match="did you mean 'steps'"):
        papermill.execute_notebook(str(ROOT / "notebooks" / "03_scopeif_graded_reward.ipynb"),
                                   str(tmp_path / "out.ipynb"), parameters={"step": 2}, kernel_name="python3",
                                   progress_bar=False)
    assert not (tmp_path / "cache").exists()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One cache (the tiny warm start) and one runs folder for all executions: the second run of notebook 03
    finds the first one's runs."""
    return tmp_path_factory.mktemp("notebooks")


def execute(path: Path, cwd: Path, shared: Path, tmp_path: Path, monkeypatch, **params) -> tuple[str, str]:
    """Run the notebook as `papermill` run in `cwd` would (no --cwd); returns the text it printed (stdout and
    stderr) and the text of what it displayed (tables and other results)."""
    params = {**params, "figures_dir": str(tmp_path / "figures")}
    if "runs_dir" in papermill.inspect_notebook(str(path)):
        params["runs_dir"] = str(shared / "runs")
    monkeypatch.setenv("IFCORE_CACHE", str(shared / "cache"))  # the kernel inherits it
    monkeypatch.chdir(cwd)
    out = tmp_path / path.name
    with contextlib.ExitStack() as stack:
        if "judge_url" in papermill.inspect_notebook(str(path)):  # the judge section: a scripted judge on loopback
            _, params["judge_url"] = stack.enter_context(scripted_judge.serve())
        papermill.execute_notebook(str(path), str(out), parameters=params, kernel_name="python3", progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sorted(p.stem for p in (tmp_path / "figures").glob("*.png")) == FIGURES[path.name]
    # Nobody watches a papermill run: no progress bar redraws and no widget boxes in what a reviewer reads.
    assert not [o for o in outputs if "%|" in o.get("text", "") or "it/s]" in o.get("text", "")]
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    page = build_report(tmp_path, tmp_path / "report")[1]
    if chromium():  # as a reviewer opens it: loads, images load, fits the page width and the page budget
        seen = browser_check(page)
        assert seen["broken"] == 0 and seen["wider"] == [] and seen["height"] <= PAGE_BUDGET * 900, seen
    return ("\n".join(o.get("text", "") for o in outputs),
            "\n".join(o.get("data", {}).get("text/plain", "") for o in outputs))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_from_the_repository_root(path, shared, tmp_path, monkeypatch):
    printed, shown = execute(path, ROOT, shared, tmp_path, monkeypatch, **SMALL[path.name])
    if path.name.startswith("03"):
        assert "2 seeds (0, 1): intervals are 95% Student-t intervals over seeds" in printed
        assert "paired over 2 seeds" in printed and "no spread" not in printed
        assert "RL-ILA" in shown and "ScopeIF" in shown and "scopeif" not in shown  # one naming of arms
        assert re.search(r"CSR step 0 +CSR end .*\narm +seed\b", shown)  # the per-seed table


@pytest.mark.slow
def test_notebook_00_executes_from_the_notebooks_folder(shared, tmp_path, monkeypatch):
    path = ROOT / "notebooks" / "00_constraint_schema.ipynb"
    printed, _ = execute(path, ROOT / "notebooks", shared, tmp_path, monkeypatch, **SMALL[path.name])
    assert "1413 constraints of 268 instructions" in printed  # the shipped formalizations, found from notebooks/
    # section 6: the judge it was given judged every formalized constraint of the 4 responses, and said what it found
    assert "judge scripted (tgv)" in printed and re.search(r"pointwise accuracy .* over \d+ judged of \d+ items", printed)
    assert re.search(r"The (judge beats|judge is worse|data cannot tell)", printed)


@pytest.mark.slow
def test_notebook_03_with_one_seed_says_that_no_spread_can_be_estimated(shared, tmp_path, monkeypatch):
    # From notebooks/, with seeds [0]: the runs of seed 0 are reused when the execution from the root ran first.
    path = ROOT / "notebooks" / "03_scopeif_graded_reward.ipynb"
    reusable = list((shared / "runs").glob("*-seed0-*"))
    printed, shown = execute(path, ROOT / "notebooks", shared, tmp_path, monkeypatch,
                             **{**SMALL[path.name], "seeds": [0]})
    assert "Only 1 seed (0): no spread over seeds can be estimated" in printed
    assert "(1 seed)" in shown and "twice the seed spread" not in printed
    assert not any(line.endswith(("positive.", "negative.")) for line in printed.splitlines())
    assert ("reused" if reusable else "trained") in shown  # the table of what happened to each run
