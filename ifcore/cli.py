"""The `ifcore` command line: one subcommand per concern, each a thin call into the module that owns it.

Imports are inside the branches so that `ifcore verify` on a reward worker never loads torch or spaCy.
"""
from __future__ import annotations

import argparse
import contextlib
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ifcore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="verify JSONL {response, constraints} lines (schema v1)")
    p.add_argument("--input", help="JSONL file (default: standard input)")
    p.add_argument("--output", help="JSONL file (default: standard output)")
    p.add_argument("--alpha", type=float, default=3.0, help="graded-reward penalty severity (ScopeIF eq. 5)")

    args = parser.parse_args(argv)

    if args.command == "verify":
        from ifcore.verify import verify_jsonl

        with _open_in(args.input) as fin, _open_out(args.output) as fout:
            failed = verify_jsonl(fin, fout, alpha=args.alpha)
        return 1 if failed else 0
    parser.error(f"unknown command {args.command}")
    return 2


def _open_in(path):
    return open(path, encoding="utf-8") if path else contextlib.nullcontext(sys.stdin)


def _open_out(path):
    return open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
