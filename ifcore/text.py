"""Segmentation of one response into the ScopeIF response units, computed once and shared by all its constraints.

A `Doc` wraps the response string. Every span it hands out is a (start, end) pair of character offsets into
that original string (end exclusive), so verdict evidence maps straight onto the policy's tokens. Each unit
list is built lazily on first use and cached: a response whose constraints never ask for sentences never
runs the sentence splitter.

Units (constraint-schema.md, "Segmentation rules"):
- paragraph: a maximal run of non-blank lines.     - line: a non-blank line.
- sentence: Punkt (English parameters, abbreviation-aware) inside each text leaf of the Markdown tree,
  never across a paragraph break.
- word: a maximal run of non-whitespace holding a letter or digit; each CJK ideograph is one word.
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
# Words: runs of non-whitespace (each CJK ideograph alone) kept when they hold a letter or digit. Matching
# runs first and testing them second keeps this linear on long runs of symbols ("[[[[...").
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_ALNUM_RE = re.compile(r"[^\W_]")


def word_spans(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    end = len(text) if end is None else end
    return [m.span() for m in _TOKEN_RE.finditer(text, start, end) if _ALNUM_RE.search(text, *m.span())]


def word_texts(text: str) -> list[str]:
    return [text[a:b] for a, b in word_spans(text)]

# Line breaks as CommonMark counts them (\r\n, \r, \n), so that line numbers agree with the parser's.
_LINE_RE = re.compile(r"[^\r\n]*\S[^\r\n]*")
_BLANK_RUN_RE = re.compile(r"(?:\r\n?|\n)[ \t\f\v]*(?:\r\n?|\n)\s*")
_BREAK_RE = re.compile(r"\r\n?|\n")
# A line that could open a Markdown block other than a paragraph. When no line matches, CommonMark yields
# only paragraphs (the blank-line runs), so skipping the parser is exact, not a heuristic.
_MARKDOWNISH_RE = re.compile(r"^(?: {4}|\t|[ ]{0,3}(?:[#>|:=_*+`~<-]|\d{1,9}[.)]))|\|", re.M)
BLOCK_KINDS = ("list", "table", "code", "json", "quote")
ELEMENT_KINDS = ("list_item", "table_row", "table_cell", "heading", "json_pair")
UNITS = ("response", "section", "block", "element", "paragraph", "line", "sentence", "word", "char")

# Block structure only: the spans we need come from block tokens and the raw text of inline tokens, so the
# inline pass (emphasis, links; quadratic on runs of brackets) is switched off.
_MD = MarkdownIt("commonmark", {"maxNesting": 40}).enable("table").disable(["inline", "text_join"])
_PUNKT = punkt.PunktSentenceTokenizer(punkt.load_model("english"))


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
    def paragraphs(self) -> list[Span]:
        s, e = self.root
        out, start = [], s
        for m in _BLANK_RUN_RE.finditer(self.text, s, e):
            out.append(strip_span(self.text, start, m.start()))
            start = m.end()
        if start < e:
            out.append(strip_span(self.text, start, e))
        return [p for p in out if p[0] < p[1]]

    @cached_property
    def lines(self) -> list[Span]:
        s, e = self.root
        return [strip_span(self.text, m.start(), m.end()) for m in _LINE_RE.finditer(self.text, s, e)]

    @cached_property
    def words(self) -> list[Span]:
        return word_spans(self.text, *self.root)

    @cached_property
    def sentences(self) -> list[Span]:
        out = []
        for ls, le in self.text_leaves:
            for a, b in _PUNKT.span_tokenize(self.text[ls:le]):
                a, b = strip_span(self.text, ls + a, ls + b)
                if a < b:
                    out.append((a, b))
        return out

    @cached_property
    def text_leaves(self) -> list[Span]:
        """Runs of prose that sentences live in: the paragraphs, cut at every Markdown block's text."""
        s, e = self.root
        if not _MARKDOWNISH_RE.search(self.text, s, e):
            return self.paragraphs
        # A code block may hold blank lines; a sentence still never crosses a paragraph break, so each
        # leaf is cut by the paragraphs it overlaps (both lists are sorted: one bisect per leaf).
        paragraphs, ends = self.paragraphs, [pe for _, pe in self.paragraphs]
        leaves = []
        for a, b in self.markdown.leaves:
            if not _BLANK_RUN_RE.search(self.text, a, b):
                leaves.append((a, b))
                continue
            for i in range(bisect.bisect_right(ends, a), len(paragraphs)):
                ps, pe = paragraphs[i]
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

    def units(self, unit: str, kind: str | None = None, prose: bool = False) -> list[Span]:
        """All units of a kind over the root, in document order. `prose` keeps only paragraphs (and their
        sentences) that are CommonMark paragraphs outside lists and tables (schema extension X7)."""
        if unit == "paragraph":
            return self.prose_paragraphs if prose else self.paragraphs
        if unit == "sentence":
            return self.prose_sentences if prose else self.sentences
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

    def within(self, unit: str, seg: Span, kind: str | None = None, prose: bool = False) -> list[Span]:
        """The units inside one segment, in order. Text units overlapping the segment are clipped to it (a
        sentence of a line is the part of the sentence on that line); structural units must lie inside it,
        and for lists only the outermost inside the segment count as its list blocks."""
        s, e = seg
        if unit == "response":
            return [seg]
        if unit == "char":
            return CharSpans(s, e)
        spans = self.units(unit, kind, prose)
        if unit in ("block", "element", "section"):
            inside = []
            for i in range(bisect.bisect_left(spans, (s, -1)), len(spans)):
                if spans[i][0] >= e:
                    break
                if spans[i][1] <= e:
                    inside.append(spans[i])
            if unit == "block" and kind == "list":
                inside = _outermost(inside)
            return inside
        if seg == self.root:
            return spans
        # Text units are disjoint and sorted, so their starts and ends are sorted too: the units overlapping
        # the segment are one slice, and only the two at its edges may need clipping.
        starts, ends = self._bounds(unit, prose)
        i, j = bisect.bisect_right(ends, s), bisect.bisect_left(starts, e)
        out = spans[i:j]
        if out and (out[0][0] < s or out[-1][1] > e):
            out = [c for c in (self._clip(unit, a, b, s, e) for a, b in out) if c]
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

    def _bounds(self, unit: str, prose: bool) -> tuple[list[int], list[int]]:
        cache = self.__dict__.setdefault("_bounds_cache", {})
        key = (unit, prose)
        if key not in cache:
            spans = self.units(unit, None, prose)
            cache[key] = ([a for a, _ in spans], [b for _, b in spans])
        return cache[key]


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
        self.prose: list[Span] = []  # CommonMark paragraphs outside lists and tables
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
        for spans in (*self.blocks.values(), *self.elements.values(), self.leaves, self.prose):
            spans.sort()
        # By span, so that the ones inside a segment are found by bisection (never comparing the documents).
        self.json_docs.sort(key=lambda x: x[0])
        self.list_depths.sort(key=lambda x: x[0])

    def _walk(self, toks) -> None:
        lists: list[bool] = []  # ordered flag of each open list
        items = in_tbody = 0
        row_cursor = row_end = column = 0
        headers: list[str] = []
        for i, t in enumerate(toks):
            kind = t.type
            if kind in ("bullet_list_open", "ordered_list_open"):
                span = self._line_span(*t.map)
                lists.append(kind == "ordered_list_open")
                self.blocks["list"].append(span)
                self.list_depths.append((span, len(lists)))
                self.ordered[span] = lists[-1]
            elif kind in ("bullet_list_close", "ordered_list_close"):
                lists.pop()
            elif kind == "list_item_open":
                items += 1
                span = self._line_span(*t.map)
                # The item's text starts after its marker ("- ", "1. ").
                mark = self.text.find(t.markup, span[0], span[1])
                span = strip_span(self.text, mark + len(t.markup) if mark >= 0 else span[0], span[1])
                self.elements["list_item"].append(span)
                self.ordered[span] = lists[-1]
            elif kind == "list_item_close":
                items -= 1
            elif kind == "table_open":
                self.blocks["table"].append(self._line_span(*t.map))
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
                span = self._line_span(a, b)
                self.blocks["code"].append(span)
                self.lang[span] = t.info.split()[0].lower() if t.info.strip() else ""
                self.leaves.append(span)
                doc = _parse_json(t.content)
                if doc is not _NOT_JSON and (self.lang[span] == "json" or isinstance(doc, (dict, list))):
                    self.blocks["json"].append(span)
                    self.json_docs.append((span, doc))
            elif kind == "blockquote_open":
                self.blocks["quote"].append(self._line_span(*t.map))
            elif kind == "html_block":
                self.leaves.append(self._line_span(*t.map))
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
                elif t.map is not None:
                    line = self.line_starts[t.map[0]]
                    a = self.text.find(first, line, self.line_starts[t.map[0] + 1]) if first else -1
                    span = strip_span(self.text, a if a >= 0 else line, self._line_span(*t.map)[1])
                    if parent == "heading_open":
                        level = int(toks[i - 1].tag[1])
                        self._headings.append((level, toks[i - 1].map[0]))
                        self.elements["heading"].append(span)
                        self.level[span] = level
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
