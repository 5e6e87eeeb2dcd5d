"""Tool-grounded verification (ifcore.judge.tgv) end to end against a scripted judge on loopback: the stages, the
graded value from the records (eq. 5-6), every fallback counted, hostile tools contained, the reward path
(score_response, the adapters) and `ifcore eval scopeif --judge-url` judging every constraint of the sample."""
import json
import math
from collections import Counter

import pytest

import scripted_judge
from helpers import REPO, run_cli

from ifcore import rewards
from ifcore.bench.scopeif import load_formalizations, load_test
from ifcore.judge.client import JudgeClient
from ifcore.judge.sandbox import Sandbox
from ifcore.judge.tgv import STATIC_RESPONSE, TGV
from ifcore.schema import Constraint, ConstraintError, parse_label
from ifcore.verify import verify

pytest.importorskip("openai")
INSTRUCTION = "Write a short note about rivers."
FIVE = "Rivers carve valleys slowly. Always."


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as box:
        yield box


@pytest.fixture
def server():
    with scripted_judge.serve() as (rec, url):
        rec.url = url
        yield rec


@pytest.fixture
def client(server, tmp_path):
    return JudgeClient(server.url, "scripted", "sk-judge-SECRET", cache_dir=tmp_path / "judge", retries=0)


def test_the_stages_give_records_and_the_graded_value(client, server, sandbox):
    tgv = TGV(client, sandbox)
    v = tgv(INSTRUCTION, "Use at most 120 words.", FIVE)
    assert v["source"] == "tgv" and v["satisfied"] is True and v["graded"] == 1.0
    assert v["records"] == [{"target": "The number of words", "lo": 1, "hi": 120, "actual": 5}]
    assert v["tool"] == {"kind": "ok", "error": None}
    assert server.counts == {"targets": 1, "tool": 1, "judgment": 1}
    # the tool's result reached the judgment prompt as auxiliary verification results
    assert '"Computed Result": 5' in server.bodies[-1]["messages"][-1]["content"]
    long = " ".join(["word"] * 150)
    v = tgv(INSTRUCTION, "Use at most 120 words.", long)
    assert v["satisfied"] is False and v["graded"] == pytest.approx(rewards.graded(1, 120, 150))
    assert tgv.counts == Counter({"tgv": 2, "tool_ok": 2})
    # the same questions again: the client's cache answers, no request is sent
    before = sum(server.counts.values())
    assert tgv(INSTRUCTION, "Use at most 120 words.", long) == v and sum(server.counts.values()) == before


class Canned:
    """A client that replies to every prompt with one canned judgment."""

    def __init__(self, reply):
        self.reply, self.prompts = reply, []

    def complete(self, prompt, **params):
        self.prompts.append(prompt)
        return self.reply


def test_the_graded_value_is_the_geometric_mean_of_the_records():
    reply = ("Conclusion: [[The response does not satisfy the constraint]]\n```json\n"
             '[{"Counting Object": "a", "Permissible Bounds": [3, 5], "Actual Value": 7},'
             ' {"Counting Object": "b", "Permissible Bounds": [0, 0], "Actual Value": 2},'
             ' {"Counting Object": "c", "Permissible Bounds": [1, "inf"], "Actual Value": 4}]\n```')
    v = TGV(Canned(reply), mode="llm", alpha=2.0)("x", "c", "y", targets=[{"counting_object": "a", "type": "specific"}])
    expected = (rewards.graded(3, 5, 7, 2.0) * rewards.graded(0, 0, 2, 2.0) * 1.0) ** (1 / 3)  # eq. 6
    assert v["graded"] == pytest.approx(expected) and v["satisfied"] is False and not v["inconsistent"]
    assert [r["hi"] for r in v["records"]] == [5, 0, math.inf]
    # the reference clips each record's reward at 1e-5 before the geometric mean; reward_floor=0 is eq. 6 strictly
    far = reply.replace('"Actual Value": 2}', '"Actual Value": 10000}')
    clipped = TGV(Canned(far), mode="llm", alpha=2.0)("x", "c", "y", targets=[])
    assert rewards.graded(0, 0, 10000, 2.0) == 0.0 and clipped["graded"] == pytest.approx(
        (rewards.graded(3, 5, 7, 2.0) * 1e-5) ** (1 / 3))
    assert TGV(Canned(far), mode="llm", alpha=2.0, reward_floor=0.0)("x", "c", "y", targets=[])["graded"] == 0.0


@pytest.mark.parametrize("case, source, stage, requests, counted", [
    # the reference's attempts in total: 2 at a generation stage, 3 at the judgment
    ("bad_targets", "fallback", "targets", {"targets": 2, "tool": 1, "judgment": 1}, {"targets_unparsed", "fallback"}),
    ("no_tool", "tgv", None, {"targets": 1, "tool": 1, "judgment": 1}, {"tool_none", "tgv"}),
    ("bad_tool", "tgv", None, {"targets": 1, "tool": 2, "judgment": 1}, {"tool_unparsed", "tool_retry", "tgv"}),
    # no valid counting results: unresolved, as in the reference (the response then gets the binary reward)
    ("no_records", None, "judgment", {"targets": 1, "tool": 1, "judgment": 3}, {"unjudged"}),
    ("garbage", None, "judgment", {"targets": 1, "tool": 1, "judgment": 3}, {"unjudged"}),
    ("retry", "tgv", None, {"targets": 1, "tool": 1, "judgment": 2}, {"tgv"}),
    ("inconsistent", "tgv", None, {"targets": 1, "tool": 1, "judgment": 1}, {"tgv", "inconsistent"}),
    ("down", None, "request", {"targets": 1}, {"request_failed", "unjudged"}),
    ("refused", None, "request", {"targets": 1}, {"request_failed", "unjudged"}),
    # the named option: the parsed conclusion when the counting results do not parse (not the reference)
    ("no_records+verdict_fallback", "fallback", "records", {"targets": 1, "tool": 1, "judgment": 3},
     {"records_unparsed", "fallback"}),
])
def test_every_fault_falls_back_or_is_unjudged_and_is_counted(client, server, sandbox, case, source, stage, requests,
                                                              counted):
    case, _, option = case.partition("+")
    tgv = TGV(client, sandbox, **({option: True} if option else {}))
    v = tgv(INSTRUCTION, f"Use at most 120 words. CASE:{case}", FIVE)
    assert (v["source"], v["stage"]) == (source, stage)
    assert server.counts == requests
    assert {k for k in tgv.counts if not k.startswith("tool_ok")} == counted
    if source is None:
        assert v["satisfied"] is None and v["graded"] is None and v["error"]
    elif source == "fallback":  # the binary conclusion: g is 1 or 0
        assert v["records"] == [] and v["graded"] == float(v["satisfied"])
    else:
        assert v["graded"] == pytest.approx(math.prod(
            rewards.graded(r["lo"], r["hi"], r["actual"]) for r in v["records"]) ** (1 / len(v["records"])))
    if case == "no_tool":  # no auxiliary results: the judge counted nothing, and said so in bounds
        assert v["satisfied"] is False and v["records"][0]["actual"] == -1
    if case == "inconsistent":  # the statistics win over the conclusion (ScopeIF appendix E.4)
        assert v["verdict"] is True and v["satisfied"] is False and v["inconsistent"]
    if case == "retry":  # the reference retries at temperature 0; the seed makes it a new, cacheable question
        asked = [b for b in server.bodies if "Counting Results" in b["messages"][-1]["content"]]
        assert [(b["temperature"], b.get("seed")) for b in asked] == [(0.0, None), (0.0, 1)]


def test_hostile_tools_are_contained_and_leak_nothing(client, server, sandbox, monkeypatch):
    monkeypatch.setenv("IFCORE_SECRET_FOR_TEST", "hunter2-XYZ")
    tgv = TGV(client, sandbox)
    verdicts = [tgv(INSTRUCTION, f"Use at most 120 words. CASE:hostile_tool #{i}", FIVE)
                for i in range(len(scripted_judge.HOSTILE))]
    # shadow unreadable, no network, no fork, loop stopped, environment read (it holds PATH only), flood cut
    assert [v["tool"]["kind"] for v in verdicts] == ["error", "error", "error", "timeout", "ok", "too_large"]
    assert "Permission denied" in verdicts[0]["tool"]["error"]
    assert all(v["source"] == "tgv" for v in verdicts)  # a failed tool is not a failed judgment
    sent = json.dumps(server.bodies)
    assert "hunter2" not in sent and "root:" not in sent and "sk-judge-SECRET" not in sent
    assert any('"PATH"' in b["messages"][-1]["content"] for b in server.bodies)  # the environment tool's result did reach its judgment: that is all it saw
    # the pool is still whole: an ordinary tool runs afterwards
    assert tgv(INSTRUCTION, "Use at most 120 words.", FIVE)["tool"]["kind"] == "ok"


def test_modes_llm_and_static(client, server, sandbox):
    v = TGV(client, mode="llm")(INSTRUCTION, "Use at most 120 words.", FIVE)
    assert server.counts == {"targets": 1, "judgment": 1} and v["tool"] is None
    assert v["satisfied"] is False  # no tool, and this judge cannot count by itself
    static = TGV(client, sandbox, mode="static")
    v = static(INSTRUCTION, "Use at most 120 words.", FIVE)
    tool_prompt = next(b for b in server.bodies if b["messages"][-1]["content"].startswith(
        "You are an expert skilled at analyzing"))["messages"][-1]["content"]
    assert STATIC_RESPONSE in tool_prompt and FIVE not in tool_prompt
    assert v["records"][0]["actual"] == 5  # the tool still measured the response it was given
    with pytest.raises(ValueError, match="sandbox"):
        TGV(client, mode="tgv")
    with pytest.raises(ValueError, match="mode"):
        TGV(client, sandbox, mode="rule")


def test_many_keeps_the_order(client, server, sandbox):
    tgv = TGV(client, sandbox)
    items = [(INSTRUCTION, "Use at most 120 words.", " ".join(["w"] * n)) for n in (3, 200, 7, 121, 1)]
    assert [v["records"][0]["actual"] for v in tgv.many(items)] == [3, 200, 7, 121, 1]
    assert tgv.many([]) == []


# ---- judged constraints (X15) in the reward path ---------------------------------------------------------------

JUDGED = {"text": "Use at most 120 words.", "judge": True}
LABEL = {"constraints": [{"scope": [], "target": {"count": "word"}, "range": {"min": 1}}, JUDGED]}


def test_a_judged_constraint_parses_and_is_checked():
    c = Constraint.from_dict({**JUDGED, "id": "j1", "targets": ["The number of words"]})
    assert c.judge and c.to_dict() == {"id": "j1", "text": JUDGED["text"], "judge": True,
                                       "targets": ["The number of words"]}
    for bad, field in [({"judge": True}, "text"), ({"text": "x", "judge": "yes"}, "judge"),
                       ({**JUDGED, "target": {"count": "word"}}, "target"), ({**JUDGED, "targets": []}, "targets")]:
        with pytest.raises(ConstraintError, match=field):
            Constraint.from_dict(bad, "c")
    with pytest.raises(ConstraintError, match="judged constraint"):
        verify(c, "text")


def test_score_response_asks_the_judge_for_judged_constraints(client, server, sandbox):
    constraints = parse_label(LABEL)
    tgv = TGV(client, sandbox)
    long = " ".join(["word"] * 150)
    r = rewards.score_response(long, constraints, judge=tgv, prompt=INSTRUCTION)
    g = rewards.graded(1, 120, 150)
    assert r["satisfied"] == [True, False] and r["graded"] == [1.0, pytest.approx(g)]
    assert r["reward"] == pytest.approx(rewards.scopeif([True, False], [1.0, g]))  # eq. 7 over both kinds
    assert r["judged"][0] is None and r["judged"][1]["source"] == "tgv" and not r["errors"]
    assert INSTRUCTION in server.bodies[0]["messages"][-1]["content"]
    assert r["unresolved"] == 0
    # no judge: the constraint counts violated, the errors say why, and the graded kinds fall back to the binary
    # reward as the reference does for a prompt whose judgment did not resolve (1 of 2 satisfied: 0.5)
    r = rewards.score_response(FIVE, constraints)
    assert r["satisfied"] == [True, False] and "no judge" in r["errors"][0]
    assert r["unresolved"] == 1 and r["reward"] == 0.5
    assert rewards.score_response(FIVE, constraints, kind="scopeif_flat")["reward"] == 0.5
    # a judge that breaks never breaks the reward
    r = rewards.score_response(FIVE, constraints, judge=lambda *a: 1 / 0)
    assert r["satisfied"] == [True, False] and "ZeroDivisionError" in r["errors"][0] and r["reward"] == 0.5
    # unjudged after the judge's attempts: the same fallback
    garbage = {"constraints": [LABEL["constraints"][0], {**JUDGED, "text": JUDGED["text"] + " CASE:garbage"}]}
    r = rewards.score_response(FIVE, parse_label(garbage),
                               judge=tgv, prompt=INSTRUCTION)
    assert r["satisfied"] == [True, False] and r["unresolved"] == 1 and r["reward"] == 0.5


def test_the_adapters_use_the_judge(client, server, sandbox, monkeypatch):
    from ifcore.integrations import trl
    from ifcore.integrations.verl import compute_score

    tgv = TGV(client, sandbox)
    out = trl.reward_fn([INSTRUCTION] * 2, [FIVE, " ".join(["word"] * 150)], label=[json.dumps(LABEL)] * 2, judge=tgv)
    assert out[0] == 1.0 and out[1] == pytest.approx(rewards.scopeif([True, False], [1.0, rewards.graded(1, 120, 150)]))
    scored = compute_score("scopeif", FIVE, json.dumps(LABEL), {"prompt": INSTRUCTION}, judge=tgv)
    assert scored["score"] == 1.0 and scored["judged"] == 1.0 and scored["unjudged"] == 0.0
    # OpenRLHF passes no keyword: the judge comes from the environment, made once per process
    import importlib.util
    spec = importlib.util.spec_from_file_location("reward_func", REPO / "ifcore/integrations/openrlhf_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("IFCORE_JUDGE_URL", server.url)
    monkeypatch.setenv("IFCORE_JUDGE_MODEL", "scripted")
    monkeypatch.setenv("IFCORE_JUDGE_TOOLS", "1")
    monkeypatch.setenv("IFCORE_CACHE", str(client.cache_dir.parent))
    prompt = f"<|im_start|>user\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    result = module.reward_func([prompt + FIVE + "<|im_end|>"], [prompt], [json.dumps(LABEL)])
    assert result["rewards"].tolist() == [1.0] and result["extra_logs"]["judged"] == 1.0
    # an unjudged constraint (the judge is down) counts violated and is logged as such
    down = {"constraints": [LABEL["constraints"][0], {**JUDGED, "text": "At most 120 words. CASE:down"}]}
    scored = compute_score("scopeif", FIVE, json.dumps(down), {"prompt": INSTRUCTION}, judge=tgv)
    assert scored["unjudged"] == 1.0 and scored["verify_errors"] == 1.0
    assert scored["score"] == pytest.approx(rewards.scopeif([True, False], [1.0, 0.0]))


# ---- ifcore eval scopeif --judge-url: every constraint of the shipped sample ------------------------------------

def test_eval_scopeif_judges_every_constraint_of_the_sample(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    instances = load_test()
    whole = {}
    for line in (REPO / "tests/data/scopeif_whole.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["violates"] is None and row["response"]:
            whole.setdefault(row["instruction_id"], row["response"])
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": i["id"], "response": whole.get(i["id"], FIVE)}) + "\n"
                                 for i in instances))
    formalized = load_formalizations()
    unformalized = sum((i["id"], j) not in formalized for i in instances for j in range(len(i["constraints"])))
    status, out, err = run_cli(capsys, "eval", "scopeif", "--responses", responses, "--output-dir", tmp_path / "bare")
    bare = json.loads((tmp_path / "bare" / "summary.json").read_text())
    assert status == 0 and bare["judged_by"]["unjudged"] == unformalized and f"unjudged {unformalized})" in out
    status, out, err = run_cli(capsys, "eval", "scopeif", "--responses", responses, "--output-dir", tmp_path / "out",
                               "--judge-url", server.url, "--judge-model", "scripted", "--judge-tools", "2")
    assert status == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert out.startswith("scopeif: 268 instances scored; 1413 of 1413 constraints judged")
    assert summary["judged_by"] == {"schema": 1413 - unformalized, "tgv": unformalized, "fallback": 0, "unjudged": 0}
    assert summary["judged_constraints"] == summary["constraints"] == 1413 and summary["instances_in_ISR"] == 268
    # the shipped counting objects were used: no target extraction; one tool and one judgment per constraint
    assert server.counts == {"tool": unformalized, "judgment": unformalized}
    rows = [json.loads(x) for x in (tmp_path / "out" / "verdicts.jsonl").read_text().splitlines()]
    judged = [v for r in rows for v in r["verdicts"] if v["source"] == "tgv"]
    assert len(judged) == unformalized and {v["satisfied"] for v in judged} == {True, False}
    assert any("judge scripted (tgv)" in line and f"'tgv': {unformalized}" in line for line in err)


# ---- judge meta-evaluation ------------------------------------------------------------------------------------

def _row(r, j, truth, scope="Global", target="Capacity", rng="Intervals", instance=7):
    return {"response_index": r, "id": instance, "constraint_index": j, "truth": truth, "scope_selector": scope,
            "primary_target": target, "range": rng}


def test_pointwise_and_pairwise_by_hand():
    from ifcore.judge import meta

    rows = [_row(0, 0, True), _row(0, 1, True, scope="Nested"), _row(1, 0, False), _row(1, 1, True, scope="Nested"),
            _row(2, 0, False), _row(2, 1, False, scope="Nested")]
    judge = [True, False, False, True, True, None]
    verdicts = [{"satisfied": s} for s in judge]
    pw = meta.pointwise(rows, verdicts)
    assert (pw["judged"], pw["unjudged"]) == (5, 1) and pw["accuracy"] == pytest.approx(3 / 5)
    assert pw["by_category"]["scope_selector"]["Global"]["accuracy"] == pytest.approx(2 / 3)
    assert pw["by_category"]["scope_selector"]["Nested"] == {**pw["by_category"]["scope_selector"]["Nested"],
                                                             "accuracy": 0.5, "n": 2}
    assert pw["confusion"] == {"truth True / judge True": 2, "truth True / judge False": 1,
                               "truth False / judge True": 1, "truth False / judge False": 1}
    # pairs (0,1): truth 2-1 win, judge 1-1 tie -> disagree; (0,2): shared {0}: truth 1-0 win, judge 1-1 tie ->
    # disagree; (1,2): shared {0}: truth 0-0 tie, judge 0-1 lose -> disagree
    assert meta.pairwise(rows, verdicts)["agreement"] == 0.0 and meta.pairwise(rows, verdicts)["pairs"] == 3
    perfect = [{"satisfied": r["truth"]} for r in rows]
    assert meta.pairwise(rows, perfect) == {**meta.pairwise(rows, perfect), "agreement": 1.0, "pairs": 3}
    assert meta.pointwise(rows, perfect)["accuracy"] == 1.0


def test_judge_eval_on_the_deterministic_ground_truth(server, tmp_path, capsys, monkeypatch):
    from ifcore.judge import meta

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    status, out, err = run_cli(capsys, "judge-eval", "--limit", "30", "--seed", "3", "--output-dir", tmp_path / "je",
                               "--judge-url", server.url, "--judge-model", "scripted")
    assert status == 0, err
    summary = json.loads((tmp_path / "je" / "judge_eval.json").read_text())
    items = [json.loads(x) for x in (tmp_path / "je" / "items.jsonl").read_text().splitlines()]
    assert summary["responses"] <= 30 and summary["pointwise"]["items"] == len(items) > 30
    # the truth is the verifier's verdict, recomputed here; the accuracy is the share of matching verdicts
    formalized = load_formalizations()
    responses = meta.sample_responses(meta.read_responses(REPO / "tests/data/scopeif_whole.jsonl"), 30, 3)
    for item in items:
        doc = responses[item["response_index"]][1]
        assert item["truth"] == all(verify(s, doc).satisfied for s in formalized[(item["id"], item["constraint_index"])])
    right = sum(i["verdict"]["satisfied"] == i["truth"] for i in items if i["verdict"]["satisfied"] is not None)
    assert summary["pointwise"]["accuracy"] == pytest.approx(right / summary["pointwise"]["judged"])
    assert 0 < summary["pointwise"]["accuracy"] < 1  # a word-counting judge is right on some, wrong on others
    assert summary["pairwise"]["pairs"] > 0 and set(summary["pointwise"]["by_category"]) == set(meta.GROUPS)
    assert out.startswith("pointwise accuracy") and "scope_selector:" in out
    # no judge: a clear error, nothing judged
    status, out, err = run_cli(capsys, "judge-eval", "--limit", "5")
    assert status == 2 and "needs a judge" in err[-1]
