"""RTT (issue 12): relevance labels from the verifier through the annotation taxonomy (RTT app. C.3), their
alignment to the tokens of two different tokenizers, minimal modifications that break exactly one constraint, the
discriminator (input format, the cut at the first special token, save/load, training), and RTT-GRPO in the
embedded trainer: token advantages that never mix responses (the authors' reshape bug), beta = 0 equal to GRPO,
and an exact resume after a SIGKILL.

Models are tiny: a ~20k-parameter policy warm-started for a few dozen steps on synthetic pairs.
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import train_killed_at_step

from ifcore import synth
from ifcore.rtt_labels import (GLOBAL, LOCAL_NEGATIVE, LOCAL_POSITIVE, relevant_spans, taxonomy, template,
                               token_labels)
from ifcore.schema import Constraint
from ifcore.text import reasoning_end
from ifcore.verify import verify, verify_all

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ifcore.advantages import token_rtt  # noqa: E402
from ifcore.train import rtt  # noqa: E402
from ifcore.train.grpo import TIMING_KEYS, load_config, train  # noqa: E402
from ifcore.train.model import EMPTY_THINK, train_tokenizer  # noqa: E402
from ifcore.train.sft import WarmStartConfig, warm_start  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread, as each sweep run gets: on a busy 2-core machine two threads mostly wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- the taxonomy: one case per row of the rule table ----------------------------------------------------------------

def _c(target, range_, scope=None):
    return Constraint.from_dict({"scope": scope or [], "target": target, "range": range_})


FIRST_PARAGRAPH = [{"unit": "paragraph", "select": "at", "index": 0}]
# (target, range, scope, class under the paper's labels, class under "scoped")
CASES = [
    # Checklist / Presence and Pattern / Boundary: something must be there
    ({"has": ["river", "stone"]}, {"eq": 2}, None, LOCAL_POSITIVE, LOCAL_POSITIVE),
    ({"starts_with": "The"}, {"eq": 1}, None, LOCAL_POSITIVE, LOCAL_POSITIVE),
    ({"ends_with": "."}, {"eq": 1}, [{"unit": "sentence", "select": "each"}], LOCAL_POSITIVE, LOCAL_POSITIVE),
    ({"wrapped": ["(", ")"]}, {"eq": 1}, None, LOCAL_POSITIVE, LOCAL_POSITIVE),
    # Prohibition: any count whose range admits only 0
    ({"count": "occurrence", "of": "river"}, {"eq": 0}, None, LOCAL_NEGATIVE, LOCAL_NEGATIVE),
    ({"count": "class", "of": "digit"}, {"max": 0}, FIRST_PARAGRAPH, LOCAL_NEGATIVE, LOCAL_NEGATIVE),
    ({"matches": "!"}, {"lt": 1}, None, LOCAL_NEGATIVE, LOCAL_NEGATIVE),
    ({"count": "block", "kind": "list"}, {"eq": 0}, None, LOCAL_NEGATIVE, LOCAL_NEGATIVE),
    # presence ("include X", at least one) is LOCAL positive under both
    ({"count": "occurrence", "any_of": ["a", "b"]}, {"gt": 0}, None, LOCAL_POSITIVE, LOCAL_POSITIVE),
    ({"count": "element", "kind": "heading"}, {"ge": 1}, None, LOCAL_POSITIVE, LOCAL_POSITIVE),
    # numeric thresholds: GLOBAL in the paper's prompt (C.4: "count, frequency, or numeric threshold"); the scoped
    # variant reads "at least k" as presence and "at most k" as the excess that violates it
    ({"count": "occurrence", "of": "river"}, {"min": 2}, None, GLOBAL, LOCAL_POSITIVE),
    ({"count": "class", "of": "uppercase_word"}, {"max": 3}, None, GLOBAL, LOCAL_NEGATIVE),
    ({"count": "occurrence", "of": "river"}, {"min": 0, "max": 2}, None, GLOBAL, LOCAL_NEGATIVE),
    # both bounds: a frequency, judged on the whole
    ({"count": "occurrence", "of": "river"}, {"eq": 2}, None, GLOBAL, GLOBAL),
    ({"count": "class", "of": "digit"}, {"min": 1, "max": 4}, None, GLOBAL, GLOBAL),
    # unit counts, structure and relations: the response (or the scope's segments) as a whole
    ({"count": "word"}, {"max": 50}, None, GLOBAL, GLOBAL),
    ({"count": "word"}, {"min": 5}, FIRST_PARAGRAPH, GLOBAL, GLOBAL),
    ({"count": "sentence"}, {"eq": 3}, None, GLOBAL, GLOBAL),
    ({"sorted": "alphabetical", "unit": "sentence"}, {"eq": 0}, None, GLOBAL, GLOBAL),  # an ordering: as a whole
    ({"chain": "last_first", "unit": "sentence"}, {"min": 1}, None, GLOBAL, GLOBAL),
    ({"valid": "json"}, {"eq": 1}, None, GLOBAL, GLOBAL),
    ({"count": "occurrence", "of": "river"}, {"gt": {"target": {"count": "occurrence", "of": "stone"}}}, None,
     GLOBAL, GLOBAL),
    ({"count": "word"}, {"gt": "previous"}, [{"unit": "paragraph", "select": "each"}], GLOBAL, GLOBAL),
]


@pytest.mark.parametrize("target, range_, scope, paper, scoped", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_taxonomy_rule_table(target, range_, scope, paper, scoped):
    assert taxonomy(_c(target, range_, scope)) == paper  # the paper's labels are the default
    assert taxonomy(_c(target, range_, scope).to_dict(), "paper") == paper  # dicts are read the same
    assert taxonomy(_c(target, range_, scope), labels="scoped") == scoped
    with pytest.raises(ValueError, match="labels must be one of"):
        taxonomy(_c(target, range_, scope), "global")


RESPONSE = EMPTY_THINK + "The river runs slowly. A cold river waits 7 times!\n\nThe stone falls."
ANSWER = RESPONSE[len(EMPTY_THINK):]


def _relevant(target, range_, scope=None, labels="paper") -> tuple[bool, list[str]]:
    c = _c(target, range_, scope)
    v = verify(c, RESPONSE)
    spans = relevant_spans(c, v, (reasoning_end(RESPONSE), len(RESPONSE)), labels)
    return v.satisfied, [RESPONSE[a:b] for a, b in spans]


def test_global_marks_every_answer_token_and_nothing_of_the_think_block():
    whole = RESPONSE[reasoning_end(RESPONSE):]  # everything after </think>: every answer token, its blank lines too
    for range_ in ({"max": 50}, {"max": 3}):  # satisfied and violated alike
        assert _relevant({"count": "word"}, range_)[1] == [whole]
        assert _relevant({"count": "word"}, range_, labels="scoped")[1] == [ANSWER]  # the scope's segment


def test_paper_global_ignores_the_scope_and_scoped_marks_the_segments_it_selects():
    whole = RESPONSE[reasoning_end(RESPONSE):]
    assert _relevant({"count": "word"}, {"max": 3}, FIRST_PARAGRAPH) == (False, [whole])
    assert _relevant({"count": "word"}, {"max": 3}, FIRST_PARAGRAPH, "scoped") == (
        False, ["The river runs slowly. A cold river waits 7 times!"])
    assert _relevant({"count": "word"}, {"min": 1}, [{"unit": "paragraph", "select": "at", "index": -1}],
                     "scoped") == (True, ["The stone falls."])


def test_local_positive_marks_what_satisfies_it_and_nothing_when_violated():
    assert _relevant({"count": "occurrence", "of": "river"}, {"min": 1}) == (True, ["river", "river"])
    assert _relevant({"count": "occurrence", "of": "river"}, {"min": 3}, labels="scoped") == (False, [])
    assert _relevant({"has": ["stone", "cold"]}, {"eq": 2}) == (True, ["cold", "stone"])
    assert _relevant({"has": ["stone", "snow"]}, {"eq": 2}) == (False, [])
    assert _relevant({"starts_with": "The"}, {"eq": 1}, [{"unit": "paragraph", "select": "each"}]) == (
        True, ["The", "The"])


def test_local_negative_marks_what_violates_it_and_nothing_when_satisfied():
    assert _relevant({"count": "class", "of": "digit"}, {"eq": 0}) == (False, ["7"])
    assert _relevant({"matches": "!"}, {"max": 0}) == (False, ["!"])
    assert _relevant({"count": "occurrence", "of": "snow"}, {"eq": 0}) == (True, [])
    # "At most k": the scoped variant marks only the segments that break it (the first paragraph has two rivers,
    # the last none); the paper's labels call it a numeric threshold, GLOBAL: the whole answer.
    each = [{"unit": "paragraph", "select": "each"}]
    assert _relevant({"count": "occurrence", "of": "river"}, {"max": 1}, each, "scoped") == (False, ["river", "river"])
    assert _relevant({"count": "occurrence", "of": "river"}, {"max": 2}, labels="scoped") == (True, [])
    assert _relevant({"count": "occurrence", "of": "river"}, {"max": 1}, each) == (
        False, [RESPONSE[reasoning_end(RESPONSE):]])


def test_a_paper_global_constraint_contributes_exactly_no_token_advantage():
    """RTT section 4.2.2: a constraint whose tokens are all relevant has a constant token reward, so intra-sample
    normalization gives it A = 0 on every token; only the LOCAL constraint moves tokens. Under "scoped" the same
    GLOBAL constraint (the first paragraph only) does move them."""
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+|\s+", RESPONSE)]  # a whitespace tokenizer's pieces
    start = reasoning_end(RESPONSE)
    answer = [t for t, (a, b) in enumerate(offsets) if b > start]
    constraints = [_c({"count": "word"}, {"max": 3}, FIRST_PARAGRAPH), _c({"count": "class", "of": "digit"}, {"eq": 0})]

    def relevance(labels):
        return np.stack([np.asarray(token_labels(relevant_spans(c, verify(c, RESPONSE), (start, len(RESPONSE)),
                                                                labels), offsets), dtype=float)[answer]
                         for c in constraints], axis=1)

    paper, scoped = relevance("paper"), relevance("scoped")
    assert (paper[:, 0] == 1).all() and 0 < paper[:, 1].sum() < len(answer)
    (alone,) = token_rtt([paper[:, :1]], [[False]], [0.3])
    assert (alone == 0.3).all()  # alpha A_res exactly: A_tok = 0
    (both,) = token_rtt([paper], [[False, False]], [0.3], beta=0.5)
    (local,) = token_rtt([paper[:, 1:]], [[False]], [0.3], beta=0.25)  # the mean over two constraints, one of them 0
    np.testing.assert_allclose(both, local, atol=1e-12)
    (moved,) = token_rtt([scoped[:, :1]], [[False]], [0.3])
    assert moved.std() > 0


# ---- alignment to tokens ---------------------------------------------------------------------------------------------

def test_token_labels_by_hand():
    offsets = [(0, 0), (0, 3), (3, 9), (9, 10), (10, 10), (10, 16)]  # a special token, pieces, an empty byte piece
    assert token_labels([(4, 9)], offsets) == [0, 0, 1, 0, 0, 0]
    assert token_labels([(2, 4), (15, 16)], offsets) == [0, 1, 1, 0, 0, 1]  # any character is enough
    assert token_labels([(9, 10), (9, 10)], offsets) == [0, 0, 0, 1, 0, 0]
    assert token_labels([], offsets) == [0] * 6
    assert token_labels([(3, 9)], list(reversed(offsets))) == [0, 0, 0, 1, 0, 0]  # offsets in any order


WORDS = ["river", "stone", "cold", "light", "The", "A", "runs", "slowly", "7", "times", "NOW", "déjà", "vu", "🙂"]


def _bpe():
    texts = [" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(200)]
    return train_tokenizer(texts, vocab_size=300)


def _wordpiece():
    """A second, different tokenizer trained here: WordPiece over whitespace/punctuation pre-tokens (no spaces
    inside tokens, unlike the byte-level BPE)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator([" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(200)],
                            trainers.WordPieceTrainer(vocab_size=120, special_tokens=["[UNK]", "[PAD]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


TOKENIZERS = {"byte-level BPE": _bpe(), "WordPiece": _wordpiece()}


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=20),
       seps=st.lists(st.sampled_from([" ", "  ", "\n", ", ", ".\n\n"]), min_size=20, max_size=20),
       picked=st.sets(st.integers(0, 19)))
def test_alignment_agrees_across_two_tokenizers(words, seps, picked):
    """Whatever the tokenizer, the tokens labelled 1 are exactly those that touch a relevant character: every
    character of a relevant word lies in a labelled token, and no labelled token lies outside the relevant words."""
    text, spans = "", []
    for i, (w, sep) in enumerate(zip(words, seps)):
        if i in picked:
            spans.append((len(text), len(text) + len(w)))
        text += w + sep
    relevant = {k for a, b in spans for k in range(a, b)}
    for name, tok in TOKENIZERS.items():
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
        labels = token_labels(spans, offsets)
        covered = {k for (a, b), y in zip(offsets, labels) if y for k in range(a, b)}
        assert relevant <= covered, name
        for (a, b), y in zip(offsets, labels):
            assert y == int(bool(set(range(a, b)) & relevant)), (name, text[a:b])


@pytest.mark.slow
def test_alignment_with_smollm2s_tokenizer():
    from transformers import AutoTokenizer

    from ifcore.infer.registry import resolve

    try:
        tok = AutoTokenizer.from_pretrained(resolve("smollm2-135m"))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    text = "The river runs slowly. A cold river waits 7 times!"
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
    c = _c({"count": "occurrence", "of": "river"}, {"min": 1})
    labels = token_labels(relevant_spans(c, verify(c, text), (0, len(text))), offsets)
    assert {text[a:b].strip() for (a, b), y in zip(offsets, labels) if y} == {"river"}


# ---- minimal modifications and omission ------------------------------------------------------------------------------

def test_minimal_modifications_break_exactly_one_constraint():
    rng = random.Random(3)
    vocab = synth.vocabulary("tiny")
    words = vocab["nouns"] + vocab["adjs"] + synth.SHOUT
    found = 0
    for _ in range(40):
        inst = synth.instruction(rng)
        cs = [Constraint.from_dict(c) for c in inst["constraints"]]
        for k in range(len(cs)):
            new = rtt.minimal_violation(cs, inst["witness"], k, rng, words)
            if new is None:
                continue
            found += 1
            sat = [v.satisfied for v in verify_all(cs, new)]
            assert not sat[k] and all(s for j, s in enumerate(sat) if j != k), (inst["witness"], new)
    assert found >= 40  # most constraints of most instructions can be broken alone


def test_constraint_omission_drops_its_sentence():
    inst = synth.instruction(random.Random(5), k=2)
    cs = [Constraint.from_dict(c) for c in inst["constraints"]]
    prompt = rtt.without_constraint(inst["prompt"], cs[0])
    assert cs[0].text not in prompt and cs[1].text in prompt and prompt.startswith("Write")


# ---- the discriminator -----------------------------------------------------------------------------------------------

TINY = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, max_positions=512,
            pairs=300, steps=30, batch_size=16, lr=3e-3, train_rows=64, test_rows=8)
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=24, micro_batch=8, eval_prompts=8, eval_samples=1,
                eval_every=2, save_every=2, lr=1e-3, threads=1)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("rtt_assets")
    policy = warm_start(synth.sft_pairs(300, seed=1), WarmStartConfig(**TINY), root / "policy", progress=False)
    paths = {"model": str(policy)}
    for name, n, seed in (("train_data", 64, 0), ("test_data", 8, 9)):
        path = root / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in synth.dataset(n, seed)))
        paths[name] = str(path)
    cfg = rtt.DiscConfig(instructions=30, steps=20, batch_size=8, eval_every=10, max_new_tokens=24)
    paths["disc"] = str(rtt.train_discriminator(cfg, policy, root, progress=False))
    return paths


def test_discriminator_input_is_rtts_prompt_then_the_cut_response(assets):
    disc = rtt.Discriminator.from_pretrained(assets["disc"])
    tok = disc.tokenizer
    response = tok("The river runs.", add_special_tokens=False).input_ids
    tail = [tok.eos_token_id, tok.pad_token_id] + response  # anything after the first special token is not read
    assert disc.cut(response + tail) == response
    prompt = disc.prompt_ids("Use the word river.")
    assert tok.decode(prompt) == ("Identify which tokens in the response are relevant to the criteria.\n\n"
                                  "Criteria: Use the word river.\n\nResponse:\n\n")
    p = disc.relevance(["Use the word river."] * 2, [response, response + tail])
    assert len(p[0]) == len(response) and np.array_equal(p[0], p[1])
    # The batched pass with each criteria prompt encoded once is the plain pass over prompt + response, one by one.
    rng = random.Random(0)
    words = ["The", "river", "runs", "7", "!", "NOW", "\n\n", "stone"]
    responses = [tok(" ".join(rng.choices(words, k=rng.randint(0, 30))), add_special_tokens=False).input_ids
                 + [tok.eos_token_id] for _ in range(12)]
    criteria = [rng.choice(["Use the word river.", "No digits.", "Each sentence has at most 9 words."])
                for _ in responses]
    batched = disc.relevance(criteria, responses, batch_size=5)
    for c, r, p in zip(criteria, responses, batched):
        prompt = disc.prompt_ids(c)
        plain = disc.probabilities([(prompt + r[:-1], len(prompt))])[0]
        assert len(p) == len(r) - 1
        np.testing.assert_allclose(p, plain, atol=1e-5)


def test_discriminator_saves_and_loads_with_its_head(assets, tmp_path):
    disc = rtt.Discriminator.from_pretrained(assets["disc"])
    ids = disc.tokenizer("The river runs.", add_special_tokens=False).input_ids
    before = disc.relevance(["Use the word river."], [ids])[0]
    with torch.no_grad():
        disc.score.weight.mul_(-1)  # a head that is not the saved one
    disc.save_pretrained(tmp_path / "d")
    again = rtt.Discriminator.from_pretrained(tmp_path / "d").relevance(["Use the word river."], [ids])[0]
    np.testing.assert_allclose(again, 1 - before, atol=1e-5)  # sigmoid(-s) = 1 - sigmoid(s): the head came back
    assert disc.score.bias is None and disc.score.out_features == 1
    with pytest.raises(FileNotFoundError, match="not a saved RTT discriminator"):
        rtt.Discriminator.from_pretrained(assets["model"])


def test_the_build_saves_its_pairs_log_and_evaluation(assets):
    report = rtt.load_report(assets["disc"])
    pairs = report["pairs"]
    assert {p["source"] for p in pairs} == {"witness", "modified", "policy", "omission"}
    assert {p["split"] for p in pairs} == set(rtt.SPLITS)
    held_instructions = {p["instruction"] for p in pairs if p["split"] == "instruction"}
    assert held_instructions and not held_instructions & {p["instruction"] for p in pairs if p["split"] == "train"}
    for p in pairs:
        if p["source"] in ("witness", "modified"):
            assert p["response"].startswith(EMPTY_THINK)  # as the policy writes it in think mode
        start = reasoning_end(p["response"])  # the think block is never relevant
        assert all(start <= a < b <= len(p["response"]) for a, b in p["spans"])
        if p["class"] == GLOBAL:  # the paper's labels by default: all_relevant
            assert p["spans"] == [[start, len(p["response"])]] or start == len(p["response"])
    assert report["config"]["labels"] == "paper"
    assert report["log"][-1]["step"] == 20 and {"eval_auroc", "eval_auroc_within"} <= set(report["log"][-1])
    table, within = report["eval"], report["within"]
    assert set(table["method"]) == set(rtt.METHODS) and set(table["split"]) == {"instruction", "template"}
    uniform = table[(table["method"] == "uniform") & (table["group"] == "all")]
    assert (uniform["auroc_pooled"] == 0.5).all()  # every token p = 1: all ties
    # Within-response AUROC counts only responses with both classes: GLOBAL pairs (all relevant) never do, and a
    # score constant per response (the class prior, uniform) is exactly 0.5 inside each of them.
    assert len(within) and GLOBAL not in set(within["class"]) and (within["relevant"] < within["tokens"]).all()
    assert (within["class prior"] == 0.5).all() and (within["uniform"] == 0.5).all()
    prior = table[table["method"] == "class prior"]
    assert (prior["auroc_within"].dropna() == 0.5).all()
    for (split, group), rows in table[table["by"] == "all"].groupby(["split", "group"]):
        assert rows["mixed"].nunique() == 1  # every method is scored on the same responses
        assert rows["mixed"].iloc[0] == (within["split"] == split).sum()


def test_template_split_holds_out_no_template_seen_in_training(assets):
    pairs = rtt.load_report(assets["disc"])["pairs"]
    assert all(p["template"] == template(p["criteria"]) for p in pairs)
    trained = {p["template"] for p in pairs if p["split"] == "train"}
    held = {p["template"] for p in pairs if p["split"] == "template"}
    assert held and not held & trained
    assert template('At most 2 occurrences of the word "bright".') == template('At most 5 occurrences of the word '
                                                                               '"warm".')
    assert template("The third sentence has 4 words.") == template("The first sentence has 12 words.")


def test_within_response_auroc_by_hand():
    scores = [[0.9, 0.1, 0.2], [0.05, 0.01, 0.02, 0.06], [0.5, 0.4], [0.7]]
    labels = [[1, 0, 0], [1, 0, 0, 0], [1, 1], [0]]
    # responses 3 and 4 have one class only: left out; response 1 ranks its token first (1), response 2 above
    # two of its three others (2/3)
    mean, n = rtt.within_auroc(scores, labels)
    assert n == 2 and mean == pytest.approx((1 + 2 / 3) / 2)
    assert rtt.auroc(np.concatenate(scores), np.concatenate(labels)) != pytest.approx(mean)  # pooled is another number
    assert rtt.within_auroc([[0.2, 0.3]], [[1, 1]]) == (pytest.approx(np.nan, nan_ok=True), 0)


@given(st.lists(st.tuples(st.floats(0, 1), st.lists(st.booleans(), min_size=1, max_size=12)), min_size=1,
                max_size=8))
def test_a_score_constant_per_response_has_within_auroc_exactly_one_half(rows):
    """The class prior gives every token of a response one value: it cannot order tokens inside a response."""
    labels = [y for _, y in rows]
    mean, n = rtt.within_auroc([np.full(len(y), c) for c, y in rows], labels)
    assert n == sum(0 < sum(y) < len(y) for y in labels)
    assert mean == 0.5 if n else np.isnan(mean)


def test_baselines_by_hand():
    pair = {"criteria": 'Use the word "cold" and do not mention rivers.',
            "response": EMPTY_THINK + "The cold river, the COLD stone and coldness."}
    text = pair["response"]
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]+|\s+", text)]

    def marked(x):
        return [text[a:b] for (a, b), y in zip(offsets, x) if y]

    assert marked(rtt.quoted_literal(pair, offsets)) == ["cold", "COLD"]  # whole words, any case
    assert marked(rtt.lexical_overlap(pair, offsets)) == ["The", "cold", "the", "COLD", "and"]
    assert marked(rtt.content_overlap(pair, offsets)) == ["cold", "COLD"]  # no function words
    train = [{"class": "local_positive", "selector": "Global"}, {"class": "local_positive", "selector": "Global"},
             {"class": GLOBAL, "selector": "Global"}]
    enc = [{"labels": [1, 0, 0, 0], "answer": [1, 1, 1, 1]}, {"labels": [0, 1], "answer": [0, 1]},
           {"labels": [1, 1], "answer": [1, 1]}]
    prior = rtt.class_prior(train, enc)
    assert prior[("local_positive", "Global")] == pytest.approx(2 / 5) and prior[(GLOBAL, "Global")] == 1.0
    assert prior[None] == pytest.approx(4 / 7)


def test_the_token_lookup_by_hand():
    """The parameter-free baseline: the training split's mean label per (class, template, token), backing off to
    (class, token), then to the chance value; a template with other literals is the same family."""
    train = [{"class": "local_positive", "criteria": 'Use the word "cold".'},
             {"class": "local_positive", "criteria": 'Use the word "warm".'},
             {"class": "local_positive", "criteria": "Start with The."}]
    enc = [{"ids": [9, 9, 5, 6, 7], "n_prompt": 2, "labels": [1, 0, 0], "answer": [1, 1, 1]},
           {"ids": [9, 5, 6], "n_prompt": 1, "labels": [0, 1], "answer": [1, 1]},
           {"ids": [9, 5, 8], "n_prompt": 1, "labels": [1, 1], "answer": [0, 1]}]  # 5 is in the think block
    table = rtt.token_lookup(train, enc)
    family = ("local_positive", template('Use the word "x".'))
    assert table[family + (5,)] == 0.5 and table[family + (6,)] == 0.5 and table[family + (7,)] == 0
    assert table[("local_positive", 5)] == 0.5 and table[("local_positive", 8)] == 1.0
    held = {"class": "local_positive", "criteria": 'Use the word "snow".'}
    assert rtt.lookup_scores(table, held, {"ids": [1, 5, 7, 8, 4], "n_prompt": 1}, 0.3).tolist() == [0.5, 0, 1, 0.3]
    assert rtt.CHANCE in rtt.METHODS and "token lookup" in rtt.METHODS


def test_fit_lowers_the_held_out_loss(assets):
    report = rtt.load_report(assets["disc"])
    disc = rtt.Discriminator.from_backbone(assets["model"], seed=0)
    enc = [rtt.encode(disc, p) for p in report["pairs"]]
    train_enc = [e for p, e in zip(report["pairs"], enc) if p["split"] == "train"]
    held = [e for p, e in zip(report["pairs"], enc) if p["split"] != "train"]
    log = rtt.fit(disc, train_enc, steps=30, batch_size=16, lr=3e-3, held_out=held, eval_every=1, progress=False)
    assert log[-1]["eval_loss"] < log[0]["eval_loss"] - 0.05


def test_the_discriminator_in_bf16_fits_as_fp32_within_tolerance(assets):
    """precision bf16 (autocast on the CPU, fp32 weights and AdamW state): the same 30 steps give held-out losses
    within 0.01 of fp32's and token probabilities within 0.015 on average, 0.1 at most (measured 2026-12-05 on
    this AVX512-BF16 machine: losses 0.7215, 0.6713, 0.6131 against 0.7212, 0.6700, 0.6105; probabilities 0.0050
    apart on average over 6,947 held-out tokens, 0.035 at the 99th percentile, 0.055 at most)."""
    report = rtt.load_report(assets["disc"])
    logs, probs = {}, {}
    for precision in ("fp32", "bf16"):
        disc = rtt.Discriminator.from_backbone(assets["model"], seed=0)
        disc.precision = precision
        enc = [rtt.encode(disc, p) for p in report["pairs"]]
        train_enc = [e for p, e in zip(report["pairs"], enc) if p["split"] == "train"]
        held = [e for p, e in zip(report["pairs"], enc) if p["split"] != "train"]
        logs[precision] = rtt.fit(disc, train_enc, steps=30, batch_size=16, lr=3e-3, held_out=held, eval_every=10,
                                  progress=False)
        probs[precision] = np.concatenate(disc.probabilities([(e["ids"], e["n_prompt"]) for e in held]))
    evals = {p: [r["eval_loss"] for r in log if "eval_loss" in r] for p, log in logs.items()}
    assert len(evals["fp32"]) == len(evals["bf16"]) >= 3
    diff = np.abs(probs["fp32"] - probs["bf16"])
    assert np.max(np.abs(np.subtract(evals["fp32"], evals["bf16"]))) < 0.01
    assert diff.mean() < 0.015 and diff.max() < 0.1
    assert rtt.discriminator_key(rtt.DiscConfig(precision="bf16"), assets["model"]) != \
        rtt.discriminator_key(rtt.DiscConfig(), assets["model"])


# ---- RTT-GRPO's token advantages -------------------------------------------------------------------------------------

def _group(disc, n=3, seed=0):
    rng = random.Random(seed)
    ids = [disc.tokenizer(rng.choice(["", EMPTY_THINK]) + " ".join(rng.choices(["river", "stone", "cold", "7", "!"],
                                                                               k=rng.randint(3, 9))),
                          add_special_tokens=False).input_ids + [disc.tokenizer.eos_token_id] for _ in range(n)]
    width = max(map(len, ids)) + 2
    response = torch.full((n, width), disc.tokenizer.pad_token_id)
    mask = torch.zeros((n, width), dtype=torch.bool)
    for i, r in enumerate(ids):
        response[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = True
    criteria = [["Do not use digits.", "Use the word river."]] * n
    satisfied = [[rng.random() < 0.5, rng.random() < 0.5] for _ in range(n)]
    return response, mask, criteria, satisfied


def authors_token_advantages(relevance, satisfied):
    """The authors' normalization: scores [G, C, T] reshaped (not permuted) to [C, G, T], normalized per (c, g)
    row over T, averaged over the first axis. Only for equal lengths; kept to show the test below can fail."""
    score = 2.0 * (np.asarray(satisfied, dtype=float) - 0.5)  # [G, C]
    r = np.stack(relevance).transpose(0, 2, 1) * score[:, :, None]  # [G, C, T]
    g, c, t = r.shape
    x = r.reshape(c, g, t)  # the bug: a view with the axes' sizes swapped, not the axes
    z = (x - x.mean(-1, keepdims=True)) / np.where(x.std(-1, keepdims=True) > 0, x.std(-1, keepdims=True), 1)
    return list(z.mean(0))


def test_each_responses_token_advantage_depends_only_on_its_own_rows(assets):
    """The reshape-bug regression: change another response of the group (its tokens and verdicts) and a response's
    intra-sample token advantages stay exactly what they were; the authors' reshape fails this."""
    disc = rtt.Discriminator.from_pretrained(assets["disc"])
    response, mask, criteria, satisfied = _group(disc)
    adv = np.array([[0.5, -1.0, 0.5]])
    first, _ = rtt.token_advantages("rtt", response, mask, criteria, satisfied, adv, 1.0, 0.5, disc.tokenizer, disc)
    other, omask, _, osat = _group(disc, seed=1)
    response2, mask2 = response.clone(), mask.clone()
    width = min(response.shape[1], other.shape[1])
    response2[2, :width], mask2[2, :width] = other[2, :width], omask[2, :width]
    mask2[2, width:] = False
    satisfied2 = satisfied[:2] + [[not s for s in satisfied[2]]]
    second, _ = rtt.token_advantages("rtt", response2, mask2, criteria, satisfied2, adv, 1.0, 0.5, disc.tokenizer, disc)
    assert torch.equal(first[:2], second[:2])
    assert not torch.equal(first[2], second[2])
    # The authors' reshape, on equal-length rows: response 0's or 1's advantages move when only response 2 changed.
    rel = [np.random.default_rng(i).random((6, 2)) for i in range(3)]
    rel2 = rel[:2] + [np.random.default_rng(9).random((6, 2))]
    sat = [[True, False], [False, True], [True, True]]
    theirs = [authors_token_advantages(r, sat) for r in (rel, rel2)]
    assert not all(np.allclose(a, b) for a, b in zip(theirs[0][:2], theirs[1][:2]))
    ours = [token_rtt(r, sat, [0.0] * 3, alpha=0.0, beta=1.0) for r in (rel, rel2)]
    for a, b in zip(ours[0][:2], ours[1][:2]):
        np.testing.assert_array_equal(a, b)


def test_token_advantage_modes(assets):
    disc = rtt.Discriminator.from_pretrained(assets["disc"])
    response, mask, criteria, satisfied = _group(disc, n=4)
    adv = np.array([[1.0, -1.0], [0.5, -0.5]])  # two groups of two
    broadcast = torch.tensor(adv.reshape(-1, 1), dtype=torch.float32).expand(mask.shape) * mask
    answer = rtt.answer_tokens(disc.tokenizer, response, mask)
    for mode in ("rtt", "rtt_inter", "uniform", "random"):
        out, seconds = rtt.token_advantages(mode, response, mask, criteria, satisfied, adv, 1.0, 0.5, disc.tokenizer,
                                            disc, np.random.default_rng(0))
        assert out.shape == mask.shape and (out[~mask] == 0).all()
        assert (seconds > 0) == mode.startswith("rtt")
        # The think block and the end of turn are format, not answer: the response advantage alone.
        assert torch.equal(out[mask & ~answer], broadcast[mask & ~answer])
        if mode == "uniform":  # p = 1 everywhere: A_tok = 0, the response advantage on every token
            assert torch.equal(out, broadcast)
        else:  # token-level credit: the tokens of an answer do not all get the same advantage
            assert any(out[i][answer[i]].std() > 0 for i in range(len(out)))
    zero_beta, _ = rtt.token_advantages("rtt", response, mask, criteria, satisfied, adv, 1.0, 0.0, disc.tokenizer,
                                        disc)
    assert torch.equal(zero_beta, broadcast)
    with pytest.raises(ValueError, match="mode must be one of"):
        rtt.token_advantages("broadcast", response, mask, criteria, satisfied, adv, 1.0, 0.5, disc.tokenizer, disc)


def test_the_oracle_relevance_is_the_verifiers_evidence_through_the_shared_function(assets):
    """rtt_relevance "verifier": the embedded trainer's token advantages are token_rtt_groups over
    ifcore.rtt_labels.verifier_relevance (the function the OpenRLHF plug-in calls): a GLOBAL constraint gets A_tok
    exactly 0 (its labels are constant), a LOCAL one moves exactly the tokens of its evidence; no discriminator."""
    from ifcore.advantages import token_rtt_groups
    from ifcore.rewards import score_response
    from ifcore.rtt_labels import verifier_relevance

    tok = rtt.Discriminator.from_pretrained(assets["disc"]).tokenizer
    constraints = [_c({"count": "occurrence", "of": "river"}, {"min": 1}),  # LOCAL positive: "include river"
                   _c({"count": "word"}, {"max": 50})]  # GLOBAL: every answer token, whatever the verdict
    texts = [EMPTY_THINK + "The river runs by the stone.", EMPTY_THINK + "The stone is cold.",
             EMPTY_THINK + "A river, a river.", EMPTY_THINK + "Cold stone."]
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    width = max(map(len, ids))
    response = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in ids])
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in ids])
    scores = [score_response(t, constraints, kind="cla", think="auto") for t in texts]
    satisfied = [s["satisfied"] for s in scores]
    adv = np.array([[1.0, -1.0], [0.5, -0.5]])
    verified = [(constraints, s["verdicts"], s["offset"], t) for s, t in zip(scores, texts)]
    out, _ = rtt.token_advantages("rtt", response, mask, [["c1", "c2"]] * 4, satisfied, adv, 1.0, 0.5, tok,
                                  verified=verified)
    shared = [verifier_relevance(tok, r, constraints, s["verdicts"], s["offset"], text=t)
              for r, s, t in zip(ids, scores, texts)]
    want = token_rtt_groups([np.asarray(p) for _, p in shared], satisfied, adv, alpha=1.0, beta=0.5)
    answer = rtt.answer_tokens(tok, response, mask)
    for i, ((scored, p), w) in enumerate(zip(shared, want)):
        assert scored == torch.nonzero(answer[i]).flatten().tolist()  # the same answer tokens as the discriminator's
        np.testing.assert_allclose(out[i, scored].numpy(), w, rtol=1e-6)
        assert np.all(np.asarray(p)[:, 1] == 1)  # GLOBAL: all relevant, so its z-scores are 0
        offsets = tok(texts[i], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = [(m.start(), m.end()) for m in re.finditer("river", texts[i])]
        river = [k for k, t in enumerate(scored) if any(a < offsets[t][1] and offsets[t][0] < b for a, b in spans)]
        assert river or not satisfied[i][0]
        assert [k for k in range(len(scored)) if p[k][0] == 1] == (river if satisfied[i][0] else [])
    # A response without its constraint's evidence has one constant column: A_tok exactly 0, the advantage alone.
    assert torch.equal(out[1, mask[1]], torch.full((int(mask[1].sum()),), -1.0))
    # The verdicts must be of the decoded response: another text scores no token (the advantage alone).
    other = verified[:3] + [(constraints, scores[3]["verdicts"], scores[3]["offset"], "something else")]
    moved, _ = rtt.token_advantages("rtt", response, mask, [["c1", "c2"]] * 4, satisfied, adv, 1.0, 0.5, tok,
                                    verified=other)
    assert torch.equal(moved[3, mask[3]], torch.full((int(mask[3].sum()),), -0.5)) and torch.equal(moved[:3], out[:3])


def test_rtt_grpo_with_the_oracle_relevance_trains_without_a_discriminator(assets, tmp_path):
    rows = _train(assets, tmp_path / "oracle", token_advantages="rtt", rtt_relevance="verifier", rtt_std_floor=0.05)
    train_rows = [r for r in rows if r["type"] == "train"]
    assert len(train_rows) == 3 and all(r["token_adv_std"] is not None for r in train_rows)
    with pytest.raises(ValueError, match="rtt_relevance: must be discriminator or verifier"):
        load_config(None, token_advantages="rtt", rtt_relevance="labels")
    with pytest.raises(ValueError, match=r"rtt_std_floor: must be in \[0, 1\)"):
        load_config(None, rtt_std_floor=1.5)


def test_answer_tokens_are_after_the_think_block_and_before_the_end_of_turn(assets):
    tok = rtt.Discriminator.from_pretrained(assets["disc"]).tokenizer
    ids = tok(EMPTY_THINK + "The river runs.", add_special_tokens=False).input_ids
    n_think = ids.index(tok.convert_tokens_to_ids("</think>")) + 1  # the answer starts right after </think>
    short = tok("A river.", add_special_tokens=False).input_ids + [tok.eos_token_id]
    width = max(len(ids), len(short)) + 2
    response = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in (ids + [tok.eos_token_id], short)])
    mask = torch.zeros_like(response, dtype=torch.bool)
    mask[0, :len(ids) + 1] = True
    mask[1, :len(short)] = True
    answer = rtt.answer_tokens(tok, response, mask)
    assert answer[0].tolist() == [False] * n_think + [True] * (len(ids) - n_think) + [False] * (width - len(ids))
    assert tok.decode(response[0][answer[0]]).strip() == "The river runs."
    assert tok.decode(response[1][answer[1]]) == "A river."  # no think block: the whole response before the end


# ---- RTT-GRPO in the trainer -----------------------------------------------------------------------------------------

def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train(assets, out, **over) -> list[dict]:
    data = {k: assets[k] for k in ("model", "train_data", "test_data")}
    cfg = load_config(None, **{**TINY_RUN, "steps": 3, **over}, output_dir=str(out), **data)
    return _rows(train(cfg, progress=False))


def test_rtt_grpo_with_beta_zero_is_grpo(assets, tmp_path):
    grpo = _train(assets, tmp_path / "grpo")
    zero = _train(assets, tmp_path / "rtt0", token_advantages="rtt", rtt_beta=0.0, rtt_discriminator=assets["disc"])
    assert len(grpo) == len(zero)
    for a, b in zip(grpo, zero):
        extra = {k: b.pop(k) for k in ("rtt_seconds", "token_adv_std") if k in b}
        assert {k: v for k, v in a.items() if k not in TIMING_KEYS} == {k: v for k, v in b.items()
                                                                         if k not in TIMING_KEYS}
        if b["type"] == "train":
            assert extra["token_adv_std"] < 1e-6 and extra["rtt_seconds"] > 0
    # and beta > 0 is not GRPO: the token advantages move the policy differently
    half = _train(assets, tmp_path / "rtt", token_advantages="rtt", rtt_discriminator=assets["disc"])
    assert [r.get("loss") for r in half] != [r.get("loss") for r in grpo]
    assert all(r["token_adv_std"] > 0 for r in half if r["type"] == "train")


def test_rtt_settings_are_checked(assets, tmp_path):
    with pytest.raises(ValueError, match="rtt_discriminator: token_advantages rtt needs a discriminator"):
        load_config(None, token_advantages="rtt")
    with pytest.raises(ValueError, match="token_advantages: must be one of broadcast, rtt, rtt_inter"):
        load_config(None, token_advantages="tokens")
    with pytest.raises(ValueError, match="rtt_beta: must be a finite number >= 0"):
        load_config(None, rtt_beta=-1)
    # A discriminator of another tokenizer cannot read the policy's token ids.
    other = rtt.Discriminator(rtt.Discriminator.from_pretrained(assets["disc"]).backbone, _bpe())
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="its tokenizer differs from the policy's"):
        _train(assets, tmp_path / "run", token_advantages="rtt", rtt_discriminator=str(tmp_path / "other"), steps=1)


@pytest.mark.slow
def test_killed_rtt_run_resumes_exactly(assets, tmp_path):
    steps = 6
    over = {"token_advantages": "rtt", "rtt_discriminator": assets["disc"]}
    whole = _train(assets, tmp_path / "whole", steps=steps, **over)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**TINY_RUN, **over, **{k: assets[k] for k in ("model", "train_data", "test_data")}}))
    cmd = [sys.executable, "-m", "ifcore", "train", "--steps", str(steps), "--output-dir", str(tmp_path / "killed"),
           "--config", str(config)]
    metrics = tmp_path / "killed" / "metrics.jsonl"
    env = train_killed_at_step(cmd, metrics, step=3)  # past the step-2 checkpoint
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]  # noqa: E731
    assert strip(_rows(metrics)) == strip(whole)


# ---- RTT's LLM annotator: its prompt and its JSON answers ----------------------------------------------------------

ANNOTATED = "The river runs cold. Snow falls. The river sleeps."


@pytest.mark.parametrize("answer, kind, spans, unmatched", [
    ('{"type": "all_relevant"}', "all_relevant", [(0, len(ANNOTATED))], 0),
    ('{"type": "all_irrelevant"}', "all_irrelevant", [], 0),
    # every occurrence of an exact segment; a segment the response lacks marks nothing and is counted
    ('{"type": "partial_relevant", "relevant_texts": ["The river", "Snow falls.", "rain"]}', "partial_relevant",
     [(0, 9), (21, 32), (33, 42)], 1),
    # overlapping segments merge; fences and chatter around the object are tolerated
    ('```json\n{"type": "partial_relevant", "relevant_texts": ["river runs", "runs cold."]}\n```', "partial_relevant",
     [(4, 20)], 0),
    ('Sure! {"type": "all_irrelevant"} Hope this helps.', "all_irrelevant", [], 0),
    # not one of the three forms: no label
    ('{"type": "partial_relevant", "relevant_texts": "river"}', None, [], 0),
    ('{"type": "relevant"}', None, [], 0), ('{"type": "all_relevant"', None, [], 0), ("[1, 2]", None, [], 0),
    ("GLOBAL", None, [], 0), ("", None, [], 0),
])
def test_annotator_answers_become_character_spans(answer, kind, spans, unmatched):
    from ifcore.rtt_labels import parse_annotation

    assert parse_annotation(answer, ANNOTATED) == {"type": kind, "spans": spans, "unmatched": unmatched}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=60))
def test_annotator_answers_never_raise_and_stay_inside_the_response(answer, response):
    from ifcore.rtt_labels import parse_annotation

    out = parse_annotation(answer, response)
    assert out["type"] in (None, "all_relevant", "all_irrelevant", "partial_relevant")
    assert all(0 <= a < b <= len(response) for a, b in out["spans"])


def test_the_annotator_relabels_the_training_pairs_with_the_greedy_prompt(monkeypatch):
    """RTT Table 4's Greedy discriminator: its training pairs labelled by the greedy prompt's annotator (the answer
    after the think block), an unparseable answer dropping its pair; held-out pairs keep the verifier's labels."""
    from ifcore.rtt_labels import annotation_prompt

    assert "MOST RELEVANT and SPECIFIC" in annotation_prompt("No digits.", "A river.", "greedy")
    assert "Step 1: Scope Classification" in annotation_prompt("No digits.", "A river.")
    with pytest.raises(ValueError, match="prompt must be one of"):
        annotation_prompt("No digits.", "A river.", "lazy")
    pairs = [{"split": "train", "response": EMPTY_THINK + "A river.", "criteria": "Use river.", "spans": []},
             {"split": "train", "response": "B.", "criteria": "No digits.", "spans": []},
             {"split": "template", "response": "C 7.", "criteria": "No digits.", "spans": [[2, 3]]}]
    seen = {}

    def fake(model, criteria, responses, params=None, progress=False, prompt="full"):
        seen.update(model=model, criteria=criteria, responses=responses, prompt=prompt)
        return [{"type": "partial_relevant", "spans": [(2, 7)], "unmatched": 0},
                {"type": None, "spans": [], "unmatched": 0}]

    monkeypatch.setattr(rtt, "llm_labels", fake)
    out = rtt.annotate([dict(p) for p in pairs], "some-model", "greedy", progress=False)
    start = reasoning_end(pairs[0]["response"])
    assert seen == {"model": "some-model", "criteria": ["Use river.", "No digits."],
                    "responses": [pairs[0]["response"][start:], "B."], "prompt": "greedy"}
    assert out == [{**pairs[0], "spans": [[start + 2, start + 7]], "annotation": "partial_relevant"}, pairs[2]]


def test_llm_labels_sends_rtts_prompt_and_reads_each_answer(tmp_path, monkeypatch):
    # An answering backend that reads the pair back out of RTT's prompt: the one thing a fake may stand in for is
    # the LLM's judgment; the prompt, the generation layer, its cache and the parsing are the real ones.
    from ifcore.infer.generate import GenParams
    from ifcore.rtt_labels import ANNOTATION_PROMPT, annotation_prompt

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path))
    assert annotation_prompt("Use no commas.", "a, b").startswith(ANNOTATION_PROMPT.split("{criteria}")[0])
    assert "Criteria: Use no commas.\n\nResponse: a, b\n\n" in annotation_prompt("Use no commas.", "a, b")
    assert '{"type": "all_relevant"}' in annotation_prompt("x", "y")  # the format braces survive .format

    class Annotator:
        model_id, batch_size, prompts = "fake-annotator", 4, []

        def complete(self, inputs, params, seeds):
            self.prompts += inputs
            out = []
            for prompt in inputs:
                criteria = prompt.split("Criteria: ", 1)[1].split("\n\nResponse: ", 1)[0]
                out.append(('{"type": "all_relevant"}' if "words" in criteria
                            else '{"type": "partial_relevant", "relevant_texts": ["' + criteria.split('"')[1] + '"]}'
                            if '"' in criteria else "I cannot tell.", 7))
            return out

    backend = Annotator()
    criteria = ['Mention "river".', "Use at most 20 words.", "Be kind."]
    got = rtt.llm_labels(backend, criteria, [ANNOTATED] * 3, GenParams(max_new_tokens=64))
    assert [g["type"] for g in got] == ["partial_relevant", "all_relevant", None]
    assert got[0]["spans"] == [(4, 9), (37, 42)] and got[1]["spans"] == [(0, len(ANNOTATED))]
    assert sorted(backend.prompts) == sorted(annotation_prompt(c, ANNOTATED) for c in criteria)  # shortest first
    # A second call is served from the completion cache: the annotator is not asked again.
    assert rtt.llm_labels(backend, criteria, [ANNOTATED] * 3, GenParams(max_new_tokens=64)) == got
    assert len(backend.prompts) == 3
    with pytest.raises(ValueError, match="2 criteria for 3 responses"):
        rtt.llm_labels(backend, criteria[:2], [ANNOTATED] * 3)


def test_llm_labels_with_a_real_model_that_answers_noise(tmp_path, monkeypatch):
    # A 7k-parameter random chat model through the in-process backend: whatever it writes, every pair comes back
    # with a type (None for noise) and spans inside its response.
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path))
    from ifcore.infer.generate import GenParams

    got = rtt.llm_labels(str(REPO / "tests/data/tiny_chat_llama"), ["Mention the river.", "Be brief."],
                         [ANNOTATED, "Short."], GenParams(max_new_tokens=12))
    assert len(got) == 2 and all(g["type"] is None or g["spans"] is not None for g in got)
    assert all(0 <= a < b <= len(r) for g, r in zip(got, [ANNOTATED, "Short."]) for a, b in g["spans"])
