"""The measurement behind the sandbox's seccomp allowlist (issue 24): which system calls tools make once the filter
is in, as root, under strace.

    strace -f -qq -o /tmp/sandbox.strace python scripts/sandbox_syscalls.py run
    python scripts/sandbox_syscalls.py parse /tmp/sandbox.strace
    # every tool of the tests: strace -f -qq -o /tmp/all.strace python -m pytest tests/test_sandbox.py, then parse

`run` hands a dozen honest judge-style tools (the helpers, the preloaded stdlib modules, an error, a scratch file,
a memory and a recursion bomb) to a one-worker pool; `parse` lists, for every process that installed the filter
(its prctl(PR_SET_SECCOMP) line), the calls it made afterwards, those outside ifcore.judge.sandbox's allowlist,
how many of these were refused with EPERM, and the commands tools gave ioctl, fcntl and futex (issue 36: the
filter allows only some, by value; a refused one shows as "EPERM"). On 2026-12-05 `run` needed 12 distinct
calls, the whole of tests/test_sandbox.py 27 allowed ones (docs/sandbox.md).
"""
from __future__ import annotations

import collections
import re
import sys

TOOLS = [
    ("def f(t):\n    return [word_count(t), len(split_sentences(t))]", ["One two three. Four five! Six? " * 50]),
    ("import re, collections\ndef f(t):\n    return collections.Counter(re.findall(r'\\w+', t)).most_common(3)",
     ["a b a c b a " * 100]),
    ("import statistics, math, json\ndef f(t):\n    xs = [len(w) for w in t.split()]\n"
     "    return [statistics.mean(xs), math.sqrt(sum(xs)), json.loads(json.dumps(xs))[:3]]",
     ["alpha beta gamma " * 30]),
    ("import datetime, random, textwrap, difflib, unicodedata\ndef f(t):\n    return [str(datetime.date(2024, 1, 2)), "
     "random.Random(0).randint(0, 9), textwrap.wrap(t, 20)[:2], difflib.SequenceMatcher(None, t, t[::-1]).ratio(), "
     "unicodedata.category('A')]", ["some text to wrap around here"]),
    ("import decimal, fractions, csv, io, heapq, bisect, html\ndef f(t):\n    return [str(decimal.Decimal('1.1') + 1), "
     "str(fractions.Fraction(1, 3)), list(csv.reader(io.StringIO(t))), html.escape('<a>'), heapq.nlargest(2, [3, 1]), "
     "bisect.bisect([1, 2, 3], 2)]", ["a,b\nc,d"]),
    ("def f(t):\n    return 1 / 0", ["x"]),
    ("def f(:\n  pass", ["x"]),
    ("import time\ndef f(t):\n    time.sleep(0.01)\n    return len(t)", ["x"]),
    ("def f(t):\n    with open('notes.txt', 'w') as fh:\n        fh.write('x')", ["x"]),
    ("def f(t):\n    return [t.encode('utf-8')[:3].hex(), t.upper(), sorted(set(t))]", ["héllo wörld 你好"]),
    ("def f(t):\n    xs = []\n    while True:\n        xs.append(' ' * 10**6)", ["x"]),
    ("def f(t):\n    def g(n):\n        return g(n + 1)\n    return g(0)", ["x"]),
]


def run() -> None:
    from ifcore.judge.sandbox import Sandbox
    with Sandbox(workers=1, timeout=10, cpu_seconds=5) as sb:
        for code, args in TOOLS:
            print(sb.run(code, "f", args)["kind"], flush=True)


def parse(path: str) -> None:
    from ifcore.judge.sandbox import _ALLOWED_SYSCALLS
    filtered, calls, refused = set(), collections.Counter(), collections.Counter()
    commands = collections.defaultdict(collections.Counter)  # the command arguments of ioctl, fcntl, futex
    line_re = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]")
    command_re = re.compile(r"^\d+\s+(ioctl|fcntl|futex)\([^,]+, ([A-Za-z0-9_|]+)")
    with open(path) as f:
        for line in f:
            m = line_re.match(line)
            if not m:
                continue
            pid, name = m.groups()
            if pid in filtered:
                calls[name] += 1
                command = command_re.match(line)
                if command:
                    commands[command.group(1)][command.group(2) + (" EPERM" if "EPERM" in line else "")] += 1
                refused[name] += "EPERM" in line and name not in _ALLOWED_SYSCALLS
            if name == "prctl" and "PR_SET_SECCOMP" in line:
                filtered.add(pid)
    print(f"{len(filtered)} filtered processes")
    print("calls made after the filter:", " ".join(sorted(calls)))
    print("outside the allowlist:", " ".join(sorted(set(calls) - set(_ALLOWED_SYSCALLS))) or "none")
    print("refused with EPERM:", dict(sorted((k, v) for k, v in refused.items() if v)))
    for name, counts in sorted(commands.items()):
        print(f"{name} commands:", dict(sorted(counts.items())))


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run()
    elif sys.argv[1:2] == ["parse"] and len(sys.argv) == 3:
        parse(sys.argv[2])
    else:
        sys.exit(__doc__)
