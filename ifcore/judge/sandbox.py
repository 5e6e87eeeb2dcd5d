"""A hardened, warm sandbox for the Python tools an LLM judge writes (ScopeIF's tool-grounded verification).

ScopeIF runs each tool in a fresh interpreter (`python -I`, RLIMIT_AS 1 GB, RLIMIT_CPU 5 s); that pattern is
`run_spawned` here, the baseline `ifcore bench sandbox` measures against. `Sandbox` keeps a pool of worker
processes with ifcore.text already imported; each call forks a child of a worker, which locks itself down
before it runs the tool:
- its own session (process group), so a timeout kills everything it is;
- only its result pipe left open, stdin/stdout/stderr on /dev/null, a fresh scratch directory as cwd,
  an environment of PATH only (no secrets);
- as root (tests, CI): no network at all (the worker sits in a new network namespace whose loopback is down)
  and a private tmpfs on /tmp, /var/tmp, /dev/shm (a new mount namespace); then it becomes nobody, so the
  filesystem is read-only to it except its scratch directory, and it cannot signal or trace the worker;
- not root: socket functions replaced by ones that raise (ctypes could still reach the system call, which
  the seccomp filter below closes on x86_64); the tool keeps the caller's uid, so files the caller may
  delete or create empty stay exposed;
- rlimits: CPU seconds, address space, file size 0 (no file gets a byte), processes 0 (no fork, no threads),
  a few file descriptors, no core dumps;
- on x86_64 a seccomp filter: no new processes or threads, programs, sockets, signals to other processes,
  namespaces, mounts, tracing. `Sandbox.hardening` says which of these are in force.
Each worker runs under ifcore.reaper and is itself a child subreaper: a replaced or stopped worker, and anything a
tool's process might leave, is reaped, whatever PID 1 does.
The tool runs with the full builtins (as ScopeIF's do); the helpers the prompt promises, `count_word` (also
as `word_count`) and `split_sentences`, are in its globals. Its result must be JSON and at most RESULT_CAP characters once
serialized (ScopeIF drops larger ones). Every call returns {"ok", "result", "error", "kind"} with kind one of
"ok", "error", "timeout", "killed", "too_large", "bad_result"; a tool never raises in the caller.
"""
from __future__ import annotations

import ctypes
import json
import os
import queue
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ifcore import reaper

RESULT_CAP = 10_000  # characters of the serialized result, as in ScopeIF
NOBODY = 65534
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_SECCOMP = None  # the worker's filter program
_ENVELOPE_MAX = 4 * RESULT_CAP + 4096  # a child's reply is at most this many bytes; more is a hostile flood
# Modules a tool may want, imported by the worker: as nobody the interpreter's own files may be unreadable
# (here it lives under /root), so a tool can only import what its worker already has.
_PRELOAD = ("re", "json", "math", "string", "collections", "itertools", "functools", "statistics", "unicodedata",
            "datetime", "random", "textwrap", "difflib", "heapq", "bisect", "operator", "fractions", "decimal",
            "typing", "dataclasses", "html", "csv", "io", "socket", "threading", "shutil", "tempfile")


def _result(kind: str, result=None, error: str | None = None) -> dict:
    return {"ok": kind == "ok", "result": result, "error": error, "kind": kind}


# ---- the worker (python -m ifcore.judge.sandbox) --------------------------------------------------------------

def word_count(text: str) -> int:
    """Words as ifcore counts them (text.Doc.words)."""
    from ifcore.text import Doc
    return len(Doc(text).words)


def split_sentences(text: str) -> list[str]:
    """Sentences as ifcore splits them (text.Doc.sentences)."""
    from ifcore.text import Doc
    return [text[s:e] for s, e in Doc(text).sentences]


def _isolate_worker() -> dict:
    """As root, put this worker (and so every child) into new network and mount namespaces once: doing it per
    call would cost a namespace per call. Returns what is in force."""
    syscalls = "seccomp" if os.uname().machine == "x86_64" else "not filtered"
    if os.geteuid() != 0:
        return {"user": "same", "network": "socket functions blocked", "tmp": "shared", "syscalls": syscalls}
    libc = ctypes.CDLL(None, use_errno=True)
    out = {"user": "nobody" if _can_become_nobody() else "same",
           "network": "namespace" if libc.unshare(CLONE_NEWNET) == 0 else "socket functions blocked", "tmp": "shared",
           "syscalls": syscalls}
    if libc.unshare(CLONE_NEWNS) == 0 and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        dirs = [d for d in (b"/tmp", b"/var/tmp", b"/dev/shm") if os.path.isdir(d)]
        if all(libc.mount(b"tmpfs", d, b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=1777") == 0 for d in dirs):
            out["tmp"] = "private tmpfs"
    return out


def _can_become_nobody() -> bool:
    """Root in a user namespace (a rootless container) may have no uid 65534 to become: probe once."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        finally:
            os._exit(0 if os.getuid() == NOBODY else 1)
    return os.waitpid(pid, 0)[1] == 0


def _block_sockets() -> None:
    """Without root there is no network namespace: make every way the socket module offers fail."""
    import _socket
    import socket

    def blocked(*_args, **_kwargs):
        raise PermissionError("network access is disabled in the sandbox")

    for module in (socket, _socket):
        for name in ("socket", "socketpair", "fromfd", "create_connection", "create_server", "getaddrinfo",
                     "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
            if hasattr(module, name):
                setattr(module, name, blocked)


# x86_64 numbers of the system calls a tool never needs: new processes and threads, programs, sockets,
# signals to other processes, namespaces and mounts, tracing and other processes' memory. A filter closes
# them even where rlimits, namespaces and uids do not reach (not root; root in a user namespace, where
# RLIMIT_NPROC does not bind and the tool shares the caller's uid).
_DENIED_SYSCALLS = {"socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59,
                    "kill": 62, "ptrace": 101, "rt_sigqueueinfo": 129, "mount": 165, "tkill": 200, "tgkill": 234,
                    "unshare": 272, "rt_tgsigqueueinfo": 297, "setns": 308, "process_vm_readv": 310,
                    "process_vm_writev": 311, "execveat": 322, "pidfd_send_signal": 424, "clone3": 435}


def _seccomp_filter():
    """The filter program (built once per worker: ctypes types cost a child more than the fork): the denied
    calls fail with EPERM, a foreign ABI kills the process."""
    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    denied = sorted(_DENIED_SYSCALLS.values())
    m = len(denied)
    rules = [(load, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, 0x80000000),  # arch must be x86_64
             (load, 0, 0, 0), (jge, m + 1, 0, 0x40000000)]  # x32 calls: deny
    rules += [(jeq, m - i, 0, nr) for i, nr in enumerate(denied)]
    rules += [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1)]  # allow; deny with EPERM
    filters = (Filter * len(rules))(*[Filter(*r) for r in rules])
    return Program(len(rules), filters), filters  # the array must outlive the program that points at it


def _install_seccomp(program) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "seccomp filter not installed")


def _limit(cpu_seconds: int, memory_mb: int) -> None:
    # soft == hard, so the tool cannot raise them back; CPU gets a second of grace to turn SIGXCPU into SIGKILL.
    for which, value in ((resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1)),
                         (resource.RLIMIT_AS, (memory_mb << 20,) * 2),
                         (resource.RLIMIT_FSIZE, (0, 0)), (resource.RLIMIT_NPROC, (0, 0)),
                         (resource.RLIMIT_NOFILE, (16, 16)), (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(which, value)


def _call_tool(code: str, function: str, args: list) -> str:
    """Run the tool in this (already locked down) process; the reply envelope as JSON text."""
    import builtins
    try:
        scope = {"__builtins__": builtins, "__name__": "__tool__", "word_count": word_count,
                 "count_word": word_count, "split_sentences": split_sentences}  # count_word: the prompt's name
        exec(compile(code, "<tool>", "exec"), scope)
        fn = scope.get(function)
        if not callable(fn):
            return json.dumps({"kind": "error", "error": f"the code defines no function named {function!r}"})
        value = fn(*args)
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: the tool's failure is a verdict input
        return json.dumps({"kind": "error", "error": _describe(e)})
    try:
        text = json.dumps(value)
    except BaseException as e:
        return json.dumps({"kind": "bad_result", "error": f"result is not JSON: {_describe(e)}"})
    if len(text) > RESULT_CAP:
        return json.dumps({"kind": "too_large", "error": f"result too large ({len(text)} > {RESULT_CAP} characters)"})
    return '{"kind": "ok", "result": ' + text + "}"


def _describe(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {e}"[:500]
    except BaseException:  # a hostile __str__
        return type(e).__name__


def _child(write_fd: int, scratch: str, req: dict, as_nobody: bool) -> None:
    """The forked child: lock down, run, write the envelope, exit. Never returns."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.dup2(write_fd, 3)
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.chdir(scratch)
        os.environ.clear()
        os.environ["PATH"] = SAFE_PATH
        if as_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        if req["hardening"]["network"] != "namespace":
            _block_sockets()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write then fails with EFBIG, reported as an error
        sys.dont_write_bytecode = True
        _limit(req["cpu_seconds"], req["memory_mb"])
        if req["hardening"]["syscalls"] == "seccomp":
            _install_seccomp(_SECCOMP[0])
        envelope = _call_tool(req["code"], req["function"], req["args"]).encode()
        while envelope:
            envelope = envelope[os.write(3, envelope):]
    finally:
        os._exit(0)


def _read_until(fd: int, deadline: float) -> tuple[bytes, str | None]:
    """Everything the child writes until EOF; the problem, if any: 'timeout' or 'too_large'."""
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return data, "timeout"
        chunk = os.read(fd, 65536)
        if not chunk:
            return data, None
        data += chunk
        if len(data) > _ENVELOPE_MAX:
            return data, "too_large"


def _execute(req: dict, base: str, n: int) -> dict:
    as_nobody = req["hardening"]["user"] == "nobody"
    scratch = os.path.join(base, str(n))
    os.mkdir(scratch, 0o700)
    if as_nobody:
        os.chown(scratch, NOBODY, NOBODY)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, scratch, req, as_nobody)
    os.close(write_fd)
    data, problem = _read_until(read_fd, time.monotonic() + req["timeout"])
    os.close(read_fd)
    # Always kill the whole group: the child may have written a reply and gone on running.
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    # The tool cannot fork under the rlimits and the filter; should a process of it ever get out (it would come to
    # this worker, a subreaper), it is killed and reaped here, so nothing outlives the call. Usually no child is left.
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
        reaper.kill_and_reap_all()  # a child still running: a stray the tool left
    except ChildProcessError:
        pass
    shutil.rmtree(scratch, ignore_errors=True)
    if problem == "timeout":
        return _result("timeout", error=f"wall time limit ({req['timeout']} s) exceeded")
    if problem == "too_large":
        return _result("too_large", error="result too large")
    if not data:
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            return _result("timeout", error=f"CPU time limit ({req['cpu_seconds']} s) exceeded")
        how = f"by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else \
            f"with status {os.WEXITSTATUS(status)}"
        return _result("killed", error=f"the tool's process ended {how} before returning a result")
    try:
        reply = json.loads(data)
        kind = reply["kind"]
    except Exception:  # the tool wrote to the reply pipe itself, or nested its result too deep to read
        kind = None
    if kind not in ("ok", "error", "too_large", "bad_result"):
        return _result("bad_result", error="unreadable reply from the tool's process")
    return _result(kind, reply.get("result"), None if kind == "ok" else str(reply.get("error")))


def _worker() -> None:
    """A warm worker: one JSON request per line on stdin, one JSON result per line on stdout."""
    import gc
    import importlib

    from ifcore.text import Doc

    reaper.become_subreaper()
    for name in _PRELOAD:
        importlib.import_module(name)
    Doc("Warm up the splitter. It loads its parameters once.").sentences  # noqa: B018
    hardening = _isolate_worker()
    if hardening["syscalls"] == "seccomp":
        global _SECCOMP
        _SECCOMP = _seccomp_filter()
    base = tempfile.mkdtemp(prefix="ifcore-sandbox-")
    os.chmod(base, 0o711)  # nobody may enter its own scratch directory, not list the others
    gc.freeze()  # children then do not copy pages just to touch the collector's bookkeeping
    out = sys.stdout.buffer
    out.write((json.dumps({"ready": True, "hardening": hardening}) + "\n").encode())
    out.flush()
    try:
        for n, line in enumerate(sys.stdin.buffer):
            try:
                res = _execute(dict(json.loads(line), hardening=hardening), base, n)
            except Exception as e:  # the worker must survive anything; a failed fork or mkdir is one failed call
                res = _result("killed", error=f"sandbox worker error: {_describe(e)}")
            out.write((json.dumps(res) + "\n").encode())
            out.flush()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---- the caller's side ------------------------------------------------------------------------------------------

class Sandbox:
    """A pool of `workers` warm workers; `run` is thread-safe (each call takes an idle worker)."""

    def __init__(self, workers: int = 2, timeout: float = 3.0, cpu_seconds: int = 3, memory_mb: int = 1024):
        self.timeout, self.cpu_seconds, self.memory_mb = timeout, cpu_seconds, memory_mb
        self._workers = workers
        self._idle: queue.Queue = queue.Queue()
        self.hardening: dict = {}
        for _ in range(workers):
            self._idle.put(self._start())

    def _start(self) -> subprocess.Popen:
        # A minimal environment: the worker (and so /proc/<worker>/environ) holds no secret of the caller. Under
        # ifcore.reaper, in a session of its own: a worker that is replaced or stopped leaves nothing behind.
        proc = reaper.popen([sys.executable, "-I", "-m", "ifcore.judge.sandbox"], grace=1, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", env={"PATH": SAFE_PATH})
        line = _readline(proc, time.monotonic() + 60)
        if line is None:
            reaper.stop(proc)
            raise RuntimeError("sandbox worker did not start (python -I -m ifcore.judge.sandbox)")
        self.hardening = json.loads(line)["hardening"]
        return proc

    def run(self, code: str, function: str, args: list | tuple = ()) -> dict:
        """Call `function(*args)` defined by `code`; {"ok", "result", "error", "kind"}, never an exception
        for anything the code does. Raises TypeError for arguments that are not a list of JSON values."""
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list, got {type(args).__name__}")
        request = json.dumps({"code": str(code), "function": str(function), "args": list(args),
                              "timeout": self.timeout, "cpu_seconds": self.cpu_seconds,
                              "memory_mb": self.memory_mb}) + "\n"
        if not self._workers:
            raise RuntimeError("the sandbox is closed")
        proc = self._idle.get()
        try:
            for fresh in (False, True):
                if fresh or proc.poll() is not None:  # died between calls (killed from outside): a fresh worker
                    reaper.stop(proc)
                    proc = self._start()
                try:
                    proc.stdin.write(request.encode())
                    proc.stdin.flush()
                    break
                except (OSError, ValueError):  # died between calls, its reaper not yet gone: the request never
                    continue                    # reached it
            line = _readline(proc, time.monotonic() + self.timeout + 30)
            if line is None:  # the worker died or hangs: replace it, the call counts as killed
                reaper.stop(proc)
                proc = self._start()
                return _result("killed", error="the sandbox worker died during the call")
            return json.loads(line)
        finally:
            self._idle.put(proc)

    def close(self) -> None:
        """Stop the workers (waits for calls in flight)."""
        for _ in range(self._workers):
            proc = self._idle.get()
            proc.stdin.close()  # the worker ends at EOF, and its reaper with it
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            reaper.stop(proc)
        self._workers = 0

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _readline(proc: subprocess.Popen, deadline: float) -> bytes | None:
    """One reply line from a worker, or None if it ended or the deadline passed. Reads the raw descriptor so
    that nothing is buffered between calls."""
    fd, data = proc.stdout.fileno(), b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    return data


# ---- the baseline: a fresh interpreter per call (ScopeIF's evaluation pattern) ---------------------------------

_SPAWNED = """
import json, sys
req = json.load(sys.stdin)
scope = {"__name__": "__tool__"}
if req["helpers"]:  # ifcore.text costs the fresh interpreter its import; a tool without helpers skips it
    from ifcore.judge.sandbox import split_sentences, word_count
    scope.update(word_count=word_count, count_word=word_count, split_sentences=split_sentences)
exec(compile(req["code"], "<tool>", "exec"), scope)
print()  # the reply is the last line, after anything the tool prints
print(json.dumps(scope[req["function"]](*req["args"])))
"""


def run_spawned(code: str, function: str, args: list | tuple = (), timeout: float = 5.0, cpu_seconds: int = 5,
                memory_mb: int = 1024, helpers: bool = True) -> dict:
    """One call the slow way, ScopeIF's evaluation pattern: a fresh `python -I` per call with RLIMIT_AS and
    RLIMIT_CPU and no other hardening; `helpers=False` leaves out word_count and split_sentences."""
    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))

    request = {"code": code, "function": function, "args": list(args), "helpers": helpers}
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _SPAWNED], preexec_fn=limits, capture_output=True,
                              input=json.dumps(request).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return _result("timeout", error=f"wall time limit ({timeout} s) exceeded")
    if done.returncode < 0:
        return _result("killed", error=f"the tool's process ended by {signal.Signals(-done.returncode).name}")
    if done.returncode != 0:
        return _result("error", error=(done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1])
    reply = done.stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    if len(reply) > RESULT_CAP:
        return _result("too_large", error="result too large")
    return _result("ok", json.loads(reply))


if __name__ == "__main__":
    _worker()
