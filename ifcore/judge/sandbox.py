"""A hardened, warm sandbox for the Python tools an LLM judge writes (ScopeIF's tool-grounded verification).

ScopeIF runs each tool in a fresh interpreter (`python -I`, RLIMIT_AS 1 GB, RLIMIT_CPU 5 s); that pattern is
`run_spawned` here, the baseline `ifcore bench sandbox` measures against. `Sandbox` keeps a pool of worker
processes with ifcore.text already imported. Each worker forks, before it reads any request, a zygote; per call
the zygote forks a call process, which alone reads the request (so no later call's memory holds an earlier
call's code or arguments), puts itself into new PID, IPC, mount, UTS and network namespaces and forks the tool's
process, PID 1 of its namespace. That process locks itself down before the tool runs:
- its own /proc (it sees no other process: no environment, command line, /proc/<pid>/root or memory of any),
  a read-only view of the filesystem with fresh tmpfs on /tmp (its cwd), /var/tmp, /dev/shm, /run/lock and
  empty read-only /root and /home; SysV and POSIX IPC objects die with the call; no network interface at all;
- as root: a uid and gid of its own (UID_BASE + the call process's pid, no groups), shared with no other call
  and no host process, so it can signal, trace or resource-limit nothing but itself; without root the worker
  first enters a user namespace (the caller's uid mapped to 0) and the tool drops every capability: the same
  namespaces, filter and read-only view, under the caller's uid (see docs/llm-judge.md, "Sandbox");
- only its result pipe open, stdin/stdout/stderr on /dev/null, an environment of PATH only;
- rlimits: CPU seconds, address space, file size 0 (no file gets a byte), processes 0, 16 descriptors, no core;
- on x86_64 an allowlist seccomp filter (_ALLOWED_SYSCALLS, measured with strace on the tests' tools):
  every other call (processes, threads, programs, sockets, io_uring, keyctl, SysV IPC, signals, ptrace,
  process_vm_*, bpf, perf_event_open, mount, unshare, setns, ...) fails with EPERM.
The call process reads the reply until EOF or the wall deadline, then kills the namespace (its PID 1 dies and
the kernel takes everything in it, tmpfs included), so cleanup is inside the deadline. Each worker runs under
ifcore.reaper and is itself a child subreaper: nothing a call leaves outlives the pool.
The tool runs with the full builtins (as ScopeIF's do); the helpers the prompt promises, `count_word` (also
as `word_count`) and `split_sentences`, are in its globals. Its result must be JSON (no NaN or Infinity) and at
most RESULT_CAP characters once serialized (ScopeIF drops larger ones). The caller's side decodes what it reads
defensively (sizes, UTF-8, lone surrogates, nesting depth, NaN): every call returns {"ok", "result", "error",
"kind"} with kind one of "ok", "error", "timeout", "killed", "too_large", "bad_result"; `Sandbox.run` never
raises.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import re
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from itertools import accumulate

from ifcore import reaper

RESULT_CAP = 10_000  # characters of the serialized result, as in ScopeIF
ERROR_CAP = 1_000  # characters of an error text the caller gets
MAX_DEPTH = 64  # nesting of a result's lists and objects; deeper is a bad_result (json would recurse)
UID_BASE = 1 << 30  # as root, a call runs as UID_BASE + its call process's pid: no host user has such a uid
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
KINDS = ("ok", "error", "timeout", "killed", "too_large", "bad_result")
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 1 << 18
_ENVELOPE_MAX = 4 * RESULT_CAP + 4096  # a tool's reply is at most this many bytes; more is a hostile flood
_LINE_MAX = 1 << 20  # a worker's reply line: far above anything it writes
_SETUP_EXIT = 70  # the tool's process could not lock itself down
_SETUP_FAILED, _CPU_LIMIT = 3, 4  # the call process's problem codes: 0 none, 1 timeout, 2 too_large, 3 its own
# setup failed, 4 the tool used up its CPU seconds
_SECCOMP = None  # the worker's filter program
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One thread (numpy's BLAS would start more): forks are then safe, and without root unshare(CLONE_NEWUSER) works.
_WORKER_ENV = {"PATH": SAFE_PATH, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_WORKER_MAIN = "import sys; sys.path.insert(0, sys.argv[1]); from ifcore.judge.sandbox import _worker; _worker()"
# Modules a tool may want, imported by the worker: in the sandbox the interpreter's own files may be unreadable
# or hidden (/root), so a tool can only import what its worker already has.
_PRELOAD = ("re", "json", "math", "string", "collections", "itertools", "functools", "statistics", "unicodedata",
            "datetime", "random", "textwrap", "difflib", "heapq", "bisect", "operator", "fractions", "decimal",
            "typing", "dataclasses", "html", "csv", "io", "socket", "threading", "shutil", "tempfile")


def _result(kind: str, result=None, error: str | None = None) -> dict:
    return {"ok": kind == "ok", "result": result, "error": error, "kind": kind}


# ---- defensive decoding (both the worker and the caller use it) ------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _parse_json(data: bytes, limit: int):
    """Strict JSON: at most `limit` bytes, valid UTF-8, nesting at most MAX_DEPTH, no NaN/Infinity, no lone
    surrogate anywhere. Raises ValueError naming what is wrong (never RecursionError)."""
    if len(data) > limit:
        raise ValueError(f"{len(data)} bytes, more than {limit}")
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if brackets and max(accumulate(1 if c in "[{" else -1 for c in brackets)) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    value = json.loads(text, parse_constant=_reject_constant)
    # A lone surrogate (from a \ud800 escape) raises here, and so does an overflowing number (1e999 is inf).
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return value


def _cap(error) -> str:
    return (error if isinstance(error, str) else repr(error))[:ERROR_CAP]


def _checked(reply) -> dict:
    """A result dict from a decoded reply (a tool's envelope or a worker's line): the kind known, the error text
    capped, an ok result within RESULT_CAP. Anything else is a bad_result."""
    if not isinstance(reply, dict) or reply.get("kind") not in KINDS:
        return _result("bad_result", error="unreadable reply from the tool's process")
    kind = reply["kind"]
    if kind != "ok":
        return _result(kind, error=_cap(reply.get("error")))
    if "result" not in reply:
        return _result("bad_result", error="the reply has no result")
    size = len(json.dumps(reply["result"]))
    if size > RESULT_CAP:  # enforced here: a tool writing its envelope to the pipe itself cannot skip the cap
        return _result("too_large", error=f"result too large ({size} > {RESULT_CAP} characters)")
    return _result("ok", reply["result"])


# ---- the tool's process -----------------------------------------------------------------------------------------

def word_count(text: str) -> int:
    """Words as ifcore counts them (text.Doc.words)."""
    from ifcore.text import Doc
    return len(Doc(text).words)


def split_sentences(text: str) -> list[str]:
    """Sentences as ifcore splits them (text.Doc.sentences)."""
    from ifcore.text import Doc
    return [text[s:e] for s, e in Doc(text).sentences]


# x86_64 numbers of the system calls a tool may make. Measured: strace -f over every tool of tests/test_sandbox.py
# and a dozen honest judge-style tools (stdlib and the helpers) finds, after the filter is in, only brk chdir
# clock_gettime clock_nanosleep close exit_group getcwd getdents64 getgid getgroups getpid getppid gettid getuid
# ioctl lseek mkdir mmap mprotect munmap newfstatat openat prlimit64 read rt_sigaction rt_sigprocmask write allowed
# (scripts/sandbox_syscalls.py; docs/llm-judge.md, "Sandbox"). The list adds their siblings of the same kind (the other
# stat, read/write, directory, time and id calls, files inside the call's own tmpfs, realloc's mremap and
# malloc's madvise, getrandom for an unseeded random.Random). Everything else fails with EPERM: processes,
# threads, programs, sockets, io_uring, keyrings, SysV and POSIX IPC, signals, ptrace and process_vm_*, bpf,
# perf_event_open, mounts, namespaces.
_ALLOWED_SYSCALLS = {
    "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "lseek": 8, "mmap": 9,
    "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15,
    "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21, "mremap": 25,
    "madvise": 28, "dup": 32, "dup2": 33, "nanosleep": 35, "getpid": 39, "exit": 60, "uname": 63, "fcntl": 72,
    "truncate": 76, "ftruncate": 77, "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "rename": 82,
    "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86, "unlink": 87, "symlink": 88, "readlink": 89, "chmod": 90,
    "fchmod": 91, "umask": 95, "gettimeofday": 96, "getrlimit": 97, "getrusage": 98, "sysinfo": 99, "times": 100,
    "getuid": 102, "getgid": 104, "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp": 111,
    "getgroups": 115, "getpgid": 121, "getsid": 124, "sigaltstack": 131, "statfs": 137, "fstatfs": 138,
    "getpriority": 140, "gettid": 186, "futex": 202, "sched_getaffinity": 204, "getdents64": 217,
    "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "exit_group": 231, "openat": 257,
    "mkdirat": 258, "newfstatat": 262, "unlinkat": 263, "renameat": 264, "readlinkat": 267, "faccessat": 269,
    "dup3": 292, "prlimit64": 302, "getrandom": 318, "statx": 332, "close_range": 436, "faccessat2": 439,
}


def _seccomp_filter():
    """The allowlist program (built once per worker: ctypes types cost a call more than its fork): a foreign
    ABI kills the process, x32 and every call not allowed fail with EPERM."""
    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allowed = sorted(_ALLOWED_SYSCALLS.values())
    m = len(allowed)  # < 256: a jump offset is one byte
    rules = [(load, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, 0x80000000),  # arch must be x86_64
             (load, 0, 0, 0), (jge, m, 0, 0x40000000)]  # x32 calls: to the EPERM below the comparisons
    rules += [(jeq, m - i, 0, nr) for i, nr in enumerate(allowed)]  # a match jumps to the allow
    rules += [(ret, 0, 0, 0x00050000 | 1), (ret, 0, 0, 0x7FFF0000)]  # EPERM; allow
    filters = (Filter * len(rules))(*[Filter(*r) for r in rules])
    return Program(len(rules), filters), filters  # the array must outlive the program that points at it


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ok: bool, what: str) -> None:
    if not ok:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _drop_capabilities() -> None:
    """In a user namespace the tool is uid 0 there: take every capability away (capset, all sets empty)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(_libc().syscall(126, header, data) == 0, "capset")


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
        text = json.dumps(value, allow_nan=False)
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


def _tool_process(write_fd: int, req: dict, uid: int) -> None:
    """PID 1 of the call's namespaces: its own /proc, lock down, run, write the envelope, exit. Never returns."""
    try:
        _check(_libc().mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0, "mount /proc")
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.dup2(write_fd, 3)
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.chdir("/tmp")
        os.environ.clear()
        os.environ["PATH"] = SAFE_PATH
        if uid:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)  # root's capabilities go with it
        else:
            _drop_capabilities()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write then fails with EFBIG, reported as an error
        sys.dont_write_bytecode = True
        _limit(req["cpu_seconds"], req["memory_mb"])
        if _SECCOMP is not None:
            _check(_libc().prctl(38, 1, 0, 0, 0) == 0, "no_new_privs")
            _check(_libc().prctl(22, 2, ctypes.byref(_SECCOMP[0]), 0, 0) == 0, "seccomp")
    except BaseException:
        os._exit(_SETUP_EXIT)  # never run a tool less locked down than promised
    try:
        envelope = _call_tool(req["code"], req["function"], req["args"]).encode()
        while envelope:
            envelope = envelope[os.write(3, envelope):]
    finally:
        os._exit(0)


# ---- the call process (one per call, forked by the zygote) -------------------------------------------------------

def _private_view() -> None:
    """In the call's new mount namespace: everything read-only, fresh tmpfs where programs write, /root and
    /home empty."""
    libc = _libc()
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0, "make / private")
    attr = (ctypes.c_uint64 * 4)(MS_RDONLY | MS_NOSUID, 0, 0, 0)  # MOUNT_ATTR_RDONLY|NOSUID (nodev: no /dev/null)
    _check(libc.syscall(442, -100, b"/", 0x8000, attr, ctypes.sizeof(attr)) == 0,  # mount_setattr AT_RECURSIVE
           "mount_setattr (read-only /)")
    for path, flags, options in (
            (b"/tmp", 0, b"size=16m,nr_inodes=4096,mode=1777"), (b"/var/tmp", 0, b"size=1m,nr_inodes=64,mode=1777"),
            (b"/dev/shm", 0, b"size=1m,nr_inodes=64,mode=1777"), (b"/run/lock", 0, b"size=1m,nr_inodes=64,mode=1777"),
            (b"/root", MS_RDONLY, b"size=4k,nr_inodes=4,mode=755"),
            (b"/home", MS_RDONLY, b"size=4k,nr_inodes=4,mode=755")):
        if os.path.isdir(path):
            _check(libc.mount(b"tmpfs", path, b"tmpfs", flags | MS_NOSUID | MS_NODEV, options) == 0,
                   f"tmpfs on {path.decode()}")


def _call(request_fd: int, message_fd: int, as_root: bool) -> None:
    """Read the request, enter new namespaces, run the tool as their PID 1 until EOF or the deadline, kill it,
    and send the worker (status, problem, reply). Never returns."""
    problem, status, data = 0, 0, b""
    try:
        req = json.loads(os.pread(request_fd, os.fstat(request_fd).st_size, 0))
        os.close(request_fd)
        deadline = time.monotonic() + req["timeout"]
        uid = UID_BASE + os.getpid() if as_root else 0
        _check(_libc().unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET) == 0,
               "unshare")
        _private_view()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            os.close(message_fd)
            _tool_process(write_fd, req, uid)
        os.close(write_fd)
        data, problem = _read_until(read_fd, deadline)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: the kernel kills the rest of it
        _, status, usage = os.wait4(pid, 0)
        # PID 1 of a namespace ignores SIGXCPU (its default action), so the hard limit's SIGKILL ends it: name it.
        if not problem and not data and usage.ru_utime + usage.ru_stime >= req["cpu_seconds"]:
            problem = _CPU_LIMIT
    except BaseException as e:
        problem, data = _SETUP_FAILED, _describe(e).encode()
    finally:
        message = struct.pack("<iiI", status, problem, len(data)) + data
        with contextlib.suppress(OSError):
            while message:
                message = message[os.write(message_fd, message):]
        os._exit(0)


def _read_until(fd: int, deadline: float) -> tuple[bytes, int]:
    """Everything the tool writes until EOF; the problem, if any: 1 (timeout) or 2 (more than _ENVELOPE_MAX)."""
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return data, 1
        chunk = os.read(fd, 65536)
        if not chunk:
            return data, 0
        data += chunk
        if len(data) > _ENVELOPE_MAX:
            return b"", 2


def _zygote(go_fd: int, request_fd: int, message_fd: int, as_root: bool) -> None:
    """Fork a call process per byte on go_fd, one at a time. It never reads a request itself."""
    while os.read(go_fd, 1):
        pid = os.fork()
        if pid == 0:
            os.close(go_fd)
            _call(request_fd, message_fd, as_root)
        os.waitpid(pid, 0)
    os._exit(0)


# ---- the worker (Sandbox starts it with _WORKER_MAIN) ---------------------------------------------------------

def _enter_user_namespace() -> None:
    """Without root: become root of a new user namespace (the caller's uid and gid mapped to 0), so that each
    call can have its namespaces and mounts; raises OSError saying why not."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc().unshare(CLONE_NEWUSER) == 0, "unshare(CLONE_NEWUSER): unprivileged user namespaces are off "
                                                "here (kernel.unprivileged_userns_clone, user.max_user_namespaces, "
                                                "an AppArmor or container seccomp policy)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _full_root() -> bool:
    """Root of the host's user namespace (every uid can be taken): per-call uids work."""
    try:
        with open("/proc/self/uid_map") as f:
            return os.geteuid() == 0 and f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def _worker() -> None:
    """A warm worker: one JSON request per line on stdin, one JSON result per line on stdout."""
    import gc
    import importlib

    from ifcore.text import Doc

    out = sys.stdout.buffer
    reaper.become_subreaper()
    as_root = _full_root()
    hardening = {"user": "per-call uid" if as_root else "caller's uid, no capabilities (user namespace)",
                 "namespaces": "pid ipc mount uts net, per call", "network": "namespace",
                 "filesystem": "read-only, private tmpfs", "syscalls": "not filtered"}
    try:
        if not as_root:
            _enter_user_namespace()  # before the imports: only a single-threaded process may
        for name in _PRELOAD:
            importlib.import_module(name)
        Doc("Warm up the splitter. It loads its parameters once.").sentences  # noqa: B018
        if os.uname().machine == "x86_64":
            global _SECCOMP
            _SECCOMP = _seccomp_filter()
            hardening["syscalls"] = "seccomp allowlist"
    except OSError as e:
        out.write((json.dumps({"ready": False, "error": str(e)}) + "\n").encode())
        out.flush()
        return
    request_fd = os.memfd_create("ifcore-sandbox-request")
    go_read, go_write = os.pipe()
    message_read, message_write = os.pipe()
    gc.freeze()  # children then do not copy pages just to touch the collector's bookkeeping
    if os.fork() == 0:  # the zygote: forked before any request was read
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        for fd in (go_write, message_read, null):
            os.close(fd)
        _zygote(go_read, request_fd, message_write, as_root)
    os.close(go_read)
    os.close(message_write)

    def serve(line: bytes) -> dict:
        req = json.loads(line)
        os.ftruncate(request_fd, 0)
        os.pwrite(request_fd, line, 0)
        os.write(go_write, b"g")
        message = _read_exactly(message_read, 12, time.monotonic() + req["timeout"] + 5)
        status, problem, size = struct.unpack("<iiI", message)
        data = _read_exactly(message_read, size, time.monotonic() + 5) if size <= _ENVELOPE_MAX else None
        if data is None:
            raise OSError("the call process sent too much")
        with contextlib.suppress(ChildProcessError):  # a stray the zygote left (none unless it died): reap it
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        return _reply(status, problem, data, req)

    # A first call proves every step works here (namespaces, mounts, uid, filter): otherwise refuse, saying why.
    try:
        probe = serve(json.dumps({"code": "def probe():\n    return 1", "function": "probe", "args": [], "timeout": 10,
                                  "cpu_seconds": 5, "memory_mb": 1024}).encode())
    except Exception as e:
        probe = _result("killed", error=_describe(e))
    if probe != _result("ok", 1):
        out.write((json.dumps({"ready": False, "error": f"the sandbox cannot run a tool here: {probe['error']}"})
                   + "\n").encode())
        out.flush()
        return
    out.write((json.dumps({"ready": True, "hardening": hardening}) + "\n").encode())
    out.flush()
    for line in sys.stdin.buffer:
        try:
            res = serve(line)
        except Exception as e:  # the zygote or a call process misbehaved: report, then end; the pool replaces us
            out.write((json.dumps(_result("killed", error=f"sandbox worker error: {_describe(e)}")) + "\n").encode())
            out.flush()
            os._exit(1)
        out.write((json.dumps(res) + "\n").encode())
        out.flush()


def _read_exactly(fd: int, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("the call process did not report within its deadline")
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("the zygote is gone")
        data += chunk
    return data


def _reply(status: int, problem: int, data: bytes, req: dict) -> dict:
    if problem == _SETUP_FAILED:
        return _result("killed", error=_cap(f"sandbox setup failed: {data.decode(errors='replace')}"))
    if problem == 1:
        return _result("timeout", error=f"wall time limit ({req['timeout']} s) exceeded")
    if problem == 2:
        return _result("too_large", error="result too large")
    if problem == _CPU_LIMIT or not data and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return _result("timeout", error=f"CPU time limit ({req['cpu_seconds']} s) exceeded")
    if not data and os.WIFEXITED(status) and os.WEXITSTATUS(status) == _SETUP_EXIT:
        return _result("killed", error="sandbox setup failed in the tool's process")
    if not data:
        sig = os.WTERMSIG(status)
        how = f"by {({s.value: s.name for s in signal.Signals}).get(sig, f'signal {sig}')}" \
            if os.WIFSIGNALED(status) else f"with status {os.WEXITSTATUS(status)}"
        return _result("killed", error=f"the tool's process ended {how} before returning a result")
    try:
        return _checked(_parse_json(data, _ENVELOPE_MAX))
    except ValueError as e:  # the tool wrote to the reply pipe itself: bytes, depth, NaN, surrogates
        return _result("bad_result", error=_cap(f"unreadable reply from the tool's process: {e}"))


# ---- the caller's side ------------------------------------------------------------------------------------------

class Sandbox:
    """A pool of `workers` warm workers; `run` is thread-safe (each call takes an idle worker, waiting at most
    `queue_timeout` seconds for one). Raises RuntimeError, saying why, where tools cannot be run as promised."""

    def __init__(self, workers: int = 2, timeout: float = 3.0, cpu_seconds: int = 3, memory_mb: int = 1024,
                 queue_timeout: float = 60.0):
        self.timeout, self.cpu_seconds, self.memory_mb = timeout, cpu_seconds, memory_mb
        self.queue_timeout = queue_timeout
        self._workers = 0
        self._idle: queue.Queue = queue.Queue()
        self.hardening: dict = {}
        try:
            for _ in range(workers):
                self._idle.put(self._start())
                self._workers += 1
        except BaseException:  # a refusal: the workers already started go too
            self.close()
            raise

    def _start(self) -> subprocess.Popen:
        # A minimal environment: the worker holds no secret of the caller. Under ifcore.reaper, in a session of
        # its own: a worker that is replaced or stopped leaves nothing behind.
        # The worker imports the caller's own ifcore (the first on its path), in isolated mode all the same.
        proc = reaper.popen([sys.executable, "-I", "-c", _WORKER_MAIN, _ROOT], grace=1, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", env=_WORKER_ENV)
        line = _readline(proc, time.monotonic() + 60)
        ready = json.loads(line) if line else {"error": "it did not start (python -I, ifcore.judge.sandbox._worker)"}
        if not ready.get("ready"):
            reaper.stop(proc)
            raise RuntimeError(f"sandbox worker refused: {ready.get('error')}")
        self.hardening = ready["hardening"]
        return proc

    def run(self, code: str, function: str, args: list | tuple = ()) -> dict:
        """Call `function(*args)` defined by `code`; {"ok", "result", "error", "kind"}, never an exception.
        Arguments that are not a list of JSON values, or a closed sandbox, give kind "error"."""
        if not isinstance(args, (list, tuple)):
            return _result("error", error=f"args must be a list, got {type(args).__name__}")
        try:
            request = json.dumps({"code": str(code), "function": str(function), "args": list(args),
                                  "timeout": self.timeout, "cpu_seconds": self.cpu_seconds,
                                  "memory_mb": self.memory_mb}, allow_nan=False) + "\n"
        except (TypeError, ValueError, RecursionError) as e:
            return _result("error", error=_cap(f"args are not JSON: {_describe(e)}"))
        if not self._workers:
            return _result("error", error="the sandbox is closed")
        try:
            proc = self._idle.get(timeout=self.queue_timeout)
        except queue.Empty:
            return _result("timeout", error=f"no sandbox worker free within {self.queue_timeout} s")
        held = [proc]  # what goes back to the idle queue, whatever happens (None: start one next time)
        try:
            return self._call(held, request.encode())
        except Exception as e:  # a worker that cannot be restarted: this call fails, the next one tries again
            return _result("killed", error=_cap(f"sandbox error: {_describe(e)}"))
        finally:
            self._idle.put(held[0])

    def _call(self, held: list, request: bytes) -> dict:
        proc = held[0]
        for fresh in (False, True):
            if proc is None or fresh or proc.poll() is not None:  # died between calls: a fresh worker
                if proc is not None:
                    reaper.stop(proc)
                held[0] = None
                held[0] = proc = self._start()
            try:
                proc.stdin.write(request)
                proc.stdin.flush()
                break
            except (OSError, ValueError):  # died between calls, its reaper not yet gone: the request never
                continue                    # reached it
        line = _readline(proc, time.monotonic() + self.timeout + 30)
        if line is None:  # the worker died or hangs: replace it, the call counts as killed
            reaper.stop(proc)
            held[0] = None
            return _result("killed", error="the sandbox worker died during the call")
        try:
            return _checked(_parse_json(line, _LINE_MAX))
        except ValueError as e:
            return _result("bad_result", error=_cap(f"unreadable reply from the sandbox worker: {e}"))

    def close(self) -> None:
        """Stop the workers (waits for calls in flight)."""
        for _ in range(self._workers):
            proc = self._idle.get()
            if proc is None:
                continue
            proc.stdin.close()  # the worker ends at EOF, and its reaper with it
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            reaper.stop(proc)
        self._workers = 0

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _readline(proc: subprocess.Popen, deadline: float) -> bytes | None:
    """One reply line from a worker, or None if it ended, the deadline passed or the line grew past _LINE_MAX.
    Reads the raw descriptor so that nothing is buffered between calls."""
    fd, data = proc.stdout.fileno(), b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > _LINE_MAX or not select.select([fd], [], [], left)[0]:
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
                memory_mb: int = 1024, helpers: bool = True, wrapper: list | tuple = ()) -> dict:
    """One call the slow way, ScopeIF's evaluation pattern: a fresh `python -I` per call with RLIMIT_AS and
    RLIMIT_CPU and no other hardening; `helpers=False` leaves out word_count and split_sentences; `wrapper`:
    an argv prefix the interpreter runs under (`ifcore bench sandbox` times bubblewrap's per-call cost)."""
    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))

    request = {"code": code, "function": function, "args": list(args), "helpers": helpers}
    try:
        done = subprocess.run([*wrapper, sys.executable, "-I", "-c", _SPAWNED], preexec_fn=limits, capture_output=True,
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
