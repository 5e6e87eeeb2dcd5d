"""IFEval and IFBench instructions as schema-v1 constraints (issue 4: graded IFEval / IFBench).

`MAPPING` is one table, in the style of `ifcore.bench.ifeval.IFEVAL`, from an instruction id to a small function:
called with the instruction's kwargs it returns the schema constraints (JSON dicts with text, scope, target, range
and the ScopeIF category) whose conjunction is the instruction. A type is in `MAPPING` when its verdict equals the
official strict verdict on every shared response of that type (tests/test_mapping.py; docs/graded_ifeval.md has
the table), and either
- the constraints restate the official rule, quirks included (IFEval's words are runs of \\w, its keywords are
  regular expressions, its paragraphs are split on "***"); random texts confirm it in the tests; or
- the type is in `SEGMENTATION`: the constraints count the schema's words or sentences where the official checker
  counts NLTK's tokens, Punkt sentences over the whole text or whitespace-separated tokens, the only difference.
`APPROXIMATE` holds the types the schema can only approximate (a part of the instruction left out, a different
rule, or disagreements on shared responses); they are used only on request. Every other type is skipped.

Most exact forms are `matches` patterns: a `{"matches": R}` target counts the non-overlapping matches of R, as
the official `re.findall(R, text)` does. Differences that hold for every mapping are not repeated below: the
verifier reads the response after any `</think>` with surrounding whitespace stripped; the official strict loop
fails every instruction of an empty response, which the constraints ("no commas") do not; and a case-insensitive
pattern also equates "ı" with "i" and "ſ" with "s", which the official lower-casing does not.
"""
from __future__ import annotations

import collections
import functools
import json
import math
import re
import string
import sys

from ifcore.bench.ifbench import _PERSON_NAMES, _PRONOUNS, IFBENCH, _stopwords
from ifcore.bench.ifeval import IFEVAL, build_checks

GLOBAL = "Global(Entire Response)"
# IFBench deletes or strips string.punctuation (ASCII punctuation): _P is that set as a character class, _T any
# other non-space character (what is left of a word once its punctuation is deleted).
_P, _T = r"[!-/:-@\[-`{-~]", r"[^\s!-/:-@\[-`{-~]"


def _int(x):
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _c(text: str, target: dict, range_: dict, primary: str, secondary: str, range_label: str,
       scope: list | None = None, scope_label: str = GLOBAL) -> dict:
    return {"text": text, "scope": scope or [], "target": target, "range": range_,
            "category": {"scope": scope_label, "primary_target": primary, "secondary_target": secondary,
                         "range": range_label}}


def _relation(relation: str, n) -> dict:
    """IFEval's "less than n" / "at least n" on an integer count."""
    return {"max": math.ceil(n) - 1} if relation == "less than" else {"min": math.ceil(n)}


def _ref(target: dict) -> dict:
    return {"scope": [], "target": target}


def _minus(n, target: dict) -> dict:
    """The bound n - (target measured on the whole response): two counts that must sum to n."""
    return {"plus": _int(n), "of": {"times": -1, "of": _ref(target)}}


def _occurrence(s: str, match: str = "substring", case: str = "insensitive") -> dict:
    return {"count": "occurrence", "of": s, "match": match, "case": case}


def _star_parts(width: int) -> tuple[str, str]:
    """Patterns for text split on runs of `width` asterisks (IFEval's r"\\s?\\*\\*\\*\\s?", str.split("******")).

    Splitting takes the first `width` stars of a run (a longer run leaves its extra stars, which are text, to the
    next part; a run of 2 * width or more yields an empty part). The first pattern matches each non-blank part
    once: its characters are everything except the separator stars, told apart by lookarounds on the run start.
    The second finds what makes a blank part between two separators, which the official checkers reject."""
    sep = "|".join(rf"(?<=(?<!\*)\*{{{o}}})\*(?=\*{{{width - 1 - o}}})" if o else rf"(?<!\*)\*(?=\*{{{width - 1}}})"
                   for o in range(width))
    part = rf"(?=\s*(?!{sep})\S)(?:(?!{sep})[\s\S])+"
    blank = rf"\*{{{2 * width}}}|(?<!\*)\*{{{width}}}\s+\*{{{width}}}"
    return part, blank


# ---------------------------------------------------------------------------------------------------------
# IFEval (google-research instruction_following_eval, semantics as in ifcore.bench.ifeval)


def _keyword(k: str) -> dict:
    # The official keyword is a regular expression searched case-insensitively; a plain word is a substring.
    return _occurrence(k) if re.escape(k) == k else {"matches": "(?i)" + k}


def keywords_existence(*, keywords):
    return [_c(f"Include the keyword {k!r}.", _keyword(k), {"min": 1}, "Literals", "Specific Strings",
               "One-Sided Bounds") for k in keywords]


def keywords_frequency(*, keyword, frequency, relation):
    keyword = keyword.strip()
    return [_c(f"The word {keyword!r} should appear {relation} {_int(frequency)} times.", _keyword(keyword),
               _relation(relation, frequency), "Literals", "Specific Strings", "One-Sided Bounds")]


def keywords_forbidden_words(*, forbidden_words):
    words = sorted(set(forbidden_words))
    text = f"Do not include the words {', '.join(words)}."
    if all(re.fullmatch(r"\w+", w) for w in words):  # then \bw\b is a whole-word occurrence
        target = {"count": "occurrence", "any_of": words, "match": "word", "case": "insensitive"}
    else:
        target = {"matches": "(?i)" + "|".join(rf"\b(?:{w})\b" for w in words)}
    return [_c(text, target, {"eq": 0}, "Literals", "Specific Strings", "Prohibition")]


def keywords_letter_frequency(*, letter, let_frequency, let_relation):
    letter = letter.strip().lower()
    if not letter:
        raise ValueError("letter: a blank letter is not mapped (the official checker counts it 0 times)")
    return [_c(f"The letter {letter!r} should appear {let_relation} {_int(let_frequency)} times.",
               _occurrence(letter), _relation(let_relation, let_frequency), "Literals", "Specific Strings",
               "One-Sided Bounds")]


def length_constraints_number_paragraphs(*, num_paragraphs):
    part, blank = _star_parts(3)
    text = f"There should be {_int(num_paragraphs)} paragraphs, separated with the markdown divider ***."
    return [_c(text, {"matches": part}, {"eq": _int(num_paragraphs)}, "Capacity", "Unit Count", "Equality"),
            _c("No empty paragraph between two *** dividers.", {"matches": blank}, {"eq": 0}, "Pattern",
               "Skeleton", "Prohibition")]


def length_constraints_number_words(*, num_words, relation):
    return [_c(f"Answer with {relation} {_int(num_words)} words.", {"matches": r"\w+"},
               _relation(relation, num_words), "Capacity", "Text Length", "One-Sided Bounds")]


def length_constraints_nth_paragraph_first_word(*, num_paragraphs, nth_paragraph, first_word):
    # Paragraphs are the parts of re.split(r"\n\n", text): a non-blank part runs from a non-space character to
    # the next "\n\n". The n-th part is counted with the blank ones; its first word is cut at . , ? ! ' or ".
    if re.search(r"[\s.,?!'\"]", first_word):
        raise ValueError(f"first_word: {first_word!r} is not mapped (an official first word never holds a space "
                         "or . , ? ! ' \")")
    skip = rf"(?:(?:(?!\n\n)[\s\S])*\n\n){{{nth_paragraph - 1}}}"
    head = rf"\A{skip}(?:(?!\n\n)\s)*'*\"*(?i:{re.escape(first_word.lower())})(?=[.,?!'\"\s]|\Z)"
    return [_c(f"There should be {_int(num_paragraphs)} paragraphs, separated by two new lines.",
               {"matches": r"\S(?:(?!\n\n)[\s\S])*"}, {"eq": _int(num_paragraphs)}, "Capacity", "Unit Count",
               "Equality"),
            _c(f"Paragraph {nth_paragraph} must start with the word {first_word!r}.", {"matches": head},
               {"eq": 1}, "Pattern", "Boundary", "Equality", scope_label="Position(Paragraph)")]


def detectable_content_number_placeholders(*, num_placeholders):
    # The matches of the official r"\[.*?\]" (a "[" up to the nearest "]" on its line), found from the line start
    # or the last "]" only, so that a line of "[" without "]" is read once rather than once per "[".
    return [_c(f"Include at least {_int(num_placeholders)} placeholders in square brackets, such as [address].",
               {"matches": r"(?m)(?:^|(?<=\]))[^\[\]\n]*\[[^\]\n]*\]"}, {"min": math.ceil(num_placeholders)},
               "Pattern", "Surface", "One-Sided Bounds")]


def detectable_content_postscript(*, postscript_marker):
    marker = postscript_marker.strip()
    pattern = {"P.P.S": r"p\.\s?p\.\s?s", "P.S.": r"p\.\s?s\."}.get(marker, marker.lower())
    return [_c(f"Add a postscript starting with {marker}.", {"matches": "(?i)" + pattern}, {"min": 1},
               "Literals", "Specific Strings", "One-Sided Bounds")]


_STAR_BULLET, _DASH_BULLET = r"(?m)^\s*\*[^\*].*$", r"(?m)^\s*-.*$"


def detectable_format_number_bullet_lists(*, num_bullets):
    # Two official counts that must sum to n: lines starting with "*" (not "**") and lines starting with "-".
    return [_c(f"Use exactly {_int(num_bullets)} markdown bullet points.", {"matches": _STAR_BULLET},
               {"eq": _minus(num_bullets, {"matches": _DASH_BULLET})}, "Structure", "Members", "Equality")]


def detectable_format_constrained_response():
    return [_c("Answer with one of: 'My answer is yes.', 'My answer is no.', 'My answer is maybe.'",
               {"matches": r"My answer is (?:yes|no|maybe)\."}, {"min": 1}, "Literals", "Specific Strings",
               "One-Sided Bounds")]


def detectable_format_number_highlighted_sections(*, num_highlights):
    # Approximate: a bold span **..** or an italic span *..* with text inside, each counted once. The official
    # count pairs the stars of each line in order, which needs the parity of the stars before a match.
    pattern = r"\*\*[^\n*]*[^\s*][^\n*]*\*\*|\*[^\n*]*[^\s*][^\n*]*\*"
    return [_c(f"Highlight at least {_int(num_highlights)} sections with markdown, i.e. *highlighted section*.",
               {"matches": pattern}, {"min": math.ceil(num_highlights)}, "Pattern", "Surface", "One-Sided Bounds")]


def detectable_format_multiple_sections(*, section_spliter, num_sections):
    spliter = section_spliter.strip()
    return [_c(f"The response must have {_int(num_sections)} sections, each marked {spliter} X.",
               {"matches": r"\s?" + spliter + r"\s?\d+\s?"}, {"min": math.ceil(num_sections)}, "Pattern",
               "Skeleton", "One-Sided Bounds")]


# A line whose first "<<" and last ">>" enclose a title that is not blank once the "<" after the first "<<" and
# the ">" before the last ">>" are dropped: the first other non-space character needs a ">>" after it, or a
# ">" needs a space and then a ">>" after it. Anchored at line starts and possessive, so it stays linear.
_TITLE = (r"(?m)^(?:(?!<<)[^\n])*+<<<*+(?:(?:[^\S\n]|>)*+[^\s>](?=[^\n]*>>)"
          r"|[^>\n]*+>\S*+[^\S\n](?=[^\n]*>>))")


def detectable_format_title():
    return [_c("Include a title wrapped in double angular brackets, such as <<poem of joy>>.", {"matches": _TITLE},
               {"min": 1}, "Pattern", "Surface", "One-Sided Bounds")]


def detectable_format_json_format():
    # Approximate: the schema's JSON validity reads fences its own way (docs/graded_ifeval.md).
    return [_c("The entire output should be wrapped in JSON format.", {"valid": "json"}, {"eq": 1}, "Checklist",
               "Validity", "Equality")]


def combination_repeat_prompt(*, prompt_to_repeat):
    # A case-insensitive pattern rather than starts_with, whose case folding makes "ß" equal "ss" (lower() does not).
    return [_c("First repeat the request word for word without change, then give your answer.",
               {"matches": r"(?i)\A" + re.escape(prompt_to_repeat.strip())}, {"eq": 1}, "Pattern", "Boundary",
               "Equality")]


def startend_end_checker(*, end_phrase):
    # Official: the text, stripped of whitespace and then of double quotes, ends with the phrase (any case).
    phrase = end_phrase.strip()
    return [_c(f"Finish your response with this exact phrase {phrase!r}.",
               {"matches": "(?i)" + re.escape(phrase) + r'"*\Z'}, {"eq": 1}, "Pattern", "Boundary", "Equality")]


def punctuation_no_comma():
    return [_c("Do not use any commas.", _occurrence(","), {"eq": 0}, "Literals", "Specific Strings",
               "Prohibition")]


def startend_quotation():
    return [_c("Wrap your entire response with double quotation marks.", {"wrapped": ['"', '"']}, {"eq": 1},
               "Pattern", "Boundary", "Equality")]


# ---------------------------------------------------------------------------------------------------------
# IFBench (allenai/IFBench, semantics as in ifcore.bench.ifbench)


def count_word_count_range(*, min_words, max_words):
    return [_c(f"The response must contain between {_int(min_words)} and {_int(max_words)} words.",
               {"matches": r"\w+"}, {"min": _int(min_words), "max": _int(max_words)}, "Capacity", "Text Length",
               "Intervals")]


def ratio_stop_words(*, percentage):
    # Official: of the \w+ runs, at most percentage % are (lower-cased) NLTK stop words. A whole-word occurrence
    # of a stop word made of \w characters is exactly such a run; those with an apostrophe never are one.
    words = sorted(w for w in _stopwords() if re.fullmatch(r"\w+", w))
    return [_c(f"Stop words must make up no more than {_int(percentage)}% of the words.",
               {"count": "occurrence", "any_of": words, "match": "word", "case": "insensitive"},
               {"max": {"times": percentage / 100, "of": _ref({"matches": r"\w+"})}}, "Literals",
               "Specific Strings", "Arithmetic Relations"),
            _c("The response must contain words.", {"matches": r"\w+"}, {"min": 1}, "Capacity", "Text Length",
               "One-Sided Bounds")]


def count_person_names(*, N):
    return [_c(f"Mention at least {_int(N)} different person names from the list.",
               {"has": list(_PERSON_NAMES), "match": "word", "case": "sensitive"}, {"min": math.ceil(N)},
               "Checklist", "Presence", "One-Sided Bounds")]


def count_numbers(*, N):
    # Official: \d+ runs once ASCII punctuation is deleted, i.e. runs of digits and punctuation holding a digit.
    return [_c(f"Include exactly {_int(N)} numbers.", {"matches": rf"\d(?:\d|{_P})*"}, {"eq": _int(N)},
               "Literals", "Literal Classes", "Equality")]


def words_vowel():
    return [_c("Write a single paragraph (one line).", {"matches": r"\n"}, {"eq": 0}, "Capacity", "Unit Count",
               "Prohibition"),
            _c("Use at most three of the vowels a, e, i, o, u.", {"has": list("aeiou"), "match": "substring"},
               {"max": 3}, "Checklist", "Presence", "One-Sided Bounds")]


def words_consonants():
    # A whitespace-separated word with no two ASCII consonants in a row breaks the rule.
    pattern = r"(?i)(?<!\S)(?:(?![b-df-hj-np-tv-z]{2})\S)+(?!\S)"
    return [_c("Each word must have a consonant cluster (two or more consonants together).",
               {"matches": pattern}, {"eq": 0}, "Pattern", "Surface", "Prohibition", scope_label="Traversal(Word)")]


def words_no_consecutive():
    # Neighbouring whitespace-separated words (ASCII punctuation deleted, so punctuation-only words vanish)
    # starting with the same character.
    pattern = rf"(?i)(?<!\S){_P}*({_T})\S*(?:\s+{_P}+(?!\S))*\s+{_P}*\1"
    return [_c("No two consecutive words may share the same first letter.", {"matches": pattern}, {"eq": 0},
               "Relations", "Chaining Relations", "Prohibition", scope_label="Traversal(Word)")]


def format_list(*, sep):
    return [_c(f"Answer with a list of items separated by {sep!r} instead of bullet points.",
               {"matches": re.escape(sep)}, {"min": 2}, "Literals", "Specific Strings", "One-Sided Bounds")]


def format_sub_bullets():
    # Official: every piece after a "*" (up to the next "*") holds a "-".
    return [_c("Each bullet point (*) must have a sub-bullet point (-).", {"matches": r"\*[^*-]*(?=\*|\Z)"},
               {"eq": 0}, "Structure", "Members", "Prohibition", scope_label="Traversal(Structural Element)")]


def format_quote_unquote():
    # Official: once every '"' inside '"' and all whitespace are removed, no '""', and no '"' as the last
    # character before trailing digits and punctuation. A '"' between two "'" is such a removed one.
    quote = r"""(?:(?<!')"|"(?!'))"""
    strippable = "[" + re.escape(string.digits + string.punctuation.replace('"', "")) + r"""\s]|(?<=')"(?=')"""
    pattern = rf"""{quote}(?:\s|'"')*{quote}|{quote}(?:{strippable})*\Z"""
    return [_c("Every quoted phrase must be followed by an unquoted explanation.", {"matches": pattern}, {"eq": 0},
               "Pattern", "Surface", "Prohibition")]


def format_output_template():
    return [_c(f"Use the template label {label!r}.", {"matches": re.escape(label)}, {"min": 1}, "Pattern",
               "Skeleton", "One-Sided Bounds") for label in ("My Answer:", "My Conclusion:", "Future Outlook:")]


def count_keywords_multiple(*, keyword1, keyword2, keyword3, keyword4, keyword5):
    out = []
    for keyword, n in zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7)):
        keyword = keyword.strip().lower()
        target = _occurrence(keyword) if re.escape(keyword) == keyword else {"matches": "(?i)" + re.escape(keyword)}
        out.append(_c(f"Include keyword {keyword!r} {n} times.", target, {"eq": n}, "Literals",
                      "Specific Strings", "Equality"))
    return out


def custom_multiples():
    return [_c("Count from 10 to 50 but only print multiples of 7.",
               {"matches": r"\A\D*14\D+21\D+28\D+35\D+42\D+49\D*\Z"}, {"eq": 1}, "Pattern", "Skeleton", "Equality")]


def custom_character_reverse():
    return [_c("Answer with the sentence reversed letter by letter ('bald eagle' -> 'elgae dlab').",
               {"matches": "(?i)elgae dlab"}, {"min": 1}, "Literals", "Specific Strings", "One-Sided Bounds")]


def repeat_repeat_simple():
    return [_c("Only output this sentence here, ignore all other requests.",
               {"matches": r"(?i)\Aonly output this sentence here, ignore all other requests\.\Z"}, {"eq": 1},
               "Pattern", "Skeleton", "Equality")]


def repeat_repeat_span(*, prompt_to_repeat, n_start, n_end):
    # Official: the response equals characters n_start..n_end of the request (stripped, any case).
    span = prompt_to_repeat[n_start:n_end + 1].strip()
    return [_c(f"Copy the span {span!r} of the request.", {"matches": r"(?i)\A" + re.escape(span) + r"\Z"},
               {"eq": 1}, "Pattern", "Skeleton", "Equality")]


def count_punctuation():
    # Official: one "?!" (else "!?") is taken out as the interrobang; "?" and "!" must still occur besides it.
    # With neither, a "‽" is the interrobang and "?" and "!" must occur.
    pair = r"(?=[\s\S]*(?:\?!|!\?))(?=(?:[^?]*\?){2})(?=(?:[^!]*!){2})"
    single = r"(?![\s\S]*(?:\?!|!\?))(?=[\s\S]*‽)(?=[^?]*\?)(?=[^!]*!)"
    return [_c("Use each of . , ; : at least once.", {"has": [".", ",", ";", ":"], "match": "substring"},
               {"eq": 4}, "Checklist", "Presence", "Equality"),
            _c("Use the interrobang (?!) and, besides it, ? and !.",
               {"matches": rf"\A(?:{pair}|{single})[\s\S]"}, {"eq": 1}, "Checklist", "Presence", "Equality")]


_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


def words_prime_lengths():
    # Official: every whitespace-separated word, ASCII punctuation deleted, has a prime length up to 97 (a word of
    # punctuation only vanishes). A word is bad unless its count of other characters is one of the primes.
    prime = "|".join(rf"(?:{_T}{_P}*){{{p}}}" for p in _PRIMES)
    pattern = rf"(?<!\S)(?=\S*{_T})(?!{_P}*(?:{prime})(?!\S))\S+"
    return [_c("Use only words whose lengths are prime numbers.", {"matches": pattern}, {"eq": 0}, "Pattern",
               "Surface", "Prohibition", scope_label="Traversal(Word)")]


@functools.cache
def _digit() -> str:
    """A class of the characters str.isdigit accepts: \\d (decimal digits) and the other digits (superscripts,
    circled digits, ...), as ranges."""
    extra = [c for c in range(sys.maxunicode + 1) if chr(c).isdigit() and not re.match(r"\d", chr(c))]
    ranges = []
    for c in extra:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    char = lambda c: f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"
    return r"[\d" + "".join(char(a) + (f"-{char(b)}" if b > a else "") for a, b in ranges) + "]"


def count_words_japanese(*, N):
    # Official: every N-th whitespace-separated word must hold a kana or CJK ideograph, unless it is punctuation
    # only or digits once punctuation is stripped from its ends. Anchored at the start: the N-th, 2N-th, ... word.
    n = math.ceil(N)
    japanese = r"\u3040-\u30ff\u4e00-\u9fff"
    bad = rf"(?!{_P}*(?!\S))(?!{_P}*{_digit()}+{_P}*(?!\S))[^\s{japanese}]+(?!\S)"
    pattern = rf"\A\s*(?:\S++\s++){{{n - 1}}}(?:(?:\S++\s++){{{n}}})*{bad}"
    return [_c(f"Every {n}th word of the response must be in Japanese.", {"matches": pattern}, {"eq": 0},
               "Literals", "Literal Classes", "Prohibition", scope_label="Position(Word)")]


def words_paragraph_last_first():
    # Official: on each line, the first and last whitespace-separated words (lower-cased) are equal once the line
    # is stripped of whitespace and then of ASCII punctuation and spaces. A line with two or more such words and
    # different ends breaks the rule: its last word is told apart from the stripped tail of punctuation.
    lead = rf"^[^\S\n]*+(?:{_P}| )*+[^\S\n]*+"
    tail = rf"(?:(?<!{_P})|[^\S\n]*[^\S \n](?=(?:{_P}| )*{_P}))(?:{_P}| )*[^\S\n]*$"
    same = rf"{lead}(\S+)[^\S\n](?:[^\n]*[^\S\n])?\1{tail}"
    multi = rf"{lead}\S+[^\S\n]+(?=[^\n]*(?:{_T}|\S[^\n]*[^\S\n ][^\n]*\S))"
    return [_c("Each paragraph (line) must end with the same word it starts with.",
               {"matches": rf"(?im)(?!{same})(?={multi})[^\n]+"}, {"eq": 0}, "Relations", "Positional Relations",
               "Prohibition", scope_label="Traversal(Line)")]


def format_newline():
    # Official, with ASCII punctuation deleted: as many non-empty lines as words. A word that is not the first on
    # its line needs a line of spaces between two words elsewhere to make up for it (counted with the reference).
    # value.strip() drops the lines before the first word: when the first line has no word, each side counts
    # them as one more match.
    lead = rf"\A(?![^\n]*{_T})(?=[\s\S]*{_T})"
    extra = rf"(?<!\S)(?=\S*{_T})\S+(?=(?:[^\S\n]+{_P}+(?!\S))*[^\S\n]+(?=\S*{_T}))|{lead}[^\n]+"
    blank = rf"(?m){lead}(?:[^\n]*\n)+?(?=[^\n]*{_T})|^(?={_P}*[^\S\n])(?:{_P}|[^\S\n])+$(?=[\s\S]*{_T})"
    return [_c("Write each word on a new line.", {"matches": extra}, {"eq": _ref({"matches": blank})}, "Capacity",
               "Unit Count", "Arithmetic Relations", scope_label="Traversal(Line)")]


def format_thesis():
    # Official: the first "<i>" (else the first "<em>") opens the thesis, closed by the first "</i>" after it (else
    # "</em>"); the text inside, read from 3 characters after the opening tag, and the text from 4 characters after
    # the closing tag must not be blank. So after "<em>" the inside always holds ">", and so does the rest after
    # "</em>".
    inner = r"(?:(?!{c})\s)*(?!{c})\S(?:(?!{c})[\s\S])*?{c}"
    italic = (r"\A(?:(?!<i>)[\s\S])*<i>(?:(?=[\s\S]*</i>)" + inner.format(c="</i>") + r"\s*\S"
              r"|(?![\s\S]*</i>)" + inner.format(c="</em>") + ")")
    em = r"\A(?![\s\S]*<i>)(?:(?!<em>)[\s\S])*<em>(?:(?:(?!</i>)[\s\S])*</i>\s*\S|(?![\s\S]*</i>)[\s\S]*</em>)"
    return [_c("Begin with a thesis statement in italics, using HTML (<i> or <em>), followed by more text.",
               {"matches": f"{italic}|{em}"}, {"eq": 1}, "Pattern", "Skeleton", "Equality")]


def custom_date_format_list():
    # Official: comma-separated items, each YYYY-MM-DD with the year in 1769-1821, the month at most 12 and the
    # day at most the month's length (29 for February; month 00 takes any day).
    date = (r"(?:17(?:69|[89][0-9]|7[0-9])|18(?:[01][0-9]|2[01]))-(?:(?:0[13578]|1[02])-(?:[0-2][0-9]|3[01])"
            r"|(?:0[469]|11)-(?:[0-2][0-9]|30)|02-[0-2][0-9]|00-[0-9]{2})")
    return [_c("List dates separated by commas in the format YYYY-MM-DD.",
               {"matches": rf"\A\s*{date}(?:\s*,\s*{date})*\s*\Z"}, {"eq": 1}, "Pattern", "Skeleton", "Equality")]


# ---------------------------------------------------------------------------------------------------------
# The schema's words and sentences for the official tokens: the same verdict on every shared response.


def change_case_capital_word_frequency(*, capital_frequency, capital_relation):
    return [_c(f"Words with all capital letters should appear {capital_relation} {_int(capital_frequency)} times.",
               {"count": "class", "of": "uppercase_word"}, _relation(capital_relation, capital_frequency),
               "Literals", "Literal Classes", "One-Sided Bounds")]


def count_unique_word_count(*, N):
    return [_c(f"Use at least {_int(N)} unique words.", {"distinct": "word", "by": "text"}, {"min": math.ceil(N)},
               "Capacity", "Unit Count", "One-Sided Bounds")]


def count_pronouns(*, N):
    return [_c(f"Include at least {_int(N)} pronouns.",
               {"count": "occurrence", "any_of": sorted(_PRONOUNS), "match": "word", "case": "insensitive"},
               {"min": math.ceil(N)}, "Literals", "Specific Strings", "One-Sided Bounds")]


def _sentences_ending(mark: str) -> dict:
    return {"count": "sentence", "where": {"target": {"ends_with": mark}, "range": {"eq": 1}}}


def ratio_sentence_balance():
    return [_c("As many declarative as interrogative sentences.", _sentences_ending("."),
               {"eq": _ref(_sentences_ending("?"))}, "Capacity", "Unit Count", "Comparison",
               scope_label="Condition(Sentence)"),
            _c("As many interrogative as exclamatory sentences.", _sentences_ending("?"),
               {"eq": _ref(_sentences_ending("!"))}, "Capacity", "Unit Count", "Comparison",
               scope_label="Condition(Sentence)")]


def ratio_sentence_words():
    return [_c("Respond with three sentences.", {"count": "sentence"}, {"eq": 3}, "Capacity", "Unit Count",
               "Equality"),
            _c("All sentences contain the same number of characters.",
               {"pairs": "sentence", "left": "chars", "rel": "ne", "right": "chars"}, {"eq": 0}, "Relations",
               "Positional Relations", "Prohibition", scope_label="Traversal(Sentence)")]


def words_repeats(*, small_n):
    n = math.ceil(small_n)
    return [_c(f"Do not repeat any word more than {n} times.",
               {"distinct": "word", "by": "text", "min_occurrences": n + 1}, {"eq": 0}, "Capacity", "Unit Count",
               "Prohibition", scope_label="Traversal(Word)")]


def sentence_keyword(*, word, N):
    return [_c(f"Include the keyword {word!r} in sentence {_int(N)}.", _occurrence(word, match="word"), {"min": 1},
               "Literals", "Specific Strings", "One-Sided Bounds",
               scope=[{"unit": "sentence", "select": "at", "index": int(N) - 1}], scope_label="Position(Sentence)")]


def sentence_increment(*, small_n):
    return [_c(f"Each sentence must contain exactly {_int(small_n)} more words than the previous one.",
               {"count": "word"}, {"eq": {"plus": _int(small_n), "of": "previous"}}, "Capacity", "Text Length",
               "Arithmetic Relations", scope=[{"unit": "sentence", "select": "each"}],
               scope_label="Traversal(Sentence)")]


def words_keywords_specific_position(*, keyword, n, m):
    return [_c(f"Include keyword {keyword!r} in sentence {n} as its word {m}.", _occurrence(keyword, match="word"),
               {"min": 1}, "Literals", "Specific Strings", "One-Sided Bounds",
               scope=[{"unit": "sentence", "select": "at", "index": n - 1},
                      {"unit": "word", "select": "at", "index": m - 1}],
               scope_label="Position(Sentence) -> Position(Word)")]


def words_words_position(*, keyword):
    return [_c(f"The {which} word of the response should be {keyword!r}.", _occurrence(keyword, match="word"),
               {"min": 1}, "Literals", "Specific Strings", "One-Sided Bounds",
               scope=[{"unit": "word", "select": "at", "index": index}], scope_label="Position(Word)")
            for which, index in (("second", 1), ("second to last", -2))]


def custom_sentence_alphabet():
    return [_c("Tell a 26-sentence story.", {"count": "sentence"}, {"eq": 26}, "Capacity", "Unit Count", "Equality"),
            _c("The sentences' first words start with the letters of the alphabet in order.",
               {"acrostic": string.ascii_lowercase, "unit": "sentence"}, {"eq": 0}, "Relations",
               "Positional Relations", "Equality", scope_label="Traversal(Sentence)")]


MAPPING = {
    "keywords:existence": keywords_existence,
    "keywords:frequency": keywords_frequency,
    "keywords:forbidden_words": keywords_forbidden_words,
    "keywords:letter_frequency": keywords_letter_frequency,
    "length_constraints:number_paragraphs": length_constraints_number_paragraphs,
    "length_constraints:number_words": length_constraints_number_words,
    "length_constraints:nth_paragraph_first_word": length_constraints_nth_paragraph_first_word,
    "detectable_content:number_placeholders": detectable_content_number_placeholders,
    "detectable_content:postscript": detectable_content_postscript,
    "detectable_format:number_bullet_lists": detectable_format_number_bullet_lists,
    "detectable_format:constrained_response": detectable_format_constrained_response,
    "detectable_format:multiple_sections": detectable_format_multiple_sections,
    "detectable_format:title": detectable_format_title,
    "combination:repeat_prompt": combination_repeat_prompt,
    "startend:end_checker": startend_end_checker,
    "punctuation:no_comma": punctuation_no_comma,
    "startend:quotation": startend_quotation,
    "count:word_count_range": count_word_count_range,
    "ratio:stop_words": ratio_stop_words,
    "count:person_names": count_person_names,
    "count:numbers": count_numbers,
    "words:vowel": words_vowel,
    "words:consonants": words_consonants,
    "words:no_consecutive": words_no_consecutive,
    "format:list": format_list,
    "format:sub-bullets": format_sub_bullets,
    "format:quote_unquote": format_quote_unquote,
    "format:output_template": format_output_template,
    "count:keywords_multiple": count_keywords_multiple,
    "custom:multiples": custom_multiples,
    "custom:character_reverse": custom_character_reverse,
    "repeat:repeat_simple": repeat_repeat_simple,
    "repeat:repeat_span": repeat_repeat_span,
    "count:punctuation": count_punctuation,
    "words:prime_lengths": words_prime_lengths,
    "count:words_japanese": count_words_japanese,
    "words:paragraph_last_first": words_paragraph_last_first,
    "format:newline": format_newline,
    "format:thesis": format_thesis,
    "custom:date_format_list": custom_date_format_list,
    "change_case:capital_word_frequency": change_case_capital_word_frequency,
    "count:unique_word_count": count_unique_word_count,
    "ratio:sentence_balance": ratio_sentence_balance,
    "ratio:sentence_words": ratio_sentence_words,
    "words:repeats": words_repeats,
    "sentence:keyword": sentence_keyword,
    "count:pronouns": count_pronouns,
    "sentence:increment": sentence_increment,
    "words:keywords_specific_position": words_keywords_specific_position,
    "words:words_position": words_words_position,
    "custom:sentence_alphabet": custom_sentence_alphabet,
}

# Mapped types whose constraints count the schema's words or sentences instead of the official tokens.
SEGMENTATION = frozenset({
    "change_case:capital_word_frequency",
    "count:unique_word_count",
    "count:pronouns",
    "ratio:sentence_balance",
    "ratio:sentence_words",
    "words:repeats",
    "sentence:keyword",
    "sentence:increment",
    "words:keywords_specific_position",
    "words:words_position",
    "custom:sentence_alphabet",
})


# ---------------------------------------------------------------------------------------------------------
# Approximations: a part of the instruction left out, a different rule, or disagreements on shared responses;
# docs/graded_ifeval.md gives each one's agreement with the official verdicts and the cause.


def length_constraints_number_sentences(*, num_sentences, relation):
    return [_c(f"Your response should contain {relation} {_int(num_sentences)} sentences.", {"count": "sentence"},
               _relation(relation, num_sentences), "Capacity", "Unit Count", "One-Sided Bounds")]


def change_case_english_capital():
    return [_c("Your entire response should be in all capital letters.", {"valid": "uppercase"}, {"eq": 1},
               "Checklist", "Validity", "Equality")]


def change_case_english_lowercase():
    return [_c("Your entire response should be in all lowercase letters.", {"valid": "lowercase"}, {"eq": 1},
               "Checklist", "Validity", "Equality")]


def combination_two_responses():
    part, blank = _star_parts(6)
    return [_c("Give two responses separated by 6 asterisks: ******.", {"matches": part}, {"eq": 2}, "Capacity",
               "Unit Count", "Equality"),
            _c("No empty response between two ****** separators.", {"matches": blank}, {"eq": 0}, "Pattern",
               "Skeleton", "Prohibition")]


def ratio_sentence_type():
    return [_c("Maintain a 2:1 ratio of declarative to interrogative sentences.", _sentences_ending("."),
               {"eq": {"times": 2, "of": _ref(_sentences_ending("?"))}}, "Capacity", "Unit Count",
               "Arithmetic Relations", scope_label="Condition(Sentence)")]


_CONJUNCTIONS = ["and", "but", "for", "nor", "or", "so", "yet"]


def count_conjunctions(*, small_n):
    return [_c(f"Use at least {_int(small_n)} different coordinating conjunctions.",
               {"has": _CONJUNCTIONS, "match": "word"}, {"min": math.ceil(small_n)}, "Checklist", "Presence",
               "One-Sided Bounds")]


def format_options(*, options):
    exact = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", options) is not None
    separator = "/" if "/" in options else "or" if "or" in options else ","
    choices = [o.strip() for o in options.split(separator)]
    if exact:
        pattern = r"\A(?:" + "|".join(map(re.escape, choices)) + r")\Z"
    else:
        either = "|".join(re.escape(o.strip(string.punctuation + " ").lower()) for o in choices)
        pattern = rf"(?i)\A(?:{_P}| )*(?:{either})(?:{_P}| )*\Z"
    return [_c(f"Answer with one of the following options: {options}.", {"matches": pattern}, {"eq": 1}, "Pattern",
               "Skeleton", "Equality")]


def format_no_whitespace():
    return [_c("The output should not contain any whitespace.", {"matches": r"\s"}, {"eq": 0}, "Literals",
               "Literal Classes", "Prohibition")]


def words_last_first():
    return [_c("The last word of each sentence must be the first word of the next sentence.",
               {"chain": "last_first", "unit": "sentence"}, {"eq": {"plus": -1, "of": _ref({"count": "sentence"})}},
               "Relations", "Chaining Relations", "Arithmetic Relations", scope_label="Traversal(Sentence)")]


def format_title_case():
    return [_c("Write the entire response in title case.", {"valid": "title_case"}, {"eq": 1}, "Checklist",
               "Validity", "Equality")]


def repeat_repeat_change(*, prompt_to_repeat):
    first, *rest = prompt_to_repeat.split()
    tail = "".join(r"\s+" + re.escape(w) for w in rest)
    return [_c("Repeat the request, changing its first word.", {"matches": rf"\A\S+{tail}\Z"}, {"eq": 1}, "Pattern",
               "Skeleton", "Equality"),
            _c(f"The first word must not be {first!r}.", {"matches": rf"\A{re.escape(first)}(?!\S)"}, {"eq": 0},
               "Pattern", "Boundary", "Prohibition")]


APPROXIMATE = {
    "length_constraints:number_sentences": length_constraints_number_sentences,
    "detectable_format:number_highlighted_sections": detectable_format_number_highlighted_sections,
    "detectable_format:json_format": detectable_format_json_format,
    "combination:two_responses": combination_two_responses,
    "change_case:english_capital": change_case_english_capital,
    "change_case:english_lowercase": change_case_english_lowercase,
    "ratio:sentence_type": ratio_sentence_type,
    "count:conjunctions": count_conjunctions,
    "format:options": format_options,
    "format:no_whitespace": format_no_whitespace,
    "words:last_first": words_last_first,
    "format:title_case": format_title_case,
    "repeat:repeat_change": repeat_repeat_change,
}


def constraints_for(instruction_ids: list[str], kwargs_list: list[dict | None],
                    approximate: bool = False) -> list[list[dict] | None]:
    """The schema constraints of each instruction of one IFEval / IFBench row, or None for a type with no mapping
    (and for one in `APPROXIMATE` unless `approximate`). Kwargs set to None are dropped and the rest are checked as
    the official checker checks them; an unknown instruction id or bad kwargs raise a ValueError naming them."""
    if len(instruction_ids) != len(kwargs_list):
        raise ValueError(f"{len(instruction_ids)} instruction ids but {len(kwargs_list)} kwargs")
    out = []
    for instruction_id, kwargs in zip(instruction_ids, kwargs_list):
        registry = IFEVAL if instruction_id in IFEVAL else IFBENCH if instruction_id in IFBENCH else None
        if registry is None:
            raise ValueError(f"unknown instruction id {instruction_id!r}")
        make = MAPPING.get(instruction_id) or (APPROXIMATE.get(instruction_id) if approximate else None)
        if make is None:
            out.append(None)
            continue
        build_checks(registry, [instruction_id], [kwargs])  # the official kwargs checks, with their messages
        out.append(make(**{k: v for k, v in (kwargs or {}).items() if v is not None}))
    return out


def to_label(row: dict, approximate: bool = False, skipped: collections.Counter | None = None) -> str:
    """An IFEval / IFBench row ({"instruction_id_list": [...], "kwargs": [...], ...}) as an OpenRLHF label, the
    JSON string {"constraints": [...]}. Constraint ids are "<instruction index>.<constraint index>". Instructions
    with no mapping are left out; given `skipped`, they are counted there by instruction id."""
    for key in ("instruction_id_list", "kwargs"):
        if not isinstance(row.get(key), list):
            raise ValueError(f"{key}: expected a list, got {type(row.get(key)).__name__}")
    constraints = []
    for i, (instruction_id, made) in enumerate(zip(row["instruction_id_list"], constraints_for(
            row["instruction_id_list"], row["kwargs"], approximate))):
        if made is None:
            if skipped is not None:
                skipped[instruction_id] += 1
            continue
        constraints.extend({"id": f"{i}.{j}", **c} for j, c in enumerate(made))
    return json.dumps({"constraints": constraints}, ensure_ascii=False)


def write_labels(rows: list[dict], out, approximate: bool = False) -> dict:
    """`ifcore labels`: one OpenRLHF prompt row {"prompt", "label"} per row with at least one mapped instruction
    (a label without constraints would give every response full reward). Returns the counts it reports."""
    skipped: collections.Counter = collections.Counter()
    written = instructions = 0
    for row in rows:
        instructions += len(row["instruction_id_list"])
        label = to_label(row, approximate, skipped)
        if json.loads(label)["constraints"]:
            out.write(json.dumps({"prompt": row["prompt"], "label": label}, ensure_ascii=False) + "\n")
            written += 1
    return {"rows": len(rows), "written": written, "instructions": instructions,
            "mapped": instructions - sum(skipped.values()), "skipped": dict(skipped.most_common())}
