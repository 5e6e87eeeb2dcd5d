"""`ifcore bench ifeval`: time our IFEval evaluation and, given its code, the official one in the same process.

The official google-research `instruction_following_eval` code is only read from `--official-dir` at bench
time; it is never shipped. Offline it needs two stand-ins, the ones `ifcore.bench.ifeval` uses: NLTK's Punkt
sentence splitter with the English parameters of the `punkt` package instead of the downloaded pickle, and a
no-op `nltk.download`. Its langdetect calls are seeded like ours, so its verdicts are repeatable.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

from ifcore.bench import ifeval
from ifcore.jsonl import read_jsonl

GPT4_RESPONSES = (Path(__file__).resolve().parents[2] / "tests" / "data" / "ifeval"
                  / "input_response_data_gpt4_20231107_145030.jsonl")
_OFFICIAL_FILES = ("instructions.py", "instructions_util.py", "instructions_registry.py", "evaluation_lib.py")


def _time(run, repeats, before=None):
    """(first run's seconds, seconds of each further run, result of the last run)."""
    times = []
    for _ in range(repeats + 1):
        if before:
            before()
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return times[0], times[1:], result


def bench_ifeval(official_dir=None, responses=None, repeats: int = 5, out=None) -> dict:
    """Strict and loose evaluation of every IFEval response, timed: ours, then the official code if given.

    `official_dir` is a checkout of instruction_following_eval (the folder itself or one holding it), imported
    as package `instruction_following_eval` with the stand-ins in place. Each side's first run includes its lazy
    loads (NLTK, Punkt parameters, langdetect profiles); the further runs start with our per-text caches
    cleared, so every run tokenizes and detects afresh."""
    out = out or sys.stdout
    if repeats < 0:
        raise ValueError(f"repeats must be >= 0, not {repeats}")
    responses_path = Path(responses) if responses else GPT4_RESPONSES
    if not responses_path.is_file():
        raise ValueError(f"no responses at {responses_path}: give --responses FILE")
    rows = read_jsonl(ifeval.PROMPTS, ("prompt", "instruction_id_list", "kwargs"))
    prompt_to_response = ifeval.read_responses(responses_path)
    n_instructions = sum(len(r["instruction_id_list"]) for r in rows)

    caches = (ifeval._sentences, ifeval._words, ifeval.detect_language)
    first, warm, ours = _time(lambda: ifeval.evaluate(rows, prompt_to_response, ifeval.IFEVAL), repeats,
                              before=lambda: [c.cache_clear() for c in caches])
    report = {"responses": str(responses_path), "prompts": len(rows), "instructions": n_instructions,
              "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
              "ours": {"first_s": first, "median_s": statistics.median(warm) if warm else first,
                       "min_s": min(warm) if warm else first}}
    summary = ifeval.summarize(ours)
    report["ours"].update({k: summary[m][lvl] for k, m, lvl in (
        ("P-S", "strict", "prompt_level"), ("I-S", "strict", "instruction_level"),
        ("P-L", "loose", "prompt_level"), ("I-L", "loose", "instruction_level"))})

    if official_dir:
        directory = Path(official_dir)
        if (directory / "instruction_following_eval").is_dir():
            directory = directory / "instruction_following_eval"
        missing = [f for f in _OFFICIAL_FILES if not (directory / f).is_file()]
        if missing:
            raise ValueError(f"{directory} is not an instruction_following_eval checkout: missing {missing}")
        import langdetect
        import nltk
        import nltk.data
        import nltk.tokenize

        punkt = ifeval._punkt()
        nltk.download = lambda *args, **kwargs: True
        nltk.tokenize._get_punkt_tokenizer = lambda language="english": punkt  # behind nltk.word_tokenize
        load = nltk.data.load
        nltk.data.load = lambda url, *a, **k: punkt if "punkt" in str(url) else load(url, *a, **k)
        langdetect.DetectorFactory.seed = 0
        # The official modules import each other as `instruction_following_eval.*`, whatever the folder's name.
        for name in [m for m in sys.modules if m.split(".")[0] == "instruction_following_eval"]:
            del sys.modules[name]
        spec = importlib.machinery.ModuleSpec("instruction_following_eval", None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
        sys.modules["instruction_following_eval"] = importlib.util.module_from_spec(spec)
        lib = importlib.import_module("instruction_following_eval.evaluation_lib")
        inputs = [lib.InputExample(key=r.get("key", 0), instruction_id_list=r["instruction_id_list"],
                                   prompt=r["prompt"], kwargs=r["kwargs"]) for r in rows]

        def official():
            return {mode: [fn(inp, prompt_to_response) for inp in inputs]
                    for mode, fn in (("strict", lib.test_instruction_following_strict),
                                     ("loose", lib.test_instruction_following_loose))}

        first, warm, theirs = _time(official, repeats)
        agree = {mode: sum(a == b for o, t in zip(ours[mode], theirs[mode])
                           for a, b in zip(o["follow_instruction_list"], t.follow_instruction_list))
                 for mode in ("strict", "loose")}
        report["official"] = {"dir": str(official_dir), "first_s": first,
                              "median_s": statistics.median(warm) if warm else first,
                              "min_s": min(warm) if warm else first, "agreeing_verdicts": agree}

    print(f"IFEval bench: {len(rows)} responses, {n_instructions} instructions, strict + loose, "
          f"{report['cores']} core(s) available (taskset -c 0 for one core)", file=out)
    print(f"{'':10}{'first run':>12}{f'median of {repeats}':>14}{'min':>9}", file=out)
    for side in ("ours", "official"):
        if side in report:
            r = report[side]
            print(f"{side:10}{r['first_s']:11.3f}s{r['median_s']:13.3f}s{r['min_s']:8.3f}s", file=out)
    r = report["ours"]
    print(f"ours: P-S {100 * r['P-S']:.2f}  I-S {100 * r['I-S']:.2f}  P-L {100 * r['P-L']:.2f}  "
          f"I-L {100 * r['I-L']:.2f}", file=out)
    if "official" in report:
        a = report["official"]["agreeing_verdicts"]
        print(f"verdicts, ours vs official: {a['strict']}/{n_instructions} agree strict, "
              f"{a['loose']}/{n_instructions} loose", file=out)
    return report
