"""Build the FollowBench rule-part agreement reference (tests/data/followbench_rule_reference.jsonl.gz); not a test.

    python tests/followbench_reference.py responses OUT.jsonl [--model-responses FILE ...]
        for every rule-scored item: its target, the example items' templates filled with their answers, and
        perturbed copies (case, spacing, a stop added or removed, lines dropped, numbers changed), plus model
        responses ({prompt, response} rows; source = the file's stem)
    python tests/followbench_reference.py official OUT.jsonl REFERENCE.jsonl --upstream DIR
        upstream's verdicts, from code/rule_based_evaluation.py in a checkout DIR of YJiangcm/FollowBench
        (imported from DIR, never copied here; matplotlib, which it imports for plots, is stubbed)
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _perturb(text: str, rng: random.Random) -> str:
    ops = [lambda t: t.lower(), lambda t: t.upper(), lambda t: t + ".", lambda t: t.rstrip(".!?"),
           lambda t: t.replace(" ", "  ", 1), lambda t: "\n".join(t.split("\n")[:-1]), lambda t: t.strip() + "\n",
           lambda t: re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), t, count=1),
           lambda t: t.replace(". ", "! ", 1), lambda t: "We " + t, lambda t: t + " Those are suggestions",
           lambda t: "\n\n".join(["1. " + p for p in t.split("\n\n")])]
    return rng.choice(ops)(text)


def responses(args) -> None:
    from ifcore.bench.followbench import load, rule_scored

    rng = random.Random(26)
    rows = []
    for r in load():
        if not rule_scored(r):
            continue
        base = r["target"]
        if r["type"] == "example":
            base = r["target"].replace("{instruction}\n", "").replace("{{", "{").replace("}}", "}") \
                .replace("{answer}", r.get("answer", ""))
        rows.append({"prompt": r["instruction"], "source": "target", "response": base})
        for _ in range(2):
            rows.append({"prompt": r["instruction"], "source": "perturbed", "response": _perturb(base, rng)})
    for path in args.model_responses or []:
        for line in open(path, encoding="utf-8"):
            x = json.loads(line)
            rows.append({"prompt": x["prompt"], "source": Path(path).stem, "response": x["response"]})
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in rows)


def official(args) -> None:
    code = Path(args.upstream) / "code"
    sys.path.insert(0, str(code))
    plt = types.ModuleType("matplotlib.pyplot")
    sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = types.ModuleType("matplotlib"), plt
    sys.modules["matplotlib"].pyplot = plt
    import rule_based_evaluation as upstream

    from ifcore.bench.followbench import load, rule_scored

    by_prompt = {r["instruction"]: r for r in load() if rule_scored(r)}
    with open(args.out, "w", encoding="utf-8") as f:
        for line in open(args.reference, encoding="utf-8"):
            row = json.loads(line)
            r, g = by_prompt[row["prompt"]], row["response"]
            if r["type"] == "example":
                ok = upstream.check_match(r["target"].replace("{instruction}\n", ""), g)
            elif r["category"] == "format" and r["example_id"] in (22, 30):
                ok = upstream.rule_evaluation_format(g, r["example_id"], r["level"])
            else:
                ok = getattr(upstream, f"rule_evaluation_{r['source']}")(g, r["target"], r["level"])
            f.write(json.dumps({**row, "official": bool(ok)}, ensure_ascii=False) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    r = sub.add_parser("responses")
    r.add_argument("out")
    r.add_argument("--model-responses", nargs="*")
    o = sub.add_parser("official")
    o.add_argument("out")
    o.add_argument("reference")
    o.add_argument("--upstream", required=True)
    args = p.parse_args()
    {"responses": responses, "official": official}[args.step](args)


if __name__ == "__main__":
    main()
