"""RAIF's preliminary study (its section 4.1, Tables 1 and 5, Fig. 4; appendix A.5.3, A.6): does vanilla
chain-of-thought prompting help instruction following, and what does the reasoning look like?

The three prompt modes, worded as in the authors' code (github.com/yuleiqin/RAIF):
- I/O: the instruction under the system prompt "You are a helpful assistant." (the default `--system_prompt` of
  COMPLEX_INSTRUCTIONS/run_local_model_openai.py).
- CoT: the instruction under the R1-style trigger that RAIF puts in the system message of fast-thinking models
  (its Fig. 23; the text is the system turn of openrlhf/trainer/ppo_utils/complex_scoring.py): think inside
  <think> </think>, answer inside <answer> </answer>.
- SDC, Self-DeepClaude (A.5.3, Fig. 24), two passes built as the authors' code builds them
  (COMPLEX_INSTRUCTIONS/run_local_model_openai.py, call_model_service): one message list; pass 1 is the CoT chat;
  then only its last user turn is replaced by the authors' PROMPT_DEEPCLAUDE holding the original request and
  pass 1's reasoning, so pass 2 keeps pass 1's system turn; pass 2's output is SDC's answer. The reasoning is pass
  1's think block (the authors read the server's `reasoning_content`); where pass 1 has no think block,
  `reasoning_content` is None and the authors' `str.format` writes the text "None" into the prompt: so do we
  (`reasoning_source` says which, per prompt). Pass 1 is the CoT mode's own greedy completion (cached), so SDC
  costs one extra pass.
- w/o CoT (RAIF Table 14, for reasoning models): the I/O chat rendered with an empty think block, through the
  chat template's `enable_thinking=False` (Qwen3's switch, which writes `<think>\n\n</think>\n\n` after the
  generation prompt). A template without a think block ignores the switch, and the mode is then I/O again.

Decoding is greedy (the authors': temperature 0). Every completion is scored by the code behind `ifcore eval`:
the official IFEval / IFBench checkers (strict and loose; P-S, I-S, P-L, I-L), ScopeIF-Test's schema
formalizations (CSR, ISR over the judged constraints), MulDimIF's official checkers (All: every constraint met,
upstream's Overall; Macro and Micro constraint accuracy) and FollowBench's rule-scored items (HSR; a rule verdict
is all or nothing, so SSR equals it; the judged items need a judge and are not drawn), twice: "as answered" (the whole output, as the authors'
evaluation reads the response) and "answer-extracted" (`split_output`: the <answer> block, or what the tags
leave). A model that ignores the tags gets the same score in both views.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

from ifcore import rewards, stats

MODES = ("io", "cot", "sdc", "nothink")
MODE_LABELS = {"io": "I/O", "cot": "CoT", "sdc": "SDC", "nothink": "w/o CoT"}
VIEWS = ("as answered", "answer-extracted")
BENCHMARKS = ("ifeval", "ifbench", "scopeif", "muldimif", "followbench")
METRICS = {"ifeval": ("P-S", "I-S", "P-L", "I-L"), "ifbench": ("P-S", "I-S", "P-L", "I-L"), "scopeif": ("CSR", "ISR"),
           "muldimif": ("All", "Macro", "Micro"), "followbench": ("HSR",)}
MAIN = {"ifeval": "P-S", "ifbench": "P-S", "scopeif": "CSR", "muldimif": "All", "followbench": "HSR"}  # quoted in
# the sentences. Instruction-level metrics pool instructions: a prompt weighs as many instructions as it has.
WEIGHTED = {"I-S", "I-L", "Micro"}

IO_SYSTEM = "You are a helpful assistant."
COT_SYSTEM = ("You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and "
              "then provides the user with the answer. The reasoning process and answer are enclosed within <think> "
              "</think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think>"
              "<answer> answer here </answer>.")
SDC_USER = ("Here's my original input request:\n```\n{original_content}\n```\n\nHere's my another model's reasoning "
            "process:\n{reasoning}\n\nBased on this reasoning, provide your response directly to me:")
PLACEHOLDER = "reasoning process here"  # the trigger's own example; the authors' reward refuses it as reasoning
TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# Step-by-step words: RAIF Fig. 4 counts first, second, next and finally; the rest are the planning and checking
# words of R1-style reasoning.
KEYWORDS = ("first", "second", "third", "next", "then", "finally", "step", "need", "must", "should", "check",
            "ensure", "verify", "wait", "let", "because", "so", "however")

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_WORD = re.compile(r"\w+")
_STOPWORDS = Path(__file__).resolve().parent.parent / "data" / "ifbench" / "stopwords_english.txt"


def io_messages(instruction: str) -> list[dict]:
    return [{"role": "system", "content": IO_SYSTEM}, {"role": "user", "content": instruction}]


def cot_messages(instruction: str) -> list[dict]:
    return [{"role": "system", "content": COT_SYSTEM}, {"role": "user", "content": instruction}]


def sdc_messages(instruction: str, reasoning: str | None) -> list[dict]:
    """SDC's pass 2: pass 1's chat with only its last user turn replaced by the original request and pass 1's
    reasoning (RAIF Fig. 24); None (no think block) is written as the authors' str.format writes it, "None"."""
    return [*cot_messages(instruction)[:-1],
            {"role": "user", "content": SDC_USER.format(original_content=instruction, reasoning=reasoning)}]


def split_output(text: str) -> dict:
    """{"reasoning", "answer", "form"} of one completion, whatever the model did with the tags.

    - reasoning: the contents of every closed <think>...</think> block, stripped, joined by a blank line; a
      <think> never closed runs to the next <answer> or to the end (cut by the token limit, say); a </think>
      without any <think> closes reasoning that began with the output. None when the output has no think tag.
    - answer: the last complete <answer>...</answer> block, stripped (the authors' extract_solution takes the
      last); else an <answer> never closed, to the end; else the text after the last </think>; else "" when a
      <think> was opened and never closed (all of it is reasoning); an output without any tag is the answer as
      it stands, unstripped, so that its two views score the same.
    - form: "think+answer" when RAIF's format reward (eq. 4, rewards.format_gate with think="raif") is +1, else
      "partial tags" when any of the four tags appears, else "no tags".
    """
    closed = list(_THINK.finditer(text))
    blocks = [m.group(1).strip() for m in closed]
    rest = text[closed[-1].end():] if closed else text
    if (opened := rest.find("<think>")) >= 0:
        tail = rest[opened + len("<think>"):]
        blocks.append(tail.split("<answer>", 1)[0].strip())
    elif not closed and "</think>" in text:
        blocks.append(text.split("</think>", 1)[0].strip())
    answers = list(_ANSWER.finditer(text))
    if answers:
        answer = answers[-1].group(1).strip()
    elif "<answer>" in text:
        answer = text[text.rfind("<answer>") + len("<answer>"):].strip()
    elif "</think>" in text and opened < 0:
        answer = text[text.rfind("</think>") + len("</think>"):].strip()
    elif "<think>" in text:
        answer = ""
    else:
        answer = text
    if rewards.format_gate(text, "raif")[2] is None:
        form = "think+answer"
    else:
        form = "partial tags" if any(t in text for t in TAGS) else "no tags"
    return {"reasoning": "\n\n".join(blocks) if blocks else None, "answer": answer, "form": form}


def words(text: str) -> list[str]:
    """Lowercased runs of \\w: the unit of every length, overlap and keyword count here."""
    return _WORD.findall(text.lower())


def restatement(reasoning: str, prompt: str, n: int = 3) -> float | None:
    """How much of the reasoning restates the instruction: the share of the reasoning's word n-grams that also
    occur in the prompt (n shrinks to the reasoning's length when it is shorter). 1.0: every phrase of the
    reasoning is copied from the instruction; 0.0: none is. None for a reasoning without words."""
    if n < 1:
        raise ValueError(f"n={n!r}: an n-gram has at least one word")
    r, p = words(reasoning), words(prompt)
    if not r:
        return None
    n = min(n, len(r))
    source = {tuple(p[i:i + n]) for i in range(len(p) - n + 1)}
    grams = [tuple(r[i:i + n]) for i in range(len(r) - n + 1)]
    return sum(g in source for g in grams) / len(grams)


def keyword_counts(texts, keywords=KEYWORDS) -> tuple[Counter, int]:
    """(occurrences of each keyword as a whole word, total words) over `texts`."""
    wanted, counts, total = set(keywords), Counter(), 0
    for text in texts:
        ws = words(text)
        total += len(ws)
        counts.update(w for w in ws if w in wanted)
    return Counter({k: counts[k] for k in keywords}), total


def top_words(texts, prompts, k: int = 15) -> list[tuple[str, int, float]]:
    """The k most frequent content words of `texts` (no stopword, at least three letters), each with its count
    and the share of its occurrences in a text whose own prompt contains the word (a restated instruction word)."""
    stop = set(_STOPWORDS.read_text(encoding="utf-8").split())
    counts, restated = Counter(), Counter()
    for text, prompt in zip(texts, prompts):
        in_prompt = set(words(prompt))
        for w in words(text):
            if w.isalpha() and len(w) >= 3 and w not in stop:
                counts[w] += 1
                restated[w] += w in in_prompt
    return [(w, n, restated[w] / n) for w, n in counts.most_common(k)]


# ---------------------------------------------------------------------------------------------------------
# Benchmarks: the items, the generation of every mode, and the scores.

def load_items(benchmark: str, subset: int | None = None, seed: int = 0) -> list[dict]:
    """{"key", "prompt", "row"} per prompt of a benchmark: IFEval's 541, IFBench's 300, the ScopeIF-Test instances
    with at least one formalized constraint, MulDimIF's 1,200 or FollowBench's 350 rule-scored items (the others
    cannot be scored offline). `subset`: that many, drawn with random.Random(seed) and kept in benchmark order (the
    draw of `ifcore eval --limit --subset-seed`)."""
    from ifcore.jsonl import read_jsonl

    if benchmark == "muldimif":
        from ifcore.bench.muldimif import load_items as muldimif_items

        items = [{"key": x["id"], "prompt": x["conversations"][0]["content"], "row": x} for x in muldimif_items()]
    elif benchmark == "followbench":
        from ifcore.bench.followbench import load, rule_scored

        items = [{"key": f"{x['type']}/{x['example_id']}/L{x['level']}", "prompt": x["instruction"], "row": x}
                 for x in load() if rule_scored(x)]
    elif benchmark == "scopeif":
        from ifcore.bench.scopeif import load_formalizations, load_test

        judged = {i for i, _ in load_formalizations()}
        items = [{"key": inst["id"], "prompt": inst["prompt"], "row": inst} for inst in load_test()
                 if inst["id"] in judged]
    elif benchmark in ("ifeval", "ifbench"):
        from ifcore.bench import ifbench, ifeval

        path = ifeval.PROMPTS if benchmark == "ifeval" else ifbench.PROMPTS
        items = [{"key": row.get("key", n), "prompt": row["prompt"], "row": row}
                 for n, row in enumerate(read_jsonl(path, ("prompt", "instruction_id_list", "kwargs")))]
    else:
        raise ValueError(f"benchmark {benchmark!r}: one of {', '.join(BENCHMARKS)}")
    if subset is not None:
        if subset < 1:
            raise ValueError(f"subset={subset!r}: at least 1 prompt, or None for all")
        if subset < len(items):
            items = [items[i] for i in sorted(random.Random(seed).sample(range(len(items)), subset))]
    return items


def generate_modes(model, prompts: list[str], params, modes=MODES, progress: bool = True) -> dict[str, list[dict]]:
    """Each mode's completion of each prompt: {"output", "tokens", "truncated", "reasoning", "reasoning_source"}
    (SDC also "first_pass"). I/O and CoT go through ifcore.infer.generate together (one length-sorted queue),
    then SDC's second pass. `model`: a registry name or path, a Local or an Endpoint; cached per model."""
    from ifcore.infer.generate import generate

    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"modes {list(modes)!r}: a non-empty list of {', '.join(MODES)}")
    chats = {"io": [io_messages(p) for p in prompts], "cot": [cot_messages(p) for p in prompts]}
    first = [m for m in ("io", "cot") if m in modes or (m == "cot" and "sdc" in modes)]
    done = generate(model, [c for m in first for c in chats[m]], params, progress=progress, with_tokens=True)
    raw = {m: done[i * len(prompts):(i + 1) * len(prompts)] for i, m in enumerate(first)}
    if "nothink" in modes:
        nothink = replace(params, chat_template_kwargs={**params.chat_template_kwargs, "enable_thinking": False})
        raw["nothink"] = generate(model, chats["io"], nothink, progress=progress, with_tokens=True)

    def entry(text, tokens, reasoning, source):
        # A count of None: a completion cached before counts were kept.
        return {"output": text, "tokens": tokens, "truncated": tokens is not None and tokens >= params.max_new_tokens,
                "reasoning": reasoning, "reasoning_source": source}

    out = {}
    if "io" in modes:
        out["io"] = [entry(t, n, None, None) for t, n in raw["io"]]
    cot = []
    for t, n in raw.get("cot", []):
        reasoning = split_output(t)["reasoning"]
        cot.append(entry(t, n, reasoning, None if reasoning is None else "think block"))
    if "cot" in modes:
        out["cot"] = cot
    if "nothink" in modes:
        out["nothink"] = [entry(t, n, None, None) for t, n in raw["nothink"]]
    if "sdc" in modes:
        shown = [(e["reasoning"], "think block" if e["reasoning"] is not None else "none (the prompt says None)")
                 for e in cot]
        second = generate(model, [sdc_messages(p, r) for p, (r, _) in zip(prompts, shown)], params,
                          progress=progress, with_tokens=True)
        out["sdc"] = [{**entry(t, n, r, source), "first_pass": e["output"]}
                      for (t, n), (r, source), e in zip(second, shown, cot)]
    return {m: out[m] for m in modes}


def score(benchmark: str, items: list[dict], texts: list[str]) -> list[dict]:
    """One record per item, {"types", "strict", "loose"}: each instruction's type and verdicts, from the code
    behind `ifcore eval`. IFEval/IFBench: the official checkers over the whole benchmark, unanswered prompts
    dropped afterwards (so that IFEval's legacy letter draws follow the whole benchmark, as in `ifcore eval`).
    ScopeIF: each constraint's schema verdict (None where it is not formalized), its type the Scope selector;
    ScopeIF has no loose reading. MulDimIF: the official verdicts (one the official code could not reach counts
    as unmet, as its summary counts it), typed Category:Subcategory. FollowBench: the item's rule verdict, typed
    file:source. Neither has a loose reading."""
    if benchmark == "muldimif":
        from ifcore.bench.muldimif import KEYS, official_verdict

        return [{"types": [KEYS[f"{c[0]}_{c[1]}"][1].replace("_", ":", 1) for c in i["row"]["constraints"]],
                 "strict": [bool(official_verdict(c, text)) for c in i["row"]["constraints"]],
                 "loose": [None] * len(i["row"]["constraints"])} for i, text in zip(items, texts)]
    if benchmark == "followbench":
        from ifcore.bench.followbench import rule_verdict

        return [{"types": [f"{i['row']['type']}:{i['row']['source']}"], "strict": [rule_verdict(i["row"], text)],
                 "loose": [None]} for i, text in zip(items, texts)]
    if benchmark == "scopeif":
        from ifcore.bench.scopeif import judge_instance, load_formalizations
        from ifcore.coverage import scope_selector

        formalized = load_formalizations()
        out = []
        for item, text in zip(items, texts):
            verdicts = [v["satisfied"] for v in judge_instance(item["row"], text, formalized)]
            out.append({"types": [scope_selector(c["category"]["scope"]) for c in item["row"]["constraints"]],
                        "strict": verdicts, "loose": [None] * len(verdicts)})
        return out
    from ifcore.bench import ifbench, ifeval
    from ifcore.jsonl import read_jsonl

    path, registry, seed = ((ifeval.PROMPTS, ifeval.IFEVAL, ifeval.PAPER_LETTER_SEED) if benchmark == "ifeval"
                            else (ifbench.PROMPTS, ifbench.IFBENCH, None))
    everything = read_jsonl(path, ("prompt", "instruction_id_list", "kwargs"))
    results = ifeval.evaluate(everything, {i["prompt"]: t for i, t in zip(items, texts)}, registry, letter_seed=seed)
    by_prompt = {mode: {r["prompt"]: r for r in records} for mode, records in results.items()}
    return [{"types": by_prompt["strict"][i["prompt"]]["instruction_id_list"],
             "strict": by_prompt["strict"][i["prompt"]]["follow_instruction_list"],
             "loose": by_prompt["loose"][i["prompt"]]["follow_instruction_list"]} for i in items]


def prompt_metrics(benchmark: str, record: dict) -> dict:
    """One prompt's share of each metric, so that the metric is the mean over prompts (I-S and I-L weighted by
    the prompt's instruction count `n`): P-S/P-L all followed, I-S/I-L the followed fraction; ScopeIF: CSR the
    judged constraints' satisfied fraction (eq. 11), ISR all satisfied (eq. 12), NaN where not defined;
    MulDimIF: All every constraint met, Macro the met fraction, Micro the same weighted by `n`; FollowBench: HSR."""
    s = record["strict"]
    if benchmark == "muldimif":
        return {"n": len(s), "All": float(all(s)), "Macro": sum(s) / len(s), "Micro": sum(s) / len(s)}
    if benchmark == "followbench":
        return {"n": 1, "HSR": float(s[0])}
    if benchmark == "scopeif":
        known = [v for v in record["strict"] if v is not None]
        return {"n": len(known), "CSR": sum(known) / len(known) if known else math.nan,
                "ISR": float(all(known)) if known and len(known) == len(record["strict"]) else math.nan}
    lo = record["loose"]
    return {"n": len(s), "P-S": float(all(s)), "I-S": sum(s) / len(s) if s else math.nan,
            "P-L": float(all(lo)), "I-L": sum(lo) / len(lo) if lo else math.nan}


def run_study(model, benchmarks=BENCHMARKS, subset: int | None = None, subset_seed: int = 0, params=None,
              modes=MODES, restatement_n: int = 3, progress: bool = True) -> dict:
    """Generate every mode on every benchmark's items and score both views. Returns three DataFrames:
    "outputs" (one row per benchmark, item and mode: the output, its tokens, reasoning, answer and form),
    "prompts" (per benchmark, mode, view and item: prompt_metrics) and "instructions" (per instruction: its type
    and its strict and loose verdicts as 1.0 / 0.0 / NaN), and "skipped": the drawn items whose prompt leaves the
    model no room for `max_new_tokens` (ifcore.infer.generate.too_long; not generated, not scored), per benchmark."""
    import pandas as pd

    from ifcore.infer.generate import GenParams, too_long

    params = params or GenParams()
    if not benchmarks:
        raise ValueError("benchmarks: name at least one of " + ", ".join(BENCHMARKS))
    items = {b: load_items(b, subset, subset_seed) for b in benchmarks}
    # One pass over every drawn prompt (the tokenizer loads once); CoT's chat is the longer of the two.
    flags = iter(too_long(model, [cot_messages(i["prompt"]) for b in benchmarks for i in items[b]], params)[0])
    marked = {b: [(i, next(flags)) for i in items[b]] for b in benchmarks}
    skipped = {b: [i["key"] for i, f in marked[b] if f] for b in benchmarks}
    items = {b: [i for i, f in marked[b] if not f] for b in benchmarks}
    flat = [(b, item) for b in benchmarks for item in items[b]]
    generated = generate_modes(model, [item["prompt"] for _, item in flat], params, modes, progress)
    outputs = []
    for mode, entries in generated.items():
        for (b, item), e in zip(flat, entries):
            split = split_output(e["output"])
            overlap = restatement(e["reasoning"], item["prompt"], restatement_n) if e["reasoning"] else None
            outputs.append({"benchmark": b, "key": item["key"], "mode": mode, "prompt": item["prompt"], **e,
                            "answer": split["answer"], "form": split["form"],
                            "placeholder": (e["reasoning"] or "").strip().lower() == PLACEHOLDER,
                            "reasoning_words": len(words(e["reasoning"])) if e["reasoning"] is not None else None,
                            "output_words": len(words(e["output"])), "restatement": overlap})
    outputs = pd.DataFrame(outputs)
    prompts, instructions = [], []
    for (b, mode), rows in outputs.groupby(["benchmark", "mode"], sort=False):
        for view, column in zip(VIEWS, ("output", "answer")):
            for item, record in zip(items[b], score(b, items[b], list(rows[column]))):
                prompts.append({"benchmark": b, "mode": mode, "view": view, "key": item["key"],
                                **prompt_metrics(b, record)})
                instructions += [{"benchmark": b, "mode": mode, "view": view, "key": item["key"], "type": t,
                                  "strict": math.nan if s is None else float(s),
                                  "loose": math.nan if lo is None else float(lo)}
                                 for t, s, lo in zip(record["types"], record["strict"], record["loose"])]
    return {"outputs": outputs, "prompts": pd.DataFrame(prompts), "instructions": pd.DataFrame(instructions),
            "skipped": skipped}


# ---------------------------------------------------------------------------------------------------------
# Analyses: each returns a DataFrame the notebook shows and a figure draws.

def headline(prompts, level: float = 0.95, resamples: int = 2000):
    """Each metric per benchmark, view and mode, in %, aggregated from the per-prompt shares as the benchmark's own
    summary does: one row per (benchmark, metric, view, mode), with the prompts behind it and a percentile bootstrap
    interval over prompts at `level` (stats.paired_bootstrap against 0, the prompts' weights kept: I-S and I-L pool
    instructions)."""
    import numpy as np
    import pandas as pd

    from ifcore import stats

    rows = []
    for (b, view, mode), g in prompts.groupby(["benchmark", "view", "mode"], sort=False):
        for m in METRICS[b]:
            x = g[m].to_numpy(float)
            w = g["n"].to_numpy(float) if m in WEIGHTED else np.ones(len(x))
            mean, lo, hi, _ = stats.paired_bootstrap(x, np.zeros(len(x)), w, level, resamples)
            rows.append({"benchmark": b, "metric": m, "view": view, "mode": MODE_LABELS[mode], "prompts": len(g),
                         "score": 100 * mean, "lo": 100 * lo, "hi": 100 * hi})
    return pd.DataFrame(rows)


def score_table(scores):
    """headline() as one row per benchmark and metric, one column per view and mode."""
    table = scores.pivot_table(index=["benchmark", "metric"], columns=["view", "mode"], values="score", sort=False)
    return table.reindex(columns=[(v, MODE_LABELS[m]) for v in VIEWS for m in MODES if (v, MODE_LABELS[m]) in table])


def difference_table(differences):
    """mode_differences() as "diff [lo, hi]" cells: one row per benchmark, metric and comparison, one column per
    view, and the verdict of each view."""
    cells = differences.assign(cell=[f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]" if math.isfinite(lo) else f"{d:+.1f}"
                                     for d, lo, hi in zip(differences["diff"], differences["lo"], differences["hi"])])
    return cells.pivot_table(index=["benchmark", "metric", "comparison", "prompts"], columns="view",
                             values=["cell", "verdict"], aggfunc="first", sort=False)


def mode_differences(prompts, baseline: str = "io", level: float = 0.95, resamples: int = 10_000, seed: int = 0):
    """Every mode minus `baseline` on every metric, benchmark and view (percentage points), with a paired
    bootstrap interval over prompts and its p-value (stats.paired_bootstrap). The table is one family: each
    verdict stands only where Holm's correction over all its rows keeps it (`p_holm`; `verdict`)."""
    import pandas as pd

    rows = []
    for (b, view), g in prompts.groupby(["benchmark", "view"], sort=False):
        wide = g.pivot(index="key", columns="mode")
        if baseline not in wide.columns.get_level_values("mode"):
            continue
        for mode in [m for m in MODES if m != baseline and m in wide.columns.get_level_values("mode")]:
            for m in METRICS[b]:
                weights = wide[("n", baseline)] if m in WEIGHTED else None
                d, lo, hi, n, p = stats.paired_bootstrap(wide[(m, mode)], wide[(m, baseline)], weights=weights,
                                                         level=level, resamples=resamples, seed=seed, with_p=True)
                rows.append({"benchmark": b, "view": view, "comparison": f"{MODE_LABELS[mode]} - "
                             f"{MODE_LABELS[baseline]}", "metric": m, "diff": 100 * d, "lo": 100 * lo,
                             "hi": 100 * hi, "prompts": n, "p": p})
    return _holm_verdicts(pd.DataFrame(rows), level)


def _holm_verdicts(table, level: float, min_prompts: int = 1):
    """`p_holm` (Holm over the rows that have an interval and enough prompts) and each row's `verdict`."""
    tested = (table["prompts"] >= min_prompts) & table["lo"].notna() if len(table) else []
    table["p_holm"] = stats.holm(table["p"].where(tested)) if len(table) else []
    table["verdict"] = [verdict(lo, hi, n, min_prompts, q, 1 - level)
                        for lo, hi, n, q in zip(table["lo"], table["hi"], table["prompts"], table["p_holm"])]
    return table


def verdict(lo: float, hi: float, n: int, min_prompts: int = 1, p_holm: float | None = None,
            alpha: float = 0.05) -> str:
    """"helps" / "hurts" when the interval excludes 0 (and, given its family's Holm-adjusted p-value, that is
    below `alpha`), "not after correction" when only the interval does, "CI includes 0" when it does not, "too
    few prompts" below `min_prompts` (or without an interval)."""
    if n < min_prompts or not (math.isfinite(lo) and math.isfinite(hi)):
        return "too few prompts"
    if not (lo > 0 or hi < 0):
        return "CI includes 0"
    if p_holm is not None and not p_holm < alpha:
        return "not after correction"
    return "helps" if lo > 0 else "hurts"


def by_type(instructions, baseline: str = "io", view: str = "as answered", grouping: str = "id",
            min_prompts: int = 5, level: float = 0.95, resamples: int = 10_000, seed: int = 0):
    """Per instruction type (IFEval/IFBench instruction id, ScopeIF Scope selector; grouping="category": the id's
    part before the colon, e.g. detectable_format): each mode's strict followed rate and its difference from
    `baseline`, paired over the prompts holding that type (a prompt's value: the followed share of its
    instructions of that type), with a paired bootstrap interval. A type on fewer than `min_prompts` prompts gets
    no verdict: a percentile bootstrap of a handful of prompts covers far less than its nominal level. The types
    with a verdict are one family, Holm-corrected (`p_holm`), as in mode_differences."""
    import pandas as pd

    if grouping not in ("id", "category"):
        raise ValueError(f"grouping={grouping!r}: id or category")
    sub = instructions[(instructions["view"] == view) & instructions["strict"].notna()]
    if grouping == "category":
        sub = sub.assign(type=sub["type"].str.split(":").str[0])
    per_prompt = sub.groupby(["benchmark", "type", "key", "mode"])["strict"].mean().unstack("mode")
    rows = []
    for (b, t), g in per_prompt.groupby(level=["benchmark", "type"], sort=True):
        if baseline not in g:
            continue
        for mode in [m for m in MODES if m != baseline and m in g]:
            d, lo, hi, n, p = stats.paired_bootstrap(g[mode], g[baseline], level=level, resamples=resamples,
                                                     seed=seed, with_p=True)
            rows.append({"benchmark": b, "type": t, "mode": MODE_LABELS[mode], "prompts": n,
                         f"{MODE_LABELS[baseline]} rate": g[baseline].mean(), "rate": g[mode].mean(),
                         "diff": d, "lo": lo, "hi": hi, "p": p})
    return _holm_verdicts(pd.DataFrame(rows, columns=["benchmark", "type", "mode", "prompts",
                                                      f"{MODE_LABELS[baseline]} rate", "rate", "diff", "lo", "hi",
                                                      "p"]), level, min_prompts)


def format_table(outputs):
    """Per mode, the share of outputs in each form and with each tag, that hit max_new_tokens, that copy the
    trigger's placeholder as reasoning, and whose reasoning came from a think block (SDC: of pass 1)."""
    import pandas as pd

    rows = []
    for mode, g in outputs.groupby("mode", sort=False):
        row = {"mode": MODE_LABELS[mode], "outputs": len(g)}
        for form in ("think+answer", "partial tags", "no tags"):
            row[form] = (g["form"] == form).mean()
        for tag in TAGS:
            row[f"has {tag}"] = g["output"].str.contains(tag, regex=False).mean()
        row["hit max_new_tokens"] = g["truncated"].mean()
        row["placeholder reasoning"] = g["placeholder"].mean()
        row["reasoning from a think block"] = (math.nan if mode in ("io", "nothink")
                                               else (g["reasoning_source"] == "think block").mean())
        rows.append(row)
    return pd.DataFrame(rows).set_index("mode")


def reasoning_table(outputs, threshold: float = 0.5):
    """Per mode: how many outputs carry reasoning, its length in words (median, mean), the final output's length,
    and the share of superficial reasoning (restatement >= threshold: mostly the instruction's own phrases)."""
    import pandas as pd

    rows = []
    for mode, g in outputs.groupby("mode", sort=False):
        r = g["reasoning_words"].dropna()
        overlap = g["restatement"].dropna()
        rows.append({"mode": MODE_LABELS[mode], "outputs": len(g), "with reasoning": len(r),
                     "reasoning words, median": r.median() if len(r) else math.nan,
                     "reasoning words, mean": r.mean() if len(r) else math.nan,
                     "output words, median": g["output_words"].median(),
                     "restatement, median": overlap.median() if len(overlap) else math.nan,
                     f"superficial (restatement >= {threshold:g})": (overlap >= threshold).mean()
                     if len(overlap) else math.nan})
    return pd.DataFrame(rows).set_index("mode")


def keyword_table(outputs, keywords=KEYWORDS):
    """Occurrences per 1000 words of each keyword (RAIF Fig. 4) in each text source: the I/O responses (the
    baseline; w/o CoT's too), the CoT reasoning (think blocks), SDC's reasoning shown back (think blocks)
    and SDC's answers. Columns: the sources, with their word counts in the header."""
    import pandas as pd

    sources = {}
    for mode, g in outputs.groupby("mode", sort=False):
        if mode in ("io", "nothink"):
            sources[f"{MODE_LABELS[mode]} response"] = g["output"]
        else:
            shown = " shown back" if mode == "sdc" else ""  # SDC's: what its second pass read as reasoning
            sources[f"{MODE_LABELS[mode]} reasoning{shown}"] = g["reasoning"].dropna()
        if mode == "sdc":
            sources["SDC answer"] = g["output"]
    table = {}
    for name, texts in sources.items():
        counts, total = keyword_counts(texts, keywords)
        table[f"{name} ({total:,} words)"] = {k: 1000 * counts[k] / total if total else math.nan for k in keywords}
    return pd.DataFrame(table).rename_axis("keyword (per 1000 words)")


def top_words_table(outputs, k: int = 15):
    """top_words of each mode's reasoning, side by side (modes without reasoning left out; empty when none has)."""
    import pandas as pd

    tables = {MODE_LABELS[m]: pd.DataFrame(top_words(g["reasoning"].dropna(), g.loc[g["reasoning"].notna(), "prompt"],
                                                     k), columns=["word", "count", "share from the instruction"])
              for m, g in outputs.groupby("mode", sort=False) if g["reasoning"].notna().any()}
    return pd.concat(tables, axis=1) if tables else pd.DataFrame()


def pick_examples(outputs, prompts, k: int = 3, view: str = "as answered") -> list[tuple]:
    """(benchmark, key) of up to k items per benchmark to render: first those where the modes' prompt-level
    scores disagree (where reasoning changed the outcome), then the rest, in benchmark order."""
    picked = []
    for b, g in prompts[prompts["view"] == view].groupby("benchmark", sort=False):
        spread = g.groupby("key", sort=False)[MAIN[b]].agg(lambda s: s.max() - s.min())
        keys = list(spread[spread > 0].index) + list(spread[~(spread > 0)].index)
        picked += [(b, key) for key in keys[:k]]
    return picked


def short_passes(outputs, prompts, max_words: int = 5, view: str = "as answered"):
    """Outputs of at most `max_words` words that meet every instruction of their prompt (the benchmark's main
    metric at 1): often a vacuous pass, the check finding nothing to count (IFBench's "every 5th word in
    Japanese" on a one-word answer). One row per output: benchmark, key, mode, words, output."""
    import pandas as pd

    scored = prompts[prompts["view"] == view]
    passed = {(r["benchmark"], r["key"], r["mode"]) for r in scored.to_dict("records") if r[MAIN[r["benchmark"]]] == 1}
    rows = [{"benchmark": r.benchmark, "key": r.key, "mode": MODE_LABELS[r.mode], "words": r.output_words,
             "output": r.output} for r in outputs.itertuples()
            if r.output_words <= max_words and (r.benchmark, r.key, r.mode) in passed]
    return pd.DataFrame(rows, columns=["benchmark", "key", "mode", "words", "output"])


def conclusions(differences, types, formats, reasoning, model: str, threshold: float = 0.5,
                level: float = 0.95) -> list[str]:
    """The closing statements, each computed from the tables: what the CoT and SDC numbers mean given format
    adherence, every mode against I/O on each benchmark's first metric (both views where they differ), every
    other difference the table decides (any metric, any view), the instruction types where a mode helps or hurts, the superficial-reasoning share, and the model-size caveat."""
    lines = []
    pct = f"{100 * level:g}%"
    if "CoT" in formats.index:
        f = formats.loc["CoT"]
        n = int(f["outputs"])
        lines.append(f"Format: {round(f['think+answer'] * n)} of {n} CoT outputs ({100 * f['think+answer']:.0f}%) "
                     f"follow RAIF's think/answer format (eq. 4); {100 * f['no tags']:.0f}% use no tag at all and "
                     f"{100 * f['hit max_new_tokens']:.0f}% stop at max_new_tokens.")
        if f["no tags"] >= 0.5:
            lines.append("Most CoT outputs carry no tags, so CoT's score here mostly measures a longer system prompt, "
                         "not separated reasoning; its two views coincide on those outputs.")
        elif f["think+answer"] < 0.5:
            lines.append("Fewer than half of the CoT outputs are well formed: 'answer-extracted' scores many outputs "
                         "on a fragment, 'as answered' scores the reasoning text as part of the answer.")
    if "SDC" in formats.index:
        share = formats.loc["SDC", "reasoning from a think block"]
        lines.append(f"SDC: {100 * share:.0f}% of its second passes were shown a think block; the others were "
                     "shown the text None as the reasoning (as the authors' code writes a missing reasoning_content), "
                     "so there SDC answers a second time without being shown any reasoning.")
    family = int(differences["p_holm"].notna().sum())
    for (b, comparison), g in differences.groupby(["benchmark", "comparison"], sort=False):
        g = g[g["metric"] == MAIN[b]].set_index("view")
        views = list(g.index) if abs(g["diff"].iloc[0] - g["diff"].iloc[-1]) > 1e-9 else [g.index[0]]
        for view in views:
            r = g.loc[view]
            head = (f"{b} {MAIN[b]} ({view}), {comparison}: {r['diff']:+.1f} points ({pct} paired bootstrap CI "
                    f"{r['lo']:+.1f} to {r['hi']:+.1f}, {int(r['prompts'])} prompts)")
            tail = {"helps": f"helps (Holm-adjusted p {r['p_holm']:.3g} over the {family} comparisons of the "
                             "difference table).",
                    "hurts": f"hurts (Holm-adjusted p {r['p_holm']:.3g} over the {family} comparisons of the "
                             "difference table).",
                    "not after correction": f"its own interval excludes 0, but not after Holm's correction over the "
                                            f"{family} comparisons of the difference table (adjusted p "
                                            f"{r['p_holm']:.3g}), so its sign is not decided.",
                    "too few prompts": "too few prompts for an interval."}
            lines.append(f"{head}: " + tail.get(r["verdict"], "the interval includes 0, so these prompts cannot "
                                                               "decide its sign."))
    # Every other row the difference table decides is stated too: a conclusion never omits a decided difference.
    other = differences[differences["verdict"].isin(["helps", "hurts"])
                        & (differences["metric"] != differences["benchmark"].map(MAIN))]
    for r in other.itertuples():
        lines.append(f"Also decided in the difference table: {r.benchmark} {r.metric} ({r.view}), {r.comparison}: "
                     f"{r.diff:+.1f} points ({pct} paired bootstrap CI {r.lo:+.1f} to {r.hi:+.1f}, {int(r.prompts)} "
                     f"prompts): {r.verdict} (Holm-adjusted p {r.p_holm:.3g} over the {family} comparisons).")
    for mode, g in types.groupby("mode", sort=False):
        decided = g[g["verdict"].isin(["helps", "hurts"])]
        few = (g["verdict"] == "too few prompts").sum()
        corrected = (g["verdict"] == "not after correction").sum()
        text = (f"Per instruction type, {mode} against I/O: {len(g)} types, {few} on too few prompts for a verdict; "
                f"helps on {(decided['verdict'] == 'helps').sum()}, hurts on {(decided['verdict'] == 'hurts').sum()} "
                f"after Holm's correction over the {int(types['p_holm'].notna().sum())} type comparisons with a "
                f"verdict; on {corrected} more only the type's own interval excludes 0; the interval includes 0 on "
                f"the other {len(g) - few - len(decided) - corrected}")
        named = "; ".join(f"{r.type} ({r.benchmark}, {r.diff:+.2f})" for r in decided.itertuples())
        lines.append(text + (f": {named}." if named else "."))
    superficial = next((c for c in reasoning.columns if c.startswith("superficial")), None)
    for mode, r in reasoning.drop(index="I/O", errors="ignore").iterrows():
        if not r["with reasoning"]:
            lines.append(f"{mode}: no output carries reasoning to measure.")
            continue
        lines.append(f"{mode}: {int(r['with reasoning'])} outputs with reasoning"
                     f", median {r['reasoning words, median']:.0f} words; {100 * r[superficial]:.0f}% of them "
                     f"superficial (at least {100 * threshold:.0f}% of their word n-grams restate the instruction).")
    size = "SmolLM2-135M-Instruct, a 135M model," if "smollm2-135m" in str(model).lower() else str(model)
    lines.append(f"These are the numbers of one model: {size} does not behave like the paper's 1.5B-8B models (RAIF "
                 "Table 1, IFEval: CoT 28.65 and SDC 41.95 against I/O 45.28 for Qwen2.5-1.5B-Instruct; CoT 69.50 and "
                 "SDC 60.44 against I/O 72.82 for Qwen2.5-7B-Instruct), so they describe this model under RAIF's "
                 "prompts, not the paper's claim.")
    return lines
