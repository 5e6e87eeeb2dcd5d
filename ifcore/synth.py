"""Factorized constraint synthesis without an LLM (ScopeIF section 4.2; templates where the paper prompts an LLM).

The paper enumerates compatible Scope x Target x Range categories, instantiates atomic constraints from each
combination, and crosses them over into multi-constraint instructions whose feasibility a strong LLM vouches
for. Here:
- `FAMILIES` is the enumeration: every compatible (scope, target) pair of schema v1 that a plain-text or
  light-Markdown response can carry, each with its wording templates; the range category is chosen per
  instance among those the measurement admits (One-Sided Bounds, Intervals, Equality, Prohibition,
  Comparison, Arithmetic Relations).
- The compatibility check is constructive: an instruction is built around a sampled *witness* response,
  each constraint's parameters are drawn so that the witness satisfies it, and `ifcore.verify` confirms the
  witness satisfies all of them before the instruction is kept. Every instruction is feasible, and the
  witness is a free behaviour-cloning target (`sft_pairs`, hindsight relabelling).
- Everything is a function of the seed.
With a strong LLM (`llm_dataset`, `ifcore synth --llm-url`), the paper's own path runs instead: its prompts
(ifcore.synth_prompts, tables 9-12) through a judge client, the constraints kept as judged ones (docs/synthesis.md).

`ifcore synth` writes a ScopeInstruct-style JSONL (prompt, label = {"constraints": [...]}) that OpenRLHF reads
as a prompt dataset as it is, with train/test splits and a statistics file: the Scope/Target/Range
distribution (as in the paper's Fig. 5/6) and diversity (Self-BLEU-4, Distinct-2, Entropy-4, as in Table 5).
"""
from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from pathlib import Path

from ifcore.schema import Constraint
from ifcore.text import Doc
from ifcore.verify import verify

SYNTH_VERSION = 4

TOPICS = ["the sea", "a mountain walk", "winter mornings", "a small garden", "the city at night", "a river",
          "an old library", "the desert", "a train journey", "autumn leaves", "a busy market", "the stars",
          "a quiet village", "the rain", "a lighthouse", "a forest path", "spring flowers", "a summer storm",
          "the harbor", "a bakery", "a long bridge", "the moon", "a snowy field", "an island", "the wind",
          "a mountain lake", "a farm at dawn", "the museum", "an old clock", "a river boat"]
GENRES = ["a short description of", "a few calm lines about", "a short story about", "a brief note about",
          "a reflection on", "a short report on", "a simple poem about", "some notes about"]
NOUNS = ["river", "stone", "bird", "tree", "road", "light", "cloud", "boat", "field", "house", "wind", "star",
         "hill", "door", "lamp", "garden", "bridge", "window", "path", "snow", "rain", "leaf", "city", "sea",
         "moon", "sun", "flower", "shadow", "wall", "market", "book", "clock", "train", "voice", "song", "fire"]
ADJS = ["cold", "quiet", "bright", "old", "small", "green", "dark", "warm", "soft", "tall", "slow", "clear",
        "calm", "wild", "gentle", "golden", "empty", "deep", "pale", "silver"]
VERBS = ["runs", "waits", "falls", "shines", "moves", "rests", "turns", "stands", "sings", "glows", "drifts",
         "sleeps", "grows", "burns", "fades", "returns"]
ADVERBS = ["slowly", "softly", "again", "today", "alone", "still", "gently", "quietly", "there", "now"]
PREPS = ["by", "near", "under", "over", "beside", "across", "behind", "beyond"]
SHOUT = ["NOW", "STOP", "LOOK", "WAIT", "HERE"]

# Witness sizes and the families in play. "full" gives ~300-word responses with every family (benchmarks,
# realistic data). "tiny" is what a 0.5M-parameter policy can learn to read in minutes on a CPU: short
# responses, the families whose wording maps onto something it can control, ranges tight around the witness
# (a loose "at most 14 words" teaches nothing), and still every Scope selector and Range category.
PROFILES = {
    "tiny": {"paragraphs": (1, 3), "sentences": (1, 3), "words": (3, 6), "list_p": 0.0, "items": (2, 4),
             "heading_p": 0.0, "max_constraints": 3, "relative_p": 0.15, "slack": 1, "vocab": 8,
             "targets": ("words", "sentences", "paragraphs", "keyword", "banned", "digits", "caps_words",
                         "starts_with", "exclamations")},
    "full": {"paragraphs": (4, 7), "sentences": (3, 6), "words": (9, 18), "list_p": 0.3, "items": (3, 6),
             "heading_p": 0.3, "max_constraints": 6, "relative_p": 0.25, "slack": 3, "targets": None,
             "vocab": None},
}

ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
UNIT_LABEL = {"response": "Entire Response", "paragraph": "Paragraph", "sentence": "Sentence", "line": "Line",
              "word": "Word", "char": "Character", "block": "Structural Block", "element": "Structural Element",
              "section": "Structural Block"}


# ---- witness responses ------------------------------------------------------------------------------------

def vocabulary(profile: str) -> dict[str, list[str]]:
    """The word lists a profile's witnesses draw from (the tiny profile keeps the first few of each)."""
    n = PROFILES[profile]["vocab"]
    lists = {"nouns": NOUNS, "adjs": ADJS, "verbs": VERBS, "adverbs": ADVERBS, "preps": PREPS}
    if not n:
        return lists
    return {k: xs[: n if k in ("nouns", "adjs", "verbs") else n // 2] for k, xs in lists.items()}


def _sentence(rng: random.Random, n_words: int, topic_word: str, v: dict) -> list[str]:
    """About n_words words (phrases are never cut): subject, verb, then adverbs and prepositional phrases,
    now and then a number or a shouted word, so that digit and capital-word constraints have material."""
    words = [rng.choice(["The", "A", "This", "One"]), rng.choice(v["adjs"]), rng.choice(v["nouns"] + [topic_word]),
             rng.choice(v["verbs"])]
    while len(words) < n_words:
        r = rng.random()
        if r < 0.1:
            words += [str(rng.randint(2, 12)), rng.choice(v["nouns"]) + "s"]
        elif r < 0.15:
            words.append(rng.choice(SHOUT))
        elif r < 0.5:
            words.append(rng.choice(v["adverbs"]))
        else:
            words += [rng.choice(v["preps"]), "the", rng.choice(v["nouns"])]
    return words


def witness(rng: random.Random, topic: str, profile: str = "tiny") -> str:
    """A response built from a small grammar: paragraphs of sentences, sometimes a heading or a bulleted
    list; some are chained (each sentence starts with the previous one's last word) or have sorted items."""
    p = PROFILES[profile]
    v = vocabulary(profile)
    topic_word = topic.split()[-1]
    chained = rng.random() < 0.15
    blocks = []
    for b in range(rng.randint(*p["paragraphs"])):
        if rng.random() < p["heading_p"]:
            blocks.append("## " + " ".join(w.capitalize() for w in [rng.choice(ADJS), rng.choice(NOUNS)]))
        if b > 0 and rng.random() < p["list_p"]:
            items = [f"{rng.choice(ADJS)} {rng.choice(NOUNS)}" for _ in range(rng.randint(*p["items"]))]
            if rng.random() < 0.5:
                items.sort()
            blocks.append("\n".join(f"- {it}" for it in items))
            continue
        sentences, last = [], None
        for _ in range(rng.randint(*p["sentences"])):
            words = _sentence(rng, rng.randint(*p["words"]), topic_word, v)
            if chained and last:
                words[0] = last.capitalize()
            last = words[-1]
            end = "." if rng.random() < 0.85 else rng.choice("!?")
            sentences.append(" ".join(words) + end)
        blocks.append(" ".join(sentences))
    return "\n\n".join(blocks)


# ---- the enumeration: scopes x targets (FAMILIES), ranges chosen per instance -------------------------------

def _scopes(doc: Doc, rng: random.Random, words_in: list[str]):
    """Candidate scopes for one witness: (name, scope steps, phrase). Positions index units that exist."""
    n_par, n_sen = len(doc.paragraphs), len(doc.sentences)
    out = {"global": ([], rng.choice(["Your response", "The whole response", "Your answer"])),
           "each_paragraph": ([{"unit": "paragraph", "select": "each"}], rng.choice(["Each paragraph",
                                                                                      "Every paragraph"])),
           "each_sentence": ([{"unit": "sentence", "select": "each"}], rng.choice(["Each sentence",
                                                                                    "Every sentence"]))}
    i = rng.choice([0, n_par - 1]) if n_par > 1 else 0
    out["nth_paragraph"] = ([{"unit": "paragraph", "select": "at", "index": i if i == 0 else -1}],
                            "The first paragraph" if i == 0 else "The last paragraph")
    j = rng.randrange(min(n_sen, 3)) if n_sen else 0
    out["nth_sentence"] = ([{"unit": "sentence", "select": "at", "index": j}], f"The {ORDINALS[j]} sentence")
    out["last_sentence_each_paragraph"] = (
        [{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": -1}],
        rng.choice(["The last sentence of each paragraph", "The final sentence of every paragraph"]))
    if words_in:
        w = rng.choice(words_in)
        out["sentences_with_word"] = (
            [{"unit": "sentence", "select": "where",
              "if": {"target": {"count": "occurrence", "of": w}, "range": {"min": 1}}}],
            f"Every sentence that contains the word \"{w}\"")
    if doc.markdown.elements["list_item"]:
        out["each_item"] = ([{"unit": "element", "kind": "list_item", "select": "each"}],
                            rng.choice(["Each bullet point", "Every bullet point"]))
    if doc.markdown.elements["heading"]:
        out["each_heading"] = ([{"unit": "element", "kind": "heading", "select": "each"}], "Each heading")
    return out


# Targets: (name, target dict builder, noun phrase (plural), singular, primary, secondary, scopes it fits).
def _targets(doc: Doc, rng: random.Random, present: list[str], candidates: list[str] = NOUNS + ADJS):
    """The target families; keywords come from the witness (`present`), banned words from the other
    `candidates` (the profile's vocabulary, so that a ban is something the policy could violate)."""
    # A long witness can use every candidate; then the ban falls on filler words no witness contains.
    absent = [w for w in candidates if w not in present] or ["however", "really", "very", "thing", "nice"]
    kw = rng.choice(present) if present else rng.choice(candidates)
    ban = rng.choice(absent)
    text_scopes = ("global", "each_paragraph", "each_sentence", "nth_paragraph", "nth_sentence",
                   "last_sentence_each_paragraph", "sentences_with_word", "each_item")
    return {
        "words": ({"count": "word"}, "words", "word", "Capacity", "Text Length", text_scopes),
        "chars": ({"count": "char"}, "characters", "character", "Capacity", "Text Length",
                  ("global", "nth_sentence", "each_item")),
        "sentences": ({"count": "sentence"}, "sentences", "sentence", "Capacity", "Unit Count",
                      ("global", "each_paragraph", "nth_paragraph")),
        "paragraphs": ({"count": "paragraph"}, "paragraphs", "paragraph", "Capacity", "Unit Count", ("global",)),
        "keyword": ({"count": "occurrence", "of": kw}, f"occurrences of the word \"{kw}\"",
                    f"the word \"{kw}\"", "Literals", "Specific Strings",
                    ("global", "each_paragraph", "nth_paragraph", "nth_sentence")),
        "banned": ({"count": "occurrence", "of": ban}, f"occurrences of the word \"{ban}\"", f"the word \"{ban}\"",
                   "Literals", "Specific Strings", ("global", "each_paragraph", "nth_paragraph")),
        "digits": ({"count": "class", "of": "digit"}, "digits", "digit", "Literals", "Literal Classes",
                   ("global", "each_paragraph", "each_sentence", "nth_paragraph")),
        "caps_words": ({"count": "class", "of": "uppercase_word"}, "fully capitalized words",
                       "fully capitalized word", "Literals", "Literal Classes",
                       ("global", "each_sentence", "nth_paragraph")),
        "lists": ({"count": "block", "kind": "list"}, "bulleted lists", "bulleted list", "Structure", "Containers",
                  ("global",)),
        "items": ({"count": "element", "kind": "list_item"}, "bullet points", "bullet point", "Structure",
                  "Members", ("global",)),
        "list_depth": ({"depth": "list"}, None, None, "Structure", "Nesting Depth", ("global",)),
        "headings": ({"count": "element", "kind": "heading"}, "headings", "heading", "Structure", "Members",
                     ("global",)),
        "keywords_all": ({"has": sorted(set(rng.sample(present, min(len(present), rng.randint(2, 3)))))
                          if len(present) >= 2 else [kw]},
                         None, None, "Checklist", "Presence", ("global",)),
        "title_case_headings": ({"valid": "title_case"}, None, None, "Checklist", "Validity", ("each_heading",)),
        "starts_with": ({"starts_with": None}, None, None, "Pattern", "Boundary",
                        ("global", "each_paragraph", "nth_paragraph")),
        "ends_with_period": ({"ends_with": "."}, None, None, "Pattern", "Boundary",
                             ("each_sentence", "each_paragraph", "global")),
        "exclamations": ({"matches": "!"}, "exclamation marks", "exclamation mark", "Pattern", "Surface",
                         ("global", "each_paragraph")),
        "bullet_lines": ({"matches": r"(?m)^- "}, "lines starting with \"- \"", None, "Pattern", "Skeleton",
                         ("global",)),
        "sorted_items": ({"sorted": "alphabetical", "unit": "element", "kind": "list_item"}, None, None,
                         "Relations", "Ordering Relations", ("global",)),
        "chain": ({"chain": "last_first", "unit": "sentence"}, None, None, "Relations", "Chaining Relations",
                  ("global", "each_paragraph")),
        "acrostic": ({"acrostic": None, "unit": "paragraph"}, None, None, "Relations", "Positional Relations",
                     ("global",)),
    }


def _count_phrase(rng_dict: dict, noun: str, singular: str | None) -> str:
    if "eq" in rng_dict:
        n = rng_dict["eq"]
        if n == 0:
            return f"no {noun}"
        return f"exactly {n} {singular if n == 1 and singular else noun}"
    if "min" in rng_dict and "max" in rng_dict:
        return f"between {rng_dict['min']} and {rng_dict['max']} {noun}"
    if "min" in rng_dict:
        return f"at least {rng_dict['min']} {singular if rng_dict['min'] == 1 and singular else noun}"
    return f"at most {rng_dict['max']} {singular if rng_dict['max'] == 1 and singular else noun}"


def _choose_range(rng: random.Random, values: list[int], slack: int = 3) -> tuple[dict, str] | None:
    """An absolute range that admits every measured value, at most `slack` wider on a side, and its category."""
    lo, hi = min(values), max(values)
    options = []
    if hi == 0:
        options.append(({"eq": 0}, "Prohibition"))
    if lo == hi and hi > 0:
        options.append(({"eq": lo}, "Equality"))
    if lo > 0:
        options.append(({"min": max(1, lo - rng.randint(0, slack))}, "One-Sided Bounds"))
    options.append(({"max": hi + rng.randint(0, slack)}, "One-Sided Bounds"))
    if hi > 1:
        options.append(({"min": max(0, lo - rng.randint(0, slack)), "max": hi + rng.randint(1, max(1, slack))},
                        "Intervals"))
    r, label = rng.choice(options)
    if r.get("max") == 0 and "min" not in r:
        r, label = {"eq": 0}, "Prohibition"
    return r, label


def _measure(scope: list, target: dict, doc: Doc) -> list[int] | None:
    v = verify(Constraint.from_dict({"scope": scope, "target": target, "range": {"min": 0}}), doc)
    if not v.records or any(r.actual is None for r in v.records):
        return None
    return [r.actual for r in v.records]


def _instantiate(name: str, scope_name: str, doc: Doc, rng: random.Random, scopes, targets,
                 slack: int = 3) -> dict | None:
    """One atomic constraint of family (scope, target) that the witness satisfies, or None."""
    target, noun, singular, primary, secondary, _ = targets[name]
    target = dict(target)
    scope, phrase = scopes[scope_name]
    text = None
    if name == "starts_with":
        first = _measure_first_word(scope, doc)
        if first is None:
            return None
        target["starts_with"] = first
        values, rng_dict, range_label = [1], {"eq": 1}, "Equality"
        text = f"{phrase} must begin with the word \"{first}\"."
    elif name == "acrostic":
        firsts = [next((c for c in doc.text[a:b] if c.isalpha()), "") for a, b in doc.paragraphs]
        if len(firsts) < 2 or not all(firsts):
            return None
        word = "".join(firsts).upper()
        target["acrostic"] = word
        rng_dict, range_label = {"eq": 0}, "Prohibition"
        text = f"The first letters of your paragraphs must spell \"{word}\"."
    else:
        values = _measure(scope, target, doc)
        if values is None:
            return None
        if name in ("ends_with_period", "title_case_headings", "list_depth", "keywords_all", "sorted_items",
                    "chain"):
            if name in ("ends_with_period", "title_case_headings"):
                if min(values) != 1:
                    return None
                rng_dict, range_label = {"eq": 1}, "Equality"
                text = (f"{phrase} must end with a period." if name == "ends_with_period"
                        else "Every heading must be written in title case.")
            elif name == "list_depth":
                if max(values) == 0:
                    return None
                rng_dict, range_label = {"max": 1}, "One-Sided Bounds"
                text = "Do not nest one list inside another."
            elif name == "keywords_all":
                n = len(target["has"])
                if values[0] != n:
                    return None
                rng_dict, range_label = {"eq": n}, "Equality"
                words = ", ".join(f"\"{w}\"" for w in target["has"])
                text = f"Include all of these words: {words}."
            elif name == "sorted_items":
                if values[0] != 0 or len(doc.markdown.elements["list_item"]) < 3:
                    return None
                rng_dict, range_label = {"eq": 0}, "Prohibition"
                text = "List the bullet points in alphabetical order."
            else:  # chain
                if min(values) < 1:
                    return None
                rng_dict, range_label = {"min": min(values)}, "One-Sided Bounds"
                text = (f"{phrase} must contain at least {min(values)} chain link(s), where a sentence starts "
                        f"with the last word of the sentence before it.")
        else:
            if name in ("lists", "items", "headings", "bullet_lines") and max(values) == 0 and rng.random() < 0.7:
                return None  # "no lists" everywhere would swamp the data
            rng_dict, range_label = _choose_range(rng, values, slack)
            if name == "keyword" and rng_dict.get("eq") == 0:
                return None
            lower = phrase[0].lower() + phrase[1:]
            if rng_dict == {"eq": 0}:
                what = singular if name in ("banned", "keyword") else f"any {noun}"
                text = rng.choice([f"{phrase} must not contain {what}.", f"Do not use {what} in {lower}."])
            else:
                count = _count_phrase(rng_dict, noun, singular)
                text = rng.choice([f"{phrase} must contain {count}.", f"{phrase} should have {count}.",
                                   f"Make sure {lower} has {count}."])
    label = _scope_label(scope)
    return {"text": text, "scope": scope, "target": target, "range": rng_dict,
            "category": {"scope": label, "primary_target": primary, "secondary_target": secondary,
                         "range": range_label}}


def _measure_first_word(scope, doc: Doc) -> str | None:
    """The first word shared by every segment the scope selects (None if they differ, one is missing, or a
    segment opens with something that is not a word, such as "- ")."""
    probe = Constraint.from_dict({"scope": scope, "target": {"count": "word"}, "range": {"min": 0}})
    firsts = []
    for r in verify(probe, doc).records:
        words = doc.within("word", r.span)
        if r.actual is None or not words or words[0][0] != r.span[0]:
            return None
        firsts.append(doc.text[words[0][0]:words[0][1]])
    return firsts[0] if firsts and len(set(firsts)) == 1 else None


def _relative(doc: Doc, rng: random.Random) -> dict | None:
    """A Comparison or Arithmetic Relations constraint between paragraphs, when the witness has one."""
    counts = _measure([{"unit": "paragraph", "select": "each"}], {"count": "word"}, doc)
    if counts and len(counts) >= 2 and rng.random() < 0.5:
        if all(b > a for a, b in zip(counts, counts[1:])):
            return {"text": "Each paragraph must contain more words than the one before it.",
                    "scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "word"},
                    "range": {"gt": "previous"},
                    "category": {"scope": "Traversal(Paragraph)", "primary_target": "Capacity",
                                 "secondary_target": "Text Length", "range": "Comparison"}}
        if all(b < a for a, b in zip(counts, counts[1:])):
            return {"text": "Each paragraph must contain fewer words than the one before it.",
                    "scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "word"},
                    "range": {"lt": "previous"},
                    "category": {"scope": "Traversal(Paragraph)", "primary_target": "Capacity",
                                 "secondary_target": "Text Length", "range": "Comparison"}}
        if counts[0] != counts[-1]:  # a longer witness is rarely monotone; compare its first and last paragraph
            more = counts[-1] > counts[0]
            return {"text": f"The last paragraph must contain {'more' if more else 'fewer'} words than the first.",
                    "scope": [{"unit": "paragraph", "select": "at", "index": -1}], "target": {"count": "word"},
                    "range": {"gt" if more else "lt": {"scope": [{"unit": "paragraph", "select": "at", "index": 0}],
                                                       "target": {"count": "word"}}},
                    "category": {"scope": "Position(Paragraph)", "primary_target": "Capacity",
                                 "secondary_target": "Text Length", "range": "Comparison"}}
    sentences = _measure([{"unit": "paragraph", "select": "each"}], {"count": "sentence"}, doc)
    if sentences and len(sentences) >= 2 and sentences[0] > 0:
        ratio, rest = divmod(sentences[-1], sentences[0])
        first = {"scope": [{"unit": "paragraph", "select": "at", "index": 0}], "target": {"count": "sentence"}}
        if rest == 0 and ratio >= 1:
            rng_dict = {"eq": {"times": ratio, "of": first}} if ratio > 1 else {"eq": {"plus": 0, "of": first}}
            words = {1: "the same number of sentences as", 2: "twice as many sentences as",
                     3: "three times as many sentences as"}.get(ratio, f"{ratio} times as many sentences as")
            return {"text": f"The last paragraph must have {words} the first paragraph.",
                    "scope": [{"unit": "paragraph", "select": "at", "index": -1}], "target": {"count": "sentence"},
                    "range": rng_dict,
                    "category": {"scope": "Position(Paragraph)", "primary_target": "Capacity",
                                 "secondary_target": "Unit Count", "range": "Arithmetic Relations"}}
    return None


def _scope_label(scope: list) -> str:
    if not scope:
        return "Global(Entire Response)"
    sel = {"each": "Traversal", "at": "Position", "slice": "Position", "where": "Condition"}
    return " -> ".join(f"{sel[s['select']]}({UNIT_LABEL[s['unit']]})" for s in scope)


def families() -> list[tuple[str, str]]:
    """The enumeration of compatible (target, scope) pairs: the atomic constraint families."""
    doc = Doc("x")
    rng = random.Random(0)
    out = []
    for name, (*_, fits) in _targets(doc, rng, ["x", "y"]).items():
        out += [(name, s) for s in fits]
    return out


def instruction(rng: random.Random, profile: str = "tiny", k: int | None = None) -> dict:
    """One instruction: a task, 1..max_constraints constraints, and the witness that satisfies them all."""
    p = PROFILES[profile]
    while True:
        topic = rng.choice(TOPICS)
        response = witness(rng, topic, profile)
        doc = Doc(response)
        v = vocabulary(profile)
        present = sorted({w.lower() for w in response.replace(".", " ").replace("!", " ").replace("?", " ").split()
                          if w.isalpha() and w.lower() in v["nouns"] + v["adjs"]})
        scopes = _scopes(doc, rng, present)
        targets = _targets(doc, rng, present, v["nouns"] + v["adjs"])
        if p["targets"]:
            targets = {k: v for k, v in targets.items() if k in p["targets"]}
        mode = (p["max_constraints"] + 2) // 2  # the most likely count: 2 of at most 3, 4 of at most 6
        want = k or rng.choices(range(1, p["max_constraints"] + 1),
                                weights=[1.0 / (1 + abs(i - mode)) for i in range(1, p["max_constraints"] + 1)])[0]
        # Candidates grouped by primary target; drawing a category first and a family second balances the six
        # target categories instead of favouring the ones with many families.
        by_primary: dict[str, list] = {}
        for t, (_, _, _, primary, _, fits) in targets.items():
            by_primary.setdefault(primary, []).extend((t, s) for s in fits if s in scopes)
        constraints, used = [], set()
        if rng.random() < p["relative_p"] and (rel := _relative(doc, rng)):
            constraints.append(rel)
        while len(constraints) < want and any(by_primary.values()):
            group = by_primary[rng.choice([k for k, v in by_primary.items() if v])]
            t, s = group.pop(rng.randrange(len(group)))
            if t in used:
                continue  # one constraint per target family keeps instructions varied
            c = _instantiate(t, s, doc, rng, scopes, targets, p["slack"])
            if c is not None:
                constraints.append(c)
                used.add(t)
        if not constraints:
            continue
        # The compatibility check: the witness must satisfy every constraint, as ifcore.verify decides.
        parsed = [Constraint.from_dict(c) for c in constraints]
        if not all(verify(c, doc).satisfied for c in parsed):
            raise AssertionError(f"synth produced a constraint its witness violates: {constraints}")
        task = f"Write {rng.choice(GENRES)} {topic}."
        prompt = " ".join([task] + [c["text"] for c in constraints])
        for i, c in enumerate(constraints):
            c["id"] = f"c{i + 1}"
        return {"prompt": prompt, "constraints": constraints, "witness": response, "topic": topic}


def _instances(n: int, seed: int, profile: str) -> list[dict]:
    rng = random.Random(seed)
    return [instruction(rng, profile) for _ in range(n)]


def _row(inst: dict, row_id: str) -> dict:
    return {"id": row_id, "prompt": inst["prompt"],
            "label": json.dumps({"constraints": inst["constraints"]}, ensure_ascii=False)}


def dataset(n: int, seed: int, profile: str = "tiny") -> list[dict]:
    """n OpenRLHF-ready rows: {"id", "prompt", "label": JSON {"constraints": [...]}}."""
    return [_row(inst, f"{seed}-{i}") for i, inst in enumerate(_instances(n, seed, profile))]


def sft_pairs(n: int, seed: int, profile: str = "tiny", plans: bool = False) -> list[dict]:
    """Hindsight-relabelled pairs for the behaviour-cloning warm start: a generated response and an
    instruction whose constraints it satisfies; with `plans`, also the plan of the response (`plan`)."""
    return [{"prompt": inst["prompt"], "response": inst["witness"]}
            | ({"plan": plan(inst["constraints"], inst["witness"])} if plans else {})
            for inst in _instances(n, seed, profile)]


# ---- the reasoning of an expert: a plan of measured targets (RAIF's behaviour-cloning data) -------------------

def _where(scope: list) -> str:
    """A scope in a few words: "response", "each paragraph", "sentence 2", "each paragraph > last sentence"."""
    parts = []
    for s in scope:
        unit = s.get("kind", s["unit"]).replace("_", " ")
        if s["select"] == "at":
            parts.append(f"last {unit}" if s["index"] == -1 else f"{unit} {s['index'] + 1}")
        elif s["select"] == "where":
            parts.append(f"{unit}s with {_what(s['if']['target'])}")
        else:
            parts.append(f"{s['select']} {unit}")
    return " > ".join(parts) or "response"


def _what(target: dict) -> str:
    """What a target measures in a few words: "words", '"river"', "uppercase words", 'first word "The"'."""
    if target.get("count") == "occurrence":
        return f'"{target["of"]}"'
    if "count" in target:
        return (target.get("of") or target.get("kind") or target["count"]).replace("_", " ") + "s"
    if "starts_with" in target:
        return f'first word "{target["starts_with"]}"'
    if "matches" in target:
        return f'"{target["matches"]}"'
    return json.dumps(target, ensure_ascii=False)


def _bound(rng: dict) -> str:
    """A range in symbols: "=3", "2-5", "<=4", "> previous", "= 2x paragraph 1 sentences"."""
    def value(v) -> str:
        if not isinstance(v, dict):
            return str(v) if v != "previous" else " previous"
        if "of" in v:
            return f" {v['times']}x{value(v['of'])}" if "times" in v else f"{value(v['of'])} + {v['plus']}"
        return f" {_where(v.get('scope', []))} {_what(v['target'])}"

    if set(rng) == {"min", "max"} and not any(isinstance(v, (dict, str)) for v in rng.values()):
        return f"{rng['min']}-{rng['max']}"
    symbols = {"eq": "=", "min": ">=", "max": "<=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}
    return " ".join(symbols[k] + value(v) for k, v in rng.items())


def plan(constraints: list[dict], witness: str) -> str:
    """The reasoning of the synthetic expert, one line per constraint: where it applies, what it counts, its
    range, and the value(s) the answer will have there (measured on the witness): e.g.
    `paragraph 1: words <=11 -> 10` or `each paragraph: sentences <=2 -> 2 1`. Each line turns an instruction
    into a commitment the answer then carries out, which is what RAIF wants the reasoning to do (rather than
    paraphrase the instruction)."""
    doc = Doc(witness)
    lines = []
    for c in constraints:
        values = [r.actual for r in verify(Constraint.from_dict(c), doc).records]
        lines.append(f"{_where(c.get('scope', []))}: {_what(c['target'])} {_bound(c['range'])} -> "
                     f"{' '.join(map(str, values))}")
    return "\n".join(lines)


def expert_plan(constraints: list[dict], witness: str) -> str:
    """The behaviour-cloning expert's reasoning (RAIF eq. 8), in a form the warm start never saw (its plans are
    `plan`'s one line per constraint): the constraints counted and grouped by where they apply, then each one
    numbered with its range, the value(s) the answer has there (measured on the witness) and a check of those values
    against the range. In the paper the expert is DeepSeek-R1 (verified responses); here it is an oracle that knows
    a satisfying answer, so it stands for "another, deeper reasoner", not for a stronger model."""
    doc = Doc(witness)
    where = [_where(c.get("scope", [])) for c in constraints]
    groups = ", ".join(f"{where.count(w)} on {w}" for w in dict.fromkeys(where))
    lines = [f"{len(constraints)} constraints: {groups}."]
    for i, (c, w) in enumerate(zip(constraints, where), 1):
        verdict = verify(Constraint.from_dict(c), doc)
        values = " ".join(str(r.actual) for r in verdict.records)
        lines += [f"{i}. {w}: {_what(c['target'])} {_bound(c['range'])}", f"   answer: {values}",
                  f"   check: {values} {'within' if verdict.satisfied else 'OUTSIDE'} {_bound(c['range'])}"]
    return "\n".join(lines)


def expert_file(train_path, expert_path, out_path) -> str:
    """out_path (built once): the expert pairs of `expert_path` (write_dataset's expert.jsonl, the training
    prompts' witnesses) with `expert_plan`'s reasoning in place of `plan`'s, the constraints read from the
    matching rows of `train_path`. Written beside and renamed, so a killed build leaves no half file."""
    import os
    import re

    out = Path(out_path)
    if out.exists():
        return str(out)
    train = [json.loads(line) for line in Path(train_path).read_text(encoding="utf-8").splitlines() if line.strip()]
    experts = [json.loads(line) for line in Path(expert_path).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = []
    for row, pair in zip(train, experts):
        if row["prompt"] != pair["prompt"]:
            raise ValueError(f"{expert_path}: its rows do not follow {train_path}'s ({pair['prompt'][:40]!r})")
        witness = re.search(r"<answer>\n(.*)\n</answer>\Z", pair["response"], re.S).group(1)
        constraints = json.loads(row["label"])["constraints"]
        rows.append({"prompt": row["prompt"], "response": raif_response(expert_plan(constraints, witness), witness)})
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, out)
    return str(out)


def raif_response(reasoning: str, answer: str) -> str:
    """RAIF's answer format (eq. 4): the reasoning inside <think>, the answer inside <answer>. With no reasoning
    the think block is RAIF's empty one, `<think>\\n\\n</think>\\n` (the prefix of its no-think rollouts)."""
    return f"<think>\n{reasoning}\n</think>\n<answer>\n{answer}\n</answer>"


def write_dataset(out_dir, n_train: int, n_test: int, seed: int, profile: str = "tiny") -> dict:
    """train.jsonl and test.jsonl (disjoint seeds, prompts deduplicated across splits), stats.json, and
    expert.jsonl: each training prompt with an expert response in RAIF's format (the plan, then the witness;
    `raif_response`), the behaviour-cloning data of RAIF eq. 8."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    instances = _instances(n_train, seed, profile)
    train = [_row(inst, f"{seed}-{i}") for i, inst in enumerate(instances)]
    seen = {r["prompt"] for r in train}
    test = [r for r in dataset(n_test + n_test // 4 + 8, seed + 1_000_003, profile) if r["prompt"] not in seen][:n_test]
    expert = [{"prompt": inst["prompt"], "response": raif_response(plan(inst["constraints"], inst["witness"]),
                                                                   inst["witness"])} for inst in instances]
    for name, rows in (("train", train), ("test", test), ("expert", expert)):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    stats = statistics(train)
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    return stats


# ---- distribution and diversity (ScopeIF Fig. 5/6, Table 5) -------------------------------------------------

def statistics(rows: list[dict], diversity_sample: int = 300, seed: int = 0) -> dict:
    constraints = [c for r in rows for c in json.loads(r["label"])["constraints"]]
    cat = lambda key: dict(Counter(c["category"][key] for c in constraints).most_common())
    outer = dict(Counter(c["category"]["scope"].split(" -> ")[0].split("(")[0] if " -> " not in
                         c["category"]["scope"] else "Nested" for c in constraints).most_common())
    prompts = [r["prompt"] for r in rows]
    sample = random.Random(seed).sample(prompts, min(diversity_sample, len(prompts)))
    return {"instructions": len(rows), "constraints": len(constraints),
            "constraints_per_instruction": round(len(constraints) / max(1, len(rows)), 3),
            "scope_selector": outer, "scope": cat("scope"), "primary_target": cat("primary_target"),
            "secondary_target": cat("secondary_target"), "range": cat("range"),
            "self_bleu4": round(self_bleu(sample), 4), "distinct2": round(distinct_n(prompts, 2), 4),
            "entropy4": round(entropy_n(prompts, 4), 4)}


def _ngrams(tokens: list[str], n: int) -> list[tuple]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: list[str], n: int = 2) -> float:
    """Distinct-n: unique n-grams over all n-grams of the corpus."""
    grams = [g for t in texts for g in _ngrams(t.lower().split(), n)]
    return len(set(grams)) / max(1, len(grams))


def entropy_n(texts: list[str], n: int = 4) -> float:
    """Shannon entropy (nats) of the corpus's n-gram distribution."""
    counts = Counter(g for t in texts for g in _ngrams(t.lower().split(), n))
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values()) if total else 0.0


def self_bleu(texts: list[str]) -> float:
    """Self-BLEU-4 (Zhu et al. 2018): each text scored against all the others; lower is more diverse.
    NLTK's sentence BLEU with uniform weights and +1 smoothing of the higher orders (Lin and Och 2004)."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    toks = [t.lower().split() for t in texts]
    if len(toks) < 2:
        return 0.0
    smoothing = SmoothingFunction().method2
    return sum(sentence_bleu(toks[:i] + toks[i + 1:], h, smoothing_function=smoothing)
               for i, h in enumerate(toks)) / len(toks)


# ---- the LLM path: ScopeIF's prompts through a judge client (section 4.2; ifcore.synth_prompts) ---------------

LLM_SYNTH_VERSION = 1
LLM_STAGES = ("atomic", "crossover", "instruction_quality", "checklist_quality")


def llm_combinations(rng: random.Random) -> list[dict]:
    """Every compatible Scope x Target x Range category, as Table 9 receives it. Capacity never takes
    Prohibition (a selected text has some length); Global is never nested, the other selectors are nested by a
    coin flip fixed per combination (as the reference code draws it once per configuration)."""
    from ifcore.schema import RANGES, SCOPE_SELECTORS, TARGETS

    return [{"Scope": s, "Nested Scope": s != "Global" and rng.random() < 0.5, "Target": t, "Range": r}
            for s in SCOPE_SELECTORS for t in TARGETS for r in RANGES if (t, r) != ("Capacity", "Prohibition")]


def seed_instructions(path=None) -> list[str]:
    """Seed instructions: the "prompt" of each row of a JSONL file, or by default every genre x topic task of
    the template path ("Write a short story about the sea.")."""
    if path is None:
        return [f"Write {g} {t}." for t in TOPICS for g in GENRES]
    from ifcore.jsonl import JsonlError, read_jsonl

    rows = read_jsonl(path, ("prompt",))
    for n, row in enumerate(rows, 1):
        if not isinstance(row["prompt"], str) or not row["prompt"].strip():
            raise JsonlError(f"{path}: row {n}: prompt: expected a non-empty string")
    return [row["prompt"] for row in rows]


def _ask(client, calls: list[tuple[str, str, object]], stats: dict, **params) -> list:
    """(stage, prompt, parser) calls -> parsed values, None where the call failed (JudgeError) or its output did
    not parse (JudgeParseError); both are counted per stage, neither stops the run."""
    from ifcore.judge.client import JudgeError
    from ifcore.judge.prompts import JudgeParseError

    prompts = [prompt for _, prompt, _ in calls]
    if hasattr(client, "complete_many"):
        replies = client.complete_many(prompts, return_exceptions=True, **params)
    else:
        replies = []
        for prompt in prompts:
            try:
                replies.append(client.complete(prompt, **params))
            except JudgeError as e:
                replies.append(e)
    out = []
    for (stage, _, parse), reply in zip(calls, replies):
        stats["calls"][stage] += 1
        if isinstance(reply, Exception):
            stats["failed"][stage] += 1
            out.append(None)
            continue
        try:
            out.append(parse(reply))
        except JudgeParseError:
            stats["malformed"][stage] += 1
            out.append(None)
    return out


def _by_count(candidates: list[dict], rng: random.Random) -> list[dict]:
    """Round robin over the constraint counts (each group shuffled): ScopeIF samples the retained instructions
    across constraint counts so that complexity varies."""
    groups: dict[int, list] = {}
    for c in candidates:
        groups.setdefault(len(c["constraints"]), []).append(c)
    queues = [rng.sample(g, len(g)) for _, g in sorted(groups.items())]
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def llm_dataset(client, n: int, seed: int, k_values=(2, 4, 6, 8), iterations: int = 10,
                combinations: int | None = None, crossovers: int | None = None, seeds: list[str] | None = None,
                candidates_per_crossover: int = 16, temperature: float = 1.0) -> tuple[list[dict], dict]:
    """n rows synthesized by an LLM as ScopeIF section 4.2 does, and the run's statistics.

    1. Atomic constraints (Table 9): for each compatible combination (all, or `combinations` of them drawn by
       the seed), `iterations` chained calls, each from a seed instruction, with the combination's earlier
       results as history; every result is a one-constraint instruction and a pool entry.
    2. Crossover (Table 10): `crossovers` calls (default n/5 rounded up), each with 16 pool constraints drawn
       at random and a target k cycling through `k_values`; an instruction keeps the category of each source
       constraint, and one with fewer than k constraints or an unknown source is rejected.
    3. Quality (Tables 11 and 12): candidates, taken round robin over constraint counts, are kept when both the
       instruction and its constraint checklist are judged high quality, until n are kept.
    `client` is anything with `complete(prompt, **params) -> str` (`complete_many` is used when present);
    generation samples at `temperature`, the quality judge is greedy. Each constraint is a judged one: {"id",
    "text", "judge": true, "category"}."""
    from ifcore.synth_prompts import (atomic_prompt, checklist_quality_prompt, crossover_prompt,
                                      instruction_quality_prompt, parse_atomic, parse_crossover, parse_quality)
    from ifcore.schema import TARGETS

    for name, value in (("iterations", iterations), ("combinations", combinations), ("crossovers", crossovers),
                        ("candidates_per_crossover", candidates_per_crossover)):
        if value is not None and value < 1:
            raise ValueError(f"{name}: must be at least 1, got {value}")
    if not k_values or any(k < 1 for k in k_values):
        raise ValueError(f"k_values: expected targets of at least 1 constraint, got {list(k_values)}")
    rng = random.Random(seed)
    combos = llm_combinations(rng)
    if combinations is not None:
        combos = rng.sample(combos, min(combinations, len(combos)))
    seed_list = list(seeds) if seeds is not None else seed_instructions()
    if not seed_list:
        raise ValueError("no seed instructions")
    next_seed = itertools.cycle(rng.sample(seed_list, len(seed_list))).__next__
    stats = {"version": LLM_SYNTH_VERSION, "combinations": len(combos), "iterations": iterations,
             **{key: dict.fromkeys(LLM_STAGES, 0) for key in ("calls", "failed", "malformed")},
             "rejected": {"atomic": 0, "crossover": 0}, "dropped": {"instruction_quality": 0,
                                                                   "checklist_quality": 0, "unchecked": 0}}
    gen = {"temperature": temperature}

    history: list[list[dict]] = [[] for _ in combos]
    pool, candidates = [], []
    for _ in range(iterations):  # the calls of one iteration are independent: they run concurrently
        calls = [("atomic", atomic_prompt(next_seed(), combo, history[j]), parse_atomic)
                 for j, combo in enumerate(combos)]
        for j, parsed in enumerate(_ask(client, calls, stats, **gen)):
            if parsed is None:
                continue
            items, rejected = parsed
            stats["rejected"]["atomic"] += len(rejected)
            primary = combos[j]["Target"]
            seconds = {s.lower(): s for s in TARGETS[primary]}
            for item in items:
                second = seconds.get(item["secondary_target"].lower())
                if second is None or item["scope"].split("(")[0] != combos[j]["Scope"]:
                    stats["rejected"]["atomic"] += 1  # outside the combination it was asked for
                    continue
                category = {"scope": item["scope"], "primary_target": primary, "secondary_target": second,
                            "range": combos[j]["Range"]}
                history[j].append(item | {"secondary_target": second})
                pool.append({"text": item["constraint"], "category": category})
                candidates.append({"prompt": item["new_instruction"], "constraints": [pool[-1]]})
    stats["pool"] = len(pool)

    calls, drawn = [], []
    for c in range((crossovers if crossovers is not None else -(-n // 5)) if pool else 0):
        k = k_values[c % len(k_values)]
        drawn.append((k, rng.sample(pool, min(candidates_per_crossover, len(pool)))))
        calls.append(("crossover", crossover_prompt(next_seed(), drawn[-1][1], k), parse_crossover))
    for (k, given), parsed in zip(drawn, _ask(client, calls, stats, **gen)):
        if parsed is None:
            continue
        items, rejected = parsed
        stats["rejected"]["crossover"] += len(rejected)
        for item in items:
            if len(item["constraints"]) < k or any(not 0 <= c["source"] < len(given) for c in item["constraints"]):
                stats["rejected"]["crossover"] += 1
                continue
            candidates.append({"prompt": item["instruction"], "constraints": [
                {"text": c["text"], "category": given[c["source"]]["category"]} for c in item["constraints"]]})
    seen: set[str] = set()
    candidates = [c for c in candidates if not (c["prompt"] in seen or seen.add(c["prompt"]))]
    stats["candidates"] = len(candidates)

    kept, order = [], _by_count(candidates, rng)
    while len(kept) < n and order:
        size = max(8, 2 * (n - len(kept)))  # what is still missing, twice over: few calls beyond the need
        batch, order = order[:size], order[size:]
        calls = [call for c in batch for call in (
            ("instruction_quality", instruction_quality_prompt(c["prompt"]), parse_quality),
            ("checklist_quality", checklist_quality_prompt(c["prompt"], [x["text"] for x in c["constraints"]]),
             parse_quality))]
        verdicts = _ask(client, calls, stats)
        for c, instruction_ok, checklist_ok in zip(batch, verdicts[::2], verdicts[1::2]):
            if instruction_ok is None or checklist_ok is None:
                stats["dropped"]["unchecked"] += 1  # an instance no judge vetted is not kept
            elif not instruction_ok:
                stats["dropped"]["instruction_quality"] += 1
            elif not checklist_ok:
                stats["dropped"]["checklist_quality"] += 1
            else:
                kept.append(c)
    kept = rng.sample(kept[:n], min(n, len(kept)))
    stats["kept"] = len(kept)
    rows = [{"id": f"llm{seed}-{i}", "prompt": c["prompt"], "label": json.dumps({"constraints": [
        {"id": f"c{j + 1}", "text": x["text"], "judge": True, "category": x["category"]}
        for j, x in enumerate(c["constraints"])]}, ensure_ascii=False)} for i, c in enumerate(kept)]
    return rows, stats


def write_llm_dataset(out_dir, client, n_train: int, n_test: int, seed: int, **options) -> dict:
    """train.jsonl, test.jsonl and stats.json of `llm_dataset` (n_train + n_test rows, the first n_test held out);
    stats.json has `statistics` of the training rows and, under "llm", the calls, failures and filter counts."""
    rows, llm_stats = llm_dataset(client, n_train + n_test, seed, **options)
    test, train = rows[:n_test], rows[n_test:]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", train), ("test", test)):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in split:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    stats = statistics(train) | {"test_instructions": len(test), "llm": llm_stats}
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    return stats
