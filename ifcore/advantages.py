"""Group-relative advantages: GRPO group_norm, RAIF's superior-CoT test and no-think masking (eq. 7 and the
authors' replay buffer) and RTT token advantages.

Pure numpy. A group is the last axis: [G] for one prompt's rollouts, [B, G] for B prompts. Torch tensors are
accepted by duck typing (torch is never imported here); results are numpy.
"""
from __future__ import annotations

import numpy as np

# Below this a standard deviation is float noise of a constant input, not spread.
_FLAT = 1e-9
# How a response's advantage reaches its tokens: GRPO's broadcast, or RTT eq. 7 with the discriminator's relevance
# (intra- or inter-sample normalized) or one of RTT Table 4's weightings (uniform, random).
TOKEN_ADVANTAGES = ("broadcast", "rtt", "rtt_inter", "uniform", "random")


def _as_array(x, dtype=float) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def group_norm(rewards) -> np.ndarray:
    """GRPO advantage (RAIF eq. 2, RTT section 3.2): (r - mean) / (std + 1e-9) over each group (last axis).

    std is the sample standard deviation (ddof=1), as OpenRLHF's `group_norm` estimator computes it with
    torch's default `std`. A constant group (std below 1e-9), or a group of one, gives exactly 0.
    """
    r = _as_array(rewards)
    if r.shape[-1] < 2:
        return np.zeros_like(r)
    sd = r.std(axis=-1, ddof=1, keepdims=True)
    # A constant group's float noise (mean of 0.1s is not exactly 0.1) would leak through as +-1e-8.
    return np.where(sd > _FLAT, (r - r.mean(axis=-1, keepdims=True)) / (sd + 1e-9), 0.0)


def identical_pair_fraction(rewards, atol: float = 1e-9):
    """Share of the G(G-1)/2 response pairs of a group with equal rewards (ScopeIF Fig. 4b, reward sparsity).

    [G] gives a float, [B, G] a [B] array. A group of one has no pair and gives 0.
    """
    r = _as_array(rewards)
    g = r.shape[-1]
    if g < 2:
        out = np.zeros(r.shape[:-1])
    else:
        equal = np.abs(r[..., :, None] - r[..., None, :]) <= atol
        upper = np.triu(np.ones((g, g), dtype=bool), k=1)
        out = (equal & upper).sum(axis=(-2, -1)) / (g * (g - 1) / 2)
    return float(out) if out.ndim == 0 else out


def superior_cot_keep(r_think, r_nothink):
    """RAIF eq. 7, as the authors' replay buffer applies it: keep a prompt's group iff max(R_accuracy with CoT) >=
    min(R_accuracy without CoT), or every CoT rollout has the same R_accuracy.

    The second clause is the authors' (RAIF replay_buffer.py:289: a group is masked only when
    `reward_score_max < min(woCoT) and reward_score_min != reward_score_max`); eq. 7 alone would drop such a group.
    Both are accuracy rewards over the group (last axis); [G] gives a bool, [B, G] a [B] bool array.
    """
    think = _as_array(r_think)
    keep = (think.max(axis=-1) >= _as_array(r_nothink).min(axis=-1)) | (think.min(axis=-1) == think.max(axis=-1))
    return bool(keep) if np.ndim(keep) == 0 else keep


def reference_superior(n_satisfied, judged, reference):
    """The RAIF authors' per-sample superior-CoT test (check_qa.py:89-94, 113; for LLM-judged constraints
    experience_maker.py:2964): a rollout passes iff its count of satisfied constraints >= `reference`, the count an
    instruct model answering without reasoning satisfied offline for the same prompt (their labels'
    `follow_score_qwen2.5-7B-Instruct`; 0 where a label has none, so every rollout passes). A rollout whose answer
    was not judged (`judged` false: format failure, empty or placeholder reasoning) passes: its R_accuracy of -2 is
    its signal. Arrays broadcast; a bool array (or a bool) comes back."""
    ok = ~_as_array(judged, bool) | (_as_array(n_satisfied) >= _as_array(reference))
    return bool(ok) if np.ndim(ok) == 0 else ok


def superior_cot_mask(accuracy, nothink, sample_ok=None, group: bool = True):
    """RAIF's replay-buffer step: which rollouts of [B, G] groups carry gradient, and which groups eq. 7 keeps.

    accuracy: [B, G] R_accuracy (eq. 5); nothink: [G] or [B, G] bool, the rollouts sampled with the empty think
    block (RAIF eq. 7's y-hat); sample_ok: [B, G] bool from `reference_superior`, or None. `group`: apply eq. 7
    (`superior_cot_keep` between each group's CoT and no-think rollouts; a group without no-think rollouts is kept).
    Returns (keep [B] bool, train [B, G] bool): train = CoT rollout, in a kept group, passing its own test.

    As the authors' code does it: no-think rollouts never train (replay_buffer.py:279-280, "samples without CoT do
    not take part in training"); a dropped group is masked, not replaced (replay_buffer.py:289-294, the masked
    samples' log-ratio zeroed in the policy loss, ppo_trainer_prm800k_box.py:399-403 and models/loss.py:75-76).
    Their rewards still enter the group's mean and std: their experience maker normalises all
    n_samples_per_prompt rollouts of a prompt, the no-think quarter included (experience_maker.py:1737-1742 over
    the groups built at :3176-3193), which is `group_norm` over the whole [B, G]. One difference: the authors keep
    the KL loss on masked samples (ppo_trainer_prm800k_box.py:419, "keep kl loss unchanged"); here a rollout outside
    `train` gets no gradient at all, as eq. 7 applies J_GRPO, KL term included, to the CoT rollouts only.
    """
    acc = np.atleast_2d(_as_array(accuracy))
    nt = np.broadcast_to(_as_array(nothink, bool), acc.shape)
    keep = np.ones(len(acc), dtype=bool)
    if group:
        for b in range(len(acc)):
            if nt[b].any() and (~nt[b]).any():
                keep[b] = superior_cot_keep(acc[b][~nt[b]], acc[b][nt[b]])
    train = ~nt & keep[:, None]
    if sample_ok is not None:
        train &= np.broadcast_to(_as_array(sample_ok, bool), acc.shape)
    return keep, train


def ablation_relevance(weighting: str, lengths, constraints: int, rng=None) -> list[np.ndarray]:
    """RTT Table 4's token weightings that need no discriminator: "uniform" (p = 1 on every token, "equivalent to
    RL-AON": its intra-sample A_tok is 0) and "random" (p ~ U[0, 1] per token and constraint, drawn from the numpy
    Generator `rng`). One [T_i, C] array per response of lengths T_i."""
    if weighting == "uniform":
        return [np.ones((int(t), constraints)) for t in lengths]
    if weighting == "random":
        if rng is None:
            raise ValueError("ablation_relevance: 'random' needs an rng")
        return [rng.random((int(t), constraints)) for t in lengths]
    raise ValueError(f"ablation_relevance: weighting must be 'uniform' or 'random', got {weighting!r}")


def token_rtt(relevance, satisfied, response_adv, alpha: float = 1.0, beta: float = 0.5, mode: str = "intra",
              std_floor: float = 0.0):
    """RTT-GRPO token advantages of one group (RTT sections 4.2.1-4.2.2, eq. 7; the inter-sample ablation of
    section 3.2 and app. D). The authors' code: `roll/utils/functionals.py:698-727` (intra, "token_only_adv-
    rubrics_mean"), :669-694 (inter, "group_token_adv-rubrics_mean"), :1006-1007 (A + w A_tok, "add").

    relevance: G arrays [T_i, C] of discriminator probabilities p; satisfied: [G, C]; response_adv: [G].
    Token reward r = Score * p with Score = 2 (I - 0.5). mode "intra" standardizes r per response and
    constraint over its T_i tokens; "inter" per constraint over all tokens of the group. The standard
    deviation is the population one (as the authors' masked std, :716) and a constant column gives 0 (where
    theirs divides by std + 1e-6). A_tok is the mean over constraints; the result, one [T_i] array per response,
    is alpha * A_res + beta * A_tok.

    `std_floor` (NOT in RTT; 0, the default, is the paper's normalization): a column whose standard deviation is
    below it gives 0 instead of its z-scores. A discriminator's nearly constant p on a GLOBAL constraint (0.996
    to 0.998) has a tiny std that z-scoring blows up to unit variance: the paper's std + 1e-6 turns that noise
    into A_tok of the size of a real signal. Score * p lies in [-1, 1], so a floor of 0.05 keeps any column whose
    relevance really varies.
    """
    if not 0 <= std_floor < 1:
        raise ValueError(f"token_rtt: std_floor must be in [0, 1), got {std_floor!r}")
    if mode not in ("intra", "inter"):
        raise ValueError(f"token_rtt: mode must be 'intra' or 'inter', got {mode!r}")
    p = [_as_array(x) for x in relevance]
    score = 2.0 * (_as_array(satisfied, bool).astype(float) - 0.5)
    adv = _as_array(response_adv).reshape(-1)
    if not (len(p) == len(score) == len(adv)):
        raise ValueError(f"token_rtt: {len(p)} relevance arrays, {len(score)} satisfied rows, "
                         f"{len(adv)} response advantages; all must be G")
    for i, x in enumerate(p):
        if x.ndim != 2 or x.shape[1] != score.shape[1]:
            raise ValueError(f"token_rtt: relevance[{i}] has shape {x.shape}, expected [T, {score.shape[1]}]")
    r = [x * s for x, s in zip(p, score)]
    if mode == "inter":
        # One normalization group per constraint: every token of every response (length-biased, RTT app. D).
        pooled = np.concatenate(r, axis=0) if r else np.zeros((0, score.shape[1]))
        stats = [(pooled.mean(axis=0), pooled.std(axis=0)) if len(pooled) else (0.0, 0.0)] * len(r)
    else:
        stats = [(x.mean(axis=0), x.std(axis=0)) if len(x) else (0.0, 0.0) for x in r]
    out = []
    floor = max(_FLAT, std_floor)
    for x, (mu, sd), a in zip(r, stats, adv):
        z = np.where(sd > floor, (x - mu) / np.where(sd > floor, sd, 1.0), 0.0)
        a_tok = z.mean(axis=1) if z.shape[1] else np.zeros(len(z))
        out.append(alpha * a + beta * a_tok)
    return out


def token_rtt_groups(relevance, satisfied, response_adv, alpha: float = 1.0, beta: float = 0.5,
                     mode: str = "intra", std_floor: float = 0.0) -> list[np.ndarray]:
    """token_rtt over B groups at once: relevance and satisfied list the B * G responses in group order (rows
    g*G .. g*G + G - 1 answer prompt g), response_adv is [B, G]. Each group is normalized on its own list of
    [T_i, C] arrays, never by reshaping a [G, C, T] tensor: the authors' `functionals.py:707` reshapes it to
    [C, G, T] instead of permuting it, which mixes other responses' rows into a response's advantage. Returns
    one [T_i] array per response, in order. The embedded trainer and the OpenRLHF plug-in both call this."""
    adv = _as_array(response_adv)
    if adv.ndim != 2 or adv.shape[0] * adv.shape[1] != len(relevance) or len(satisfied) != len(relevance):
        raise ValueError(f"token_rtt_groups: response_adv must be [B, G] with B * G = {len(relevance)} responses "
                         f"(relevance) = {len(satisfied)} (satisfied), got shape {adv.shape}")
    size = adv.shape[1]
    out = []
    for g in range(adv.shape[0]):
        rows = range(g * size, (g + 1) * size)
        out += token_rtt([relevance[i] for i in rows], [list(satisfied[i]) for i in rows], adv[g], alpha=alpha,
                         beta=beta, mode=mode, std_floor=std_floor)
    return out
