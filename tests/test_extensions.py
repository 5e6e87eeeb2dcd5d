"""Schema extensions adopted from the ScopeIF-Test formalization work (docs/schema_extensions.md), each
pinned on a hand-counted response."""
import pytest

import ifcore

N = None
TEXT = """Alpha beta gamma. Delta epsilon.

Zeta eta theta iota. Kappa lambda mu nu xi. Omicron pi.

Rho sigma."""
MD = """## Intro

Short text here.

## Items

- First ITEM with CAPS
  - nested ONE
  - nested TWO
- Second item

| Factor | Note |
|---|---|
| Style | good |
| Pace | slow |

```python
print(1)
```
"""


def records(d, text):
    v = ifcore.verify(d, text)
    return [(r.lo, r.hi, r.actual) for r in v.records], v.satisfied


def test_x1_count_where():
    # Sentences with at most 2 words: "Delta epsilon.", "Omicron pi.", "Rho sigma." -> 3.
    d = {"scope": [], "target": {"count": "sentence", "where": {"target": {"count": "word"}, "range": {"max": 2}}},
         "range": {"eq": 3}}
    assert records(d, TEXT) == ([(3, 3, 3)], True)


def test_x2_slice_is_one_segment_and_an_empty_slice_is_missing():
    d = {"scope": [{"unit": "word", "select": "slice", "start": 1, "stop": 4}], "target": {"count": "char"},
         "range": {"max": 20}}
    assert records(d, TEXT) == ([(N, 20, len("beta gamma. Delta"))], True)
    d["scope"][0].update(start=50, stop=60)
    assert records(d, TEXT) == ([(N, 20, N)], False)


def test_x3_distinct_first_letters_of_paragraph_words():
    # Paragraph 2 words start with z e t i k l m n x o p: 11 distinct first letters.
    d = {"scope": [{"unit": "paragraph", "select": "at", "index": 1}],
         "target": {"distinct": "word", "by": "first_letter"}, "range": {"min": 11}}
    assert records(d, TEXT) == ([(11, N, 11)], True)


def test_x4_pairs_of_adjacent_sentences_growing_in_words():
    # Sentence word counts 3 2 4 5 2 2: pairs where the next is longer: (2,4) and (4,5) -> 2.
    d = {"scope": [], "target": {"pairs": "sentence", "left": "words", "rel": "lt", "right": "words"},
         "range": {"eq": 2}}
    assert records(d, TEXT) == ([(2, 2, 2)], True)


def test_x5_comparison_against_a_scaled_reference():
    # Words: paragraph 1 has 5, paragraph 3 has 2; 5 > 2 * 2 holds.
    d = {"scope": [{"unit": "paragraph", "select": "at", "index": 0}], "target": {"count": "word"},
         "range": {"gt": {"times": 2, "of": {"scope": [{"unit": "paragraph", "select": "at", "index": -1}],
                                             "target": {"count": "word"}}}}}
    assert records(d, TEXT) == ([(5, N, 5)], True)


def test_x6_unit_options():
    assert records({"scope": [], "target": {"count": "element", "kind": "heading", "level": 2}, "range": {"eq": 2}},
                   MD) == ([(2, 2, 2)], True)
    assert records({"scope": [], "target": {"count": "block", "kind": "list", "ordered": True}, "range": {"eq": 0}},
                   MD) == ([(0, 0, 0)], True)
    assert records({"scope": [], "target": {"count": "block", "kind": "code", "lang": "python"}, "range": {"eq": 1}},
                   MD) == ([(1, 1, 1)], True)
    cells = {"scope": [{"unit": "element", "kind": "table_cell", "column": "Factor", "select": "each"}],
             "target": {"count": "class", "of": "uppercase"}, "range": {"eq": 1}}
    assert records(cells, MD) == ([(1, 1, 1), (1, 1, 1)], True)


def test_x6b_list_item_without_its_sub_list():
    # Capitals: item 1 own text "First ITEM with CAPS" = 9; with its sub-list it would be 9 + 3 + 3.
    d = {"scope": [{"unit": "element", "kind": "list_item", "select": "at", "index": 0, "exclude_nested": True}],
         "target": {"count": "class", "of": "uppercase"}, "range": {"max": 9}}
    assert records(d, MD) == ([(N, 9, 9)], True)
    del d["scope"][0]["exclude_nested"]
    assert records(d, MD) == ([(N, 9, 15)], False)


def test_x7_prose_leaves_out_headings_lists_and_tables():
    d = {"scope": [], "target": {"count": "sentence", "prose": True}, "range": {"eq": 1}}
    assert records(d, MD) == ([(1, 1, 1)], True)  # only "Short text here."


def test_x8_satisfies_counts_the_conditions_that_hold():
    d = {"scope": [{"unit": "sentence", "select": "each"}],
         "target": {"satisfies": [{"target": {"count": "word"}, "range": {"min": 3}},
                                  {"target": {"starts_with": "O"}, "range": {"eq": 1}}]},
         "range": {"min": 1}}
    # Per sentence: 3w; 2w; 4w; 5w; "Omicron pi." starts with O; 2w -> 1 0 1 1 1 0
    assert records(d, TEXT) == ([(1, N, n) for n in (1, 0, 1, 1, 1, 0)], False)


def test_x9_self_and_parent_references():
    # Every paragraph's sentence count at most a third of its own word count: 2 <= 5/3? no; 3 <= 11/3 yes; 1 <= 2/3 no.
    d = {"scope": [{"unit": "paragraph", "select": "each"}], "target": {"count": "sentence"},
         "range": {"le": {"times": 0.34, "of": {"scope": "self", "target": {"count": "word"}}}}}
    recs, ok = records(d, TEXT)
    assert [r[2] for r in recs] == [2, 3, 1] and [r[1] for r in recs] == pytest.approx([1.7, 3.74, 0.68])
    assert not ok
    # The last sentence of each paragraph has fewer words than its paragraph has sentences + 2.
    d = {"scope": [{"unit": "paragraph", "select": "each"}, {"unit": "sentence", "select": "at", "index": -1}],
         "target": {"count": "word"}, "range": {"lt": {"plus": 2, "of": {"scope": "parent", "target": {"count": "sentence"}}}}}
    assert records(d, TEXT) == ([(N, 3, 2), (N, 4, 2), (N, 2, 2)], True)


def test_x10_condition_measured_on_a_part_of_the_unit():
    d = {"scope": [{"unit": "element", "kind": "table_row", "select": "where",
                    "if": {"scope": [{"unit": "element", "kind": "table_cell", "column": "Factor", "select": "each"}],
                           "target": {"matches": "^Style$"}, "range": {"eq": 1}}}],
         "target": {"count": "occurrence", "of": "good"}, "range": {"eq": 1}}
    assert records(d, MD) == ([(1, 1, 1)], True)


def test_x12_valid_xml():
    d = {"scope": [], "target": {"valid": "xml"}, "range": {"eq": 1}}
    assert records(d, "<note><to>Ann</to></note>") == ([(1, 1, 1)], True)
    assert records(d, "<note><to>Ann</note>") == ([(1, 1, 0)], False)


def test_a_segment_is_not_one_of_its_own_parts():
    # Item 1 has two sub-items; item 2 none; the nested items none.
    d = {"scope": [{"unit": "element", "kind": "list_item", "select": "each"}],
         "target": {"count": "element", "kind": "list_item"}, "range": {"max": 2}}
    assert records(d, MD) == ([(N, 2, 2), (N, 2, 0), (N, 2, 0), (N, 2, 0)], True)
