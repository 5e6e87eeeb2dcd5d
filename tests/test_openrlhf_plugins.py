"""ifcore.integrations.openrlhf_plugins against the OpenRLHF 0.11.2 wheel's own classes, run on CPU.

The wheel's files are imported as they are (its experience maker, samples generator and policy actor trainer);
only the package __init__s and the GPU-only modules they reach (deepspeed, vllm, the Ray actor launchers) are
stubbed, and Ray itself by a synchronous stand-in (an object ref is its value)."""
import copy
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ifcore.advantages import group_norm, token_rtt
from ifcore.rewards import raif

REPO = Path(__file__).resolve().parents[1]
PLUGIN_ENV = ("IFCORE_EVAL_LAST", "IFCORE_CKPT_KEEP", "IFCORE_RTT_BETA", "IFCORE_RTT_RELEVANCE", "IFCORE_RTT_MODE",
              "IFCORE_RTT_SEED", "IFCORE_RTT_LABELS",
              "IFCORE_RTT_DISCRIMINATOR", "IFCORE_RAIF_NOTHINK", "IFCORE_RAIF_NOTHINK_SUFFIX", "IFCORE_RAIF_FILTER",
              "IFCORE_RAIF_TEST", "IFCORE_RAIF_REFILL", "IFCORE_RAIF_NOTHINK_ACCURACY",
              "IFCORE_BC_COEF", "IFCORE_BC_DATA", "IFCORE_BC_BATCH")


@pytest.fixture(scope="session")
def wheel_dir(tmp_path_factory):
    wheels = sorted((REPO / ".cache" / "openrlhf-0.11.2").glob("openrlhf-0.11.2-*.whl"))
    if not wheels:
        pytest.fail("no openrlhf 0.11.2 wheel in .cache/openrlhf-0.11.2: run `make install` (it downloads it)")
    out = tmp_path_factory.mktemp("openrlhf")
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if "/openrlhf/" in name and name.endswith(".py"):
                target = out / name[name.index("openrlhf/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    return out / "openrlhf"


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def _ray_remote(*args, **kwargs):
    if args and callable(args[0]):
        return _Remote(args[0])
    return _Remote


def stub_openrlhf(wheel_dir, setitem):
    """Make the wheel's modules importable by name: packages without their __init__, GPU-only modules stubbed.
    setitem(sys.modules, name, module): monkeypatch.setitem in a test, a plain assignment in a subprocess."""
    for pkg in ("", ".trainer", ".trainer.ppo_utils", ".trainer.ray", ".models", ".utils", ".utils.deepspeed"):
        path = Path(wheel_dir) / pkg.lstrip(".").replace(".", "/")
        setitem(sys.modules, "openrlhf" + pkg, _module("openrlhf" + pkg, __path__=[str(path)]))
    ray = _module("ray", remote=_ray_remote, get=lambda ref: ref, put=lambda x: x,
                  wait=lambda refs, num_returns=1, timeout=None: (refs[:num_returns], refs[num_returns:]))
    stubs = {"ray": ray, "deepspeed": _module("deepspeed"),
             "vllm": _module("vllm", SamplingParams=lambda **kw: types.SimpleNamespace(**kw)),
             "openrlhf.trainer.ray.launcher": _module("openrlhf.trainer.ray.launcher", RayActorGroup=object,
                                                      BaseModelActor=object),
             "openrlhf.trainer.ray.vllm_engine": _module("openrlhf.trainer.ray.vllm_engine",
                                                         batch_vllm_engine_call=lambda *a, **k: None),
             "openrlhf.trainer.ray.utils": _module("openrlhf.trainer.ray.utils", get_physical_gpu_id=lambda: 0),
             "openrlhf.utils.deepspeed.deepspeed_utils": _module("x", offload_deepspeed_states=None,
                                                                 reload_deepspeed_states=None),
             "openrlhf.utils.distributed_util": _module("x", stateless_init_process_group=None,
                                                        torch_dist_barrier_and_cuda_sync=None),
             "openrlhf.utils.vlm_utils": _module("x", merge_mm_train_inputs=None)}
    for name, module in stubs.items():
        setitem(sys.modules, name, module)
    sys.modules["openrlhf.models"].__dict__.update(Actor=object, PolicyLoss=object, aggregate_loss=None)
    sys.modules["openrlhf.utils"].get_tokenizer = None
    sys.modules["openrlhf.utils.deepspeed"].DeepspeedStrategy = object
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer  # noqa: the package's own name

    sys.modules["openrlhf.trainer.ppo_utils"].NaiveReplayBuffer = NaiveReplayBuffer


@pytest.fixture
def openrlhf(wheel_dir, monkeypatch):
    """Import the wheel's modules by name: packages without their __init__, GPU-only modules stubbed."""
    for var in PLUGIN_ENV:
        monkeypatch.delenv(var, raising=False)
    for name in [m for m in sys.modules if m == "openrlhf" or m.startswith("openrlhf.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # install()'s import hook ends with the test
    stub_openrlhf(wheel_dir, monkeypatch.setitem)
    return sys.modules


def _ns(**kw):
    return types.SimpleNamespace(**{k: _ns(**v) if isinstance(v, dict) else v for k, v in kw.items()})


class CharTokenizer:
    """One token per character (id = code point + 8); "<|im_end|>" is the special token 2, padding 0."""
    EOS, EOS_ID = "<|im_end|>", 2
    all_special_ids = [0, 2]
    pad_token_id = 0

    def _pieces(self, text):
        out, i = [], 0
        while i < len(text):
            if text.startswith(self.EOS, i):
                out.append((self.EOS_ID, i, i + len(self.EOS)))
                i += len(self.EOS)
            else:
                out.append((ord(text[i]) + 8, i, i + 1))
                i += 1
        return out

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        pieces = self._pieces(text)
        out = {"input_ids": [p[0] for p in pieces]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(a, b) for _, a, b in pieces]
        return out

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.EOS if i == self.EOS_ID else chr(i - 8) for i in ids if i != 0)


TOK = CharTokenizer()
LABEL = json.dumps({"constraints": [
    {"scope": [], "target": {"count": "word"}, "range": {"min": 3, "max": 12}},
    {"scope": [{"unit": "paragraph", "select": "at", "index": 0}], "target": {"count": "occurrence", "of": "river"},
     "range": {"eq": 0}},
    {"scope": [], "target": {"count": "occurrence", "of": "heron"}, "range": {"min": 1}}]})
WORDS = ["river", "heron", "the", "water", "runs", "cold", "fish", "stone", "\n\n"]


def _experience(module, prompt: str, response: str, reward: float, label=LABEL):
    """One sample as SamplesGenerator._process_response_into_experience makes it from an executor's output."""
    p, r = TOK(prompt)["input_ids"], TOK(response)["input_ids"]
    generator = module.SamplesGenerator.__new__(module.SamplesGenerator)
    return generator._process_response_into_experience(
        {"observation_tokens": p + r, "action_ranges": [(len(p), len(p) + len(r))], "reward": reward,
         "scores": reward, "prompt": prompt, "label": label, "rollout_log_probs": None, "extra_logs": {}},
        max_len=4096)


def _maker(module, n: int, micro: int):
    maker = module.RemoteExperienceMaker.__new__(module.RemoteExperienceMaker)
    maker.strategy = _ns(args=_ns(rollout={"n_samples_per_prompt": n, "micro_batch_size": micro},
                                  train={"dynamic_batch_enable": False},
                                  algo={"advantage": {"estimator": "group_norm", "gamma": 1.0, "no_std_norm": False}},
                                  reward={"clip_range": None},
                                  # length penalties off
                                  overlong_buffer_len=None, stop_properly_penalty_coef=None))
    maker.args = maker.strategy.args
    maker.advantage_estimator = "group_norm"
    maker.tokenizer, maker.kl_ctl = TOK, _ns(value=0.0)
    return maker


def _batches(maker, samples):
    batches = maker.split_rollout_samples(samples)  # the wheel's own micro-batching: right padding
    for e in batches:
        e.kl = torch.zeros(e.action_mask.shape)  # make_experience's, with the KL coefficient 0
    return batches


def fake_relevance(criteria, responses):
    """A deterministic stand-in for a discriminator: p from the token id and the criterion."""
    return [np.array([((i * 7 + len(c) * 13) % 11) / 10 for i in ids]) for c, ids in zip(criteria, responses)]


def _answer_positions(prompt, response):
    """Action positions (indices into the action mask) of the answer tokens: after the last </think>, before the
    end-of-turn token; computed on the text, independently of the plug-in."""
    start = response.rfind("</think>")
    start = start + len("</think>") if start >= 0 else 0
    end = response.find(CharTokenizer.EOS)
    end = len(response) if end < 0 else end
    return [len(prompt) - 1 + t for t in range(start, end)]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(n=st.integers(2, 4), groups=st.integers(1, 3), micro=st.integers(1, 5), data=st.data())
def test_rtt_advantages_equal_ifcore_advantages(openrlhf_module, n, groups, micro, data):
    em, plugins = openrlhf_module
    prompts, texts, rewards = [], [], []
    for g in range(groups):
        prompt = data.draw(st.sampled_from(["Q: ", "Write about a river.\n", "p"])) + str(g)
        for _ in range(n):
            words = data.draw(st.lists(st.sampled_from(WORDS), max_size=14))
            think = data.draw(st.sampled_from(["", "<think>river heron</think>"]))
            eos = data.draw(st.sampled_from([CharTokenizer.EOS, "", CharTokenizer.EOS + CharTokenizer.EOS]))
            prompts.append(prompt)
            texts.append(think + " ".join(words) + eos)
            # exact binary fractions: OpenRLHF divides by std + 1e-9, so a constant group's float noise in the mean
            # would become a large advantage there (ifcore's group_norm gives such a group exactly 0)
            rewards.append(data.draw(st.integers(0, 8)) / 8)
    samples = [_experience(em, p, t, r) for p, t, r in zip(prompts, texts, rewards)]
    maker = _maker(em, n, micro)
    plain = maker.compute_advantages_and_returns(_batches(maker, copy.deepcopy(samples)))
    beta = data.draw(st.sampled_from([0.25, 0.5, 1.0]))
    mode = data.draw(st.sampled_from(["intra", "inter"]))  # RTT's normalization, and the inter-sample ablation
    floor = data.draw(st.sampled_from([0.0, 0.05, 0.3]))  # IFCORE_RTT_STD_FLOOR (NOT in RTT; 0: the paper's)
    got = plugins.add_rtt(maker, maker.compute_advantages_and_returns(_batches(maker, samples)), beta,
                          fake_relevance, mode, std_floor=floor)
    adv = {i: (e.advantages[j], e.action_mask[j]) for e in got for j, i in enumerate(e.index)}
    base = {i: e.advantages[j] for e in plain for j, i in enumerate(e.index)}
    a_res = group_norm(np.array(rewards).reshape(groups, n))
    for g in range(groups):
        rows = range(g * n, (g + 1) * n)
        relevance, satisfied, positions = [], [], []
        for i in rows:
            pos = _answer_positions(prompts[i], texts[i])
            ids = TOK(texts[i])["input_ids"]
            cut = ids.index(2) if 2 in ids else len(ids)
            answer = [t for t in range(cut) if len(prompts[i]) - 1 + t in pos]
            p = np.stack([fake_relevance([c], [ids])[0][answer] for c in _criteria()], axis=1)
            relevance.append(p.reshape(len(answer), 3))
            satisfied.append(_satisfied(texts[i]))
            positions.append(pos)
        # RTT eq. 7 with alpha = 1: OpenRLHF's response advantage plus beta A_tok
        expected = token_rtt(relevance, satisfied, a_res[g], alpha=1.0, beta=beta, mode=mode, std_floor=floor)
        for k, i in enumerate(rows):
            a, mask = adv[i]
            assert torch.allclose(base[i][mask.bool()], torch.tensor(a_res[g][k], dtype=torch.float32), atol=1e-5)
            # outside the action mask (OpenRLHF's returns run back into the prompt's columns) nothing changes
            want = base[i].clone()
            want[positions[k]] = torch.tensor(expected[k], dtype=torch.float32)
            assert torch.allclose(a, want, atol=1e-5), (texts[i], a, want)


def _criteria():
    from ifcore.integrations import load_constraints

    return [c.text or json.dumps({k: v for k, v in c.to_dict().items() if k not in ("id", "category")})
            for c in load_constraints(LABEL, "test")]


def _satisfied(text):
    from ifcore.integrations import load_constraints
    from ifcore.rewards import score_response

    answer = text.split(CharTokenizer.EOS)[0]
    return score_response(answer, load_constraints(LABEL, "t"), truncated=CharTokenizer.EOS not in text)["satisfied"]


@pytest.fixture
def openrlhf_module(openrlhf):
    import importlib

    em = importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker")
    sg = importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator")
    module = types.SimpleNamespace(RemoteExperienceMaker=em.RemoteExperienceMaker,
                                   SamplesGenerator=sg.SamplesGenerator)
    from ifcore.integrations import openrlhf_plugins

    return module, openrlhf_plugins


# ---- RTT: the verifier's relevance, and install() ----------------------------------------------------------------

def test_verifier_relevance_marks_the_evidence(openrlhf_module):
    _, plugins = openrlhf_module
    think = "<think>the river</think>"
    answer = "The river runs.\n\nA heron waits by the river."
    ids = TOK(think + answer + CharTokenizer.EOS)["input_ids"]
    from ifcore.integrations import settings as opts

    scored, p, satisfied = plugins.response_relevance(TOK, ids, LABEL, opts())
    assert satisfied == [True, False, True]
    # the answer's tokens only: after </think>, before the end-of-turn token
    assert scored == list(range(len(think), len(think) + len(answer)))
    first_river = answer.index("river")
    heron = answer.index("heron")
    # word count (GLOBAL): every token of the answer; "no river in paragraph 1" (LOCAL negative, violated): the
    # violating occurrence, not the one in paragraph 2; "include heron" (LOCAL positive, satisfied): its occurrence
    assert (p[:, 0] == 1).all()  # the paper's labels: all_relevant, so its intra-sample A_tok is 0
    assert np.flatnonzero(p[:, 1]).tolist() == list(range(first_river, first_river + 5))
    assert np.flatnonzero(p[:, 2]).tolist() == list(range(heron, heron + 5))
    _, scoped, _ = plugins.response_relevance(TOK, ids, LABEL, opts(), labels="scoped")  # IFCORE_RTT_LABELS=scoped
    assert np.array_equal(scoped[:, 1:], p[:, 1:]) and len(answer) - 2 <= scoped[:, 0].sum() <= len(answer)
    # cut at the length limit (no end-of-turn token): gated, nothing verified, no relevance
    scored, p, satisfied = plugins.response_relevance(TOK, ids[:-1], LABEL, opts())
    assert satisfied == [False] * 3 and not p.any()
    # a response whose text does not re-tokenize to its ids keeps OpenRLHF's advantage (no scored token)
    assert plugins.response_relevance(TOK, [TOK.EOS_ID, 0, 80], LABEL, opts())[0] == []


def test_judged_constraints_are_left_out_of_rtt(openrlhf_module):
    # The reward function's judge verdicts cannot reach the plug-in, and score_response without a judge counts a
    # judged constraint violated: with a discriminator (p > 0) that pushed down the tokens that satisfied it.
    module, plugins = openrlhf_module
    from ifcore.integrations import settings as opts

    judged = {"text": "Sound calm.", "judge": True}
    mixed = json.loads(LABEL)
    mixed["constraints"].insert(1, judged)
    ids = TOK("The river runs.\n\nA heron waits by the river." + TOK.EOS)["input_ids"]
    for fn in (None, fake_relevance):
        want = plugins.response_relevance(TOK, ids, LABEL, opts(), fn)
        scored, p, satisfied = plugins.response_relevance(TOK, ids, json.dumps(mixed), opts(), fn)
        assert scored == want[0] and np.array_equal(p, want[1]) and satisfied == want[2]
        assert plugins.response_relevance(TOK, ids, json.dumps({"constraints": [judged]}), opts(), fn)[0] == []
    only_judged = json.dumps({"constraints": [judged]})
    samples = [_experience(module, "Q: a", t, r, label=only_judged)
               for t, r in [("The river." + TOK.EOS, 1.0), ("heron" + TOK.EOS, 0.0)]]
    maker = _maker(module, 2, 2)
    original = module.RemoteExperienceMaker.compute_advantages_and_returns
    plain = original(maker, _batches(maker, copy.deepcopy(samples)))
    got = plugins.add_rtt(maker, original(maker, _batches(maker, samples)), 0.5, fake_relevance)
    assert all(torch.equal(a.advantages, b.advantages) for a, b in zip(got, plain))  # OpenRLHF's advantage alone


class _GpuActor:
    """A reference-model actor handle: Ray's built-in `__ray_call__.remote(fn, *args)` runs fn(actor, *args) in the
    actor's process (here, in this one), recorded."""

    def __init__(self, calls):
        self.calls = calls
        self.__ray_call__ = _ns(remote=self.call)

    def call(self, fn, *args):
        self.calls.append((self, fn.__name__, *args))
        return fn(self, *args)


def test_a_discriminator_runs_batched_on_the_gpu_actors(openrlhf_module, monkeypatch):
    # OpenRLHF's trainer actor (where the advantages are computed) has no GPU: a "module:function" relevance runs
    # in the reference model's actors, once per step over all (criteria, response) pairs, split between them.
    module, plugins = openrlhf_module
    local = []
    monkeypatch.setitem(sys.modules, "fake_disc", _module(
        "fake_disc", relevance=lambda c, r: (local.append(len(c)), fake_relevance(c, r))[1]))
    monkeypatch.setattr(plugins, "_HOSTED", {})
    texts = ["The river runs.\n\nA heron." + TOK.EOS, "heron" + TOK.EOS, "<think>x</think>a river heron" + TOK.EOS,
             "water" + TOK.EOS, "The heron and the fish." + TOK.EOS, "cold stone heron"]
    samples = [_experience(module, p, t, r) for p, t, r in zip(["Q: a"] * 3 + ["Q: b"] * 3, texts,
                                                                  [1, 0.5, 0.25, 0, 0.75, 0.5])]
    maker = _maker(module, 3, 2)
    original = module.RemoteExperienceMaker.compute_advantages_and_returns
    want = plugins.add_rtt(maker, original(maker, _batches(maker, copy.deepcopy(samples))), 0.5, fake_relevance)
    calls = []
    maker.initial_model_group = _ns(_actor_handlers=[_GpuActor(calls) for _ in range(4)])
    hosted = plugins.add_rtt(maker, original(maker, _batches(maker, samples)), 0.5,
                             lambda c, r: pytest.fail("the trainer actor computed the relevance"), "intra", "paper",
                             "fake_disc:relevance")
    assert all(torch.allclose(a.advantages, b.advantages) for a, b in zip(hosted, want))
    # 6 responses x 3 constraints = 18 pairs in chunks of 5, 5, 5, 3: one call per actor, each batched
    assert [len(c[3]) for c in calls] == [5, 5, 5, 3] == local and {c[1] for c in calls} == {"_hosted_relevance"}
    assert len({id(c[0]) for c in calls}) == 4 and [x for c in calls for x in c[3]] == _criteria() * 6
    tokens = sum(len(TOK(t)["input_ids"]) for t in texts) * 3
    for e in hosted:  # the step's cost, on every sample (their mean is the step's value)
        assert e.info["rtt_tokens"].tolist() == [tokens] * len(e.index) and (e.info["rtt_seconds"] >= 0).all()
    # a second step reuses the function loaded in the actor's process
    plugins.add_rtt(maker, original(maker, _batches(maker, copy.deepcopy(samples))), 0.5, None, "intra", "paper",
                    "fake_disc:relevance")
    assert list(plugins._HOSTED) == ["fake_disc:relevance"] and len(calls) == 8


def test_superior_cot_logs_keep_ratio_and_the_two_reward_means(openrlhf_module):
    # notebook 02's panels: keep ratio, CoT and no-think reward; OpenRLHF averages each extra log over the rollouts
    from ifcore.run.curves import _openrlhf_key

    _, plugins = openrlhf_module
    ok = {"format_fail": 0.0, "no_reasoning": 0.0, "ila": 1.0, "cla": 1.0}
    bad = {**ok, "ila": 0.0, "cla": 0.0}
    groups = [([1.0, 0.5, 2.0], [0.25], ok), ([0.0, -1.0, 3.0], [1.5], bad)]  # 3 CoT + 1 no-think each
    rows = []
    for cot, plain, logs in groups:
        rows += plugins.superior_cot_group([{"reward": torch.tensor([r]), "extra_logs": dict(ok)} for r in cot],
                                           [{"reward": r, "extra_logs": dict(logs)} for r in plain])
    mean = {k: np.mean([r["extra_logs"][k] for r in rows]) for k in ("raif_keep", "cot_reward_mean",
                                                                     "nothink_reward_mean")}
    assert mean["cot_reward_mean"] == pytest.approx(np.mean([1.0, 0.5, 2.0, 0.0, -1.0, 3.0]))
    assert mean["nothink_reward_mean"] == pytest.approx(np.mean([0.25, 1.5]))
    assert mean["raif_keep"] == pytest.approx(np.mean([rows[0]["extra_logs"]["raif_keep"],
                                                       rows[4]["extra_logs"]["raif_keep"]]))
    assert [_openrlhf_key(k, 1.0)[0] for k in mean] == ["keep_ratio", "cot_reward_mean", "nothink_reward_mean"]


def test_the_last_step_is_evaluated_and_old_hf_checkpoints_pruned(openrlhf_module, monkeypatch, tmp_path):
    _, plugins = openrlhf_module
    evaluated = []
    trainer = types.SimpleNamespace(args=_ns(eval={"steps": 4, "temperature": 0.7, "n_samples_per_prompt": 2}),
                                    eval_dataloader=[1], generate_kwargs={"max_new_tokens": 8, "temperature": 1.0},
                                    evaluate=lambda step, **kw: evaluated.append((step, kw)))
    step = plugins._eval_last(lambda self, samples, g: ({}, g + 1), 6)
    for g in range(6):  # steps 1..6: OpenRLHF's fit evaluates at 4; the plug-in adds 6, the last
        step(trainer, [], g)
    assert evaluated == [(6, {"max_new_tokens": 8, "temperature": 0.7, "n_samples_per_prompt": 2})]
    monkeypatch.setenv("IFCORE_EVAL_LAST", "6")
    monkeypatch.setenv("IFCORE_CKPT_KEEP", "2")
    assert plugins.install() == ["BasePPOTrainer.train_step", "DeepspeedStrategy.save_model"]
    # DeepspeedStrategy.save_model as the wheel's: rank 0 writes the folder (the module imports deepspeed itself)
    strategy, saved = _ns(is_rank_0=lambda: True), []
    save = plugins._prune_hf(lambda self, model, tok, out, **kw: (os.makedirs(out), saved.append(out)), 2)
    ckpt = tmp_path / "checkpoints"
    (ckpt / "_actor").mkdir(parents=True)
    (ckpt / "best_global_step2_hf").mkdir()
    for g in (2, 4, 6, 8):
        save(strategy, None, None, str(ckpt / f"global_step{g}_hf"))
    save(strategy, None, None, str(tmp_path / "model"))  # the final model: not a step's checkpoint
    assert sorted(p.name for p in ckpt.iterdir()) == ["_actor", "best_global_step2_hf", "global_step6_hf",
                                                      "global_step8_hf"]
    assert (tmp_path / "model").is_dir() and len(saved) == 5


def test_install_patches_only_what_the_environment_turns_on(openrlhf_module, monkeypatch, tmp_path):
    module, plugins = openrlhf_module
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    originals = (RemoteExperienceMaker.compute_advantages_and_returns, SamplesGenerator.generate_samples,
                 ActorPPOTrainer.training_step)
    assert plugins.install() == []  # every variable unset: OpenRLHF's own methods, untouched
    assert (RemoteExperienceMaker.compute_advantages_and_returns, SamplesGenerator.generate_samples,
            ActorPPOTrainer.training_step) == originals

    for var, value, message in [("IFCORE_RTT_BETA", "x", "IFCORE_RTT_BETA must be a finite number > 0"),
                                ("IFCORE_RTT_BETA", "-1", "IFCORE_RTT_BETA"),
                                ("IFCORE_RAIF_NOTHINK", "0", "IFCORE_RAIF_NOTHINK must be a positive integer"),
                                ("IFCORE_BC_COEF", "0.1", "IFCORE_BC_COEF needs IFCORE_BC_DATA")]:
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError, match=message):
                plugins.install()
    assert RemoteExperienceMaker.compute_advantages_and_returns is originals[0]

    monkeypatch.setenv("IFCORE_RTT_BETA", "0.5")
    assert plugins.install() == ["RemoteExperienceMaker.compute_advantages_and_returns"]
    assert plugins.install() == ["RemoteExperienceMaker.compute_advantages_and_returns"]  # wraps once
    patched = RemoteExperienceMaker.compute_advantages_and_returns
    assert patched.__wrapped__ is originals[0] and SamplesGenerator.generate_samples is originals[1]

    n, prompts = 3, ["Q: a"] * 3 + ["Q: b"] * 3
    texts = ["The river runs.\n\nA heron." + TOK.EOS, "heron" + TOK.EOS, "<think>x</think>a b c river heron" + TOK.EOS,
             "water" + TOK.EOS, "The heron and the fish." + TOK.EOS, "cold stone heron"]
    samples = [_experience(module, p, t, r) for p, t, r in zip(prompts, texts, [1, 0.5, 0.25, 0, 0.75, 0.5])]
    maker = _maker(module, n, 4)
    got = maker.compute_advantages_and_returns(_batches(maker, copy.deepcopy(samples)))
    want = plugins.add_rtt(maker, originals[0](maker, _batches(maker, samples)), 0.5)
    for a, b in zip(got, want):
        assert torch.equal(a.advantages, b.advantages)
    plain = originals[0](maker, _batches(maker, copy.deepcopy(samples)))
    assert any(not torch.equal(a.advantages, b.advantages) for a, b in zip(got, plain))  # RTT moved something

    # RTT's ablations: p = 1 leaves OpenRLHF's advantages as they are (A_tok = 0); p ~ U[0, 1] is the seed's stream
    assert plugins._relevance_fn("uniform")(["a", "b"], [[5, 6, 7], [8]])[0].tolist() == [1.0, 1.0, 1.0]
    uniform = plugins.add_rtt(maker, originals[0](maker, _batches(maker, copy.deepcopy(samples))), 0.5,
                              plugins._relevance_fn("uniform"))
    assert all(torch.equal(a.advantages, b.advantages) for a, b in zip(uniform, plain))
    monkeypatch.setenv("IFCORE_RTT_SEED", "7")
    draws = [plugins.add_rtt(maker, originals[0](maker, _batches(maker, copy.deepcopy(samples))), 0.5,
                             plugins._relevance_fn("random")) for _ in range(2)]
    assert all(torch.equal(a.advantages, b.advantages) for a, b in zip(*draws))  # one seed, one stream
    rng = np.random.default_rng(7)
    assert plugins._relevance_fn("random")([""], [[1, 2, 3]])[0].tolist() == rng.random(3).tolist()
    assert any(not torch.equal(a.advantages, b.advantages) for a, b in zip(draws[0], plain))
    for var, value, message in [("IFCORE_RTT_SEED", "-1", "IFCORE_RTT_SEED must be a non-negative integer"),
                                ("IFCORE_RTT_LABELS", "global", "IFCORE_RTT_LABELS must be one of paper, scoped"),
                                ("IFCORE_RTT_RELEVANCE", "uniformly", "IFCORE_RTT_RELEVANCE must be 'verifier', "),
                                ("IFCORE_RTT_MODE", "intra-sample", "IFCORE_RTT_MODE must be 'intra' or 'inter'")]:
        with monkeypatch.context() as m:
            m.setenv("IFCORE_RTT_RELEVANCE", "random")
            m.setenv("IFCORE_RAIF_NOTHINK", "1")
            m.setenv(var, value)
            with pytest.raises(ValueError, match=message):
                plugins.install()

    maker.strategy.args.algo.advantage.estimator = maker.advantage_estimator = "rloo"
    with pytest.raises(ValueError, match="estimator is 'rloo'"):
        maker.compute_advantages_and_returns(_batches(maker, copy.deepcopy(samples)))


# ---- RAIF: paired no-think rollouts and the superior-CoT filter ----------------------------------------------------

def _generator(module, n, batch, prompts, labels, dynamic=False, lo=-0.01, hi=1.01):
    gen = module.SamplesGenerator.__new__(module.SamplesGenerator)
    gen.args = _ns(algo={"dynamic_filtering_enable": dynamic, "dynamic_filtering_range": (lo, hi),
                         "advantage": {"is_correction_level": "off"}},
                   rollout={"n_samples_per_prompt": n, "batch_size": batch}, vllm={"enable_sleep": False})
    gen.strategy, gen.tokenizer = _ns(args=gen.args), TOK
    gen.prompts_dataloader = [(None, [p], [lab], [None]) for p, lab in zip(prompts, labels)]
    return gen


class FakeEngine:
    """A vLLM engine whose rollouts have scripted verdicts: outcomes[prompt] = [(satisfied, format_ok,
    reasoning_ok), ...], the reward and the logs as the reward function gives them (RAIF eq. 4-6)."""

    def __init__(self, outcomes, suffix):
        self.outcomes, self.suffix, self.calls = outcomes, suffix, []
        self.generate_responses = _Remote(self._generate)
        self.get_num_unfinished_requests = _Remote(lambda: 0)

    def _generate(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1, images=None):
        self.calls.append((prompt, num_samples))
        nothink = prompt.endswith(self.suffix)
        rows = self.outcomes[prompt[:-len(self.suffix)] if nothink else prompt]
        rows = rows[len(rows) - num_samples:] if nothink else rows[:num_samples]
        out = []
        for sat, ok, thought in rows:
            reward = float(raif(sat, ok, thought))
            judged = ok and thought
            logs = {"ila": float(all(sat) and judged), "cla": float(np.mean(sat)) if judged else 0.0,
                    "format_fail": float(not ok), "no_reasoning": float(ok and not thought),
                    "constraints": float(len(sat))}
            ids = TOK(prompt)["input_ids"]
            out.append({"observation_tokens": ids + [70, 71, TOK.EOS_ID], "action_ranges": [(len(ids), len(ids) + 3)],
                        "reward": reward, "scores": (reward + 3) / 6, "prompt": prompt, "label": label,
                        "rollout_log_probs": None, "extra_logs": logs})
        return out


def _accuracy(sat, ok, thought=True):
    return float(raif(sat, ok, thought)) - (1.0 if ok else -1.0)  # RAIF eq. 5, as the embedded trainer's accuracy()


# Two constraints: every RAIF reward (-3, -1, 1.5, 3) is an exact binary fraction, so OpenRLHF's float32 group
# statistics and ifcore's float64 ones agree on a constant group (both give 0).
outcome = st.tuples(st.lists(st.booleans(), min_size=2, max_size=2), st.booleans(), st.booleans())


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(n=st.integers(2, 5), k=st.integers(1, 4), batch=st.integers(1, 3), micro=st.integers(1, 4), data=st.data())
def test_the_plugin_gives_the_embedded_trainers_advantages_and_keep_decisions(openrlhf_module, n, k, batch, micro,
                                                                             data):
    """Shared tensors through both engines: the plug-in's paired rollouts, OpenRLHF 0.11.2's own group_norm and
    the plug-in's masking against what ifcore.train.grpo computes from the same rewards (group_norm over all G,
    superior_cot_mask's train flags)."""
    from ifcore.advantages import reference_superior, superior_cot_mask

    module, plugins = openrlhf_module
    k = min(k, n - 1)
    test = data.draw(st.sampled_from(["group", "reference", "group+reference"]))
    prompts = [f"prompt {i}" for i in range(batch)]
    refs = [data.draw(st.integers(0, 2)) for _ in prompts]
    labels = [json.dumps({**json.loads(LABEL), "reference": [True] * r + [False] * (3 - r)}) for r in refs]
    outcomes = {p: data.draw(st.lists(outcome, min_size=n, max_size=n)) for p in prompts}
    gen = _generator(module, n, batch, prompts, labels)
    gen.vllm_engines = [FakeEngine(outcomes, plugins.NOTHINK_SUFFIX)]
    paired = plugins._paired_generate(module.SamplesGenerator.generate_samples, k, plugins.NOTHINK_SUFFIX, test)
    samples, _, consumed, _ = paired(gen, n_samples_per_prompt=n, max_new_tokens=8)
    assert consumed == batch  # nothing refilled
    maker = _maker(module, n, micro)
    got = plugins.mask_untrained(maker.compute_advantages_and_returns(_batches(maker, samples)))
    rows = {i: (e, j) for e in got for j, i in enumerate(e.index)}

    # the embedded trainer's computation on the same rollouts (CoT ones first, then the k no-think ones)
    rewards = np.array([[float(raif(*o)) for o in outcomes[p]] for p in prompts])
    acc = np.array([[_accuracy(*o) for o in outcomes[p]] for p in prompts])
    nothink = np.array([False] * (n - k) + [True] * k)
    sample_ok = None
    if "reference" in test:
        judged = np.array([[o[1] and o[2] for o in outcomes[p]] for p in prompts])
        count = np.array([[sum(o[0]) for o in outcomes[p]] for p in prompts])
        sample_ok = reference_superior(count, judged, np.array(refs)[:, None])
    keep, train = superior_cot_mask(acc, nothink, sample_ok, group="group" in test)
    advantages = group_norm(rewards)  # the no-think rewards in the group statistics, as the authors' code
    for g, p in enumerate(prompts):
        for i in range(n):
            e, j = rows[g * n + i]
            assert e.prompts[j] == p + (plugins.NOTHINK_SUFFIX if nothink[i] else "")
            assert e.info["raif_keep"][j].item() == float(keep[g]) and e.info["raif_train"][j].item() == train[g, i]
            assert bool(e.action_mask[j].any()) == bool(train[g, i])  # no gradient where it does not train
            if train[g, i]:
                assert torch.allclose(e.advantages[j][e.action_mask[j]],
                                      torch.tensor(advantages[g, i], dtype=torch.float32), atol=1e-5)
            else:
                assert not e.advantages[j].any()


def test_refill_replaces_dropped_groups_only_when_asked(openrlhf_module, monkeypatch):
    module, plugins = openrlhf_module
    good, half, broken = ([True, True], True, True), ([True, False], True, True), ([False, False], False, True)
    outcomes = {"p0": [half, broken, good], "p1": [good, good, good], "p2": [good, half, good]}  # p0: 0.5 < 2
    prompts, labels = list(outcomes), [LABEL] * 3
    for refill in (False, True):
        gen = _generator(module, 3, 2, prompts, labels, dynamic=refill)
        gen.vllm_engines = [FakeEngine(outcomes, plugins.NOTHINK_SUFFIX)]
        paired = plugins._paired_generate(module.SamplesGenerator.generate_samples, 1, plugins.NOTHINK_SUFFIX,
                                          "group", refill)
        samples, _, consumed, _ = paired(gen, n_samples_per_prompt=3)
        got = [s.prompts[0] for s in samples]
        if refill:  # p0 dropped by the dynamic filter, p2 drawn in its place
            assert consumed == 3 and got == ["p1", "p1", "p1" + plugins.NOTHINK_SUFFIX, "p2", "p2",
                                             "p2" + plugins.NOTHINK_SUFFIX]
        else:  # p0 kept in the batch, its rollouts flagged not to train
            assert consumed == 2 and [s.info["raif_train"].item() for s in samples] == [0, 0, 0, 1, 1, 0]
    gen = _generator(module, 3, 2, prompts, labels, dynamic=False)
    gen.vllm_engines = [FakeEngine(outcomes, plugins.NOTHINK_SUFFIX)]
    paired = plugins._paired_generate(module.SamplesGenerator.generate_samples, 1, plugins.NOTHINK_SUFFIX, "group",
                                      True)
    with pytest.raises(ValueError, match="dynamic_filtering_enable"):
        paired(gen, n_samples_per_prompt=3)


def test_refill_is_bounded_and_never_trains_a_partial_batch(openrlhf_module):
    # Unbounded refills emptied the loader: the last batch came back partial, and the wheel's trainer fails a
    # batch with fewer micro-batches than actors ("Insufficient batch size") before the final save.
    module, plugins = openrlhf_module
    good, half, broken = ([True, True], True, True), ([True, False], True, True), ([False, False], False, True)
    dropped, kept = [half, broken, good], [good, good, good]

    def run(outcomes, refill, steps=0, step=0):
        gen = _generator(module, 3, 2, list(outcomes), [LABEL] * len(outcomes), dynamic=True)
        gen.vllm_engines = [FakeEngine(outcomes, plugins.NOTHINK_SUFFIX)]
        gen._ifcore_step = step
        paired = plugins._paired_generate(module.SamplesGenerator.generate_samples, 1, plugins.NOTHINK_SUFFIX,
                                          "group", refill, steps)
        samples, _, consumed, exhausted = paired(gen, n_samples_per_prompt=3)
        return [s.prompts[0].removesuffix(plugins.NOTHINK_SUFFIX) for s in samples][::3], samples, consumed, \
            exhausted, gen.vllm_engines[0].calls

    # one round for a batch of 2: two replacements; p2, dropped too, stays in the batch without gradient
    got, samples, consumed, exhausted, _ = run({"p0": dropped, "p1": dropped, "p2": dropped, "p3": kept,
                                                "p4": kept}, 1)
    assert sorted(got) == ["p2", "p3"] and consumed == 4 and not exhausted
    assert [s.info["raif_train"].item() for s in samples if s.prompts[0].startswith("p2")] == [0, 0, 0]
    got, _, consumed, _, _ = run({"p0": dropped, "p1": dropped, "p2": dropped, "p3": kept, "p4": kept}, 2)
    assert sorted(got) == ["p3", "p4"] and consumed == 5  # two rounds: p2 replaced as well
    # the loader runs out mid-batch: nothing to train, the episode ends (fit breaks; the model is saved)
    got, _, consumed, exhausted, _ = run({"p0": dropped, "p1": kept}, 1)
    assert got == [] and exhausted and consumed == 2
    # IFCORE_RAIF_STEPS: after that many global steps, no more rollouts
    got, _, consumed, exhausted, calls = run({"p0": kept, "p1": kept}, 1, steps=3, step=3)
    assert (got, consumed, exhausted, calls) == ([], 0, True, [])
    assert run({"p0": kept, "p1": kept}, 1, steps=3, step=2)[0] == ["p0", "p1"]
    trainer = types.SimpleNamespace(samples_generator=types.SimpleNamespace())
    step = plugins._count_steps(lambda self, samples, global_step: ({}, global_step + 1))
    assert step(trainer, [], 6) == ({}, 7) and trainer.samples_generator._ifcore_step == 7


def test_install_pairs_training_rollouts_only_and_masks_after_the_advantages(openrlhf_module, monkeypatch):
    module, plugins = openrlhf_module
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    monkeypatch.setenv("IFCORE_RAIF_NOTHINK", "1")
    monkeypatch.setenv("IFCORE_RTT_BETA", "0.5")  # both features wrap compute_advantages_and_returns
    assert plugins.install() == ["RemoteExperienceMaker.compute_advantages_and_returns",
                                 "SamplesGenerator.generate_samples",
                                 "RemoteExperienceMaker.compute_advantages_and_returns"]
    assert RemoteExperienceMaker.compute_advantages_and_returns._ifcore == ("rtt", "raif")
    plugins.install()  # once per feature
    assert RemoteExperienceMaker.compute_advantages_and_returns._ifcore == ("rtt", "raif")
    outcomes = {"p0": [([True, True], True, True)] * 4}
    gen = _generator(module, 4, 1, ["p0"], [LABEL])
    engine = FakeEngine(outcomes, plugins.NOTHINK_SUFFIX)
    gen.vllm_engines = [engine]
    gen.eval_dataloader = [(None, ["p0"], [LABEL], [None])]
    gen.generate_eval_samples(n_samples_per_prompt=4)
    assert engine.calls == [("p0", 4)]  # evaluation: plain rollouts
    engine.calls.clear()
    gen.generate_samples(n_samples_per_prompt=4)
    assert engine.calls == [("p0", 3), ("p0" + plugins.NOTHINK_SUFFIX, 1)]
    for var, value, message in [("IFCORE_RAIF_TEST", "pairs", "IFCORE_RAIF_TEST must be"),
                                ("IFCORE_RAIF_REFILL", "yes", "IFCORE_RAIF_REFILL must be 'off', 'on' or a number"),
                                ("IFCORE_RAIF_STEPS", "-1", "IFCORE_RAIF_STEPS must be a number of steps"),
                                ("IFCORE_RAIF_FILTER", "off", "IFCORE_RAIF_FILTER is gone")]:
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ValueError, match=message):
                plugins.install()
    assert plugins.raif_accuracy({}) == -2.0  # the reward function failed: not judged
    assert plugins.raif_accuracy({"format_fail": 0.0, "no_reasoning": 1.0, "ila": 1.0, "cla": 1.0}) == -2.0


def test_the_reward_function_scores_no_think_rollouts_as_the_embedded_trainer(monkeypatch):
    from ifcore.integrations.openrlhf_reward import reward_func

    monkeypatch.setenv("IFCORE_REWARD", "raif")
    monkeypatch.setenv("IFCORE_THINK", "raif")
    label = json.dumps({"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"max": 3}}]})
    prompt = "Q<|im_start|>assistant\n"
    answer = "<answer>a b</answer><|im_end|>"
    cases = [(prompt + "<think>\n\n</think>\n", answer, 3.0),  # a no-think rollout: its answer is judged
             (prompt, "<think>\n\n</think>\n" + answer, -1.0),  # empty reasoning it wrote: R_accuracy -2
             (prompt, "<think>Reasoning process here</think>" + answer, -1.0),  # the placeholder
             (prompt, "<think>two words</think>" + answer, 3.0)]
    got = [reward_func([p + r], [p], [label])["rewards"][0].item() for p, r, _ in cases]
    assert got == [want for _, _, want in cases]
    monkeypatch.setenv("IFCORE_RAIF_NOTHINK_ACCURACY", "authors")
    assert reward_func([cases[0][0] + cases[0][1]], [cases[0][0]], [label])["rewards"][0].item() == -1.0


@pytest.mark.parametrize("gate", ["raif", "required", "auto", "none"])
def test_no_think_rollouts_are_scored_as_the_embedded_trainer_under_every_gate(monkeypatch, gate):
    # The job-wide IFCORE_THINK is the CoT rollouts' gate; "required" (a Qwen3-style template) failed the format
    # of every no-think rollout, whose think block is in its prompt.
    from ifcore.integrations import load_constraints
    from ifcore.integrations.openrlhf_plugins import NOTHINK_SUFFIX
    from ifcore.integrations.openrlhf_reward import reward_func
    from ifcore.train.grpo import _score, load_config

    reward = "raif" if gate == "raif" else "scopeif"
    monkeypatch.setenv("IFCORE_REWARD", reward)
    monkeypatch.setenv("IFCORE_THINK", gate)
    label = json.dumps({"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"max": 3}}]})
    cfg = load_config(None, reward=reward)
    prompt = "Q<|im_start|>assistant\n"
    answer = "<answer>a b</answer>" if reward == "raif" else "a b"
    got = reward_func([prompt + NOTHINK_SUFFIX + answer + "<|im_end|>"], [prompt + NOTHINK_SUFFIX], [label])
    want = _score(answer, False, load_constraints(label, "label"), cfg, None, prompt + NOTHINK_SUFFIX, nothink=True)
    assert got["rewards"][0].item() == pytest.approx(want["reward"]) and want["format_ok"]
    assert got["extra_logs"]["format_fail"] == 0.0
    if gate == "required":  # a CoT rollout still needs its closed think block
        cot = reward_func([prompt + answer + "<|im_end|>"], [prompt], [label])
        assert cot["extra_logs"]["format_fail"] == 1.0


# ---- RAIF: behaviour cloning -------------------------------------------------------------------------------------

class TinyActor(torch.nn.Module):
    """OpenRLHF's Actor interface: the log-probs of the action tokens (action_mask's width, from the right), of the
    logits divided by `temperature` as models/actor.py divides them."""

    def __init__(self, temperature=1.0):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = torch.nn.Embedding(200, 8), torch.nn.Linear(8, 200)
        self.temperature = temperature

    def logits(self, sequences):
        return self.out(self.emb(sequences))

    def forward(self, sequences, action_mask, attention_mask=None, return_output=False, **kwargs):
        logits = self.logits(sequences) / self.temperature
        logp = logits[:, :-1].log_softmax(-1).gather(-1, sequences[:, 1:, None]).squeeze(-1)
        logp = logp[:, -action_mask.shape[1]:]
        return (logp, _ns(aux_loss=0.0)) if return_output else logp


def _policy_trainer(module_cls, gas=1, temperature=2.0):
    backward_losses = []
    trainer = module_cls.__new__(module_cls)
    trainer.args = _ns(algo={"kl": {"use_loss": False}}, actor={"entropy_coef": None},
                       train={"dynamic_batch_enable": False, "seed": 7},
                       ds={"ring_attn_size": 1, "tensor_parallel_size": 1},
                       rollout={"max_new_tokens": 64}, data={"max_len": 128})
    trainer.strategy = _ns(args=trainer.args, ring_attn_group=None, accumulated_gradient=gas,
                           backward=lambda loss, model, optim: backward_losses.append(loss),
                           optimizer_step=lambda *a, **k: None, get_grad_norm=lambda model: 0.0)
    trainer.actor, trainer.tokenizer, trainer.aux_loss, trainer.ema_model = TinyActor(temperature), TOK, False, None
    trainer.actor_optim = None
    trainer.actor_scheduler = _ns(get_last_lr=lambda: [1e-6])
    # the PPO clip loss is not what is tested here: a masked mean of -A x ratio stands in for PolicyLoss
    trainer.actor_loss_fn = lambda logp, old, adv, action_mask, **kw: (
        -((adv * (logp - old).exp()) * action_mask).sum() / action_mask.sum(), torch.tensor(0.0),
        torch.tensor(0.0), None, None)
    return trainer, backward_losses


EXPERTS = [{"prompt": "Q: river?", "response": "A heron." + TOK.EOS},
           {"prompt": "Q: fish?", "response": "Cold water, stones and fish." + TOK.EOS},
           {"prompt": "Q: stone?", "response": "Grey." + TOK.EOS},
           {"prompt": "Q: cold?", "response": "The water runs cold over the stone." + TOK.EOS},
           {"prompt": "Q: heron?", "response": "It waits." + TOK.EOS}]


def _policy_experience():
    from openrlhf.trainer.ppo_utils.experience import Experience

    seq = torch.tensor([TOK("Q: x A b" + TOK.EOS)["input_ids"]])
    action = torch.zeros(1, seq.shape[1] - 1, dtype=torch.bool)
    action[0, 4:] = True
    return Experience(sequences=seq, attention_mask=torch.ones_like(seq), action_mask=action,
                      action_log_probs=torch.zeros(action.shape), advantages=torch.full(action.shape, 0.5),
                      response_length=torch.tensor([5.0]), info={})


def _expert_nll_sum(actor, pairs):
    """-sum log pi(response | prompt) at temperature 1, token by token from the model's logits, and the count."""
    out = []
    for e in pairs:
        p, r = TOK(e["prompt"])["input_ids"], TOK(e["response"])["input_ids"]
        ids = torch.tensor([p + r])
        logp = actor.logits(ids)[0, :-1].log_softmax(-1)
        out += [-logp[t - 1, ids[0, t]] for t in range(len(p), len(p) + len(r))]
    return torch.stack(out).sum(), len(out)


def _bc_install(plugins, monkeypatch, tmp_path, batch):
    path = tmp_path / "bc.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in EXPERTS))
    monkeypatch.setenv("IFCORE_BC_COEF", "0.3")
    monkeypatch.setenv("IFCORE_BC_DATA", str(path))
    monkeypatch.setenv("IFCORE_BC_BATCH", str(batch))
    assert plugins.install() == ["ActorPPOTrainer.ppo_train", "ActorPPOTrainer.training_step"]


def _ppo_train_original(epochs, micro_steps, drawn):
    """The wheel's ppo_train loop, reduced to its calls of training_step (epochs x micro-batches of a step)."""
    def ppo_train(self, kl_ctl):
        drawn.append(self._ifcore_bc)
        for _ in range(epochs):
            for step in range(micro_steps):
                self.training_step(copy.deepcopy(_policy_experience()), kl_ctl, step, {})
    return ppo_train


def test_behaviour_cloning_adds_the_expert_nll_once_per_step(openrlhf_module, monkeypatch, tmp_path):
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    _, plugins = openrlhf_module
    trainer, losses = _policy_trainer(ActorPPOTrainer, gas=2)
    ActorPPOTrainer.training_step(trainer, copy.deepcopy(_policy_experience()), 0.0, 0, {})
    ppo_loss = losses.pop().item()
    drawn = []
    monkeypatch.setattr(ActorPPOTrainer, "ppo_train", _ppo_train_original(2, 2, drawn))
    _bc_install(plugins, monkeypatch, tmp_path, batch=3)
    ActorPPOTrainer.ppo_train(trainer, 0.0)  # one training step: 2 epochs x 2 micro-batches (gas 2)
    assert trainer.strategy.backward.__name__ == "<lambda>"  # the strategy's own backward is back
    assert len(drawn) == 1 and len(losses) == 4
    (seqs, _, action), total, dp = drawn[0]
    assert len(seqs) == 3 and dp == 1 and total == int(action.sum())  # the whole draw: this (only) rank's share
    pick = np.random.default_rng([7, 1]).choice(len(EXPERTS), 3, replace=False)
    nll_sum, n = _expert_nll_sum(trainer.actor, [EXPERTS[k] for k in pick])  # temperature 1, not the actor's 2
    assert n == total
    # coef x the token mean over the draw at each optimizer step's first micro-batch (DeepSpeed divides by gas 2)
    want = ppo_loss + 0.3 * 2 * nll_sum.item() / n
    assert [round(x.item(), 4) for x in losses] == [round(want, 4), round(ppo_loss, 4)] * 2
    assert losses[0].requires_grad and trainer.actor.temperature == 2.0
    # the next training step draws anew
    ActorPPOTrainer.ppo_train(trainer, 0.0)
    assert not torch.equal(drawn[1][0][0], drawn[0][0][0]) or drawn[1][0][0].shape != drawn[0][0][0].shape
    status = ActorPPOTrainer.training_step(trainer, copy.deepcopy(_policy_experience()), 0.0, 1, {})
    second = [EXPERTS[k] for k in np.random.default_rng([7, 2]).choice(5, 3, replace=False)]
    assert status["metrics"]["bc_loss"].item() == pytest.approx(
        _expert_nll_sum(trainer.actor, second)[0].item() / drawn[1][1], rel=1e-5)
    assert status["weights"]["bc_loss"] == "sample"

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "response": 3}) + "\n")
    with pytest.raises(Exception, match="bad.jsonl: row 1: prompt and response must be strings"):
        plugins.read_experts(str(bad))


def test_behaviour_cloning_shards_the_draw_over_ranks(openrlhf_module, monkeypatch, tmp_path):
    import torch.distributed as dist
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    _, plugins = openrlhf_module
    drawn = []
    monkeypatch.setattr(ActorPPOTrainer, "ppo_train", lambda self, kl: drawn.append(self._ifcore_bc))
    _bc_install(plugins, monkeypatch, tmp_path, batch=5)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 4)
    for rank in range(4):
        monkeypatch.setattr(dist, "get_rank", lambda rank=rank: rank)
        trainer, _ = _policy_trainer(ActorPPOTrainer)
        ActorPPOTrainer.ppo_train(trainer, 0.0)
    # ceil(5 / 4) = 2 pairs per rank, 8 in the draw (with replacement: 5 experts), each rank its own two
    shares = [d[0][0] for d in drawn]
    assert all(len(x) == 2 for x in shares) and len({d[1] for d in drawn}) == 1 and drawn[0][2] == 4
    draw = np.random.default_rng([7, 1]).choice(5, 8, replace=True)
    for rank, share in enumerate(shares):
        want = plugins.expert_batch(TOK, [EXPERTS[k] for k in draw], 64, 128)[0][2 * rank:2 * rank + 2]
        assert torch.equal(share, want)


def test_expert_sequences_are_cut_to_the_generation_limits():
    from ifcore.integrations.openrlhf_plugins import expert_batch

    pair = {"prompt": "P" * 30, "response": "R" * 50}
    seqs, attention, action = expert_batch(TOK, [pair], max_new_tokens=20, max_len=40)
    assert seqs.shape == (1, 40) and int(action.sum()) == 20  # 20 response tokens, the prompt's last 20
    assert TOK.decode(seqs[0].tolist()) == "P" * 20 + "R" * 20
    seqs, _, action = expert_batch(TOK, [pair])
    assert seqs.shape == (1, 80) and int(action.sum()) == 50


def test_install_imports_no_gpu_module_and_patches_on_import(wheel_dir, tmp_path):
    # Ray runs the hook before it sets the worker's CUDA_VISIBLE_DEVICES: importing deepspeed there (ppo_actor,
    # experience_maker) would initialize CUDA on every GPU and put every rank on GPU 0.
    experts = tmp_path / "experts.jsonl"
    experts.write_text(json.dumps({"prompt": "p", "response": "r"}) + "\n")
    env = {"IFCORE_RTT_BETA": "0.5", "IFCORE_RTT_RELEVANCE": "uniform",
           "IFCORE_RAIF_NOTHINK": "1", "IFCORE_RAIF_REFILL": "1", "IFCORE_RAIF_STEPS": "3",
           "IFCORE_BC_COEF": "0.1", "IFCORE_BC_DATA": str(experts), "IFCORE_EVAL_LAST": "3", "IFCORE_CKPT_KEEP": "2"}
    code = f"""
import sys
sys.path.insert(0, {str(REPO / "tests")!r})
from ifcore.integrations.openrlhf_plugins import install
names = install()
gpu = [m for m in sys.modules if m.split(".")[0] in ("deepspeed", "vllm", "openrlhf")]
assert not gpu, gpu
from test_openrlhf_plugins import stub_openrlhf
stub_openrlhf({str(wheel_dir)!r}, lambda d, k, v: d.__setitem__(k, v))
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
from test_openrlhf_plugins import _module
sys.modules["openrlhf.datasets"] = _module("openrlhf.datasets", PromptDataset=object)
sys.modules["openrlhf.datasets.utils"] = _module("openrlhf.datasets.utils", blending_datasets=None)
from openrlhf.trainer.ppo_trainer import BasePPOTrainer
assert BasePPOTrainer.train_step._ifcore == ("raif", "eval")
from ifcore.integrations.openrlhf_plugins import _FINDER  # deepspeed.py needs the real deepspeed: still pending
assert [c for c, *_ in _FINDER.pending["openrlhf.utils.deepspeed.deepspeed"]] == ["DeepspeedStrategy"]
assert RemoteExperienceMaker.compute_advantages_and_returns._ifcore == ("rtt", "raif")
assert SamplesGenerator.generate_samples._ifcore == ("raif",)
assert ActorPPOTrainer.training_step._ifcore == ActorPPOTrainer.ppo_train._ifcore == ("bc",)
print(names)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "ActorPPOTrainer.training_step" in done.stdout and "BasePPOTrainer.train_step" in done.stdout
    assert "DeepspeedStrategy.save_model" in done.stdout


def test_plugins_import_no_trainer():
    # integrations never import ifcore.train, infer or run (the architecture's rule); OpenRLHF is imported by install()
    code = ("import sys, ifcore.integrations.openrlhf_plugins\n"
            "bad = [m for m in sys.modules if m.split('.')[:2] in (['ifcore', 'train'], ['ifcore', 'infer'], "
            "['ifcore', 'run']) or m == 'openrlhf']\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
