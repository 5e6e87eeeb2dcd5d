"""Factorized synthesis: reproducible, feasible by construction, taxonomy-complete; diversity metrics."""
import json
import subprocess
import sys

import pytest

import ifcore
from ifcore import synth
from ifcore.bench import speed
from ifcore.schema import TARGETS


def test_same_seed_same_data_and_different_seed_different_data():
    assert synth.dataset(40, seed=3) == synth.dataset(40, seed=3)
    assert synth.dataset(40, seed=3) != synth.dataset(40, seed=4)


@pytest.mark.parametrize("profile", ["tiny", "full"])
def test_every_instruction_is_satisfied_by_its_witness(profile):
    import random

    rng = random.Random(11)
    for _ in range(60):
        inst = synth.instruction(rng, profile)
        assert 1 <= len(inst["constraints"]) <= synth.PROFILES[profile]["max_constraints"] + 1
        doc = ifcore.Doc(inst["witness"])
        for c in inst["constraints"]:
            assert c["text"] in inst["prompt"]
            parsed = ifcore.Constraint.from_dict(c)  # validates the category labels too
            assert ifcore.verify(parsed, doc).satisfied, c


def test_rows_are_openrlhf_prompt_rows_with_valid_labels():
    for row in synth.dataset(30, seed=0):
        assert set(row) == {"id", "prompt", "label"}
        assert len(ifcore.parse_label(row["label"])) >= 1


def test_the_enumeration_covers_every_target_subcategory():
    doc = ifcore.Doc("x")
    import random

    subcats = {(t[3], t[4]) for t in synth._targets(doc, random.Random(0), ["x", "y"]).values()}
    assert subcats == {(p, s) for p, subs in TARGETS.items() for s in subs}
    assert len(synth.families()) > 30


def test_statistics_cover_all_range_categories_on_a_realistic_sample():
    stats = synth.statistics(synth.dataset(400, seed=0, profile="full"), diversity_sample=50)
    assert set(stats["range"]) == {"One-Sided Bounds", "Prohibition", "Equality", "Intervals", "Comparison",
                                   "Arithmetic Relations"}
    assert set(stats["scope_selector"]) == {"Global", "Traversal", "Position", "Condition", "Nested"}
    assert len(stats["secondary_target"]) == 15
    tiny = synth.statistics(synth.dataset(600, seed=0), diversity_sample=50)  # fewer families, every selector
    assert set(tiny["scope_selector"]) == set(stats["scope_selector"]) and len(tiny["range"]) == 6


def test_write_dataset_splits_are_disjoint(tmp_path):
    stats = synth.write_dataset(tmp_path, n_train=80, n_test=20, seed=1)
    train = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert len(train) == 80 and len(test) == 20
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert stats["instructions"] == 80 and json.loads((tmp_path / "stats.json").read_text()) == stats


def test_sft_pairs_are_relabelled_witnesses():
    pairs = synth.sft_pairs(5, seed=2)
    assert all(set(p) == {"prompt", "response"} and p["response"] for p in pairs)


def test_diversity_metrics_on_hand_cases():
    assert synth.distinct_n(["a b c", "a b c"], 2) == pytest.approx(2 / 4)
    assert synth.self_bleu(["the cat sat on the mat", "the cat sat on the mat"]) == pytest.approx(1.0)
    assert synth.self_bleu(["a b c d e", "v w x y z"]) == 0.0
    assert synth.entropy_n(["a b c d e"], 4) == pytest.approx(0.6931, abs=1e-4)  # two distinct 4-grams
    # One word differs: clipped precisions 4/5, then +1 smoothed (3+1)/(4+1), (2+1)/(3+1), (1+1)/(2+1).
    assert synth.self_bleu(["a b c d e", "a b c d q"]) == pytest.approx((4 / 5 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25)


def test_cli_writes_a_dataset(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ifcore", "synth", "--output-dir", str(tmp_path), "--train", "20",
                          "--test", "5", "--seed", "7"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["instructions"] == 20
    assert subprocess.run([sys.executable, "-m", "ifcore", "validate-dataset", str(tmp_path / "train.jsonl")],
                          capture_output=True, text=True).returncode == 0


def test_speed_benchmarks_run_small():
    v = speed.verify_speed(responses=10)
    assert v["checks"] == 50 and v["checks_per_second"] > 0 and 150 < v["mean_words_per_response"] < 450
    r = speed.rewards_speed(n_prompts=2, group=2, repeats=1)
    assert r["rollouts"] == 4 and r["constraints_per_rollout"] == 5 and r["min_s"] > 0
    assert 200 < r["answer_words"] < 450  # ~300-word answers
