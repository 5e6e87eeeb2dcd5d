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

    p = sub.add_parser("train", help="GRPO on the embedded policy (or --model PATH); writes DIR/metrics.jsonl")
    p.add_argument("--reward", choices=["ila", "cla", "scopeif", "scopeif_flat", "raif"])
    p.add_argument("--steps", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--output-dir", help="metrics.jsonl, TensorBoard events, checkpoints; rerun to resume")
    p.add_argument("--config", help="JSON or YAML file of ifcore.train.grpo.TrainConfig fields")
    p.add_argument("--model", help="a from_pretrained directory (default: the cached warm-started policy)")

    p = sub.add_parser("validate-dataset", help="check every label of a JSONL prompt dataset before a run")
    p.add_argument("file", help="JSONL, one sample per line")
    p.add_argument("--label-key", default="label", help="field holding the schema v1 constraints (default: label)")
    p.add_argument("--input-key", default="prompt", help="field holding the prompt (default: prompt)")

    p = sub.add_parser("eval", help="score JSONL {prompt, response} on a benchmark with its official checkers")
    p.add_argument("what", choices=["ifeval", "ifbench", "scopeif"], help="the benchmark whose shipped prompts are scored")
    p.add_argument("--responses", required=True, help="JSONL {prompt, response}, the official input format")
    p.add_argument("--output-dir", default=".", help="for eval_results_{strict,loose}.jsonl (scopeif: verdicts.jsonl) "
                                                     "and summary.json (default: .)")
    p.add_argument("--letter-seed", default="paper",
                   help="ifeval: the 2023 official code draws a random letter for a non-letter keywords:letter_frequency "
                        "kwarg; 'paper' (default) seeds the draws as the IFEval paper's run, an integer seeds them, "
                        "'none' reads the character literally as the current official code does")
    p.add_argument("--test", help="scopeif: an official test.json (default: the shipped sample of 268 instances)")
    p.add_argument("--formalized", help="scopeif: schema formalizations JSONL (default: the shipped ones)")

    p = sub.add_parser("labels", help="OpenRLHF prompt rows {prompt, label} from IFEval/IFBench-style rows "
                                      "(the instruction types schema v1 expresses; docs/graded_ifeval.md)")
    p.add_argument("what", choices=["ifeval", "ifbench"], help="whose shipped prompts to read without --input")
    p.add_argument("--input", help="JSONL {prompt, instruction_id_list, kwargs} (default: the shipped prompts)")
    p.add_argument("--output", help="JSONL file (default: standard output)")
    p.add_argument("--approximate", action="store_true",
                   help="also use the approximate mappings (their agreement with the official checkers is below 100%%"
                        " or their rule differs)")

    p = sub.add_parser("synth", help="synthesize ScopeInstruct-style train/test JSONL (factorized, from a seed)")
    p.add_argument("--out", required=True, help="directory for train.jsonl, test.jsonl, stats.json")
    p.add_argument("--train", type=int, default=4000, help="training instructions (default: 4000)")
    p.add_argument("--test", type=int, default=256, help="held-out instructions (default: 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", choices=["tiny", "full"], default="tiny",
                   help="witness size: tiny (the embedded CPU policy) or full (~300-word responses)")

    p = sub.add_parser("bench", help="speed benchmarks; run under `taskset -c 0` for one core")
    p.add_argument("what", choices=["verify", "rewards", "ifeval"],
                   help="verify: constraint checks per second on ~300-word responses, 5 constraints each; "
                        "rewards: 1,024 rollouts x 5 constraints, verification included; "
                        "ifeval: 541 IFEval responses, strict and loose")
    p.add_argument("--official-dir", help="ifeval: a checkout of the official instruction_following_eval, timed too")
    p.add_argument("--responses", help="ifeval: JSONL {prompt, response} (default: the GPT-4 responses in tests/data)")
    p.add_argument("--repeats", type=int, default=5, help="ifeval: timed runs after the first (default: 5)")

    args = parser.parse_args(argv)

    if args.command == "verify":
        from ifcore.verify import verify_jsonl

        with _open_in(args.input) as fin, _open_out(args.output) as fout:
            failed = verify_jsonl(fin, fout, alpha=args.alpha)
        return 1 if failed else 0
    if args.command == "train":
        from ifcore.train.grpo import load_config, train

        train(load_config(args.config, reward=args.reward, steps=args.steps, seed=args.seed,
                          output_dir=args.output_dir, model=args.model))
        return 0
    if args.command == "validate-dataset":
        from ifcore.integrations import validate_dataset

        with open(args.file, encoding="utf-8") as f:
            n, errors = validate_dataset(f, label_key=args.label_key, input_key=args.input_key)
        for e in errors:
            print(e, file=sys.stderr)
        print(f"{args.file}: {n} samples, {len(errors)} errors")
        return 1 if errors else 0
    if args.command == "eval" and args.what in ("ifeval", "ifbench"):
        from pathlib import Path

        from ifcore.bench.ifeval import run_benchmark

        from ifcore.bench.ifeval import PAPER_LETTER_SEED

        seed = {"paper": PAPER_LETTER_SEED, "none": None}.get(args.letter_seed, args.letter_seed)
        try:
            run_benchmark(args.what, Path(args.responses), Path(args.output_dir),
                          letter_seed=None if seed is None else int(seed))
        except (OSError, ValueError) as e:
            parser.exit(2, f"ifcore eval: error: {e}\n")
        return 0
    if args.command == "eval" and args.what == "scopeif":
        import json

        from ifcore.bench.scopeif import evaluate

        try:
            summary = evaluate(args.responses, args.output_dir, args.test, args.formalized)
        except (OSError, ValueError) as e:
            parser.exit(2, f"ifcore eval: error: {e}\n")
        print(json.dumps({k: v for k, v in summary.items() if k != "by_category"}, indent=1))
        return 0
    if args.command == "labels":
        from ifcore.bench import mapping
        from ifcore.bench.ifbench import PROMPTS as IFBENCH_PROMPTS
        from ifcore.bench.ifeval import PROMPTS as IFEVAL_PROMPTS, read_jsonl

        try:
            rows = read_jsonl(args.input or (IFEVAL_PROMPTS if args.what == "ifeval" else IFBENCH_PROMPTS),
                              ("prompt", "instruction_id_list", "kwargs"))
            with _open_out(args.output) as fout:
                counts = mapping.write_labels(rows, fout, approximate=args.approximate)
        except (OSError, ValueError) as e:
            parser.exit(2, f"ifcore labels: error: {e}\n")
        skipped = ", ".join(f"{k} ({n})" for k, n in counts["skipped"].items()) or "none"
        print(f"{counts['mapped']} of {counts['instructions']} instructions mapped; {counts['written']} of "
              f"{counts['rows']} rows written (the others have no mapped instruction); skipped: {skipped}",
              file=sys.stderr)
        return 0
    if args.command == "bench" and args.what == "ifeval":
        from ifcore.bench.official import bench_ifeval

        try:
            bench_ifeval(official_dir=args.official_dir, responses=args.responses, repeats=args.repeats)
        except (OSError, ValueError, ImportError) as e:
            parser.exit(2, f"ifcore bench: error: {e}\n")
        return 0
    if args.command == "bench" and args.what in ("verify", "rewards"):
        import json

        from ifcore.bench import speed

        print(json.dumps(speed.verify_speed() if args.what == "verify" else speed.rewards_speed()))
        return 0
    if args.command == "synth":
        import json

        from ifcore.synth import write_dataset

        stats = write_dataset(args.out, n_train=args.train, n_test=args.test, seed=args.seed, profile=args.profile)
        print(json.dumps(stats, indent=1))
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


def _open_in(path):
    return open(path, encoding="utf-8") if path else contextlib.nullcontext(sys.stdin)


def _open_out(path):
    return open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
