"""FollowBench (ifcore.bench.followbench): the rule part against upstream's verdicts on the reference file, hand
cases of its quirks, the judge prompt and reply parsing, HSR/SSR/CSL, bad input and `ifcore eval followbench`.

Hand cases give the verdict of upstream's code/rule_based_evaluation.py (YJiangcm/FollowBench at 6278f4c), run
when the case was written."""
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from ifcore.bench import followbench as fb
from ifcore.cli import main
from ifcore.jsonl import JsonlError

DATA = Path(__file__).parent / "data" / "followbench"


@pytest.fixture(scope="module")
def records():
    return fb.load()


def test_data(records):
    scored = [r for r in records if r["level"] > 0]
    assert len(records) == 944 and len(scored) == 820
    assert sum(fb.rule_scored(r) for r in scored) == 350
    assert Counter(r["type"] for r in scored if fb.rule_scored(r))["example"] == 200


def test_rule_agreement_with_upstream(records):
    by_prompt = {r["instruction"]: r for r in records if fb.rule_scored(r)}
    with gzip.open(DATA / "rule_reference.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) >= 1000 and {r["source"] for r in rows} >= {"target", "perturbed"}
    differ = [(r["prompt"][:60], r["response"][:60], r["official"]) for r in rows
              if fb.rule_verdict(by_prompt[r["prompt"]], r["response"]) != r["official"]]
    assert not differ, differ[:5]


def _record(records, source=None, type_=None, example_id=None, level=1):
    return next(r for r in records if r["level"] == level and (source is None or r["source"] == source)
                and (type_ is None or r["type"] == type_) and (example_id is None or r["example_id"] == example_id))


@pytest.mark.parametrize("source, level, response, official", [
    ("xsum", 1, "A storm is coming in 3.5 hours.", False),  # "3.5" splits the sentence in two
    ("xsum", 2, "A storm  is coming.", True),  # two spaces: an empty word, still under 20
    ("gigaword", 1, "a b c d e f g h", True),
    ("gigaword", 1, "a b c d e f g  h", False),  # 9 pieces split on single spaces
    ("arxiv", 3, "We propose a method.", True),
    ("arxiv", 3, "we propose a method.", False),
    ("samsum", 3, "They will get the Stuff.", False),  # case-sensitive word match
    ("BBH_time", 1, "It was 01/02/2003, no: 12/11/1937", True),  # the last date counts
])
def test_rule_quirks(records, source, level, response, official):
    r = _record(records, source=source, level=level)
    if source == "BBH_time":
        response = response.replace("12/11/1937", r["target"])
    assert fb.rule_verdict(r, response) is official


def test_example_template(records):
    r = _record(records, type_="example")
    filled = r["target"].replace("{instruction}\n", "").replace("{{", "{").replace("}}", "}")
    assert fb.rule_verdict(r, filled.replace("{answer}", "anything at all"))
    assert not fb.rule_verdict(r, filled.replace("{answer}", "two\nlines"))  # '.' stops at a newline


@pytest.mark.parametrize("reply, level, parsed", [
    ("Reasoning...\n['YES', 'NO', 'YES']", 3, (0, 2 / 3)),
    ("```\n['YES', 'YES']\n```", 2, (1, 1.0)),
    ("all good\nYES", 1, (1, 1.0)),
    ("nope\nNO", 1, (0, 0.0)),
    ("['YES']", 2, None),  # wrong length
    ("['YES', 'PERHAPS']", 2, None),
    ("['YES', __import__('os')]", 2, None),  # read as a literal, never evaluated
    ("no list here", 3, None),
])
def test_parse_judgement(reply, level, parsed):
    assert fb.parse_judgement(reply, level) == parsed


def test_judge_prompt_shows_the_chain():
    prompt = fb.judge_prompt(["seed", "seed + a", "seed + a + b"], "the answer", "style")
    assert "seed + a + b" in prompt and "the answer" in prompt
    assert "list of 2 strings" in prompt and "style constraint" in prompt


class FakeJudge:
    """Answers YES to everything except prompts containing 'NO PLEASE'; replies garbage to 'GARBAGE'."""

    def __init__(self):
        self.prompts = []

    def complete_many(self, prompts, return_exceptions=False):
        self.prompts += prompts
        out = []
        for p in prompts:
            level = int(p.split(" in all")[0].split()[-1])
            out.append("garbage" if "GARBAGE" in p else str(["NO" if "NO PLEASE" in p else "YES"] * level))
        return out


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_evaluate_with_and_without_judge(tmp_path, records):
    judged = [r for r in records if r["level"] > 0 and not fb.rule_scored(r) and r["type"] == "style"][:5]
    ruled = [r for r in records if r["level"] > 0 and fb.rule_scored(r) and r["source"] == "E2E"][:5]
    rows = [{"prompt": r["instruction"], "response": "fine"} for r in judged]
    rows[1]["response"] = "NO PLEASE"
    rows[2]["response"] = "GARBAGE"
    rows += [{"prompt": r["instruction"], "response": r["target"]} for r in ruled]
    responses = _write(tmp_path / "r.jsonl", rows)
    plain = fb.evaluate(responses, tmp_path / "a")
    assert plain["by"] == {"rule": 5, "judge": 0, "unjudged": 5}
    judge = FakeJudge()
    s = fb.evaluate(responses, tmp_path / "b", judge=judge)
    assert s["by"] == {"rule": 5, "judge": 4, "unjudged": 1} and len(judge.prompts) == 5
    assert s["levels"][1]["scored"] + s["levels"][2]["scored"] + s["levels"][3]["scored"] + \
        s["levels"][4]["scored"] + s["levels"][5]["scored"] == 9
    out = [json.loads(x) for x in (tmp_path / "b" / "verdicts.jsonl").read_text().splitlines()]
    assert sum(r["by"] == "rule" and r["hard"] == 1 for r in out) == 5  # E2E: the target itself
    assert [r["hard"] for r in out[:3]] == [1, 0, None]


def test_csl_counts_consecutive_levels():
    rows = [{"type": "t", "example_id": 1, "level": lv, "hard": h, "soft": h} for lv, h in
            zip(range(1, 6), (1, 1, 0, 1, 1))]
    rows += [{"type": "t", "example_id": 2, "level": lv, "hard": 1, "soft": 1} for lv in range(1, 6)]
    rows += [{"type": "t", "example_id": 3, "level": 1, "hard": 1, "soft": 1}]  # incomplete: no CSL
    m = fb.metrics(rows, {lv: 3 for lv in range(1, 6)})
    assert m["CSL"] == (2 + 5) / 2 and m["CSL_groups"] == 2
    assert m["levels"][1] == {"HSR": 1.0, "SSR": 1.0, "scored": 3, "of": 3}
    assert m["levels"][3]["HSR"] == 0.5


@pytest.mark.parametrize("rows, message", [
    ([{"prompt": "not a FollowBench prompt", "response": "x"}], "no FollowBench instruction"),
    ([{"prompt": 1, "response": "x"}], "must be strings"),
    ([], "no responses"),
])
def test_bad_input(tmp_path, rows, message):
    with pytest.raises(JsonlError, match=message):
        fb.evaluate(_write(tmp_path / "r.jsonl", rows), tmp_path / "o")


def test_cli(tmp_path, capsys, records):
    r = _record(records, source="E2E")
    responses = _write(tmp_path / "r.jsonl", [{"prompt": r["instruction"], "response": r["target"]}])
    assert main(["eval", "followbench", "--responses", str(responses), "--output-dir", str(tmp_path / "o"),
                 "--allow-missing"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["by"]["rule"] == 1 and summary["levels"]["1"]["HSR"] == 1.0
    assert printed.startswith("followbench: 1 answered; scored by rule 1") and "       1  100.00  100.00" in printed


def test_model_run_without_judge_generates_the_rule_part_only(tmp_path):
    model = Path(__file__).parent / "data" / "tiny_chat_llama"
    out = tmp_path / "o"
    assert main(["eval", "followbench", "--model", str(model), "--limit", "3", "--max-new-tokens", "2", "--no-cache",
                 "--output-dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    skipped = summary.get("skipped", {}).get("count", 0)  # the test model's byte tokens overflow its 4,096
    assert summary["by"] == {"rule": 3 - skipped, "judge": 0, "unjudged": 0}
    assert summary["generation"]["of"] == 350 and summary["generation"]["prompts"] == 3 - skipped



def test_backend_vllm_serves_the_model_for_the_command_alone(tmp_path, monkeypatch):
    """--backend vllm: `serve(model, engine="vllm", precision=...)` wraps the command, its endpoint generates, and
    the prompts without room for the answer are counted by the served folder's tokenizer. The server itself is a
    stand-in here; tests/test_judge_serve.py starts the real one where `make vllm` was run."""
    import contextlib

    from ifcore.infer import serve as serve_module

    model = Path(__file__).parent / "data" / "tiny_chat_llama"
    calls, stopped = [], []

    class Served:  # what serve() yields: an endpoint whose `model` is the served folder
        model_id, batch_size = "vllm-bfloat16:stand-in", 32

        def __init__(self):
            self.model = str(model)

        def complete(self, inputs, params, seeds):
            return [("A summary.", 2)] * len(inputs)

    @contextlib.contextmanager
    def fake_serve(name, **kwargs):
        calls.append((name, kwargs))
        yield Served()
        stopped.append(name)

    monkeypatch.setattr(serve_module, "serve", fake_serve)
    out = tmp_path / "o"
    assert main(["eval", "followbench", "--model", str(model), "--backend", "vllm", "--precision", "bf16",
                 "--limit", "3", "--max-new-tokens", "2", "--no-cache", "--output-dir", str(out)]) == 0
    assert calls == [(str(model), {"engine": "vllm", "precision": "bf16"})] and stopped == [str(model)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"]["prompts_longer_than"] == 4096 - 2
    assert summary["generation"]["model"] == "vllm-bfloat16:stand-in"
    assert summary["by"]["rule"] == 3 - summary["skipped"]["count"]

def test_bad_judge_template_is_a_clear_error(tmp_path, capsys, records):
    r = _record(records, source="E2E")
    responses = _write(tmp_path / "r.jsonl", [{"prompt": r["instruction"], "response": r["target"]}])
    template = tmp_path / "t.txt"
    template.write_text("Judge {answer} against {rubric}")
    with pytest.raises(SystemExit) as e:
        main(["eval", "followbench", "--responses", str(responses), "--judge-template", str(template),
              "--output-dir", str(tmp_path / "o")])
    assert e.value.code == 2 and "--judge-template" in capsys.readouterr().err
