"""ifcore.advantages: GRPO group_norm, ScopeIF's identical-pair share, RAIF eq. 7, RTT token advantages."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ifcore.advantages import (group_norm, identical_pair_fraction, reference_superior, superior_cot_keep,
                               superior_cot_mask, token_rtt)


# ---- group_norm ------------------------------------------------------------------------------------------

def test_group_norm_by_hand():
    np.testing.assert_allclose(group_norm([1.0, 2.0, 3.0]), [-1, 0, 1], rtol=1e-8)  # std (ddof=1) = 1
    s = math.sqrt(1 / 3)  # [0, 0, 1, 1]: mean 0.5, sample variance 1/3
    np.testing.assert_allclose(group_norm([0, 0, 1, 1]), [-0.5 / s, -0.5 / s, 0.5 / s, 0.5 / s], rtol=1e-8)
    np.testing.assert_allclose(group_norm([[1, 2, 3], [5, 5, 5]]), [[-1, 0, 1], [0, 0, 0]], rtol=1e-8)
    np.testing.assert_array_equal(group_norm([0.7]), [0.0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=16))
def test_group_norm_is_openrlhfs_estimator(r):
    import torch  # in the cpu extra; the core itself never imports it
    t = torch.tensor([r], dtype=torch.float64)
    # openrlhf/trainer/ppo_utils/experience_maker.py, estimator "group_norm" (0.11.2)
    ref = ((t - t.mean(-1, keepdim=True)) / (t.std(-1, keepdim=True) + 1e-9))[0].numpy()
    ours = group_norm(t[0])
    if np.std(r, ddof=1) > 1e-9:
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    else:
        np.testing.assert_array_equal(ours, 0.0)


@settings(max_examples=100, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(1, 32))
def test_group_norm_of_a_constant_group_is_zero(v, g):
    np.testing.assert_array_equal(group_norm([v] * g), np.zeros(g))


# ---- identical_pair_fraction (ScopeIF Fig. 4b) -----------------------------------------------------------

def test_identical_pair_fraction_by_hand():
    assert identical_pair_fraction([1, 1, 0, 0]) == pytest.approx(2 / 6)
    assert identical_pair_fraction([0.5] * 8) == 1.0
    assert identical_pair_fraction([0.1, 0.2, 0.3]) == 0.0
    assert identical_pair_fraction([1.0]) == 0.0
    np.testing.assert_allclose(identical_pair_fraction([[1, 1, 1], [1, 2, 1]]), [1.0, 1 / 3])


# ---- RAIF: superior_cot_keep (eq. 7), reference_superior, superior_cot_mask -------------------------------

def test_superior_cot_keep():
    assert superior_cot_keep([0.2, 0.5], [0.5, 0.9]) is True   # max 0.5 >= min 0.5
    assert superior_cot_keep([0.1, 0.4], [0.5, 0.9]) is False  # every CoT rollout is worse
    # All-equal CoT accuracies are kept, as the authors' replay buffer keeps them (replay_buffer.py:289), though
    # eq. 7 alone would drop [-2, -2] against [0.5, 2].
    np.testing.assert_array_equal(superior_cot_keep([[2, -2], [-2, -2], [0.1, 0.4]], [[0.5, 2], [0.5, 2], [0.5, 1]]),
                                  [True, True, False])


def test_the_per_sample_reference_test_by_hand():
    # check_qa.py:89-94, 113: a prompt whose offline no-reasoning count is 2 of 3 constraints. Rollouts satisfying
    # 3, 2, 1 and 0 of them, the last with a broken format (not judged, so it passes: its -2 is its signal).
    got = reference_superior([3, 2, 1, 0], [True, True, True, False], 2)
    np.testing.assert_array_equal(got, [True, True, False, True])
    assert reference_superior(0, True, 0) is True  # a label without a reference count: 0, every rollout passes


def test_no_think_rollouts_never_train_and_a_dropped_group_is_masked():
    acc = [[0.5, -2, -2, 2], [2, -2, -2, 2], [-2, -2, -2, 2]]  # drop (0.5 < 2); keep; all-equal CoT: keep
    keep, train = superior_cot_mask(acc, [False, False, False, True])
    np.testing.assert_array_equal(keep, [False, True, True])
    np.testing.assert_array_equal(train, [[False] * 4, [True, True, True, False], [True, True, True, False]])
    _, train = superior_cot_mask(acc, [False, False, False, True], sample_ok=[[True, False, True, True]] * 3)
    np.testing.assert_array_equal(train[1], [True, False, True, False])  # both tests, as --enforce_superior_CoT
    keep, train = superior_cot_mask(acc, [False] * 4, group=False)  # the GRPO baseline: no no-think, all train
    assert keep.all() and train.all()


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6).flatmap(lambda g: st.tuples(
    st.lists(st.lists(st.sampled_from([-2.0, 0.25, 0.5, 2.0]), min_size=g, max_size=g), min_size=1, max_size=4),
    st.integers(1, g - 1))))
def test_superior_cot_mask_properties(case):
    acc, k = np.array(case[0]), case[1]
    g = acc.shape[1]
    nothink = np.arange(g) >= g - k
    keep, train = superior_cot_mask(acc, nothink)
    assert not train[:, nothink].any()  # the no-think rollouts carry no gradient, ever
    cot, plain = acc[:, ~nothink], acc[:, nothink]
    want = (cot.max(1) >= plain.min(1)) | (cot.min(1) == cot.max(1))  # replay_buffer.py:289
    np.testing.assert_array_equal(keep, want)
    np.testing.assert_array_equal(train[:, ~nothink], np.repeat(keep[:, None], g - k, axis=1))


def test_the_reasoning_rollouts_advantages_are_the_authors():
    """The authors' experience maker normalises each prompt's n_samples_per_prompt rewards, no-think ones
    included (experience_maker.py:1737-1742, over groups built at :3176-3193), in torch with std's ddof 1."""
    torch = pytest.importorskip("torch")
    rewards = np.array([[3.0, 1.5, -3.0, 3.0], [-1.0, -1.0, -1.0, 3.0], [1.5, 1.5, 3.0, -1.0]])
    r = torch.tensor(rewards)
    authors = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)
    np.testing.assert_allclose(group_norm(rewards), authors.numpy(), rtol=1e-12, atol=1e-12)
    # ...so a no-think rollout that scores higher pulls its group's CoT advantages down, though it never trains
    assert group_norm(rewards)[1, :3].max() < 0


# ---- token_rtt (RTT section 4.2) -------------------------------------------------------------------------

REL = [np.array([[0.0], [1.0]]), np.array([[0.0], [0.5], [1.0]])]
SAT, ADV = [[True], [False]], [1.0, -1.0]


def test_token_rtt_intra_by_hand():
    a0, a1 = token_rtt(REL, SAT, ADV)
    # response 0: r = [0, 1], mean 0.5, std 0.5 -> z = [-1, 1]; A = 1 * 1 + 0.5 z
    np.testing.assert_allclose(a0, [0.5, 1.5])
    # response 1 violates: r = -p = [0, -0.5, -1], std sqrt(1/6) -> z = [1.2247, 0, -1.2247]
    z = 0.5 / math.sqrt(1 / 6)
    np.testing.assert_allclose(a1, [-1 + 0.5 * z, -1.0, -1 - 0.5 * z])


def test_token_rtt_inter_by_hand():
    a0, a1 = token_rtt(REL, SAT, ADV, mode="inter")
    pooled = np.array([0.0, 1.0, 0.0, -0.5, -1.0])  # one group: every token of the group
    mu, sd = pooled.mean(), pooled.std()
    assert (mu, sd) == pytest.approx((-0.1, math.sqrt(0.44)))
    np.testing.assert_allclose(a0, 1.0 + 0.5 * (pooled[:2] - mu) / sd)
    np.testing.assert_allclose(a1, -1.0 + 0.5 * (pooled[2:] - mu) / sd)


def test_token_rtt_averages_constraints_and_weights():
    rel = [np.array([[0.0, 0.2], [1.0, 0.2]])]  # constraint 2 is flat: its column gives 0
    (a,) = token_rtt(rel, [[True, False]], [0.3], alpha=2.0, beta=1.0)
    np.testing.assert_allclose(a, 2.0 * 0.3 + np.array([-1.0, 1.0]) / 2)
    (b,) = token_rtt([np.zeros((0, 2))], [[True, True]], [0.7])
    assert b.shape == (0,)


def test_token_rtt_accepts_torch_and_checks_shapes():
    import torch  # in the cpu extra; the core itself never imports it
    out = token_rtt([torch.tensor(r) for r in REL], torch.tensor(SAT), torch.tensor(ADV))
    np.testing.assert_allclose(out[0], [0.5, 1.5])
    with pytest.raises(ValueError, match="mode"):
        token_rtt(REL, SAT, ADV, mode="global")
    with pytest.raises(ValueError, match=r"relevance\[1\]"):
        token_rtt([REL[0], np.zeros((3, 2))], SAT, ADV)
    with pytest.raises(ValueError, match="G"):
        token_rtt(REL, SAT, [1.0])


group = st.integers(1, 4).flatmap(lambda c: st.tuples(
    st.lists(st.integers(1, 12).flatmap(
        lambda t: st.lists(st.lists(st.floats(0, 1), min_size=c, max_size=c), min_size=t, max_size=t)),
        min_size=1, max_size=5),
    st.just(c)))


@settings(max_examples=150, deadline=None)
@given(group, st.data())
def test_token_rtt_intra_has_zero_mean_per_response_and_constraint(g, data):
    rel, c = g
    sat = data.draw(st.lists(st.lists(st.booleans(), min_size=c, max_size=c), min_size=len(rel), max_size=len(rel)))
    for k in range(c):  # one constraint at a time, token part only
        out = token_rtt([np.asarray(r)[:, [k]] for r in rel], [[s[k]] for s in sat], [0.0] * len(rel),
                        alpha=0.0, beta=1.0)
        for o, r in zip(out, rel):
            assert abs(o.mean()) < 1e-9
            col = np.asarray(r)[:, k]
            if col.std() > 1e-9:  # a non-constant column is standardized to unit variance
                assert o.std() == pytest.approx(1.0, rel=1e-6)
            else:
                np.testing.assert_array_equal(o, 0.0)
    # all constraints together: the response advantage is the per-response mean
    adv = data.draw(st.lists(st.floats(-2, 2), min_size=len(rel), max_size=len(rel)))
    for o, a in zip(token_rtt(rel, sat, adv), adv):
        assert o.mean() == pytest.approx(a, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=20), st.integers(1, 3), st.booleans(), st.data())
def test_violated_constraint_lowers_its_relevant_tokens(p, others, mode_inter, data):
    # constraint 0 has relevance p; the others are flat, so only constraint 0 moves the token advantages
    flat = data.draw(st.lists(st.floats(0, 1), min_size=others, max_size=others))
    rel = np.column_stack([p] + [[f] * len(p) for f in flat])
    other_sat = data.draw(st.lists(st.booleans(), min_size=others, max_size=others))
    mode = "inter" if mode_inter else "intra"
    (bad,) = token_rtt([rel], [[False] + other_sat], [0.0], mode=mode)
    (good,) = token_rtt([rel], [[True] + other_sat], [0.0], mode=mode)
    order = np.argsort(p, kind="stable")
    if np.std(p) > 1e-9:
        hi, lo = int(np.argmax(p)), int(np.argmin(p))
        assert bad[hi] < bad[lo] and good[hi] > good[lo]
    assert np.all(np.diff(bad[order]) <= 1e-12) and np.all(np.diff(good[order]) >= -1e-12)


def _ifcore_imports(module: str) -> set[str]:
    """The dotted names of ifcore that `module`'s source imports anywhere (lazy, function-level imports included):
    each imported module, and module.name for each `from module import name`."""
    import ast
    import importlib.util

    tree = ast.parse(open(importlib.util.find_spec(module).origin, encoding="utf-8").read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in out if n.split(".")[0] == "ifcore"}


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a function's name under a module
        return False


def test_no_import_circle_between_the_trainer_and_rtt():
    """The architecture's never: train/grpo imports train/rtt (the discriminator) and nothing reachable from
    train/rtt imports train/grpo (the shared pieces live below both: ifcore.advantages, train/model.py)."""
    seen, todo = set(), ["ifcore.train.rtt"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted(n for n in _ifcore_imports(m) if _is_module(n))
    assert "ifcore.train.rtt" in _ifcore_imports("ifcore.train.grpo")
    assert "ifcore.train.grpo" not in seen, sorted(seen)
    # the token-advantage step is one function both callers use
    for caller in ("ifcore.train.rtt", "ifcore.integrations.openrlhf_plugins"):
        assert "ifcore.advantages.token_rtt_groups" in _ifcore_imports(caller)


def test_token_rtt_groups_normalizes_each_group_on_its_own():
    from ifcore.advantages import ablation_relevance, token_rtt_groups

    rng = np.random.default_rng(0)
    rel = [rng.random((t, 2)) for t in (3, 5, 2, 4)]
    sat = [[True, False], [False, False], [True, True], [False, True]]
    adv = [[0.5, -0.5], [1.0, -1.0]]
    out = token_rtt_groups(rel, sat, adv, beta=0.5)
    want = token_rtt(rel[:2], sat[:2], adv[0]) + token_rtt(rel[2:], sat[2:], adv[1])
    for a, b in zip(out, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"must be \[B, G\]"):
        token_rtt_groups(rel, sat, [0.5, -0.5, 1.0, -1.0])
    # RTT Table 4: uniform is p = 1 (A_tok = 0 within a response), random a draw of the given stream
    uniform = ablation_relevance("uniform", [3, 5, 2, 4], 2)
    for a, r in zip(token_rtt_groups(uniform, sat, adv), [0.5, -0.5, 1.0, -1.0]):
        assert (a == r).all()
    draws = ablation_relevance("random", [3, 1], 2, np.random.default_rng(4))
    expect = np.random.default_rng(4).random(8)
    np.testing.assert_array_equal(np.concatenate([d.ravel() for d in draws]), expect)
    with pytest.raises(ValueError, match="needs an rng"):
        ablation_relevance("random", [3], 1)


def test_the_std_floor_zeroes_a_nearly_constant_relevance_and_nothing_else():
    """A discriminator's p on a GLOBAL constraint varies in its last digits (0.9962-0.9975 in notebook 04): the
    paper's z-scoring turns that into A_tok of unit size; a std floor (NOT in RTT) turns it into 0, and leaves a
    column whose relevance really varies exactly as it was."""
    rng = np.random.default_rng(0)
    flat = [0.996 + 0.0015 * rng.random((12, 1)) for _ in range(2)]
    varied = [rng.random((12, 1)) for _ in range(2)]
    sat, adv = [[True], [False]], [0.0, 0.0]
    paper = token_rtt(flat, sat, adv, alpha=0.0, beta=1.0)
    assert all(a.std() > 0.5 for a in paper)  # noise blown up to unit variance
    floored = token_rtt(flat, sat, adv, alpha=0.0, beta=1.0, std_floor=0.05)
    assert all(np.all(a == 0) for a in floored)
    for a, b in zip(token_rtt(varied, sat, adv, alpha=0.0, beta=1.0),
                    token_rtt(varied, sat, adv, alpha=0.0, beta=1.0, std_floor=0.05)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="std_floor must be in"):
        token_rtt(flat, sat, adv, std_floor=1.0)


@given(st.integers(2, 6), st.integers(1, 3), st.floats(0.0, 0.5), st.integers(0, 2**31))
def test_a_floor_changes_only_the_columns_below_it(t, c, floor, seed):
    rng = np.random.default_rng(seed)
    rel = [rng.random((t, c)) * rng.choice([1e-3, 1.0], size=(1, c)) for _ in range(3)]
    sat = rng.random((3, c)) < 0.5
    base = token_rtt(rel, sat, [0.0] * 3, alpha=0.0, beta=1.0, mode="intra")
    got = token_rtt(rel, sat, [0.0] * 3, alpha=0.0, beta=1.0, mode="intra", std_floor=floor)
    for x, s, a, b in zip(rel, sat, base, got):
        r = x * (2.0 * (s.astype(float) - 0.5))
        sd = r.std(axis=0)
        mu = r.mean(axis=0)
        z = np.where(sd > max(floor, 1e-9), (r - mu) / np.where(sd > 0, sd, 1.0), 0.0)
        np.testing.assert_allclose(b, z.mean(axis=1), atol=1e-12)
        if np.all(sd > floor):
            np.testing.assert_array_equal(a, b)
