"""A scripted judge on loopback for the TGV pipeline: an OpenAI-compatible server that answers ScopeIF's three
prompts (target extraction, tool design, tool-grounded judgment) the way a judge would, from the prompt alone.

By default it is a competent, simple judge: its counting object is the number of words of the response, its tool
counts them with the promised `count_word` on "ALL", and its judgment reads the tool's result from the auxiliary
verification results and writes one record with bounds [1, LIMIT] and that count (no tool result: actual -1,
out of bounds). A `CASE:<name>` marker in the constraint scripts the faults of real judges:
  bad_targets   target extraction without a JSON fence (every try)
  no_tool       the judge writes no tool ("None")
  bad_tool      a tool that is not Python
  hostile_tool  a tool that escapes: reads /etc/shadow, connects out, forks, loops (HOSTILE[n] for `#n`)
  no_records    the judgment has its conclusion but a broken JSON list
  garbage       the judgment has neither (every try)
  retry         the first judgment is garbage, a retry (it carries a seed) is fine
  inconsistent  the conclusion says satisfied, the record says otherwise
  down          HTTP 503 on every request
  refused       HTTP 400 on every request
`Recorder` counts requests per prompt kind and keeps every body, so tests assert on work done, never on time.
"""
import contextlib
import json
import re
import threading

from helpers import ChatHandler, loopback

LIMIT = 120  # the scripted judge's bound on words

TARGETS = """[The Start of Counting Object]
```json
[{"Counting Object": "The number of words in the response", "Type": "Specific"}]
```
[The End of Counting Object]"""

TOOL = """[The Start of Auxiliary Verification Tool]
```python
def count_response_words(text):
    return [{"Description": "number of words in the response", "Computed Result": count_word(text)}]
```
[The End of Auxiliary Verification Tool]

[The Start of Input Parameters]
```json
[{"Parameter Name": "text", "Format": "str", "Parameter Description": "the response", "Parameter Value": "ALL"}]
```
[The End of Input Parameters]"""

HOSTILE = [
    "def t(text):\n    return [{'Description': 'shadow', 'Computed Result': open('/etc/shadow').read()}]",
    "def t(text):\n    import socket\n    s = socket.create_connection(('127.0.0.1', 22), timeout=1)\n    return []",
    "def t(text):\n    import os\n    os.fork()\n    return []",
    "def t(text):\n    while True:\n        pass",
    "def t(text):\n    import os\n    return [{'Description': 'env', 'Computed Result': dict(os.environ)}]",
    "def t(text):\n    return [{'Description': 'big', 'Computed Result': 'x' * 10_000_000}]",
]


def tool_reply(code: str, value: str = "ALL") -> str:
    return (f"```python\n{code}\n```\n```json\n" + json.dumps([{"Parameter Name": "text", "Parameter Value": value}])
            + "\n```")


def judgment(satisfied: bool, actual: int, bounds=(1, LIMIT)) -> str:
    verdict = "satisfies" if satisfied else "does not satisfy"
    return (f"Constraint: ...\nAnalysis: the tool counted {actual}.\nConclusion: [[The response {verdict} the "
            f"constraint]]\nCounting Results:```json\n"
            + json.dumps([{"Counting Object": "The number of words", "Permissible Bounds": list(bounds),
                           "Actual Value": actual}]) + "\n```")


def _between(prompt: str, name: str) -> str:
    found = re.findall(rf"\[The Start of {name}\]\n(.*?)\n\[The End of {name}\]", prompt, re.DOTALL)
    return found[-1] if found else ""  # the last: the templates show the format with the same markers first


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.hostile = 0  # the next HOSTILE program to hand out


def _kind(prompt: str) -> str:
    if prompt.startswith("You are an expert skilled at extracting"):
        return "targets"
    if prompt.startswith("You are an expert skilled at analyzing"):
        return "tool"
    return "judgment"


class Handler(ChatHandler):
    rec: Recorder

    def do_POST(self):
        body = self._body()
        prompt = body["messages"][-1]["content"]
        kind = _kind(prompt)
        constraint = _between(prompt, "the Constraint")
        case = (re.search(r"CASE:(\w+)", constraint) or [None, "default"])[1]
        with self.rec.lock:
            self.rec.counts[kind] = self.rec.counts.get(kind, 0) + 1
            self.rec.bodies.append(body)
        if case in ("down", "refused"):
            return self._send(503 if case == "down" else 400, {"error": {"message": f"scripted {case}"}})
        self._reply(body, self._answer(kind, case, prompt, body))

    def _answer(self, kind: str, case: str, prompt: str, body: dict) -> str:
        if kind == "targets":
            return "I think the object is the words." if case == "bad_targets" else TARGETS
        if kind == "tool":
            if case == "no_tool":
                return "[The Start of Auxiliary Verification Tool]\nNone\n[The End of Auxiliary Verification Tool]"
            if case == "bad_tool":
                return tool_reply("def broken(:\n    return")
            if case == "hostile_tool":
                return tool_reply(HOSTILE[int(re.search(r"CASE:hostile_tool #(\d+)", prompt)[1]) % len(HOSTILE)])
            return TOOL
        if case == "garbage" or (case == "retry" and "seed" not in body):
            return "The response is fine, I suppose."
        found = re.search(r'"Computed Result": (-?\d+)', _between(prompt, "Auxiliary Verification Results"))
        actual = int(found[1]) if found else -1
        if case == "no_records":
            return judgment(1 <= actual <= LIMIT, actual).replace('"Actual Value"', '"Actual Value: ')
        if case == "inconsistent":
            return judgment(True, LIMIT + 5)
        return judgment(1 <= actual <= LIMIT, actual)


@contextlib.contextmanager
def serve():
    """Yields (recorder, base URL) of a scripted judge on loopback, stopped on exit."""
    rec = Recorder()
    with loopback(Handler, rec) as url:
        yield rec, url
