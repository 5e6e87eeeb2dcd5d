"""Helpers several test files share (pytest puts tests/ on sys.path: `from helpers import ...`)."""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ifcore.cli import main
from ifcore.infer import registry

REPO = Path(__file__).resolve().parents[1]
# Read at collection, before any test moves IFCORE_CACHE: the dequantized SmolLM2 lives in the user's cache.
USER_CACHE = registry.cache_dir()


def cpu_seconds(fn, *args, repeat: int = 3) -> float:
    """The least CPU time of `repeat` calls of fn(*args), the cyclic GC paused while each runs. Growth tests compare
    these: late in a pytest run a full collection walks every object earlier tests left, and one landing in a timed
    call made a linear 11x read 34x on CI. Other load only ever adds time, hence the least."""
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            fn(*args)
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best


def run_cli(capsys, *argv) -> tuple:
    """(exit status, stdout, stderr lines) of `ifcore ARGV` run in this process."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


def train_killed_at_step(cmd: list, metrics: Path, step: int = 3, timeout: float = 300) -> dict:
    """Start `ifcore train` (cmd) from the repository and SIGKILL it once metrics.jsonl holds the train row of
    `step` (past a checkpoint, with a row the checkpoint does not cover). Returns the environment to rerun it in."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and f'"type": "train", "step": {step},' in metrics.read_text():
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    assert proc.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    return env


class ChatHandler(BaseHTTPRequestHandler):
    """The plumbing of the loopback OpenAI-compatible servers the tests script: silent, JSON in and out.
    A subclass writes do_POST; `rec` is the recorder `loopback` binds."""
    rec = None

    def log_message(self, *args):
        pass

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def _send(self, status: int, payload, headers=()):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, body: dict, text: str):
        """A chat completion whose one choice says `text`."""
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}]})


@contextlib.contextmanager
def loopback(handler: type, rec):
    """Serve `handler` bound to `rec` on 127.0.0.1 in a thread; yields the base URL (…/v1) and stops the server."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("Bound" + handler.__name__, (handler,), {"rec": rec}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


# ---- the report site in a real browser ----------------------------------------------------------------------------

CHECK_SCRIPT = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const W = window.innerWidth, wide = [];
  for (const e of document.body.querySelectorAll('*')) {  // wider than the page, unless a scrolling box holds it
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1) continue;
    let a = e.parentElement, held = false;
    for (; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (['auto', 'scroll', 'hidden'].includes(o) && a.getBoundingClientRect().right <= W + 1) { held = true; break; }
    }
    if (!held) wide.push(e.tagName + '.' + String(e.className).slice(0, 40));
  }
  document.body.setAttribute('data-check', JSON.stringify({images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length, wider: wide.slice(0, 3),
    height: document.documentElement.scrollHeight}));
});
</script>"""


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) where something listens on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.split(":")[1], 16) == port:
                found.add(local.split(":")[0])
    return found


def chromium() -> str | None:
    """The headless Chromium `make test` installs (Debian's chromium; chromium-headless-shell also serves), or None."""
    import shutil

    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


def browser_check(page: Path, width: int = 1400, height: int = 900) -> dict:
    """Load a copy of `page` (with CHECK_SCRIPT) in headless Chromium at width x height, offline: the images and
    how many loaded, the elements wider than the page, the page's height in px."""
    import html as html_lib
    import re

    probe = page.with_name(f".check-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    try:
        done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}",
                               "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                              capture_output=True, text=True, timeout=300)
    finally:
        probe.unlink()
    found = re.search(r'data-check="([^"]*)"', done.stdout)
    assert found, f"{page.name}: the page did not load in Chromium: {done.stderr[-1000:]}"
    return json.loads(html_lib.unescape(found.group(1)))
