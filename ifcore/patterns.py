"""Regular expressions from labels (a `matches` target): Python syntax, matched without catastrophic backtracking.

A label's pattern is parsed by Python's own parser and written out again with every character-level rule spelled
as an explicit class of code points (\\w, \\d, \\s, `.`, case-insensitive letters, \\b), computed from Python's
own matcher, so the engines below find the matches Python's `re` finds. Two engines:
- RE2 (google-re2), linear in the text, for every pattern without lookaround, backreferences, possessive or
  atomic parts, Unicode word boundaries or an empty match (almost all label patterns);
- the `regex` module (backtracking, GIL released) for the rest, under the caller's CPU-time deadline: a search
  that would pass it stops, and the caller scores the segment as unevaluated.
Patterns Python rejects, repeat counts above 1000 and programs RE2 cannot hold are rejected when the label is
validated (ValueError with the reason).
"""
from __future__ import annotations

import bisect
import functools
import gc
import re
import threading
import time
from re import _compiler, _parser
from re import _constants as sre

import _sre
import re2

MAX_REPEAT = 1000
MAX_PATTERN = 10_000
_TOP = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a rejected label pattern is reported to the caller, not printed by RE2
_RE2_OPTIONS.max_mem = 8 << 20

Intervals = list[tuple[int, int]]  # sorted, disjoint, inclusive code-point ranges

_GC = threading.local()  # this thread's CPU seconds spent in garbage collection, and when the running one began


def _count_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _GC.began = time.thread_time()
    elif getattr(_GC, "began", None) is not None:
        _GC.seconds = getattr(_GC, "seconds", 0.0) + time.thread_time() - _GC.began
        _GC.began = None


gc.callbacks.append(_count_gc)  # collections run, and call back, in the thread that triggered them


def cpu_clock() -> float:
    """This thread's CPU seconds outside garbage collection: the clock of the label-regex budgets. A full collection
    of a large heap (a reward worker with torch loaded: 0.3 s on a slow day) is no work of the pattern's, and
    counting it let an ordinary lookaround pattern run out of its budget and flip a verdict."""
    return time.thread_time() - getattr(_GC, "seconds", 0.0)


class _NeedsBacktracking(Exception):
    """The pattern uses a construct that RE2 cannot run with Python's meaning."""


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str):
    """A function `(text, deadline) -> [(start, end)] | None`: the non-empty matches of `pattern` in `text`, as
    `re.finditer` finds them, or None when the search passed `deadline` (a `cpu_clock()` value).
    ValueError with the reason when the pattern cannot be used."""
    if not isinstance(pattern, str):
        raise ValueError(f"expected a string, got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"longer than {MAX_PATTERN} characters")
    try:
        tree = _parser.parse(pattern, 0)
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e})") from None
    except OverflowError:
        raise ValueError("a repeat count too large") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    flags = tree.state.flags
    try:
        _check_repeats(tree)
        if tree.getwidth()[0] == 0:  # RE2 steps over an empty match differently from Python
            raise _NeedsBacktracking
        fast = re2.compile(_emit(tree, flags, "re2"), _RE2_OPTIONS)
    except _NeedsBacktracking:
        fast = None
    except re2.error as e:
        raise ValueError(f"too large for the linear-time engine ({e})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    uses_dollar = _ends_before_newline(tree)
    if fast is None:
        _compile_regex(tree, flags, None)  # a pattern the backtracking engine rejects is rejected at validation

    @functools.lru_cache(maxsize=64)
    def slow(alphabet: frozenset | None):
        # The backtracking engine tests a class range by range: classes cut down to the characters of the
        # text (ASCII and the few others a response holds) make it ~10x faster and match the same.
        keep = None if alphabet is None else _normalize([(0, 127)] + [(ord(c), ord(c)) for c in alphabet])
        return _compile_regex(tree, flags, keep)

    def search(text: str, deadline: float) -> list[tuple[int, int]] | None:
        if fast is not None and not (uses_dollar and text.endswith("\n")):
            try:
                return _re2_spans(fast, text, deadline)
            except UnicodeEncodeError:  # lone surrogates: only the backtracking engine reads them
                pass
        left = deadline - cpu_clock()
        if left <= 0:
            return None
        try:
            # The timeout is wall time, which only runs faster than this thread's CPU time: the budget holds.
            alphabet = frozenset(c for c in set(text) if c > "\x7f")
            rx = slow(alphabet if len(alphabet) <= 64 else None)
            hits = rx.finditer(text, timeout=min(left, 3600.0), concurrent=True)
            out = [m.span() for m in hits if m.end() > m.start()]
        except TimeoutError:
            return None
        return out if cpu_clock() <= deadline else None

    search.linear = fast is not None
    return search


def _re2_spans(rx, text: str, deadline: float) -> list[tuple[int, int]] | None:
    """The matches, one RE2 search after the other (the wrapper's finditer costs ~10x more per match)."""
    data = text.encode()
    search, end, anchor = rx._regexp.Match, len(data), re2._Anchor.UNANCHORED
    out, pos = [], 0
    while pos < end:
        a, b = search(anchor, data, pos, end)[0]
        if a < 0:
            break
        out.append((a, b))
        pos = b  # every match is non-empty (empty ones go to the other engine)
        # Each search is linear, but many matches that each look far ahead add up: check now and then.
        if len(out) % 64 == 0 and cpu_clock() > deadline:
            return None
    if end != len(text):  # UTF-8 byte offsets to str offsets, in one pass
        chars, last, spans = 0, 0, []
        for a, b in out:
            chars += re2._re2.BytesToCharLen(data, last, a)
            start = chars
            chars += re2._re2.BytesToCharLen(data, a, b)
            last = b
            spans.append((start, chars))
        out = spans
    return out


def _compile_regex(tree, flags, keep):
    import regex

    try:
        return regex.compile(_emit(tree, flags, "regex", keep), regex.V0)
    except (regex.error, RecursionError) as e:
        raise ValueError(f"the backtracking engine cannot run it ({e})") from None


def _check_repeats(tree) -> None:
    for op, av in _walk(tree):
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            lo, hi = av[0], av[1]
            if lo > MAX_REPEAT or (hi != sre.MAXREPEAT and hi > MAX_REPEAT):
                raise ValueError(f"repeat count {hi if hi != sre.MAXREPEAT else lo} above {MAX_REPEAT}")


def _walk(tree):
    stack = [tree]
    while stack:
        for op, av in stack.pop():
            yield op, av
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
                stack.append(av[2])
            elif op == sre.SUBPATTERN:
                stack.append(av[3])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                stack.append(av[1])
            elif op == sre.ATOMIC_GROUP:
                stack.append(av)
            elif op == sre.BRANCH:
                stack.extend(av[1])
            elif op == sre.GROUPREF_EXISTS:
                stack.extend(x for x in av[1:] if x is not None)


def _ends_before_newline(tree) -> bool:
    """Whether the pattern has a `$`: outside multiline mode Python's matches before a final newline too, RE2's
    only at the end, so a text ending in a newline goes to the backtracking engine."""
    return any(op == sre.AT and av == sre.AT_END for op, av in _walk(tree))


# ---- writing the tree out -------------------------------------------------------------------------------

def _emit(tree, flags: int, target: str, keep: Intervals | None = None) -> str:
    out = []
    for op, av in tree:
        out.append(_emit_node(op, av, flags, target, keep))
    return "".join(out)


def _emit_node(op, av, flags: int, target: str, keep: Intervals | None) -> str:
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
        return _class(_char_set(op, av, flags), target, keep)
    if op == sre.BRANCH:
        return "(?:" + "|".join(_emit(alt, flags, target, keep) for alt in av[1]) + ")"
    if op == sre.SUBPATTERN:
        group, add, remove, sub = av
        inner = _emit(sub, (flags | add) & ~remove, target, keep)
        return f"({inner})" if group is not None and target == "regex" else f"(?:{inner})"
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        if op == sre.POSSESSIVE_REPEAT and target == "re2":
            raise _NeedsBacktracking
        count = f"{{{lo},}}" if hi == sre.MAXREPEAT else f"{{{lo},{hi}}}"
        suffix = {sre.MAX_REPEAT: "", sre.MIN_REPEAT: "?", sre.POSSESSIVE_REPEAT: "+"}[op]
        return f"(?:{_emit(sub, flags, target, keep)}){count}{suffix}"
    if op == sre.AT:
        multiline = flags & sre.SRE_FLAG_MULTILINE
        if av == sre.AT_BEGINNING:
            return "(?m:^)" if multiline else r"\A"
        if av == sre.AT_BEGINNING_STRING:
            return r"\A"
        if av == sre.AT_END:
            return "(?m:$)" if multiline else (r"\z" if target == "re2" else "(?-m:$)")
        if av == sre.AT_END_STRING:
            return r"\z" if target == "re2" else r"\Z"
        if av in (sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
            if target == "re2":
                raise _NeedsBacktracking  # RE2's \b knows ASCII words only
            w = _class(_category(sre.CATEGORY_WORD, flags & sre.SRE_FLAG_ASCII), target, keep)
            if av == sre.AT_BOUNDARY:
                return f"(?:(?<={w})(?!{w})|(?<!{w})(?={w}))"
            return f"(?:(?<={w})(?={w})|(?<!{w})(?!{w}))"
        raise ValueError(f"unsupported anchor {av}")
    if target == "re2":
        raise _NeedsBacktracking
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        direction, sub = av
        kind = {(sre.ASSERT, 1): "?=", (sre.ASSERT, -1): "?<=", (sre.ASSERT_NOT, 1): "?!",
                (sre.ASSERT_NOT, -1): "?<!"}[op, direction]
        return f"({kind}{_emit(sub, flags, target, keep)})"
    if op == sre.ATOMIC_GROUP:
        return f"(?>{_emit(av, flags, target, keep)})"
    if op == sre.GROUPREF:
        return f"(?i:(?:\\{av}))" if flags & sre.SRE_FLAG_IGNORECASE else f"(?:\\{av})"
    if op == sre.GROUPREF_EXISTS:
        group, yes, no = av
        return f"(?({group}){_emit(yes, flags, target, keep)}|{_emit(no, flags, target, keep) if no else ''})"
    raise ValueError(f"unsupported regular expression element {op}")


def _class(intervals: Intervals, target: str, keep: Intervals | None = None) -> str:
    """A character class for `intervals` (only the part in `keep`, when given), in the engine's syntax."""
    if keep is not None:
        intervals = _minus(intervals, _complement(keep))
    if target == "re2":  # RE2 matches UTF-8: no surrogates (a text holding them goes to the other engine)
        intervals = _minus(intervals, [_SURROGATES])
    if not intervals:
        return r"[^\x00-\x{10ffff}]" if target == "re2" else r"[^\U00000000-\U0010ffff]"
    esc = (lambda c: f"\\x{{{c:x}}}") if target == "re2" else (lambda c: f"\\U{c:08x}")
    parts = [esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in intervals]
    if len(parts) == 1 and intervals[0][0] == intervals[0][1]:
        return parts[0]
    return "[" + "".join(parts) + "]"


# ---- character sets as Python's re sees them ------------------------------------------------------------

def _char_set(op, av, flags: int) -> Intervals:
    ascii_only = flags & sre.SRE_FLAG_ASCII
    if op == sre.ANY:
        return [(0, _TOP)] if flags & sre.SRE_FLAG_DOTALL else [(0, 9), (11, _TOP)]
    if op == sre.LITERAL:
        base = [(av, av)]
    elif op == sre.NOT_LITERAL:
        base = _complement([(av, av)])
    else:
        base, negate = [], False
        for item_op, item in av:
            if item_op == sre.NEGATE:
                negate = True
            elif item_op == sre.LITERAL:
                base.append((item, item))
            elif item_op == sre.RANGE:
                base.append(item)
            elif item_op == sre.CATEGORY:
                base.extend(_category(item, ascii_only))
            else:
                raise ValueError(f"unsupported class element {item_op}")
        base = _complement(_normalize(base)) if negate else _normalize(base)
    if not flags & sre.SRE_FLAG_IGNORECASE:
        return base
    return _ignore_case(op, tuple(av) if op == sre.IN else av, flags, tuple(base))


@functools.lru_cache(maxsize=4096)
def _ignore_case(op, av, flags: int, base: tuple) -> Intervals:
    """Case-insensitive matching changes only cased code points: ask Python's matcher about each of them."""
    state = _parser.State()
    state.flags = flags
    one = _compiler.compile(_parser.SubPattern(state, [(op, list(av) if op == sre.IN else av)]), flags)
    cased = _cased()
    keep = [(c, c) for c in cased if one.fullmatch(chr(c))]
    return _normalize(_minus(list(base), [(c, c) for c in cased]) + keep)


@functools.cache
def _cased() -> list[int]:
    return [c for c in range(_TOP + 1) if _sre.unicode_iscased(c)]


@functools.lru_cache(maxsize=16)
def _category(code, ascii_only) -> Intervals:
    negated = {sre.CATEGORY_NOT_DIGIT: sre.CATEGORY_DIGIT, sre.CATEGORY_NOT_SPACE: sre.CATEGORY_SPACE,
               sre.CATEGORY_NOT_WORD: sre.CATEGORY_WORD}
    if code in negated:
        return _complement(_category(negated[code], ascii_only))
    # _sre's own tests: Py_UNICODE_ISDECIMAL, ISSPACE, ISALNUM (or "_"), or their ASCII versions.
    test = {sre.CATEGORY_DIGIT: str.isdecimal, sre.CATEGORY_SPACE: str.isspace,
            sre.CATEGORY_WORD: _is_word}[code]
    if ascii_only:  # ASCII \s leaves out \x1c-\x1f, which str.isspace counts: ask re itself
        escape = {sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_SPACE: r"\s", sre.CATEGORY_WORD: r"\w"}[code]
        return _normalize([(c, c) for c in range(128) if re.match(f"(?a){escape}", chr(c))])
    return code_point_runs(test)


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


@functools.lru_cache(maxsize=None)
def code_point_runs(test) -> Intervals:
    """The code points whose character passes `test`, as intervals (one pass over all of them, cached)."""
    runs, start = [], None
    for c in range(_TOP + 1):
        if test(chr(c)):
            start = c if start is None else start
        elif start is not None:
            runs.append((start, c - 1))
            start = None
    if start is not None:
        runs.append((start, _TOP))
    return runs


def _normalize(intervals) -> Intervals:
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _complement(intervals: Intervals) -> Intervals:
    out, start = [], 0
    for a, b in intervals:
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    if start <= _TOP:
        out.append((start, _TOP))
    return out


def _minus(intervals: Intervals, removed: Intervals) -> Intervals:
    """`intervals` without the (sorted, disjoint) `removed` ranges."""
    out = []
    starts = [a for a, _ in removed]
    for a, b in intervals:
        i = max(bisect.bisect_right(starts, a) - 1, 0)
        while a <= b and i < len(removed):
            ra, rb = removed[i]
            if ra > b:
                break
            if rb >= a:
                if ra > a:
                    out.append((a, ra - 1))
                a = max(a, rb + 1)
            i += 1
        if a <= b:
            out.append((a, b))
    return out
