"""`transformers serve` for a registry model on loopback, and the generation speed benchmark.

`serve(name)` is a context manager: it starts the server under ifcore.reaper (its own process group, every
process below it reaped whatever PID 1 does), waits until /v1/models answers, yields an `Endpoint` for
`generate`, and on exit stops it (SIGTERM, 10 s for requests in flight, then SIGKILL) and waits until nothing of
it is left and its port is free.
On a GPU, vLLM serves the same folder faster: docs/inference.md has the command.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from ifcore import reaper
from ifcore.infer.generate import Endpoint, GenParams, Local
from ifcore.infer.registry import model_id, resolve

# The `transformers` console script, run by this interpreter (no reliance on PATH).
_TRANSFORMERS_CLI = "import sys; from transformers.cli.transformers import main; sys.exit(main())"


def serve_command(name: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto") -> list[str]:
    """The `transformers serve` command line for a registry model, pinned to that model's folder."""
    return [sys.executable, "-c", _TRANSFORMERS_CLI, "serve", str(resolve(name)), "--host", host, "--port", str(port),
            "--device", device]


@contextlib.contextmanager
def serve(name: str, host: str = "127.0.0.1", port: int = 0, device: str = "auto", cpus: set[int] | None = None,
          startup_timeout: float = 300.0):
    """Run `transformers serve` for `name` on host:port (0: a free port) until the block ends; yields an
    Endpoint whose cache key is the model's own id. `cpus` pins the server (and its torch threads) to cores."""
    if not port:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    argv = serve_command(name, host, port, device)
    env = dict(os.environ, OMP_NUM_THREADS=str(len(cpus))) if cpus else None
    with tempfile.TemporaryFile() as log:
        proc = reaper.popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            if cpus:
                os.sched_setaffinity(proc.pid, cpus)  # before torch starts its threads, which inherit it
            base_url = f"http://{host}:{port}/v1"
            deadline = time.monotonic() + startup_timeout
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"transformers serve {name} exited with code {proc.returncode}:\n{tail}")
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                        if json.load(r)["data"]:
                            break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"transformers serve {name}: no answer on {base_url} in {startup_timeout:.0f} s")
                time.sleep(0.5)
            yield Endpoint(model=argv[4], base_url=base_url, api_key="EMPTY", model_id=f"serve:{model_id(name)}")
        finally:
            _stop(proc, host, port)


def serve_forever(name: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto") -> int:
    """`ifcore serve --model NAME`: the server in the foreground until Ctrl-C; returns its exit code."""
    argv = serve_command(name, host, port, device)
    print(f"serving {argv[4]} on http://{host}:{port}/v1 (model name: {argv[4]}); Ctrl-C stops it", flush=True)
    proc = reaper.popen(argv)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(proc, host, port)


def _stop(proc, host: str, port: int) -> None:
    """Stop the server (uvicorn's graceful shutdown waits for the requests in flight, which may be long
    generations: the reaper gives it 10 s, then SIGKILL) and wait until its whole group is gone and the port
    refuses connections, at most 30 s each; what is still there then is reported, not raised over the block's
    own exception."""
    left = reaper.stop(proc, timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            break
        time.sleep(0.1)
    else:
        left.append(f"port {port} still answers")
    if left:
        print(f"ifcore serve: after stopping, still there: {left}", file=sys.stderr, flush=True)


BENCH_TOPICS = ["cats", "the moon", "bread", "rivers", "chess", "volcanoes", "bicycles", "coffee", "winter",
                "libraries", "bees", "trains", "the ocean", "tea", "mountains", "music", "deserts", "owls",
                "gardens", "bridges", "clocks", "rain", "maps", "glass", "forests", "kites", "salt", "lighthouses",
                "paper", "honey", "stars", "wool"]


def bench_generate(name: str = "smollm2-135m", batch_sizes=(1, 32), threads=(1, 2), max_new_tokens: int = 64,
                   server: bool = True, out=sys.stderr) -> list[dict]:
    """`ifcore bench generate`: greedy tokens per second (generated tokens / wall seconds, EOS included) at each
    batch size on `threads` cores each, in process and, with `server`, through `transformers serve` (a batch
    there is that many concurrent requests). Wall time: run it on an otherwise idle machine; each row records the
    1-minute load average before it was timed."""
    import torch

    prompts = [f"Write a short paragraph about {t}." for t in BENCH_TOPICS]
    params = GenParams(max_new_tokens=max_new_tokens)
    available = sorted(os.sched_getaffinity(0))
    saved = (set(available), torch.get_num_threads())
    rows = []

    def measure(backend, backend_name, n):
        backend.complete(prompts[:1], params, [0])  # warm-up: load, first allocations
        for b in batch_sizes:
            inputs = (prompts * (b // len(prompts) + 1))[:b]
            load = os.getloadavg()[0]  # what else ran on the machine (this process's warm-up included)
            t = time.perf_counter()
            tokens = sum(n_tok for _, n_tok in backend.complete(inputs, params, [0] * b))
            seconds = time.perf_counter() - t
            rows.append({"backend": backend_name, "threads": n, "batch": b, "tokens": tokens,
                         "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
                         "load_1m_before": round(load, 2)})
            print(json.dumps(rows[-1]), file=out, flush=True)

    try:
        for n in threads:
            cpus = set(available[:n])
            os.sched_setaffinity(0, cpus)
            torch.set_num_threads(n)
            measure(Local(name, batch_size=max(batch_sizes)), "in-process", n)
            if server:
                with serve(name, cpus=cpus, device="cpu") as endpoint:
                    endpoint.concurrency = max(batch_sizes)
                    measure(endpoint, "transformers serve", n)
    finally:
        os.sched_setaffinity(0, saved[0])
        torch.set_num_threads(saved[1])
    return rows
