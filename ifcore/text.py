"""Segmentation of one response into the ScopeIF response units, computed once and shared by all its constraints.

A `Doc` wraps the response string. Every span it hands out is a (start, end) pair of character offsets into
that original string (end exclusive), so verdict evidence maps straight onto the policy's tokens. Each unit
list is built lazily on first use and cached: a response whose constraints never ask for sentences never
runs the sentence splitter.

Units (constraint-schema.md, "Segmentation rules" and "Reader semantics"):
- paragraph: a maximal run of non-blank lines, without the lines of headings, rules, code, tables and HTML; a
  run of only list items is a list, not a paragraph.     - line: a non-blank line.
- sentence: Punkt (English parameters plus common abbreviations) inside each prose leaf of the Markdown tree
  (paragraphs, list items, quotes), never across a blank line; headings, cells and code only for segments in them.
- word: from the first to the last letter or digit of a run of non-whitespace, split at dashes; each CJK
  ideograph is one word.
- char: every code point.
- section / block / element: from a CommonMark parser with GitHub tables (markdown-it-py).
"""
from __future__ import annotations

import bisect
import json
import re
from collections.abc import Sequence
from functools import cached_property

import punkt
from markdown_it import MarkdownIt

Span = tuple[int, int]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
# Dashes that join two words ("policy\u2014and"): em, en, figure dash, horizontal bar; "--" is handled apart.
_DASHES = "\u2012\u2013\u2014\u2015"
# A word runs from its first letter or digit to its last one within a run of non-whitespace (each CJK ideograph
# alone), so markup and punctuation around it ("**Massive**", "Supreme:") are not part of it, while inner
# apostrophes and hyphens are ("don't", "well-known"). One regex pass; the greedy middle only backtracks over
# the trailing symbols of one run, so long runs of symbols ("[[[[...") stay linear.
_WORD_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}](?:[^\s{_CJK}{_DASHES}]*[^\W_{_CJK}])?")
_ALNUM_RE = re.compile(r"[^\W_]")


def word_spans(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    end = len(text) if end is None else end
    spans = [m.span() for m in _WORD_RE.finditer(text, start, end)]
    if text.find("--", start, end) < 0:
        return spans
    out = []  # "a--b" is two words, as with a dash
    for a, b in spans:
        if text.find("--", a, b) < 0:
            out.append((a, b))
        else:
            out.extend((a + x, a + y) for x, y in word_spans(text[a:b].replace("--", "  ")))
    return out


# Inline Markdown around text (**bold**, _italic_, `code`, ~~struck~~): the delimiters are markup, not characters a
# reader counts. Only a pair counts, on one line, the opener not inside a word ("snake_case", "x_'y'" are text);
# the body is at most 300 characters, so a line of unpaired "*" costs a bounded search per delimiter.
MARKUP_RE = re.compile(r"(?<![\w\\*_~`])(?P<d>\*{1,3}(?!\*)|_{1,3}(?!_)|~~(?!~)|`{1,2}(?!`))(?!\s)"
                       r"(?P<body>[^\n]{0,300}?[^\s\\])(?P=d)(?![\w*_~`])")


def markup_delimiters(text: str, s: int, e: int) -> list[str]:
    """The delimiters of the inline markup pairs in text[s:e], nested pairs included ("**_x_**": **, _)."""
    out, stack = [], [text[s:e]]
    while stack:
        part = stack.pop()  # a slice: the lookbehind must not see the enclosing delimiter
        for m in MARKUP_RE.finditer(part):
            out.append(m["d"])
            stack.append(m["body"])
    return out


def strip_markup(text: str) -> str:
    for _ in range(3):  # nested pairs, outermost first
        text, n = MARKUP_RE.subn(r"\g<body>", text)
        if not n:
            break
    return text


def word_texts(text: str) -> list[str]:
    return [text[a:b] for a, b in word_spans(text)]

# Line breaks as CommonMark counts them (\r\n, \r, \n), so that line numbers agree with the parser's.
_LINE_RE = re.compile(r"[^\r\n]*\S[^\r\n]*")
_BLANK_RUN_RE = re.compile(r"(?:\r\n|\r(?!\n)|\n)[ \t\f\v]*(?:\r\n|\r(?!\n)|\n)\s*")  # one CRLF is one break
_BREAK_RE = re.compile(r"\r\n?|\n")
# A line that could open a Markdown block other than a paragraph. When no line matches, CommonMark yields
# only paragraphs (the blank-line runs), so skipping the parser is exact, not a heuristic.
_MARKDOWNISH_RE = re.compile(r"^(?: {4}|\t|[ ]{0,3}(?:[#>|:=_*+`~<-]|\d{1,9}[.)]))|\|", re.M)
PROSE, LIST, NONPROSE = 0, 1, 2  # what a line of the response is, for paragraphs
BLOCK_KINDS = ("list", "table", "code", "json", "quote")
ELEMENT_KINDS = ("list_item", "table_row", "table_cell", "heading", "json_pair")
UNITS = ("response", "section", "block", "element", "paragraph", "line", "sentence", "word", "char")

# Block structure only: the spans we need come from block tokens and the raw text of inline tokens, so the
# inline pass (emphasis, links; quadratic on runs of brackets) is switched off.
_MD = MarkdownIt("commonmark", {"maxNesting": 40}).enable("table").disable(["inline", "text_join", "reference"])
_PUNKT = punkt.PunktSentenceTokenizer(punkt.load_model("english"))
# Abbreviations a reader never takes for a sentence end ("Inverters, e.g. solar units, limit output.").
_PUNKT._params.abbrev_types.update(
    ("e.g", "i.e", "vs", "cf", "viz", "approx", "al", "mr", "mrs", "ms", "dr", "prof", "eq", "eqs", "pp", "ca",
     "resp", "sect", "ch", "dept", "fig", "figs", "vol", "vols", "no", "nos"))
# Abbreviations that also end sentences ("..., pears, etc. Then we left."): the split stands unless the next
# piece goes on in lowercase or with a digit ("etc. are fruit", "Fig. 2 shows", "No. 5").
_AMBIGUOUS_ABBREVIATIONS = {"etc", "fig", "figs", "no", "nos", "vol", "min", "max", "sec", "hr", "hrs", "est",
                            "inc", "ltd", "co", "jr", "sr", "st", "approx", "ref", "refs"}
_LAST_TOKEN_RE = re.compile(r"([A-Za-z](?:[A-Za-z.]*[A-Za-z])?)\.\W*$")


def _plain_sentences(text: str) -> list[Span] | None:
    """Punkt's sentences of a leaf whose every sentence end is plain: "?" or "!", or "." right after a word of
    two or more letters that is no known abbreviation, each followed by whitespace or the end (Punkt always
    breaks there). None when any end needs Punkt's judgement (abbreviations, initials, numbers, ellipses,
    closing quotes or brackets). Most prose is plain, and this is much cheaper than Punkt."""
    out, start = [], 0
    abbreviations = _PUNKT._params.abbrev_types
    for m in _END_CHAR_RE.finditer(text):
        i = m.start()
        nxt = text[i + 1:i + 2]
        if nxt and not nxt.isspace():
            if nxt.isalnum():
                continue  # inside a token ("3.5", "e.g"): never an end
            return None
        if text[i] == ".":
            w = _LETTERS_BEFORE_RE.search(text, max(0, i - 40), i)
            if not w or w.end() != i or len(w.group()) < 2 or w.group().lower() in abbreviations or (
                    w.start() > 0 and not text[w.start() - 1].isspace()):
                return None
        out.append((start, i + 1))
        start = i + 1
        while start < len(text) and text[start].isspace():  # a piece starts at its first token, as Punkt's
            start += 1
    if text[start:].strip():
        out.append((start, len(text)))
    return out


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the word before the period at `dot` is a known abbreviation ("Dr.", "e.g."); a single letter
    at a line end is not taken for an initial ("2 W.")."""
    m = _WORD_BEFORE_DOT_RE.search(text, max(0, dot - 16), dot)
    return bool(m) and len(m.group(1)) > 1 and m.group(1).lower() in _PUNKT._params.abbrev_types


def _join_abbreviations(text: str, pieces) -> list[Span]:
    """Punkt's sentence spans of `text`, joined where a piece ends in an abbreviation that the next piece
    continues."""
    out: list[Span] = []
    n = len(text)
    for a, b in pieces:
        if out and not text[a].isalnum():
            # A leading token without letters or digits that Punkt cut off ('?*" Then', ').', '! 🎉 Next')
            # belongs to the sentence before.
            k = _NON_SPACE_RE.match(text, a, b).end()
            if k > a and not _ALNUM_RE.search(text, a, k):
                out[-1] = (out[-1][0], k)
                a = k
            if not _ALNUM_RE.search(text, a, b):  # nothing but symbols or emoji: the end of the sentence before
                out[-1] = (out[-1][0], b)
                continue
        if out:
            i = a
            while i < b and text[i] in _OPENERS:
                i += 1
            nxt = text[i] if i < n else ""
            if nxt.islower() or nxt.isdigit():  # rare: most sentences start with a capital
                m = _LAST_TOKEN_RE.search(text, out[-1][0], out[-1][1])
                # An abbreviation that goes on ("etc. are", "1.1 p.u. of rating"), or a quoted question inside a
                # sentence ('Asking "Why?" can be kind.').
                abbreviation = m and (m.group(1).lower() in _AMBIGUOUS_ABBREVIATIONS or "." in m.group(1))
                if abbreviation or _QUOTED_END_RE.search(text, out[-1][0], out[-1][1]):
                    out[-1] = (out[-1][0], b)
                    continue
        out.append((a, b))
    return out


# Punkt ends sentences only at ".", "?" or "!" followed by whitespace (after any closing quotes or brackets).
_SENTENCE_END_RE = re.compile(r"[.?!][\"'\u201d\u2019)\]*_]*\s")
_DIGIT_MARK_RE = re.compile(r"\d[.)](?:\s|$)")
_ORDERED_MARKER_RE = re.compile(r"^[ \t]*(\d{1,9})[.)](?=[ \t]|$)", re.M)
_LINE_END_RE = re.compile(r"[.?!][\"'\u201d\u2019)\]*_]*(?=[ \t]*\n[\W_]*[A-Z])")
_WORD_BEFORE_DOT_RE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_NON_SPACE_RE = re.compile(r"\S*")
_END_CHAR_RE = re.compile(r"[.?!]")
_LETTERS_BEFORE_RE = re.compile(r"[^\W\d_]+$")
_QUOTED_END_RE = re.compile(r"[?!][\"'\u201d\u2019]\W*$")
_OPENERS = frozenset("*_\"'“‘([ ")


def strip_span(text: str, start: int, end: int) -> Span:
    """The span shrunk to exclude surrounding whitespace (an all-blank span collapses to (start, start))."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class CharSpans(Sequence):
    """The char units (i, i + 1) of start..stop, made one at a time: counting the characters of a 10 MB
    response must not build ten million tuples."""

    __slots__ = ("start", "stop")

    def __init__(self, start: int, stop: int):
        self.start, self.stop = start, max(start, stop)

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self):
        return ((i, i + 1) for i in range(self.start, self.stop))

    def __getitem__(self, i):
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step != 1:
                return [self[k] for k in range(a, b, step)]
            return CharSpans(self.start + a, self.start + b)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("char index out of range")
        return self.start + i, self.start + i + 1

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, CharSpans)) else NotImplemented

    def __repr__(self) -> str:
        return f"CharSpans({self.start}, {self.stop})"


def reasoning_end(text: str) -> int:
    """Offset where the answer begins: after the last `</think>`, or 0 when there is none."""
    i = text.rfind("</think>")
    return 0 if i < 0 else i + len("</think>")


class Doc:
    """One response and its units. `root` is the whole response after any reasoning block, stripped."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"response must be a str, got {type(text).__name__}")
        self.text = text
        self.root: Span = strip_span(text, reasoning_end(text), len(text))

    # ---- plain-text units -------------------------------------------------------------------------------
    @cached_property
    def chunks(self) -> list[Span]:
        """Maximal runs of non-blank lines (v1's paragraphs): a sentence never crosses their breaks."""
        s, e = self.root
        out, start = [], s
        for m in _BLANK_RUN_RE.finditer(self.text, s, e):
            out.append(strip_span(self.text, start, m.start()))
            start = m.end()
        if start < e:
            out.append(strip_span(self.text, start, e))
        return [p for p in out if p[0] < p[1]]

    @cached_property
    def paragraphs(self) -> list[Span]:
        """Paragraphs as a reader sees them: the runs of non-blank lines with the lines of headings, thematic
        breaks, code blocks, tables and HTML cut out (they split a run and belong to no paragraph); a run made
        only of list items is a list, not a paragraph, while a line of text with its list is one paragraph."""
        s, e = self.root
        if not _MARKDOWNISH_RE.search(self.text, s, e):
            return self.chunks
        # Only headings and list items besides text (most answers): the kind of each line is plain from the
        # line itself, and the parser is not needed (tests/test_fidelity.py checks both ways agree).
        fast = None if _HARD_MARKDOWN_RE.search(self.text, s, e) or "markdown" in self.__dict__ else \
            _simple_line_kinds(self.text, s, e)
        line_starts, kinds = fast or (self.markdown.line_starts, self.markdown.line_kinds)
        out = []
        for a, b in self.chunks:
            first = bisect.bisect_right(line_starts, a) - 1
            last = bisect.bisect_right(line_starts, b - 1) - 1
            run, has_prose = [], False
            for line in range(first, last + 2):
                kind = kinds[line] if line <= last else NONPROSE
                if kind == NONPROSE:
                    if run and has_prose:
                        out.append(strip_span(self.text, max(a, line_starts[run[0]]),
                                              min(b, line_starts[run[-1] + 1] - 1)))
                    run, has_prose = [], False
                else:
                    run.append(line)
                    has_prose |= kind == PROSE
        return [p for p in out if p[0] < p[1]]

    @cached_property
    def lines(self) -> list[Span]:
        s, e = self.root
        return [strip_span(self.text, m.start(), m.end()) for m in _LINE_RE.finditer(self.text, s, e)]

    @cached_property
    def words(self) -> list[Span]:
        """The words of the response; an ordered list's marker ("1.", "2)") is not a word."""
        words = word_spans(self.text, *self.root)
        if not _DIGIT_MARK_RE.search(self.text, *self.root):
            return words
        markers = {m.span(1) for m in _ORDERED_MARKER_RE.finditer(self.text, *self.root)}
        return [w for w in words if w not in markers] if markers else words

    @cached_property
    def all_sentences(self) -> list[Span]:
        """Sentences of every text leaf: headings, table cells and code too."""
        return [sp for leaf in self.text_leaves for sp in self._leaf_sentences(leaf)]

    @cached_property
    def sentences(self) -> list[Span]:
        """Sentences of prose: paragraphs, list items and block quotes; not headings, table cells, code or HTML
        (a segment inside one of those still has its own sentences, see `within`)."""
        s, e = self.root
        if not _MARKDOWNISH_RE.search(self.text, s, e):
            return self.all_sentences
        skip = self.markdown.nonprose_leaves
        return [sp for leaf in self.text_leaves if not (skip and _contained(skip, leaf))
                for sp in self._leaf_sentences(leaf)]

    def _leaf_sentences(self, leaf: Span) -> list[Span]:
        cache = self.__dict__.setdefault("_sentences_of", {})
        if leaf in cache:
            return cache[leaf]
        ls, le = leaf
        if not _SENTENCE_END_RE.search(self.text, ls, le):  # no place Punkt could split: one sentence
            cache[leaf] = [leaf]
            return cache[leaf]
        out, text = [], self.text[ls:le]
        pieces = _plain_sentences(text)
        for a, b in _join_abbreviations(text, _PUNKT.span_tokenize(text) if pieces is None else pieces):
            # A sentence end at a line end, the next line starting with a capital, ends the sentence even where
            # Punkt reads an initial ("2 W.\nAbove ...").
            cuts = [m.end() for m in _LINE_END_RE.finditer(text, a, b) if not _is_abbreviation(text, m.start())
                    ] if text.find("\n", a, b) >= 0 else []
            for x, y in zip([a] + cuts, cuts + [b]):
                x, y = strip_span(self.text, ls + x, ls + y)
                if x < y:
                    out.append((x, y))
        cache[leaf] = out
        return out

    @cached_property
    def text_leaves(self) -> list[Span]:
        """Runs of text that sentences live in: the chunks, cut at every Markdown block's text."""
        s, e = self.root
        if not _MARKDOWNISH_RE.search(self.text, s, e):
            return self.chunks
        # A code block may hold blank lines; a sentence still never crosses a blank line, so each
        # leaf is cut by the chunks it overlaps (both lists are sorted: one bisect per leaf).
        chunks, ends = self.chunks, [pe for _, pe in self.chunks]
        leaves = []
        for a, b in self.markdown.leaves:
            if not _BLANK_RUN_RE.search(self.text, a, b):
                leaves.append((a, b))
                continue
            for i in range(bisect.bisect_right(ends, a), len(chunks)):
                ps, pe = chunks[i]
                if ps >= b:
                    break
                lo, hi = strip_span(self.text, max(a, ps), min(b, pe))
                if lo < hi:
                    leaves.append((lo, hi))
        leaves.sort()
        return leaves

    # ---- Markdown structure -----------------------------------------------------------------------------
    @cached_property
    def markdown(self) -> "_Markdown":
        return _Markdown(self.text, *self.root)

    @cached_property
    def prose_paragraphs(self) -> list[Span]:
        s, e = self.root
        return self.markdown.prose if _MARKDOWNISH_RE.search(self.text, s, e) else self.paragraphs

    @cached_property
    def prose_sentences(self) -> list[Span]:
        return [sp for sp in self.sentences if _contained(self.prose_paragraphs, sp)]

    def units(self, unit: str, kind: str | None = None, prose: bool | str = False) -> list[Span]:
        """All units of a kind over the root, in document order. `prose` True keeps only paragraphs (and their
        sentences) that are CommonMark paragraphs outside lists and tables (schema extension X7); "all" gives
        v1's paragraphs (runs of non-blank lines) and the sentences of every text leaf (option `all_text`)."""
        if unit == "paragraph":
            return self.chunks if prose == "all" else self.prose_paragraphs if prose else self.paragraphs
        if unit == "sentence":
            return self.all_sentences if prose == "all" else self.prose_sentences if prose else self.sentences
        if unit == "response":
            return [self.root]
        if unit == "line":
            return self.lines
        if unit == "word":
            return self.words
        if unit == "char":
            return CharSpans(*self.root)
        if unit == "section":
            return self.markdown.sections
        if unit == "block":
            return self.markdown.blocks[kind]
        if unit == "element":
            return self.markdown.elements[kind]
        raise ValueError(f"unknown unit {unit!r}")

    def within(self, unit: str, seg: Span, kind: str | None = None, prose: bool | str = False) -> list[Span]:
        """The units inside one segment, in order. Text units overlapping the segment are clipped to it (a
        sentence of a line is the part of the sentence on that line); structural units must lie inside it,
        and for lists only the outermost inside the segment count as its list blocks."""
        s, e = seg
        if unit == "response":
            return [seg]
        if unit == "char":
            return CharSpans(s, e)
        spans = self.units(unit, kind, prose)
        if unit == "sentence" and not prose and seg != self.root and self.text_leaves is not self.chunks \
                and _contained(self.markdown.nonprose_leaves, seg):
            # A heading's, a table cell's or a code block's own sentences.
            spans, unit = self.all_sentences, "all_sentences"
        if unit in ("block", "element", "section"):
            inside = []
            for i in range(bisect.bisect_left(spans, (s, -1)), len(spans)):
                if spans[i][0] >= e:
                    break
                if spans[i][1] <= e:
                    inside.append(spans[i])
            if unit == "block" and kind == "list":
                inside = sorted(_outermost(inside) + self._lists_crossing(s, e))
            return inside
        if seg == self.root:
            return spans
        # Text units are disjoint and sorted, so their starts and ends are sorted too: the units overlapping
        # the segment are one slice, and only the two at its edges may need clipping.
        starts, ends = self._bounds(unit, prose)
        i, j = bisect.bisect_right(ends, s), bisect.bisect_left(starts, e)
        out = spans[i:j]
        if unit.endswith("sentences") or unit == "sentence":
            if seg in self._line_set:  # the sentences on a line are whole, even when wrapped onto the next
                return out
        if out and (out[0][0] < s or out[-1][1] > e):
            out = [c for c in (self._clip(unit, a, b, s, e) for a, b in out) if c]
        return out

    @cached_property
    def _line_set(self) -> set:
        return set(self.lines)

    def _lists_crossing(self, s: int, e: int) -> list[Span]:
        """The part of a top-level list that crosses the segment's edge, when whole items of it lie inside:
        CommonMark merges the lists of two paragraphs separated by a blank line into one loose list, and a
        reader still sees one list in each paragraph."""
        md = self.markdown
        tops, items = md.top_lists, md.elements["list_item"]
        out = []
        for i in range(max(0, bisect.bisect_left(tops, (s, -1)) - 1), len(tops)):
            sp = tops[i]
            if sp[0] >= e:
                break
            if sp[1] <= s or (s <= sp[0] and sp[1] <= e) or _contained(items, (s, e)):
                continue  # outside, inside (counted already), or the segment is part of one item
            j = bisect.bisect_left(items, (s, -1))
            inside = []
            while j < len(items) and items[j][0] < e:
                if items[j][1] <= e and md.list_of.get(items[j]) == sp:
                    inside.append(items[j])
                j += 1
            if inside:
                part = (inside[0][0], inside[-1][1])
                md.ordered.setdefault(part, md.ordered.get(sp))
                out.append(part)
        return out

    def _clip(self, unit: str, a: int, b: int, s: int, e: int) -> Span | None:
        if s <= a and b <= e:
            return a, b
        a, b = max(a, s), min(b, e)
        if unit != "word":
            a, b = strip_span(self.text, a, b)
        elif not _ALNUM_RE.search(self.text, a, b):
            return None  # the part of a cut word inside the segment holds no letter or digit
        return (a, b) if a < b else None

    def _bounds(self, unit: str, prose: bool | str) -> tuple[list[int], list[int]]:
        cache = self.__dict__.setdefault("_bounds_cache", {})
        key = (unit, prose)
        if key not in cache:
            spans = self.all_sentences if unit == "all_sentences" else self.units(unit, None, prose)
            cache[key] = ([a for a, _ in spans], [b for _, b in spans])
        return cache[key]


# Lines that need the CommonMark parser to classify: fences, tables, HTML, quotes, indented code, rules and setext
# underlines (a line of only - * _ =), link reference definitions. Without them a line's kind is its own.
_HARD_MARKDOWN_RE = re.compile(r"^(?: {0,3}(?:```|~~~|<|>|\[)| {4}|\t|[ \t]*[-*_=][-*_= \t]*$)|\|", re.M)
_ATX_RE = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_ITEM_RE = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


def _simple_line_kinds(text: str, s: int, e: int) -> tuple[list[int], list[int]]:
    """(line starts, kind of each line) of text[s:e] holding no _HARD_MARKDOWN_RE line: an ATX heading is
    NONPROSE, a list item's first line LIST, an indented line after a list item LIST (its continuation), any
    other line PROSE (a lazy continuation after an item included), as the parser-based kinds give."""
    starts = [s] + [m.end() for m in _BREAK_RE.finditer(text, s, e)] + [e + 1]
    kinds, in_list, column, after_blank = [], False, 0, False
    for i in range(len(starts) - 1):
        a = starts[i]
        line = text[a:starts[i + 1]]
        body = line.lstrip(" \t")
        if not body.strip():  # blank (only between chunks): keeps the list open
            kinds.append(PROSE)
            after_blank = True
            continue
        indent = len(line) - len(body)
        head = body[0]
        m = _ITEM_RE.match(text, a) if head in "-*+" or head.isdigit() else None
        if m and head.isdigit() and kinds and kinds[-1] == PROSE and not in_list and not after_blank \
                and m.group().strip()[:-1] != "1":
            m = None  # an ordered item other than 1 cannot interrupt a paragraph: a lazy continuation line
        if head == "#" and _ATX_RE.match(text, a):
            kinds.append(NONPROSE)
            in_list = False
        elif m:
            kinds.append(LIST)
            # The item's content column: a line after a blank one belongs to the item only when indented as far.
            rest = text[m.end():starts[i + 1]]
            own = m.end() - a + len(rest) - len(rest.lstrip(" \t")) if rest.strip() else m.end() - a
            # The content column of the open top-level item: a marker left of it starts a new top-level item.
            column = column if in_list and indent >= column else own
            in_list = True
        elif in_list and indent and (not after_blank or indent >= column):
            kinds.append(LIST)
        else:
            kinds.append(PROSE)
            in_list = in_list and not after_blank  # a lazy continuation line keeps the item open
        after_blank = False
    kinds.append(NONPROSE)  # the sentinel line past the end
    return starts, kinds


def _outermost(spans: list[Span]) -> list[Span]:
    """The spans that no other (different) span contains, in one pass: in order of start, widest first, a
    span is contained exactly when an earlier one reaches as far."""
    out: list[Span] = []
    reach = -1
    for sp in sorted(spans, key=lambda x: (x[0], -x[1])):
        if sp[1] > reach or (out and sp == out[-1]):
            out.append(sp)
        reach = max(reach, sp[1])
    return out


def _contained(sorted_spans: list[Span], sp: Span) -> bool:
    i = bisect.bisect_right(sorted_spans, (sp[0], float("inf"))) - 1
    return i >= 0 and sorted_spans[i][0] <= sp[0] and sp[1] <= sorted_spans[i][1]


class _Markdown:
    """Block structure from markdown-it-py, with every span mapped back to offsets in the response.

    Besides the unit lists it keeps the attributes that unit options filter on: heading `level` (of heading
    elements and sections), `ordered` (of list blocks and items), code `lang`, and each data cell's `column`
    (index, header text)."""

    def __init__(self, text: str, start: int, end: int):
        self.text = text
        src = text[start:end]
        # Line i of src starts at line_starts[i] (absolute offset); one sentinel past the end.
        self.line_starts = [start] + [start + m.end() for m in _BREAK_RE.finditer(src)] + [end + 1]
        self.blocks: dict[str, list[Span]] = {k: [] for k in BLOCK_KINDS}
        self.elements: dict[str, list[Span]] = {k: [] for k in ELEMENT_KINDS}
        self.leaves: list[Span] = []
        self.nonprose_leaves: list[Span] = []  # headings, table cells, code and HTML: text but not prose
        self.prose: list[Span] = []  # CommonMark paragraphs outside lists and tables
        self._nonprose_maps: list[list[int]] = []  # line ranges of headings, rules, code, tables, HTML
        self._item_maps: list[list[int]] = []
        self.list_of: dict[Span, Span] = {}  # list item -> the list it belongs to
        self.json_docs: list[tuple[Span, object]] = []
        self.list_depths: list[tuple[Span, int]] = []
        self.level: dict[Span, int] = {}
        self.ordered: dict[Span, bool] = {}
        self.lang: dict[Span, str] = {}
        self.column: dict[Span, tuple[int, str]] = {}
        self._headings: list[tuple[int, int]] = []  # (level, line)
        self._walk(_MD.parse(src))
        whole = strip_span(text, start, end)
        # The whole response is a JSON document too when it parses as one (no fence needed).
        if not self.blocks["json"] and whole[0] < whole[1] and text[whole[0]] in "[{":
            doc = _parse_json(text[whole[0]:whole[1]])
            if doc is not _NOT_JSON:
                self.blocks["json"].append(whole)
                self.json_docs.append((whole, doc))
        for span, doc in self.json_docs:
            self.elements["json_pair"].extend([span] * _count_pairs(doc))
        for spans in (*self.blocks.values(), *self.elements.values(), self.leaves, self.prose,
                      self.nonprose_leaves):
            spans.sort()
        self.top_lists = _outermost(self.blocks["list"])
        # By span, so that the ones inside a segment are found by bisection (never comparing the documents).
        self.json_docs.sort(key=lambda x: x[0])
        self.list_depths.sort(key=lambda x: x[0])

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset) - 1

    @cached_property
    def line_kinds(self) -> list[int]:
        """Per line of the response: PROSE, LIST (a list item's line) or NONPROSE (heading, rule, code, table,
        HTML), for the reader's paragraphs. A lazy continuation line after a list item ("- b\nText.") is prose,
        an indented one is the item's."""
        kinds = [PROSE] * len(self.line_starts)
        for a, b in self._item_maps:
            kinds[a] = LIST
            for line in range(a + 1, min(b, len(kinds))):
                if self.text[self.line_starts[line]:self.line_starts[line] + 1] in (" ", "\t"):
                    kinds[line] = LIST
        for a, b in self._nonprose_maps:
            kinds[a:b] = [NONPROSE] * (min(b, len(kinds)) - a)
        return kinds

    def _walk(self, toks) -> None:
        lists: list[bool] = []  # ordered flag of each open list
        list_spans: list[Span] = []
        items = in_tbody = 0
        row_cursor = row_end = column = 0
        headers: list[str] = []
        for i, t in enumerate(toks):
            kind = t.type
            if kind in ("bullet_list_open", "ordered_list_open"):
                span = self._line_span(*t.map)
                lists.append(kind == "ordered_list_open")
                list_spans.append(span)
                self.blocks["list"].append(span)
                self.list_depths.append((span, len(lists)))
                self.ordered[span] = lists[-1]
            elif kind in ("bullet_list_close", "ordered_list_close"):
                lists.pop()
                list_spans.pop()
            elif kind == "list_item_open":
                items += 1
                span = self._line_span(*t.map)
                # The item's text starts after its marker ("- ", "1. ").
                mark = self.text.find(t.markup, span[0], span[1])
                span = strip_span(self.text, mark + len(t.markup) if mark >= 0 else span[0], span[1])
                self.elements["list_item"].append(span)
                self.ordered[span] = lists[-1]
                self.list_of[span] = list_spans[-1]
                self._item_maps.append(t.map)
            elif kind == "list_item_close":
                items -= 1
            elif kind == "table_open":
                self.blocks["table"].append(self._line_span(*t.map))
                self._nonprose_maps.append(t.map)
                headers = []
            elif kind in ("tbody_open", "tbody_close"):
                in_tbody = kind == "tbody_open"
            elif kind == "tr_open":
                row_cursor = self.line_starts[t.map[0]]
                row_end = self.line_starts[t.map[0] + 1]
                column = 0
                if in_tbody:
                    self.elements["table_row"].append(self._line_span(*t.map))
            elif kind in ("fence", "code_block"):
                a, b = t.map
                if kind == "fence":
                    a += 1
                    if b - 1 >= a and self.text.startswith(t.markup, self._line_span(b - 1, b)[0]):
                        b -= 1
                self._nonprose_maps.append(t.map)
                span = self._line_span(a, b)
                self.blocks["code"].append(span)
                self.nonprose_leaves.append(span)
                self.lang[span] = t.info.split()[0].lower() if t.info.strip() else ""
                self.leaves.append(span)
                doc = _parse_json(t.content)
                if doc is not _NOT_JSON and (self.lang[span] == "json" or isinstance(doc, (dict, list))):
                    self.blocks["json"].append(span)
                    self.json_docs.append((span, doc))
            elif kind == "blockquote_open":
                self.blocks["quote"].append(self._line_span(*t.map))
            elif kind == "html_block":
                span = self._line_span(*t.map)
                self.leaves.append(span)
                self.nonprose_leaves.append(span)
                self._nonprose_maps.append(t.map)
            elif kind == "hr":
                self._nonprose_maps.append(t.map)
            elif kind == "inline":
                parent = toks[i - 1].type
                first = t.content.split("\n", 1)[0]
                if parent in ("th_open", "td_open"):
                    # Cells share their row's line: each cell's text is found after the previous cell's.
                    a = self.text.find(first, row_cursor, row_end) if first else -1
                    if a < 0:
                        bar = self.text.find("|", row_cursor, row_end)
                        a = bar + 1 if bar >= 0 else row_cursor
                    span = (a, a + len(first))
                    row_cursor = span[1]
                    if parent == "th_open":
                        headers.append(t.content.strip())
                    else:
                        self.elements["table_cell"].append(span)
                        self.column[span] = (column, headers[column] if column < len(headers) else "")
                    column += 1
                    self.leaves.append(span)
                    self.nonprose_leaves.append(span)
                elif t.map is not None:
                    line = self.line_starts[t.map[0]]
                    a = self.text.find(first, line, self.line_starts[t.map[0] + 1]) if first else -1
                    span = strip_span(self.text, a if a >= 0 else line, self._line_span(*t.map)[1])
                    if parent == "heading_open" and toks[i - 1].markup == "-":
                        # "Text\n---": CommonMark's setext heading, but a reader (and the model that wrote it)
                        # sees a paragraph and a separator line; between two "---" lines, a YAML front matter.
                        a0, b0 = toks[i - 1].map
                        if i >= 2 and toks[i - 2].type == "hr" and toks[i - 2].map[1] == a0:
                            self._nonprose_maps.append([a0, b0])
                            self.nonprose_leaves.append(span)
                        else:
                            self._nonprose_maps.append([b0 - 1, b0])
                            if not items:
                                self.prose.append(span)
                    elif parent == "heading_open":
                        level = int(toks[i - 1].tag[1])
                        self._headings.append((level, toks[i - 1].map[0]))
                        self.elements["heading"].append(span)
                        self.level[span] = level
                        self.nonprose_leaves.append(span)
                        self._nonprose_maps.append(toks[i - 1].map)
                    elif parent == "paragraph_open" and not items:
                        self.prose.append(span)
                    self.leaves.append(span)

    def _line_span(self, a: int, b: int) -> Span:
        last = len(self.line_starts) - 1
        a, b = min(a, last), min(b, last)
        return strip_span(self.text, self.line_starts[a], min(self.line_starts[b] - 1, len(self.text)))

    @cached_property
    def item_own(self) -> dict[Span, Span]:
        """Each list item's own text: up to its first nested list (extension X6b, `exclude_nested`)."""
        lists = self.blocks["list"]
        out = {}
        for a, b in self.elements["list_item"]:
            i = bisect.bisect_right(lists, (a, len(self.text) + 1))
            nested = lists[i] if i < len(lists) and lists[i][1] <= b else None
            out[(a, b)] = strip_span(self.text, a, nested[0]) if nested else (a, b)
        return out

    @cached_property
    def sections(self) -> list[Span]:
        """A heading and what follows it up to the next heading of the same or a higher level."""
        out = []
        end_line = len(self.line_starts) - 1
        # The next heading of the same or a higher level, for every heading, with one stack from the end.
        stops, later = [end_line] * len(self._headings), []
        for j in range(len(self._headings) - 1, -1, -1):
            level = self._headings[j][0]
            while later and later[-1][0] > level:
                later.pop()
            if later:
                stops[j] = later[-1][1]
            later.append(self._headings[j])
        for (level, line), stop in zip(self._headings, stops):
            span = self._line_span(line, stop)
            out.append(span)
            self.level[span] = level
        return sorted(out)


_NOT_JSON = object()


def _parse_json(s: str):
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _count_pairs(doc) -> int:
    """Key-value pairs in all objects of a JSON document, iteratively (deep nesting must not recurse)."""
    n, stack = 0, [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            n += len(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return n


def json_depth(doc) -> int:
    """Deepest container nesting: a top-level object or array has depth 1; a scalar has 0."""
    best, stack = 0, [(doc, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            best = max(best, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return best
