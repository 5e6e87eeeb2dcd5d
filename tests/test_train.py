"""The embedded trainer (ifcore.train): the GRPO loss on hand-computed cases, the policy directory through
from_pretrained, the metrics contract, determinism under a seed, an exact resume after a SIGKILL, a run
directory that refuses another configuration or a second trainer, checkpoints whose damage is detected (the
previous one resumes), a configuration checked on load, and the cache of default assets.

Data: a small interim ScopeInstruct-like generator below (witness texts, hindsight-relabelled constraints over
all five selectors), so these tests do not depend on ifcore.synth. Models are tiny (about 30k parameters).
"""
from __future__ import annotations

import fcntl
import json
import math
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import train_killed_at_step

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ifcore.rewards import score_response  # noqa: E402
from ifcore.schema import parse_label  # noqa: E402
from ifcore.train.grpo import (TIMING_KEYS, checkpoint_problem, grpo_loss, load_config, read_rows,  # noqa: E402
                               run_identity, train)
from ifcore.train.model import THINK_CLOSE, THINK_OPEN, chat_prompt, load_policy  # noqa: E402
from ifcore.train.sft import WarmStartConfig, default_assets, warm_start  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# ---- interim data: witness texts and constraints they satisfy ----------------------------------------------

WORDS = "river stone light cloud bird tree water field night song wind rain road hill snow fire".split()


def _witness(rng: random.Random) -> str:
    return "\n\n".join(
        " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))).capitalize() + "."
                 for _ in range(rng.randint(1, 3)))
        for _ in range(rng.randint(1, 3)))


def _relabel(text: str, rng: random.Random) -> list[dict]:
    paras = [[s.rstrip(".").split() for s in p.split(". ")] for p in text.split("\n\n")]
    sents = [s for p in paras for s in p]
    words = [w.lower() for s in sents for w in s]
    w = rng.choice(words)
    each = [{"unit": "paragraph", "select": "each"}]
    families = [
        ([], {"count": "word"}, {"min": len(words) - 1, "max": len(words) + 1},
         f"Answer in {len(words) - 1} to {len(words) + 1} words."),
        ([], {"starts_with": sents[0][0]}, {"eq": 1}, f'Start with the word "{sents[0][0]}".'),
        ([], {"count": "occurrence", "of": w}, {"min": words.count(w)}, f'Use "{w}" at least {words.count(w)} times.'),
        (each, {"count": "sentence"}, {"max": max(map(len, paras))},
         f"Each paragraph has at most {max(map(len, paras))} sentences."),
        ([{"unit": "sentence", "select": "at", "index": 0}], {"count": "word"}, {"eq": len(sents[0])},
         f"The first sentence has exactly {len(sents[0])} words."),
        (each + [{"unit": "sentence", "select": "at", "index": -1}], {"count": "word"},
         {"max": max(len(p[-1]) for p in paras)}, f"Each paragraph ends with at most {max(len(p[-1]) for p in paras)} words."),
        ([{"unit": "sentence", "select": "where", "if": {"target": {"count": "occurrence", "of": w}, "range": {"min": 1}}}],
         {"count": "word"}, {"min": 1}, f'Every sentence with "{w}" has a word.'),
    ]
    return [{"text": t, "scope": s, "target": g, "range": r} for s, g, r, t in rng.sample(families, rng.randint(1, 3))]


def _example(rng: random.Random) -> tuple[dict, str]:
    text = _witness(rng)
    constraints = _relabel(text, rng)
    prompt = "Write a short text. " + " ".join(c["text"] for c in constraints)
    return {"prompt": prompt, "label": json.dumps({"constraints": constraints})}, text


def interim_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [_example(rng)[0] for _ in range(n)]


def interim_sft_pairs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": row["prompt"], "response": text} for row, text in (_example(rng) for _ in range(n))]


def _write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


TINY_MODEL = dict(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                  max_positions=256, pairs=300, steps=40, batch_size=16, lr=3e-3, train_rows=200, test_rows=16)
# threads pinned: a run in this process and one in a subprocess must sum in the same order to be equal (torch's
# default follows the cores, and an earlier in-process run may have set another count).
TINY_RUN = dict(prompts_per_step=4, group_size=4, max_new_tokens=24, micro_batch=8, eval_prompts=8,
                eval_every=2, save_every=2, lr=1e-3, threads=1)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_assets")
    policy = warm_start(interim_sft_pairs(300, seed=0), WarmStartConfig(**TINY_MODEL), root / "policy", progress=False)
    return {"model": str(policy),
            "train_data": _write_rows(root / "train.jsonl", interim_rows(200, seed=1)),
            "test_data": _write_rows(root / "test.jsonl", interim_rows(16, seed=2))}


def _rows(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def _without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


# ---- the interim data itself is sound -----------------------------------------------------------------------

def test_interim_pairs_satisfy_their_constraints():
    rng = random.Random(7)
    for _ in range(200):
        row, text = _example(rng)
        s = score_response(f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n{text}", parse_label(row["label"]), think="required")
        assert all(s["satisfied"]) and s["reward"] == 1.0, (text, row["label"])


# ---- the loss on hand-computed cases ------------------------------------------------------------------------

def _t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grpo_loss_clipped_ratio():
    # ratio 2 and 1/2 against eps 0.2: min(rho A, clip(rho) A) for A = +1 and -1
    logp = torch.log(_t([0.5, 0.25, 0.5, 0.25]))
    old = torch.log(_t([0.25, 0.5, 0.25, 0.5]))
    adv = _t([1.0, 1.0, -1.0, -1.0])
    mask = _t([1, 1, 1, 1])
    loss, kl, clip = grpo_loss(logp, old, logp, adv, mask, clip_eps=0.2, kl_coef=0.0)
    # per token -min(...): -min(2, 1.2) = -1.2; -min(.5, .8) = -.5; -min(-2, -1.2) = 2; -min(-.5, -.8) = .8
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 2.0 + 0.8) / 4)
    assert kl.item() == pytest.approx(0.0)
    assert clip.item() == pytest.approx(0.5)  # the clipped term wins on tokens 1 and 4


def test_grpo_loss_k3_kl_and_length_mean():
    # ratio 1 (on-policy) and A = 0: only the KL term; pi_ref/pi = 1/2 gives k3 = 1/2 + log 2 - 1
    k3 = 0.5 + math.log(2.0) - 1.0
    logp = torch.log(_t([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]))
    ref = torch.log(_t([0.25, 0.25, 0.25], [0.5, 0.5, 0.5]))
    zeros = torch.zeros_like(logp)
    loss, kl, _ = grpo_loss(logp, logp, ref, zeros, _t([1, 0, 0], [1, 1, 1]), clip_eps=0.2, kl_coef=0.1)
    # response 1: one token with k3; response 2: three tokens with 0; each response is a token mean first
    assert loss.item() == pytest.approx(0.1 * (k3 + 0.0) / 2)
    assert kl.item() == pytest.approx(k3 / 4)
    # k3 is an unbiased, non-negative estimate of KL(pi || ref) when tokens are sampled from pi
    p, q = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    exact = (p * (p / q).log()).sum()
    estimate = (p * ((q / p) - (q / p).log() - 1)).sum()
    assert estimate.item() == pytest.approx(exact.item())


def test_grpo_loss_gradient_is_the_policy_gradient():
    # On-policy (old = logp), unclipped: d loss / d logp_t = -A_i / |y_i| on each unmasked token.
    logp = torch.log(_t([0.3, 0.6, 0.9], [0.2, 0.4, 0.8])).requires_grad_(True)
    adv = _t([2.0, 2.0, 2.0], [-1.0, -1.0, -1.0])
    mask = _t([1, 1, 0], [1, 1, 1])
    loss, _, _ = grpo_loss(logp, logp.detach(), logp.detach(), adv, mask, clip_eps=0.2, kl_coef=0.5)
    loss.backward()
    expected = _t([-2.0 / 2, -2.0 / 2, 0.0], [1.0 / 3, 1.0 / 3, 1.0 / 3]) / 2  # / 2 responses
    assert torch.allclose(logp.grad, expected)


# ---- the trainer's decoding loop against transformers' ----------------------------------------------------------

@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.6), (1.3, 0.9)])
def test_sample_next_draws_transformers_warped_distribution(temperature, top_p):
    """The inverse-CDF sampler against transformers' own temperature and top-p warpers: 40,000 draws per row of
    four fixed distributions fit the warped probabilities (chi-square), and a token the warpers remove is never
    drawn. Seeded, so the verdict is the same on every run."""
    from scipy.stats import chisquare
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    from ifcore.train.model import sample_next

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 12, generator=g) * 2
    logits[0, 3] = -math.inf  # a token of zero mass
    warped = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_p < 1:
        warped = TopPLogitsWarper(top_p)(None, warped)
    expected = torch.softmax(warped, -1)
    n = 40_000
    torch.manual_seed(0)
    draws = sample_next(logits.repeat_interleave(n, 0), temperature, top_p).view(4, n)
    for row, p in zip(draws, expected):
        counts = torch.bincount(row, minlength=12).double()
        assert counts[p == 0].sum() == 0, (counts, p)
        keep = p > 0
        q = p[keep].double() / p[keep].double().sum()
        assert keep.sum() == 1 or chisquare(counts[keep].numpy(), (q * n).numpy()).pvalue > 1e-4, (counts, q * n)


def test_greedy_decoding_is_transformers_token_for_token_in_any_chunking(assets):
    """generate's own loop, greedy, against transformers' generate: the same tokens for every prompt (left-padded
    to different lengths), whole or in chunks of 3, and the response mask ends at the first end id."""
    import contextlib

    from ifcore.train.model import generate

    model, tok = load_policy(assets["model"])
    prompts = [chat_prompt(tok, p) for p, _ in read_rows(assets["test_data"])[:7]]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        theirs = model.generate(**enc, max_new_tokens=20, do_sample=False, pad_token_id=tok.pad_token_id,
                                eos_token_id=[tok.eos_token_id])
    for batch in (0, 3):
        seqs, attention, n, mask, texts, truncated = generate(model, tok, prompts, 20, "cpu",
                                                              contextlib.nullcontext(), sample=False, batch=batch)
        assert n == enc.input_ids.shape[1] and seqs.shape == attention.shape
        assert seqs.tolist() == theirs.tolist()
        for ids, m, text, cut in zip(seqs[:, n:].tolist(), mask.tolist(), texts, truncated):
            k = sum(m)
            assert cut == (tok.eos_token_id not in ids[:k]) and (cut or ids[k - 1] == tok.eos_token_id)
            assert text == tok.decode(ids[:k - (not cut)], skip_special_tokens=True)


# ---- the policy directory through from_pretrained -------------------------------------------------------------

def test_policy_directory_loads_through_from_pretrained(assets):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = load_policy(assets["model"])
    assert model.config.model_type == "qwen3"
    assert tokenizer.padding_side == "left"
    for tag in (THINK_OPEN, THINK_CLOSE):
        assert len(tokenizer(tag, add_special_tokens=False).input_ids) == 1
    assert tokenizer.decode(tokenizer(f"{THINK_OPEN}a{THINK_CLOSE}b<|im_end|>").input_ids,
                            skip_special_tokens=True) == f"{THINK_OPEN}a{THINK_CLOSE}b"
    assert chat_prompt(tokenizer, "Hi").endswith("<|im_start|>assistant\n")
    assert chat_prompt(tokenizer, "Hi", think=False).endswith(f"<|im_start|>assistant\n{THINK_OPEN}\n\n{THINK_CLOSE}\n\n")
    # the plain Auto classes read the same directory and give the same logits
    again = AutoModelForCausalLM.from_pretrained(assets["model"])
    ids = AutoTokenizer.from_pretrained(assets["model"])(chat_prompt(tokenizer, "Hi"), return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_train_takes_a_foreign_checkpoint_by_path(assets, tmp_path):
    """A Qwen2 checkpoint with a right-padding tokenizer, saved elsewhere: --model PATH trains it unchanged
    (here in the no-think mode, where the chat template supplies the empty think block)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(assets["model"])
    tokenizer.padding_side = "right"
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    model.save_pretrained(tmp_path / "qwen2")
    tokenizer.save_pretrained(tmp_path / "qwen2")
    cfg = load_config(None, **TINY_RUN, steps=1, output_dir=str(tmp_path / "run"), model=str(tmp_path / "qwen2"),
                      train_data=assets["train_data"], test_data=assets["test_data"], think=False)
    rows = _rows(train(cfg, progress=False))
    assert [r["step"] for r in rows] == [0, 1, 1]


# ---- metrics, determinism, resume ---------------------------------------------------------------------------

def _run(assets, out: Path, **over):
    cfg = load_config(None, **{**TINY_RUN, "steps": 3, **over}, output_dir=str(out), **assets)
    return _rows(train(cfg, progress=False))


def test_metrics_rows_and_determinism(assets, tmp_path):
    first = _run(assets, tmp_path / "a", reward="scopeif")
    assert [(r["type"], r["step"]) for r in first] == [
        ("eval", 0), ("train", 1), ("train", 2), ("eval", 2), ("train", 3), ("eval", 3)]
    for r in first:
        if r["type"] == "train":
            for k in ("reward_mean", "identical_pair_fraction", "kl", "entropy", "response_len", "step_seconds"):
                assert isinstance(r[k], float) and math.isfinite(r[k]), k
            assert 0 <= r["identical_pair_fraction"] <= 1 and r["kl"] >= 0 and r["entropy"] > 0
        else:
            assert {"eval_isr", "eval_csr", "eval_csr_global", "eval_csr_traversal", "eval_csr_position",
                    "eval_csr_condition", "eval_csr_nested", "eval_greedy_isr", "eval_greedy_csr"} <= r.keys()
            assert 0 <= r["eval_isr"] <= r["eval_csr"] <= 1
    assert first[1]["kl"] == 0.0  # the first rollouts come from the reference itself
    assert list((tmp_path / "a").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == ["step_000002", "step_000003"]

    # ScopeIF's graded reward ties fewer rollout pairs than ILA's all-or-nothing one (ScopeIF Fig. 4b); without the
    # think gate, which the tiny policy's rollouts mostly fail (reward 0 under every kind, all pairs tied)
    def ties(reward):
        rows = _run(assets, tmp_path / f"ties-{reward}", reward=reward, think=False)
        return sum(r["identical_pair_fraction"] for r in rows if r["type"] == "train") / 3
    assert ties("scopeif") < ties("ila")

    assert _without_timings(_run(assets, tmp_path / "b", reward="scopeif")) == _without_timings(first)
    other = _run(assets, tmp_path / "c", reward="scopeif", seed=1)
    assert _without_timings(other) != _without_timings(first)


@pytest.mark.parametrize("reward", ["ila", "cla", "scopeif_flat", "raif"])
def test_every_reward_kind_trains(assets, tmp_path, reward):
    rows = _run(assets, tmp_path, reward=reward, steps=1)
    bound = 3.0 if reward == "raif" else 1.0  # RAIF eq. 4-6 ranges over [-3, 3], the others over [0, 1]
    assert (-bound if reward == "raif" else 0.0) <= rows[1]["reward_mean"] <= bound


def test_resume_refuses_a_directory_with_other_settings(assets, tmp_path):
    """`ifcore train --output-dir X` on checkpoints of another configuration is an error naming what differs,
    never a silent resume: steps, learning rate and the data's content each count."""
    _run(assets, tmp_path / "a", steps=2)
    with pytest.raises(ValueError, match=r"another configuration \(lr 0.001 there, 0.0005 now; steps 2 there, 3"):
        _run(assets, tmp_path / "a", steps=3, lr=5e-4)
    with pytest.raises(ValueError, match="steps 2 there, 1 now"):
        _run(assets, tmp_path / "a", steps=1)
    edited = tmp_path / "train.jsonl"
    edited.write_text(Path(assets["train_data"]).read_text().replace("river", "stream"))
    with pytest.raises(ValueError, match="train_data_sha256"):
        _run({**assets, "train_data": str(edited)}, tmp_path / "a", steps=2)
    assert [r["step"] for r in _run(assets, tmp_path / "a", steps=2)] == [0, 1, 2, 2]  # the same one resumes


def test_run_identity_fills_in_defaults_and_hashes_the_data(assets, tmp_path, monkeypatch):
    def key(**over):
        cfg = load_config(None, **{**TINY_RUN, **assets, **over})
        return run_identity(cfg, {k: getattr(cfg, k) for k in ("model", "train_data", "test_data")})[1]

    base = key()
    assert key(output_dir="elsewhere") == base  # where a run lives is not what it is
    assert key(lr=1e-3) == base and key(lr="1e-3") == base and key(lr=0.002) != base
    monkeypatch.chdir(Path(assets["model"]).parent)
    assert key(model="policy") == base  # one model, however its path is spelled
    copy = tmp_path / "test.jsonl"
    copy.write_text(Path(assets["test_data"]).read_text())
    assert key(test_data=str(copy)) == base  # the data's content, not its path
    copy.write_text(copy.read_text() + copy.read_text().splitlines()[0] + "\n")
    assert key(test_data=str(copy)) != base
    # The default policy: its warm start counts with every default filled in.
    default = dict(TINY_RUN, train_data=assets["train_data"], test_data=assets["test_data"])
    paths = dict(assets)
    first = run_identity(load_config(None, **default), paths)
    assert first[0]["warm_start.hidden_size"] == WarmStartConfig().hidden_size and first[0]["model"] is None
    assert run_identity(load_config(None, **default, warm_start={"hidden_size": WarmStartConfig().hidden_size}),
                        paths)[1] == first[1]
    assert run_identity(load_config(None, **default, warm_start={"hidden_size": 64}), paths)[1] != first[1]
    # The same warm start rebuilt with other bits (another machine or thread count) is another policy.
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(assets["model"], rebuilt)
    assert run_identity(load_config(None, **default), {**paths, "model": str(rebuilt)})[1] == first[1]
    _flip_a_byte(rebuilt / "model.safetensors")
    assert run_identity(load_config(None, **default), {**paths, "model": str(rebuilt)})[1] != first[1]


# ---- bf16 on the CPU (issue 25) ---------------------------------------------------------------------------------

def test_bf16_is_its_own_configuration_and_its_first_step_matches_fp32(assets, tmp_path):
    """precision "bf16" (autocast, fp32 master weights) is part of the run's identity (fp32, the default, leaves the
    identities made before the option unchanged); its first step samples the same rollouts as fp32 (the initial
    policy's tokens do not flip at these margins) and its loss and entropy agree within 1e-3 and 1 % (measured
    2026-12-05: 2.4e-5 and 0.02 %; over 30 steps the mean reward 0.0648 against fp32's 0.0613, README)."""
    def identity(**over):
        cfg = load_config(None, **{**TINY_RUN, **assets, **over})
        return run_identity(cfg, {k: getattr(cfg, k) for k in ("model", "train_data", "test_data")})

    assert "precision" not in identity()[0] and identity(precision="bf16")[0]["precision"] == "bf16"
    assert identity(precision="fp32")[1] == identity()[1] != identity(precision="bf16")[1]
    fp32 = _run(assets, tmp_path / "fp32", steps=1)
    with pytest.raises(ValueError, match="precision '\\(unset\\)' there, 'bf16' now"):
        _run(assets, tmp_path / "fp32", steps=1, precision="bf16")
    bf16 = _run(assets, tmp_path / "bf16", steps=1, precision="bf16")
    a, b = fp32[1], bf16[1]
    assert (a["type"], b["type"]) == ("train", "train")
    for k in ("reward_mean", "response_len", "kl", "truncated_fraction"):
        assert a[k] == b[k], k
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-3) and b["entropy"] == pytest.approx(a["entropy"], rel=1e-2)
    assert fp32[0]["eval_csr"] == pytest.approx(bf16[0]["eval_csr"], abs=0.1)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_corrupt_or_truncated_checkpoint_falls_back_to_the_previous_one(assets, tmp_path):
    steps = 4
    whole = _run(assets, tmp_path / "whole", steps=steps)
    out = tmp_path / "run"
    _run(assets, out, steps=steps)
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000002", "step_000004"]  # the last two are kept
    for damage, name in [(_flip_a_byte, "model.safetensors"),
                         (lambda p: p.write_bytes(p.read_bytes()[:-100]), "optimizer.pt")]:
        damage(ckpts / "step_000004" / name)
        with pytest.warns(UserWarning, match=rf"step_000004/{name}: .*(corrupt|truncated).*resuming from step_000002"):
            rows = _run(assets, out, steps=steps)
        assert _without_timings(rows) == _without_timings(whole)  # steps 3 and 4 redone exactly
        assert checkpoint_problem(ckpts / "step_000004") is None
    # No good checkpoint left: an error naming the file, nothing resumed from damaged weights.
    _flip_a_byte(ckpts / "step_000004" / "model.safetensors")
    _flip_a_byte(ckpts / "step_000002" / "model.safetensors")
    with pytest.warns(UserWarning, match="step_000004"), \
            pytest.raises(ValueError, match="step_000002/model.safetensors: sha256 differs.*no good checkpoint"):
        _run(assets, out, steps=steps)


def test_a_second_trainer_on_a_run_directory_is_refused(assets, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / "train.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running trainer holds it
        lock.write("31337")
        lock.flush()
        with pytest.raises(BlockingIOError, match=r"another trainer \(pid 31337\) is using this run directory"):
            _run(assets, out, steps=1)
    assert [r["step"] for r in _run(assets, out, steps=1)] == [0, 1, 1]  # the lock ended with its holder


def test_the_step0_evaluation_is_computed_once_per_initial_policy(assets, tmp_path, monkeypatch):
    """Runs that differ only in what acts from step 1 on (here the learning rate, the reward kind (RAIF's aside) and
    the seed: they share the initial policy and data) share the step-0 evaluation: the later runs reuse the first's
    row, the same numbers; other evaluation settings evaluate anew."""
    from ifcore.train import grpo

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    calls = []
    real = grpo.evaluate
    monkeypatch.setattr(grpo, "evaluate", lambda *a, **k: calls.append(k["step"]) or real(*a, **k))
    a = _run(assets, tmp_path / "a", steps=1, reward="cla")
    b = _run(assets, tmp_path / "b", steps=1, reward="scopeif", lr=1e-3)
    assert calls == [0, 1, 1] and _without_timings(a[:1]) == _without_timings(b[:1])
    c = _run(assets, tmp_path / "c", steps=1, reward="cla", seed=1)
    assert _without_timings(c[:1]) == _without_timings(a[:1])
    _run(assets, tmp_path / "d", steps=1, reward="cla", eval_samples=1)
    assert calls == [0, 1, 1, 1, 0, 1]
    assert len(list((tmp_path / "cache" / "evals").glob("*.json"))) == 2


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_killed_run_resumes_exactly(assets, tmp_path, precision):
    steps = 6
    uninterrupted = _run(assets, tmp_path / "whole", steps=steps, reward="ila", precision=precision)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**TINY_RUN, **assets, "precision": precision}))
    cmd = [sys.executable, "-m", "ifcore", "train", "--reward", "ila", "--steps", str(steps), "--seed", "0",
           "--output-dir", str(tmp_path / "killed"), "--config", str(config)]
    metrics = tmp_path / "killed" / "metrics.jsonl"
    env = train_killed_at_step(cmd, metrics, step=3)  # past the step-2 checkpoint
    assert max(r["step"] for r in _rows(metrics)) < steps
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _without_timings(_rows(metrics)) == _without_timings(uninterrupted)
    # Every rollout's reward too, one row per step, none repeated by the restart.
    rollouts = (tmp_path / "killed" / "rollouts.jsonl").read_text()
    assert rollouts == (tmp_path / "whole" / "rollouts.jsonl").read_text()
    assert [json.loads(x)["step"] for x in rollouts.splitlines()] == list(range(1, steps + 1))


# ---- configuration and the cache of default assets --------------------------------------------------------------

def test_config_file_then_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("reward: cla\nsteps: 7\ngroup_size: 4\nlr: 1e-3\n")
    cfg = load_config(str(path), steps=9, seed=None)
    assert (cfg.reward, cfg.steps, cfg.group_size, cfg.seed) == ("cla", 9, 4, 0)
    assert cfg.lr == 0.001  # YAML 1.1 reads 1e-3 as a string
    path.write_text("reward: cla\ngroupsize: 4\n")
    with pytest.raises(ValueError, match=r"c.yaml: groupsize: unknown TrainConfig field \(did you mean group_size\?"):
        load_config(str(path))
    path.write_text("reward: cla\nsteps: [1\n")
    with pytest.raises(ValueError, match=r"c.yaml:\d: not valid YAML"):
        load_config(str(path))
    path = tmp_path / "c.json"
    path.write_text('{"steps": 3,\n "seed": }')
    with pytest.raises(ValueError, match=r"c.json:2: not valid JSON"):
        load_config(str(path))


@pytest.mark.parametrize("field, value, reason", [
    ("steps", "abc", "expected an integer, got 'abc'"), ("steps", 2.5, "expected an integer"),
    ("steps", True, "expected an integer"), ("steps", -1, "must be at least 1"), ("steps", 0, "must be at least 1"),
    ("group_size", 1, "must be at least 2"), ("eval_every", 0, "must be at least 1"),
    ("save_every", 0, "must be at least 1"), ("prompts_per_step", 0, "must be at least 1"),
    ("micro_batch", 0, "must be at least 1"), ("max_new_tokens", 0, "must be at least 1"),
    ("temperature", 0, "must be a finite number > 0"), ("top_p", 0, r"must be in \(0, 1\]"),
    ("top_p", 1.01, r"must be in \(0, 1\]"), ("lr", float("nan"), "must be a finite number > 0"),
    ("lr", float("inf"), "must be a finite number > 0"), ("lr", "fast", "expected a number"),
    ("alpha", -1, "must be a finite number > 0"), ("alpha", float("nan"), "finite"),
    ("kl_coef", -0.1, ">= 0"), ("clip_eps", 1.5, r"in \(0, 1\)"), ("reward", "binary", "must be one of ila"),
    ("token_advantages", "tokens", "one of broadcast"), ("think", "yes", "expected true or false"),
    ("model", 3, "expected a string"), ("seed", -1, "at least 0"), ("warm_start", [1], "expected a mapping"),
    ("warm_start", {"hiden_size": 64}, r"\.hiden_size: unknown WarmStartConfig field \(did you mean hidden_size"),
    ("warm_start", {"layers": 0}, r"\.layers: must be at least 1"),
    ("warm_start", {"hidden_size": 30}, "must be a multiple of heads"),
])
def test_bad_config_values_are_refused_naming_the_field(tmp_path, field, value, reason):
    with pytest.raises(ValueError, match=rf"^{field}.*{reason}"):
        load_config(None, **{field: value})
    path = tmp_path / "c.json"  # from a file, the message starts with the file
    path.write_text(json.dumps({field: value}, allow_nan=True))
    with pytest.raises(ValueError, match=rf"^{path}: {field}.*{reason}"):
        load_config(str(path))


def test_default_assets_are_built_once_and_cached(tmp_path, monkeypatch):
    """With no model or data the trainer builds them from ifcore.synth into $IFCORE_CACHE, once."""
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    cfg = load_config(None, **TINY_RUN, steps=1, output_dir=str(tmp_path / "run"), warm_start=TINY_MODEL)
    rows = _rows(train(cfg, progress=False))
    assert [r["step"] for r in rows] == [0, 1, 1]
    paths = json.loads((tmp_path / "run" / "config.json").read_text())["paths"]
    entry = Path(paths["model"]).parent
    assert entry.parent == tmp_path / "cache" and len(read_rows(paths["test_data"])) == TINY_MODEL["test_rows"]
    built = (entry / "spec.json").stat().st_mtime_ns
    assert default_assets(WarmStartConfig(**TINY_MODEL), progress=False)["model"] == paths["model"]
    assert (entry / "spec.json").stat().st_mtime_ns == built  # cached: nothing rebuilt


def test_an_interrupted_warm_start_leaves_nothing_and_a_killed_builders_folder_is_cleared(tmp_path, monkeypatch,
                                                                                           capsys):
    from ifcore.train import sft
    from helpers import run_cli

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path))
    dead = tmp_path / ".building-0123456789ab-999999999"  # no such pid: its builder was SIGKILLed
    dead.mkdir()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "warm_start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        default_assets(WarmStartConfig(**TINY_MODEL), progress=False)
    assert list(tmp_path.iterdir()) == []
    # Through the CLI: one line, no traceback, the exit status of an interrupt.
    status, out, err = run_cli(capsys, "train", "--warm-start", json.dumps(TINY_MODEL), "--output-dir",
                               tmp_path / "run")
    assert status == 130 and err[-1] == "ifcore train: interrupted" and "Traceback" not in "\n".join(err)
    assert not list(tmp_path.glob(".building-*"))


def _wandb_history(path: Path) -> list[dict] | None:
    """The history rows of an offline W&B run file (run-ID.wandb), or None until the file holds the run's exit
    record (wandb's own process may still be writing it when finish() returns). The file: a ":W&B" header of 7
    bytes, then LevelDB-log records (32 KiB blocks; checksum, length, type, data; a Record proto split
    FIRST/MIDDLE/LAST across blocks)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending, rows, ended = path.read_bytes(), 7, b"", [], False
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # FULL or FIRST start a record
        if kind in (1, 4):  # FULL or LAST end it
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            ended |= record.WhichOneof("record_type") == "exit"
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows if ended else None


def test_a_run_records_its_code_and_logs_openrlhfs_keys_to_weights_and_biases_offline(assets, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb: the tracking extra (make install brings it with dev)")
    monkeypatch.setenv("IFCORE_WANDB_PROJECT", "ifcore-test")
    monkeypatch.setenv("WANDB_MODE", "offline")  # nothing leaves the machine; `wandb sync` would upload it
    monkeypatch.setenv("WANDB_SILENT", "true")
    rows = _run(assets, tmp_path / "w", reward="scopeif", steps=2)
    code = json.loads((tmp_path / "w" / "config.json").read_text())["code"]
    assert len(code["commit"]) == 40 and isinstance(code["dirty"], bool)  # this checkout's HEAD
    runs = list((tmp_path / "w" / "wandb").glob("offline-run-*/run-w.wandb"))
    assert len(runs) == 1  # the W&B run's id is the run folder's name: a resume logs into it again
    deadline = time.monotonic() + 120
    while (logged := _wandb_history(runs[0])) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert logged is not None, "the offline run file never got its exit record"
    assert [(r.get("train/global_step"), r.get("eval/global_step")) for r in logged] == [
        (None, 0), (1, None), (2, None), (None, 2)]  # as metrics.jsonl: eval 0, train 1, train 2, eval 2
    train, ev = logged[2], logged[3]
    assert train["train/rollout/reward_mean"] == pytest.approx(rows[2]["reward_mean"])  # OpenRLHF's names
    assert train["train/kl"] == pytest.approx(rows[2]["kl"]) and train["train/cla"] == pytest.approx(rows[2]["csr"])
    assert train["train/identical_pair_fraction"] == pytest.approx(rows[2]["identical_pair_fraction"])  # ifcore's own
    assert ev["eval/eval_isr"] == pytest.approx(rows[3]["eval_isr"])
