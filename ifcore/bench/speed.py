"""Speed benchmarks behind `ifcore bench verify`: commands, not timed tests. Run under `taskset -c 0` for
one-core figures; times are this process's CPU time, so other load on the machine does not inflate them."""
from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import time

from ifcore import synth
from ifcore.rewards import score_response
from ifcore.schema import Constraint, parse_label
from ifcore.text import Doc
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


def verify_speed(responses: int = 400, constraints: int = 5, seed: int = 0) -> dict:
    """Constraint checks per second for fresh ~300-word responses with `constraints` constraints each.

    Constraints come from synthetic instructions (the "full" profile); each is checked against a *different*
    freshly generated response, so every check pays for a new segmentation, as a reward worker does when it
    scores new rollouts. Parsing the constraint JSON is timed separately (a trainer parses once per prompt).
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

        t = time.process_time()
        satisfied = 0
        for cs, (_, response) in zip(parsed, jobs):
            doc = Doc(response)  # one segmentation per response, shared by its constraints
            satisfied += sum(verify(c, doc).satisfied for c in cs)
        verify_s = time.process_time() - t
    checks = responses * constraints
    return {"benchmark": "verify", "responses": responses, "constraints_per_response": constraints,
            "mean_words_per_response": round(words, 1), "checks": checks,
            "satisfied_fraction": round(satisfied / checks, 3),
            "checks_per_second": round(checks / verify_s), "parse_seconds": round(parse_s, 4),
            "checks_per_second_with_parsing": round(checks / (verify_s + parse_s)),
            "ms_per_response": round(1000 * verify_s / responses, 3)}


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
