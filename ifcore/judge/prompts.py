"""ScopeIF's tool-grounded verification prompts (paper appendix B, tables 13, 15 and 16) and tolerant parsers.

The templates are the English wording of the appendix, line for line. The original (Chinese) templates the paper
translates live in thu-coai/ScopeIF (data_construction/target_extraction/prompts/target_extraction_prompts.py,
ScopeIF/verl/utils/reward_score/prompts/{code,llm}_evaluation_prompts.py); they are not copied here, but the
parsers accept their verdict phrases and JSON keys, so a judge prompted with either wording parses the same.

Parsers take the LAST ```python / ```json fence, as the reference code does, and forgive the usual LLM faults (no
language tag, trailing commas, single quotes, smart quotes, [[Yes]] / [Yes] / **Yes** verdicts). Each returns the
parsed value or raises JudgeParseError, which says what could not be parsed and keeps the raw text.
"""
from __future__ import annotations

import ast
import json
import math
import re

RESPONSE_CHARS = 20_000  # the reference code cuts the response to this many characters in its prompts
FENCE_CHARS = 100_000  # a JSON fence longer than this is a runaway generation, not a list of counts

TARGET_EXTRACTION = """You are an expert skilled at extracting important information from instructions. I will provide you with a user instruction and a given constraint contained in that instruction. My goal is to determine whether some responses satisfy the given constraint. Your task is to completely extract all counting objects of the given constraint. You must follow the principles below when completing this task:

1. Counting objects can take two forms. Every counting object must be expressed using the first form whenever possible. The second form may be used only when the counting object cannot be expressed using the first form.
a. If the subconstraint directly dictates the quantity of certain content, the counting object should be the quantity of that content, excluding the specific quantitative constraint.
b. If the subconstraint cannot be expressed using the above form, the counting object should be expressed in a qualitative form: a question that can be answered with "yes" or "no" and indicates whether the corresponding subconstraint is satisfied.

2. The counting object must be divided comprehensively and without omission, and every part of the given constraint that needs to be verified must have a corresponding counting object. The counting object must correspond exactly to the content of the given constraint. Every subconstraint must have a corresponding counting object, and the counting object must not contain anything unrelated to the given constraint. In other words, every counting object must fall within the scope of the given constraint, and the counting objects must collectively constitute a necessary and sufficient condition for satisfying the given constraint. Furthermore, the counting object should be divided as atomically as possible, and complex constraints should be divided into multiple counting objects whenever possible.

3. You must distinguish whether each counting object is universal or specific. "Universal" means that the corresponding subconstraint applies to an unspecified number of multiple objects, whereas "specific" means that it applies to exactly one particular object. You must provide the type of every counting object in the final output. A specific counting object must correspond to the statistical result of exactly one particular object and must not correspond to multiple statistical results.

4. If the quantity in a constraint is expressed using the quantity of another reference object rather than a specific number, use the subject of the constraint as the counting object. The reference value must not be treated as a counting object.

5. The counting object must use the same language as the user instruction.

Use the following output format:
````
[The Start of the Constraint]
... (It must be identical to the constraint I provide, without any modification)
[The End of the Constraint]

[The Start of Counting Object]
```json
[
    {{
        "Counting Object": ... (Describe the counting object in detail, using the original wording of the constraint wherever possible),
        "Type": ... ("Universal" or "Specific")
    }},
    ...
]
```
[The End of Counting Object]
````

The user instruction and the given constraint contained in it are provided below:
[The Start of User Instruction]
{instruction}
[The End of User Instruction]

[The Start of the Constraint]
{constraint}
[The End of the Constraint]"""

TOOL_DESIGN = """You are an expert skilled at analyzing the quality of AI assistant responses. I will provide you with a user instruction, a given constraint contained in that instruction, a response, and a list of counting objects for this constraint. My goal is to determine whether the response satisfies the given constraint. For this constraint, generate a Python auxiliary verification tool to help me make a more accurate judgment. You must follow the principles below:

1. Auxiliary verification means using a tool to automatically obtain important information from the response to assist a subsequent judge model to verify this constraint. It does not mean using code to directly produce a judgment about whether the constraint is satisfied.

2. The generated auxiliary verification tool must satisfy the following requirements:
a. The auxiliary verification tool should be generated only for completely objective constraints. Subjective constraints must not be verified with code. However, not every objective constraint necessarily requires an auxiliary verification tool.
b. The information computed by the auxiliary verification tool must be fully discriminative and deterministic. The computed information must differ significantly between responses that satisfy the constraint and responses that do not.
c. The information computed by the auxiliary verification tool should cover the list of counting objects as comprehensively as possible without being limited to it. An object in the list may be omitted if it is subjective or difficult to compute accurately with code. You may also freely compute other information outside the list that you consider necessary.

3. The auxiliary verification tool must be a Python function satisfying the following requirements:
a. You can freely design the function's input parameters, but their values must be response segments relevant to the constraint.
b. The function must return a list. Each item in the list must be a Dict containing one category of important information obtained by the auxiliary verification tool. Each Dict must follow this format:
```
{{
    "Description": ... (string; provide a detailed definition of the information obtained by the tool so that the judge model can understand and use it),
    "Computed Result": ... (any format; provide the computed information),
}}
```
c. All Python packages that need to be imported must be imported inside the function. The function must not use any Python package that requires an additional download.

4. To ensure a consistent standard when counting words or characters or when splitting sentences, directly use the following functions implemented by human experts unless the constraint explicitly specifies otherwise:
a. count_word(s: str) -> int: Counts the words or Chinese characters in a string. Its input is the string to be counted, and it returns the result as an integer. Use the len(s: str) -> int function only when the constraint explicitly specifies a character count.
b. split_sentences(s: str) -> List: Splits a string into sentences. Its input is the string, and it returns a list containing all sentences in the string.

5. If you choose to generate an auxiliary verification tool, you must also extract the corresponding value of each input parameter from the response according to the following principles:
a. You should extract only continuous verbatim segments from the response. You are strictly prohibited from modifying, adding, or deleting any content.
b. If the extracted value corresponding to a parameter is the complete response, output "ALL" instead of reproducing the entire response. If no corresponding value exists in the response, output "".

Use the following output format:
````
[The Start of Auxiliary Verification Tool]
```python
... (Provide a Python tool that can assist in verifying the constraint according to the specifications above. If you choose not to generate an auxiliary verification tool, output "None" here.)
```
[The End of Auxiliary Verification Tool]

[The Start of Input Parameters]
... (Provide the name, format, description, and value of every input parameter designed for the auxiliary verification tool in detail. List the parameters in the same order as they appear in the function and use the JSON format below. If you choose not to generate an auxiliary verification tool, output "None" here.)
```json
[
    {{
        "Parameter Name": ... (the parameter name, which must match the name used in the auxiliary verification tool),
        "Format": ... (the parameter's data type),
        "Parameter Description": ... (the description and meaning of the parameter),
        "Parameter Value": ... (the value corresponding to the parameter in the response. It must be a complete verbatim segment from the response and must not be modified in any way. Its format must be consistent with the input parameter definition)
    }},
    ...
]
```
[The End of Input Parameters]
````

The user instruction, the corresponding constraint, the response, and the counting object list are provided below:
[The Start of User Instruction]
{instruction}
[The End of User Instruction]

[The Start of the Constraint]
{constraint}
[The End of the Constraint]

[The Start of the Response]
{response}
[The End of the Response]

[The Start of Counting Object List]
{target}
[The End of Counting Object List]"""

CRITIQUE = """You are an expert skilled at evaluating the quality of responses generated by artificial intelligence assistants. I will provide you with a user instruction, a constraint contained in that instruction, a response to the instruction, and a list of counting objects for this constraint. You must carefully examine whether the response satisfies the corresponding constraint in the user instruction and explain your reason. I will also provide some reference information (may be empty), which is automatically calculated by auxiliary verification tools for the corresponding constraint. You should use this information cautiously when making your final judgment and provide a counting result for every counting object. Note that auxiliary verification tools have limitations, so the reference information it provides is not guaranteed to be completely correct and may contain errors. If you are confident that the reference information contains an obvious error, you may disregard it. You must follow the principles below:

1. Your judgment should be as strict as possible. You should conclude "[[The response satisfies the constraint]]" only when the response completely satisfies every part of the corresponding constraint. If the response contains any omission or error in fulfilling the constraint, you must conclude "[[The response does not satisfy the constraint]]".

2. Your judgment of the corresponding constraint must remain independent. When evaluating the current constraint, you do not need to consider whether other parts of the user instruction are satisfied.

3. After providing your judgment, combine the reference information with your analysis and provide a counting result for every item in the counting object list. Follow the principles below when providing the counting results:
a. Pay attention to whether each counting object is "Universal" or "Specific". For a specific counting object, use the original wording of that counting object. For a universal counting object, do not directly use its original wording. Instead, enumerate a separate counting result for every corresponding item that appears in the response.
b. Provide counting results only for the items included in the counting object list.

4. For some constraints, the permissible bounds are not specified using a concrete number but are instead expressed through a relative quantitative relationship with a reference value, such as an inequality or arithmetic relationship. In such cases, you must first calculate the reference value and then substitute it into the permissible bounds.

5. You must ensure that your conclusion and counting results are logically consistent. If your judgment is "[[The response satisfies the constraint]]," the actual value of every counting result must fall within its permissible bounds range. If your judgment is "[[The response does not satisfy the constraint]]," the actual value of at least one counting result must fall outside its permissible bounds range.

You must strictly follow the format below when providing your analysis and judgment of the constraint:
````
Constraint: ... (Provide the original corresponding constraint verbatim, without making any modification)
Analysis: ... (Provide a detailed and meticulous analysis based on the specific content of the response, explaining whether the response satisfies the constraint)
Conclusion: ... (This must be either "[[The response satisfies the constraint]]" or "[[The response does not satisfy the constraint]]")
Counting Results:```json
[
    {{
        "Counting Object": ... (A string that describes the counting object in detail),
        "Permissible Bounds": ... (A two-element list specifying a closed interval in the form [a, b]. The two endpoints may be equal when only one value is valid. For qualitative constraints, the permissible bounds may be set to [0, 0] or [1, 1]),
        "Actual Value": ... (An integer specifying the actual value of this counting object in the response),
    }},
    ...
]
```
````

The user instruction, the corresponding constraint, the auxiliary verification results, the response, and the counting object list are provided below:
[The Start of User Instruction]
{instruction}
[The End of User Instruction]

[The Start of the Constraint]
{constraint}
[The End of the Constraint]

[The Start of Auxiliary Verification Results]
{verification_results}
[The End of Auxiliary Verification Results]

[The Start of the Response]
{response}
[The End of the Response]

[The Start of Counting Object List]
{target}
[The End of Counting Object List]"""

PROMPTS = {"target_extraction": TARGET_EXTRACTION, "tool_design": TOOL_DESIGN, "critique": CRITIQUE}


def target_prompt(instruction: str, constraint: str) -> str:
    return TARGET_EXTRACTION.format(instruction=instruction, constraint=constraint)


def tool_prompt(instruction: str, constraint: str, response: str, targets) -> str:
    return TOOL_DESIGN.format(instruction=instruction, constraint=constraint, response=response[:RESPONSE_CHARS],
                              target=_as_text(targets))


def critique_prompt(instruction: str, constraint: str, response: str, targets, verification_results) -> str:
    return CRITIQUE.format(instruction=instruction, constraint=constraint, response=response[:RESPONSE_CHARS],
                           target=_as_text(targets), verification_results=_as_text(verification_results))


def _as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)


# ---- parsing -------------------------------------------------------------------------------------------------

class JudgeParseError(ValueError):
    """A judge output that could not be parsed: `what` says which part, `raw` keeps the whole output."""

    def __init__(self, what: str, raw: str):
        super().__init__(f"could not parse the judge output: {what} (output starts {raw[:80]!r})")
        self.what, self.raw = what, raw


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'", "\u00a0": " "})
_TRAILING_COMMA = re.compile(r",(\s*[\]}])")
_NONE_WORDS = {"none", "无", "n/a", ""}


def last_fence(text: str, lang: str) -> str | None:
    """The body of the last ```lang fence, else of the last fence with no language tag, else None."""
    fences = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for wanted in (lang, ""):
        bodies = [body for tag, body in fences if tag == wanted]
        if bodies:
            return bodies[-1].strip()
    return None


def loads_lenient(text: str):
    """JSON as LLMs write it: strict first, then without trailing commas, then with smart quotes straightened,
    then as a Python literal (single quotes, True/None). Raises ValueError when nothing works."""
    candidate = _TRAILING_COMMA.sub(r"\1", text)
    for attempt in (text, candidate, candidate.translate(_SMART)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            pass
    literal = re.sub(r"\b(true|false|null)\b", lambda m: {"true": "True", "false": "False", "null": "None"}[m[1]],
                     candidate.translate(_SMART))
    try:
        return ast.literal_eval(literal)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(f"not JSON: {e}") from None


def _json_list(text: str, what: str) -> list:
    body = last_fence(text, "json")
    if body is None:
        raise JudgeParseError(f"no ```json fence with the {what}", text)
    if len(body) > FENCE_CHARS:
        raise JudgeParseError(f"the {what} fence has {len(body)} characters (more than {FENCE_CHARS})", text)
    try:
        value = loads_lenient(body)
    except ValueError as e:
        raise JudgeParseError(f"the {what} fence is {e}", text) from None
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise JudgeParseError(f"the {what} fence is not a JSON list of objects", text)
    return value


def _field(item: dict, names: tuple, what: str, raw: str):
    lowered = {str(k).strip().lower().replace(" ", "_"): v for k, v in item.items()}
    for name in names:
        if name in lowered:
            return lowered[name]
    raise JudgeParseError(f"{what} lacks {names[0]!r} (keys: {sorted(item)})", raw)


_TYPES = {"universal": "universal", "specific": "specific", "全称": "universal", "特称": "specific"}


def parse_targets(text: str) -> list[dict]:
    """Table 13's output -> [{"counting_object": str, "type": "universal" | "specific"}, ...] (non-empty)."""
    targets = []
    for item in _json_list(text, "counting objects"):
        obj = _field(item, ("counting_object", "计数目标", "target"), "a counting object", text)
        kind = str(_field(item, ("type", "目标类型"), "a counting object", text)).strip().lower()
        if not isinstance(obj, str) or not obj.strip():
            raise JudgeParseError("a counting object is not a non-empty string", text)
        if kind not in _TYPES:
            raise JudgeParseError(f"counting object type {kind!r} is neither Universal nor Specific", text)
        targets.append({"counting_object": obj.strip(), "type": _TYPES[kind]})
    if not targets:
        raise JudgeParseError("the counting objects list is empty", text)
    return targets


def shipped_targets(instance: dict, j: int) -> list[dict] | None:
    """The counting objects a ScopeIF-Test instance ships for its constraint j (test.json's "targets", one fenced
    JSON list per constraint), None when absent or unparsable: then the judge extracts them itself."""
    shipped = instance.get("targets")
    if not isinstance(shipped, list) or j >= len(shipped) or not isinstance(shipped[j], str):
        return None
    try:
        return parse_targets(shipped[j])
    except JudgeParseError:
        return None


_TOOL_BLOCK = re.compile(r"\[The Start of Auxiliary Verification Tool\](.*?)\[The End of Auxiliary Verification Tool\]"
                         r"|\[辅助验证代码-开始\](.*?)\[辅助验证代码-结束\]", re.DOTALL | re.IGNORECASE)


def parse_tool(text: str, response: str | None = None) -> dict | None:
    """Table 15's output -> {"code", "name", "args"} (args by parameter name, in order), or None when the judge
    chose to write no tool. With `response`, an argument "ALL" becomes the whole response."""
    code = last_fence(text, "python")
    if code is None or code.lower() in _NONE_WORDS:
        block = _TOOL_BLOCK.search(text)
        inside = next(g for g in block.groups() if g is not None) if block else text
        if code is not None or re.sub(r"```[A-Za-z]*", "", inside).strip().lower() in _NONE_WORDS:
            return None
        raise JudgeParseError("no ```python fence with the tool", text)
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise JudgeParseError(f"the tool is not valid Python (line {e.lineno}: {e.msg})", text) from None
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not functions:
        raise JudgeParseError("the python fence defines no function", text)
    body = last_fence(text, "json")
    if body is None or body.lower() in _NONE_WORDS:
        if functions[0].args.args:
            raise JudgeParseError("no ```json fence with the input parameters", text)
        return {"code": code, "name": functions[0].name, "args": {}}
    args = {}
    for item in _json_list(text, "input parameters"):
        name = _field(item, ("parameter_name", "参数名", "name"), "a parameter", text)
        value = _field(item, ("parameter_value", "参数值", "value"), "a parameter", text)
        args[str(name)] = response if (value == "ALL" and response is not None) else value
    return {"code": code, "name": functions[0].name, "args": args}


_YES = ("the response satisfies the constraint", "人工智能助手的回复满足了该要求", "yes", "satisfied", "satisfies")
_NO = ("the response does not satisfy the constraint", "人工智能助手的回复没有满足该要求", "no", "not satisfied",
       "does not satisfy")
_VERDICT = re.compile(r"\[\[\s*([^\[\]\n]{1,80}?)\s*\]\]|\[\s*([^\[\]\n]{1,80}?)\s*\]|\*\*\s*([^*\n]{1,80}?)\s*\*\*")


def parse_verdict(text: str) -> bool:
    """The last bracketed or bold verdict ([[...]], [...], **...**) outside code fences that names satisfaction or
    violation; failing that, the last bare verdict phrase (the reference code accepts those too)."""
    prose = _FENCE.sub("", text)
    verdict = None
    for match in _VERDICT.finditer(prose):
        words = next(g for g in match.groups() if g is not None).strip().strip(".,!\"'").lower()
        if words in _YES:
            verdict = True
        elif words in _NO:
            verdict = False
    if verdict is None:
        lowered = prose.lower()
        found = [(lowered.rfind(phrase), phrase in _NO) for phrase in _YES[:2] + _NO[:2]]
        position, negative = max(found)
        verdict = None if position < 0 else not negative
    if verdict is None:
        raise JudgeParseError("no verdict such as [[The response satisfies the constraint]] or [[Yes]]", text)
    return verdict


def _number(value, what: str, raw: str) -> float:
    if isinstance(value, str):
        value = value.strip().lower().replace("infinity", "inf")
        value = {"+inf": "inf"}.get(value, value)
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number):
        raise JudgeParseError(f"{what} {value!r} is not a number", raw)
    return number


def parse_critique(text: str) -> dict:
    """Table 16's output -> {"verdict": bool, "records": [{"target", "required": [lo, hi], "actual"}, ...]}: the
    records (l_ij, u_ij, a_ij) of eq. 4 that the graded reward (eq. 5-6) needs."""
    verdict = parse_verdict(text)
    records = []
    for item in _json_list(text, "counting results"):
        target = _field(item, ("counting_object", "计数目标", "target"), "a counting result", text)
        bounds = _field(item, ("permissible_bounds", "要求数量", "required"), "a counting result", text)
        actual = _number(_field(item, ("actual_value", "实际数量", "actual"), "a counting result", text),
                         "actual value", text)
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise JudgeParseError(f"permissible bounds {bounds!r} are not a list [a, b]", text)
        lo, hi = (_number(b, "bound", text) for b in bounds)
        if lo > hi or math.isinf(actual):
            raise JudgeParseError(f"bounds [{lo}, {hi}] or actual value {actual} make no interval check", text)
        records.append({"target": str(target).strip(), "required": [lo, hi],
                        "actual": int(actual) if actual.is_integer() else actual})
    if not records:
        raise JudgeParseError("the counting results list is empty", text)
    return {"verdict": verdict, "records": records}
