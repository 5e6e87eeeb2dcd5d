"""The LLM path of factorized synthesis (ScopeIF tables 9-12) against a loopback OpenAI-compatible server.

The server plays a strong LLM: it tells the four prompt kinds apart by their blocks and answers with outputs in
the recorded shapes of each table, filled from the prompt it received (the seed instruction, the category, the
given constraints and k). Markers in the seed instructions script the faults: SLOPPY (parseable with repairs),
MALFORMED (no construction results), HTTP500 (every attempt fails), HTTP400 (not retried); markers the fake LLM
writes into the instructions script the quality verdicts: LOWQ (Table 11 says low), BADLIST (Table 12 says low),
GARBLE (Table 11 answers with no verdict). Nothing here asserts a wall time."""
import json
import re
import threading
from collections import Counter

import pytest

from ifcore.judge import client as client_module
from ifcore.judge.client import JudgeClient
from ifcore.judge.prompts import JudgeParseError
from ifcore.schema import TARGETS, Constraint
from ifcore.synth import llm_combinations, llm_dataset, seed_instructions
from ifcore.synth_prompts import (PROMPTS, atomic_prompt, checklist_quality_prompt, crossover_prompt,
                                  instruction_quality_prompt, normalize_scope, parse_atomic, parse_crossover,
                                  parse_quality)

from helpers import ChatHandler, loopback

KEY = "sk-synth-SECRET-41c9"
GOOD = ["Write a poem about rivers.", "Describe a harbor at dawn."]


def _block(prompt: str, name: str) -> str:
    return re.findall(rf"\[The Start of {name}\]\n(.*?)\n?\[The End of {name}\]", prompt, re.DOTALL)[-1]


def _kind(prompt: str) -> str:
    if "[The Start of Constraint Category]" in prompt:
        return "atomic"
    if "[The Start of Given Constraints]" in prompt:
        return "crossover"
    if "[The Start of Extraction Results]" in prompt:
        return "checklist_quality"
    return "instruction_quality"


def atomic_reply(prompt: str) -> str:
    """Five results in the combination asked for (items 3 and 4 carry BADLIST and LOWQ, item 2 GARBLE), then one
    with a secondary target of another Target and one with a scope outside the taxonomy."""
    seed, category = _block(prompt, "User Instruction"), json.loads(_block(prompt, "Constraint Category"))
    previous = _block(prompt, "Previous Constructed Instructions").strip()
    done = len(json.loads(previous)) if previous else 0
    unit = "Entire Response" if category["Scope"] == "Global" else "Paragraph"
    scope = f"{category['Scope']}({unit})" + (" -> Position(Sentence)" if category["Nested Scope"] else "")
    seconds = TARGETS[category["Target"]]
    items = []
    for i in range(5):
        constraint = (f"[{category['Target']}/{category['Range']}/{scope} #{done + i}] Keep each paragraph under "
                      f"{done + i + 3} sentences.")
        marker = {2: " GARBLE", 3: " BADLIST", 4: " LOWQ"}.get(i, "")
        items.append({"Original Instruction": seed, "New Instruction": f"{seed} {constraint}{marker}",
                      "Newly Added Constraints": constraint, "Scope": scope,
                      "Secondary Target Category": seconds[i % len(seconds)]})
    other = next(s for t, ss in TARGETS.items() if t != category["Target"] for s in ss)
    items.append(items[0] | {"New Instruction": seed + " off-category", "Secondary Target Category": other})
    items.append(items[0] | {"New Instruction": seed + " bad scope", "Scope": "Everywhere(Response)"})
    if "SLOPPY" in seed:  # no result markers, a bare fence, snake_case keys, a list of constraints, lower case,
        # plural units, a raw newline inside a string and trailing commas
        body = json.dumps([{"new_instruction": it["New Instruction"].replace(". ", ".\n", 1),
                            "newly_added_constraints": [it["Newly Added Constraints"]],
                            "scope": it["Scope"].lower().replace("paragraph)", "paragraphs)"),
                            "secondary target category": it["Secondary Target Category"].lower()}
                           for it in items[:5]], indent=1)
        body = body.replace("\\n", "\n").replace('"\n }', '",\n }')
        return f"Here you go.\n```\n{body}\n```"
    return ("[The Start of Analysis]\nVary the units.\n[The End of Analysis]\n\n[The Start of Construction Results]\n"
            f"```json\n{json.dumps(items, indent=1)}\n```\n[The End of Construction Results]")


def crossover_reply(prompt: str) -> str:
    """Items 1-3 use the first k given constraints (item 3 carries LOWQ), item 4 only k - 1, item 5 an unknown
    source id."""
    seed, given = _block(prompt, "User Instruction"), json.loads(_block(prompt, "Given Constraints"))
    k = int(re.search(r"you must add at least (\d+) constraints", prompt)[1])
    items = []
    for i in range(5):
        used = given[:k - 1] if i == 3 else given[:k]
        added = [{"Constraint Content": g["Constraint Content"], "Source Constraint ID": g["Constraint ID"]}
                 for g in used]
        if i == 4:
            added[-1]["Source Constraint ID"] = 99
        text = " ".join(a["Constraint Content"] for a in added)
        items.append({"Instruction ID": i + 1, "New User Instruction": f"{seed} [{k}/{i}] {text}" +
                      (" LOWQ" if i == 2 else ""), "All Added Constraints in the New User Instruction": added})
    if "SLOPPY" in seed:  # ids as strings, other key spellings, smart quotes around keys
        body = json.dumps([{"new user instruction": it["New User Instruction"], "added constraints": [
            {"content": a["Constraint Content"], "source_constraint_id": str(a["Source Constraint ID"])}
            for a in it["All Added Constraints in the New User Instruction"]]} for it in items])
        return "```json\n" + body.replace('"new user instruction"', "\u201cnew user instruction\u201d") + "\n```"
    return f"[The Start of Construction Results]\n{json.dumps(items)}\n[The End of Construction Results]"


def quality_reply(kind: str, prompt: str) -> str:
    instruction = _block(prompt, "User Instruction")
    if kind == "instruction_quality" and "GARBLE" in instruction:
        return "Analysis: it depends."
    low = "LOWQ" if kind == "instruction_quality" else "BADLIST"
    return f"Analysis: checked.\nFinal Conclusion: [[{'Low' if low in instruction else 'High'} Quality]]"


class Handler(ChatHandler):
    def do_POST(self):
        body = self._body()
        prompt = body["messages"][-1]["content"]
        kind = _kind(prompt)
        with self.rec.lock:
            self.rec.requests[kind] += 1
            self.rec.prompts.append((kind, prompt, body.get("temperature")))
            self.rec.auth.add(self.headers.get("Authorization"))
        seed = _block(prompt, "User Instruction") if kind in ("atomic", "crossover") else ""
        for marker, status in (("HTTP500", 500), ("HTTP400", 400)):
            if marker in seed:
                return self._send(status, {"error": {"message": f"scripted {marker}"}})
        if "MALFORMED" in seed:
            text = "I could not decide; here are some thoughts without results."
        elif kind == "atomic":
            text = atomic_reply(prompt)
        elif kind == "crossover":
            text = crossover_reply(prompt)
        else:
            text = quality_reply(kind, prompt)
        with self.rec.lock:
            self.rec.replies.append((kind, text))
        self._reply(body, text)


@pytest.fixture
def server():
    rec = type("Rec", (), {})()
    rec.lock, rec.requests, rec.prompts, rec.replies, rec.auth = threading.Lock(), Counter(), [], [], set()
    with loopback(Handler, rec) as rec.url:
        yield rec


@pytest.fixture
def llm(server, tmp_path, monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(client_module.time, "sleep", lambda s: None)
    return lambda **kw: JudgeClient(server.url, "gen-model", KEY, cache_dir=tmp_path / "cache" / "judge",
                                    **{"retries": 1, "backoff": 0.001, "timeout": 10.0, "concurrency": 4, **kw})


def _constraints(row: dict) -> list[dict]:
    return json.loads(row["label"])["constraints"]


# ---- end to end through the server -----------------------------------------------------------------------------

def test_well_formed_run_counts_filters_and_categories(llm, server):
    rows, stats = llm_dataset(llm(), n=100, seed=3, iterations=2, combinations=3, crossovers=4, seeds=GOOD)
    # 3 combinations x 2 iterations: 5 usable results each, 2 rejected (off-category, bad scope)
    assert stats["calls"] == {"atomic": 6, "crossover": 4, "instruction_quality": 42, "checklist_quality": 42}
    assert stats["failed"] == dict.fromkeys(stats["calls"], 0)
    assert stats["malformed"] == {"atomic": 0, "crossover": 0, "instruction_quality": 6, "checklist_quality": 0}
    assert stats["rejected"] == {"atomic": 12, "crossover": 8} and stats["pool"] == 30
    # 30 one-constraint instructions + 4 calls x 3 usable; GARBLE (6) unchecked, LOWQ 6 + 4, BADLIST 6
    assert stats["candidates"] == 42
    assert stats["dropped"] == {"instruction_quality": 10, "checklist_quality": 6, "unchecked": 6}
    assert stats["kept"] == len(rows) == 20
    assert not any(m in r["prompt"] for r in rows for m in ("LOWQ", "BADLIST", "GARBLE"))
    assert sorted(Counter(len(_constraints(r)) for r in rows).items()) == [(1, 12), (2, 2), (4, 2), (6, 2), (8, 2)]

    # every constraint is a judged one the schema accepts, with the category of the combination it came from
    atomic_categories = {}
    for kind, prompt, _ in server.prompts:
        if kind == "atomic":
            asked = json.loads(_block(prompt, "Constraint Category"))
            for item in parse_atomic(atomic_reply(prompt))[0]:
                atomic_categories[item["constraint"]] = asked
    for row in rows:
        for c in _constraints(row):
            assert set(c) == {"id", "text", "judge", "category"} and c["judge"] is True
            assert Constraint.from_dict(c).judge
            asked = atomic_categories[c["text"]]  # crossover constraints keep their source's category
            assert (c["category"]["primary_target"], c["category"]["range"]) == (asked["Target"], asked["Range"])
            assert c["category"]["scope"].startswith(asked["Scope"] + "(")
            assert (" -> " in c["category"]["scope"]) == asked["Nested Scope"]
            assert c["category"]["secondary_target"] in TARGETS[asked["Target"]]


def test_prompts_carry_seed_history_and_k(llm, server):
    llm_dataset(llm(), n=6, seed=1, iterations=3, combinations=2, crossovers=4, seeds=GOOD)
    atomic = [p for kind, p, _ in server.prompts if kind == "atomic"]
    assert len(atomic) == 6 and all(_block(p, "User Instruction") in GOOD for p in atomic)
    assert "{" not in atomic[0].replace("{\n", "").split("[The Start of User Instruction]")[1][:40]
    by_category: dict = {}
    for p in atomic:
        by_category.setdefault(_block(p, "Constraint Category"), []).append(p)
    assert len(by_category) == 2
    for chain in by_category.values():  # iteration i shows the 5 results of each earlier iteration
        histories = [_block(p, "Previous Constructed Instructions").strip() for p in chain]
        assert histories[0] == "" and [len(json.loads(h)) for h in histories[1:]] == [5, 10]
        assert json.loads(histories[2])[:5] == json.loads(histories[1])
        units = json.loads(_block(chain[2], "Previous Response Unit Distribution"))
        assert sum(units.values()) == 10 and len(units) == 7
        seconds = json.loads(_block(chain[2], "Previous Secondary Target Category Distribution"))
        target = json.loads(_block(chain[2], "Constraint Category"))["Target"]
        assert list(seconds) == list(TARGETS[target]) and sum(seconds.values()) == 10
    crossover = [p for kind, p, _ in server.prompts if kind == "crossover"]
    ks = [int(re.search(r"you must add at least (\d+) constraints", p)[1]) for p in crossover]
    assert sorted(ks) == [2, 4, 6, 8]  # the requests arrive concurrently, in any order
    assert all(len(json.loads(_block(p, "Given Constraints"))) == 16 for p in crossover)  # 16 of the pool's 30
    assert all(_block(p, "User Instruction") in GOOD for p in crossover)
    temperatures = {kind: t for kind, _, t in server.prompts}
    assert temperatures == {"atomic": 1.0, "crossover": 1.0, "instruction_quality": 0.0, "checklist_quality": 0.0}
    assert server.auth == {f"Bearer {KEY}"}


def test_failed_and_malformed_calls_are_counted_and_skipped(llm, server):
    seeds = ["Write a poem about rivers.", "Explain tides. MALFORMED", "Count sheep. HTTP500",
             "Name a city. HTTP400", "Describe a harbor. SLOPPY"]
    rows, stats = llm_dataset(llm(), n=100, seed=0, iterations=1, combinations=5, crossovers=5, seeds=seeds)
    # each seed is used once per stage (5 combinations, 5 crossovers, the seeds cycled)
    assert stats["failed"]["atomic"] == stats["failed"]["crossover"] == 2
    assert stats["malformed"]["atomic"] == stats["malformed"]["crossover"] == 1
    assert server.requests["atomic"] == 5 + 1 and server.requests["crossover"] == 5 + 1  # 500 retried once
    assert stats["pool"] == 10  # two usable replies, the sloppy one included
    assert stats["rejected"] == {"atomic": 2, "crossover": 4}  # the sloppy atomic reply leaves out the bad items
    sloppy = [_constraints(r) for r in rows if "SLOPPY" in r["prompt"]]
    assert sorted(map(len, sloppy))[0] == 1 and sum(len(cs) > 1 for cs in sloppy) == 2  # atomic and crossover
    for c in (c for cs in sloppy for c in cs):  # repaired to the schema's spelling
        assert Constraint.from_dict(c).judge and "paragraphs" not in c["category"]["scope"]
        assert c["category"]["secondary_target"] in TARGETS[c["category"]["primary_target"]]
    assert not any(m in r["prompt"] for r in rows for m in ("MALFORMED", "HTTP500", "HTTP400"))


def test_no_usable_pool_means_no_crossover_and_no_crash(llm, server):
    rows, stats = llm_dataset(llm(), n=5, seed=0, iterations=2, combinations=2, seeds=["Count sheep. HTTP400"])
    assert rows == [] and stats["pool"] == 0 and stats["calls"]["crossover"] == 0
    assert stats["failed"]["atomic"] == 4 and server.requests["atomic"] == 4


def test_quality_checks_stop_once_n_are_kept(llm, server):
    rows, stats = llm_dataset(llm(), n=3, seed=2, iterations=2, combinations=3, crossovers=2, seeds=GOOD)
    assert len(rows) == 3 and stats["kept"] == 3
    assert stats["calls"]["instruction_quality"] == 8 < stats["candidates"]  # one batch of 8 was enough


def test_reproducible_and_the_rerun_sends_nothing(llm, server, tmp_path):
    kw = dict(n=10, seed=5, iterations=2, combinations=3, crossovers=3, seeds=GOOD)
    first = llm_dataset(llm(), **kw)
    sent = sum(server.requests.values())
    again = llm_dataset(llm(), **kw)
    assert again == first and sum(server.requests.values()) == sent
    other = llm_dataset(llm(), **(kw | {"seed": 6}))
    assert other[0] != first[0]


def test_cli_end_to_end(server, tmp_path, monkeypatch, capsys):
    pytest.importorskip("openai")
    from ifcore.cli import main

    monkeypatch.setenv("IFCORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("IFCORE_JUDGE_KEY", KEY)
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(json.dumps({"prompt": s}) + "\n" for s in GOOD))
    out = tmp_path / "out"
    argv = ["synth", "--output-dir", str(out), "--train", "6", "--test", "2", "--seed", "4", "--llm-url", server.url,
            "--llm-model", "gen-model", "--seeds", str(seeds), "--iterations", "1", "--combinations", "3",
            "--crossovers", "2", "--concurrency", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    stats = json.loads(printed)
    assert KEY not in printed and server.auth == {f"Bearer {KEY}"}
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()]
    assert len(train) == 6 and len(test) == 2 and not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert json.loads((out / "stats.json").read_text()) == stats
    assert stats["instructions"] == 6 and stats["llm"]["kept"] == 8 and stats["llm"]["calls"]["atomic"] == 3
    assert sum(stats["primary_target"].values()) == stats["constraints"]
    assert all(c["judge"] for r in train + test for c in _constraints(r))
    assert not list((tmp_path / "cache").glob("**/*.tmp")) and list((tmp_path / "cache" / "judge").rglob("*.json"))
    sent = sum(server.requests.values())
    capsys.readouterr()
    assert main(argv) == 0 and sum(server.requests.values()) == sent  # cached: nothing sent
    assert json.loads(capsys.readouterr().out) == stats


def test_cli_llm_rejects_bad_knobs(server, tmp_path, capsys):
    from ifcore.cli import main

    for flag, value in (("--iterations", "0"), ("--crossovers", "-1"), ("--concurrency", "0")):
        with pytest.raises(SystemExit) as e:
            main(["synth", "--output-dir", str(tmp_path / "o"), "--llm-url", server.url, "--llm-model", "m",
                  flag, value])
        assert e.value.code == 2 and flag.lstrip("-") in capsys.readouterr().err
    assert sum(server.requests.values()) == 0


def test_cli_llm_needs_a_model(server, tmp_path, monkeypatch, capsys):
    from ifcore.cli import main

    monkeypatch.delenv("IFCORE_JUDGE_MODEL", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["synth", "--output-dir", str(tmp_path / "o"), "--llm-url", server.url])
    assert e.value.code == 2 and "model" in capsys.readouterr().err
    assert sum(server.requests.values()) == 0


# ---- prompts and parsers --------------------------------------------------------------------------------------

def test_combinations_are_the_compatible_ones():
    import random

    combos = llm_combinations(random.Random(0))
    assert len(combos) == 4 * 6 * 6 - 4  # Capacity never takes Prohibition
    assert not any(c["Target"] == "Capacity" and c["Range"] == "Prohibition" for c in combos)
    assert not any(c["Nested Scope"] for c in combos if c["Scope"] == "Global")
    assert 20 < sum(c["Nested Scope"] for c in combos) < 85
    assert combos == llm_combinations(random.Random(0))


def test_prompts_fill_every_field():
    category = {"Scope": "Condition", "Nested Scope": True, "Target": "Pattern", "Range": "Equality"}
    pool = [{"text": "End with a question.", "category": {"scope": "Global(Entire Response)",
                                                           "primary_target": "Pattern",
                                                           "secondary_target": "Boundary", "range": "Equality"}}]
    texts = [atomic_prompt("SEED", category, []), crossover_prompt("SEED", pool, 6),
             instruction_quality_prompt("SEED"), checklist_quality_prompt("SEED", ["End with a question."])]
    for text in texts:
        assert "SEED" in text and not re.search(r"\{[a-z_]+\}", text)
    assert "Positional Relations" in texts[0] and "Positional Relations" in texts[3]  # the taxonomy is in
    assert "you must add at least 6 constraints" in texts[1] and '"Primary Target": "Pattern"' in texts[1]
    assert '"[[High Quality]]" or "[[Low Quality]]"' in texts[2]
    assert set(PROMPTS) == {"atomic", "crossover", "instruction_quality", "checklist_quality"}


@pytest.mark.parametrize("text, expected", [
    ("Final Conclusion: [[High Quality]]", True), ("Final Conclusion: [[Low Quality]]", False),
    ("[Low Quality]", False), ("**High Quality**", True), ("Final Conclusion: low quality", False),
    ("[[Low Quality]] ... on reflection: [[High Quality]]", True), ("[[high quality]]", True)])
def test_parse_quality(text, expected):
    assert parse_quality(text) is expected


@pytest.mark.parametrize("text", ["Analysis: fine.", "", "The quality is high."])
def test_parse_quality_missing(text):
    with pytest.raises(JudgeParseError, match="High Quality"):
        parse_quality(text)


def test_normalize_scope():
    assert (normalize_scope("traversal(paragraphs) ->  position( Sentence )")
            == "Traversal(Paragraph) -> Position(Sentence)")
    assert normalize_scope("Global(Entire Response)") == "Global(Entire Response)"
    assert normalize_scope("Global(Entire Response) -> Everywhere(Word)") is None
    assert normalize_scope("each paragraph") is None and normalize_scope(None) is None


@pytest.mark.parametrize("text, what", [
    ("No results today.", "no [The Start of Construction Results]"),
    ("[The Start of Construction Results]\n[{\"New Instruction\": \n[The End of Construction Results]", "not JSON"),
    ("```json\n{\"a\": 1}\n```", "not a JSON list"),
    ("```json\n[]\n```", "the list is empty"),
    ("```json\n[{\"New Instruction\": \"x\", \"Scope\": \"Global(Entire Response)\"}]\n```",
     "item 1: no newly added constraints"),
])
def test_parse_atomic_errors_say_what(text, what):
    with pytest.raises(JudgeParseError) as e:
        parse_atomic(text)
    assert what in e.value.what and e.value.raw == text


def test_parse_crossover_rejects_items_and_says_why():
    text = "```json\n" + json.dumps([
        {"New User Instruction": "A", "All Added Constraints in the New User Instruction": [
            {"Constraint Content": "c", "Source Constraint ID": 1.0}]},
        {"New User Instruction": "B", "All Added Constraints in the New User Instruction": [
            {"Constraint Content": "c", "Source Constraint ID": "three"}]},
        {"New User Instruction": "", "All Added Constraints in the New User Instruction": []},
        "not an object"]) + "\n```"
    items, rejected = parse_crossover(text)
    assert items == [{"instruction": "A", "constraints": [{"text": "c", "source": 1}]}]
    assert rejected == ["item 2: constraint 1 lacks an integer Source Constraint ID", "item 3: no new user instruction",
                        "item 4: not an object"]
    with pytest.raises(JudgeParseError, match="no usable construction result"):
        parse_crossover("```json\n" + json.dumps([{"New User Instruction": "B"}]) + "\n```")


def test_seed_instructions(tmp_path):
    assert len(seed_instructions()) == 30 * 8 and seed_instructions()[0].startswith("Write ")
    good = tmp_path / "s.jsonl"
    good.write_text('{"prompt": "Write a haiku."}\n')
    assert seed_instructions(good) == ["Write a haiku."]
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": ""}\n')
    with pytest.raises(ValueError, match="b.jsonl: row 2: prompt"):
        seed_instructions(bad)
