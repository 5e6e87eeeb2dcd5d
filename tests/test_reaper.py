"""ifcore.reaper: whatever PID 1 does (here it reaps nothing), a command started under the reaper leaves no process
and no zombie behind: its own children that outlive it, a child that left the process group, a starter that died."""
import os
import signal
import subprocess
import sys
import time

import pytest

from ifcore import reaper

# Forks a child that records its pid and sleeps; then the command itself either sleeps or exits at once.
FORKER = """
import os, sys, time
if os.fork() == 0:
    if sys.argv[2] == "setsid":
        os.setsid()  # leaves the process group: only parentage finds it
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(600)
    os._exit(0)
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.01)
print("ready", flush=True)
if sys.argv[3] == "exit":
    sys.exit(3)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """No such process, not even a zombie (signal 0 reaches a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_gone(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds  # generous: a busy machine schedules late, a zombie never goes
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def start(tmp_path, group: str = "same", end: str = "sleep"):
    pidfile = tmp_path / "grandchild.pid"
    proc = reaper.popen([sys.executable, "-c", FORKER, str(pidfile), group, end], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, int(pidfile.read_text())


@pytest.mark.parametrize("group", ["same", "setsid"])
def test_a_stopped_command_leaves_no_child_of_its_own_and_no_zombie(tmp_path, group):
    proc, grandchild = start(tmp_path, group)
    assert not gone(grandchild) and os.getpgid(proc.pid) == proc.pid
    assert reaper.stop(proc, timeout=60) == []
    assert proc.returncode == -signal.SIGTERM  # the reaper ends as its command did
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no member of the group is left, zombies included
    assert gone(grandchild)  # nor the child that left the group


def test_a_command_that_exits_takes_its_orphans_with_it(tmp_path):
    proc, grandchild = start(tmp_path, end="exit")
    assert proc.wait(timeout=60) == 3  # the command's own exit status
    assert wait_gone(grandchild)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


def test_a_command_that_ignores_sigterm_is_killed_after_its_grace(tmp_path):
    proc = reaper.popen([sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                         "print('ready', flush=True)\ntime.sleep(600)"], grace=0.5, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    assert reaper.stop(proc, timeout=60) == []
    assert proc.returncode == -signal.SIGKILL


def test_everything_goes_when_the_starter_is_killed(tmp_path):
    # A notebook kernel killed by SIGKILL runs no cleanup: the reaper notices its starter is gone.
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; from ifcore import reaper\n"
            "p = reaper.popen([sys.executable, '-c', sys.argv[1], sys.argv[2], 'same', 'sleep'], stdout=subprocess.PIPE,"
            " text=True)\n"
            "print(p.stdout.readline().strip(), p.pid, flush=True); time.sleep(600)")
    starter = subprocess.Popen([sys.executable, "-c", code, FORKER, str(pidfile)], stdout=subprocess.PIPE, text=True)
    ready, reaper_pid = starter.stdout.readline().split()
    assert ready == "ready"
    grandchild = int(pidfile.read_text())
    server = next(pid for pid in reaper.descendants(int(reaper_pid)) if pid != grandchild)
    starter.kill()
    starter.wait()
    assert wait_gone(server) and wait_gone(grandchild)  # reaped by the reaper, not left to PID 1
    # the reaper itself is orphaned: it exits, and only a reaping PID 1 could remove its zombie


def test_a_command_that_cannot_start_is_reported(tmp_path):
    proc = reaper.popen(["/nonexistent/program"], stderr=subprocess.PIPE, text=True)
    assert proc.wait(timeout=60) == 127
    assert "cannot run /nonexistent/program" in proc.stderr.read()
