"""The judge's sandbox (issue 14, item 2): normal tools work, and hostile ones are contained, reported, and the
pool recovers. No test asserts a time: limits are generous and only the kind of outcome is checked."""
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ifcore import reaper
from ifcore.judge.sandbox import RESULT_CAP, UID_BASE, Sandbox, run_spawned

SECRET = "ifcore-sandbox-secret-6b1f"
REPO = Path(__file__).resolve().parents[1]
MARKER = "ifcore-sandbox-escape-marker"

COUNT_TOOL = """
def count(text):
    return [{"description": "words", "result": word_count(text)},
            {"description": "sentences", "result": len(split_sentences(text))}]
"""


@pytest.fixture(scope="module")
def sandbox():
    os.environ["IFCORE_SANDBOX_TEST_SECRET"] = SECRET  # set before the pool starts: it must not reach a tool
    try:
        with Sandbox(workers=2, timeout=2.0, cpu_seconds=2) as sb:
            yield sb
    finally:
        del os.environ["IFCORE_SANDBOX_TEST_SECRET"]


@pytest.fixture
def as_root(sandbox):
    """Skips (visibly) where the pool could not give each call a uid of its own: not root, or root in a user
    namespace (the tools then run as the caller's uid, without capabilities)."""
    if sandbox.hardening["user"] != "per-call uid":
        pytest.skip(f"needs root: the tools run as the caller's user here ({sandbox.hardening})")


@pytest.fixture(scope="module")
def tcp_server():
    """A listening socket on loopback and a list of the connections it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        while True:
            try:
                accepted.append(server.accept())
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def tool(body: str) -> str:
    """`body` as the body of a function `tool()`."""
    return "import os, sys, signal, socket, subprocess, threading, ctypes, resource, time\n\ndef tool():\n" + \
        "".join(f"    {line}\n" for line in body.strip("\n").splitlines())


def assert_recovers(sb: Sandbox) -> None:
    out = sb.run(COUNT_TOOL, "count", ["One two three. Four five."])
    assert out == {"ok": True, "result": [{"description": "words", "result": 5},
                                          {"description": "sentences", "result": 2}], "error": None, "kind": "ok"}


def test_normal_tool_and_helpers(sandbox):
    assert_recovers(sandbox)
    out = sandbox.run("def f(a, b):\n    return {'sum': a + b, 'sentences': split_sentences('Hi there. Bye.')}",
                      "f", [2, 3])
    assert out["kind"] == "ok" and out["result"] == {"sum": 5, "sentences": ["Hi there.", "Bye."]}


@pytest.mark.parametrize("code, function, error", [
    ("def f(:\n    pass", "f", "SyntaxError"),
    ("def f():\n    return 1 / 0", "f", "ZeroDivisionError"),
    ("def g():\n    return 1", "f", "no function named 'f'"),
    ("def f(x):\n    return x", "f", "TypeError"),  # called with no argument
    ("import sys\ndef f():\n    sys.exit(3)", "f", "SystemExit"),
])
def test_errors_are_reported(sandbox, code, function, error):
    out = sandbox.run(code, function, [])
    assert out["kind"] == "error" and not out["ok"] and out["result"] is None and error in out["error"]
    assert_recovers(sandbox)


def test_concurrent_calls(sandbox):
    calls = [(COUNT_TOOL, "count", [" ".join(["word"] * n) + "."]) for n in range(1, 13)]
    calls.insert(3, (tool("while True: pass"), "tool", []))
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda c: sandbox.run(*c), calls))
    assert outs[3]["kind"] in ("timeout", "killed")
    assert [o["result"][0]["result"] for i, o in enumerate(outs) if i != 3] == list(range(1, 13))


def test_worker_killed_from_outside():
    with Sandbox(workers=1) as sb:
        assert_recovers(sb)
        starter = sb._idle.queue[0].pid  # the worker's reaper; the worker is its child
        worker = next(pid for pid, (parent, _) in reaper._processes().items() if parent == starter)
        os.kill(worker, 9)
        for _ in range(1000):  # until it is dead (a zombie, or already reaped by its reaper)
            try:
                if Path(f"/proc/{worker}/stat").read_text().split(")")[-1].split()[0] == "Z":
                    break
            except FileNotFoundError:
                break
            time.sleep(0.01)
        assert_recovers(sb)  # a fresh worker takes the call
        assert sb._idle.queue[0].pid != starter
    assert sb.run(COUNT_TOOL, "count", ["x"]) == {"ok": False, "result": None, "error": "the sandbox is closed",
                                                  "kind": "error"}


def test_spawned_baseline():
    assert run_spawned(COUNT_TOOL, "count", ["One two three. Four five."])["result"][0]["result"] == 5
    assert run_spawned("def f():\n    print('noise')\n    return [1]", "f")["result"] == [1]
    assert run_spawned("def f():\n    return 1 / 0", "f")["kind"] == "error"
    assert run_spawned("def f():\n    while True: pass", "f", timeout=2, cpu_seconds=1)["kind"] in ("timeout", "killed")


def _outside_paths():
    return [Path("/tmp") / MARKER, REPO / "tests" / MARKER, Path("/root") / MARKER, Path("/") / MARKER]


# (name, tool body, the kinds that count as contained). Each is followed by a normal call.
ADVERSARIAL = [
    ("write scratch dir", "with open('out.txt', 'w') as f:\n    f.write('data')\nreturn open('out.txt').read()",
     {"error"}),
    ("write /tmp", f"with open('/tmp/{MARKER}', 'w') as f:\n    f.write('data')", {"error"}),
    ("write repo", f"with open({str(REPO / 'tests' / MARKER)!r}, 'w') as f:\n    f.write('data')", {"error"}),
    ("write /root", f"with open('/root/{MARKER}', 'w') as f:\n    f.write('data')", {"error"}),
    ("chdir / and write", f"os.chdir('/')\nwith open('{MARKER}', 'w') as f:\n    f.write('data')", {"error"}),
    ("append to a file os.write", f"fd = os.open('/tmp/{MARKER}', os.O_WRONLY | os.O_CREAT)\nreturn os.write(fd, b'x')",
     {"error"}),
    ("fork", "return os.fork()", {"error"}),
    ("subprocess", f"return subprocess.run(['sh', '-c', 'echo x > /tmp/{MARKER}']).returncode", {"error"}),
    ("os.system", f"return os.system('echo x > /tmp/{MARKER}')", {"ok", "error"}),  # -1: its fork fails
    ("fork bomb loop", "n = 0\nfor _ in range(100000):\n    try:\n        os.fork()\n        n += 1\n"
                       "    except OSError:\n        pass\nreturn n", {"ok", "timeout", "killed"}),
    ("threading bomb", "ts = [threading.Thread(target=time.sleep, args=(60,)) for _ in range(10000)]\n"
                       "for t in ts:\n    t.start()", {"error"}),
    ("memory bomb", "return len(bytearray(4 << 30))", {"error"}),
    ("growing list", "xs = []\nwhile True:\n    xs.append(' ' * 10**6)", {"error", "killed"}),
    ("infinite loop", "while True:\n    pass", {"timeout", "killed"}),
    ("sleep", "time.sleep(100)", {"timeout"}),
    ("ignore signals then loop", "for s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):\n"
                                 "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass", {"timeout", "killed"}),
    ("setsid then loop", "try:\n    os.setsid()\nexcept OSError:\n    pass\nwhile True:\n    pass",
     {"timeout", "killed"}),
    ("recursion bomb", "def f(n):\n    return f(n + 1)\nreturn f(0)", {"error"}),
    ("deep recursion with raised limit", "sys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nreturn f(0)",
     {"error", "killed", "timeout"}),  # Python frames live on the heap: it may simply run out of time
    ("ctypes libc.system", f"return ctypes.CDLL(None).system(b'echo x > /tmp/{MARKER}')", {"ok", "error"}),
    ("ctypes write to memory", "ctypes.memmove(8, b'boom', 4)", {"killed"}),
    ("ctypes null read", "return ctypes.cast(16, ctypes.POINTER(ctypes.c_int)).contents.value", {"killed"}),
    ("raise rlimits", "resource.setrlimit(resource.RLIMIT_NPROC, (1000, 1000))", {"error"}),
    ("raise cpu rlimit", "resource.setrlimit(resource.RLIMIT_CPU, (100, 100))", {"error"}),
    ("kill parent", "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(5)", {"error", "killed"}),
    ("signal pid 1", "os.kill(1, 0)", {"error"}),  # signal 0: only asks whether it may
    ("huge output", "return 'x' * 20000", {"too_large"}),
    ("many small items", "return list(range(5000))", {"too_large"}),
    ("not JSON", "return {1, 2, 3}", {"bad_result"}),
    ("object result", "return object()", {"bad_result"}),
    ("deeply nested result", "x = []\nfor _ in range(100000):\n    x = [x]\nreturn x", {"bad_result"}),
    ("flood the reply pipe", "while True:\n    os.write(3, b'x' * 65536)", {"too_large"}),
    ("forge garbage reply", "os.write(3, b'{not json')\nos._exit(0)", {"bad_result"}),
    ("exit before result", "os._exit(0)", {"killed"}),
    ("stdout and stderr flood", "for _ in range(200):\n    print('x' * 100000)\n    print('y' * 100000, file=sys.stderr)\n"
                                "return 7", {"ok"}),
    ("close fds then loop", "for fd in range(0, 16):\n    try:\n        os.close(fd)\n    except OSError:\n"
                            "        pass\nwhile True:\n    pass", {"timeout", "killed"}),
]


@pytest.mark.parametrize("name, body, kinds", ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_contained(sandbox, name, body, kinds):
    out = sandbox.run(tool(body), "tool", [])
    assert out["kind"] in kinds, out
    assert out["ok"] == (out["kind"] == "ok") and (out["error"] is None) == out["ok"]
    if name == "stdout and stderr flood":
        assert out["result"] == 7
    if name in ("os.system", "ctypes libc.system"):
        assert out["result"] != 0  # the shell never ran
    if name == "fork bomb loop" and out["kind"] == "ok":
        assert out["result"] == 0
    for path in _outside_paths():  # nothing lands outside the call's own tmpfs: the rest is read-only to it
        assert not path.exists(), path
    assert_recovers(sandbox)


def test_environment_has_no_secret(sandbox):
    out = sandbox.run(tool("return dict(os.environ)"), "tool", [])
    assert out["kind"] == "ok" and set(out["result"]) == {"PATH"}
    out = sandbox.run(tool("return open('/proc/self/environ').read()"), "tool", [])
    assert out["kind"] in ("ok", "error") and SECRET not in json.dumps(out)  # as nobody it is unreadable
    assert_recovers(sandbox)


@pytest.mark.parametrize("target", ["parent", "test process", "pid 1"])
def test_other_environ_unreadable(sandbox, as_root, target):
    pid = {"parent": "os.getppid()", "test process": str(os.getpid()), "pid 1": "1"}[target]
    out = sandbox.run(tool(f"return open(f'/proc/{{{pid}}}/environ').read()"), "tool", [])
    assert out["kind"] == "error" and out["error"].startswith(("PermissionError", "FileNotFoundError"))
    assert SECRET not in json.dumps(out)
    assert_recovers(sandbox)


def test_no_network(sandbox, tcp_server):
    port, accepted = tcp_server
    for body in (f"return socket.create_connection(('127.0.0.1', {port}), timeout=1).fileno()",
                 "return socket.getaddrinfo('pypi.org', 443)",
                 "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nreturn s.sendto(b'x', ('8.8.8.8', 53))",
                 f"import _socket\ns = _socket.socket()\nreturn s.connect_ex(('127.0.0.1', {port}))"):
        out = sandbox.run(tool(body), "tool", [])
        assert out["kind"] == "error" or (out["kind"] == "ok" and out["result"] != 0), (body, out)
    assert accepted == []
    assert_recovers(sandbox)


def test_no_network_even_through_ctypes(sandbox, tcp_server):
    """The network namespace holds against code that skips the socket module."""
    if sandbox.hardening["network"] != "namespace":
        pytest.skip(f"needs root: no network namespace here, only the socket module is blocked ({sandbox.hardening})")
    port, accepted = tcp_server
    body = f"""
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(2, 1, 0)
addr = (ctypes.c_ubyte * 16)(2, 0, {port >> 8}, {port & 255}, 127, 0, 0, 1)
return [fd, libc.connect(fd, addr, 16), ctypes.get_errno()]"""
    out = sandbox.run(tool(body), "tool", [])
    assert out["kind"] == "ok" and out["result"][1] == -1, out
    assert accepted == []


@pytest.mark.parametrize("body", [
    "return open('/etc/shadow').read()",
    "return open('/root/.bashrc').read()",  # /root is an empty tmpfs, and unreadable to the tool's uid
    "os.setuid(0)",
    # Signals that harm nothing should the barrier fail (0: only asks; SIGCONT: wakes what is stopped).
    "return os.kill(" + str(os.getpid()) + ", 0)",  # the test process
    "os.kill(-1, signal.SIGCONT)",  # every process it may signal but itself: none, or another call's child
], ids=["shadow", "root dir", "setuid 0", "signal test process", "signal -1"])
def test_root_only_barriers(sandbox, as_root, body):
    out = sandbox.run(tool(body), "tool", [])
    may_succeed = "-1" in body and sandbox.hardening["syscalls"] != "seccomp allowlist"
    assert out["kind"] in (("ok", "error") if may_succeed else ("error",)) and out["result"] is None, out
    assert_recovers(sandbox)


def test_runs_as_own_uid_with_limits(sandbox, as_root):
    body = "return [os.getuid(), os.getgid(), os.getgroups(), os.getcwd(), " \
           "[resource.getrlimit(getattr(resource, 'RLIMIT_' + r)) for r in ('FSIZE', 'NPROC', 'CORE', 'CPU')]]"
    out = sandbox.run(tool(body), "tool", [])
    uid, gid, groups, cwd, limits = out["result"]
    assert uid == gid and uid > UID_BASE and groups == [] and cwd == "/tmp"
    assert limits == [[0, 0], [0, 0], [0, 0], [2, 3]]
    assert sandbox.run(tool("return os.getuid()"), "tool", [])["result"] not in (uid, 65534)  # a uid per call


def test_seccomp_denies(sandbox):
    """Where the filter is on, the calls it denies fail with EPERM before any other check (rlimits, uids)."""
    if sandbox.hardening["syscalls"] != "seccomp allowlist":
        pytest.skip(f"no seccomp filter on this machine ({sandbox.hardening})")
    for body in ("os.fork()", "socket.socket(socket.AF_UNIX)", "os.kill(os.getppid(), 0)",
                 "os.execv('/bin/true', ['true'])",
                 "return ctypes.CDLL(None).syscall(435, 0, 0)",  # clone3, unknown to Python
                 "return os.kill(os.getpid(), 0)"):
        out = sandbox.run(tool(body), "tool", [])
        assert (out["kind"] == "error" and "not permitted" in out["error"]) or out["result"] == -1, (body, out)
    assert_recovers(sandbox)


def test_scratch_dir_is_fresh():
    with Sandbox(workers=1) as sb:  # one worker: the same worker takes both calls
        first = sb.run(tool("open('empty', 'w').close()\nreturn [os.getcwd(), os.listdir('.')]"), "tool", [])
        assert first["kind"] == "ok" and first["result"] == ["/tmp", ["empty"]]
        assert sb.run(tool("return os.listdir('.')"), "tool", []) == {"ok": True, "result": [], "error": None,
                                                                     "kind": "ok"}


def test_result_cap_is_the_reference_one():
    assert RESULT_CAP == 10_000
