"""Several arms x seeds of `ifcore train`, run side by side: what a paper-stage notebook executes. An arm is a
reward kind (notebook 03) or a name with TrainConfig overrides (notebook 02: RAIF's superior-CoT and BC options).

Each run is its own `ifcore train --config RUN/run_config.json` process (one torch thread unless `config` sets
`threads`), `workers` at a time, logging to RUN/train.log. A run's folder is named by its configuration,
`<arm>-seed<N>-<key>` (the arm's name also in its sweep.json), the key a hash of grpo.run_identity (every TrainConfig
field, the warm start with its defaults, the data files' sha256, the trainer version). So a finished run of the same
configuration is reused, an interrupted one resumes from its last checkpoint, and a run whose steps, learning rate,
model size or data changed trains in a new folder beside the old ones, whose rows are never shown.

Children run under ifcore.reaper, each in its own process group. Interrupting the sweep (KeyboardInterrupt: the
notebook's stop button) or any error in it stops them all (SIGTERM, then SIGKILL after GRACE_SECONDS) and returns
once nothing of them is left; a child whose sweep was killed outright (a restarted kernel) is stopped by its
reaper within a second, which says so in its train.log. An interrupted run resumes from its last checkpoint. A
failed run does not stop the others: the sweep finishes them, then raises with each failed run's log tail.

backend="ray": each run is a job of the Ray cluster whose dashboard is at `address` (ifcore.run.ray_jobs; no ray
package needed here), its entrypoint the same `python -m ifcore train --config RUN/run_config.json` run by the
cluster's python with this process's IFCORE_* variables, so runs_dir (and the cache) must be on a filesystem the
cluster sees. `workers` jobs are in flight at a time; their logs are appended to RUN/train.log as they arrive and
progress is read from metrics.jsonl as for local runs. Interrupting the sweep or any error in it stops every job
in flight through the job API; a job whose sweep was killed outright keeps running on the cluster.
backend="openrlhf": the same, the entrypoint OpenRLHF's trainer on the run's TrainConfig (ifcore.run.openrlhf,
the job's files in RUN/openrlhf/); after the job, metrics.jsonl is written from its curves (ifcore.run.curves) when
it wrote none, so load_metrics and every figure work unchanged. Such a run is never "reused" (its checkpoints are
OpenRLHF's, which resumes it itself with --ckpt.load_enable).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from ifcore import reaper
from ifcore.jsonl import iter_jsonl, read_jsonl
from ifcore.progress import bar as progress_bar

BACKENDS = ("local", "ray", "openrlhf")
GRACE_SECONDS = 10  # between SIGTERM and SIGKILL when a sweep stops its children
POLL_SECONDS = 2.0  # between two looks at the Ray jobs in flight (backend "ray")
PLACEMENT_TIMEOUT = 600.0  # seconds a Ray job's placement group may stay pending before the sweep stops the job
PER_RUN = ("reward", "seed", "steps", "output_dir")  # set by run_arms' arguments, not by `config`
ARM_NAME = re.compile(r"[A-Za-z0-9_.+]+")  # the first part of a run folder's name, before "-seed<N>-<key>"


def finished(path: Path, key: str, steps: int) -> bool:
    """The run in `path` is of configuration `key` and saved its last checkpoint (written after its last row)."""
    try:
        saved = json.loads((path / "config.json").read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return saved == key and (path / "checkpoints" / f"step_{steps:06d}").is_dir()


def _steps_done(path: Path) -> int:
    """The last train step in a run's metrics.jsonl, read while the run writes it (a cut last line is skipped)."""
    try:
        with open(path / "metrics.jsonl", "rb") as f:
            return max((row["step"] for _, row, _ in iter_jsonl(f) if row and row.get("type") == "train"),
                       default=0)
    except FileNotFoundError:
        return 0


def run_arms(arms: list, seeds: list[int], steps: int, runs_dir, config: dict | None = None,
             workers: int = 2, backend: str = "local", progress: bool = True, address: str | None = None,
             resample_warm_start: bool = False, openrlhf_options: dict | None = None,
             placement_timeout: float = PLACEMENT_TIMEOUT):
    """Train every (arm, seed) whose run is not finished; returns a DataFrame, one row per run in (arm, seed) order.

    An arm is a reward kind (the arm of that name trains with that reward), or a (name, overrides) pair: TrainConfig
    fields of that arm over `config` (reward included; not seed, steps or output_dir), e.g. list(dict.items()).
    Names are letters, digits and `_.+`.

    Columns: arm, seed, status ("reused": finished earlier with this configuration, nothing trained; "resumed":
    continued from its last checkpoint, step `from_step`; "trained": from scratch), from_step, path (the run
    folder, for load_metrics / load_rollouts), key (the configuration hash in the folder name). A summary of
    what was reused, resumed and trained is printed before training starts.

    `config` holds TrainConfig fields shared by all runs (model size as `warm_start`, group size, learning rate,
    ...); everything is validated before any run starts. The default dataset and warm-started policy are built
    first, in this process, so that the workers never race to build them. `progress`: one bar over every run's
    steps (a text bar, redrawn in JupyterLab and kept by papermill) and a line per finished run. `backend`: "local"
    (child processes here), "ray" or "openrlhf" (jobs of the cluster whose dashboard is at `address`, default
    $RAY_ADDRESS or http://127.0.0.1:8265; see the module's docstring).

    `resample_warm_start`: each seed gets its own default dataset and warm-started policy (warm_start.seed = the
    run's seed), so that an interval over seeds covers the variation of the data and of the warm start as well as
    that of RL sampling; arms still share each seed's (their differences stay paired). Off: every seed shares one
    (warm_start.seed as configured), and intervals cover RL sampling noise only. Given data or a given model are
    never resampled.

    `openrlhf_options` (backend "openrlhf"): keyword arguments of ifcore.run.openrlhf.command for every run's job,
    e.g. {"gpus_per_node": 1, "gpu_gib": 80}: the GPUs the job asks for (default 8 per node) and their memory, which
    the launch planner sizes the run for. `placement_timeout` (backends "ray" and "openrlhf"): seconds a job's
    placement group may stay pending (OpenRLHF's driver waits on it forever when the cluster lacks the GPUs); then
    the job is stopped and reported as failed, naming what it asked for and what the cluster has. A job waiting
    for GPUs another job of the sweep holds waits too (workers > 1 on a node that fits one job).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: this workspace trains with {BACKENDS}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers: must be an integer >= 1, got {workers!r}")
    if openrlhf_options is not None:
        from ifcore.run.openrlhf import JOB_OPTIONS

        if backend != "openrlhf" or not isinstance(openrlhf_options, dict) or openrlhf_options.keys() - JOB_OPTIONS:
            raise ValueError(f"openrlhf_options: backend 'openrlhf' takes a dict of {', '.join(sorted(JOB_OPTIONS))} "
                             f"(ifcore.run.openrlhf.command's keywords); got {openrlhf_options!r} with backend "
                             f"{backend!r}")
    if isinstance(placement_timeout, bool) or not isinstance(placement_timeout, (int, float)) or \
            not placement_timeout > 0:
        raise ValueError(f"placement_timeout: seconds > 0, got {placement_timeout!r}")
    if backend in ("ray", "openrlhf"):  # no cluster there: said now, before the default assets are built
        from ifcore.run import ray_jobs

        address = ray_jobs.dashboard(address)
        ray_jobs.version(address)
    import pandas as pd

    from ifcore.train.grpo import load_config, resolve_paths, run_identity

    config = dict(config or {})
    named: dict[str, dict] = {}
    for arm in arms:
        if isinstance(arm, str):
            arm = (arm, {"reward": arm})
        if not (isinstance(arm, tuple) and len(arm) == 2 and isinstance(arm[0], str) and isinstance(arm[1], dict)):
            raise ValueError(f"arms: {arm!r} is neither a reward kind nor a (name, TrainConfig overrides) pair")
        name, over = arm
        if not ARM_NAME.fullmatch(name):
            raise ValueError(f"arms: name {name!r} must be letters, digits and _.+ (it names the run folders)")
        if given := [k for k in PER_RUN[1:] if k in over]:
            raise ValueError(f"arms: {name}: {', '.join(given)} is set per run by run_arms' seeds, steps and runs_dir")
        if named.setdefault(name, over) != over:
            raise ValueError(f"arms: two arms are named {name!r}")
    # A reward kind as an arm sets the reward; with only named arms, `config` may set it for all of them.
    per_run = PER_RUN if any(isinstance(a, str) for a in arms) else PER_RUN[1:]
    if given := [k for k in per_run if k in config]:
        raise ValueError(f"config: {', '.join(given)} is set per run by run_arms' arms, seeds, steps and runs_dir")
    runs_dir = Path(runs_dir).resolve()
    base = asdict(load_config(None, **{"threads": 1, **config}, steps=steps))
    def fields(over: dict, seed: int) -> dict:
        out = {**base, **over, "seed": seed}
        return {**out, "warm_start": {**out["warm_start"], "seed": seed}} if resample_warm_start else out

    cfgs = [(name, load_config(None, **fields(over, seed))) for name, over in named.items()
            for seed in dict.fromkeys(seeds)]  # every value checked before anything is built or trained
    _build_warm_starts([cfg for _, cfg in cfgs], workers, progress)
    runs = []
    for arm, cfg in cfgs:
        key = run_identity(cfg, resolve_paths(cfg, progress=progress))[1]  # the default assets are built once
        cfg.output_dir = str(runs_dir / f"{arm}-seed{cfg.seed}-{key}")
        path = Path(cfg.output_dir)
        checkpoints = sorted((path / "checkpoints").glob("step_*[0-9]"))
        status = "reused" if finished(path, key, steps) else "resumed" if checkpoints else "trained"
        from_step = steps if status == "reused" else int(checkpoints[-1].name[5:]) if checkpoints else 0
        runs.append({"arm": arm, "seed": cfg.seed, "status": status, "from_step": from_step, "path": path,
                     "key": key, "cfg": cfg, "done": from_step})

    counts = Counter(r["status"] for r in runs)
    print(f"{runs_dir}: {len(runs)} runs of {steps} steps; reused (finished earlier with this configuration): "
          f"{counts['reused']}, to resume: {counts['resumed']}, to train from scratch: {counts['trained']}", flush=True)
    for r in runs:
        if r["status"] == "resumed":
            print(f"  {r['path'].name} resumes from step {r['from_step']}", flush=True)
    others = [p for p in runs_dir.glob("*-seed*") if p not in {r["path"] for r in runs}]
    if others:
        print(f"  ({len(others)} other run folders in {runs_dir} hold other configurations; not used)", flush=True)

    pending = [r for r in runs if r["status"] != "reused"]
    running: list[tuple[subprocess.Popen, dict, object]] = []
    failed = []
    bar = progress_bar(desc="sweep", total=len(runs) * steps, initial=sum(r["done"] for r in runs), unit="step",
                       enabled=progress)
    t0 = time.time()
    try:
        if backend in ("ray", "openrlhf"):  # takes every pending run: the local loop below then has nothing to do
            _ray_jobs(backend, pending, runs, steps, workers, address, bar, failed, progress, t0,
                      openrlhf_options or {}, placement_timeout)
        while pending or running:
            while pending and len(running) < workers:
                run = pending.pop(0)
                _write_run_files(run)
                cmd = [sys.executable, "-m", "ifcore", "train", "--config", str(run["path"] / "run_config.json")]
                log = open(run["path"] / "train.log", "a")
                log.write(f"$ {' '.join(cmd)}\n")
                log.flush()
                running.append((reaper.popen(cmd, grace=GRACE_SECONDS, stdout=log, stderr=subprocess.STDOUT), run, log))
            time.sleep(0.5)
            for job in [j for j in running if j[0].poll() is not None]:
                proc, run, log = job
                log.close()
                running.remove(job)
                if proc.returncode == 0 and finished(run["path"], run["key"], steps):
                    run["done"] = steps
                    if progress:
                        bar.write(f"{run['path'].name}: done ({time.time() - t0:.0f}s since the sweep started)")
                else:
                    lines = [x for x in (run["path"] / "train.log").read_text(errors="replace").splitlines()
                             if x.strip()]  # splitlines also splits a progress bar's \r updates
                    failed.append(f"{run['path']} (exit status {proc.returncode}); the end of its train.log:\n"
                                  + "\n".join("    " + x for x in lines[-20:]))
            for _, run, _ in running:
                run["done"] = _steps_done(run["path"])
            bar.update(sum(r["done"] for r in runs) - bar.n)
    finally:
        bar.close()
        for proc, _, _ in running:  # all at once; each reaper gives its trainer GRACE_SECONDS, then SIGKILL
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc, _, log in running:
            reaper.stop(proc, timeout=GRACE_SECONDS + 20)  # returns once nothing of the run is left
            log.close()
        if running:
            print(f"sweep stopped: {len(running)} unfinished runs ended ("
                  f"{', '.join(r['path'].name for _, r, _ in running)}); rerun to resume them", flush=True)
    if failed:
        raise RuntimeError(f"training failed in {len(failed)} of {len(runs)} runs (the others finished):\n"
                           + "\n".join(failed))
    # In text, for the record: under papermill the saved notebook keeps only the bar widget's first frame.
    print(f"{runs_dir}: {len(runs)} runs of {steps} steps done in {time.time() - t0:.0f}s; reused: "
          f"{counts['reused']}, resumed: {counts['resumed']}, trained from scratch: {counts['trained']}", flush=True)
    return pd.DataFrame([{k: r[k] for k in ("arm", "seed", "status", "from_step", "path", "key")} for r in runs])


def _build_warm_starts(cfgs: list, workers: int, progress: bool) -> None:
    """The default dataset and warm-started policy of every distinct warm start the runs need and the cache lacks,
    `workers` at a time, each built in a process of its own with one torch thread, as the runs train: on two
    cores two one-thread builds finish sooner than one two-thread build after another (one seed's warm start each
    with resample_warm_start). Runs given a model or data build nothing."""
    import concurrent.futures
    import multiprocessing

    from ifcore.train.sft import cache_key

    needed = {}
    for cfg in cfgs:
        if cfg.model is None or cfg.train_data is None or cfg.test_data is None:
            key, exists = cache_key(cfg.warm_start)
            if not exists:
                needed[key] = cfg.warm_start
    if len(needed) < 2 or workers < 2:  # nothing to build side by side: resolve_paths builds it in this process
        return
    if progress:
        print(f"building {len(needed)} warm starts, {min(workers, len(needed))} at a time (one torch thread each)",
              flush=True)
    t0 = time.time()
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(needed)),
                                                mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in concurrent.futures.as_completed([pool.submit(_build_one, w) for w in needed.values()]):
            done.result()  # a failed build raises here, naming its error
            if progress:
                print(f"  a warm start is built ({time.time() - t0:.0f}s since the builds started)", flush=True)


def _build_one(warm_start: dict) -> None:
    import torch

    from ifcore.train.sft import WarmStartConfig, default_assets

    torch.set_num_threads(1)
    default_assets(WarmStartConfig(**warm_start), progress=False)


def _ray_jobs(backend: str, pending: list, runs: list, steps: int, workers: int, address: str, bar, failed: list,
              progress: bool, t0: float, openrlhf_options: dict, placement_timeout: float) -> None:
    """run_arms' loop for backends "ray" and "openrlhf": takes every pending run, appends each failed run's report
    to `failed` (a job whose placement group stays pending over placement_timeout seconds is stopped and failed)."""
    from ifcore.run import ray_jobs

    # The job trains what it would train here: same cache (the default policy and data built above), same settings.
    runtime_env = {"env_vars": {k: v for k, v in os.environ.items() if k.startswith("IFCORE_")}}
    running: list[list] = []  # [job id, run, characters of its logs in train.log, since when its group is pending]

    def copy_logs(entry: list) -> None:
        text = ray_jobs.logs(address, entry[0])
        with open(entry[1]["path"] / "train.log", "a") as log:
            log.write(text[entry[2]:])
        entry[2] = max(entry[2], len(text))

    try:
        while pending or running:
            while pending and len(running) < workers:
                run = pending.pop(0)
                _write_run_files(run)
                entrypoint = shlex.join(["python", "-m", "ifcore", "train", "--config",
                                         str(run["path"] / "run_config.json")])
                job_env = runtime_env
                if backend == "openrlhf":  # the same TrainConfig as an OpenRLHF command (ifcore.run.openrlhf)
                    from ifcore.run import openrlhf

                    files = openrlhf.job_files(asdict(run["cfg"]), run["path"])
                    spec = openrlhf.job_spec(files.pop("cfg"), str(run["path"]), **files, **openrlhf_options)
                    entrypoint = spec["entrypoint"]
                    job_env = {**spec["runtime_env"],
                               "env_vars": {**runtime_env["env_vars"], **spec["runtime_env"]["env_vars"]}}
                job = ray_jobs.submit(address, entrypoint, job_env, metadata={"ifcore_run": run["path"]})
                with open(run["path"] / "train.log", "a") as log:
                    log.write(f"$ ray job {job} at {address}: {entrypoint}\n")
                running.append([job, run, 0, None])
            time.sleep(POLL_SECONDS)
            for entry in list(running):
                job, run = entry[:2]
                details = ray_jobs.status(address, job)  # before the logs: a finished job's logs are then complete
                copy_logs(entry)
                waiting = []
                if details["status"] == "RUNNING" and details.get("job_id"):
                    with contextlib.suppress(LookupError, RuntimeError):  # a Ray without the state API: no check
                        waiting = [pg for pg in ray_jobs.placement_groups(address, details["job_id"])
                                   if pg["state"] == "PENDING"]
                entry[3] = (entry[3] or time.monotonic()) if waiting else None
                if waiting and time.monotonic() - entry[3] > placement_timeout:
                    ray_jobs.stop(address, job)
                    running.remove(entry)
                    bundles = [b["unit_resources"] for pg in waiting for b in pg["bundles"]]
                    asked = {k: sum(b.get(k, 0) for b in bundles) for k in {k for b in bundles for k in b}}
                    have = ray_jobs.resources(address)
                    failed.append(
                        f"{run['path']} (ray job {job} stopped): its placement group was not ready after "
                        f"{placement_timeout:g} s ({waiting[0].get('stats', {}).get('scheduling_state', 'PENDING')}): "
                        f"it asks for {len(bundles)} bundles, {_listed(asked)} in all; the cluster has "
                        f"{_listed(have)}. Ask for what the cluster has (backend openrlhf: "
                        "openrlhf_options={'gpus_per_node': N}) or start the cluster with those resources "
                        "(placement_timeout: how long a job may wait)")
                    continue
                if details["status"] not in ray_jobs.TERMINAL:
                    continue
                running.remove(entry)
                metrics = run["path"] / "metrics.jsonl"
                if backend == "openrlhf" and details["status"] == "SUCCEEDED" and not (
                        metrics.is_file() and metrics.stat().st_size):  # OpenRLHF's curves, in the trainer's schema
                    from ifcore.run.curves import read_curves

                    metrics.write_text("".join(json.dumps(row) + "\n" for row in read_curves(run["path"])))
                if details["status"] == "SUCCEEDED" and (finished(run["path"], run["key"], steps) if backend == "ray"
                                                         else _steps_done(run["path"]) >= steps):
                    run["done"] = steps
                    if progress:
                        bar.write(f"{run['path'].name}: done ({time.time() - t0:.0f}s since the sweep started)")
                else:
                    lines = [x for x in (run["path"] / "train.log").read_text(errors="replace").splitlines()
                             if x.strip()]
                    failed.append(f"{run['path']} (ray job {job} {details['status']}: {details.get('message')}); "
                                  "the end of its train.log:\n" + "\n".join("    " + x for x in lines[-20:]))
            for _, run, *_ in running:
                run["done"] = _steps_done(run["path"])
            bar.update(sum(r["done"] for r in runs) - bar.n)
    finally:
        for job, *_ in running:
            with contextlib.suppress(Exception):  # already ended, or the cluster is gone: nothing left to stop
                ray_jobs.stop(address, job)
        deadline = time.monotonic() + GRACE_SECONDS
        for entry in running:
            with contextlib.suppress(Exception):
                while (ray_jobs.status(address, entry[0])["status"] not in ray_jobs.TERMINAL
                       and time.monotonic() < deadline):
                    time.sleep(0.5)
                copy_logs(entry)
        if running:
            stopped = ", ".join(f"{job} ({run['path'].name})" for job, run, *_ in running)
            print(f"sweep stopped: {len(running)} unfinished ray jobs stopped ({stopped}); rerun to resume them",
                  flush=True)


def _listed(resources: dict) -> str:
    """{"GPU": 2.0, "CPU": 2.0} as "CPU 2, GPU 2"."""
    return ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())) or "nothing"


def _write_run_files(run: dict) -> None:
    """The run folder with the config its trainer reads and the arm it belongs to (both backends)."""
    run["path"].mkdir(parents=True, exist_ok=True)
    (run["path"] / "run_config.json").write_text(json.dumps(asdict(run["cfg"]), indent=1))
    (run["path"] / "sweep.json").write_text(json.dumps({"arm": run["arm"], "seed": run["seed"]}))


def _arm_seed(path: Path) -> tuple[str, int]:
    if (path / "sweep.json").is_file():  # written by run_arms: the arm's name
        arm = json.loads((path / "sweep.json").read_text())
        return arm["arm"], arm["seed"]
    identity = json.loads((path / "config.json").read_text())["identity"]
    return identity["reward"], identity["seed"]


def load_metrics(paths):
    """All rows of the runs' metrics.jsonl as one DataFrame, with `arm` and `seed` columns (from each run's
    config.json). `paths`: run folders, e.g. run_arms(...)["path"]."""
    import pandas as pd

    frames = []
    for path in map(Path, paths):
        frame = pd.DataFrame(read_jsonl(path / "metrics.jsonl"))
        frame["arm"], frame["seed"] = _arm_seed(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def load_rollouts(paths):
    """Every rollout's reward of the runs (their rollouts.jsonl) as one long DataFrame: arm, seed, step, reward."""
    import pandas as pd

    rows = []
    for path in map(Path, paths):
        arm, seed = _arm_seed(path)
        rows += [(arm, seed, r["step"], x) for r in read_jsonl(path / "rollouts.jsonl") for x in r["rewards"]]
    return pd.DataFrame(rows, columns=["arm", "seed", "step", "reward"])
