"""ifcore.tracking: the code that ran a run, and metrics rows under the names OpenRLHF logs to Weights & Biases."""
import pytest

from ifcore import tracking
from ifcore.run import curves


def test_a_metrics_row_gets_openrlhfs_names_and_step_keys():
    row = {"type": "train", "step": 7, "reward_mean": 0.5, "csr": 0.25, "format_ok": 0.75, "kl": 0.01,
           "identical_pair_fraction": 0.1, "note": "text", "done": True}
    assert tracking.openrlhf_row(row) == {
        "train/global_step": 7, "train/rollout/reward_mean": 0.5, "train/cla": 0.25, "train/format_fail": 0.25,
        "train/kl": 0.01, "train/identical_pair_fraction": 0.1}
    assert tracking.openrlhf_row({"type": "eval", "step": 2, "eval_response_len": 30.0}) == {
        "eval/global_step": 2, "eval/eval_response_length_mean": 30.0}


def test_curves_reads_back_under_the_same_table():
    # One table for both directions: OpenRLHF's runs read into metrics.jsonl names, ours logged under OpenRLHF's.
    assert curves.RENAMES is tracking.OPENRLHF_NAMES
    for openrlhf, ours in tracking.OPENRLHF_NAMES.items():
        assert tracking.openrlhf_row({"type": "train", "step": 1, ours: 1.0}) == {
            "train/global_step": 1, f"train/{openrlhf}": 1.0}


def test_this_checkout_has_a_commit():
    code = tracking.code_version()
    assert len(code["commit"]) == 40 and isinstance(code["dirty"], bool)


def test_no_project_no_logger_and_a_missing_wandb_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("IFCORE_WANDB_PROJECT", raising=False)
    assert tracking.wandb_run(tmp_path, "r", {}) is None
    monkeypatch.setenv("IFCORE_WANDB_PROJECT", "p")
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'ifcore\[tracking\]'"):
        tracking.wandb_run(tmp_path, "r", {})
