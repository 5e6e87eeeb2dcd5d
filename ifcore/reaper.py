"""A reaping parent for the servers and workers ifcore starts: nothing they start outlives them, whatever PID 1 does.

A server's own children (`transformers serve` runs its engine in a multiprocessing child beside the resource
tracker) are orphaned when the server dies and reparented to PID 1. Where PID 1 is not an init that reaps (a
container's or a micro-VM's process manager), they stay as zombies: the process group lives on, a long notebook
kernel collects them, and a test that checks the group is gone fails. So every long-lived command runs under this
small parent (stdlib only: anyone in ifcore may import it):

    proc = reaper.popen(argv, grace=10, ...)   # the reaper, in a new session, forks and execs argv
    ...
    reaper.stop(proc)                           # SIGTERM; every descendant gone and reaped on return

The reaper is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so orphans anywhere below it come to it and are
reaped, not PID 1's. It ends with its command: when the command exits, or on SIGTERM (forwarded to every
descendant, then `grace` seconds for the command to exit), or when its starter dies (checked five times a second:
a killed notebook kernel runs no cleanup), it SIGKILLs every remaining descendant (found by parentage, so one
that left the process group with setsid goes too), reaps until it has no child left, and exits as its command did.
Linux only (prctl and /proc).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL = 0.2  # seconds between the reaper's checks of its command and its starter


def command(argv: list[str], grace: float = 10.0) -> list[str]:
    """argv run under the reaping parent (the interpreter in isolated mode runs this file: no package import)."""
    return [sys.executable, "-I", os.path.abspath(__file__), f"{grace:g}", str(os.getpid()), "--", *map(str, argv)]


def popen(argv: list[str], grace: float = 10.0, **kwargs) -> subprocess.Popen:
    """subprocess.Popen of argv under the reaper, in a session (and process group) of its own; stop() ends it."""
    return subprocess.Popen(command(argv, grace), start_new_session=True, **kwargs)


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> list[int]:
    """Stop what popen started and wait, at most `timeout` seconds, until no member of its process group remains,
    zombies included. SIGTERM goes to the reaper, which forwards it and gives the command its grace; a reaper still
    running near the deadline is SIGKILLed with its whole group (its command's orphans then go to PID 1: the last
    resort). Returns the group members still there at the deadline: [] unless something unkillable holds on."""
    deadline = time.monotonic() + timeout
    if proc.poll() is None:  # a reaped pid may already belong to another process
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(max(1.0, deadline - time.monotonic() - 5))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    while True:
        try:
            os.killpg(proc.pid, 0)  # succeeds while any member exists, a zombie too
        except ProcessLookupError:
            return []
        if time.monotonic() > deadline:
            return group_members(proc.pid)
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is pgid, zombies included."""
    return [pid for pid, (_, group) in _processes().items() if group == pgid]


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, process group)} of every process in /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            out[int(name)] = (int(fields[1]), int(fields[2]))
    return out


def descendants(pid: int | None = None) -> list[int]:
    """Every process below `pid` (default: this one), by parentage."""
    children: dict[int, list[int]] = {}
    for p, (parent, _) in _processes().items():
        children.setdefault(parent, []).append(p)
    out, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


def signal_descendants(sig: int) -> None:
    for pid in descendants():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_and_reap_all() -> dict[int, int]:
    """SIGKILL every descendant of this process and reap its children until it has none ({pid: wait status}).
    With this process a child subreaper, no descendant is left anywhere: a grandchild is reparented to it before
    its parent can be reaped."""
    statuses = {}
    while True:
        signal_descendants(signal.SIGKILL)
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return statuses
        statuses[pid] = status


def become_subreaper() -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _main(grace: float, starter: int, argv: list[str]) -> None:
    """The reaper process: run argv, reap everything below, end as described in the module docstring."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the command's terminal is the starter's call
    become_subreaper()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"ifcore.reaper: cannot run {argv[0]}: {e}", file=sys.stderr, flush=True)
            os._exit(127)
    for fd in (0, 1):  # the command holds the pipes; the reaper must not keep a reader waiting for EOF
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)

    def wait_for_command(deadline: float | None = None) -> int | None:
        """The command's wait status once it exits; None when the starter is gone, on SIGTERM (no deadline) or
        at the deadline."""
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)  # orphans below are reaped as they come
            if pid == child:
                return status
            if pid:
                continue
            if os.getppid() != starter or (stopping if deadline is None else time.monotonic() > deadline):
                return None
            time.sleep(POLL if deadline is None else 0.05)

    status = wait_for_command()
    if os.getppid() != starter:  # said where the command's errors go (a sweep's train.log)
        print(f"ifcore.reaper: the process that started {argv[0]} (pid {starter}) is gone; stopping it and everything "
              "it started", file=sys.stderr, flush=True)
    elif status is None and stopping:
        signal_descendants(signal.SIGTERM)
        status = wait_for_command(time.monotonic() + grace)
    status = kill_and_reap_all().get(child, status)
    if status is None or os.WIFSIGNALED(status):  # end as the command ended: by its signal
        sig = signal.SIGKILL if status is None else os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: reaper.py GRACE_SECONDS STARTER_PID -- COMMAND [ARG...]")
    _main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[4:])
