"""Notebooks: sources carry no outputs, parameters are typed and explained, and each executes headless under
papermill (without --cwd) from the repository root and from notebooks/ in a small configuration."""
import ast
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
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


def stored(path: Path) -> str:
    """The notebook as git stores it (the index: the copy JupyterLab saved may hold outputs that nbstripout's
    filter keeps out of git), or the file itself outside a git checkout."""
    done = subprocess.run(["git", "show", f":{path.relative_to(ROOT)}"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else path.read_text()


def test_source_notebooks_have_no_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = json.loads(stored(path))
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def jupyterlab_save(nb, outputs: bool = True):
    """What JupyterLab adds when it saves a notebook it ran: outputs and counts, the kernel's own display name and
    language_info, cell metadata of its own and the widgets' state."""
    nb.metadata.kernelspec.display_name = "Python 3 (ipykernel)"
    nb.metadata.language_info = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                 "pygments_lexer": "ipython3", "version": "3.11.2"}
    nb.metadata.widgets = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                         "version_minor": 0}}
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.metadata.update({"scrolled": True, "execution": {"iopub.status.idle": "2026-12-07T10:00:00Z"}})
        if outputs and not cell.outputs:
            cell.execution_count = n + 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"output {n}\n")]


@pytest.fixture
def filtered_clone(tmp_path):
    """A git repository holding the notebooks as committed (before any filter), with the notebook filter
    `make install` sets (its Makefile target, run with this interpreter)."""
    repo = tmp_path / "clone"
    (repo / "notebooks").mkdir(parents=True)
    for name in ("Makefile", ".gitattributes", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for path in NOTEBOOKS:
        (repo / "notebooks" / path.name).write_text(stored(path))
    for path in repo.rglob("*"):  # older than the index to come: git then trusts their stat, filtering none again
        os.utime(path, (path.stat().st_mtime - 60,) * 2)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-qm", "notebooks"], cwd=repo, check=True)
    subprocess.run(["make", "-s", "notebook-filter", f"PY={sys.executable}"], cwd=repo, check=True)
    return repo


def git(repo: Path, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def committed_changes(repo: Path) -> str:
    """What a commit would record: the diff, and what `git add -A` stages. (git status alone may still list a
    notebook saved with outputs by another editor: its size changed, so git does not re-read it until an add.)"""
    before = git(repo, "diff")
    git(repo, "add", "-A")
    return before + git(repo, "diff", "--cached") + git(repo, "status", "--porcelain")


@pytest.mark.parametrize("name", [p.name for p in NOTEBOOKS])
def test_a_save_with_outputs_changes_nothing_git_records(filtered_clone, name):
    path = filtered_clone / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    jupyterlab_save(nb)
    nbformat.write(nb, path)
    assert '"output_type": "stream"' in path.read_text()  # the working copy keeps them
    assert committed_changes(filtered_clone) == ""


def test_make_lab_saves_source_notebooks_as_git_stores_them(filtered_clone):
    """The pre-save hook `make lab` gives the server: a Run All + save of a source notebook leaves `git status`
    clean (no add needed); a copy saved outside notebooks/ keeps its outputs; a real edit still shows."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    assert "--ContentsManager.pre_save_hook=ifcore.lab.strip_on_save" in (ROOT / "Makefile").read_text()
    manager = FileContentsManager(root_dir=str(filtered_clone), pre_save_hook="ifcore.lab.strip_on_save")
    source = "notebooks/00_constraint_schema.ipynb"
    model = manager.get(source)
    nb = nbformat.from_dict(model["content"])
    jupyterlab_save(nb)
    manager.save({"type": "notebook", "format": "json", "content": nb}, source)
    assert git(filtered_clone, "status", "--porcelain") == ""
    (filtered_clone / "runs").mkdir()  # git-ignored, as in the repository
    manager.save({"type": "notebook", "format": "json", "content": nb}, "runs/copy.ipynb")
    assert '"output_type": "stream"' in (filtered_clone / "runs" / "copy.ipynb").read_text()
    nb.cells[0].source += "\nOne more line."
    manager.save({"type": "notebook", "format": "json", "content": nb}, source)
    assert git(filtered_clone, "status", "--porcelain") == " M notebooks/00_constraint_schema.ipynb\n"
    assert "+    \"One more line.\"" in git(filtered_clone, "diff")


@pytest.mark.slow
def test_run_all_and_save_of_notebook_00_changes_nothing_git_records(filtered_clone):
    """Notebook 00 executed for real (widgets included, as a person runs it), saved over the tracked file."""
    from nbclient import NotebookClient

    path = filtered_clone / "notebooks" / "00_constraint_schema.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    jupyterlab_save(nb, outputs=False)
    nbformat.write(nb, path)
    assert sum(len(c.get("outputs", [])) for c in nb.cells) > 10
    assert committed_changes(filtered_clone) == ""


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
