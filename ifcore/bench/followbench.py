"""FollowBench (Jiang et al. 2024, English): 820 instructions with 1-5 added constraints (the level).

Scoring follows YJiangcm/FollowBench at 6278f4c (`code/rule_based_evaluation.py`, `code/gpt4_based_evaluation.py`):

- **Rules** (350 items, offline): all 200 example-constraint items (the response must match the target template,
  `{answer}` standing for any text on one line) and items of 13 sources with a checker each (exact match for E2E
  and text editing; sentence and word counts for the summaries; the last "(A)"-style option, date or "$N" for
  BBH and GSM8K; ...) plus format items 22 and 30. Quirks kept: sentences are the non-empty pieces between . ! ?
  (so "3.5" is two); word counts split on single spaces (two spaces make an empty word); "contains the word" is
  a case-sensitive \\b match; format item 30's sentence split is upstream's look-behind regex.
- **Judge** (470 items): an LLM sees the seed instruction, each step that added a constraint and the answer, and
  ends its reply with a Python list of YES/NO, one per added constraint. The prompt below is our own wording of
  upstream's (whose prompt text is not copied); `judge_template` takes a user's file instead. The reply is read
  as upstream reads it (the last line; for one constraint YES or NO anywhere in it; else a list of the level's
  length whose elements are YES, NO, PARTIAL, MAYBE, UNKNOWN or N/A): a reply that does not parse leaves the
  item unjudged (upstream asks for a manual fix).
- **Metrics** per level 1-5: HSR (all constraints met), SSR (the share of constraints met; a rule verdict is
  all or nothing, as upstream), and CSL (per seed instruction whose five levels are all scored: how many
  levels in a row from level 1 are met). Upstream divides by the number of items; we divide by the scored ones
  and report how many were scored (without a judge: the rule part only).
"""
from __future__ import annotations

import ast
import gzip
import json
import re
import string
from collections import defaultdict
from importlib import resources
from pathlib import Path

from ifcore.jsonl import JsonlError, iter_jsonl

DATA = Path(str(resources.files("ifcore") / "data" / "followbench"))
TYPES = ("content", "situation", "style", "format", "mixed", "example")
RULE_SOURCES = ("E2E", "WIKIEVENTS", "CONLL2003", "text_editing", "cnn_dailymail", "xsum", "samsum", "gigaword",
                "arxiv", "BBH_logical", "BBH_time", "self_made_space", "gsm_8k")


def load(data_dir: str | Path | None = None) -> list[dict]:
    """Every record of the six English files, each with `type` (its file), in file order; `data_dir` holds
    upstream's X_constraints.json (or our .json.gz)."""
    root = Path(data_dir) if data_dir else DATA
    out = []
    for t in TYPES:
        path = next((p for p in (root / f"{t}_constraints.json.gz", root / f"{t}_constraints.json") if p.is_file()),
                    None)
        if path is None:
            raise ValueError(f"{root}: no {t}_constraints.json(.gz)")
        raw = path.read_bytes()
        try:
            records = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not FollowBench JSON: {e}") from None
        for i, r in enumerate(records):
            missing = [k for k in ("example_id", "category", "source", "level", "instruction", "target") if k not in r]
            if missing:
                raise ValueError(f"{path}: record {i}: missing {missing}")
            out.append({**r, "type": t})
    return out


def rule_scored(record: dict) -> bool:
    return record["level"] > 0 and (record["type"] == "example" or record["source"] in RULE_SOURCES
                                    or (record["category"] == "format" and record["example_id"] in (22, 30)))


# ---------------------------------------------------------------------------------------------------------------
# The rule checkers (upstream's helpers, in our words)


def _pieces(text: str) -> list[str]:
    return [s for s in re.split(r"[.!?]", text) if s]


def _has(text: str, word: str) -> bool:
    return re.search(r"\b" + re.escape(word) + r"\b", text) is not None


def _piece_has(text: str, n: int, word: str) -> bool:
    p = _pieces(text)
    return len(p) >= n and _has(p[n - 1], word)


def _spaces(text: str) -> int:
    return len(text.split(" "))


def _steps(level: int, checks: list) -> bool:
    """Level k must pass the first k checks (each a no-argument callable)."""
    return all(check() for check in checks[:level])


def _summary(g: str, level: int, source: str) -> bool:
    one = lambda: len(_pieces(g)) == 1  # noqa: E731 - a table of small checks reads best inline
    if source == "cnn_dailymail":
        return _steps(level, [lambda: len(_pieces(g)) == 3, lambda: all(len(s.split()) < 15 for s in _pieces(g)),
                              lambda: _piece_has(g, 1, "Potter") and _piece_has(g, 2, "actor")
                              and _piece_has(g, 3, "films"),
                              lambda: not _piece_has(g, 2, "lavish"),
                              lambda: len(_pieces(g)) >= 3 and re.search(r"\b(has|have)\s+\w+", _pieces(g)[2])])
    if source == "xsum":
        return _steps(level, [one, lambda: _spaces(g) < 20, lambda: not _has(g, "Newton Stewart"),
                              lambda: re.search(r"\b(am|is|are)\s+\w+ing\b", g), lambda: _has(g, "operation")])
    if source == "samsum":
        return _steps(level, [one, lambda: _spaces(g) < 15, lambda: _has(g, "stuff"),
                              lambda: not re.search(r"procrast", g, re.I),
                              lambda: sum(ch in string.punctuation for ch in g) == 1])
    if source == "gigaword":
        return _steps(level, [lambda: _spaces(g) == 8, lambda: not any(ch in string.punctuation for ch in g),
                              lambda: g.islower(), lambda: not _has(g, "bus"), lambda: _has(g, "in")])
    return _steps(level, [one, lambda: _spaces(g) <= 20, lambda: g[:2] == "We", lambda: _has(g, "activations"),
                          lambda: not _has(g, "transformer")])  # arxiv


def _last(pattern: str, g: str, target: str) -> bool:
    found = re.findall(pattern, g)
    return bool(found) and found[-1] == target


def _format_22(g: str, level: int) -> bool:
    parts = g.split("\n\n")
    if len(parts) != (4 if level == 5 else 3):
        return False
    return _steps(level, [lambda: True, lambda: all(len(_pieces(p)) < 3 for p in parts[:3]),
                          lambda: all(len(s.split()) > 20 for s in _pieces(g)),
                          lambda: all(re.match(r"\d+\.", p.lstrip()) for p in parts if p.lstrip()),
                          lambda: g[-len("Those are suggestions"):] == "Those are suggestions"])


def _format_30(g: str, level: int) -> bool:
    sentences = re.split(r"(?<!\w\.\w.)(?<![A-Z][a-z]\.)(?<=\.|\?)\s", g)
    return _steps(level, [lambda: "**" in g, lambda: len(re.findall(r"\*\*[\d].+?:", g)) == 5,
                          lambda: all(len(s.split(".")) < 3 for s in sentences
                                      if any(f"{n}." in s for n in range(1, 6))),
                          lambda: all(10 <= len(s.split()) <= 15 for s in sentences),
                          lambda: not any(w.endswith("-ly") for s in sentences for w in s.split())])


def template_match(target: str, response: str) -> bool:
    """Example constraints: the response is the target template with `{answer}` as any one-line text."""
    template = target.replace("{instruction}\n", "").replace("{{", "{").replace("}}", "}").replace("{answer}", ".*")
    return re.fullmatch(re.escape(template).replace("\\.\\*", ".*"), response) is not None


def rule_verdict(record: dict, response: str) -> bool:
    """Upstream's rule verdict for a rule-scored record (see `rule_scored`)."""
    g, t, level, source = response, record["target"], record["level"], record["source"]
    if record["type"] == "example":
        return template_match(t, g)
    if record["category"] == "format" and record["example_id"] in (22, 30):
        return _format_22(g, level) if record["example_id"] == 22 else _format_30(g, level)
    if source in ("E2E", "text_editing"):
        return g == t
    if source == "WIKIEVENTS":
        return all(line in t.split("\n") for line in g.split("\n"))
    if source == "CONLL2003":
        return g in ast.literal_eval(t)
    if source in ("cnn_dailymail", "xsum", "samsum", "gigaword", "arxiv"):
        return _summary(g, level, source)
    if source == "BBH_logical":
        return _last(r"\([A-Z]\)", g, t)
    if source == "BBH_time":
        return _last(r"\d{2}/\d{2}/\d{4}", g, t)
    if source == "gsm_8k":
        return _last(r"\$\d+", g, t)
    if source == "self_made_space":
        return t in g
    raise ValueError(f"{record['type']} {record['example_id']} level {level}: not a rule-scored item")


# ---------------------------------------------------------------------------------------------------------------
# The judged part


JUDGE_TEMPLATE = """An instruction was made harder step by step: each step added one {kind} constraint, \
{level} in all.

{steps}

The answer to the last version:
{answer}

Work through it: 1) name each of the {level} added constraints; 2) for each, say whether the answer meets it; \
3) end your reply with one line holding only a Python list of {level} strings, each 'YES' or 'NO', in the order \
the constraints were added."""


def judge_prompt(chain: list[str], answer: str, kind: str, template: str = JUDGE_TEMPLATE) -> str:
    """The judge prompt for the last instruction of `chain` (the seed, then one instruction per added
    constraint). `template` may use {kind}, {level}, {steps} and {answer}."""
    level = len(chain) - 1
    steps = [f"Seed instruction:\n{chain[0]}"] + [f"With {i} added constraint{'s' * (i > 1)}:\n{chain[i]}"
                                                  for i in range(1, level + 1)]
    return template.format(kind=kind, level=level, steps="\n\n".join(steps), answer=answer)


def parse_judgement(reply: str, level: int) -> tuple[int, float] | None:
    """(hard, soft) from a judge reply read as upstream reads it, or None when it does not parse."""
    last = reply.strip("`").strip().split("\n")[-1]
    if level == 1:
        return (1, 1.0) if "YES" in last else (0, 0.0) if "NO" in last else None
    m = re.search(r"\[.*\]", last)
    if not m:
        return None
    try:
        items = ast.literal_eval(m.group())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(items, (list, tuple)) or len(items) != level:
        return None
    if any(x not in ("YES", "NO", "PARTIAL", "MAYBE", "UNKNOWN", "N/A") for x in items):
        return None
    yes = sum(x == "YES" for x in items)
    return int(yes == level), yes / level


def _chains(records: list[dict]) -> dict[tuple, list[str]]:
    """(type, example_id, level) -> [seed, instruction at level 1, ..., at this level], as upstream builds it
    from consecutive records of one example_id."""
    out, chain, current = {}, [], None
    for r in records:
        key = (r["type"], r["example_id"])
        chain = chain + [r["instruction"]] if key == current else [r["instruction"]]
        current = key
        out[(r["type"], r["example_id"], r["level"])] = chain
    return out


def metrics(rows: list[dict], total_by_level: dict[int, int]) -> dict:
    """HSR, SSR per level over the scored rows, CSL over the seed instructions scored at all five levels."""
    per = defaultdict(lambda: [0, 0.0, 0])
    groups = defaultdict(dict)
    for r in rows:
        if r["hard"] is None:
            continue
        p = per[r["level"]]
        p[0] += r["hard"]
        p[1] += r["soft"]
        p[2] += 1
        groups[(r["type"], r["example_id"])][r["level"]] = r["hard"]
    levels = {}
    for lv in range(1, 6):
        h, s, n = per[lv]
        levels[lv] = {"HSR": h / n if n else None, "SSR": s / n if n else None, "scored": n,
                      "of": total_by_level.get(lv, 0)}
    runs = []
    for got in groups.values():
        if len(got) == 5:
            k = 0
            while k < 5 and got[k + 1] == 1:
                k += 1
            runs.append(k)
    return {"levels": levels, "CSL": sum(runs) / len(runs) if runs else None, "CSL_groups": len(runs)}


def evaluate(responses_path: str | Path, output_dir: str | Path, judge=None, judge_template: str = JUDGE_TEMPLATE,
             on_duplicate: str = "error", data_dir=None) -> dict:
    """`ifcore eval followbench`: responses JSONL {prompt, response} (the prompt is the instruction, as upstream
    matches them) -> verdicts.jsonl and summary.json. `judge`: an ifcore.judge JudgeClient (or anything with
    `complete_many(prompts, return_exceptions=True)`) for the items rules cannot score; without it they stay
    unjudged. Problems are JsonlErrors naming the file and line."""
    if on_duplicate not in ("error", "first", "last"):
        raise ValueError(f"on_duplicate must be error, first or last, not {on_duplicate!r}")
    records = load(data_dir)
    chains = _chains(records)
    scored = [r for r in records if r["level"] > 0]
    by_prompt = {r["instruction"]: r for r in scored}
    chosen = {}
    with open(responses_path, "rb") as f:
        for n, row, problem in iter_jsonl(f, ("prompt", "response")):
            if problem is None and not (isinstance(row["prompt"], str) and isinstance(row["response"], str)):
                problem = '"prompt" and "response" must be strings'
            if problem is None and row["prompt"] not in by_prompt:
                problem = "no FollowBench instruction (level 1-5) with this prompt"
            if problem:
                raise JsonlError(f"{responses_path}:{n}: {problem}")
            if row["prompt"] in chosen and on_duplicate != "last":
                if on_duplicate == "error":
                    raise JsonlError(f"{responses_path}:{n}: a second response to the prompt of line "
                                     f"{chosen[row['prompt']][0]} (--on-duplicate first|last keeps one)")
                continue
            chosen[row["prompt"]] = n, row["response"]
    if not chosen:
        raise JsonlError(f"{responses_path}: no responses (the file is empty)")
    rows, asks = [], []
    for prompt, (_, response) in chosen.items():
        r = by_prompt[prompt]
        row = {"type": r["type"], "example_id": r["example_id"], "level": r["level"], "source": r["source"],
               "prompt": prompt, "response": response}
        if rule_scored(r):
            ok = rule_verdict(r, response)
            row.update(by="rule", hard=int(ok), soft=float(ok))
        else:
            row.update(by=None, hard=None, soft=None)
            asks.append((row, judge_prompt(chains[(r["type"], r["example_id"], r["level"])], response, r["type"],
                                           judge_template)))
        rows.append(row)
    if judge is not None and asks:
        replies = judge.complete_many([p for _, p in asks], return_exceptions=True)
        for (row, _), reply in zip(asks, replies):
            parsed = None if isinstance(reply, Exception) else parse_judgement(reply, row["level"])
            if parsed is None:
                row["judge_error"] = str(reply)[:500] if isinstance(reply, Exception) else "reply did not parse"
            else:
                row.update(by="judge", hard=parsed[0], soft=parsed[1])
    total = defaultdict(int)
    for r in scored:
        total[r["level"]] += 1
    summary = {"benchmark": "followbench", "responses": str(responses_path), "answered": len(rows),
               "of": len(scored), "by": {"rule": sum(r["by"] == "rule" for r in rows),
                                         "judge": sum(r["by"] == "judge" for r in rows),
                                         "unjudged": sum(r["by"] is None for r in rows)},
               **metrics(rows, total)}
    summary["by_type"] = {t: metrics([r for r in rows if r["type"] == t],
                                     {lv: sum(1 for x in scored if x["type"] == t and x["level"] == lv)
                                      for lv in range(1, 6)}) for t in TYPES}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # backslashreplace: a lone surrogate in a response (UTF-8 cannot hold it) is written as its JSON escape, \ud800,
    # which reads back as the same string; one bad response never stops the evaluation.
    with open(out / "verdicts.jsonl", "w", encoding="utf-8", errors="backslashreplace") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary
