"""JupyterLab as a person uses it (`make lab`), driven in headless Chromium through chromedriver's WebDriver API
(plain HTTP: no Python package needed): open notebook 00, Run All, move the alpha slider and see g and the figure
follow; then save, and `git status` stays clean. Screenshots go to $IFCORE_SCREENSHOTS when it is set
(IFCORE_SCREENSHOTS=docs/screenshots refreshes the committed ones), else to the test's temporary folder."""
import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_notebooks import filtered_clone, git  # noqa: F401 - the fixture: a clone with the notebook git filter

ROOT = Path(__file__).resolve().parents[1]
BROWSER = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (BROWSER and DRIVER), reason="no chromium and chromedriver (`make chromium` installs Debian's, as root)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body=None, timeout: float = 60):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def wait_for(what: str, check, timeout: float = 120, every: float = 0.25):
    """check()'s first truthy value, polled until `timeout`; AssertionError naming `what` after that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:  # a server still starting
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def started(tmp_path):
    """Popen of each command, stopped (terminate, then kill) and waited for at the end."""
    procs = []

    def start(cmd, **kw):
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{len(procs)}.log").open("w"),
                                      **kw))
        return procs[-1]

    yield start
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture
def lab(filtered_clone, started, tmp_path):  # noqa: F811
    """`make lab`'s server on 127.0.0.1 rooted at a clone with the notebook filter, its settings in tmp_path;
    yields (base URL, token, clone)."""
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "IFCORE_PROGRESS": "1"}
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')  # no "get notified about Jupyter news?" box over the screenshots
    makefile = (ROOT / "Makefile").read_text()
    assert "--ContentsManager.pre_save_hook=ifcore.lab.strip_on_save" in makefile and "--ip=127.0.0.1" in makefile
    started([sys.executable, "-m", "jupyter", "lab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
             f"--ServerApp.root_dir={filtered_clone}", f"--IdentityProvider.token={token}", "--allow-root",
             "--ContentsManager.pre_save_hook=ifcore.lab.strip_on_save", "--LabApp.expose_app_in_browser=True"],
            env=env, cwd=filtered_clone)
    base = f"http://127.0.0.1:{port}"
    wait_for("JupyterLab to answer", lambda: http("GET", f"{base}/api/status?token={token}", timeout=5), 90)
    yield base, token, filtered_clone


@pytest.fixture
def browser(started):
    """A WebDriver session of headless Chromium (chromedriver on 127.0.0.1); yields a call(method, path, body)."""
    port = free_port()
    started([DRIVER, f"--port={port}", "--allowed-ips=127.0.0.1"])
    base = f"http://127.0.0.1:{port}"
    wait_for("chromedriver", lambda: http("GET", f"{base}/status", timeout=5)["value"]["ready"], 30)
    caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": BROWSER, "args": [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"]}}}}
    session = http("POST", f"{base}/session", caps, timeout=120)["value"]["sessionId"]

    def call(method, path, body=None):
        return http(method, f"{base}/session/{session}{path}", body, timeout=120)["value"]

    try:
        yield call
    finally:
        http("DELETE", f"{base}/session/{session}", timeout=60)


def js(call, script: str, *args):
    return call("POST", "/execute/sync", {"script": script, "args": list(args)})


# The open notebook panel's state, read through the app object JupyterLab exposes (expose_app_in_browser).
STATE = """
const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
if (!panel || !panel.sessionContext || !panel.content) return null;
const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
const code = panel.content.widgets.filter(c => c.model.type === 'code');
const outputs = code.flatMap(c => Array.from({length: c.model.outputs.length}, (_, i) => c.model.outputs.get(i).type));
const view = [...document.querySelectorAll('.widget-output')].map(e => e.innerText).join('\\n');
const img = [...document.querySelectorAll('.widget-output img')].map(i => i.src).join('');
return {kernel: kernel ? kernel.status : null, ran: code.filter(c => c.model.executionCount !== null).length,
        code: code.length, errors: outputs.filter(t => t === 'error').length, outputs: outputs.length,
        g: (view.match(/g = [0-9.]+/) || [null])[0], img: img.length ? img : null,
        dirty: panel.context.model.dirty, slider: document.querySelectorAll('.widget-slider .noUi-handle').length,
        alpha: (document.querySelector('.widget-slider .widget-readout') || {}).innerText || null,
        drawn: [...document.querySelectorAll('.widget-output img')].every(i => i.complete && i.naturalWidth > 0)};
"""


def settled(call, ready) -> dict | None:
    """The panel's state when `ready(state)` holds with the kernel idle and nothing changes for half a second (the
    widgets' messages come in bursts: an idle kernel between two of them is no finished redraw), else None."""
    first = js(call, STATE)
    if not (first and first["kernel"] == "idle" and ready(first)):
        return None
    time.sleep(0.5)
    return first if js(call, STATE) == first else None


def test_run_notebook_00_move_the_slider_and_save(lab, browser, tmp_path):
    base, token, clone = lab
    shots = Path(os.environ.get("IFCORE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)

    def shot(name):  # once the images are decoded and two frames painted: no half-drawn figure
        browser("POST", "/execute/async", {"args": [], "script": """const done = arguments[0];
            Promise.all([...document.images].map(i => i.decode().catch(() => null)))
              .then(() => requestAnimationFrame(() => requestAnimationFrame(() => done(true))));"""})
        browser("GET", "/screenshot")  # thrown away: headless Chromium paints a just-scrolled-to image only then
        (shots / f"{name}.png").write_bytes(base64.b64decode(browser("GET", "/screenshot")))

    browser("POST", "/url", {"url": f"{base}/lab/tree/notebooks/00_constraint_schema.ipynb?token={token}"})
    wait_for("the notebook open with its kernel idle", lambda: (js(browser, STATE) or {}).get("kernel") == "idle")
    shot("jl_00_opened")
    js(browser, "window.jupyterapp.commands.execute('notebook:run-all-cells');")
    done = wait_for("Run All to finish", lambda: settled(
        browser, lambda s: s["ran"] == s["code"] and s["g"] and s["img"] and s["slider"] and s["drawn"]))
    assert done["errors"] == 0 and done["outputs"] > 10, done

    # The widgets open on a violated constraint, so the slider moves g: one step right (alpha 3 -> 3.5).
    js(browser, "document.querySelector('.widget-slider').scrollIntoView({block: 'start'});")
    shot("jl_00_widgets_initial")
    handle = browser("POST", "/element", {"using": "css selector", "value": ".widget-slider .noUi-handle"})
    handle = next(iter(handle.values()))
    browser("POST", f"/element/{handle}/click", {})
    browser("POST", f"/element/{handle}/value", {"text": "\ue014"})  # ArrowRight
    moved = wait_for("g and the figure to follow the slider", lambda: settled(
        browser, lambda s: s["alpha"] == "3.50" and s["drawn"] and s["g"] != done["g"] and s["img"] != done["img"]), 60)
    assert float(moved["g"].split("= ")[1]) < float(done["g"].split("= ")[1])  # a harsher alpha, a lower g
    js(browser, "document.querySelector('.widget-slider').scrollIntoView({block: 'start'});")
    shot("jl_00_widgets_moved")

    # Save (as Ctrl-S does): the file on disk is what git stores, so git has nothing to report.
    js(browser, "window.jupyterapp.commands.execute('docmanager:save');")
    wait_for("the save", lambda: js(browser, STATE)["dirty"] is False, 60)
    assert git(clone, "status", "--porcelain") == ""
