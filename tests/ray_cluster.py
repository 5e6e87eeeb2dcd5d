"""Run a command beside a one-node Ray cluster on loopback: `python tests/ray_cluster.py CPUS CMD...`, inside a fresh
network, PID and mount namespace (LAUNCH below; needs root):

    unshare --net --pid --mount --fork --mount-proc --kill-child python tests/ray_cluster.py 2 CMD...

Ray binds the machine's interface address whatever --node-ip-address says; in a namespace whose only interface is
loopback it binds 127.0.0.1, so no test traffic leaves the machine. The PID namespace keeps `ray stop` (which
kills Ray processes by name) away from any other cluster on the machine, and ends everything the command left
behind when it exits. CMD runs with RAY_ADDRESS=http://127.0.0.1:8265 and the cluster's python first on PATH; its
exit status is this script's.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCH = ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child"]
ADDRESS = "http://127.0.0.1:8265"


def main(cpus: str, *cmd: str) -> int:
    from ifcore import reaper
    from ifcore.run import ray_jobs

    bin_dir = str(Path(sys.executable).parent)  # `ray`, and the `python` of every job's entrypoint
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "RAY_ADDRESS": ADDRESS,
           "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # Short: Ray's socket paths under it must fit in 107 bytes.
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        subprocess.run([f"{bin_dir}/ray", "start", "--head", "--num-cpus", cpus, "--include-dashboard", "true",
                        "--dashboard-host", "127.0.0.1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
                        "--temp-dir", temp], env=env, check=True, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:  # the dashboard's job API comes up a little after `ray start` returns
            try:
                ray_jobs.version(ADDRESS)
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return subprocess.run(list(cmd), env=env).returncode
    finally:
        subprocess.run([f"{bin_dir}/ray", "stop", "--force"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", temp])
        # This script is PID 1 of its namespace: Ray's orphans came to it. Nothing may outlive the cluster, and no
        # zombie stays (the kernel would end them with the namespace anyway; this says it in the code).
        reaper.kill_and_reap_all()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
