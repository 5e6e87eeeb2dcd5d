"""The `ifcore` command line: one subcommand per concern, each a thin call into the module that owns it.

Imports are inside the branches so that `ifcore verify` on a reward worker never loads torch or spaCy.
Flags: `--input FILE` / `--output FILE` for files, `--output-dir DIR` for folders (older spellings stay as
hidden aliases). Exit status: 0 done; 1 done, but some lines or rows were bad (each reported); 2 nothing
done: a usage error, a missing or unreadable file, a bad line in a file that must be whole, a bad config.
Such an error is one line on stderr, `ifcore CMD: error: FILE:LINE: field: what`, never a traceback. 141: the
reader of standard output went away (`| head`), quietly, as SIGPIPE would end a C tool.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="ifcore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="verify JSONL {response, constraints} lines (schema v1)",
                       description="One output line per input line, in order: {line, id (the row's, if any), "
                                   "verdicts (each with its constraint's id), ila, cla, scopeif, scopeif_flat} "
                                   "or {line, id, error}.")
    p.add_argument("--input", help="JSONL file (default: standard input)")
    p.add_argument("--output", help="JSONL file (default: standard output)")
    p.add_argument("--constraints", help="a JSON list of constraints (or JSONL, one per line) shared by every "
                                         "line; the lines then carry {id?, response} only")
    p.add_argument("--alpha", type=float, default=3.0,
                   help="graded-reward penalty severity (ScopeIF eq. 5; default: 3.0)")

    p = sub.add_parser("train", help="GRPO on the embedded policy (or --model NAME); writes DIR/metrics.jsonl",
                       description="Precedence: TrainConfig defaults < the --config file < the flags given.")
    if next((a for a in argv if not a.startswith("-")), None) == "train":  # only then: its flags are many
        from ifcore.train.config import TrainConfig  # plain data: --help never loads torch

        p.add_argument("--config", help="JSON or YAML file of TrainConfig fields")
        _add_dataclass_flags(p, TrainConfig)

    p = sub.add_parser("validate-dataset", help="check every label of a JSONL prompt dataset before a run")
    p.add_argument("file", help="JSONL, one sample per line")
    p.add_argument("--label-key", default="label", help="field holding the schema v1 constraints (default: label)")
    p.add_argument("--input-key", default="prompt", help="field holding the prompt (default: prompt)")

    p = sub.add_parser("eval", help="score JSONL {prompt, response} on a benchmark with its official checkers, or "
                                    "generate them with --model first")
    p.add_argument("what", nargs="+", choices=["ifeval", "ifbench", "scopeif", "muldimif", "followbench"],
                   help="the benchmark whose shipped prompts are scored; several with --model: each into "
                        "OUTPUT_DIR/BENCHMARK, then one table of them all")
    p.add_argument("--responses", help="JSONL {prompt, response}, the official input format "
                                       "(scopeif: {id or prompt, response}; muldimif: {id, response})")
    p.add_argument("--model", help="instead of --responses: generate them with this model (cached; written to "
                                   "OUTPUT_DIR/responses.jsonl), then score")
    p.add_argument("--limit", type=int, help="--model: a seeded subset of N prompts, scored alone")
    p.add_argument("--subset-seed", type=int, default=0, help="--limit: the subset's seed (default: 0)")
    p.add_argument("--output-dir", default=".", help="for eval_results_{strict,loose}.jsonl (scopeif: verdicts.jsonl) "
                                                     "and summary.json (default: .)")
    p.add_argument("--on-duplicate", choices=["error", "first", "last"], default="error",
                   help="two responses to one prompt (or ScopeIF instance): an error naming both lines (default), "
                        "or keep the first or the last")
    p.add_argument("--letter-seed", default="paper",
                   help="ifeval: the 2023 official code draws a random letter for a non-letter "
                        "keywords:letter_frequency kwarg; 'paper' (default) seeds the draws as the IFEval paper's "
                        "run, an integer seeds them, 'none' reads the character literally as the current official "
                        "code does")
    p.add_argument("--allow-missing", action="store_true",
                   help="score only the prompts (instances) that have a response and exit 0; without it, prompts "
                        "without a response (ifeval, ifbench: scored as failed) or responses matching no prompt "
                        "make the exit status 1")
    p.add_argument("--test", help="scopeif: an official test.json (default: the shipped sample of 268 instances); "
                                  "muldimif: an official test.json (default: the shipped one)")
    p.add_argument("--mode", choices=["official", "corrected"], default="official",
                   help="muldimif: official (default) reproduces the official scorer, quirks included; corrected "
                        "judges what the schema expresses through ifcore.verify and counts where the modes differ")
    p.add_argument("--max-prompt-tokens", type=int,
                   help="muldimif/followbench --model (local or vllm backend): skip prompts longer than this many tokens "
                        "(default: the model's context, max_position_embeddings, less --max-new-tokens: the room "
                        "the answer needs); the summary counts them")
    p.add_argument("--judge-template", help="followbench: a text file with the judge prompt ({kind}, {level}, "
                                            "{steps}, {answer}); default: ours (ifcore.bench.followbench)")
    p.add_argument("--formalized", help="scopeif: schema formalizations JSONL (default: the shipped ones)")
    _add_generation_flags(p)
    _add_judge_flags(p)

    p = sub.add_parser("generate", help="complete JSONL rows {prompt} or {messages}: the same rows with `response`")
    p.add_argument("--model", required=True, help="a registry name (tiny, smollm2-135m), a from_pretrained folder or "
                                                  "a hub id in the local cache; --backend openai: the served name")
    p.add_argument("--input", required=True, help="JSONL, one {prompt} (a string) or {messages} (a chat) per row")
    p.add_argument("--output", required=True, help="JSONL: the input rows, each with `response` added")
    _add_generation_flags(p)

    p = sub.add_parser("serve", help="an OpenAI-compatible server (vLLM, else transformers serve) for a model, until "
                                     "Ctrl-C")
    p.add_argument("--model", required=True, help="a registry name (tiny, smollm2-135m) or a from_pretrained folder")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine)")
    p.add_argument("--port", type=int, default=8000, help="(default: 8000)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda (default: auto)")
    p.add_argument("--engine", default="auto", choices=["auto", "vllm", "transformers"],
                   help="auto (default): vLLM where its environment exists (`make vllm`), else transformers serve")
    p.add_argument("--precision", choices=["fp32", "bf16"],
                   help="vLLM: fp32 or bf16 (default: fp32 on a CPU, the model's dtype on a GPU)")

    p = sub.add_parser("labels", help="OpenRLHF prompt rows {prompt, label} from IFEval/IFBench-style rows "
                                      "(the instruction types schema v1 expresses; docs/graded_ifeval.md)")
    p.add_argument("what", choices=["ifeval", "ifbench"], help="whose shipped prompts to read without --input")
    p.add_argument("--input", help="JSONL {prompt, instruction_id_list, kwargs} (default: the shipped prompts)")
    p.add_argument("--output", help="JSONL file (default: standard output)")
    p.add_argument("--approximate", action="store_true",
                   help="also use the approximate mappings (their agreement with the official checkers is below 100%%"
                        " or their rule differs)")

    p = sub.add_parser("synth", help="synthesize ScopeInstruct-style train/test JSONL (factorized, from a seed)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--output-dir", help="directory for train.jsonl, test.jsonl, stats.json")
    out.add_argument("--out", dest="output_dir", help=argparse.SUPPRESS)  # the old spelling
    p.add_argument("--train", type=int, default=4000, help="training instructions (default: 4000)")
    p.add_argument("--test", type=int, default=256, help="held-out instructions (default: 256)")
    p.add_argument("--seed", type=int, default=0, help="seeds the draws of instructions and witnesses (default: 0)")
    p.add_argument("--profile", choices=["tiny", "full"], default="tiny",
                   help="witness size: tiny (the embedded CPU policy) or full (~300-word responses) (default: tiny)")
    # The LLM path (ScopeIF's synthesis prompts; docs/synthesis.md): only with --llm-url.
    g = p.add_argument_group("LLM synthesis (ScopeIF tables 9-12 through an OpenAI-compatible endpoint)")
    g.add_argument("--llm-url", help="endpoint base URL, e.g. http://127.0.0.1:8000/v1 (key: $IFCORE_JUDGE_KEY "
                                     "or $OPENAI_API_KEY)")
    g.add_argument("--llm-model", help="model name at the endpoint (default: $IFCORE_JUDGE_MODEL)")
    g.add_argument("--seeds", help="JSONL of seed instructions {prompt} (default: the template tasks)")
    g.add_argument("--iterations", type=int, default=10, help="chained atomic-generation calls per combination "
                                                              "(default: 10, as the paper)")
    g.add_argument("--combinations", type=int, help="Scope x Target x Range combinations drawn (default: all)")
    g.add_argument("--crossovers", type=int, help="crossover calls (default: (train + test) / 5)")
    g.add_argument("--concurrency", type=int, default=8, help="requests in flight at most (default: 8)")

    p = sub.add_parser("audit", help="fidelity of the ScopeIF-Test formalizations: whole-instruction responses and "
                                      "human-judged probes against the verifier (exit 1 when a response fails)")
    p.add_argument("--formalized", help="formalization rows (default: the ones shipped with ifcore)")
    p.add_argument("--whole", help="whole-instruction responses, '' to skip (default: the repository's "
                                   "tests/data/scopeif_whole.jsonl)")
    p.add_argument("--probes", help="human-judged probes, '' to skip (default: tests/data/scopeif_probes.jsonl; "
                                    "the blind set is tests/data/scopeif_probes_blind.jsonl)")

    p = sub.add_parser("judge-eval", help="judge meta-evaluation: an LLM judge's accuracy (per Scope, Target and "
                                           "Range category) and pairwise agreement, the deterministic verdicts of "
                                           "the formalized ScopeIF-Test constraints as ground truth")
    p.add_argument("--responses", help="JSONL {id or instruction_id, response} (default: the repository's "
                                       "tests/data/scopeif_whole.jsonl, 1,380 responses to 260 instructions)")
    p.add_argument("--limit", type=int, default=100, help="responses judged, whole instructions drawn with --seed "
                                                           "(default: 100; 0: all)")
    p.add_argument("--seed", type=int, default=0, help="--limit: the draw (default: 0)")
    p.add_argument("--test", help="an official test.json (default: the shipped sample)")
    p.add_argument("--formalized", help="schema formalizations JSONL (default: the shipped ones)")
    p.add_argument("--output-dir", help="also write judge_eval.json and items.jsonl (the verdicts) there")
    _add_judge_flags(p)

    p = sub.add_parser("runs", help="list the training runs and eval outputs under folders: status, headline "
                                    "metrics, the configuration fields that differ")
    p.add_argument("paths", nargs="*", default=["runs"], help="folders to search (default: runs)")

    p = sub.add_parser("compare", help="compare arms of training runs (paired by seed) or eval outputs (paired "
                                       "over prompts) with the notebooks' statistics; the first is the baseline")
    p.add_argument("paths", nargs="+", help="run or eval folders, or folders holding them")
    p.add_argument("--confidence", type=float, default=0.95, help="family-wise level (default: 0.95)")

    p = sub.add_parser("report", help="the executed notebooks as an HTML site with an index, readable offline "
                                      "(make report)")
    p.add_argument("--input", default="papermill_runs", help="folder of executed notebooks (default: papermill_runs)")
    p.add_argument("--output-dir", default="report", help="where the site is written (default: report)")
    p.add_argument("--results", metavar="PAGE", help="also write the results page generated from the renderings "
                                                     "(make report: docs/results.md) and the README's results block")
    p.add_argument("--readme", default="README.md", help="with --results: the README whose block is rewritten "
                                                         "(default: README.md)")

    p = sub.add_parser("bench", help="speed benchmarks; run under `taskset -c 0` for one core")
    p.add_argument("what", choices=["verify", "rewards", "ifeval", "generate", "sandbox", "train", "muldimif",
                                    "followbench"],
                   help="verify: constraint checks per second on ~300-word responses, 5 constraints each; "
                        "rewards: 1,024 rollouts x 5 constraints, verification included; "
                        "ifeval: 541 IFEval responses, strict and loose; "
                        "generate: greedy tokens/s at batch 1 and 32, in process (fp32, bf16), through vLLM and "
                        "through transformers serve; "
                        "sandbox: judge-tool executions/s, warm hardened pool vs a fresh interpreter per call; "
                        "train: seconds per GRPO step, the embedded trainer (fp32 and bf16) vs TRL's GRPOTrainer, "
                        "same model and batch (needs the dev extra's trl); "
                        "muldimif, followbench: scoring speed on the agreement reference responses in tests/data "
                        "(muldimif: official and corrected mode; followbench: the rule part)")
    p.add_argument("--official-dir", help="ifeval: a checkout of the official instruction_following_eval, timed too")
    p.add_argument("--responses", help="ifeval: JSONL {prompt, response} (default: the GPT-4 responses in tests/data); "
                                       "muldimif {id, response}, followbench {prompt, response} (default: the "
                                       "reference files in tests/data)")
    p.add_argument("--repeats", type=int, default=5, help="ifeval: timed runs after the first (default: 5)")
    p.add_argument("--model", default="smollm2-135m", help="generate, train: the model (default: smollm2-135m)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generate, train: per completion (default: 64)")
    p.add_argument("--no-server", action="store_true", help="generate: in process only")
    p.add_argument("--backends", help="generate: comma-separated, of in-process:fp32, in-process:bf16, vllm:fp32, "
                                      "vllm:bf16, transformers (default: in-process:fp32,in-process:bf16,vllm:bf16,"
                                      "transformers)")
    p.add_argument("--threads", help="generate: comma-separated core counts (default: all this process may use)")

    p = sub.add_parser("openrlhf-plan", help="the OpenRLHF launch command of a run and its memory plan per GPU "
                                             "(ifcore.run.openrlhf); exit 2 when it cannot fit")
    p.add_argument("--runbook", help="one of the GPU runbook's configurations (smoke, smoke-1gpu, 02, 03, 04)")
    p.add_argument("--config", help="TrainConfig fields as JSON (over the runbook's, if given)")
    p.add_argument("--model", help="hub id or folder (the runbook's: Qwen/Qwen3-4B, ...)")
    p.add_argument("--max-prompt-len", type=int, help="the longest prompt in tokens (runbook: 1024)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs of one node (default: the runbook's, else 8)")
    p.add_argument("--nodes", type=int, default=1, help="nodes (default: 1)")
    p.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default: 80)")
    p.add_argument("--zero-stage", type=int, default=2, choices=[0, 1, 2, 3],
                   help="DeepSpeed ZeRO stage of the actor (default: 2)")
    p.add_argument("--max-tokens-per-gpu", type=int, help="token budget per GPU and micro-batch (0: micro_batch)")
    p.add_argument("--vllm-gpu-util", type=float, default=0.5,
                   help="vLLM's share of each GPU when colocated (default: 0.5)")
    p.add_argument("--no-gradient-checkpointing", action="store_true",
                   help="plan without gradient checkpointing (on by default, as upstream's examples)")

    args = parser.parse_args(argv)
    if args.command == "eval":
        benchmarks, args.what = list(dict.fromkeys(args.what)), args.what[0]
        if len(benchmarks) > 1:
            return _eval_several(parser, args, benchmarks)
    return _run_reporting(parser, args)


def _eval_several(parser, args, benchmarks: list[str]) -> int:
    """`ifcore eval A B ... --model M`: each benchmark in turn into OUTPUT_DIR/BENCHMARK (one failing does not stop
    the others), then one table of every eval output under OUTPUT_DIR (`ifcore runs`' rows: earlier evaluations of
    other models there are rows too). The exit status is the worst of theirs."""
    import copy
    from pathlib import Path

    if args.model is None:
        parser.exit(2, "ifcore eval: error: several benchmarks need --model (a --responses file answers one)\n")
    statuses = []
    for benchmark in benchmarks:
        one = copy.copy(args)
        one.what, one.output_dir = benchmark, str(Path(args.output_dir) / benchmark)
        print(f"== {benchmark}", flush=True)
        try:
            statuses.append(_run_reporting(parser, one))
        except SystemExit as stop:  # parser.exit of an error: said on stderr already; the next benchmark goes on
            statuses.append(stop.code)
        if statuses[-1] == 130:  # interrupted: the rest too
            return 130
    from ifcore.viz import runs_table

    table = runs_table([args.output_dir])
    table = table[table["kind"] == "eval"]
    print(table[["what", "model", "parameters", "metrics", "differs in", "run"]].to_string(index=False))
    return max(statuses)


def _run_reporting(parser, args) -> int:
    """_run(args), its errors said in one line each with the exit status they mean."""
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; what was half-built is already removed
        print(f"ifcore {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ifcore verify ... | head`: the reader went away; quiet, as SIGPIPE would be
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return 141
    except (OSError, ValueError, ImportError) as e:  # JsonlError, ConstraintError and JSON errors are ValueErrors
        parser.exit(2, f"ifcore {args.command}: error: {_one_line(e)}\n")


def _run(args) -> int:
    if args.command == "verify":
        from ifcore.verify import verify_jsonl

        # Binary in: verify_jsonl decodes each line itself, so one stray byte costs that line only.
        shared = None
        if args.constraints:
            from ifcore.jsonl import read_jsonl

            with open(args.constraints, encoding="utf-8") as f:
                text = f.read()
            try:
                shared = json.loads(text)
            except json.JSONDecodeError:  # not one document: JSONL, one constraint per line
                shared = read_jsonl(args.constraints)
            if isinstance(shared, dict):  # {"constraints": [...]} or one constraint
                shared = shared["constraints"] if "constraints" in shared else [shared]
            if not isinstance(shared, list) or not shared:
                raise ValueError(f"--constraints {args.constraints}: expected a non-empty JSON list of constraints")
        stdin = contextlib.nullcontext(getattr(sys.stdin, "buffer", sys.stdin))
        with open(args.input, "rb") if args.input else stdin as lines, _open_out(args.output) as fout:
            counts = verify_jsonl(lines, fout, alpha=args.alpha, constraints=shared)
        if not counts["lines"]:
            print(f"ifcore verify: warning: {args.input or 'standard input'} is empty: nothing verified",
                  file=sys.stderr)
        print(f"{counts['lines']} line{'s' * (counts['lines'] != 1)}: {counts['ok']} ok, {counts['errors']} "
              f"error{'s' * (counts['errors'] != 1)}", file=sys.stderr)
        return 1 if counts["errors"] else 0
    if args.command == "judge-eval":
        from pathlib import Path

        from ifcore.bench.scopeif import load_formalizations, load_test
        from ifcore.judge import meta
        from ifcore.paths import repo_path

        if args.limit < 0:
            raise ValueError(f"--limit: must be at least 0, got {args.limit}")
        responses = meta.sample_responses(meta.read_responses(repo_path(args.responses, "tests/data/scopeif_whole.jsonl")),
                                          args.limit or None, args.seed)
        rows = meta.items(responses, load_test(args.test), load_formalizations(args.formalized))
        with _judge(args) as judge:
            if judge is None:
                raise ValueError("judge-eval needs a judge: --judge-url and --judge-model (or --judge-serve NAME)")
            result = meta.evaluate(judge, rows)
        summary = {"judge": {"model": judge.client.settings.model, "mode": judge.mode}, "responses": len(responses),
                   **result["summary"]}
        if args.output_dir:
            out = Path(args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "judge_eval.json").write_text(json.dumps(summary, indent=1) + "\n")
            with open(out / "items.jsonl", "w", encoding="utf-8", errors="backslashreplace") as f:
                for row, v in zip(rows, result["verdicts"]):
                    f.write(json.dumps({**{k: row[k] for k in ("id", "constraint_index", "response_index", "truth")},
                                        "verdict": v}, ensure_ascii=False) + "\n")
        print(meta.report(summary))
        return 0
    if args.command == "audit":
        from ifcore.bench.audit import report
        from ifcore.bench.scopeif import _data
        from ifcore.paths import repo_path

        text, ok = report(args.formalized or _data("formalized.jsonl"),
                          repo_path(args.whole, "tests/data/scopeif_whole.jsonl") if args.whole != "" else None,
                          repo_path(args.probes, "tests/data/scopeif_probes.jsonl") if args.probes != "" else None)
        print(text)
        return 0 if ok else 1
    if args.command == "train":
        from ifcore.train.config import load_config
        from ifcore.train.grpo import train

        flags = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
        train(load_config(args.config, **flags))
        return 0
    if args.command == "openrlhf-plan":
        from ifcore.run.openrlhf import RUNBOOK, describe

        if args.runbook and args.runbook not in RUNBOOK:
            raise ValueError(f"--runbook: one of {', '.join(RUNBOOK)}, got {args.runbook!r}")
        book = RUNBOOK.get(args.runbook, {"config": {}, "max_prompt_len": 1024})
        model = args.model or book.get("model")
        if not model:
            raise ValueError("--model: give a hub id or folder, or --runbook")
        print(describe({**book["config"], **json.loads(args.config or "{}")}, model=model,
                       max_prompt_len=args.max_prompt_len or book["max_prompt_len"],
                       gpus_per_node=args.gpus_per_node or book.get("gpus_per_node", 8), nodes=args.nodes,
                       gpu_gib=args.gpu_gib,
                       zero_stage=args.zero_stage, max_tokens_per_gpu=args.max_tokens_per_gpu,
                       vllm_gpu_util=args.vllm_gpu_util, gradient_checkpointing=not args.no_gradient_checkpointing))
        return 0
    if args.command == "runs":
        from ifcore.viz import runs_table

        table = runs_table(args.paths)
        if table.empty:
            print(f"no training run or eval output under {', '.join(args.paths)}", file=sys.stderr)
            return 1
        print(table.to_string(index=False))
        return 0
    if args.command == "report":
        from ifcore.report import build

        pages = build(args.input, args.output_dir)
        print(f"{pages[0]} and {len(pages) - 1} notebook pages")
        if args.results:
            from ifcore.report import write_results

            write_results(args.input, args.results, args.readme)
            print(f"{args.results} and the results block of {args.readme}, from {args.input}")
        return 0
    if args.command == "compare":
        from ifcore.viz import compare_runs

        print("\n".join(compare_runs(args.paths, args.confidence)))
        return 0
    if args.command == "validate-dataset":
        from ifcore.integrations import validate_dataset

        with open(args.file, "rb") as f:
            n, errors = validate_dataset(f, label_key=args.label_key, input_key=args.input_key)
        for e in errors:  # each starts with "line N: "; the summary names the file
            print(e, file=sys.stderr)
        print(f"{args.file}: {n} samples, {len(errors)} errors")
        return 1 if errors else 0
    if args.command == "eval" and (args.responses is None) == (args.model is None):
        raise ValueError("give --responses FILE (score them) or --model NAME (generate them, then score), one of them")
    if args.command == "eval" and args.limit is not None and (args.model is None or args.limit < 1):
        raise ValueError(f"--limit: a subset of at least 1 prompt, drawn for --model, got {args.limit}")
    if args.command in ("eval", "generate") and args.backend == "vllm" and args.model:
        import ifcore.train  # noqa: F401 - registers `tiny` in the model registry
        from ifcore.infer.serve import serve

        # Served on 127.0.0.1 for this command only: stopped with its process group, and waited for, at the end.
        with serve(args.model, engine="vllm", precision=args.precision) as args.served:
            return _eval_model(args) if args.command == "eval" else _generate_rows(args)
    if args.command == "eval" and args.model:
        return _eval_model(args)
    if args.command == "generate":
        return _generate_rows(args)
    if args.command == "serve":
        import ifcore.train  # noqa: F401 - registers `tiny` in the model registry
        from ifcore.infer.serve import serve_forever

        return serve_forever(args.model, args.host, args.port, args.device, args.engine, args.precision)
    if args.command == "bench" and args.what == "generate":
        import ifcore.train  # noqa: F401 - registers `tiny`
        from ifcore.infer.serve import BACKENDS, bench_generate

        backends = args.backends.split(",") if args.backends else BACKENDS
        if args.no_server:
            backends = [b for b in backends if b.startswith("in-process")]
        threads = [int(n) for n in args.threads.split(",")] if args.threads else None
        bench_generate(args.model, threads=threads, max_new_tokens=args.max_new_tokens, backends=backends,
                       out=sys.stdout)
        return 0
    if args.command == "eval" and args.what in ("ifeval", "ifbench"):
        from pathlib import Path

        from ifcore.bench.ifeval import PAPER_LETTER_SEED, run_benchmark

        seed = {"paper": PAPER_LETTER_SEED, "none": None}.get(args.letter_seed, args.letter_seed)
        if not (seed is None or str(seed).lstrip("-").isdigit()):
            raise ValueError(f"--letter-seed: expected paper, none or an integer, got {seed!r}")
        summary = run_benchmark(args.what, *_ifeval_like(args.what), Path(args.responses), Path(args.output_dir),
                                letter_seed=None if seed is None else int(seed), on_duplicate=args.on_duplicate,
                                allow_missing=args.allow_missing)
        return _print_scores(args, summary)
    if args.command == "eval" and args.what in ("muldimif", "followbench"):
        return _print_scores(args, _eval_new(args, args.responses))
    if args.command == "eval" and args.what == "scopeif":
        from ifcore.bench.scopeif import evaluate

        with _judge(args) as judge:
            summary = evaluate(args.responses, args.output_dir, args.test, args.formalized, judge=judge,
                               on_duplicate=args.on_duplicate)
        return _print_scores(args, summary)
    if args.command == "labels":
        from collections import Counter

        from ifcore.bench import mapping
        from ifcore.bench.ifbench import PROMPTS as IFBENCH_PROMPTS
        from ifcore.bench.ifeval import PROMPTS as IFEVAL_PROMPTS
        from ifcore.jsonl import iter_jsonl

        path = args.input or (IFEVAL_PROMPTS if args.what == "ifeval" else IFBENCH_PROMPTS)
        counts, skipped, bad = Counter(), Counter(), 0
        with open(path, "rb") as f, _open_out(args.output) as fout:
            for n, row, problem in iter_jsonl(f, ("prompt", "instruction_id_list", "kwargs")):
                try:
                    if problem:
                        raise ValueError(problem)
                    one = mapping.write_labels([row], fout, approximate=args.approximate)
                except Exception as e:  # noqa: BLE001 - a bad row is reported with its line; the others go on
                    bad += 1
                    what = _one_line(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {_one_line(e)}"
                    print(f"ifcore labels: error: {path}:{n}: {what}", file=sys.stderr)
                    continue
                skipped.update(one.pop("skipped"))
                counts.update(one)
        if not counts["rows"] and not bad:
            raise ValueError(f"{path}: no rows (the file is empty)")
        listed = ", ".join(f"{k} ({n})" for k, n in skipped.most_common()) or "none"
        print(f"{counts['mapped']} of {counts['instructions']} instructions mapped; {counts['written']} of "
              f"{counts['rows']} rows written (the others have no mapped instruction); {bad} bad rows; "
              f"skipped: {listed}", file=sys.stderr)
        return 1 if bad else 0
    if args.command == "bench" and args.what == "ifeval":
        from ifcore.bench.official import bench_ifeval

        bench_ifeval(official_dir=args.official_dir, responses=args.responses, repeats=args.repeats)
        return 0
    if args.command == "bench" and args.what in ("muldimif", "followbench"):
        print(json.dumps(_bench_new(args)))
        return 0
    if args.command == "bench" and args.what == "train":
        from ifcore.bench.speed import train_speed

        print(json.dumps(train_speed(args.model, max_new_tokens=args.max_new_tokens)))
        return 0
    if args.command == "bench" and args.what in ("verify", "rewards", "sandbox"):
        from ifcore.bench import speed

        bench = {"verify": speed.verify_speed, "rewards": speed.rewards_speed, "sandbox": speed.sandbox_speed}
        print(json.dumps(bench[args.what]()))
        return 0
    if args.command == "synth" and args.llm_url:
        from ifcore.judge.client import JudgeClient
        from ifcore.synth import seed_instructions, write_llm_dataset

        client = JudgeClient(args.llm_url, args.llm_model, concurrency=args.concurrency)
        stats = write_llm_dataset(args.output_dir, client, n_train=args.train, n_test=args.test, seed=args.seed,
                                  iterations=args.iterations, combinations=args.combinations,
                                  crossovers=args.crossovers, seeds=seed_instructions(args.seeds))
        print(json.dumps(stats, indent=1))
        return 0
    if args.command == "synth":
        from ifcore.synth import write_dataset

        stats = write_dataset(args.output_dir, n_train=args.train, n_test=args.test, seed=args.seed,
                              profile=args.profile)
        print(json.dumps(stats, indent=1))
        return 0
    raise AssertionError(f"no branch for {args.command}")


def _generate_rows(args) -> int:
    from ifcore.infer.generate import generate_jsonl

    backend, params = _generation(args)
    with _endpoint_errors(args):
        n = generate_jsonl(backend, args.input, args.output, params, cache=not args.no_cache)
    print(f"{args.output}: {n} rows", file=sys.stderr)
    return 0


def _add_generation_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("generation (ifcore.infer.generate; docs/inference.md)")
    g.add_argument("--max-new-tokens", type=int, default=512, help="tokens per completion at most (default: 512)")
    g.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0 samples")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default: 1)")
    g.add_argument("--seed", type=int, default=0, help="the sampling seed (default: 0)")
    g.add_argument("--batch-size", type=int, default=32, help="local: sequences per forward batch (default: 32)")
    g.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="local and vllm on a CPU: fp32 (default) or bf16 (fast with AVX512-BF16 or AMX; cached apart)")
    g.add_argument("--backend", choices=["local", "openai", "vllm"], default="local",
                   help="local: the model in this process (default); openai: an OpenAI-compatible server (vLLM, "
                        "`ifcore serve`) that serves --model; vllm: --model served with vLLM on 127.0.0.1 for this "
                        "command (`make vllm`; 32 requests in flight)")
    g.add_argument("--base-url", help="openai: the server's URL, e.g. http://127.0.0.1:8000/v1 (default: "
                                      "$OPENAI_BASE_URL)")
    g.add_argument("--api-key", help="openai: the key (default: $OPENAI_API_KEY; a flag shows in the process list)")
    g.add_argument("--concurrency", type=int, default=8, help="openai: requests in flight at most (default: 8)")
    g.add_argument("--no-cache", action="store_true", help="generate everything again (the cache is not read or "
                                                           "written)")


def _add_judge_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("LLM judge (ScopeIF tool-grounded verification, ifcore.judge; key: "
                                  "$IFCORE_JUDGE_KEY or $OPENAI_API_KEY)")
    g.add_argument("--judge-url", help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: "
                                       "$IFCORE_JUDGE_URL; none: what the schema cannot express stays unjudged)")
    g.add_argument("--judge-model", help="the served judge model (default: $IFCORE_JUDGE_MODEL)")
    g.add_argument("--judge-serve", metavar="NAME", help="instead of --judge-url: serve this registry model "
                                                          "(e.g. smollm2-135m) on loopback with vLLM (`make vllm`), "
                                                          "else transformers serve, "
                                                          "for the run")
    g.add_argument("--judge-mode", choices=["tgv", "static", "llm"], default="tgv",
                   help="tgv: tools designed for each response (default); static: designed without it; llm: no tool")
    g.add_argument("--judge-concurrency", type=int, default=8, help="judge requests in flight at most (default: 8)")
    g.add_argument("--judge-tools", type=int, default=2, help="sandbox workers running the judge's tools (default: 2)")
    g.add_argument("--judge-max-tokens", type=int, default=4096, help="tokens per judge reply at most (default: 4096)")
    g.add_argument("--judge-retries", type=int, help="retries of a judge reply that does not parse (or whose tool "
                                                    "fails) at every stage (default: the ScopeIF reference code's, "
                                                    "1 for tools and 2 for judgments)")


@contextlib.contextmanager
def _judge(args):
    """The TGV judge the judge flags describe (None without a URL), its sandbox closed afterwards; the judge's
    stage counts go to stderr."""
    import os

    if not (args.judge_url or args.judge_serve or os.environ.get("IFCORE_JUDGE_URL")):
        yield None
        return
    from ifcore.judge.tgv import judge_session

    for flag in ("judge_concurrency", "judge_tools", "judge_max_tokens"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')}: must be at least 1, got {getattr(args, flag)}")
    if args.judge_serve:  # a SIGTERM must still stop the server this process starts (the with blocks below)
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.judge_retries is not None and args.judge_retries < 0:
        raise ValueError(f"--judge-retries: must be at least 0, got {args.judge_retries}")
    with judge_session(args.judge_url, args.judge_model, args.judge_serve, args.judge_mode, args.judge_concurrency,
                       args.judge_tools, args.judge_max_tokens, args.judge_retries) as judge:
        yield judge
        print(f"judge {judge.client.settings.model} ({args.judge_mode}): {dict(sorted(judge.counts.items()))}, "
              f"{judge.client.requests} requests", file=sys.stderr)


def _generation(args):
    """(backend, GenParams) from the generation flags; a bad value is a ValueError naming its flag."""
    import math

    import ifcore.train  # noqa: F401 - registers `tiny` in the model registry
    from ifcore.infer.generate import Endpoint, GenParams, Local

    checks = {"max_new_tokens": (args.max_new_tokens >= 1, "at least 1"),
              "temperature": (0 <= args.temperature < math.inf, "a finite number >= 0"),
              "top_p": (0 < args.top_p <= 1, "in (0, 1]"), "seed": (args.seed >= 0, "at least 0"),
              "batch_size": (args.batch_size >= 1, "at least 1"), "concurrency": (args.concurrency >= 1, "at least 1")}
    for name, (ok, what) in checks.items():
        if not ok:
            raise ValueError(f"--{name.replace('_', '-')}: must be {what}, got {getattr(args, name)}")
    params = GenParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                       seed=args.seed)
    if args.backend == "vllm":
        return args.served, params
    if args.backend == "openai":
        return Endpoint(args.model, base_url=args.base_url, api_key=args.api_key, concurrency=args.concurrency), params
    return Local(args.model, batch_size=args.batch_size, precision=args.precision), params


@contextlib.contextmanager
def _endpoint_errors(args):
    """An OpenAI client error (no server there, a refused request) as a ValueError naming the server."""
    if args.backend == "local":
        yield
        return
    import os

    import openai

    try:
        yield
    except openai.OpenAIError as e:
        where = (args.served.base_url if args.backend == "vllm" else args.base_url
                 or os.environ.get("OPENAI_BASE_URL") or "the OpenAI API")
        raise ValueError(f"{where}: {type(e).__name__}: {e}") from None


def _ifeval_like(name: str) -> tuple:
    """(shipped prompts, checker registry) of IFEval or IFBench, which share IFEval's scorer."""
    if name == "ifeval":
        from ifcore.bench.ifeval import IFEVAL, PROMPTS
        return PROMPTS, IFEVAL
    from ifcore.bench.ifbench import IFBENCH, PROMPTS
    return PROMPTS, IFBENCH


def _eval_model(args) -> int:
    """`ifcore eval BENCH --model NAME`: the benchmark's prompts (all, or a subset drawn with --subset-seed),
    completed through ifcore.infer (cached), written as OUTPUT_DIR/responses.jsonl, then scored by the benchmark's
    own scorer. A subset is scored alone: its prompt-level figures are over its prompts only (IFEval's legacy
    letter draws still follow the whole benchmark, as in a full run)."""
    from dataclasses import asdict
    from pathlib import Path

    from ifcore.infer.generate import generate
    from ifcore.jsonl import read_jsonl

    backend, params = _generation(args)
    out = Path(args.output_dir)
    if args.what in ("muldimif", "followbench"):
        return _eval_new_model(args, backend, params)
    if args.what == "scopeif":
        from ifcore.bench.scopeif import evaluate, load_test

        everything = load_test(args.test)
    else:
        from ifcore.bench import ifeval

        prompts_path, checkers = _ifeval_like(args.what)
        everything = read_jsonl(prompts_path, ("prompt", "instruction_id_list", "kwargs"))
    rows = _subset(everything, args)
    with _endpoint_errors(args):
        completions = generate(backend, [r["prompt"] for r in rows], params, cache=not args.no_cache,
                               with_tokens=True)
    responses = _write_responses(out, "id" if args.what == "scopeif" else "prompt", rows, completions)
    generation = {"model": backend.model_id, "params": asdict(params), "prompts": len(rows),
                  "of": len(everything), "subset_seed": args.subset_seed if len(rows) < len(everything) else None,
                  # A count is None for a completion cached before counts were kept.
                  "reached_max_new_tokens": sum((n or 0) >= params.max_new_tokens for _, n in completions)}
    if args.what == "scopeif":
        with _judge(args) as judge:
            summary = evaluate(responses, out, args.test, args.formalized, judge=judge)
        del summary["missing_responses"]  # the instances not drawn by --limit: a subset is scored alone
    else:
        seed = {"paper": ifeval.PAPER_LETTER_SEED, "none": None}.get(args.letter_seed, args.letter_seed)
        if not (seed is None or str(seed).lstrip("-").isdigit()):
            raise ValueError(f"--letter-seed: expected paper, none or an integer, got {seed!r}")
        seed = None if seed is None or args.what == "ifbench" else int(seed)
        results = ifeval.evaluate(everything, {r["prompt"]: text for r, (text, _) in zip(rows, completions)},
                                  checkers, letter_seed=seed)
        chosen = {r["prompt"] for r in rows}
        results = {mode: [x for x in records if x["prompt"] in chosen] for mode, records in results.items()}
        for mode, records in results.items():
            with open(out / f"eval_results_{mode}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(x) + "\n" for x in records)
        summary = {"benchmark": args.what, "responses": str(responses), "letter_seed": seed,
                   **ifeval.summarize(results)}
    summary["generation"] = generation
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return _print_scores(args, summary)


def _subset(rows: list, args) -> list:
    """--limit N: a seeded draw (--subset-seed) of N rows, kept in benchmark order; else every row."""
    import random

    if args.limit is None or args.limit >= len(rows):
        return rows
    return [rows[i] for i in sorted(random.Random(args.subset_seed).sample(range(len(rows)), args.limit))]


def _write_responses(out, key: str, rows: list, completions: list):
    """OUTPUT_DIR/responses.jsonl, {key, response} per row: the input `eval --responses` reads back."""
    out.mkdir(parents=True, exist_ok=True)
    responses = out / "responses.jsonl"
    with open(responses, "w", encoding="utf-8", errors="backslashreplace") as f:  # a lone surrogate: its JSON escape
        f.writelines(json.dumps({key: r[key], "response": text}, ensure_ascii=False) + "\n"
                     for r, (text, _) in zip(rows, completions))
    return responses


def _print_scores(args, summary: dict) -> int:
    """The one printer of every `eval` path: what was scored, the scores in percent (units in the header), what
    was written, and a warning line for what a reader would otherwise miss; it adds the code version to
    summary.json. Returns the exit status: 1 when
    prompts lacked a response or responses matched no prompt (unless --allow-missing), else 0."""
    name, warnings = args.what, []
    pct = lambda v: f"{'n/a':>8}" if v is None else f"{100 * v:8.2f}"  # noqa: E731
    # Every eval path ends here: its summary.json also records the code that scored it (`ifcore runs` shows it).
    from pathlib import Path

    from ifcore.tracking import code_version

    summary["code"] = code_version()
    (Path(args.output_dir) / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if name == "muldimif":
        print(f"{name} ({summary['mode']} mode): {summary['items']} items, {summary['constraints']} constraints scored"
              + (f"; the modes disagree on {summary['disagreements']} verdicts" if "disagreements" in summary else ""))
        print(f"{'%':>8}{'all-pass':>10}{'macro':>8}{'micro':>8}")
        print(f"{'':>8}{pct(summary['all']['rate']):>10}{pct(summary['macro']['rate'])}{pct(summary['micro']['rate'])}")
        written = "verdicts.jsonl, summary.json"
        if "generation" not in summary and summary["items"] < summary["of"]:
            warnings.append(f"{summary['of'] - summary['items']} of {summary['of']} items have no response (left out)")
    elif name == "followbench":
        by = summary["by"]
        print(f"{name}: {summary['answered']} answered; scored by rule {by['rule']}, by the judge {by['judge']}, "
              f"unjudged {by['unjudged']}")
        print(f"{'level':>8}{'HSR %':>8}{'SSR %':>8}   scored")
        for level, x in summary["levels"].items():
            print(f"{level:>8}{pct(x['HSR'])}{pct(x['SSR'])}   {x['scored']} of {x['of']}")
        print("CSL " + ("n/a: no seed instruction has all five levels scored" if summary["CSL"] is None else
                        f"{summary['CSL']:.2f} over {summary['CSL_groups']} seed instructions"))
        written = "verdicts.jsonl, summary.json"
        if "generation" not in summary and summary["answered"] < summary["of"]:
            warnings.append(f"{summary['of'] - summary['answered']} of {summary['of']} prompts have no response "
                            "(left out)")
    elif name == "scopeif":
        print(f"{name}: {summary['instances']} instances scored; {summary['judged_constraints']} of "
              f"{summary['constraints']} constraints judged (" + ", ".join(f"{k} {v}" for k, v in
                                                                          summary["judged_by"].items()) + ")")
        print(f"{'%':>8}{'CSR':>8}{'ISR':>8}")
        print(f"{'':>8}" + "".join(f"{'n/a':>8}" if v is None else f"{100 * v:8.2f}"
                                   for v in (summary["CSR"], summary["ISR"])))
        written = "verdicts.jsonl, summary.json"
        if summary.get("missing_responses"):
            warnings.append(f"{summary['missing_responses']} instances have no response (left out)")
    else:
        s, lo = summary["strict"], summary["loose"]
        print(f"{name}: {s['prompts']} prompts, {s['instructions']} instructions scored")
        print(f"{'%':>8}{'prompt':>13}{'instruction':>13}")
        for mode, x in (("strict", s), ("loose", lo)):
            print(f"{mode:>8}{100 * x['prompt_level']:13.2f}{100 * x['instruction_level']:13.2f}")
        written = "eval_results_strict.jsonl, eval_results_loose.jsonl, summary.json"
        if summary.get("missing_responses"):
            warnings.append(f"{summary['missing_responses']} prompts have no response"
                            + (" (left out)" if summary.get("missing_scored_as") is None else
                               " (scored as failed, as empty responses)"))
        if summary.get("unmatched_responses"):
            warnings.append(f"{summary['unmatched_responses']} responses match no prompt (ignored)")
    print(f"written in {args.output_dir}: {written}")
    generation = summary.get("generation")
    if generation and generation["reached_max_new_tokens"]:
        n, of = generation["reached_max_new_tokens"], generation["prompts"]
        print(f"ifcore eval: warning: {n} of {of} responses ({100 * n / of:.0f} %) reached --max-new-tokens "
              f"{generation['params']['max_new_tokens']}: cut off, they fail what needs an ending (length, "
              f"end phrases)", file=sys.stderr)
    for w in warnings:
        print(f"ifcore eval: warning: {w}" + ("" if args.allow_missing else
                                              "; exit status 1 (--allow-missing scores what has a response)"),
              file=sys.stderr)
    return 1 if warnings and not args.allow_missing else 0


def _eval_new(args, responses, skipped: dict | None = None) -> dict:
    """Score MulDimIF or FollowBench responses (a JSONL file) into --output-dir."""
    from pathlib import Path

    if args.what == "muldimif":
        from ifcore.bench.muldimif import evaluate

        return evaluate(responses, args.output_dir, mode=args.mode, test_path=args.test,
                        on_duplicate=args.on_duplicate, skipped=skipped)
    import os

    from ifcore.bench.followbench import JUDGE_TEMPLATE, evaluate

    template = JUDGE_TEMPLATE
    if args.judge_template:
        with open(args.judge_template, encoding="utf-8") as f:
            template = f.read()
        try:
            template.format(kind="", level=1, steps="", answer="")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"--judge-template {args.judge_template}: fields are {{kind}} {{level}} {{steps}} "
                             f"{{answer}} (double other braces): {type(e).__name__}: {e}") from None
    judge = None
    if args.judge_serve:
        raise ValueError("--judge-serve: not for followbench; serve the judge yourself and give --judge-url")
    if args.judge_url or os.environ.get("IFCORE_JUDGE_URL"):
        from ifcore.judge.client import JudgeClient

        judge = JudgeClient(args.judge_url, args.judge_model, concurrency=args.judge_concurrency)
    summary = evaluate(responses, args.output_dir, judge=judge, judge_template=template,
                       on_duplicate=args.on_duplicate)  # a failed judge request leaves its item unjudged
    if skipped:
        summary["skipped"] = skipped
        (Path(args.output_dir) / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def _eval_new_model(args, backend, params) -> int:
    """`ifcore eval muldimif|followbench --model`: generate (cached) for every prompt (or a --limit subset, drawn
    as for the other benchmarks), skip prompts longer than the model's context (counted), score, time both."""
    import time
    from pathlib import Path

    from ifcore.infer.generate import generate, too_long

    if args.what == "muldimif":
        from ifcore.bench.muldimif import load_items

        rows = [{"id": x["id"], "input": x["conversations"]} for x in load_items(args.test)]
    else:
        import os

        from ifcore.bench.followbench import load, rule_scored

        # Without a judge only the rule-scored prompts could be scored: the others are not generated.
        judged = bool(args.judge_url or os.environ.get("IFCORE_JUDGE_URL"))
        rows = [{"prompt": x["instruction"], "input": x["instruction"]} for x in load()
                if x["level"] > 0 and (judged or rule_scored(x))]
    everything = len(rows)
    rows = _subset(rows, args)
    skipped = None
    flags, limit = too_long(backend, [r["input"] for r in rows], params, args.max_prompt_tokens)
    if limit is not None:  # the model's tokenizer is here (in process, or a folder served on loopback)
        long = [r for r, f in zip(rows, flags) if f]
        rows = [r for r, f in zip(rows, flags) if not f]
        skipped = {"prompts_longer_than": limit, "count": len(long),
                   "ids": [r.get("id", r.get("prompt", "")[:80]) for r in long]}
        if long:
            print(f"skipped {len(long)} prompts longer than {limit} tokens (not generated, not scored)",
                  file=sys.stderr)
    start = time.perf_counter()
    with _endpoint_errors(args):
        completions = generate(backend, [r["input"] for r in rows], params, cache=not args.no_cache,
                               with_tokens=True)
    generated = time.perf_counter() - start
    out = Path(args.output_dir)
    responses = _write_responses(out, "id" if args.what == "muldimif" else "prompt", rows, completions)
    start = time.perf_counter()
    summary = _eval_new(args, responses, skipped)
    from dataclasses import asdict

    summary["generation"] = {"model": backend.model_id, "params": asdict(params), "prompts": len(rows),
                             "of": everything, "subset_seed": args.subset_seed if args.limit else None,
                             "reached_max_new_tokens": sum((n or 0) >= params.max_new_tokens for _, n in completions),
                             "seconds": round(generated, 1), "scoring_seconds": round(time.perf_counter() - start, 2)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return _print_scores(args, summary)


def _bench_new(args) -> dict:
    """Seconds to score the reference responses (or --responses), the best of --repeats timed runs."""
    import gzip

    from ifcore.jsonl import read_jsonl
    from ifcore.paths import repo_path

    default = "tests/data/muldimif/reference.jsonl.gz" if args.what == "muldimif" else \
        "tests/data/followbench/rule_reference.jsonl.gz"
    path = repo_path(args.responses, default)
    if path.suffix == ".gz":
        rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()]
    else:
        rows = read_jsonl(path, ("id", "response") if args.what == "muldimif" else ("prompt", "response"))
    if args.what == "muldimif":
        from ifcore.bench.muldimif import load_items, verdict_row

        items = {x["id"]: x for x in load_items()}
        pairs = [(items[str(r["id"])], r["response"]) for r in rows]
        runs = {mode: (lambda mode=mode: [verdict_row(item, text, mode) for item, text in pairs])
                for mode in ("official", "corrected")}
        size = {"responses": len(pairs), "constraints": sum(len(item["constraints"]) for item, _ in pairs)}
    else:
        from ifcore.bench.followbench import load, rule_scored, rule_verdict

        by_prompt = {r["instruction"]: r for r in load() if rule_scored(r)}
        pairs = [(by_prompt[r["prompt"]], r["response"]) for r in rows]
        runs = {"rule": lambda: [rule_verdict(r, text) for r, text in pairs]}
        size = {"responses": len(pairs)}
    out = {"benchmark": args.what, "responses_file": str(path), **size}
    for name, run in runs.items():
        run()  # warm: regex compilation, Punkt and the schema's parsers
        best = min(_timed(run) for _ in range(max(args.repeats, 1)))
        out[f"{name}_seconds"] = round(best, 3)
        out[f"{name}_responses_per_second"] = round(len(pairs) / best, 1)
    return out


def _timed(run) -> float:
    import time

    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ifcore")
    except PackageNotFoundError:  # run from a checkout that is not installed
        from ifcore import __version__

        return __version__


def _one_line(e: BaseException) -> str:
    # An OSError names its file; a parser's message can span lines, and the command prints one.
    text = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) and e.filename and e.strerror else str(e)
    return " ".join(text.split())


def _add_dataclass_flags(parser: argparse.ArgumentParser, cls) -> None:
    """--field-name for every field of `cls`, its help the field's metadata["help"] and its default. A flag that
    is not given stays out of the namespace, so that the config file's value (or the default) holds."""
    import dataclasses

    def json_object(text):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"key\": 1}}', got {text!r}")
        return value

    types = {"str": str, "int": int, "float": float, "str | None": str, "dict": json_object}
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        shown = "" if default is None else f" (default: {default if isinstance(default, str) else json.dumps(default)})"
        help_text = (f.metadata.get("help", "") + shown).strip().replace("%", "%%")
        flag = "--" + f.name.replace("_", "-")
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=help_text)
        elif kind in types:
            parser.add_argument(flag, type=types[kind], default=argparse.SUPPRESS, help=help_text,
                                metavar="JSON" if kind == "dict" else kind.split(" ")[0].upper())
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line type for {kind!r}")


def _open_out(path):
    return open(path, "w", encoding="utf-8") if path else contextlib.nullcontext(sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
