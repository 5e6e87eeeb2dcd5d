"""RAIF's preliminary study (ifcore.bench.cot_study) and the paired bootstrap behind its intervals (ifcore.stats).

The prompts are pinned as golden strings (the authors' wording); answer extraction, the restatement measure and
the keyword counts on hand examples; the wiring of SDC's second pass and of both scoring views with a scripted
backend (no model); the scores against the benchmarks' own summaries. The notebook itself runs in a small
configuration in tests/test_notebooks.py.
"""
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ifcore import stats
from ifcore.bench import cot_study as cs
from ifcore.bench import ifeval
from ifcore.bench.scopeif import judge_instance, load_formalizations, metrics
from ifcore.infer.generate import GenParams

INSTRUCTION = "Write a haiku about rain. Do not use any commas."


def test_the_modes_send_the_documented_messages():
    assert cs.io_messages(INSTRUCTION) == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a haiku about rain. Do not use any commas."}]
    assert cs.cot_messages(INSTRUCTION) == [
        {"role": "system", "content": "You are a helpful assistant. The assistant first thinks about the reasoning "
                                      "process in the mind and then provides the user with the answer. The reasoning "
                                      "process and answer are enclosed within <think> </think> and <answer> </answer> "
                                      "tags, respectively, i.e., <think> reasoning process here </think><answer> "
                                      "answer here </answer>."},
        {"role": "user", "content": "Write a haiku about rain. Do not use any commas."}]
    assert cs.sdc_messages(INSTRUCTION, "Rain, so: three lines, no commas.") == [
        cs.cot_messages(INSTRUCTION)[0],  # pass 1's system turn: the authors replace only the last user turn
        {"role": "user", "content": "Here's my original input request:\n```\nWrite a haiku about rain. Do not use any "
                                    "commas.\n```\n\nHere's my another model's reasoning process:\nRain, so: three "
                                    "lines, no commas.\n\nBased on this reasoning, provide your response directly to "
                                    "me:"}]


@pytest.mark.parametrize("text, reasoning, answer, form", [
    ("Just the answer.", None, "Just the answer.", "no tags"),
    ("  spaces kept  ", None, "  spaces kept  ", "no tags"),  # untagged: both views score the same text
    ("<think> plan </think><answer> done </answer>", "plan", "done", "think+answer"),
    ("<think>plan</think>\n<answer>done</answer>\n", "plan", "done", "think+answer"),
    # duplicated blocks: every think block is reasoning, the last answer block is the answer (the authors' choice)
    ("<think>a</think><think>b</think><answer>x</answer><answer>y</answer>", "a\n\nb", "y", "think+answer"),
    # unclosed think: cut by the token limit, nothing answered
    ("<think>still reasoning when the tokens ran out", "still reasoning when the tokens ran out", "", "partial tags"),
    ("<think>plan<answer>partial answer", "plan", "partial answer", "partial tags"),
    ("<think>plan</think>answer without tags", "plan", "answer without tags", "partial tags"),
    ("plan with an opening from the template</think> the answer", "plan with an opening from the template",
     "the answer", "partial tags"),
    ("<answer>never closed", None, "never closed", "partial tags"),
    ("<answer>first</answer> then <answer>second, cut", None, "first", "partial tags"),
    ("<think>a</think> between <think>b unclosed", "a\n\nb unclosed", "", "partial tags"),
    ("<think>a</think><answer>x</answer> trailing text", "a", "x", "partial tags"),  # eq. 4: the answer ends it
    ("<think> reasoning process here </think><answer> answer here </answer>", "reasoning process here",
     "answer here", "think+answer"),
])
def test_answer_extraction_handles_missing_duplicated_and_unclosed_tags(text, reasoning, answer, form):
    assert cs.split_output(text) == {"reasoning": reasoning, "answer": answer, "form": form}


piece = st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "a", "b c", ",", "<", ">"])


@settings(max_examples=300, deadline=None)
@given(st.lists(piece, max_size=12).map("".join))
def test_answer_extraction_never_fails_and_keeps_text_from_the_output(text):
    split = cs.split_output(text)
    assert split["form"] in ("think+answer", "partial tags", "no tags")
    assert split["answer"] in text
    assert split["reasoning"] is None or all(block in text for block in split["reasoning"].split("\n\n"))
    if not any(tag in text for tag in cs.TAGS):
        assert split == {"reasoning": None, "answer": text, "form": "no tags"}


@given(st.text(alphabet="abc ,.\n", max_size=30), st.text(alphabet="abc ,.\n", max_size=30))
def test_a_well_formed_output_splits_into_its_two_parts(reasoning, answer):
    split = cs.split_output(f"<think>{reasoning}</think><answer>{answer}</answer>")
    assert split == {"reasoning": reasoning.strip(), "answer": answer.strip(), "form": "think+answer"}


def test_restatement_is_the_share_of_reasoning_ngrams_found_in_the_instruction():
    prompt = "Write a poem about cats and dogs. Use no commas."
    assert cs.restatement("write a poem about cats and dogs", prompt) == 1.0
    assert cs.restatement("Write a poem about cats and dogs, use no commas!", prompt) == 1.0  # case, punctuation
    assert cs.restatement("the sky is blue today", prompt) == 0.0
    # "i will write a poem about dogs": trigrams (i will write) (will write a) (write a poem) (a poem about)
    # (poem about dogs); two of the five occur in the prompt
    assert cs.restatement("I will write a poem about dogs", prompt) == pytest.approx(2 / 5)
    assert cs.restatement("I will write a poem about dogs", prompt, n=1) == pytest.approx(5 / 7)
    assert cs.restatement("cats dogs", prompt) == 0.0  # shorter than n: the bigram (cats dogs) is not in the prompt
    assert cs.restatement("cats and", prompt) == 1.0
    assert cs.restatement(" ... ", prompt) is None
    with pytest.raises(ValueError, match="at least one word"):
        cs.restatement("x", prompt, n=0)


@given(st.text(alphabet="ab cd.,\n", max_size=40), st.text(alphabet="ab cd.,\n", max_size=40), st.integers(1, 4))
def test_restatement_is_a_share_and_a_copy_restates_fully(reasoning, prompt, n):
    value = cs.restatement(reasoning, prompt, n)
    assert value is None if not cs.words(reasoning) else 0.0 <= value <= 1.0
    if cs.words(prompt):
        assert cs.restatement(prompt, prompt, n) == 1.0
        assert cs.restatement(prompt, prompt + " " + reasoning, n) == 1.0  # a copy of part of the instruction


def test_keyword_counts_and_the_most_frequent_reasoning_words():
    counts, total = cs.keyword_counts(["First, I need to check the poem. Then, first again!", "Finally: done."])
    assert total == 12
    assert (counts["first"], counts["need"], counts["check"], counts["then"], counts["finally"]) == (2, 1, 1, 1, 1)
    assert counts["second"] == 0 and list(counts) == list(cs.KEYWORDS)
    top = cs.top_words(["The poem must rhyme; the poem about cats.", "Rhyme rhyme."],
                       ["Write a poem about cats.", "Write a limerick."])
    assert top[0] == ("rhyme", 3, 0.0)
    assert top[1] == ("poem", 2, 1.0)  # both occurrences restate the first instruction
    assert ("the", 2, 0.0) not in top and all(w.isalpha() and len(w) >= 3 for w, _, _ in top)


# ---------------------------------------------------------------------------------------------------------
# The paired bootstrap over prompts.

def test_paired_bootstrap_is_seeded_and_decides_a_clear_difference():
    rng = np.random.default_rng(1)
    b = rng.integers(0, 2, 200).astype(float)
    a = np.where(rng.random(200) < 0.3, 1.0, b)  # a follows b, plus 30 % extra successes
    first = stats.paired_bootstrap(a, b, seed=7, resamples=2000)
    assert first == stats.paired_bootstrap(a, b, seed=7, resamples=2000)
    assert first != stats.paired_bootstrap(a, b, seed=8, resamples=2000)
    diff, lo, hi, n = first
    assert n == 200 and diff == pytest.approx(float(np.mean(a - b)))
    assert 0 < lo < diff < hi
    assert hi - lo < 0.2


def test_paired_bootstrap_edge_cases():
    assert stats.paired_bootstrap([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0, 3)
    diff, lo, hi, n = stats.paired_bootstrap([0.5, 0.7, 0.9], [0.25, 0.45, 0.65])  # a constant shift
    assert (diff, lo, hi, n) == pytest.approx((0.25, 0.25, 0.25, 3))
    diff, lo, hi, n = stats.paired_bootstrap([1.0, None, math.nan, 0.0], [0.0, 1.0, 0.0, None])
    assert (diff, n) == (1.0, 1) and math.isnan(lo) and math.isnan(hi)  # one pair: no spread
    assert all(math.isnan(v) for v in stats.paired_bootstrap([None], [1.0])[:3])
    assert stats.paired_bootstrap([], [])[3] == 0
    with pytest.raises(ValueError, match="differ in length"):
        stats.paired_bootstrap([1, 0], [1])
    with pytest.raises(ValueError, match="confidence level"):
        stats.paired_bootstrap([1, 0], [1, 1], level=1.0)


def test_paired_bootstrap_weights_give_the_pooled_rate():
    # Per-prompt followed shares weighted by instruction counts: the instruction-level difference.
    a, b, w = [1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [1, 4, 5]
    diff, lo, hi, n = stats.paired_bootstrap(a, b, weights=w)
    assert diff == pytest.approx((1 + 2 + 0) / 10 - (0 + 2 + 0) / 10)
    assert stats.paired_bootstrap(a, b, weights=[1, 4, 0])[3] == 2  # a prompt weighing 0 is left out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(1, 3)), min_size=2, max_size=25),
       st.integers(0, 10_000))
def test_paired_bootstrap_properties(rows, seed):
    a = [r[0] / 4 for r in rows]
    b = [r[1] / 4 for r in rows]
    w = [r[2] for r in rows]
    diff, lo, hi, n = stats.paired_bootstrap(a, b, weights=w, seed=seed, resamples=300)
    d = np.subtract(a, b)
    assert n == len(rows)
    # Every resample's weighted mean difference lies between the smallest and largest paired difference.
    assert d.min() - 1e-12 <= lo <= hi <= d.max() + 1e-12
    assert d.min() - 1e-12 <= diff <= d.max() + 1e-12
    # Swapping the arms negates the difference and mirrors the interval (same resamples).
    back = stats.paired_bootstrap(b, a, weights=w, seed=seed, resamples=300)
    assert back == pytest.approx((-diff, -hi, -lo, n))
    # The p-value inverts the interval: the same resamples, and p below 1 - level where the interval excludes 0
    # with room to spare (the quantiles interpolate); an interval around 0 gives p above it; swapping keeps p.
    *same, p = stats.paired_bootstrap(a, b, weights=w, seed=seed, resamples=300, with_p=True)
    assert tuple(same) == (diff, lo, hi, n) and 0 <= p <= 1
    assert back[:4] == pytest.approx(tuple(stats.paired_bootstrap(b, a, weights=w, seed=seed, resamples=300,
                                                                  with_p=True)[:4]))
    if lo > 0 or hi < 0:
        assert p <= 0.05 + 2 / 300
    if lo < 0 < hi:
        assert p >= 0.05 - 2 / 300
    assert stats.paired_bootstrap(b, a, weights=w, seed=seed, resamples=300, with_p=True)[4] == pytest.approx(p)


# ---------------------------------------------------------------------------------------------------------
# Items, generation and scoring, with a scripted backend instead of a model.

class Scripted:
    """A backend for ifcore.infer.generate: answers by the system prompt and remembers every input."""
    model_id = "scripted-cot-study"
    batch_size = 4

    def __init__(self, cot_reply):
        self.cot_reply, self.seen = cot_reply, []

    def complete(self, inputs, params, seeds):
        self.seen += inputs
        out = []
        for chat in inputs:
            system, user = chat[0]["content"], chat[-1]["content"]
            if user.startswith("Here's my original input request"):
                out.append("SDC final answer without any comma")
            elif system == cs.COT_SYSTEM:
                out.append(self.cot_reply(user))
            elif params.chat_template_kwargs.get("enable_thinking") is False:
                out.append("<think>\n\n</think>\n\nAnswer without thinking, no comma")
            else:
                out.append("I/O answer, with a comma")
        return [(text, len(text.split())) for text in out]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))


def test_load_items_draws_the_subset_of_ifcore_eval():
    everything = cs.load_items("ifeval")
    assert len(everything) == 541 and everything[0]["key"] == 1000
    chosen = sorted(random.Random(3).sample(range(541), 10))
    assert [i["key"] for i in cs.load_items("ifeval", 10, 3)] == [everything[i]["key"] for i in chosen]
    assert len(cs.load_items("ifbench", None)) == 300
    scopeif = cs.load_items("scopeif")
    assert len(scopeif) == 264  # the instances with at least one formalized constraint
    assert len(cs.load_items("scopeif", 500)) == 264  # a subset larger than the benchmark is all of it
    with pytest.raises(ValueError, match="at least 1 prompt"):
        cs.load_items("ifeval", 0)
    with pytest.raises(ValueError, match="one of ifeval, ifbench, scopeif, muldimif, followbench"):
        cs.load_items("mmlu")


def test_sdc_is_built_as_the_authors_build_it(own_cache):
    backend = Scripted(lambda user: "<think>Plan: no commas.</think><answer>Done</answer>" if "rain" in user
                       else "No tags, just an answer.")
    prompts = ["Write about rain.", "Write about snow."]
    out = cs.generate_modes(backend, prompts, GenParams(max_new_tokens=5))
    assert list(out) == ["io", "cot", "sdc", "nothink"]
    second_passes = [c for c in backend.seen if c[-1]["content"].startswith("Here's my original")]
    # one message list: pass 1's chat with only its last user turn replaced (run_local_model_openai.py), the
    # reasoning its think block, or the text "None" where it has none (the authors' str.format of None)
    expected = [cs.sdc_messages("Write about rain.", "Plan: no commas."), cs.sdc_messages("Write about snow.", None)]
    assert sorted(second_passes, key=str) == sorted(expected, key=str)  # (the queue runs longest first)
    assert expected[0][0] == cs.cot_messages("Write about rain.")[0]  # the system turn stays the CoT one
    assert "reasoning process:\nNone\n" in expected[1][-1]["content"]
    assert [e["reasoning_source"] for e in out["sdc"]] == ["think block", "none (the prompt says None)"]
    assert out["sdc"][1]["reasoning"] is None
    # w/o CoT (Table 14): the I/O chat with the template's enable_thinking switch off
    assert [e["output"] for e in out["nothink"]] == ["<think>\n\n</think>\n\nAnswer without thinking, no comma"] * 2
    assert [e["reasoning"] for e in out["cot"]] == ["Plan: no commas.", None]
    assert out["sdc"][0]["first_pass"] == out["cot"][0]["output"]
    assert [e["truncated"] for e in out["cot"]] == [False, True]  # "No tags, just an answer." is 5 words
    # SDC alone still makes the CoT pass it needs; each greedy input is generated once (then cached).
    n_seen = len(backend.seen)
    only = cs.generate_modes(backend, prompts, GenParams(max_new_tokens=5), modes=["sdc"])
    assert list(only) == ["sdc"] and len(backend.seen) == n_seen
    with pytest.raises(ValueError, match="non-empty list of io, cot, sdc, nothink"):
        cs.generate_modes(backend, prompts, GenParams(), modes=["cot", "tot"])


def test_the_two_views_score_the_whole_output_and_the_extracted_answer(own_cache):
    # IFEval 1162 asks for a riddle without commas: the CoT reasoning has commas, its answer has none.
    backend = Scripted(lambda user: "<think>First, a riddle, no commas.</think><answer>What has keys but no "
                                    "locks</answer>")
    study = cs.run_study(backend, ["ifeval"], subset=None, params=GenParams(max_new_tokens=64), progress=False)
    p = study["prompts"].set_index(["mode", "view", "key"])
    assert p.loc[("cot", "as answered", 1162), "P-S"] == 0.0
    assert p.loc[("cot", "answer-extracted", 1162), "P-S"] == 1.0
    assert p.loc[("io", "as answered", 1162), "P-S"] == 0.0 == p.loc[("io", "answer-extracted", 1162), "P-S"]
    assert p.loc[("sdc", "as answered", 1162), "P-S"] == 1.0
    o = study["outputs"].set_index(["mode", "key"])
    assert o.loc[("cot", 1162), "form"] == "think+answer" and o.loc[("cot", 1162), "reasoning_words"] == 5
    assert pd.isna(o.loc[("io", 1162), "reasoning"])
    assert o.loc[("sdc", 1162), "reasoning"] == "First, a riddle, no commas."
    i = study["instructions"]
    assert set(i.loc[i["key"] == 1162, "type"]) == {"punctuation:no_comma"}
    formats = cs.format_table(study["outputs"])
    assert formats.loc["CoT", "think+answer"] == 1.0 and formats.loc["I/O", "no tags"] == 1.0
    assert formats.loc["SDC", "reasoning from a think block"] == 1.0


def test_scores_agree_with_the_benchmarks_own_summaries(own_cache):
    items = cs.load_items("ifeval", 40, 5)
    texts = ["word " * (10 * k) + ("," if k % 3 else "") for k in range(40)]
    records = cs.score("ifeval", items, texts)
    rows = [r["row"] for r in items]
    official = ifeval.summarize(ifeval.evaluate(rows, {i["prompt"]: t for i, t in zip(items, texts)}, ifeval.IFEVAL,
                                                letter_seed=ifeval.PAPER_LETTER_SEED))
    prompts = pd.DataFrame([{"benchmark": "ifeval", "view": "as answered", "mode": "io", "key": i["key"],
                             **cs.prompt_metrics("ifeval", r)} for i, r in zip(items, records)])
    got = cs.headline(prompts).set_index("metric")["score"]
    assert got["P-S"] == pytest.approx(100 * official["strict"]["prompt_level"])
    assert got["I-S"] == pytest.approx(100 * official["strict"]["instruction_level"])
    assert got["P-L"] == pytest.approx(100 * official["loose"]["prompt_level"])
    assert got["I-L"] == pytest.approx(100 * official["loose"]["instruction_level"])
    assert 0 < official["loose"]["instruction_level"] < 1  # the texts neither pass nor fail everything

    items = cs.load_items("scopeif")
    texts = [f"A short answer number {k}.\n\n- one\n- two" * (k % 4 + 1) for k in range(len(items))]
    records = cs.score("scopeif", items, texts)
    formalized = load_formalizations()
    official = metrics([i["row"] for i in items],
                       [judge_instance(i["row"], t, formalized) for i, t in zip(items, texts)])
    prompts = pd.DataFrame([{"benchmark": "scopeif", "view": "as answered", "mode": "io", "key": i["key"],
                             **cs.prompt_metrics("scopeif", r)} for i, r in zip(items, records)])
    got = cs.headline(prompts).set_index("metric")["score"]
    assert got["CSR"] == pytest.approx(100 * official["CSR"]) and got["ISR"] == pytest.approx(100 * official["ISR"])
    assert prompts["ISR"].notna().sum() == official["instances_in_ISR"] == 117



def test_muldimif_and_followbench_scores_are_their_official_verdicts():
    """The two benchmarks added for RAIF's and RTT's tables: the study's per-prompt metrics, on the agreement
    reference responses, equal what `ifcore eval` computes (MulDimIF's summary; FollowBench's rule verdicts)."""
    import gzip
    import json

    from ifcore.bench import followbench, muldimif

    data = Path(__file__).parent / "data"
    refs = {}
    for line in gzip.open(data / "muldimif" / "reference.jsonl.gz", "rt"):
        row = json.loads(line)
        refs.setdefault(row["id"], row["response"])  # one response per item
    items = [i for i in cs.load_items("muldimif") if i["key"] in refs]
    assert len(cs.load_items("muldimif")) == 1200 and len(items) == len(refs) > 300
    texts = [refs[i["key"]] for i in items]
    records = cs.score("muldimif", items, texts)
    official = muldimif.summarize([i["row"] for i in items],
                                  {i["key"]: [muldimif.official_verdict(c, t) for c in i["row"]["constraints"]]
                                   for i, t in zip(items, texts)})
    prompts = pd.DataFrame([{"benchmark": "muldimif", "view": "as answered", "mode": "io", "key": i["key"],
                             **cs.prompt_metrics("muldimif", r)} for i, r in zip(items, records)])
    got = cs.headline(prompts, resamples=200).set_index("metric")["score"]
    assert got["All"] == pytest.approx(100 * official["all"]["rate"])
    assert got["Macro"] == pytest.approx(100 * official["macro"]["rate"])
    assert got["Micro"] == pytest.approx(100 * official["micro"]["rate"])
    assert 0 < official["all"]["rate"] < official["micro"]["rate"] < 1
    assert {t.split(":")[0] for r in records for t in r["types"]} == {"Content", "Format", "Language", "Length"}

    refs = {}
    for line in gzip.open(data / "followbench" / "rule_reference.jsonl.gz", "rt"):
        row = json.loads(line)
        refs.setdefault(row["prompt"], row["response"])
    items = cs.load_items("followbench")
    assert len(items) == 350 == len(refs) and len({i["key"] for i in items}) == 350
    records = cs.score("followbench", items, [refs[i["prompt"]] for i in items])
    assert [r["strict"] for r in records] == [[followbench.rule_verdict(i["row"], refs[i["prompt"]])] for i in items]
    hsr = [cs.prompt_metrics("followbench", r)["HSR"] for r in records]
    assert 0 < sum(hsr) < len(hsr) and {r["types"][0].split(":")[0] for r in records} == {
        "example", "content", "situation", "mixed", "format"}


def test_prompts_without_room_for_the_answer_are_skipped_and_named(own_cache):
    from ifcore.infer.generate import render, too_long

    from transformers import AutoTokenizer

    model = Path(__file__).parent / "data" / "tiny_chat_llama"
    items = cs.load_items("muldimif", 6, 0)
    params = GenParams(max_new_tokens=2)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    lengths = [len(tokenizer(render(tokenizer, cs.cot_messages(i["prompt"]), {}), add_special_tokens=False).input_ids)
               for i in items]
    flags, limit = too_long(str(model), [cs.cot_messages(i["prompt"]) for i in items], params)
    assert limit == 4096 - 2 and flags == [n > limit for n in lengths]
    assert too_long(Scripted(str), ["x"], params) == ([False], None)  # no tokenizer here: the server decides
    limit = sorted(lengths)[2]
    flags, _ = too_long(str(model), [cs.cot_messages(i["prompt"]) for i in items], params, limit)
    assert sum(flags) == sum(n > limit for n in lengths) > 0


def test_short_passes_flags_outputs_that_pass_on_almost_no_text():
    outputs = pd.DataFrame([
        {"benchmark": "ifbench", "key": 1, "mode": "io", "output_words": 1, "output": "日本"},
        {"benchmark": "ifbench", "key": 2, "mode": "io", "output_words": 1, "output": "No"},  # fails: not listed
        {"benchmark": "ifbench", "key": 3, "mode": "cot", "output_words": 40, "output": "long " * 40},
        {"benchmark": "scopeif", "key": "s", "mode": "cot", "output_words": 3, "output": "a b c"}])
    prompts = pd.DataFrame([
        {"benchmark": "ifbench", "key": 1, "mode": "io", "view": "as answered", "P-S": 1.0, "CSR": math.nan},
        {"benchmark": "ifbench", "key": 2, "mode": "io", "view": "as answered", "P-S": 0.0, "CSR": math.nan},
        {"benchmark": "ifbench", "key": 3, "mode": "cot", "view": "as answered", "P-S": 1.0, "CSR": math.nan},
        {"benchmark": "scopeif", "key": "s", "mode": "cot", "view": "as answered", "P-S": math.nan, "CSR": 1.0},
        {"benchmark": "ifbench", "key": 2, "mode": "io", "view": "answer-extracted", "P-S": 1.0, "CSR": math.nan}])
    got = cs.short_passes(outputs, prompts)
    assert got[["benchmark", "key", "mode"]].values.tolist() == [["ifbench", 1, "I/O"], ["scopeif", "s", "CoT"]]
    assert cs.short_passes(outputs, prompts, max_words=2)["key"].tolist() == [1]

def _differences(diff, lo, hi, p_holm=0.01):
    return pd.DataFrame([{"benchmark": "ifeval", "view": v, "comparison": "CoT - I/O", "metric": "P-S", "diff": diff,
                          "lo": lo, "hi": hi, "prompts": 24, "p_holm": p_holm,
                          "verdict": cs.verdict(lo, hi, 24, p_holm=p_holm)} for v in cs.VIEWS])


def test_conclusions_follow_the_numbers():
    types = pd.DataFrame([{"benchmark": "ifeval", "type": "keywords", "mode": "CoT", "prompts": 9, "diff": -0.4,
                           "lo": -0.7, "hi": -0.1, "p_holm": 0.02, "verdict": "hurts"},
                          {"benchmark": "ifeval", "type": "startend", "mode": "CoT", "prompts": 2, "diff": 0.5,
                           "lo": 0.0, "hi": 1.0, "p_holm": math.nan, "verdict": "too few prompts"}])
    formats = pd.DataFrame([{"mode": "CoT", "outputs": 24, "think+answer": 0.0, "partial tags": 0.25, "no tags": 0.75,
                             "hit max_new_tokens": 0.5}]).set_index("mode")
    reasoning = pd.DataFrame([{"mode": "CoT", "with reasoning": 6, "reasoning words, median": 40.0,
                               "superficial (restatement >= 0.5)": 0.5}]).set_index("mode")
    lines = cs.conclusions(_differences(-4.2, -12.5, 4.2), types, formats, reasoning, "smollm2-135m")
    text = "\n".join(lines)
    assert "0 of 24 CoT outputs (0%) follow RAIF's think/answer format" in text
    assert "CoT's score here mostly measures a longer system prompt" in text
    assert "ifeval P-S (as answered), CoT - I/O: -4.2 points (95% paired bootstrap CI -12.5 to +4.2, 24 prompts): " \
           "the interval includes 0" in text
    assert "answer-extracted" not in text  # both views equal: one sentence
    assert "helps on 0, hurts on 1" in text and "keywords (ifeval, -0.40)" in text and "startend" not in text
    assert "50% of them superficial" in text
    assert "a 135M model, does not behave like the paper's" in text
    decided = "\n".join(cs.conclusions(_differences(-9.0, -15.0, -2.0), types, formats, reasoning, "x"))
    assert "-9.0 points (95% paired bootstrap CI -15.0 to -2.0, 24 prompts): hurts (Holm-adjusted p 0.01 over the " \
           "2 comparisons of the difference table)." in decided
    undecided = "\n".join(cs.conclusions(_differences(-9.0, -15.0, -2.0, p_holm=0.2), types, formats, reasoning, "x"))
    assert "its own interval excludes 0, but not after Holm's correction over the 2 comparisons" in undecided
    assert "hurts" not in undecided.split("Per instruction type")[0]
    # A decided difference on another metric than the benchmark's first (MulDimIF Macro, say) is stated too.
    macro = pd.concat([_differences(-4.2, -12.5, 4.2), _differences(-15.3, -24.5, -7.3).assign(
        benchmark="muldimif", metric="Macro"), _differences(-1.0, -3.0, 1.0).assign(benchmark="muldimif", metric="All")])
    stated = "\n".join(cs.conclusions(macro, types, formats, reasoning, "x"))
    assert "Also decided in the difference table: muldimif Macro (as answered), CoT - I/O: -15.3 points (95% paired " \
           "bootstrap CI -24.5 to -7.3, 24 prompts): hurts" in stated
    assert "Also decided in the difference table: muldimif All" not in stated
    assert cs.verdict(0.01, 0.2, 30, p_holm=0.05) == "not after correction"
    assert cs.verdict(0.01, 0.2, 30) == "helps" and cs.verdict(-0.1, 0.2, 3, min_prompts=5) == "too few prompts"
