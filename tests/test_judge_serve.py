"""The judge client path for real: SmolLM2-135M-Instruct served on 127.0.0.1 by the engine `--judge-serve` picks
(vLLM where `make vllm` made its environment, else `transformers serve`), started and stopped by the module's
fixture: the default test run's one vLLM start (about 2 minutes on two cores), so its tests of vLLM itself live
here. A 135M model writes poor tools and rarely a parseable judgment, so these tests pin the plumbing, not the
quality: every verdict well formed whatever the model wrote, every stage counted, the cache answering a re-run, a
dead endpoint an unjudged verdict, and `ifcore eval scopeif --judge-url` finishing. Replies are cut at MAX_TOKENS
and TGV's parse retries are few, so that the file stays short on two cores."""
import ast
import json
import os
import socket
from collections import Counter
from pathlib import Path

import pytest
from helpers import REPO, listening_addresses, run_cli

from ifcore import reaper
from ifcore.bench.scopeif import load_formalizations, load_test
from ifcore.infer.generate import GenParams, Local, generate
from ifcore.infer.serve import pick_engine, serve
from ifcore.judge.client import JudgeClient
from ifcore.judge.prompts import parse_targets
from ifcore.judge.sandbox import Sandbox
from ifcore.judge.tgv import TGV

pytest.importorskip("openai")
pytestmark = pytest.mark.slow

MAX_TOKENS = 64
TOOL_KINDS = {"unparsed", "none", "ok", "error", "timeout", "killed", "too_large", "bad_result"}
# (instance id, constraint index) of the shipped sample that no schema formalizes; short prompts and responses
EVEN_CHARACTERS, LAST_20_CHARACTERS, COZY = (19, 3), (26, 3), (35, 2)


def whole_responses() -> dict[int, str]:
    """A response meant to satisfy every constraint, per instance id (tests/data/scopeif_whole.jsonl)."""
    out = {}
    for line in (REPO / "tests/data/scopeif_whole.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["violates"] is None and row["response"]:
            out.setdefault(row["instruction_id"], row["response"])
    return out


INSTANCES = {inst["id"]: inst for inst in load_test()}
RESPONSES = whole_responses()


def item(key, shipped_targets=True) -> tuple:
    """TGV's arguments for one constraint: the instruction, the constraint, the whole response and the counting
    objects test.json ships for it (None: the judge extracts them, one more stage)."""
    inst, j = INSTANCES[key[0]], key[1]
    targets = parse_targets(inst["targets"][j]) if shipped_targets else None
    return inst["prompt"], inst["constraints"][j]["constraint"], RESPONSES[key[0]], targets


def children() -> set[int]:
    """Processes whose parent is this one (the server runs in a session of its own)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid():
            found.add(int(stat.parent.name))
    return found


@pytest.fixture(scope="module")
def served(smollm2):
    """SmolLM2 served on loopback (engine "auto"); afterwards its whole process group and port are gone."""
    before = children()
    with serve(smollm2) as endpoint:
        server = children() - before
        assert len(server) == 1 and endpoint.base_url.startswith("http://127.0.0.1:")
        below = reaper.descendants(next(iter(server)))  # vLLM: its API server, engine core and worker
        yield endpoint
    pid, port = server.pop(), int(endpoint.base_url.rsplit(":", 1)[1].split("/")[0])
    assert pid not in children() and below
    for p in below:  # wherever they went (setsid included), none of them is left
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """IFCORE_CACHE of this module: the eval test reads the replies the TGV tests cached (fewer requests)."""
    return tmp_path_factory.mktemp("ifcore-cache")


@pytest.fixture(scope="module")
def client(served, cache_root):
    return JudgeClient(served.base_url, served.model, cache_dir=cache_root / "judge", retries=1, timeout=300)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as box:
        yield box


def check_verdict(v: dict, mode: str) -> None:
    """A verdict is well formed and its fields agree with its source, whatever the judge wrote."""
    assert {"satisfied", "graded", "records", "source", "stage", "error", "tool", "inconsistent"} <= set(v)
    json.dumps(v)  # eval scopeif writes verdicts as JSON
    if v["source"] is None:
        assert v["satisfied"] is None and v["graded"] is None and v["records"] == []
        assert v["stage"] in ("judgment", "request") and isinstance(v["error"], str) and v["error"]
    elif v["source"] == "fallback":
        assert isinstance(v["satisfied"], bool) and v["graded"] == float(v["satisfied"]) and v["records"] == []
        assert v["stage"] in ("targets", "records") and v["verdict"] is v["satisfied"]
    else:
        assert v["source"] == "tgv" and v["stage"] is None and isinstance(v["satisfied"], bool)
        assert 0.0 <= v["graded"] <= 1.0 and v["records"]
        for r in v["records"]:
            assert isinstance(r["target"], str) and all(isinstance(r[k], (int, float)) for k in ("lo", "hi", "actual"))
        assert v["satisfied"] == all(r["lo"] <= r["actual"] <= r["hi"] for r in v["records"])
        assert v["inconsistent"] == (v["satisfied"] != v["verdict"])
    if mode == "llm":
        assert v["tool"] is None
    elif v["stage"] != "request":
        assert v["tool"]["kind"] in TOOL_KINDS


def check_counts(tgv: TGV, verdicts: list[dict]) -> None:
    """`counts` accounts for every call: one outcome each, one tool outcome per call in tgv mode."""
    c = tgv.counts
    assert c["tgv"] + c["fallback"] + c["unjudged"] == len(verdicts)
    assert Counter(v["source"] for v in verdicts) == Counter(
        {"tgv": c["tgv"], "fallback": c["fallback"], None: c["unjudged"]})
    assert c["inconsistent"] == sum(v["inconsistent"] for v in verdicts)
    tools = Counter({k: n for k, n in c.items() if k.startswith("tool_")})
    expected = Counter(f"tool_{v['tool']['kind']}" for v in verdicts if v["tool"] is not None)
    assert tools == expected
    assert sum(tools.values()) == (0 if tgv.mode == "llm" else len(verdicts) - c["request_failed"])


@pytest.mark.parametrize("mode, keys, retries", [
    # the tool mode, once with the counting objects extracted by the judge; no parse retries (each is a request)
    ("tgv", [(EVEN_CHARACTERS, True), (LAST_20_CHARACTERS, False)], {"generation_retries": 0, "critique_retries": 0}),
    # the pure LLM judge; one retry of the judgment, resampled (a named option: the reference retries at
    # temperature 0) with a seed
    ("llm", [(EVEN_CHARACTERS, True), (COZY, True)], {"critique_retries": 1, "retry_temperature": 1.0}),
])
def test_tgv_against_served_smollm2_gives_well_formed_counted_cached_verdicts(client, sandbox, mode, keys, retries,
                                                                             monkeypatch):
    items = [item(key, shipped) for key, shipped in keys]
    before, asked = client.requests, []
    complete = client.complete
    monkeypatch.setattr(client, "complete", lambda prompt, **params: asked.append(params) or complete(prompt, **params))
    tgv = TGV(client, sandbox, mode=mode, max_tokens=MAX_TOKENS, **retries)
    verdicts = [tgv(*it) for it in items]
    for v in verdicts:
        check_verdict(v, mode)
    check_counts(tgv, verdicts)
    assert tgv.counts["request_failed"] == 0  # the server answered every request
    assert client.requests > before
    # a judgment that did not parse fully was asked once more, sampled with a seed, and the server took it
    seeded = [p for p in asked if "seed" in p]
    assert len(seeded) == (0 if mode == "tgv" else sum(v["source"] != "tgv" for v in verdicts))
    assert all(p == {"max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": 1} for p in seeded)
    # the same questions again: every reply comes from the cache, the tools run again and agree
    sent = client.requests
    again = TGV(client, sandbox, mode=mode, max_tokens=MAX_TOKENS, **retries)
    assert [again(*it) for it in items] == verdicts and client.requests == sent
    assert again.counts == tgv.counts


def test_a_dead_endpoint_leaves_the_constraint_unjudged_at_the_request_stage(sandbox, tmp_path):
    with socket.socket() as s:  # a port nothing listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = JudgeClient(f"http://127.0.0.1:{port}/v1", "smollm2", cache_dir=tmp_path / "judge", retries=0)
    for mode in ("tgv", "llm"):
        tgv = TGV(dead, sandbox, mode=mode, max_tokens=MAX_TOKENS)
        v = tgv(*item(EVEN_CHARACTERS))
        check_verdict(v, mode)
        assert v["source"] is None and v["stage"] == "request" and "failed after 1 attempts" in v["error"]
        assert tgv.counts == Counter({"request_failed": 1, "unjudged": 1})
    assert dead.requests == 2 and not (tmp_path / "judge").exists()  # nothing cached from a failure


def test_eval_scopeif_with_the_served_judge_finishes_and_accounts_for_every_constraint(served, cache_root, tmp_path,
                                                                                        capsys, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(cache_root))
    ids = [EVEN_CHARACTERS[0], 0]  # one constraint no schema formalizes; instance 0 is all formalized
    test = tmp_path / "test.json"
    test.write_text(json.dumps([INSTANCES[i] for i in ids]))
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": i, "response": RESPONSES[i]}) + "\n" for i in ids))
    status, out, err = run_cli(capsys, "eval", "scopeif", "--responses", responses, "--output-dir", tmp_path / "out",
                               "--test", test, "--judge-url", served.base_url, "--judge-model", served.model,
                               "--judge-max-tokens", MAX_TOKENS, "--judge-tools", 1)
    assert status == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert out.startswith("scopeif: 2 instances scored; ")
    formalized = load_formalizations()
    constraints = [(i, j) for i in ids for j in range(len(INSTANCES[i]["constraints"]))]
    by = summary["judged_by"]
    assert by["schema"] == sum(k in formalized for k in constraints)
    assert by["tgv"] + by["fallback"] + by["unjudged"] == sum(k not in formalized for k in constraints) == 1
    assert summary["constraints"] == sum(by.values()) == len(constraints)
    assert summary["judged_constraints"] == len(constraints) - by["unjudged"]
    rows = [json.loads(line) for line in (tmp_path / "out" / "verdicts.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ids
    judged = rows[0]["verdicts"][EVEN_CHARACTERS[1]]
    assert judged["source"] in ("tgv", "fallback", None)
    line = next(x for x in err if x.startswith(f"judge {served.model} (tgv): "))
    stages = ast.literal_eval(line.split(": ", 1)[1].rsplit("}", 1)[0] + "}")  # the judge's stage counts
    assert stages.get("tgv", 0) + stages.get("fallback", 0) + stages.get("unjudged", 0) == 1
    assert stages.get("request_failed", 0) == 0


def test_a_request_above_temperature_0_samples_and_one_at_0_is_greedy(served, tmp_path):
    # transformers serve sets only a request's temperature: the SmolLM2 folder's generation_config asks for sampling,
    # else a resampled judge retry (or any temperature > 0 generation) would silently come back greedy.
    client = JudgeClient(served.base_url, served.model, cache=False, retries=0)
    prompt = "Name a colour and an animal, then say why they go together."
    sampled = {client.complete(prompt, temperature=1.0, seed=s, max_tokens=24) for s in (1, 2, 3)}
    greedy = {client.complete(prompt, temperature=0.0, max_tokens=24) for _ in range(2)}
    assert len(sampled) > 1 and len(greedy) == 1


def test_the_served_model_answers_greedy_as_in_process_fp32_on_loopback_only(served, smollm2):
    # vLLM's CPU kernels and transformers' fp32 ones pick the same greedy tokens for these prompts (measured
    # 2026-12-05: all equal, token counts too); the cache keys say which engine and precision answered.
    engine = pick_engine()
    assert served.model_id.startswith("vllm-float32:" if engine == "vllm" else "serve:")
    assert served.concurrency == (32 if engine == "vllm" else 1)
    port = int(served.base_url.rsplit(":", 1)[1].split("/")[0])
    assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only
    prompts = [f"Write one sentence about {t}." for t in ("cats", "rivers", "bread")] + [
        "What is the capital of France? Answer in one word.",
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
        "List three fruits as a Markdown list."]
    params = GenParams(max_new_tokens=24)
    local = generate(Local(smollm2), prompts, params, cache=False, progress=False, with_tokens=True)
    assert generate(served, prompts, params, cache=False, progress=False, with_tokens=True) == local
