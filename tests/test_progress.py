"""Progress: bars where a person watches, one summary line per long step where nobody does (papermill)."""
import subprocess
import sys

from ifcore import progress

CHECK = ("import os, sys; sys.modules['ipykernel'] = object(); os.environ.pop('IFCORE_PROGRESS', None); "
         "os.environ.pop('HF_HUB_DISABLE_PROGRESS_BARS', None); "
         "from ifcore import progress; print(progress.watched(), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))")


def _watched_under(parent_name: str) -> str:
    """watched() in a 'kernel' whose parent process is named `parent_name` (as a Jupyter server or papermill)."""
    launcher = f"import subprocess; subprocess.run([{sys.executable!r}, '-c', {CHECK!r}])"
    done = subprocess.run(["bash", "-c", f'exec -a {parent_name} "$0" -c "$1"', sys.executable, launcher],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_kernel_of_a_jupyter_server_draws_bars_and_one_of_papermill_does_not():
    assert _watched_under("jupyter-lab") == "True None"
    assert _watched_under("papermill") == "False 1"  # and the libraries' own bars are switched off


def test_unwatched_bars_say_one_line_at_the_end(monkeypatch, capsys):
    monkeypatch.setenv("IFCORE_PROGRESS", "0")
    progress.watched.cache_clear()
    try:
        bar = progress.bar(range(3), desc="warm start")
        assert [x for x in bar] == [0, 1, 2]
        with progress.bar(desc="generate m", total=5, unit="prompt") as b:
            b.update(2)
            b.set_postfix(loss="0.5")
            b.write("a line of its own")
        quiet = progress.bar(range(2), desc="nothing", enabled=False)
        assert list(quiet) == [0, 1]
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith("warm start: 3/3 it in ") and err[1] == "a line of its own"
        assert err[2].startswith("generate m: 2/5 prompt in ") and err[2].endswith(" s (loss=0.5)") and len(err) == 3
    finally:
        progress.watched.cache_clear()


def test_a_watched_kernel_gets_a_notebook_widget_bar(monkeypatch):
    import ipykernel  # noqa: F401 - "in a kernel", as progress.bar asks
    from tqdm.notebook import tqdm as notebook_tqdm

    monkeypatch.setenv("IFCORE_PROGRESS", "1")
    progress.watched.cache_clear()
    try:
        with progress.bar(desc="warm start", total=3) as b:
            assert isinstance(b, notebook_tqdm)  # a widget in JupyterLab, not stderr text
            b.update(3)
        monkeypatch.delitem(sys.modules, "ipykernel")
        with progress.bar(desc="in a terminal", total=1) as b:
            assert not isinstance(b, notebook_tqdm)
    finally:
        progress.watched.cache_clear()


def test_an_interrupt_in_a_kernel_prints_one_line_and_other_errors_keep_their_traceback(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        progress.quiet_interrupts()
        result = shell.run_cell("def deep(n):\n    return deep(n - 1) if n else (_ for _ in ()).throw(KeyboardInterrupt)\n"
                                "deep(30)")
        assert not result.success  # still an error to the kernel: Run All and papermill stop there
        out, err = capsys.readouterr()
        assert (out + err).strip().splitlines() == [
            "Interrupted: the cell stopped cleanly (what finished is kept; run it again to go on)."]
        shell.run_cell("1 / 0")
        out, err = capsys.readouterr()
        assert "ZeroDivisionError" in out + err and "Traceback" in out + err
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
