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
