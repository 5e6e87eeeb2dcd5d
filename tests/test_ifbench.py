"""IFBench with the official checkers' semantics (ifcore.bench.ifbench): agreement with the official verdict
files on the sample responses, the listed disagreements, per-type hand cases that pin the official behaviour
(quirks included), robustness and the `ifcore eval ifbench` command.

Every hand case gives the verdict of the official checker (allenai/IFBench ifbench/instructions.py at db69a6f).
"""
import json
import string
from pathlib import Path

import pytest

from ifcore.bench import ifbench, ifeval
from ifcore.cli import main

DATA = Path(__file__).parent / "data" / "ifbench"

_AFRICA = "\n".join(["Zimbabwe"] + sorted((f"Country {i:02d}" for i in range(51)), reverse=True))
_STORY = " ".join(f"{c.upper()}ab is here." for c in string.ascii_lowercase)
_CAPITALS = ", ".join(ifbench._CAPITALS)
_CITY_CSV = "ID,Country,City,Year,Count\n" + "\n".join(f"{i},France,Paris,2020,{i}" for i in range(1, 8))
_PRODUCT_CSV = ("ProductID,Category,Brand,Price,Stock\n1,Food,\"A&B\",2,3\n"
                + "\n".join(f"{i},Food,Acme,2,3" for i in range(2, 15)))
_QUOTED_TSV = "\n".join("\t".join(f'"{f}"' for f in row) for row in (
    ("StudentID", "Subject", "Grade", "Semester", "Score"), ("1", "Math", "A", "Fall", "90"),
    ("2", "Art", "B", "Fall", "80"), ("3", "Music", "C", "Spring", "70")))
_MCQ = "\n".join(f"Question {n}: {stem}\nA. a\nB. b\nC. c\nD. d\nE. e"
                 for n, stem in enumerate(("Who?", "Who is?", "Who is he?", "Who is he now?"), 1))
_KEYWORDS5 = {"keyword1": "one", "keyword2": "two", "keyword3": "three", "keyword4": "four", "keyword5": "cat"}

# (instruction id, kwargs, response, official verdict)
CASES = [
    ("count:word_count_range", {"min_words": 3.0, "max_words": 4.0}, "one two three", True),
    ("count:word_count_range", {"min_words": 3.0, "max_words": 4.0}, "one two", False),
    ("count:word_count_range", {"min_words": 3.0, "max_words": 4.0}, "don't stop now", True),  # don, t, stop, now
    ("count:unique_word_count", {"N": 3.0}, "a A a.", False),
    ("count:unique_word_count", {"N": 3.0}, "One two, three", True),
    ("count:unique_word_count", {"N": 3.0}, "a ... b", True),  # "..." strips to the empty word, which counts
    ("ratio:stop_words", {"percentage": 50.0}, "the cat", True),
    ("ratio:stop_words", {"percentage": 50.0}, "the a cat", False),
    ("ratio:stop_words", {"percentage": 50.0}, "don't", False),  # "don" and "t" are both stop words
    ("ratio:sentence_type", {}, "It is. It was. Is it?", True),
    ("ratio:sentence_type", {}, "It is. Is it?", False),
    ("ratio:sentence_type", {}, "no punctuation at all", True),  # 0 == 2 * 0
    ("ratio:sentence_balance", {}, "Yes. No? Wow!", True),
    ("ratio:sentence_balance", {}, "Yes. No?", False),
    ("count:conjunctions", {"small_n": 2.0}, "and And", True),  # distinct raw tokens
    ("count:conjunctions", {"small_n": 2.0}, "and and", False),
    ("count:conjunctions", {"small_n": 2.0}, "but, or", True),
    ("count:person_names", {"N": 2.0}, "Emma met Liam.", True),
    ("count:person_names", {"N": 2.0}, "Emmanuel met Liam.", False),  # whole words only
    ("count:person_names", {"N": 2.0}, "emma met liam.", False),  # case-sensitive
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 50.0}, "abcdxx", True),  # character trigrams
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 50.0}, "abcxyz", False),
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 50.0}, "ab", False),
    ("count:numbers", {"N": 2.0}, "3.14 and 1,000", True),
    ("count:numbers", {"N": 2.0}, "1 2 3", False),
    ("count:numbers", {"N": 1.0}, "pages 2-3", True),
    ("words:alphabet", {}, "Apples bake cakes.", True),
    ("words:alphabet", {}, "Zebra apple", True),  # loops back after z
    ("words:alphabet", {}, "apple cat", False),
    ("words:alphabet", {}, "1 apple", False),
    ("words:vowel", {}, "I like bikes", True),
    ("words:vowel", {}, "one line\nanother", False),
    ("words:vowel", {}, "aeiou", False),
    ("words:consonants", {}, "strong bricks", True),
    ("words:consonants", {}, "strong cat", False),
    ("words:consonants", {}, "This.", True),
    ("sentence:alliteration_increment", {}, "A cat. Big bold bears.", True),
    ("sentence:alliteration_increment", {}, "Big bold. A cat.", False),
    ("words:palindrome", {}, "level radar civic kayak refer stats madam rotor tenet sagas", True),
    ("words:palindrome", {}, "level radar civic kayak refer stats madam rotor tenet", False),
    ("words:palindrome", {}, "Level, radar! civic kayak refer stats madam rotor tenet wow sagas", True),
    ("count:punctuation", {}, "Hi. Yes, ok! Why? a; b: c ?!", True),
    ("count:punctuation", {}, "Hi. Yes, ok! a; b: c ?!", False),  # the "?" of "?!" does not count
    ("count:punctuation", {}, "\u203d . , ! ? ; :", True),
    ("format:parentheses", {}, "(((((x)))))", True),
    ("format:parentheses", {}, "([{(x)}])", False),
    ("format:parentheses", {}, "(((((x]", False),
    ("format:quotes", {}, "\"a 'b \"c\" b' a\"", True),
    ("format:quotes", {}, "\"a 'b' a\"", False),
    ("format:quotes", {}, "don't \"say 'it'\" won't", True),  # two levels, but the apostrophes count as quotes
    ("words:prime_lengths", {}, "Hi you are", True),
    ("words:prime_lengths", {}, "a cat", False),
    ("words:prime_lengths", {}, "It's", True),
    ("format:options", {"options": "yes/no/maybe"}, "Yes.", True),
    ("format:options", {"options": "yes/no/maybe"}, "yes, definitely", False),
    ("format:options", {"options": "a), b), c), d)"}, "a)", True),
    ("format:options", {"options": "a), b), c), d)"}, "A)", False),  # letter options must match exactly
    ("format:options", {"options": "I know or I don't know"}, "I don't know!", True),
    ("format:newline", {}, "one\ntwo\nthree", True),
    ("format:newline", {}, "one two\nthree", False),
    ("format:newline", {}, "one\n\ntwo", True),
    ("format:emoji", {}, "Hi \U0001F600. Bye \U0001F600.", True),
    ("format:emoji", {}, "Hi. Bye \U0001F600.", False),
    ("format:emoji", {}, "Hi. \U0001F600 Bye \U0001F600", True),  # the next sentence's first character counts
    ("ratio:sentence_words", {}, "Abc def. Ghi jkl. Mno pqr.", True),
    ("ratio:sentence_words", {}, "Abc def. Ghi jkl.", False),
    ("count:words_japanese", {"N": 2.0}, "I \u732b like \u72ac", True),
    ("count:words_japanese", {"N": 2.0}, "I like cats", False),
    ("count:words_japanese", {"N": 2.0}, "I 42 you", True),  # digits are excused
    ("words:start_verb", {}, "Run fast.", True),
    ("words:start_verb", {}, "The cat runs.", False),
    ("words:repeats", {"small_n": 2.0}, "a a b", True),
    ("words:repeats", {"small_n": 2.0}, "A a a.", False),
    ("sentence:keyword", {"word": "cat", "N": 2.0}, "Hi. The cat sat.", True),
    ("sentence:keyword", {"word": "cat", "N": 2.0}, "The cat. Hi.", False),
    ("sentence:keyword", {"word": "cat", "N": 2.0}, "Hi. Cats sat.", False),
    ("count:pronouns", {"N": 3.0}, "she/her/hers", True),
    ("count:pronouns", {"N": 3.0}, "I saw it", False),
    ("count:pronouns", {"N": 3.0}, "This is all mine", True),  # demonstratives and indefinites count
    ("words:odd_even_syllables", {}, "cat apple dog", True),
    ("words:odd_even_syllables", {}, "cat dog", False),
    ("words:last_first", {}, "I like dogs. Dogs like me.", True),
    ("words:last_first", {}, "I like dogs. Cats like me.", False),
    ("words:paragraph_last_first", {}, "Go now, go.\nStop and stop", True),
    ("words:paragraph_last_first", {}, "Go home\nStop", False),
    ("sentence:increment", {"small_n": 1.0}, "Cats run. Dogs run fast. Birds fly very high.", True),
    ("sentence:increment", {"small_n": 1.0}, "Cats run. Dogs run.", False),
    ("sentence:increment", {"small_n": 1.0}, "A b. A b c. A b c d.", False),  # Punkt keeps "b." as an initial
    ("words:no_consecutive", {}, "A cat jumps", True),
    ("words:no_consecutive", {}, "Cats can", False),
    ("format:line_indent", {}, "a\n b\n  c", True),
    ("format:line_indent", {}, "a\nb", False),
    ("format:line_indent", {}, "a\n b\n\n  c", True),
    ("format:line_indent", {}, "a\n b\n\n\n  c", False),  # the second blank line survives the removal loop
    ("format:quote_unquote", {}, '"Hi" means hello.', True),
    ("format:quote_unquote", {}, '"Hi" "Bye"', False),
    ("format:quote_unquote", {}, 'He said "hi"', False),
    ("format:quote_unquote", {}, "\u201cHi\u201d", True),  # curly quotes are not quotes
    ("format:list", {"sep": "SEPARATOR"}, "SEPARATOR a SEPARATOR b", True),
    ("format:list", {"sep": "SEPARATOR"}, "SEPARATOR a", False),
    ("format:list", {"sep": "!?!?"}, "!?!?!? a", False),  # non-overlapping
    ("format:thesis", {}, "<i>Thesis</i> then text", True),
    ("format:thesis", {}, "<i>Thesis</i>", False),
    ("format:thesis", {}, "<em>ab</em>", True),  # "</em>" is one character longer than the 4 skipped
    ("format:sub-bullets", {}, "* a\n  - b\n* c\n  - d", True),
    ("format:sub-bullets", {}, "* a\n* b\n  - c", False),
    ("format:sub-bullets", {}, "no bullets at all", True),
    ("format:sub-bullets", {}, "**Bold** item - x", False),  # every "*" splits
    ("format:no_bullets_bullets", {}, "One. Two.\n* a\n* b", True),
    ("format:no_bullets_bullets", {}, "One.\n* a\n* b", False),
    ("format:no_bullets_bullets", {}, "One. Two.\n\nThree.\n* a\n* b", False),  # a blank line, then a sentence
    ("format:no_bullets_bullets", {}, "One. Two.\n* a\n* b\n", False),  # anything after the bullets
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", True),
    ("custom:multiples", {}, "14 21 28 35 42", False),
    ("custom:mcq_count_length", {}, _MCQ, True),
    ("custom:mcq_count_length", {}, "Here they are:\n" + _MCQ, False),
    ("custom:reverse_newline", {}, _AFRICA, True),
    ("custom:reverse_newline", {}, "\n".join(_AFRICA.split("\n")[:-1]), False),  # 51 lines
    ("custom:reverse_newline", {}, _AFRICA.replace("Country 00", "Country 99"), False),
    ("custom:word_reverse", {}, "eagle bald the is It", True),
    ("custom:word_reverse", {}, "It is the bald eagle", False),
    ("custom:character_reverse", {}, "Elgae dlab eht si ti", True),
    ("custom:character_reverse", {}, "bald eagle", False),
    ("custom:sentence_alphabet", {}, _STORY, True),
    ("custom:sentence_alphabet", {}, _STORY.rsplit(" Zab", 1)[0], False),
    ("custom:european_capitals_sort", {}, _CAPITALS, True),
    ("custom:european_capitals_sort", {}, _CAPITALS.replace("Reykjavik", "Reykjav\u00edk"), True),  # accents fold
    ("custom:european_capitals_sort", {}, _CAPITALS.replace("Oslo, Tallinn", "Tallinn, Oslo"), False),
    ("custom:csv_city", {}, _CITY_CSV, True),
    ("custom:csv_city", {}, _CITY_CSV.rsplit("\n", 1)[0], False),
    ("custom:csv_special_character", {}, _PRODUCT_CSV, True),
    ("custom:csv_special_character", {}, _PRODUCT_CSV.replace('"A&B"', "Acme"), False),
    ("custom:csv_quotes", {}, _QUOTED_TSV, True),
    ("custom:csv_quotes", {}, _QUOTED_TSV.replace('"Math"', "Math"), False),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", True),
    ("custom:date_format_list", {}, "1796-04-12, 1805-13-02", False),
    ("custom:date_format_list", {}, "April 1796", False),
    ("count:keywords_multiple", _KEYWORDS5, "one two two three three three " + "four " * 5 + "cat " * 7, True),
    ("count:keywords_multiple", _KEYWORDS5, "one two two three three three " + "four " * 5 + "cat " * 6
     + "category", True),  # substrings count
    ("count:keywords_multiple", _KEYWORDS5, "one two three", False),
    ("words:keywords_specific_position", {"keyword": "apple", "n": 2, "m": 3}, "First one. I eat apple pie.", True),
    ("words:keywords_specific_position", {"keyword": "apple", "n": 2, "m": 3}, "First one. I eat, Apple pie.", True),
    ("words:keywords_specific_position", {"keyword": "apple", "n": 2, "m": 3}, "First one. I apple pie.", False),
    ("words:words_position", {"keyword": "vibrant"}, "A vibrant city is vibrant today.", True),
    ("words:words_position", {"keyword": "vibrant"}, "A vibrant city is vibrant today", True),
    ("words:words_position", {"keyword": "vibrant"}, "A vibrant city, vibrant.", False),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a story about cats."}, "Tell a story about cats.", True),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a story about cats."}, "Write a story about cats.", False),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a story about cats."}, "Tell a  story about cats.", True),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.", True),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests", False),
    ("repeat:repeat_span", {"prompt_to_repeat": "The quick brown fox jumps", "n_start": 4, "n_end": 8}, "Quick", True),
    ("repeat:repeat_span", {"prompt_to_repeat": "The quick brown fox jumps", "n_start": 1, "n_end": 2},
     "quick brown", False),  # character, not word, indices
    ("format:title_case", {}, "The Quick Brown Fox", True),
    ("format:title_case", {}, "The quick Fox", False),
    ("format:title_case", {}, "An iPhone", True),
    ("format:title_case", {}, "A b", False),
    ("format:output_template", {}, "My Answer: x My Conclusion: y Future Outlook: z", True),
    ("format:output_template", {}, "my answer: x My Conclusion: y Future Outlook: z", False),
    ("format:no_whitespace", {}, "abc", True),
    ("format:no_whitespace", {}, "a b", False),
    ("format:no_whitespace", {}, "a\u00a0b", False),
]

ODD = ["", " ", "\n\n\n", ".", "!?", "\u203d", "*", "***", '"', "'", "\u201c\u201d", "(" * 3000 + ")" * 3000,
       "[" * 100000, "a" * 50000, "\x00\x01", "\ud800", "\U0001F600" * 20, "\u0130", "\u0663" * 4, "<i>", "<em>",
       "Question", "Question 1", "Zimbabwe", '\t"a"\t', "\r\n\r\n", "\u2028", "\u0301" * 5, ",,,", "1-2-3"]


@pytest.mark.parametrize("instruction_id,kwargs,text,expected", CASES)
def test_official_verdict(instruction_id, kwargs, text, expected):
    assert ifeval.build_checks(ifbench.IFBENCH, [instruction_id], [kwargs])[0](text) is expected


def test_every_instruction_type_has_hand_cases():
    counts = {i: sum(1 for c in CASES if c[0] == i) for i in ifbench.IFBENCH}
    assert len(ifbench.IFBENCH) == 58
    assert min(counts.values()) >= 2, counts


def _verdict_files():
    strict = [json.loads(line) for line in (DATA / "eval_results_strict.jsonl").open(encoding="utf-8")]
    loose = [json.loads(line) for line in (DATA / "eval_results_loose.jsonl").open(encoding="utf-8")]
    return {"strict": strict, "loose": loose}


def test_agreement_with_the_official_verdict_files():
    """Our verdicts on the 294 sample responses against the official files: at least 99 % per mode, and the
    disagreements are exactly those listed, with their causes, in disagreements.jsonl."""
    official = _verdict_files()
    by_prompt = {r["prompt"].strip(): r for r in ifeval.read_jsonl(ifbench.PROMPTS, ("prompt",))}
    rows = []
    for record in official["strict"]:
        row = by_prompt.get(record["prompt"].strip())
        if row is None:
            # One sample prompt is two lines of an old IFBench_test.jsonl run together; its instruction
            # (custom:csv_city) takes no kwargs.
            assert all(ifbench.IFBENCH[i].__code__.co_kwonlyargcount == 0 for i in record["instruction_id_list"])
            row = {"kwargs": [{}] * len(record["instruction_id_list"])}
        else:
            assert row["instruction_id_list"] == record["instruction_id_list"]
        rows.append({"prompt": record["prompt"], "instruction_id_list": record["instruction_id_list"],
                     "kwargs": row["kwargs"]})
    ours = ifeval.evaluate(rows, {r["prompt"]: r["response"] for r in official["strict"]}, ifbench.IFBENCH)
    found = []
    for mode in ("strict", "loose"):
        total = agree = 0
        for line, (a, b) in enumerate(zip(ours[mode], official[mode]), 1):
            for index, (x, y) in enumerate(zip(a["follow_instruction_list"], b["follow_instruction_list"])):
                total += 1
                agree += x == y
                if x != y:
                    found.append((mode, line, index, a["instruction_id_list"][index], y, x))
        assert total == 335
        assert agree / total >= 0.99, (mode, agree)
    listed = [json.loads(line) for line in (DATA / "disagreements.jsonl").open(encoding="utf-8")]
    assert [(d["mode"], d["line"], d["instruction_index"], d["instruction_id"], d["official"], d["ours"])
            for d in listed] == found
    assert all(len(d["cause"]) > 80 for d in listed)
    # The official figures are 77/294 and 93/335 strict, 88/294 loose; ours differ only by the listed verdicts.
    assert [sum(r["follow_all_instructions"] for r in official[m]) for m in ("strict", "loose")] == [77, 88]
    assert sum(sum(r["follow_instruction_list"]) for r in official["strict"]) == 93
    summary = ifeval.summarize(ours)
    assert (summary["strict"]["prompts_followed"], summary["strict"]["instructions_followed"]) == (78, 94)
    assert (summary["loose"]["prompts_followed"], summary["loose"]["instructions_followed"]) == (89, 110)


@pytest.mark.parametrize("instruction_id", sorted(ifbench.IFBENCH))
def test_strange_responses_never_crash(instruction_id):
    kwargs = next(r["kwargs"][r["instruction_id_list"].index(instruction_id)]
                  for r in ifeval.read_jsonl(ifbench.PROMPTS, ("prompt",))
                  if instruction_id in r["instruction_id_list"])
    check = ifeval.build_checks(ifbench.IFBENCH, [instruction_id], [kwargs])[0]
    for text in ODD:
        assert isinstance(check(text), bool), repr(text[:20])


@pytest.mark.parametrize("instruction_id,kwargs,message", [
    ("words:keywords_specific_position", {"keyword": "a", "n": 0, "m": 2}, "n must be an integer >= 1"),
    ("count:words_japanese", {"N": 0}, "N must be > 0"),
    ("repeat:repeat_span", {"prompt_to_repeat": "abc", "n_start": "1", "n_end": 2}, "n_start must be an int"),
    ("format:options", {}, "options"),
])
def test_bad_kwargs_are_clear_errors(instruction_id, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        ifeval.build_checks(ifbench.IFBENCH, [instruction_id], [kwargs])
    assert instruction_id in str(info.value)


def test_cli_eval_ifbench_on_the_sample(tmp_path, capsys):
    """Against the shipped prompts (db69a6f): prompts with trailing spaces in the sample match stripped; the
    seven prompts whose lines were run together in the sample's old prompt file have no response."""
    assert main(["eval", "ifbench", "--responses", str(DATA / "sample_output.jsonl"),
                 "--output-dir", str(tmp_path)]) == 1  # prompts without a response: done, but said by the status
    captured = capsys.readouterr()
    assert captured.out.splitlines()[:4] == ["ifbench: 300 prompts, 344 instructions scored",
                                             "       %       prompt  instruction",
                                             "  strict        26.00        27.33", "   loose        29.33        31.69"]
    assert "7 prompts have no response (scored as failed, as empty responses)" in captured.err
    assert "1 responses match no prompt (ignored)" in captured.err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["strict"]["prompts"], summary["strict"]["instructions"]) == (300, 344)
    assert (summary["strict"]["prompts_followed"], summary["strict"]["instructions_followed"]) == (78, 94)
    assert (summary["loose"]["prompts_followed"], summary["loose"]["instructions_followed"]) == (88, 109)
    assert len(summary["by_instruction"]) == 58
    loose = [json.loads(line) for line in (tmp_path / "eval_results_loose.jsonl").open()]
    assert [r["prompt"] for r in loose] == [r["prompt"] for r in ifeval.read_jsonl(ifbench.PROMPTS, ("prompt",))]
