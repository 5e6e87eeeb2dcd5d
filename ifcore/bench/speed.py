"""Speed benchmarks behind `ifcore bench verify`: commands, not timed tests. Run under `taskset -c 0` for
one-core figures; times are this process's CPU time, so other load on the machine does not inflate them."""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import statistics
import time

from ifcore import synth
from ifcore.rewards import score_response
from ifcore.schema import Constraint, parse_label
from ifcore.text import _PUNKT, Doc
from ifcore.verify import verify


@contextlib.contextmanager
def one_core():
    """Pin this process to one core for the duration (Linux); yields the core's number or None."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield min(cpus)
    finally:
        os.sched_setaffinity(0, cpus)


def verify_speed(responses: int = 400, constraints: int = 5, seed: int = 0, large: bool = True) -> dict:
    """Constraint checks per second for fresh ~300-word responses with `constraints` constraints each.

    Constraints come from synthetic instructions (the "full" profile); each is checked against a *different*
    freshly generated response, so every check pays for a new segmentation, as a reward worker does when it
    scores new rollouts. Parsing the constraint JSON is timed separately (a trainer parses once per prompt).
    Machines differ 2-3x in speed, so the time is also given relative to a Punkt sentence split of the same
    responses in the same run (`verify_over_punkt`, lower is faster). With `large`, `large_response` gives the
    seconds of one constraint of each target kind on a 1 MB response and their growth from 100 KB.
    """
    rng = random.Random(seed)
    jobs = []
    while len(jobs) < responses:
        inst = synth.instruction(rng, "full", k=constraints)
        if len(inst["constraints"]) == constraints:
            jobs.append((inst["constraints"], synth.witness(rng, rng.choice(synth.TOPICS), "full")))
    words = sum(len(Doc(r).words) for _, r in jobs) / len(jobs)

    with one_core():
        t = time.process_time()
        parsed = [[Constraint.from_dict(c) for c in cs] for cs, _ in jobs]
        parse_s = time.process_time() - t

        verify_s = punkt_s = float("inf")
        for _ in range(3):  # the best of three: the machine is shared
            t = time.process_time()
            satisfied = 0
            for cs, (_, response) in zip(parsed, jobs):
                doc = Doc(response)  # one segmentation per response, shared by its constraints
                satisfied += sum(verify(c, doc).satisfied for c in cs)
            verify_s = min(verify_s, time.process_time() - t)

            t = time.process_time()
            for _, response in jobs:
                list(_PUNKT.span_tokenize(response))
            punkt_s = min(punkt_s, time.process_time() - t)
        large_response = _large_response_speed() if large else None
    checks = responses * constraints
    out = {"benchmark": "verify", "responses": responses, "constraints_per_response": constraints,
           "mean_words_per_response": round(words, 1), "checks": checks,
           "satisfied_fraction": round(satisfied / checks, 3),
           "checks_per_second": round(checks / verify_s), "parse_seconds": round(parse_s, 4),
           "checks_per_second_with_parsing": round(checks / (verify_s + parse_s)),
           "ms_per_response": round(1000 * verify_s / responses, 3),
           "punkt_seconds": round(punkt_s, 4), "verify_over_punkt": round(verify_s / punkt_s, 2)}
    if large_response is not None:
        out["large_response"] = large_response
    return out


# One constraint of each target kind (and the unit lists behind them) for the 1 MB figures.
LARGE_KINDS = {
    "count word": {"scope": [], "target": {"count": "word"}, "range": {"max": 10}},
    "count sentence per paragraph": {"scope": [{"unit": "paragraph", "select": "each"}],
                                     "target": {"count": "sentence"}, "range": {"max": 4}},
    "count char": {"scope": [], "target": {"count": "char"}, "range": {"max": 10}},
    "count list blocks": {"scope": [], "target": {"count": "block", "kind": "list"}, "range": {"min": 1}},
    "count list items per section": {"scope": [{"unit": "section", "select": "each"}],
                                     "target": {"count": "element", "kind": "list_item"}, "range": {"max": 9}},
    "count occurrence": {"scope": [], "target": {"count": "occurrence", "of": "heron"}, "range": {"min": 1}},
    "count class uppercase": {"scope": [], "target": {"count": "class", "of": "uppercase"}, "range": {"min": 1}},
    "count class punctuation": {"scope": [], "target": {"count": "class", "of": "punctuation"}, "range": {"min": 1}},
    "depth list": {"scope": [], "target": {"depth": "list"}, "range": {"max": 2}},
    "has heading": {"scope": [], "target": {"has": ["Section 7"], "as": "heading"}, "range": {"eq": 1}},
    "valid json per code block": {"scope": [{"unit": "block", "kind": "code", "select": "each"}],
                                  "target": {"valid": "json"}, "range": {"eq": 1}},
    "matches (RE2)": {"scope": [], "target": {"matches": r"\w+ing|\d+\.\d+"}, "range": {"min": 1}},
    "matches (backtracking)": {"scope": [], "target": {"matches": r"(?<!\w)heron\b"}, "range": {"min": 1}},
    "starts_with": {"scope": [], "target": {"starts_with": "The"}, "range": {"eq": 1}},
    "sorted lines": {"scope": [], "target": {"sorted": "alphabetical", "unit": "line"}, "range": {"eq": 0}},
    "chain sentences": {"scope": [], "target": {"chain": "last_first", "unit": "sentence"}, "range": {"min": 1}},
    "acrostic paragraphs": {"scope": [], "target": {"acrostic": "THE", "unit": "paragraph"}, "range": {"eq": 0}},
    "distinct words": {"scope": [], "target": {"distinct": "word"}, "range": {"min": 10}},
    "pairs of words": {"scope": [], "target": {"pairs": "word", "left": "last_letter", "rel": "eq",
                                               "right": "first_letter"}, "range": {"min": 1}},
    "satisfies": {"scope": [{"unit": "paragraph", "select": "each"}],
                  "target": {"satisfies": [{"target": {"count": "word"}, "range": {"min": 5}},
                                           {"target": {"count": "occurrence", "of": "river"}, "range": {"min": 1}}]},
                  "range": {"min": 1}},
}


def large_response(chars: int) -> str:
    """Markdown prose of about `chars` characters: paragraphs, and every seventh block a section with a list,
    a table and a JSON code block."""
    para = ("The river runs cold. It carries snow from the hills, and a heron waits by the water. "
            "Fish hide under stones while 3.5 boats are drifting.")
    blocks, size, i = [], 0, 0
    while size < chars:
        block = para if i % 7 else (f"## Section {i}\n- item one\n- item two\n  - nested\n\n| a | b |\n|---|---|\n"
                                    f"| 1 | 2 |\n\n```json\n{{\"k\": [{i}]}}\n```")
        blocks.append(block)
        size += len(block) + 2
        i += 1
    return "\n\n".join(blocks)


def _large_response_speed() -> dict:
    """CPU seconds of one constraint of each kind on a fresh 100 KB and 1 MB response (segmentation included),
    and the growth between them (10x is linear)."""
    texts = {size: large_response(size) for size in (100_000, 1_000_000)}
    out = {}
    for name, d in LARGE_KINDS.items():
        c = Constraint.from_dict(d)
        verify(c, Doc("Warm up: tables built on first use are not part of the figure."))
        seconds = {}
        for size, text in texts.items():
            t = time.process_time()
            verify(c, Doc(text))
            seconds[size] = time.process_time() - t
        out[name] = {"seconds_1mb": round(seconds[1_000_000], 3),
                     "growth_100kb_to_1mb": round(seconds[1_000_000] / max(seconds[100_000], 1e-6), 1)}
    return out


def rewards_speed(n_prompts: int = 128, group: int = 8, n_constraints: int = 5, seed: int = 0, repeats: int = 5) -> dict:
    """`ifcore bench rewards`: seconds to score n_prompts x group rollouts (1,024 by default), each under
    n_constraints constraints of its prompt, verification included, pinned to one core.

    Deterministic from `seed`: ~300-word responses with a think block (some with a Markdown list), and
    constraints drawn from a fixed, diverse pool (counts, occurrences, sentences per paragraph, positions,
    conditions, nested scopes, comparisons). Each repeat parses the labels afresh, so compiling them counts.
    On a shared machine quote min_s, or cpu_min_s (process CPU time, which excludes waiting for the core).
    """

    rng = random.Random(seed)
    para, sent = {"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "each"}
    pool = [
        ([], {"count": "word"}, {"min": 250, "max": 350}),
        ([para], {"count": "sentence"}, {"min": 2, "max": 4}),
        ([{"unit": "paragraph", "select": "at", "index": 0}], {"count": "occurrence", "of": "river"}, {"min": 1}),
        ([{"unit": "sentence", "select": "where", "if": {"target": {"count": "occurrence", "of": "river"},
                                                         "range": {"min": 1}}}], {"count": "word"}, {"max": 20}),
        ([para, {"unit": "sentence", "select": "at", "index": -1}], {"count": "word"}, {"max": 15}),
        ([], {"count": "occurrence", "of": "however"}, {"eq": 0}),
        ([], {"count": "paragraph"}, {"eq": 4}),
        ([para], {"count": "word"}, {"gt": "previous"}),
        ([], {"starts_with": "The"}, {"eq": 1}),
        ([], {"count": "class", "of": "digit"}, {"eq": 0}),
        ([{"unit": "paragraph", "select": "at", "index": -1}], {"count": "sentence"},
         {"eq": {"times": 1, "of": {"scope": [{"unit": "paragraph", "select": "at", "index": 0}],
                                    "target": {"count": "sentence"}}}}),
        ([sent], {"count": "word"}, {"min": 5, "max": 25}),
        ([], {"count": "line"}, {"min": 4}),
        ([{"unit": "paragraph", "select": "where", "if": {"target": {"count": "word"}, "range": {"min": 40}}}],
         {"count": "occurrence", "of": "the"}, {"min": 2}),
        ([], {"count": "block", "kind": "list"}, {"eq": 1}),
        ([{"unit": "paragraph", "select": "at", "index": 1}, sent], {"count": "char"}, {"max": 160}),
    ]
    vocab = ("the river water stone light morning city garden people road history silence winter market "
             "village music bridge harbor field mountain forest letter window evening story journey "
             "quiet bright ancient slowly carefully often always however between across beyond").split()

    def sentence() -> str:
        words = [rng.choice(vocab) for _ in range(rng.randint(8, 24))]
        return " ".join(words).capitalize() + rng.choice([".", ".", ".", "!", "?"])

    def response() -> str:
        think = " ".join(rng.choice(vocab) for _ in range(60))
        paras = [" ".join(sentence() for _ in range(rng.randint(3, 6))) for _ in range(rng.randint(3, 5))]
        if rng.random() < 0.25:
            paras.insert(1, "\n".join(f"- {sentence()}" for _ in range(3)))
        return f"<think>\n{think}\n</think>\n\nThe " + "\n\n".join(paras)

    labels = [json.dumps({"constraints": [{"scope": s, "target": t, "range": r}
                                          for s, t, r in rng.sample(pool, n_constraints)]})
              for _ in range(n_prompts)]
    responses = [[response() for _ in range(group)] for _ in range(n_prompts)]
    times, cpu_times = [], []
    with one_core() as cpu:
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for label, rollouts in zip(labels, responses):
                constraints = parse_label(label)
                for text in rollouts:
                    score_response(text, constraints)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    words = statistics.mean(len(r.split("</think>")[-1].split()) for rs in responses for r in rs)
    return {"rollouts": n_prompts * group, "constraints_per_rollout": n_constraints, "answer_words": round(words),
            "seconds": [round(t, 4) for t in times], "min_s": round(min(times), 4),
            "median_s": round(statistics.median(times), 4), "cpu_min_s": round(min(cpu_times), 4),
            "cpu": cpu}


def sandbox_speed(calls: int = 300, spawned_calls: int = 30, workers: int = 2) -> dict:
    """`ifcore bench sandbox`: judge-tool executions per second through the warm, hardened pool
    (ifcore.judge.sandbox.Sandbox) and through a fresh `python -I` per call (run_spawned, ScopeIF's pattern),
    in one run, `workers` calls at a time for both. The tool counts the words of a ~300-word response with the
    promised helper, so the spawned interpreter imports ifcore.text as the pool's workers did once;
    `spawned_bare_per_second` times a tool that needs no helper (str.split) in an interpreter that imports
    nothing of ifcore, the cheapest spawn; where `bwrap` is on PATH, `bwrap_spawned_per_second` times the helper
    tool spawned inside bubblewrap's namespaces (the design issue 24 weighed against the pool). Wall time:
    the work is in other processes. Goal: ratio >= 10 (issue 14)."""
    from concurrent.futures import ThreadPoolExecutor

    from ifcore.judge.sandbox import Sandbox, run_spawned

    rng, words = random.Random(0), []
    while len(words) < 300:
        words += synth.witness(rng, "a river", "full").split()
    text = " ".join(words[:300])
    tool = ('def count_words(text):\n'
            '    return [{"description": "words in the response", "result": word_count(text)}]\n')
    bare = 'def count_words(text):\n    return [{"description": "words", "result": len(text.split())}]\n'

    def rate(call, n: int) -> tuple[float, list]:
        with ThreadPoolExecutor(workers) as pool:
            t = time.perf_counter()
            outs = list(pool.map(lambda _: call(), range(n)))
            return n / (time.perf_counter() - t), outs

    with Sandbox(workers=workers) as sandbox:
        for _ in range(5):  # warm: first forks fault in the workers' pages
            sandbox.run(tool, "count_words", [text])
        pool_rate, pool_outs = rate(lambda: sandbox.run(tool, "count_words", [text]), calls)
        hardening = sandbox.hardening
    spawned_rate, spawned_outs = rate(lambda: run_spawned(tool, "count_words", [text]), spawned_calls)
    bare_rate, _ = rate(lambda: run_spawned(bare, "count_words", [text], helpers=False), spawned_calls)
    extra = {}
    if shutil.which("bwrap"):  # the same spawn per call inside bubblewrap's namespaces (the alternative design)
        bwrap = [shutil.which("bwrap"), "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                 "--dev", "/dev", "--tmpfs", "/tmp", "--"]
        bwrap_rate, bwrap_outs = rate(lambda: run_spawned(tool, "count_words", [text], wrapper=bwrap), spawned_calls)
        spawned_outs += bwrap_outs
        extra = {"bwrap_spawned_per_second": round(bwrap_rate, 1), "ratio_to_bwrap": round(pool_rate / bwrap_rate, 1)}
    results = {json.dumps(o["result"]) for o in pool_outs + spawned_outs}
    if len(results) != 1 or not pool_outs[0]["ok"]:
        raise RuntimeError(f"sandbox bench: the tool's results differ or failed: {sorted(results)[:3]}")
    return {"benchmark": "sandbox", "workers": workers, "calls": calls, "spawned_calls": spawned_calls,
            "words": pool_outs[0]["result"][0]["result"], "hardening": hardening,
            "pool_per_second": round(pool_rate, 1), "spawned_per_second": round(spawned_rate, 1),
            "ratio": round(pool_rate / spawned_rate, 1), "spawned_bare_per_second": round(bare_rate, 1),
            "ratio_to_bare": round(pool_rate / bare_rate, 1), **extra}


def train_speed(model: str = "smollm2-135m", prompts: int = 2, group: int = 4, max_new_tokens: int = 64,
                steps: int = 3, seed: int = 0) -> dict:
    """`ifcore bench train`: wall seconds per GRPO step of the embedded trainer (ifcore.train.grpo.train) in fp32
    and in bf16 (precision "bf16": autocast, fp32 master weights; `fp32_over_bf16` > 1: bf16 is faster) and of
    trl's GRPOTrainer with ifcore.integrations.trl.reward_fn, in one run, on the same model, prompts (ifcore.synth
    rows, the same chat prompt text), batch (prompts x group rollouts) and sequence lengths (max_new_tokens).

    One step is one GRPO iteration as the embedded trainer takes it: sample the batch, score it, a reference
    forward pass (KL 1e-3), then two optimizer steps on it (ppo_epochs 2), all sequences in one micro-batch. TRL
    does the same with num_iterations 2, beta 1e-3, loss_type "grpo": two of its global steps, generation in the
    first, timed from on_step_begin to on_step_end. The first step of each is a warm-up; the median of the next
    `steps` is quoted, with the mean response lengths (sampling at temperature 1 differs between the two, so
    lengths do too). Torch uses as many threads as the process has cores: run under `taskset -c 0` for one core.
    Wall time (the embedded trainer logs its steps' wall time); `*_cpu_share` is each run's process CPU time over
    its wall time (about the thread count on an idle machine, lower when other work took the cores): compare the
    two figures only when the shares are close."""
    import sys
    import tempfile
    from functools import partial
    from pathlib import Path

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer

    import ifcore.train  # noqa: F401 - registers `tiny`
    from ifcore.infer.generate import bf16_native
    from ifcore.infer.registry import resolve
    from ifcore.integrations.trl import reward_fn
    from ifcore.train.grpo import load_config, train
    from ifcore.train.model import chat_prompt, think_gate

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    path = str(resolve(model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = synth.dataset(prompts * (steps + 1), seed)
    epochs, kl, lr = 2, 1e-3, 1e-6  # the update's size does not change its time
    with tempfile.TemporaryDirectory(prefix="ifcore-bench-train-") as tmp, contextlib.redirect_stdout(sys.stderr):
        data = Path(tmp) / "train.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        embedded, shares = {}, {}
        for precision in ("fp32", "bf16"):  # issue 25: the embedded trainer under bf16 autocast, same batch
            cfg = load_config(None, model=path, train_data=str(data), test_data=str(data),
                              output_dir=f"{tmp}/embedded-{precision}", steps=steps + 1, seed=seed,
                              prompts_per_step=prompts, group_size=group, max_new_tokens=max_new_tokens,
                              ppo_epochs=epochs, kl_coef=kl, lr=lr, threads=threads, eval_prompts=1, eval_samples=1,
                              eval_every=steps + 1, save_every=steps + 1, precision=precision)
            clock = (time.perf_counter(), time.process_time())
            metrics = train(cfg, progress=False)
            shares[precision] = (time.process_time() - clock[1]) / (time.perf_counter() - clock[0])
            embedded[precision] = [r for r in map(json.loads, metrics.read_text().splitlines())
                                   if r["type"] == "train"][1:]

        seconds = {}

        class StepTimes(transformers.TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                seconds[state.global_step + 1] = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                seconds[state.global_step] = time.perf_counter() - seconds[state.global_step]

        # The embedded trainer's prompt text (think mode on) and reward settings, so both see the same tokens.
        dataset = Dataset.from_list([{"prompt": chat_prompt(tokenizer, r["prompt"]), "label": r["label"]}
                                     for r in rows])
        reward = partial(reward_fn, kind=cfg.reward, alpha=cfg.alpha, think=think_gate(tokenizer, True),
                         eos_token_ids=[tokenizer.eos_token_id])
        args = trl.GRPOConfig(output_dir=f"{tmp}/trl", max_steps=(steps + 1) * epochs,
                              per_device_train_batch_size=prompts * group, num_generations=group,
                              max_completion_length=max_new_tokens, num_iterations=epochs, beta=kl,
                              epsilon=cfg.clip_eps, loss_type="grpo", learning_rate=lr,
                              max_grad_norm=cfg.max_grad_norm, temperature=1.0, top_p=1.0, shuffle_dataset=False,
                              logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
                              use_cpu=True, bf16=False, activation_checkpointing=False, seed=seed)
        trainer = trl.GRPOTrainer(model=path, reward_funcs=reward, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, callbacks=[StepTimes()])
        clock = (time.perf_counter(), time.process_time())
        trainer.train()
        shares["trl"] = (time.process_time() - clock[1]) / (time.perf_counter() - clock[0])
    per_step = [seconds[s] + seconds[s + 1] for s in range(1, (steps + 1) * epochs, epochs)][1:]
    trl_lengths = [log["completions/mean_length"] for log in trainer.state.log_history
                   if "completions/mean_length" in log][1:]
    embedded_s, bf16_s = (statistics.median(r["step_seconds"] for r in embedded[p]) for p in ("fp32", "bf16"))
    trl_s = statistics.median(per_step)
    return {"benchmark": "train", "model": model, "threads": threads, "prompts": prompts, "group_size": group,
            "rollouts_per_step": prompts * group, "max_new_tokens": max_new_tokens, "ppo_epochs": epochs,
            "steps_timed": steps, "trl_version": trl.__version__, "bf16_native": bf16_native(),
            "embedded_seconds": [r["step_seconds"] for r in embedded["fp32"]],
            "embedded_bf16_seconds": [r["step_seconds"] for r in embedded["bf16"]],
            "trl_seconds": [round(s, 3) for s in per_step],
            "embedded_seconds_per_step": round(embedded_s, 3), "embedded_bf16_seconds_per_step": round(bf16_s, 3),
            "trl_seconds_per_step": round(trl_s, 3), "trl_over_embedded": round(trl_s / embedded_s, 2),
            "fp32_over_bf16": round(embedded_s / bf16_s, 2),
            "embedded_cpu_share": round(shares["fp32"], 2), "embedded_bf16_cpu_share": round(shares["bf16"], 2),
            "trl_cpu_share": round(shares["trl"], 2),
            "embedded_response_len": round(statistics.mean(r["response_len"] for r in embedded["fp32"]), 1),
            "embedded_bf16_response_len": round(statistics.mean(r["response_len"] for r in embedded["bf16"]), 1),
            "trl_response_len": round(statistics.mean(trl_lengths), 1)}
