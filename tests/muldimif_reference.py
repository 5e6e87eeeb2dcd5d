"""Build the MulDimIF agreement reference (tests/data/muldimif_reference.jsonl.gz); not a test.

    python tests/muldimif_reference.py responses OUT.jsonl [--model-responses FILE ...]
        hand-made responses for a seeded sample of items (aimed at the checkers' parsing: word counts at the
        limits, tables, headings, lists at the start or not, JSON, Punkt abbreviations, CJK text, keywords),
        plus model responses ({id, response} rows; source = the file's stem)
    python tests/muldimif_reference.py official OUT.jsonl REFERENCE.jsonl.gz --upstream DIR
        the official verdicts, from upstream's Code/evaluation in a checkout DIR of Junjie-Ye/MulDimIF, run in
        an environment with nltk (punkt_tab) and zhconv; upstream code is imported from DIR, never copied here
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = ("the river carries light across ancient stone while people gather near quiet markets and talk about "
         "weather harvest music travel history science design").split()


def _numbers(text: str) -> list[int]:
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
             "ten": 10, "twenty": 20, "fifty": 50, "hundred": 100}
    return [int(x) if x.isdigit() else words[x] for x in re.findall(r"\b(\d+|" + "|".join(words) + r")\b",
                                                                     text.lower())]


def _words(rng, n: int, style: str) -> str:
    ws = [rng.choice(WORDS) for _ in range(max(n, 0))]
    if style == "title":
        ws = [w.capitalize() for w in ws]
    elif style == "upper":
        ws = [w.upper() for w in ws]
    return " ".join(ws)


def _sentences(rng, n: int, style: str, ends: str = ".") -> str:
    return " ".join(_words(rng, rng.randint(3, 9), style).capitalize() + rng.choice(ends) for _ in range(n))


def _table(rng, rows: int, cols: int, style: str, keywords: list[str]) -> str:
    head = "| " + " | ".join(_words(rng, 1, style) or "x" for _ in range(cols)) + " |"
    sep = "|" + "|".join("---" for _ in range(cols)) + "|"
    body = ["| " + " | ".join(_words(rng, rng.randint(1, 4), style) + (" " + rng.choice(keywords) if keywords and
                                                                       rng.random() < .5 else "")
                              + rng.choice(["", "."]) for _ in range(cols)) + " |" for _ in range(rows)]
    return "\n".join([head, sep, *body])


def handmade(item: dict, rng: random.Random) -> str:
    """One response built from the item's constraint texts, its shape and sizes drawn at random."""
    texts = " ".join(c[2] for c in item["constraints"])
    keywords = re.findall(r"['\"“「]([^'\"”」]{1,40})['\"”」]", texts)
    nums = _numbers(texts) or [3]
    n = rng.choice(nums) + rng.choice([-1, 0, 0, 1])
    style = rng.choice(["title", "title", "upper", "lower", "plain"])
    parts = []
    shape = rng.choice(["prose", "table", "headings", "numbered", "bullets", "json", "paragraphs", "mixed", "cjk",
                        "empty", "punkt"])
    if shape == "prose":
        parts.append(_words(rng, n, style))
    elif shape == "table":
        if rng.random() < .5:
            parts.append(_sentences(rng, 1, style))
        parts.append(_table(rng, max(n, 1) if n < 12 else rng.randint(1, 8), rng.randint(1, 5), style, keywords))
    elif shape == "headings":
        for _ in range(rng.randint(1, 4)):
            parts.append("#" * rng.randint(1, 4) + " " + _words(rng, rng.randint(1, 6), style))
            parts.append(_sentences(rng, rng.randint(1, 3), style, ".!?"))
    elif shape == "numbered":
        parts.append("\n".join(f"{i + 1}. {_words(rng, rng.randint(2, n + 2), style)}" for i in range(rng.randint(1, 6))))
    elif shape == "bullets":
        if rng.random() < .3:
            parts.append(_words(rng, 4, style) + ":")
        parts.append("\n".join(rng.choice("-*") + " " + _sentences(rng, 1, style, ".!") for _ in range(rng.randint(1, 6))))
    elif shape == "json":
        depth = rng.randint(0, 4)
        obj = _words(rng, 2, style)
        for _ in range(depth):
            obj = {rng.choice(WORDS): obj, "note": rng.choice(keywords) if keywords else "x"}
        body = json.dumps(obj, indent=2)
        parts.append(f"```json\n{body}\n```" if rng.random() < .5 else body)
    elif shape == "paragraphs":
        parts.append("\n\n".join(_sentences(rng, rng.randint(1, 4), style) for _ in range(rng.randint(1, 5))))
    elif shape == "cjk":
        parts.append(rng.choice(["这是一个简单的回答，包含中文。", "這是一個簡單的回答，包含繁體中文。", "混合 text 与中文 words。"])
                     * rng.randint(1, 5))
    elif shape == "punkt":
        parts.append(rng.choice(["Dr. Smith arrived at 5 p.m. on Monday. He left, e.g. early!",
                                 "Results improved (see Fig. 2). Mr. Lee agreed; no objections were raised.",
                                 "It costs $3.50 vs. $4.00 at the U.S. store. Prices rose.",
                                 "\"Stop,\" he said. 'Now.' The end"]))
    elif shape == "mixed":
        parts.append("# " + _words(rng, 3, style))
        parts.append(_sentences(rng, rng.randint(1, 3), style))
        parts.append(_table(rng, rng.randint(1, 4), rng.randint(2, 4), style, keywords))
        parts.append("> " + _sentences(rng, 1, style))
        parts.append("**" + _words(rng, 2, style) + "**")
    if keywords and shape not in ("empty", "cjk") and rng.random() < .7:
        parts.append(" ".join(rng.sample(keywords, k=min(len(keywords), rng.randint(1, 3)))) + rng.choice(["", ".", "!"]))
    sep = rng.choice(["\n", "\n\n", " "])
    text = sep.join(p for p in parts if p)
    return text + rng.choice(["", "", ".", "?", "\n"]) if text else ""


def responses(args) -> None:
    from ifcore.bench.muldimif import load_items

    items = load_items()
    rng = random.Random(args.seed)
    rows = []
    for item in rng.choices(items, k=args.handmade):
        rows.append({"id": item["id"], "source": "handmade", "response": handmade(item, rng)})
    perturb = [str.upper, str.title, lambda t: "# " + t, lambda t: t[:-1], lambda t: t.rstrip() + ".",
               lambda t: "\n".join(t.split("\n")[1:]),
               lambda t: "| Item | Note |\n|---|---|\n| " + " |\n| ".join(t.split("\n")[:4]) + " |"]
    for path in args.model_responses or []:
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            rows.append({"id": r["id"], "source": Path(path).stem, "response": r["response"]})
            rows.append({"id": r["id"], "source": Path(path).stem + "-perturbed",
                         "response": rng.choice(perturb)(r["response"])})
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def official(args) -> None:
    upstream = Path(args.upstream) / "Code"
    sys.path[:0] = [str(upstream / "evaluation"), str(upstream)]
    import types

    # evaluation.py star-imports utils.data_utils for its file helpers (pandas, openai, ...), which the
    # checkers never use: an empty stand-in spares installing them.
    sys.modules["utils"], sys.modules["utils.data_utils"] = types.ModuleType("utils"), types.ModuleType("data_utils")
    with contextlib.redirect_stdout(io.StringIO()):
        import evaluation  # upstream's evaluation.py (prints its Python version on import)
    test = Path(__file__).resolve().parents[1] / "ifcore" / "data" / "muldimif" / "test.json.gz"
    items = {x["id"]: x for x in json.loads(gzip.decompress(test.read_bytes()))}  # no ifcore import needed here
    with open(args.out, "w", encoding="utf-8") as f:
        for line in open(args.reference, encoding="utf-8"):
            row = json.loads(line)
            verdicts = []
            for c in items[row["id"]]["constraints"]:
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        verdicts.append(bool(evaluation.get_instance(f"{c[0]}_{c[1]}").check(c[-1], row["response"])))
                except Exception as e:  # upstream's run would stop here; we keep the row and say so
                    verdicts.append(None)
                    row.setdefault("errors", []).append(f"{c[0]}_{c[1]}: {type(e).__name__}: {e}")
            f.write(json.dumps({**row, "official": verdicts}, ensure_ascii=False) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    r = sub.add_parser("responses")
    r.add_argument("out")
    r.add_argument("--handmade", type=int, default=600)
    r.add_argument("--seed", type=int, default=26)
    r.add_argument("--model-responses", nargs="*")
    o = sub.add_parser("official")
    o.add_argument("out")
    o.add_argument("reference")
    o.add_argument("--upstream", required=True)
    args = p.parse_args()
    {"responses": responses, "official": official}[args.step](args)


if __name__ == "__main__":
    main()
