"""The Ray job backend (ifcore.run.ray_jobs, run_arms(backend="ray")) against a real one-node Ray cluster on
loopback: a head started in a fresh network namespace (tests/ray_cluster.py), its job API driven over HTTP by
ifcore's client from inside the same namespace.

The scenario runs in that namespace as this file's __main__ and reports what it saw as JSON; the test checks it:
`ifcore train` submitted as a job runs to SUCCEEDED, its logs reach RUN/train.log, its metrics.jsonl rows equal
those of the same run trained locally, its TensorBoard events hold the same curves; a failed job is reported with
its log tail; an interrupted sweep stops its job (STOPPED, no trainer process left). Backend "openrlhf" goes the
same way with the job ifcore.run.openrlhf builds for the run (its files, working_dir, env_vars, and its OpenRLHF
command checked by the pinned parser), whose command is replaced by one printing OpenRLHF's "Global step N: {...}"
lines (OpenRLHF itself needs GPUs): metrics.jsonl is then written from them by ifcore.run.curves. A job asking
for GPUs the cluster lacks (gpus_per_node through run_arms' openrlhf_options) is stopped after placement_timeout and
the sweep fails naming the resources asked for and those the cluster has.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ray_cluster import LAUNCH

from ifcore.run import ray_jobs

REPO = Path(__file__).resolve().parents[1]
# The small configuration of tests/test_sweep.py, with the shorter warm start of tests/test_notebooks.py: the rows
# only have to be the same on the cluster and here, not to earn rewards.
TINY_MODEL = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                  max_positions=256, pairs=300, steps=30, batch_size=16, train_rows=64, test_rows=8)
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=32, micro_batch=16, eval_prompts=4,
                eval_samples=1, eval_every=2, save_every=1, warm_start=TINY_MODEL)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_dashboard_is_named_before_anything_starts(tmp_path):
    address = f"http://127.0.0.1:{_closed_port()}"
    for call in (lambda: ray_jobs.version(address), lambda: ray_jobs.status(address, "raysubmit_x")):
        with pytest.raises(ConnectionError, match=f"no Ray dashboard at {address} "):
            call()
    pytest.importorskip("torch")
    from ifcore.run.sweep import run_arms

    with pytest.raises(ConnectionError, match=f"no Ray dashboard at {address}"):
        run_arms(["cla"], [0], 2, tmp_path / "runs", config=TINY_RUN, backend="ray", address=address[7:])
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match="ray://head:10001.*dashboard's http"):
        ray_jobs.dashboard("ray://head:10001")
    assert ray_jobs.dashboard(" 10.0.0.5:8265/ ") == "http://10.0.0.5:8265"


@pytest.mark.slow
def test_ray_jobs_on_a_loopback_cluster(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a network namespace for the loopback cluster needs root (tests and CI run as root)")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip (util-linux, iproute2) missing: no network namespace for the cluster")
    pytest.importorskip("ray", reason="the `cluster` extra (make test installs it)")
    pytest.importorskip("torch")
    from ifcore.train.sft import WarmStartConfig, default_assets

    cache = tmp_path / "cache"
    env = {**os.environ, "IFCORE_CACHE": str(cache)}
    os.environ["IFCORE_CACHE"] = str(cache)
    try:
        default_assets(WarmStartConfig(**TINY_MODEL), progress=False)  # built once, before any job needs it
    finally:
        os.environ.pop("IFCORE_CACHE")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"unshare --net refused here: {probe.stderr.strip()}")
    report = tmp_path / "report.json"
    done = subprocess.run([*LAUNCH, sys.executable, str(REPO / "tests" / "ray_cluster.py"), "1",
                           sys.executable, __file__, str(tmp_path), str(report)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and report.exists(), done.stdout[-3000:] + done.stderr[-5000:]
    seen = json.loads(report.read_text())

    # ifcore train as a Ray job: finished, its logs streamed into train.log, the same rows as a local run
    run = seen["ray_run"]
    assert run["status"] == ["trained"] and run["finished"], run
    assert run["log"].startswith("$ ray job raysubmit_") and "at http://127.0.0.1:8265: python -m ifcore train" \
        in run["log"] and "Running entrypoint for job" in run["log"] and "grpo cla" in run["log"], run["log"]
    assert run["rows"] == seen["local_rows"] and [(r["type"], r["step"]) for r in run["rows"]] == \
        [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]
    assert run["columns"] == seen["local_columns"]
    # the curves read back from its TensorBoard events are its metrics.jsonl rows (floats kept in 32 bits)
    assert len(run["curves"]) == len(run["all_rows"])
    for curve, row in zip(run["curves"], run["all_rows"]):
        numbers = {k: v for k, v in row.items() if k not in ("type", "step") and isinstance(v, (int, float))}
        assert (curve["type"], curve["step"]) == (row["type"], row["step"]) and curve.keys() - {"type", "step"} \
            == numbers.keys() and all(curve[k] == pytest.approx(v, rel=1e-6, abs=1e-7) for k, v in numbers.items())
    assert "reused: 1" in seen["again"]  # a second sweep reuses the run the cluster trained

    # the client: a failed job is reported with its status, message and log tail
    assert seen["failed"].startswith("ray job ") and "FAILED" in seen["failed"] and "exit code 3" in seen["failed"]
    assert seen["failed"].rstrip().endswith("boom")
    assert seen["streamed"] == seen["full_logs"] and "boom" in seen["streamed"]
    assert seen["unknown"].endswith("/api/jobs/raysubmit_none: HTTP 404: Job raysubmit_none does not exist")

    # an interrupted sweep: its job was waited on with a timeout, then stopped; no trainer is left
    stop = seen["interrupt"]
    assert stop["timeout"].startswith(f"ray job {stop['job']} at http://127.0.0.1:8265 still RUNNING after 0.5 s")
    assert stop["interrupted"] and stop["status"] == "STOPPED", stop
    assert f"sweep stopped: 1 unfinished ray jobs stopped ({stop['job']} (cla-seed1-" in stop["printed"]
    assert stop["trainers_left"] == [] and 0 < stop["steps_done"] < 50

    # backend openrlhf: the run's OpenRLHF job ran on the cluster from the repository, its curves became metrics.jsonl
    orl = seen["openrlhf"]
    assert orl["argv"][:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"] and orl["status"] == ["trained"]
    assert "in the working_dir: True IFCORE_REWARD=cla" in orl["log"], orl["log"]
    assert orl["rows"] == [{"type": "train", "step": s, "reward_mean": 0.25 * s, "kl": 0.01,
                            "openrlhf/policy_loss": -0.5} for s in (1, 2)]
    assert orl["arms"] == [["cla", 0], ["cla", 0]]
    # the plug-ins' worker_process_setup_hook in a job whose driver calls ray.init(runtime_env=...) as
    # train_ppo_ray does (ray issue 61350 on Ray 2.54): the job succeeds and its actors hold the pending patches,
    # with no OpenRLHF, deepspeed or vllm module imported by the hook
    hook = seen["hook"]
    assert hook["hook"] == "ifcore.integrations.openrlhf_plugins.install"
    assert hook["status"] == "SUCCEEDED", hook["logs"][-3000:]
    got = json.loads(next(x for x in hook["logs"].splitlines() if x.startswith("PROBE "))[6:])
    assert got["finder"] and got["beta"] == "0.5" and got["gpu_modules"] == []
    assert got["patched"] == ["rtt"]  # the experience maker patched when the actor imported it
    assert got["pending"] == {"openrlhf.trainer.ppo_utils.experience_maker":
                              ["RemoteExperienceMaker.compute_advantages_and_returns"],
                              "openrlhf.utils.deepspeed.deepspeed": ["DeepspeedStrategy.save_model"]}
    # a job whose placement group the cluster cannot hold: stopped after placement_timeout, the sweep failed by name
    pg = seen["placement"]
    assert pg["argv"][pg["argv"].index("--actor.num_gpus_per_node") + 1] == "2"  # openrlhf_options reached job_spec
    assert pg["error"].startswith("training failed in 1 of 1 runs"), pg["error"]
    assert f"(ray job {pg['job']} stopped): its placement group was not ready after 5 s (INFEASIBLE): it asks for " \
           "2 bundles, CPU 2, GPU 2 in all; the cluster has CPU 1. Ask for what the cluster has" in pg["error"]
    assert pg["status"] == "STOPPED"
    print("seconds per phase (provisional, a busy machine):", seen["seconds"])


HOOK_PROBE = """
import json, os, sys
import ray
# as openrlhf 0.11.2's cli/train_ppo_ray.py train() starts: its own runtime_env, inside a job that has the hook
ray.init(runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN",
                                   "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1"}})

@ray.remote(num_cpus=0)
class Probe:
    def report(self):
        from ifcore.integrations import openrlhf_plugins as p
        seen = {"finder": p._FINDER in sys.meta_path,
                "pending": {m: sorted(f"{c}.{n}" for c, n, *_ in v) for m, v in p._FINDER.pending.items()},
                "gpu_modules": [m for m in sys.modules if m.split(".")[0] in ("deepspeed", "vllm", "openrlhf")],
                "beta": os.environ.get("IFCORE_RTT_BETA"), "ray": ray.__version__}
        # then OpenRLHF imports its experience maker (the wheel's file, GPU-only imports stubbed): patched
        sys.path.insert(0, "tests")  # the job's working_dir is the repository
        from test_openrlhf_plugins import stub_openrlhf
        modules = dict(sys.modules)  # the stubs (a stand-in ray among them) leave with the import
        try:
            stub_openrlhf(os.environ["WHEEL_DIR"], lambda d, k, v: d.__setitem__(k, v))
            from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
            seen["patched"] = list(RemoteExperienceMaker.compute_advantages_and_returns._ifcore)
        finally:
            for name in set(sys.modules) - set(modules):
                del sys.modules[name]
            sys.modules.update(modules)
        return seen

print("PROBE", json.dumps(ray.get(Probe.remote().report.remote())))
"""


def hook_probe(address: str, work: Path) -> dict:
    """Ray 2.54's driver asserted in ray.init(runtime_env=...) when its job carried worker_process_setup_hook (ray
    issue 61350, fixed by PR 61473, in 2.55.0: the wheel's pin); OpenRLHF's driver always calls it. A job with the
    plug-ins' runtime_env whose driver does the same, and an actor that says which patches wait for OpenRLHF."""
    from dataclasses import asdict

    from ifcore.run import openrlhf
    from ifcore.train.grpo import load_config

    cfg = asdict(load_config(None, token_advantages="uniform", rtt_beta=0.5))
    spec = openrlhf.job_spec(cfg, "/cluster/runs/x", model=str(REPO / "tests" / "data" / "tiny_chat_llama"),
                             prompt_data="/cluster/train.jsonl", n_prompts=4000, max_prompt_len=100)
    import zipfile

    (wheel,) = (REPO / ".cache" / "openrlhf-0.11.2").glob("openrlhf-0.11.2-*.whl")
    with zipfile.ZipFile(wheel) as z:  # the wheel's Python files, as tests/test_openrlhf_plugins.py unpacks them
        for name in z.namelist():
            if "/openrlhf/" in name and name.endswith(".py"):
                target = work / "wheel" / name[name.index("openrlhf/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    spec["runtime_env"]["env_vars"]["WHEEL_DIR"] = str(work / "wheel" / "openrlhf")
    job = ray_jobs.submit(address, shlex.join(["python", "-c", HOOK_PROBE]), spec["runtime_env"])
    try:
        status = ray_jobs.wait(address, job, timeout=300, poll=0.5)["status"]
    except RuntimeError as e:
        status = str(e)
    return {"hook": spec["runtime_env"].get("worker_process_setup_hook"), "status": status,
            "logs": ray_jobs.logs(address, job)}


def scenario(work: Path, report: Path) -> None:
    """Inside the namespace, with the cluster up at $RAY_ADDRESS: drive it, write what was seen to `report`."""
    import contextlib
    import io

    import psutil

    from ifcore.jsonl import read_jsonl
    from ifcore.run import openrlhf
    from ifcore.run.curves import read_curves
    from ifcore.train.grpo import TIMING_KEYS
    from ifcore.run.sweep import load_metrics, run_arms

    address = os.environ["RAY_ADDRESS"]
    seen = {"seconds": {}}
    t0 = time.monotonic()

    def lap(name):
        nonlocal t0
        seen["seconds"][name] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()

    def rows(path):
        return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in read_jsonl(path / "metrics.jsonl")]

    # 1. one arm x one seed on the cluster, then the same run here
    runs = run_arms(["cla"], [0], 2, work / "ray_runs", config=TINY_RUN, workers=1, backend="ray", progress=False)
    lap("ray run")
    path = runs["path"][0]
    seen["ray_run"] = {"status": list(runs["status"]), "finished": (path / "checkpoints" / "step_000002").is_dir(),
                       "log": (path / "train.log").read_text(errors="replace"), "rows": rows(path),
                       "columns": sorted(load_metrics(runs["path"]).columns), "curves": read_curves(path),
                       "all_rows": read_jsonl(path / "metrics.jsonl")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_arms(["cla"], [0], 2, work / "ray_runs", config=TINY_RUN, workers=1, backend="ray", progress=False)
    seen["again"] = out.getvalue()
    local = run_arms(["cla"], [0], 2, work / "local_runs", config=TINY_RUN, workers=1, progress=False)
    seen["local_rows"] = rows(local["path"][0])
    seen["local_columns"] = sorted(load_metrics(local["path"]).columns)
    lap("reuse, local run")

    # 2. a job that fails: streamed logs, and the error naming it
    job = ray_jobs.submit(address, "python -c 'import sys; print(\"boom\"); sys.exit(3)'", metadata={"test": 1})
    pieces = []
    try:
        ray_jobs.wait(address, job, timeout=120, poll=0.5, on_logs=pieces.append)
        seen["failed"] = ""
    except RuntimeError as e:
        seen["failed"] = str(e)
    seen["streamed"], seen["full_logs"] = "".join(pieces), ray_jobs.logs(address, job)
    try:
        ray_jobs.status(address, "raysubmit_none")
    except LookupError as e:
        seen["unknown"] = str(e)
    lap("failed job")

    # 3. a long sweep interrupted (the notebook's stop button) once its job has trained a step. Python's SIGINT
    # handler, as a kernel has it: a process started in the background by a shell without job control (`make test &`)
    # inherits SIGINT ignored, and then the interrupt never arrives.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = {"interrupted": False}
    stop_dir = work / "stop_runs"

    def interrupt():
        try:
            while not any('"type": "train"' in p.read_text() for p in stop_dir.glob("*/metrics.jsonl")):
                time.sleep(0.2)
            stop["job"] = next(stop_dir.glob("*/train.log")).read_text().split()[3]  # "$ ray job ID at ..."
            ray_jobs.wait(address, stop["job"], timeout=0.5, poll=0.1)
        except TimeoutError as e:
            stop["timeout"] = str(e)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            run_arms(["cla"], [1], 50, stop_dir, config=TINY_RUN, workers=1, backend="ray", progress=False)
    except KeyboardInterrupt:
        stop["interrupted"] = True
    stop["printed"] = out.getvalue()
    stop["status"] = ray_jobs.status(address, stop["job"])["status"]
    stop["steps_done"] = max(r["step"] for r in read_jsonl(next(stop_dir.glob("*/metrics.jsonl"))))
    stop["trainers_left"] = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                             if "ifcore" in (p.info["cmdline"] or []) and "train" in (p.info["cmdline"] or [])]
    seen["interrupt"] = stop
    lap("interrupted sweep")

    # 4. backend openrlhf, its OpenRLHF command standing in for by one printing OpenRLHF's log lines
    orl = {}
    build = openrlhf.command

    def command(cfg, run_dir, **kwargs):
        orl["argv"] = build(cfg, run_dir, **kwargs)  # checked by the pinned release's parser
        script = (f"import os\nprint('in the working_dir:', os.path.isfile({openrlhf.REWARD_MODULE!r}) and "
                  f"os.getcwd() != {os.getcwd()!r}, 'IFCORE_REWARD=' + os.environ['IFCORE_REWARD'])\n")
        for step in (1, 2):
            script += f"print('Global step {step}:', {{'rollout/reward_mean': {0.25 * step}, 'kl': 0.01, " \
                      "'policy_loss': -0.5})\n"
        return ["python", "-c", script]

    openrlhf.command = command
    runs = run_arms(["cla"], [0], 2, work / "openrlhf_runs", config=TINY_RUN, workers=1, backend="openrlhf",
                    progress=False)
    orl.update(status=list(runs["status"]), log=(runs["path"][0] / "train.log").read_text(errors="replace"),
               rows=read_jsonl(runs["path"][0] / "metrics.jsonl"),
               arms=load_metrics(runs["path"])[["arm", "seed"]].values.tolist())
    seen["openrlhf"] = orl
    lap("openrlhf")
    seen["hook"] = hook_probe(address, work)  # 5. the plug-ins' hook under a driver that calls ray.init as OpenRLHF's
    lap("plug-ins hook")

    # 6. a job asking for GPUs this cluster lacks: its driver blocks on the placement group as train_ppo_ray's does
    # (one {"GPU": 1, "CPU": 1} bundle per GPU, then ray.get(pg.ready())); the sweep stops it after
    # placement_timeout and fails, naming what it asked for and what the cluster has
    placement = {}

    def gpu_command(cfg, run_dir, **kwargs):
        placement["argv"] = build(cfg, run_dir, **kwargs)  # gpus_per_node came through openrlhf_options
        gpus = int(placement["argv"][placement["argv"].index("--actor.num_gpus_per_node") + 1])
        return ["python", "-c", "import ray\nfrom ray.util.placement_group import placement_group\nray.init()\n"
                f"pg = placement_group([{{'GPU': 1, 'CPU': 1}}] * {gpus}, strategy='PACK')\n"
                "print('waiting for the placement group', flush=True)\nray.get(pg.ready())\n"]

    openrlhf.command = gpu_command
    try:
        run_arms(["cla"], [0], 2, work / "gpu_runs", config=TINY_RUN, workers=1, backend="openrlhf", progress=False,
                 openrlhf_options={"gpus_per_node": 2}, placement_timeout=5)
        placement["error"] = ""
    except RuntimeError as e:
        placement["error"] = str(e)
    job = next((work / "gpu_runs").glob("*/train.log")).read_text().split()[3]
    deadline = time.monotonic() + 60
    while ray_jobs.status(address, job)["status"] not in ray_jobs.TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
    placement.update(job=job, status=ray_jobs.status(address, job)["status"])
    seen["placement"] = placement
    lap("placement timeout")
    report.write_text(json.dumps(seen))


if __name__ == "__main__":
    scenario(Path(sys.argv[1]), Path(sys.argv[2]))
