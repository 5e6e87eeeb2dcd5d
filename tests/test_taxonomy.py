"""One verified case per ScopeIF selector x response unit, per Target subcategory and per Range category.

Every expected record below was counted by hand from DOC (see the unit inventory in test_inventory)."""
import math

import pytest

import ifcore

DOC = '''# Trip Notes

We left at dawn. The road was empty.

## Packing
- tent
- stove
  - fuel canister
- map

## Budget
| item | cost |
|------|------|
| fuel | 40 |
| food | 25 |

```json
{"days": 3, "people": {"adults": 2, "kids": [1, 2]}}
```

> Travel light.

Final words here.
'''
N = None


def each(unit, **kw):
    return {"unit": unit, "select": "each", **kw}


def at(unit, i, **kw):
    return {"unit": unit, "select": "at", "index": i, **kw}


def where(unit, target, rng, **kw):
    return {"unit": unit, "select": "where", "if": {"target": target, "range": rng}, **kw}


def check(scope, target, rng, records, satisfied, doc=DOC):
    v = ifcore.verify({"scope": scope, "target": target, "range": rng}, doc)
    assert [(r.lo, r.hi, r.actual) for r in v.records] == records
    assert v.satisfied is satisfied
    return v


def test_inventory():
    d = ifcore.Doc(DOC)
    counts = {u: len(d.within(u, d.root, k)) for u, k in [
        ("paragraph", None), ("line", None), ("sentence", None), ("word", None), ("section", None),
        ("block", "list"), ("block", "table"), ("block", "code"), ("block", "json"), ("block", "quote")]}
    # Paragraphs: the prose runs only (the two-sentence one, the quote, the last line); the headings, the list,
    # the table and the code block are none. Sentences: prose only (paragraphs, list items, the quote).
    assert counts == {"paragraph": 3, "line": 17, "sentence": 8, "word": 37, "section": 3, "block": 1}
    el = {k: len(d.within("element", d.root, k)) for k in ("list_item", "table_row", "table_cell", "heading",
                                                            "json_pair")}
    assert el == {"list_item": 4, "table_row": 2, "table_cell": 4, "heading": 3, "json_pair": 4}


SELECTOR_CASES = {
    # Global
    "global/response": ([], {"count": "word"}, {"max": 40}, [(N, 40, 37)], True),
    # Traversal
    "traversal/section": ([each("section")], {"count": "paragraph"}, {"min": 1},
                          [(1, N, 3), (1, N, 0), (1, N, 2)], False),  # Packing holds only a list
    "traversal/block": ([each("block", kind="list")], {"count": "element", "kind": "list_item"}, {"eq": 4},
                        [(4, 4, 4)], True),
    "traversal/element": ([each("element", kind="list_item")], {"count": "word"}, {"max": 2},
                          [(N, 2, 1), (N, 2, 3), (N, 2, 2), (N, 2, 1)], False),
    "traversal/paragraph": ([each("paragraph")], {"count": "line"}, {"max": 5},
                            [(N, 5, n) for n in (1, 1, 1)], True),
    "traversal/line": ([each("line")], {"count": "char"}, {"max": 60},
                       [(N, 60, n) for n in (12, 36, 10, 6, 7, 15, 5, 9, 15, 15, 13, 13, 7, 52, 3, 15, 17)], True),
    "traversal/sentence": ([each("sentence")], {"count": "word"}, {"max": 3},
                           [(N, 3, n) for n in (4, 4, 1, 1, 2, 1, 2, 3)], False),
    "traversal/word": ([each("word")], {"count": "char"}, {"max": 10}, None, True),
    "traversal/char": ([at("word", 0), each("char")], {"count": "class", "of": "uppercase"}, {"max": 0},
                       [(N, 0, 1), (N, 0, 0), (N, 0, 0), (N, 0, 0)], False),  # T r i p
    # Position
    "position/section": ([at("section", 1)], {"has": ["tent", "map"]}, {"eq": 2}, [(2, 2, 2)], True),
    "position/block": ([at("block", 0, kind="table")], {"count": "element", "kind": "table_row"}, {"eq": 2},
                       [(2, 2, 2)], True),
    "position/element": ([at("element", -1, kind="heading")], {"starts_with": "Bud"}, {"eq": 1}, [(1, 1, 1)], True),
    "position/paragraph": ([at("paragraph", 0)], {"count": "sentence"}, {"eq": 2}, [(2, 2, 2)], True),
    "position/line": ([at("line", 2)], {"ends_with": "Packing"}, {"eq": 1}, [(1, 1, 1)], True),
    "position/sentence": ([at("sentence", 1)], {"count": "word"}, {"eq": 4}, [(4, 4, 4)], True),
    "position/word": ([at("word", 2)], {"count": "char"}, {"eq": 2}, [(2, 2, 2)], True),
    "position/char": ([at("char", -1)], {"count": "class", "of": "punctuation"}, {"eq": 1}, [(1, 1, 1)], True),
    # Condition
    "condition/section": ([where("section", {"has": ["tent"]}, {"min": 1})],
                          {"count": "element", "kind": "list_item"}, {"min": 5}, [(5, N, 4), (5, N, 4)], False),
    "condition/block": ([where("block", {"valid": "json"}, {"eq": 1}, kind="code")], {"depth": "json"}, {"eq": 3},
                        [(3, 3, 3)], True),
    "condition/element": ([where("element", {"valid": "integer"}, {"eq": 1}, kind="table_cell")],
                          {"count": "class", "of": "digit"}, {"eq": 2}, [(2, 2, 2), (2, 2, 2)], True),
    "condition/paragraph": ([where("paragraph", {"count": "sentence"}, {"min": 2})], {"count": "word"}, {"max": 8},
                            [(N, 8, 8)], True),
    "condition/line": ([where("line", {"matches": "^- "}, {"min": 1})], {"count": "word"}, {"eq": 1},
                       [(1, 1, 1), (1, 1, 1), (1, 1, 2), (1, 1, 1)], False),
    "condition/word": ([where("word", {"count": "class", "of": "uppercase"}, {"min": 1})], {"count": "char"},
                       {"max": 6}, [(N, 6, n) for n in (4, 5, 2, 3, 7, 6, 6, 5)], False),
    "condition/char": ([where("char", {"count": "class", "of": "digit"}, {"min": 1})], {"matches": "[0-4]"},
                       {"eq": 1}, [(1, 1, n) for n in (1, 1, 1, 0, 1, 1, 1, 1)], False),  # table 4 0 2 5, then JSON 3 2 1 2
    # Nested
    "nested/section>element": ([each("section"), each("element", kind="list_item")], {"count": "word"}, {"max": 3},
                               [(N, 3, n) for n in (1, 3, 2, 1, 1, 3, 2, 1)], True),
    "nested/block>element": ([each("block", kind="table"), at("element", 0, kind="table_row")],
                             {"count": "element", "kind": "table_cell"}, {"eq": 2}, [(2, 2, 2)], True),
    "nested/condition>position": ([where("paragraph", {"count": "sentence"}, {"min": 2}), at("sentence", -1)],
                                  {"count": "word"}, {"max": 4}, [(N, 4, 4)], True),
    # Lines 10 (the table's delimiter row) and 15 (the closing fence) have no word: two missing segments. A
    # word is trimmed to its letters and digits: "```json" is "json", '{"days":' is "days".
    "nested/line>word(missing)": ([each("line"), at("word", 0)], {"count": "char"}, {"min": 2},
                                  [(2, N, n) for n in (4, 2, 7, 4, 5, 4, 3, 6, 4)] + [(2, N, None)]
                                  + [(2, N, n) for n in (4, 4, 4, 4)] + [(2, N, None)] + [(2, N, 6), (2, N, 5)],
                                  False),
}


@pytest.mark.parametrize("name", list(SELECTOR_CASES))
def test_selector_over_unit(name):
    scope, target, rng, records, satisfied = SELECTOR_CASES[name]
    if records is None:  # 37 words, none longer than 10 characters
        v = ifcore.verify({"scope": scope, "target": target, "range": rng}, DOC)
        assert len(v.records) == 37 and v.satisfied is satisfied
        assert max(r.actual for r in v.records) == 8  # "canister"; '{"adults":' is the word "adults"
        return
    v = check(scope, target, rng, records, satisfied)
    if any(r.actual is None for r in v.records):
        assert v.graded() == 0.0


CHAIN = "I like tea. Tea is warm. Warm days end. Night falls."

TARGET_CASES = {  # subcategory -> (scope, target, range, records, satisfied[, doc])
    "Capacity/Text Length": ([at("paragraph", 0)], {"count": "char"}, {"min": 30, "max": 40}, [(30, 40, 36)], True),
    "Capacity/Unit Count": ([], {"count": "section"}, {"eq": 3}, [(3, 3, 3)], True),
    "Literals/Specific Strings": ([], {"count": "occurrence", "any_of": ["fuel", "food"]}, {"eq": 3},
                                  [(3, 3, 3)], True),
    "Literals/Literal Classes": ([], {"count": "class", "of": "capitalized_word"}, {"eq": 8}, [(8, 8, 8)], True),
    "Structure/Containers": ([], {"count": "block", "kind": "table"}, {"eq": 1}, [(1, 1, 1)], True),
    "Structure/Members": ([], {"count": "element", "kind": "json_pair"}, {"eq": 4}, [(4, 4, 4)], True),
    "Structure/Nesting Depth": ([], {"depth": "list"}, {"eq": 2}, [(2, 2, 2)], True),
    "Checklist/Presence": ([], {"has": ["Packing", "Budget", "Weather"], "as": "heading"}, {"eq": 3},
                           [(3, 3, 2)], False),
    "Checklist/Validity": ([at("block", 0, kind="code")], {"valid": "json"}, {"eq": 1}, [(1, 1, 1)], True),
    "Pattern/Boundary": ([at("block", 0, kind="quote")], {"wrapped": [">", "."]}, {"eq": 1}, [(1, 1, 1)], True),
    "Pattern/Skeleton": ([], {"matches": r"(?m)^## \w+$"}, {"eq": 2}, [(2, 2, 2)], True),
    "Pattern/Surface": ([], {"count": "class", "of": "uppercase_word"}, {"eq": 0}, [(0, 0, 0)], True),
    "Relations/Ordering Relations": ([], {"sorted": "alphabetical", "unit": "element", "kind": "list_item"},
                                     {"eq": 0}, [(0, 0, 2)], False),
    "Relations/Chaining Relations": ([], {"chain": "last_first", "unit": "sentence"}, {"min": 2}, [(2, N, 2)], True,
                                     CHAIN),
    "Relations/Positional Relations": ([], {"acrostic": "WTP", "unit": "paragraph"}, {"eq": 0}, [(0, 0, 1)], False),
}


@pytest.mark.parametrize("name", list(TARGET_CASES))
def test_target_subcategory(name):
    scope, target, rng, records, satisfied, *doc = TARGET_CASES[name]
    check(scope, target, rng, records, satisfied, *doc)


def test_all_fifteen_target_subcategories_are_covered():
    from ifcore.schema import TARGETS
    assert {f"{p}/{s}" for p, subs in TARGETS.items() for s in subs} == set(TARGET_CASES)


RANGE_CASES = {
    "One-Sided Bounds": ([], {"count": "sentence"}, {"min": 5}, [(5, N, 8)], True),
    "Prohibition": ([], {"count": "occurrence", "of": "hotel"}, {"eq": 0}, [(0, 0, 0)], True),
    "Equality": ([], {"count": "element", "kind": "heading"}, {"eq": 3}, [(3, 3, 3)], True),
    "Intervals": ([], {"count": "line"}, {"min": 10, "max": 20}, [(10, 20, 17)], True),
    "Comparison": ([at("element", 0, kind="table_row")], {"count": "class", "of": "digit"},
                   {"gt": {"scope": [at("element", 1, kind="table_row")], "target": {"count": "class", "of": "digit"}}},
                   [(3, N, 2)], False),
    "Arithmetic Relations": ([], {"count": "element", "kind": "list_item"},
                             {"eq": {"plus": 1, "of": {"scope": [], "target": {"count": "element", "kind": "table_cell"}}}},
                             [(5, 5, 4)], False),
}


@pytest.mark.parametrize("name", list(RANGE_CASES))
def test_range_category(name):
    check(*RANGE_CASES[name])


def test_numeric_ordering_skips_units_without_numbers():
    # Cells fuel, 40, food, 25: the numbered cells 40 then 25 are one descent.
    check([at("block", 0, kind="table")], {"sorted": "numeric", "unit": "element", "kind": "table_cell"}, {"eq": 0},
          [(0, 0, 1)], False)


def test_json_key_presence_and_depth():
    check([], {"has": ["days", "kids", "pets"], "as": "json_key"}, {"eq": 3}, [(3, 3, 2)], False)
    check([], {"depth": "json"}, {"max": 3}, [(N, 3, 3)], True)


def test_graded_value_of_a_partial_violation():
    v = check(*SELECTOR_CASES["traversal/sentence"][:5])
    # Two of 8 sentences have 4 words against a maximum of 3: d = 1, s = max(1, (0 + 3) / 2) = 1.5,
    # r = exp(-3 * 1 / 1.5) each, and g = (r * r) ** (1/8).
    assert v.graded() == pytest.approx(math.exp(-4.0) ** (1 / 8))
