"""Graded IFEval / IFBench (issue 4): the schema mappings of ifcore.bench.mapping against the official verdicts.

The official verdicts: for IFEval those of ifcore.bench.ifeval's checkers in strict mode (they reproduce the
official figures on the GPT-4 responses); for IFBench the official strict verdict file. Random texts check that
the exact mappings restate the official rule; hand cases pin every difference docs/graded_ifeval.md names.
"""
import collections
import inspect
import json
import random
import re
from pathlib import Path

import pytest

from ifcore import Constraint, verify_all
from ifcore.bench import ifbench, ifeval, mapping
from ifcore.cli import main
from ifcore.integrations import load_constraints

DATA = Path(__file__).parent / "data"
DOC = Path(__file__).parent.parent / "docs" / "graded_ifeval.md"
REGISTRY = {**ifeval.IFEVAL, **ifbench.IFBENCH}


def _holds(constraints, text):
    return all(v.satisfied for v in verify_all(constraints, text))


def _official(instruction_id, kwargs, text):
    return ifeval.build_checks(REGISTRY, [instruction_id], [kwargs])[0](text)


def _ours(instruction_id, kwargs, text):
    return _holds(mapping.constraints_for([instruction_id], [kwargs], approximate=True)[0], text)


@pytest.fixture(scope="module")
def shared():
    """(benchmark, instruction id, kwargs, response, official strict verdict) for every shared instance."""
    out = []
    rows = ifeval.read_jsonl(ifeval.PROMPTS, ("prompt", "instruction_id_list", "kwargs"))
    gpt4 = ifeval.read_jsonl(DATA / "ifeval" / "input_response_data_gpt4_20231107_145030.jsonl", ("prompt", "response"))
    # The letter of keywords:letter_frequency read literally, as the current official code does.
    responses = {r["prompt"]: r["response"] for r in gpt4}
    strict = ifeval.evaluate(rows, responses, ifeval.IFEVAL, letter_seed=None)["strict"]
    for row, record in zip(rows, strict):
        for instruction_id, kwargs, ok in zip(row["instruction_id_list"], row["kwargs"],
                                              record["follow_instruction_list"]):
            out.append(("ifeval", instruction_id, kwargs, record["response"], ok))
    by_prompt = {r["prompt"].strip(): r for r in ifeval.read_jsonl(ifbench.PROMPTS, ("prompt",))}
    for line in (DATA / "ifbench" / "eval_results_strict.jsonl").open(encoding="utf-8"):
        record = json.loads(line)
        # One sample prompt is two lines of an old IFBench_test.jsonl run together; its type takes no kwargs.
        row = by_prompt.get(record["prompt"].strip(), {"instruction_id_list": record["instruction_id_list"],
                                                       "kwargs": [{}] * len(record["instruction_id_list"])})
        assert row["instruction_id_list"] == record["instruction_id_list"]
        for instruction_id, kwargs, ok in zip(record["instruction_id_list"], row["kwargs"],
                                              record["follow_instruction_list"]):
            out.append(("ifbench", instruction_id, kwargs, record["response"], ok))
    assert len(out) == 834 + 335
    return out


@pytest.fixture(scope="module")
def agreement(shared):
    """instruction id -> [shared instances, instances where the schema verdict is the official one, instances the
    official checker says are followed]."""
    table = collections.defaultdict(lambda: [0, 0, 0])
    for _, instruction_id, kwargs, response, ok in shared:
        entry = table[instruction_id]
        entry[0] += 1
        entry[2] += ok
        constraints = mapping.constraints_for([instruction_id], [kwargs], approximate=True)[0]
        if constraints is not None:
            entry[1] += _holds(constraints, response) == ok
    return table


# ---- what is mapped ----------------------------------------------------------------------------------------

APPROXIMATE_AGREEMENT = {  # instances, agreeing (docs/graded_ifeval.md gives the causes)
    "length_constraints:number_sentences": (52, 51),
    "detectable_format:number_highlighted_sections": (48, 48),
    "detectable_format:json_format": (17, 17),
    "combination:two_responses": (24, 24),
    "change_case:english_capital": (25, 22),
    "change_case:english_lowercase": (39, 37),
    "ratio:sentence_type": (6, 5),
    "count:conjunctions": (7, 7),
    "format:options": (6, 6),
    "format:no_whitespace": (4, 4),
    "words:last_first": (5, 2),
    "format:title_case": (4, 4),
    "repeat:repeat_change": (3, 3),
}


def test_mapped_counts_are_pinned():
    for registry, mapped, exact, approximate in ((ifeval.IFEVAL, 18, 17, 6), (ifbench.IFBENCH, 33, 23, 7)):
        assert sum(i in mapping.MAPPING for i in registry) == mapped
        assert sum(i in mapping.MAPPING and i not in mapping.SEGMENTATION for i in registry) == exact
        assert sum(i in mapping.APPROXIMATE for i in registry) == approximate
    assert len(ifeval.IFEVAL) + len(ifbench.IFBENCH) == 83
    assert set(mapping.MAPPING) | set(mapping.APPROXIMATE) <= set(REGISTRY)
    assert not set(mapping.MAPPING) & set(mapping.APPROXIMATE)
    assert mapping.SEGMENTATION <= set(mapping.MAPPING)
    assert set(APPROXIMATE_AGREEMENT) == set(mapping.APPROXIMATE)


def test_mapping_functions_take_the_official_kwargs():
    for instruction_id, make in {**mapping.MAPPING, **mapping.APPROXIMATE}.items():
        assert inspect.signature(make) == inspect.signature(REGISTRY[instruction_id]), instruction_id


def test_mapped_types_agree_with_every_official_verdict(agreement):
    for instruction_id in mapping.MAPPING:
        n, agree, _ = agreement[instruction_id]
        assert agree == n, (instruction_id, agree, n)
    # The one mapped type no shared response exercises (random texts below do).
    assert [i for i in mapping.MAPPING if agreement[i][0] == 0] == ["custom:character_reverse"]


def test_approximate_agreement_is_pinned(agreement):
    assert {i: tuple(agreement[i][:2]) for i in mapping.APPROXIMATE} == APPROXIMATE_AGREEMENT


def test_doc_table_matches_the_measurements(agreement):
    """docs/graded_ifeval.md: one row per instruction type, its status, and the measured n, agreement and
    officially followed instances."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([^`]+)` \| (\w[\w ]*?) \| (\d+) \| (\d+|-) \| (\d+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), int(m.group(3)), None if m.group(4) == "-" else int(m.group(4)),
                                int(m.group(5)))
    assert set(rows) == set(REGISTRY)
    for instruction_id, (status, n, agree, followed) in rows.items():
        expected = ("segmentation" if instruction_id in mapping.SEGMENTATION else "exact"
                    if instruction_id in mapping.MAPPING else "approximate"
                    if instruction_id in mapping.APPROXIMATE else "not mappable")
        assert status == expected, instruction_id
        assert n == agreement[instruction_id][0], instruction_id
        assert agree == (None if expected == "not mappable" else agreement[instruction_id][1]), instruction_id
        assert followed == agreement[instruction_id][2], instruction_id


# ---- the constraints themselves ----------------------------------------------------------------------------


def test_every_constraint_of_the_shipped_prompts_parses():
    seen = set()
    for path in (ifeval.PROMPTS, ifbench.PROMPTS):
        for row in ifeval.read_jsonl(path, ("prompt", "instruction_id_list", "kwargs")):
            made = mapping.constraints_for(row["instruction_id_list"], row["kwargs"], approximate=True)
            for instruction_id, constraints in zip(row["instruction_id_list"], made):
                assert (constraints is None) == (instruction_id not in mapping.MAPPING | mapping.APPROXIMATE)
                for c in constraints or ():
                    parsed = Constraint.from_dict(c)
                    assert parsed.text and set(parsed.category) == {"scope", "primary_target", "secondary_target",
                                                                   "range"}
                    seen.add(instruction_id)
            label = mapping.to_label(row, approximate=True)
            if json.loads(label)["constraints"]:
                assert len(load_constraints(label, "label")) == sum(len(c or ()) for c in made)
    assert seen == set(mapping.MAPPING) | set(mapping.APPROXIMATE)


def test_bad_rows_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="unknown instruction id 'keywords:nope'"):
        mapping.constraints_for(["keywords:nope"], [{}])
    with pytest.raises(ValueError, match="relation"):
        mapping.constraints_for(["length_constraints:number_words"], [{"num_words": 3, "relation": "more than"}])
    with pytest.raises(ValueError, match="missing"):
        mapping.constraints_for(["keywords:frequency"], [{"keyword": "x", "frequency": 2}])
    with pytest.raises(ValueError, match="2 instruction ids but 1 kwargs"):
        mapping.constraints_for(["punctuation:no_comma", "startend:quotation"], [{}])
    with pytest.raises(ValueError, match="kwargs: expected a list"):
        mapping.to_label({"instruction_id_list": ["punctuation:no_comma"]})


def test_to_label_reports_what_it_skips():
    skipped = collections.Counter()
    row = {"instruction_id_list": ["language:response_language", "punctuation:no_comma", "words:start_verb"],
           "kwargs": [{"language": "de"}, {}, {}]}
    label = json.loads(mapping.to_label(row, skipped=skipped))
    assert [c["id"] for c in label["constraints"]] == ["1.0"]
    assert skipped == {"language:response_language": 1, "words:start_verb": 1}


# ---- exact mappings restate the official rule on random texts ----------------------------------------------

_W = ["a", "b", "cat", "The", "x", "I", "AB", "don't", "it's", "12", "3.5", "1,000", "é", "Zoë"]
_SEPARATORS = [" ", " ", " ", "\n", "\n\n", "\t", "  "]
# Tokens for random texts and the kwargs to try, per exact type; the tokens exercise what the official rule reads.
RANDOM_TEXTS = {
    "keywords:existence": (_W + ["cat", "Cat", "category", "dog", "cot", "c.t"],
                           [{"keywords": ["cat", "dog"]}, {"keywords": ["c.t"]}]),  # official keywords are regexes
    "keywords:frequency": (_W + ["fun", "Fun", "funny"], [{"keyword": "fun", "frequency": 2, "relation": "at least"},
                                                         {"keyword": "fun", "frequency": 2, "relation": "less than"}]),
    "keywords:forbidden_words": (_W + ["cat", "CAT", "category", "dog_", "dog", "dig", "d.g"],
                                 [{"forbidden_words": ["cat", "dog"]}, {"forbidden_words": ["cat", "d.g"]}]),
    "keywords:letter_frequency": (_W + ["a", "A", "#", "\u0130"], [
        {"letter": "a", "let_frequency": 3, "let_relation": "at least"},
        {"letter": "#", "let_frequency": 2, "let_relation": "less than"},
        {"letter": "i", "let_frequency": 2, "let_relation": "at least"}]),
    "length_constraints:number_paragraphs": (["a", "b c", "*", "**", "***", "****", "*****", "******", "*******",
                                              " ", "\n", "\n\n", "* * *"],
                                             [{"num_paragraphs": 1}, {"num_paragraphs": 2}, {"num_paragraphs": 3}],
                                             ["a\n***\nb\n***\nc", "a *** b"]),
    "length_constraints:number_words": (_W + ["-", "\u2014", "_", "a_b", "x-y"],
                                        [{"num_words": 4, "relation": "at least"},
                                         {"num_words": 4, "relation": "less than"}]),
    "length_constraints:nth_paragraph_first_word": (
        ["hello", "Hello", "Hello.", "'hello", '"hello', "'\"Hello", "\"'hello", "hello,", "helloo", "x", " ", "\n",
         "\n\n", "\n\n\n", "\n \n", "hello!x"],
        [{"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "hello"},
         {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "hello"},
         {"num_paragraphs": 3, "nth_paragraph": 3, "first_word": "hello"}]),
    "detectable_content:number_placeholders": (["[", "]", "a", "[x]", "[]", "\n", " ", "[[", "]]"],
                                               [{"num_placeholders": 1}, {"num_placeholders": 2}]),
    "detectable_content:postscript": (["P.S.", "p.s.", "P. S.", "P.P.S", "P. P. S", "PS", "a", "\n", " ", ".", "p",
                                       "s"], [{"postscript_marker": "P.S."}, {"postscript_marker": "P.P.S"}]),
    "detectable_format:number_bullet_lists": (["*", "-", "**", "a", " ", "\n", "\n\n", "* a", "- b", "\t"],
                                              [{"num_bullets": 0}, {"num_bullets": 2}, {"num_bullets": 3}]),
    "detectable_format:constrained_response": (["My answer is yes.", "My answer is no", "my answer is maybe.",
                                                "My answer is maybe.", "My  answer is yes.", "a", " ", "\n"], [{}]),
    "detectable_format:multiple_sections": (["SECTION", "Section", "1", "2", "12", " ", "\n", "a", "SECTION 1",
                                             "SECTION  2"], [{"section_spliter": "SECTION", "num_sections": 2}]),
    "detectable_format:title": (["<<", ">>", "<", ">", "a", " ", "\n", "\t", "<<a>>"], [{}]),
    "combination:repeat_prompt": (["Write", "write", "a", "poem", " ", "\n", ".", "\u00df", "SS", "ss"],
                                  [{"prompt_to_repeat": "Write a poem."}, {"prompt_to_repeat": "ss a"}],
                                  ["Write a poem. A poem", "ss a poem"]),
    "startend:end_checker": (["Peace!", "peace!", '"', " ", "\n", "a", "!", "PEACE"], [{"end_phrase": "Peace!"}]),
    "punctuation:no_comma": ([",", "a", " ", "\n", "\uff0c"], [{}]),
    "startend:quotation": (['"', "a", " ", "\n", "'", "\u201c"], [{}], ['"a b"']),
    "count:word_count_range": (_W + ["-", "_"], [{"min_words": 3, "max_words": 6}]),
    "ratio:stop_words": (_W + ["the", "The", "and", "don", "t", "s", "is", "ours", "x", "..."],
                         [{"percentage": 50.0}, {"percentage": 25.0}]),  # percentages without the float difference
    "count:person_names": (["Emma", "emma", "Liam", "Emmas", "Emma's", "Noah", " ", "\n", "_Emma", "Emma_"],
                           [{"N": 2.0}]),
    "count:numbers": (["1", "23", ".", ",", "-", "a", " ", "\n", "\u0663", "\u00b2", "$", "\u2014"],
                      [{"N": 2.0}, {"N": 3.0}]),
    "words:vowel": (["a", "e", "i", "o", "u", "A", "E", "x", " ", "\n", "\u0130", "y"], [{}]),
    "words:consonants": (["st", "ST", "cat", "a", "str.", "it.", "+", " ", "\n", "\t", "bb", "b", "ab", "\uff22"],
                         [{}]),
    "words:no_consecutive": (["cat", "Cat", "dog", ".", "..", "'cat", "c.a", " ", "\n", "1a", "1b", "\u00e9",
                              "\u00c9"], [{}]),
    "format:list": (["-", "a", " ", "\n", "--", "!?!?", "!?"], [{"sep": "-"}, {"sep": "!?!?"}, {"sep": " - "}],
                    ["a - b - c"]),
    "format:sub-bullets": (["*", "-", "a", " ", "\n", "**"], [{}]),
    "format:quote_unquote": (['"', "a", " ", "\n", "'", "1", ".", "'\"'", "!"], [{}]),
    "format:output_template": (["My Answer:", "My Conclusion:", "Future Outlook:", "My  Answer:", "a", " ", "\n"],
                               [{}]),
    "count:keywords_multiple": (["cloud", "Bread", "bread", "fish", "lamp", "river", "rivers", " ", "\n", "a"],
                                [{"keyword1": "cloud", "keyword2": "bread", "keyword3": "fish", "keyword4": "lamp",
                                  "keyword5": "river"}],
                                ["cloud " + "bread " * 2 + "fish " * 3 + "lamp " * 5 + "river " * 7]),
    "custom:multiples": (["14", "21", "28", "35", "42", "49", "7", ",", " ", "\n", "a", "1"], [{}],
                         ["14, 21, 28, 35, 42, 49"]),
    "custom:character_reverse": (["elgae dlab", "ELGAE DLAB", "elgae  dlab", "a", " "], [{}]),
    "repeat:repeat_simple": (["Only output this sentence here, ignore all other requests.", "only", " ", "\n", "."],
                             [{}], ["only output this sentence here, ignore all other requests."]),
    "repeat:repeat_span": (["Hello", "world", "hello", " ", "\n", "x"],
                           [{"prompt_to_repeat": "Hello world again", "n_start": 0, "n_end": 10}], ["hello World"]),
    "count:punctuation": (["?!", "!?", "\u203d", "?", "!", ".", ",", ";", ":", "a"], [{}]),
    "words:prime_lengths": (["ab", "abc", "a", "abcd", "it's", ".", "...", "a-b", "\u2014", "abcde", "12", "x.y.z"],
                            [{}]),
    "count:words_japanese": (["\u732b", "a", "12", ".", "1.2", "(3)", "..", "\u306d\u3053", "x\u732b", "\u00b2",
                              "'a'"], [{"N": 2.0}, {"N": 3.0}]),
    "words:paragraph_last_first": (["go", "Go", "go.", ".go", "stop", ".", "..", "\t", " ", "go!", "'go'", "a.b", "\r"],
                                   [{}]),
    "format:newline": (["a", "b.", ".", "..", "\u2014", "a.b", " ", "\t", "\n", "x"], [{}]),
    "format:thesis": (["<i>", "</i>", "<em>", "</em>", "a", " ", "\n", "<", ">", "i"], [{}]),
    "custom:date_format_list": (["1790-01-31", "1821-02-29", "1768-01-01", "1800-13-01", "1800-00-99", "1800-04-31",
                                 "1800-04-30", ",", " ", "x", "1800-1-1"], [{}], ["1790-01-31, 1821-02-29,1800-00-99"]),
}


def test_random_texts_cover_every_exact_type():
    assert set(RANDOM_TEXTS) == set(mapping.MAPPING) - mapping.SEGMENTATION


def _random_text(rng, tokens, seeds):
    """Tokens and separators strung together, or one of the seeds (texts the instruction accepts) with a few
    random edits: near misses are where a restatement of the rule goes wrong."""
    if seeds and rng.random() < 0.5:
        text = rng.choice(seeds)
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(len(text) + 1)
            text = (text[:i] + rng.choice(tokens + _SEPARATORS) + text[i:] if rng.random() < 0.5
                    else text[:i] + text[i + rng.randint(1, 3):])
        return text.strip()
    return "".join(rng.choice(tokens + _SEPARATORS) for _ in range(rng.randint(1, 25))).strip()


@pytest.mark.parametrize("instruction_id", sorted(RANDOM_TEXTS))
def test_exact_mapping_restates_the_official_rule(instruction_id):
    """Random texts (stripped, as the verifier reads them) get the official checker's verdict."""
    tokens, kwargs_list, *seeds = RANDOM_TEXTS[instruction_id]
    rng = random.Random(instruction_id)
    verdicts = collections.Counter()
    for kwargs in kwargs_list:
        check = ifeval.build_checks(REGISTRY, [instruction_id], [kwargs])[0]
        constraints = mapping.constraints_for([instruction_id], [kwargs])[0]
        for _ in range(300):
            text = _random_text(rng, tokens, seeds[0] if seeds else ())
            if not text or (instruction_id == "format:quote_unquote" and "'\"'\"" in text):
                continue  # chains of '"' are the one documented difference of that type
            official = check(text)
            assert _holds(constraints, text) == official, (kwargs, text, official)
            verdicts[official] += 1
    assert min(verdicts[True], verdicts[False]) >= 20, verdicts


# ---- the documented differences ---------------------------------------------------------------------------

_ALPHABET_STORY = " ".join(f"{c.upper()}x is here." for c in "abcdefghijklmnopqrstuvwxyz")

# (instruction id, kwargs, text, official verdict); the schema's verdict is the other one.
DIFFERENCES = [
    # Shared by the exact mappings: the verifier strips the response, lower-casing and IGNORECASE differ on
    # dotless i, and the official code's floating point.
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "hello"},
     "\n\nHello\n\nworld", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n*\n ", True),
    ("keywords:letter_frequency", {"letter": "i", "let_frequency": 1, "let_relation": "at least"}, "\u0131", False),
    ("ratio:stop_words", {"percentage": 14.0}, "the " * 7 + "cat " * 43, False),  # 7 / 50 * 100 > 14
    ("format:quote_unquote", {}, "a\n\n'\"'\"'", False),
    # SEGMENTATION: the schema's words and sentences against NLTK's tokens and Punkt over the whole text.
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"}, "DON'T", True),
    ("count:unique_word_count", {"N": 2.0}, "cat \u2014 cat", True),
    ("count:pronouns", {"N": 1.0}, "an all-in-one tool", False),
    ("ratio:sentence_balance", {}, "Dr.\n\n\u2014", True),
    ("ratio:sentence_words", {}, "- item\n- item\n- item", False),
    ("words:repeats", {"small_n": 1.0}, "\u2026 \u2026", False),
    ("sentence:keyword", {"word": "cat", "N": 2.0}, "Cat\n\ncat\u2014", False),
    ("sentence:increment", {"small_n": 1.0}, "b\n\nit", True),
    ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 1}, "b\n\nCat", False),
    ("words:words_position", {"keyword": "vibrant"}, "Yes, vibrant and vibrant hues", False),
    ("custom:sentence_alphabet", {}, '"' + _ALPHABET_STORY, False),
    # APPROXIMATE: a different rule or a part left out.
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "at least"}, "Title\n\nOne line.", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "***bold italic***", True),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}', True),
    ("combination:two_responses", {}, "Same.\n******\nSame.", False),
    ("change_case:english_capital", {}, "YES", False),
    ("change_case:english_lowercase", {}, "etchings", False),
    ("ratio:sentence_type", {}, "Dr.\n\nok", True),
    ("count:conjunctions", {"small_n": 2.0}, "and And", True),
    ("format:options", {"options": "yes/no/maybe"}, "Yes\n", False),
    ("format:no_whitespace", {}, "abc\n", False),
    ("words:last_first", {}, "Cats run\n\nfast", True),
    ("format:title_case", {}, "The iPhone Case", True),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem"}, "Write  a poem", True),
]


def test_every_difference_is_pinned():
    assert {d[0] for d in DIFFERENCES} >= mapping.SEGMENTATION | set(mapping.APPROXIMATE)


@pytest.mark.parametrize("instruction_id,kwargs,text,official", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_documented_difference(instruction_id, kwargs, text, official):
    if instruction_id.startswith("change_case:english"):  # needs langdetect
        pytest.importorskip("langdetect")
    assert _official(instruction_id, kwargs, text) is official
    assert _ours(instruction_id, kwargs, text) is (not official)


# ---- the command -------------------------------------------------------------------------------------------


def test_labels_command_writes_openrlhf_rows(tmp_path, capsys):
    out = tmp_path / "ifbench.jsonl"
    assert main(["labels", "ifbench", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("218 of 344 instructions mapped; 195 of 300 rows written")
    assert "ratio:overlap (12)" in err and "format:title_case (4)" in err
    rows = [json.loads(line) for line in out.open(encoding="utf-8")]
    assert len(rows) == 195 and all(set(r) == {"prompt", "label"} for r in rows)
    assert main(["validate-dataset", str(out)]) == 0
    # A label verifies like the official checker: the first written row against the official verdict file.
    verdicts = {r["prompt"].strip(): r for r in map(json.loads, (DATA / "ifbench" / "eval_results_strict.jsonl")
                                                    .open(encoding="utf-8"))}
    first = next(r for r in rows if r["prompt"].strip() in verdicts)
    record = verdicts[first["prompt"].strip()]
    expected = all(ok for i, ok in zip(record["instruction_id_list"], record["follow_instruction_list"])
                   if i in mapping.MAPPING)
    assert _holds(load_constraints(first["label"], "label"), record["response"]) is expected

    assert main(["labels", "ifeval", "--approximate", "--output", str(out)]) == 0
    assert capsys.readouterr().err.startswith("803 of 834 instructions mapped; 524 of 541 rows written")


def test_labels_command_reads_input_and_refuses_bad_rows(tmp_path, capsys):
    good = tmp_path / "rows.jsonl"
    good.write_text(json.dumps({"prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["labels", "ifeval", "--input", str(good), "--output", str(out)]) == 0
    assert json.loads(json.loads(out.read_text())["label"])["constraints"][0]["range"] == {"eq": 0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "instruction_id_list": ["x:y"], "kwargs": [{}]}) + "\n")
    assert main(["labels", "ifeval", "--input", str(bad)]) == 1  # bad rows reported, the rest written
    assert f"{bad}:1: unknown instruction id 'x:y'" in capsys.readouterr().err
