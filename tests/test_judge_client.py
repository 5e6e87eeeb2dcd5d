"""The judge client and the TGV prompt parsers against a loopback OpenAI-compatible server.

The server answers POST /v1/chat/completions with recorded judge outputs chosen by a `CASE:<name>` marker in
the prompt, and scripts failures (500 twice then 200, 429 with Retry-After, a hang past the timeout, 400). It
counts requests per case and the most requests in flight, so nothing here asserts a wall time."""
import json
import re
import subprocess
import sys
import threading

import pytest

from ifcore.judge import client as client_module
from ifcore.judge.client import JudgeClient, JudgeError
from ifcore.judge.prompts import (JudgeParseError, critique_prompt, last_fence, loads_lenient, parse_critique,
                                  parse_targets, parse_tool, parse_verdict, target_prompt, tool_prompt)

from helpers import ChatHandler, loopback

KEY = "sk-test-SECRET-8d1f0c"

TARGETS_OK = """[The Start of the Constraint]
Each title has exactly 8 words.
[The End of the Constraint]

[The Start of Counting Object]
```json
[
    {"Counting Object": "The word count of each title", "Type": "Universal"},
    {"Counting Object": "The number of titles", "Type": "Specific"}
]
```
[The End of Counting Object]"""

TOOL_OK = """[The Start of Auxiliary Verification Tool]
```python
def title_lengths(titles: str):
    return [{"Description": "words per title", "Computed Result": [count_word(t) for t in titles.splitlines()]}]
```
[The End of Auxiliary Verification Tool]

[The Start of Input Parameters]
```json
[{"Parameter Name": "titles", "Format": "str", "Parameter Description": "the titles", "Parameter Value": "ALL"}]
```
[The End of Input Parameters]"""

CRITIQUE_OK = """Constraint: Each title has exactly 8 words.
Analysis: the second title has 7 words.
Conclusion: [[The response does not satisfy the constraint]]
Counting Results:```json
[
    {"Counting Object": "The word count of title 1", "Permissible Bounds": [8, 8], "Actual Value": 8},
    {"Counting Object": "The word count of title 2", "Permissible Bounds": [8, 8], "Actual Value": 7}
]
```"""

# malformed but recoverable: no language tag, trailing commas, smart quotes, single quotes, a loose verdict
CRITIQUE_SLOPPY = """Conclusion: **Yes**
```
[
    {“Counting Object”: “Number of bullet points”, “Permissible Bounds”: [3, “inf”], “Actual Value”: 4,},
]
```"""
TARGETS_SINGLE_QUOTES = "```json\n[{'Counting Object': 'The number of sections', 'Type': 'Specific'}]\n```"
NO_FENCE = "Conclusion: [[The response satisfies the constraint]]\nCounting Results: the count is 3."
BROKEN_JSON = "Conclusion: [Yes]\n```json\n[{\"Counting Object\": \"x\", \"Permissible Bounds\": [1, 2], \n```"

RECORDED = {"targets_ok": TARGETS_OK, "tool_ok": TOOL_OK, "critique_ok": CRITIQUE_OK,
            "critique_sloppy": CRITIQUE_SLOPPY, "no_fence": NO_FENCE, "broken_json": BROKEN_JSON,
            "huge": "[[Yes]]\n```json\n[" + "{\"a\": 1}, " * 300_000 + "]\n```"}


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts, self.auth, self.bodies = {}, set(), []
        self.in_flight = self.max_in_flight = 0
        self.gate = 0  # hold the first requests until more than this many are in flight (or 1 s passes)
        self.reached = threading.Event()
        self.stop = threading.Event()


def _case(body: dict) -> str:
    found = re.search(r"CASE:(\w+)", json.dumps(body.get("messages", [])))
    return found[1] if found else "default"


class Handler(ChatHandler):
    rec: Recorder

    def do_POST(self):
        rec = self.rec
        body = self._body()
        case = _case(body)
        with rec.lock:
            n = rec.counts[case] = rec.counts.get(case, 0) + 1
            rec.auth.add(self.headers.get("Authorization"))
            rec.bodies.append(body)
            rec.in_flight += 1
            rec.max_in_flight = max(rec.max_in_flight, rec.in_flight)
            if rec.gate and rec.in_flight > rec.gate:
                rec.reached.set()
        try:
            self._answer(case, n, body)
        finally:
            with rec.lock:
                rec.in_flight -= 1

    def _answer(self, case, n, body):
        error = {"error": {"message": f"scripted {case}", "type": "server_error"}}
        if case == "flaky" and n <= 2:
            return self._send(500, error)
        if case == "always500":
            return self._send(503, error)
        if case == "ratelimit" and n == 1:
            return self._send(429, error, [("Retry-After", "7")])
        if case == "bad_request":
            return self._send(400, error)
        if case == "echo_auth":  # a hostile server that quotes the caller's credentials back
            return self._send(401, {"error": {"message": f"bad credentials {self.headers.get('Authorization')}"}})
        if case == "hang":
            self.rec.stop.wait(10)
            return None
        if case == "not_json":
            return self._send(200, b"<html>this is not a chat completion</html>")
        if case.startswith("gate"):  # a client that keeps its bound never opens the gate: it waits out 1 s once
            self.rec.reached.wait(1.0)
            self.rec.reached.set()
        if case.startswith("order"):  # earlier prompts answer later, so completion order differs
            self.rec.stop.wait(0.02 * (10 - int(case[5:])))
        self._reply(body, RECORDED.get(case, f"echo {case} temperature={body.get('temperature')}"))


@pytest.fixture
def server():
    rec = Recorder()
    with loopback(Handler, rec) as rec.url:
        yield rec
        rec.stop.set()  # release a hanging request before the server waits for it


@pytest.fixture
def judge(server, tmp_path, monkeypatch):
    pytest.importorskip("openai")  # the `judge` extra; the parser tests run without it
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path))
    monkeypatch.setattr(client_module.time, "sleep", lambda s: server.__dict__.setdefault("sleeps", []).append(s))

    def make(**settings):
        settings = {"retries": 3, "backoff": 0.01, "timeout": 5.0, **settings}
        return JudgeClient(server.url, "judge-model", KEY, **settings)
    return make


# ---- client ---------------------------------------------------------------------------------------------------

def test_well_formed_reply_uses_the_key_and_parses(judge, server):
    c = judge()
    assert parse_targets(c.complete("CASE:targets_ok")) == [
        {"counting_object": "The word count of each title", "type": "universal"},
        {"counting_object": "The number of titles", "type": "specific"}]
    assert server.auth == {f"Bearer {KEY}"}
    assert server.bodies[0]["model"] == "judge-model" and server.bodies[0]["temperature"] == 0.0


def test_500_twice_then_200_is_retried(judge, server):
    c = judge()
    assert c.complete("CASE:flaky").startswith("echo flaky")
    assert server.counts["flaky"] == 3 and c.requests == 3
    assert [0.005 <= s <= 0.01 * 2 ** i for i, s in enumerate(server.sleeps)] == [True, True]  # doubles, jittered
    assert server.sleeps[1] >= 0.01


def test_retries_are_bounded(judge, server):
    c = judge(retries=2)
    with pytest.raises(JudgeError, match="after 3 attempts"):
        c.complete("CASE:always500")
    assert server.counts["always500"] == 3


def test_429_waits_for_retry_after(judge, server):
    c = judge()
    assert c.complete("CASE:ratelimit").startswith("echo ratelimit")
    assert server.counts["ratelimit"] == 2 and server.sleeps == [7.0]


def test_400_is_not_retried(judge, server):
    with pytest.raises(JudgeError, match="not retried"):
        judge().complete("CASE:bad_request")
    assert server.counts["bad_request"] == 1


def test_a_hang_times_out_and_is_retried(judge, server):
    c = judge(timeout=0.3, retries=1)
    with pytest.raises(JudgeError, match="(?i)timeout|timed out"):
        c.complete("CASE:hang")
    assert server.counts["hang"] == 2


def test_non_json_body_is_a_clear_error(judge, server):
    with pytest.raises(JudgeError, match="malformed|no message"):
        judge().complete("CASE:not_json")
    assert server.counts["not_json"] == 1


def test_huge_body_comes_back_and_fails_parsing_cleanly(judge):
    text = judge().complete("CASE:huge")
    assert len(text) > 2_000_000
    with pytest.raises(JudgeParseError) as e:
        parse_critique(text)
    assert e.value.raw == text and "more than" in e.value.what


def test_concurrency_is_bounded_and_order_kept(judge, server):
    server.gate = 3
    c = judge(concurrency=3)
    prompts = [f"CASE:gate{i}" for i in range(12)]
    assert c.complete_many(prompts) == [f"echo gate{i} temperature=0.0" for i in range(12)]
    assert server.max_in_flight == 3


def test_semaphore_bounds_concurrent_callers(judge, server):
    server.gate = 2
    c = judge(concurrency=2)
    results = {}
    threads = [threading.Thread(target=lambda k=k: results.setdefault(k, c.complete_many(
        [f"CASE:gate{k}_{i}" for i in range(4)]))) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.max_in_flight == 2 and sum(len(r) for r in results.values()) == 12


def test_order_kept_when_replies_finish_out_of_order(judge):
    c = judge(concurrency=10)
    assert c.complete_many([f"CASE:order{i}" for i in range(10)]) == [f"echo order{i} temperature=0.0"
                                                                      for i in range(10)]


def test_complete_many_can_return_failures_in_place(judge):
    out = judge(retries=0).complete_many(["CASE:a", "CASE:bad_request", "CASE:b"], return_exceptions=True)
    assert out[0].startswith("echo a") and isinstance(out[1], JudgeError) and out[2].startswith("echo b")


def test_cache_hits_misses_and_repairs(judge, server, tmp_path):
    c = judge()
    first = c.complete("CASE:cached")
    assert judge().complete("CASE:cached") == first and server.counts["cached"] == 1  # a new client, same disk
    assert c.complete("CASE:cached", temperature=0.7).endswith("0.7") and server.counts["cached"] == 2
    assert JudgeClient(server.url, "other-model", KEY).complete("CASE:cached") and server.counts["cached"] == 3
    files = sorted((tmp_path / "judge").rglob("*.json"))
    assert len(files) == 3 and not list((tmp_path / "judge").rglob("*.tmp"))
    for f in files:
        f.write_text('{"text": "trunc')
    assert c.complete("CASE:cached") == first and server.counts["cached"] == 4
    assert [f.read_text().startswith('{"text": "trunc') for f in files].count(False) == 1  # that one rewritten
    assert first in [json.loads(f.read_text())["text"] for f in files if not f.read_text().startswith('{"text": "t')]


def test_cache_can_be_off(judge, server):
    c = judge(cache=False)
    c.complete("CASE:nocache")
    c.complete("CASE:nocache")
    assert server.counts["nocache"] == 2


def test_key_never_in_cache_errors_or_repr(judge, server, tmp_path):
    c = judge(retries=0)
    c.complete("CASE:secretcheck")
    errors = []
    for case in ("echo_auth", "bad_request", "always500", "not_json"):
        with pytest.raises(JudgeError) as e:
            c.complete(f"CASE:{case}")
        errors.append(str(e.value) + repr(e.value))
    assert f"Bearer {KEY}" in server.auth  # the server did receive it
    assert "***" in errors[0]  # the hostile server quoted it back, and it was scrubbed
    assert not any(KEY in text for text in errors)
    assert KEY not in repr(c) + repr(c.settings)
    files = [f for f in (tmp_path / "judge").rglob("*") if f.is_file()]
    assert files and all(KEY not in f.read_text() for f in files)


def test_settings_from_environment(server, monkeypatch, tmp_path):
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path))
    monkeypatch.setenv("IFCORE_JUDGE_URL", server.url)
    monkeypatch.setenv("IFCORE_JUDGE_MODEL", "env-model")
    monkeypatch.delenv("IFCORE_JUDGE_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
    JudgeClient().complete("CASE:env")
    assert server.bodies[-1]["model"] == "env-model" and server.auth == {"Bearer sk-from-openai-env"}
    monkeypatch.setenv("IFCORE_JUDGE_KEY", "sk-ifcore-env")
    JudgeClient(cache=False).complete("CASE:env")
    assert "Bearer sk-ifcore-env" in server.auth
    monkeypatch.delenv("IFCORE_JUDGE_MODEL")
    with pytest.raises(ValueError, match="IFCORE_JUDGE_MODEL"):
        JudgeClient()


def test_import_stays_light():
    code = "import sys, ifcore.judge.client, ifcore.judge.prompts; assert 'openai' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- prompts and parsers --------------------------------------------------------------------------------------

def test_prompts_fill_every_field():
    targets = [{"Counting Object": "The number of titles", "Type": "Specific"}]
    for text in (target_prompt("INSTR", "CONSTR"), tool_prompt("INSTR", "CONSTR", "RESP", targets),
                 critique_prompt("INSTR", "CONSTR", "RESP", targets, "TOOLOUT")):
        assert "INSTR" in text and "CONSTR" in text and "{" not in text.replace("{\n", "").replace("{{", "")[-400:]
    assert "The number of titles" in tool_prompt("i", "c", "r", targets)
    assert "TOOLOUT" in critique_prompt("i", "c", "r", targets, "TOOLOUT")
    assert "[[The response satisfies the constraint]]" in critique_prompt("i", "c", "r", targets, "")
    assert len(tool_prompt("i", "c", "x" * 50_000, targets)) < 30_000  # the response is cut as ScopeIF cuts it


def test_parse_tool_well_formed_and_all():
    tool = parse_tool(TOOL_OK, response="Title one\nTitle two")
    assert tool["name"] == "title_lengths" and tool["args"] == {"titles": "Title one\nTitle two"}
    assert parse_tool(TOOL_OK)["args"] == {"titles": "ALL"}


@pytest.mark.parametrize("text", [
    "[The Start of Auxiliary Verification Tool]\n```python\nNone\n```\n[The End of Auxiliary Verification Tool]\n"
    "[The Start of Input Parameters]\nNone\n[The End of Input Parameters]",
    "[The Start of Auxiliary Verification Tool]\nNone\n[The End of Auxiliary Verification Tool]",
    "None"])
def test_parse_tool_no_tool_is_none(text):
    assert parse_tool(text) is None


def test_parse_tool_takes_the_last_fences():
    text = "draft:\n```python\ndef f(a):\n    return 1\n```\n```json\n[]\n```\nfinal:\n" + TOOL_OK
    assert parse_tool(text)["name"] == "title_lengths"


@pytest.mark.parametrize("text, what", [
    ("I would count the words.", "no ```python fence"),
    ("```python\ndef f(x:\n    pass\n```", "not valid Python"),
    ("```python\nx = 1\n```", "defines no function"),
    ("```python\ndef f(x):\n    return []\n```", "input parameters"),
    ("```python\ndef f(x):\n    return []\n```\n```json\n[{\"Format\": \"str\"}]\n```", "lacks 'parameter_name'"),
])
def test_parse_tool_errors_say_what(text, what):
    with pytest.raises(JudgeParseError, match="could not parse") as e:
        parse_tool(text)
    assert what in e.value.what and e.value.raw == text and isinstance(e.value, ValueError)


def test_parse_critique_well_formed():
    assert parse_critique(CRITIQUE_OK) == {"verdict": False, "records": [
        {"target": "The word count of title 1", "required": [8.0, 8.0], "actual": 8},
        {"target": "The word count of title 2", "required": [8.0, 8.0], "actual": 7}]}


def test_parse_critique_sloppy():
    assert parse_critique(CRITIQUE_SLOPPY) == {"verdict": True, "records": [
        {"target": "Number of bullet points", "required": [3.0, float("inf")], "actual": 4}]}


def test_parse_critique_original_wording():
    text = ("结论：[[人工智能助手的回复满足了该要求]]\n计数结果：```json\n"
            '[{"计数目标": "段落数", "要求数量": ["-inf", 5], "实际数量": "3"}]\n```')
    assert parse_critique(text) == {"verdict": True, "records": [
        {"target": "段落数", "required": [float("-inf"), 5.0], "actual": 3}]}


@pytest.mark.parametrize("text, expected", [
    ("Conclusion: [[The response satisfies the constraint]]", True),
    ("Conclusion: [[The response does not satisfy the constraint]]", False),
    ("[[Yes]]", True), ("[No]", False), ("**Yes**", True), ("**No.**", False), ("[[yes]]", True),
    ("Conclusion: The response does not satisfy the constraint.", False),
    ("[[No]] on reflection... final: [[Yes]]", True),  # the last verdict wins
    ("Conclusion: [[No]]\n```json\n[{\"note\": \"[Yes]\"}]\n```", False),  # fences are not prose
])
def test_parse_verdict(text, expected):
    assert parse_verdict(text) is expected


@pytest.mark.parametrize("text", ["Conclusion: maybe", "**Analysis** [1, 2]", ""])
def test_parse_verdict_missing(text):
    with pytest.raises(JudgeParseError, match="verdict"):
        parse_verdict(text)


@pytest.mark.parametrize("text, what", [
    (NO_FENCE, "no ```json fence"),
    (BROKEN_JSON, "not JSON"),
    ("[[Yes]]\n```json\n{\"a\": 1}\n```", "not a JSON list of objects"),
    ("[[Yes]]\n```json\n[]\n```", "empty"),
    ("[[Yes]]\n```json\n[{\"Counting Object\": \"x\", \"Actual Value\": 1}]\n```", "permissible_bounds"),
    ("[[Yes]]\n```json\n[{\"Counting Object\": \"x\", \"Permissible Bounds\": [1], \"Actual Value\": 1}]\n```",
     "not a list [a, b]"),
    ("[[Yes]]\n```json\n[{\"Counting Object\": \"x\", \"Permissible Bounds\": [5, 1], \"Actual Value\": 1}]\n```",
     "no interval"),
    ("[[Yes]]\n```json\n[{\"Counting Object\": \"x\", \"Permissible Bounds\": [1, 2], \"Actual Value\": \"many\"}]"
     "\n```", "not a number"),
    ("[[Yes]]\n```json\n[{\"Counting Object\": \"x\", \"Permissible Bounds\": [1, 2], \"Actual Value\": true}]\n```",
     "not a number"),
])
def test_parse_critique_errors_say_what(text, what):
    with pytest.raises(JudgeParseError) as e:
        parse_critique(text)
    assert what in e.value.what and e.value.raw == text


def test_parse_targets_tolerates_and_rejects():
    assert parse_targets(TARGETS_SINGLE_QUOTES) == [{"counting_object": "The number of sections", "type": "specific"}]
    assert parse_targets('```json\n[{"计数目标": "段落数", "目标类型": "全称"}]\n```')[0]["type"] == "universal"
    with pytest.raises(JudgeParseError, match="neither Universal nor Specific"):
        parse_targets('```json\n[{"Counting Object": "x", "Type": "Some"}]\n```')
    with pytest.raises(JudgeParseError, match="no ```json fence"):
        parse_targets("The counting object is the number of titles.")


def test_last_fence_and_lenient_json():
    assert last_fence("```json\n[1]\n```\n```JSON\n[2]\n```", "json") == "[2]"
    assert last_fence("```\n[3]\n```", "json") == "[3]"  # no language tag
    assert last_fence("```python\nx\n```", "json") is None
    assert loads_lenient('[{"a": "quoted “inside” stays",},]') == [{"a": "quoted “inside” stays"}]
    assert loads_lenient("{'a': true, 'b': null}") == {"a": True, "b": None}
    assert loads_lenient('{“a”: “this is true”}') == {"a": "this is true"}  # straightened, content kept
    with pytest.raises(ValueError, match="not JSON"):
        loads_lenient("[{")


def test_end_to_end_through_the_server(judge):
    c = judge()
    targets, tool, critique = c.complete_many(["CASE:targets_ok", "CASE:tool_ok", "CASE:critique_ok"])
    assert [t["type"] for t in parse_targets(targets)] == ["universal", "specific"]
    assert parse_tool(tool, response="a b")["args"] == {"titles": "a b"}
    assert [r["actual"] for r in parse_critique(critique)["records"]] == [8, 7]
    for case in ("no_fence", "broken_json"):
        with pytest.raises(JudgeParseError):
            parse_critique(c.complete(f"CASE:{case}"))
