"""A Ray cluster's job API over plain HTTP (POST /api/jobs/, GET /api/jobs/{id}, GET .../logs, POST .../stop): what
`ray job submit` does, without the ray package on the client. `address` is the dashboard's, e.g.
http://HEAD:8265 (the default port is 8265; `ray start --head --dashboard-host ...` serves it).

A runtime_env whose working_dir is a local folder is uploaded first, as `ray job submit --working-dir` does: zipped
(less its `excludes`, matched against each path and each of its parts) into a content-addressed package that the
dashboard stores once (PUT /api/packages/gcs/_ray_pkg_<hash>.zip), the job getting its gcs:// URI.

Errors name the address and the job: no dashboard there is a ConnectionError, an unknown job a LookupError,
anything else the server refuses a RuntimeError with its answer, a job that failed or was stopped a RuntimeError
with the end of its logs.
"""
from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import time
import zipfile
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")  # the others: PENDING, RUNNING
TAIL_LINES = 20  # log lines quoted by a failed job's error


def dashboard(address: str | None = None) -> str:
    """The dashboard's base URL: `address`, else $RAY_ADDRESS, else http://127.0.0.1:8265; http:// when no scheme."""
    address = (address or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS).strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    if urllib.parse.urlsplit(address).scheme not in ("http", "https"):
        raise ValueError(f"ray address {address!r}: the job API is the dashboard's http(s) address, e.g. "
                         f"{DEFAULT_ADDRESS} (not a ray:// client or a GCS address)")
    return address


def _call(address: str, method: str, path: str, body: dict | bytes | None = None, timeout: float = 30.0):
    base = dashboard(address)
    request = urllib.request.Request(base + path, method=method,
                                     data=json.dumps(body).encode() if isinstance(body, dict) else body,
                                     headers={"Content-Type": "application/json" if isinstance(body, dict)
                                              else "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace").strip().splitlines()
        error = LookupError if e.code == 404 else RuntimeError
        raise error(f"{method} {base}{path}: HTTP {e.code}: {text[-1] if text else e.reason}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectionError(f"no Ray dashboard at {base} ({reason}); start one with `ray start --head` or pass "
                              "the dashboard's address") from None


def version(address: str | None = None) -> dict:
    """The dashboard's version answer: a cheap check that a cluster's job API is there, before anything is built."""
    return _call(address, "GET", "/api/version", timeout=10.0)


def _package(address: str | None, folder: str, excludes: list[str]) -> str:
    """The gcs:// URI of `folder` zipped (its files at the top, less `excludes`), uploaded unless already there."""
    root = os.path.abspath(folder)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"runtime_env working_dir {folder}: no such folder here")
    patterns = [p.strip("/") for p in excludes]

    def excluded(rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in rel.split("/"))
                   for p in patterns)

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for here, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not excluded(os.path.relpath(os.path.join(here, d), root)))
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(here, name), root)
                if not excluded(rel):  # a fixed date: the same files give the same package
                    info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
                    info.external_attr = (os.stat(os.path.join(here, name)).st_mode & 0o777) << 16
                    with open(os.path.join(here, name), "rb") as f:
                        z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    name = f"_ray_pkg_{hashlib.sha1(data).hexdigest()}.zip"
    try:
        _call(address, "GET", f"/api/packages/gcs/{name}")
    except LookupError:
        _call(address, "PUT", f"/api/packages/gcs/{name}", data, timeout=600.0)
    return f"gcs://{name}"


def submit(address: str | None, entrypoint: str, runtime_env: dict | None = None, submission_id: str | None = None,
           metadata: dict | None = None) -> str:
    """Submit a shell command as a job; returns its submission id. The command runs on the head node in the
    cluster's own environment (its python, its PATH) plus `runtime_env` (env_vars, working_dir, ...); a local
    working_dir is uploaded first (see the module's docstring)."""
    runtime_env = dict(runtime_env or {}) or None
    if runtime_env and "working_dir" in runtime_env and "://" not in runtime_env["working_dir"]:
        runtime_env["working_dir"] = _package(address, runtime_env["working_dir"], runtime_env.pop("excludes", []))
    body = {"entrypoint": entrypoint, "runtime_env": runtime_env, "submission_id": submission_id,
            "metadata": {k: str(v) for k, v in (metadata or {}).items()}}
    return _call(address, "POST", "/api/jobs/", {k: v for k, v in body.items() if v is not None})["submission_id"]


def status(address: str | None, job_id: str) -> dict:
    """The job's details: "status" (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), "message", times, exit code.
    LookupError when the cluster has no such job."""
    return _call(address, "GET", f"/api/jobs/{urllib.parse.quote(job_id)}")


def logs(address: str | None, job_id: str) -> str:
    """Everything the job has printed so far (stdout and stderr); stream it by remembering how much was seen."""
    return _call(address, "GET", f"/api/jobs/{urllib.parse.quote(job_id)}/logs")["logs"]


def stop(address: str | None, job_id: str) -> bool:
    """Ask the cluster to stop the job (SIGTERM to its process group, SIGKILL a few seconds later); False when it
    had already ended."""
    return _call(address, "POST", f"/api/jobs/{urllib.parse.quote(job_id)}/stop")["stopped"]


def placement_groups(address: str | None, job_id: str) -> list[dict]:
    """The placement groups a job's driver created (Ray's state API, GET /api/v0/placement_groups), `job_id` being
    its Ray job id (status()["job_id"], set once the driver has connected): each with "state" (PENDING, CREATED,
    REMOVED, RESCHEDULING), "bundles" ([{"unit_resources": {"GPU": 1.0, ...}}, ...]) and "stats" (its
    "scheduling_state": INFEASIBLE when the cluster's nodes cannot hold it, NO_RESOURCES while others hold them)."""
    found = _call(address, "GET", "/api/v0/placement_groups?detail=1&limit=10000")["data"]["result"]["result"]
    return [pg for pg in found if pg.get("creator_job_id") == job_id]


def resources(address: str | None) -> dict[str, float]:
    """The cluster's resources, its alive nodes' totals summed (GET /api/v0/nodes): {"CPU": 16.0, "GPU": 8.0, ...},
    without memory, object store and the node:* labels."""
    nodes = _call(address, "GET", "/api/v0/nodes?detail=1&limit=10000")["data"]["result"]["result"]
    total: dict[str, float] = {}
    for node in nodes:
        if node.get("state") == "ALIVE":
            for name, amount in (node.get("resources_total") or {}).items():
                if not name.startswith("node:") and name not in ("memory", "object_store_memory"):
                    total[name] = total.get(name, 0.0) + amount
    return total


def wait(address: str | None, job_id: str, timeout: float | None = None, poll: float = 1.0, on_logs=None) -> dict:
    """Poll until the job ends; returns its details when it SUCCEEDED. `on_logs(text)` gets each new piece of its
    logs as it arrives. TimeoutError after `timeout` seconds (the job keeps running: stop it if that is meant);
    RuntimeError naming the job, its status and message, and its last log lines when it FAILED or was STOPPED."""
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = 0
    while True:
        details = status(address, job_id)  # before the logs: a finished job's logs are then complete
        text = logs(address, job_id)
        if on_logs and len(text) > seen:
            on_logs(text[seen:])
        seen = max(seen, len(text))
        if details["status"] == "SUCCEEDED":
            return details
        if details["status"] in TERMINAL:
            tail = [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]
            raise RuntimeError(f"ray job {job_id} at {dashboard(address)} {details['status']}: "
                               f"{details.get('message') or ''}; the end of its logs:\n"
                               + "\n".join("    " + line for line in tail))
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"ray job {job_id} at {dashboard(address)} still {details['status']} after "
                               f"{timeout:g} s; it keeps running (ray_jobs.stop to end it)")
        time.sleep(poll)
