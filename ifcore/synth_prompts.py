"""ScopeIF's instruction-synthesis prompts (paper appendix B, tables 9-12) and tolerant parsers of their outputs.

The templates are the English wording of the appendix, line for line; `{constraint schema}` is the taxonomy of
appendix A (`TAXONOMY`). The original (Chinese) templates live in thu-coai/ScopeIF
(data_construction/atomic_constraint_generation/prompts/, data_construction/constraint_crossover/prompts/); they
are not copied here.

Each parser takes the `[The Start of Construction Results] ... [The End of Construction Results]` block (else the
last ```json fence, as ifcore.judge.prompts does), forgives the usual LLM faults (fences inside the block, raw
newlines inside strings, trailing commas, smart or single quotes, loose key spelling, [High Quality] or **Low
Quality** verdicts) and raises JudgeParseError naming what could not be parsed. The list parsers return
(items, rejected): the usable items, and one line per item that was not usable (the caller counts them).
"""
from __future__ import annotations

import json
import re
from collections import Counter

from ifcore.judge.prompts import JudgeParseError, last_fence, loads_lenient
from ifcore.schema import SCOPE_SELECTORS, SCOPE_UNITS, TARGETS

# Appendix A, the taxonomy the prompts refer to as {constraint schema}.
TAXONOMY = """1. Scope: the Scope selector isolates governed segments by applying a selection operation to response units.
Response Units: (1) Entire Response: the complete response is treated as a single governed segment. (2) Structural Blocks: complete structural regions, such as sections, lists, tables, and JSON, Markdown, or LaTeX blocks. (3) Structural Elements: constituent elements within structural blocks, such as list items, table rows or cells, JSON key-value pairs, and Markdown headings. (4) Paragraphs. (5) Sentences. (6) Words. (7) Characters.
Selection Operation: (1) Global selects the entire response as a governed segment. For example, "The response must contain exactly three paragraphs" applies the constraint to the entire response. (2) Traversal selects every unit of a given kind. For example, "Each paragraph must contain at most three sentences" selects every paragraph. (3) Position selects units at specific locations. For example, "The first sentence must contain the keyword 'summary'" targets a sentence by its position. (4) Condition selects units satisfying a predicate. For example, "Sentences containing 'however' must contain at most 20 words" filters sentences by keyword occurrence.
Selection operations can be recursively composed to express nested scopes. For example, "The final sentence of every paragraph" combines Traversal over paragraphs with Position within each selected paragraph.

2. Target: the Target specifies objects measured within the selected Scope, in six major categories and 15 secondary categories:
(1) Capacity measures text length and natural-language units. (a) Text Length: the number of words or characters. (b) Unit Count: the number of natural-language units, such as paragraphs, sentences, or lines.
(2) Literals track occurrences of specific strings or literal classes. (a) Specific Strings: occurrences of exact characters, words, phrases, or sentences, such as the keyword "apple". (b) Literal Classes: occurrences of characters or words belonging to a class, such as digits, uppercase letters, emoji, and punctuation marks.
(3) Structure captures structured containers such as JSON or Markdown, their constituent members, and nesting depth. (a) Containers: complete structured objects, such as JSON objects, Markdown lists, and CSV tables. (b) Members: constituent elements within a structured object, such as JSON key-value pairs, table rows, and list items. (c) Nesting Depth: the hierarchical depth of a structured object.
(4) Checklist assesses the inclusion of mandatory elements and valid values. (a) Presence: inclusion of required components, such as JSON keys type, time, and country. (b) Validity: fields or values satisfying predefined specifications, such as an integer count field or a decimal price field.
(5) Pattern verifies conformity to boundary, skeleton, and surface templates. (a) Boundary: objects delimited by defined separators, such as text enclosed in quotes or paragraphs separated by ***. (b) Skeleton: strings matching a fixed-text skeleton with variable slots, such as "Question N: ... Answer: ...". (c) Surface: text spans matching a specific format, such as uppercase words or numbers with three decimal places.
(6) Relations characterize multi-object dependencies. (a) Ordering Relations: sequential arrangement of objects, such as names sorted alphabetically or events arranged chronologically. (b) Chaining Relations: dependencies between adjacent elements, such as the last word of one sentence matching the first word of the next. (c) Positional Relations: dependencies across designated positions, such as an acrostic formed by the first letters of consecutive lines.

3. Range: the Range specifies the admissible values of Target; the first four categories are absolute, the last two relative:
(1) One-Sided Bounds impose a minimum or maximum. For example, a response should contain at most 100 words. (2) Prohibition fixes the measured value at zero. For example, a response must not contain punctuation marks. (3) Equality prescribes an exact value. For example, a response should contain exactly five sentences. (4) Intervals define a fixed closed numeric range. For example, a response should contain between 80 and 120 words. (5) Comparison imposes an inequality relative to another response measurement. For example, each paragraph should contain more words than the preceding paragraph. (6) Arithmetic Relations enforce a precise equation relative to another response measurement. For example, the third paragraph should contain exactly twice as many words as the second paragraph.
This formulation also accommodates qualitative constraints. For example, "The response should be a valid JSON object" or "The response should end with 'happy birthday'" can be represented by defining a binary compliance Target with an Equality Range of one."""

ATOMIC = """I need to construct diverse and challenging objective constraints. In this task, each objective constraint is represented by three dimensions: Scope, Target, and Range. They dictate the permissible bounds of specific measurable objects within designated response segments. The taxonomy is provided as follows:

{constraint_schema}

I will provide you with a user instruction and a specific constraint category that contains the combination of these three dimensions. Your task is to add one or more suitable objective constraints to the user instruction that conform to the specified constraint category to construct new instructions. You must provide five distinct construction results. I will also provide previously generated instructions for the same category. You must ensure that the newly added constraints in the five results differ as much as possible from those in the previous results and remain diverse. The specific constraint category will be provided in the following format:
```
{{
"Scope": ... (one of "Global", "Traversal", "Position", and "Condition"),
"Nested Scope": ... (true or false),
"Target": ... (one of "Capacity", "Literals", "Structure", "Checklist", "Pattern", and "Relations"),
"Range": ... (one of "One-Sided Bounds", "Prohibition", "Equality", "Intervals", "Comparison", and "Arithmetic Relations")
}}
```

When completing this task, you must follow the principles below:

1. To integrate the original instruction and new constraints more naturally and coherently, you can appropriately revise the instruction. Objective constraints that are already present in the original instruction should preferably be removed or replaced. Moreover, you should focus on adding objective constraints and avoid subjective constraints such as topic or style. The newly constructed instruction must use the same language as the original instruction.

2. The newly added constraints must be natural, clear, understandable, reasonable, practical, and suitable for the new user instruction. They must not be contrived or impossible to fulfill. The objective constraints must not conflict with one another or with any other part of the instruction.

3. The new user instruction must contain complete information and must not omit any necessary content. You must ensure that a model can understand the meaning and complete information of the new instruction and fulfill its task when the original instruction is not visible.

4. The newly added constraints must be sufficiently challenging for LLMs. Thus, you should carefully design the Range according to the characteristics of the user instruction. As a general criterion, without the added constraint, LLMs' output should have a high probability of violating it, and satisfying the added constraint should require LLMs to adjust their response deliberately.

5. The newly added constraints in all five results must conform to the given constraint category.

6. The newly added constraints in all five results must differ from those in the previously generated instruction while also remaining diverse from each other. The response unit, implementations of Scope selector, secondary Target categories, Range values, and other unspecified details should be as diverse as possible. The final constraints should also be expressed in diverse ways. I will provide the distributions of response units and secondary Target categories for constraints from previously constructed instructions. You should prioritize constraints that have received less coverage when constructing the constraints for the current round.

7. The newly added constraints should use natural and varied expressions rather than being mechanically phrased as count-based statements. A qualitative constraint (e.g., valid JSON format or a specific text ending) is a special case of an Equality Range of one.

8. The newly added constraints should be concise and clear. Avoid appending commonsense explanations, definitions, or examples.

9. You are not limited to adding only one constraint and are encouraged to add multiple constraints from the given category to construct a more complex constraint. If multiple constraints are added, they must use closely related implementations either as parallel instances of the same atomic constraint or as constraints with a clear logical progression. They must not be unrelated constraints with substantially different forms. Their category must be the same.

You must construct five high-quality new instructions and provide both the new instructions and the newly added constraints. Strictly follow the output format below:
```python
[The Start of Analysis]
... (Provide a detailed analysis and plan explaining how to construct new instructions by adding diverse, high-quality, challenging objective constraints that differ from previously generated constraints and conform to the specified constraint category)
[The End of Analysis]

[The Start of Construction Results]
[
{{
"Original Instruction": ... (string; directly copy the original instruction without any modifications),
"New Instruction": ... (string; the constructed new instruction),
"Newly Added Constraints": ... (string; all constraints added to the original instruction. Directly extract segments from the new instruction without any modifications. The extraction must be complete and cover all added constraints),
"Scope": ... (string; use the format "Scope Selector(Response Unit)". The Scope Selector must be one of "Global", "Traversal", "Position", and "Condition". The Response Unit must be one of "Entire Response", "Structural Block", "Structural Element", "Paragraph", "Sentence", "Word", and "Character". Connect nested Scope with " -> "),
"Secondary Target Category": ... (string; one of Secondary Target Category)
}},
... (a list of dictionaries containing exactly five items)
]
[The End of Construction Results]
```

The user instruction, the specific constraint category, and the previously constructed instruction are provided below:

[The Start of User Instruction]
{instruction}
[The End of User Instruction]

[The Start of Constraint Category]
{category}
[The End of Constraint Category]

[The Start of Previous Constructed Instructions]
{existing_instructions}
[The End of Previous Constructed Instructions]

[The Start of Previous Response Unit Distribution]
{existing_response_unit_distribution}
[The End of Previous Response Unit Distribution]

[The Start of Previous Secondary Target Category Distribution]
{existing_secondary_target_category_distribution}
[The End of Previous Secondary Target Category Distribution]"""

CROSSOVER = """I need to construct diverse and challenging objective constraints. In this task, each objective constraint is represented by three dimensions: Scope, Target, and Range. They dictate the permissible bounds of specific measurable objects within designated response segments. The taxonomy is provided as follows:

{constraint_schema}

I will provide you with a user instruction and several objective constraints. Your task is to construct five more complex new instructions by adding suitable objective constraints to the user instruction in distinct ways. For each new instruction, you must add at least {constraint_number} constraints. The same constraint may be appropriately modified and added multiple times. The constructed instructions should be diverse and differ as much as possible. Each given constraint consists of an ID, its content, and its classification under the taxonomy described above. The format is as follows:
```
{{
"Constraint ID": ... (integer),
"Constraint Content": ... (string),
"Constraint Classification": {{
"Scope": ... (string),
"Primary Target": ... (one of "Capacity", "Literals", "Structure", "Checklist", "Pattern", and "Relations"),
"Secondary Target": ... (string),
"Range": ... (one of "One-Sided Bounds", "Prohibition", "Equality", "Intervals", "Comparison", and "Arithmetic Relations")
}}
}}
```

When completing this task, you must follow the principles below:

1. To integrate the original instruction and new constraints more naturally and coherently, you can appropriately revise the instruction. Objective constraints that are already present in the original instruction should preferably be removed or replaced. Every newly added constraint must be obtained by adjusting or modifying one of the given constraints. You are prohibited from inventing new constraints unrelated to the given constraints. Moreover, you should focus on adding objective constraints and avoid subjective constraints such as topic or style.

2. The newly constructed instructions must use the same language as the original user instruction. You must not add constraints that are specific to other languages and different from the newly constructed instructions.

3. The new user instruction must contain complete information and must not omit any necessary content. You must ensure that a model can understand the meaning and complete information of the new instruction and fulfill its task when the original instruction is not visible.

4. The newly added constraints must be natural, clear, understandable, reasonable, practical, and suitable for the new user instruction. They must not be contrived or impossible to fulfill. The objective constraints must not conflict with one another or with any other part of the instruction.

5. The newly added constraints must be sufficiently challenging for LLMs. Thus, you should carefully design the Range according to the characteristics of the user instruction. As a general criterion, without the added constraint, LLMs' output should have a high probability of violating it, and satisfying the added constraint should require LLMs to adjust their response deliberately.

6. The newly added constraints in all five results must be as diverse as possible and should collectively cover a diverse selection of the given constraints. The final constraints should also be expressed in diverse ways.

7. The newly added constraints should be concise and clear. Avoid appending commonsense explanations, definitions, or examples.

8. To reiterate, the same given constraint is not limited to being added only once. You are encouraged to modify and add the same constraint multiple times to construct more complex constraint forms.

You must generate five high-quality new user instructions and provide each new instruction together with all objective constraints it contains. Strictly follow the output format below:
```
[The Start of Analysis]
... (Provide a detailed analysis and plan explaining how to construct new instructions by adding diverse, high-quality, and challenging new constraints)
[The End of Analysis]

[The Start of Construction Results]
[
{{
"Instruction ID": ... (integer from 1 to 5),
"New User Instruction": ... (a new user instruction constructed by adding suitable constraints to the original instruction),
"All Added Constraints in the New User Instruction": [
{{
"Constraint Content": ... (string; completely extract one newly added constraint contained in the new instruction),
"Source Constraint ID": ... (integer)
}},
... (extract all newly added constraints in the new user instruction without any omissions. If the same given constraint is used multiple times, output multiple items with the same Source Constraint ID rather than merging them into one item)
]
}},
... (a list containing exactly five items, each of which contains a new user instruction and its newly added constraints)
]
[The End of Construction Results]
```

The user instruction and given constraints are provided below:

[The Start of User Instruction]
{instruction}
[The End of User Instruction]

[The Start of Given Constraints]
{given_constraints}
[The End of Given Constraints]"""

INSTRUCTION_QUALITY = """You are a professional artificial intelligence expert proficient in machine learning and natural language processing, with expertise in assessing the quality of user instructions. I will provide you with a user instruction. You must carefully analyze its logic and assess its quality. When assessing the quality of a user instruction, a high-quality instruction must satisfy all of the following conditions. Violation of any one condition means that the instruction should be considered low-quality. You must carefully analyze the instruction word by word to determine whether it satisfies each of the following conditions:

1. The intent is completely explicit.

2. The semantics are completely clear, and the language is coherent, fluent, and easy to understand, without ambiguity, incomprehensible statements, or grammatical errors.

3. It contains no erroneous content or incorrect information.

4. It does not exceed the capabilities of an offline text-only model; an offline text-only model must be able to complete the task. Being offline means that the model cannot access niche knowledge, such as obscure books, files, materials, or other information, nor can it access specialized knowledge, such as professional engineering knowledge or specialized books.

5. It contains no impossible constraints. Note that unconventional, highly difficult constraints are permitted, provided that they are not impossible to fulfill.

6. It contains no erroneous or disorganized logic.

7. Its internal logic is consistent, with no contradictory logic or constraints. No parts of the instruction conflict with or contradict one another, and all constraints can be fulfilled simultaneously.

8. The instruction and its accompanying materials are complete, with no missing content or data.

9. The user instruction provides all necessary data and information.

10. The user instruction must not contain any problem that requires multi-turn interaction to resolve. In other words, the AI assistant must be able to respond to the instruction completely within a single turn.

11. The user instruction is concise without redundant explanations.

You are prohibited from answering the user instruction. You only need to determine whether it is high-quality or low-quality. Strictly follow the format below when providing your analysis and conclusion:
```
Analysis: ... (Provide a comprehensive, detailed, and meticulous analysis)
Final Conclusion: ... (The final conclusion must be either "[[High Quality]]" or "[[Low Quality]]")
```

Here is the user instruction:

[The Start of User Instruction]
{instruction}
[The End of User Instruction]"""

CHECKLIST_QUALITY = """You are a professional artificial intelligence expert proficient in machine learning and natural language processing, with expertise in assessing the quality of user instructions. I will provide you with a user instruction containing objective constraints, together with the extraction results for those constraints. You must carefully analyze and thoroughly examine whether the extraction results are correct. Objective constraints dictate the permissible bounds of specific measurable objects within designated response segments. The taxonomy is provided as follows: {constraint_schema}

A high-quality extraction result must satisfy all of the following conditions. Violation of any one condition means that the extraction result should be considered low-quality. You must carefully analyze the extraction results word by word to determine whether they satisfy each of the following conditions:

1. All objective constraints in the user instruction are completely extracted, without containing any other constraints, and none of them are omitted.

2. All objective constraints in the user instruction are accurately extracted, and the meaning of each extracted constraint is completely consistent with the instruction.

3. Each objective constraint is extracted exactly once, with no duplicate extractions.

4. Each extracted objective constraint is expressed clearly, without any ambiguity.

5. There is no restriction on extraction granularity. Multiple constraints may either be combined into a single extracted item or divided into multiple extracted items.

You are prohibited from answering the user instruction. You only need to determine whether the extraction result is high-quality or low-quality. Strictly follow the format below when providing your analysis and conclusion:
```
Analysis: ... (Provide a comprehensive, detailed, and meticulous analysis)
Final Conclusion: ... (The final conclusion must be either "[[High Quality]]" or "[[Low Quality]]")
```

The user instruction and its corresponding objective constraint extraction results are provided below:

[The Start of User Instruction]
{prompt}
[The End of User Instruction]

[The Start of Extraction Results]
{constraint_checklist}
[The End of Extraction Results]"""

PROMPTS = {"atomic": ATOMIC, "crossover": CROSSOVER, "instruction_quality": INSTRUCTION_QUALITY,
           "checklist_quality": CHECKLIST_QUALITY}

# Table 9 names seven response units (the schema adds Line); the distribution the prompt shows counts these.
PROMPT_UNITS = ("Entire Response", "Structural Block", "Structural Element", "Paragraph", "Sentence", "Word",
                "Character")


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, indent=4)


def atomic_prompt(instruction: str, category: dict, history: list[dict]) -> str:
    """Table 9 for one combination `category` = {"Scope", "Nested Scope", "Target", "Range"}; `history` is the
    items parse_atomic returned for this combination in earlier iterations (shown with their distributions)."""
    units = Counter(_first_unit(h["scope"]) for h in history)
    seconds = Counter(h["secondary_target"] for h in history)
    previous = [{"Original Instruction": h["original_instruction"], "New Instruction": h["new_instruction"],
                 "Newly Added Constraints": h["constraint"], "Scope": h["scope"],
                 "Secondary Target Category": h["secondary_target"]} for h in history]
    return ATOMIC.format(constraint_schema=TAXONOMY, instruction=instruction, category=_dumps(category),
                         existing_instructions=_dumps(previous) if previous else "",
                         existing_response_unit_distribution=_dumps({u: units[u] for u in PROMPT_UNITS}),
                         existing_secondary_target_category_distribution=_dumps(
                             {s: seconds[s] for s in TARGETS.get(category.get("Target"), ())}))


def crossover_prompt(instruction: str, constraints: list[dict], k: int) -> str:
    """Table 10: `constraints` are pool entries {"text", "category"}, numbered 0.. in the order given."""
    given = [{"Constraint ID": i, "Constraint Content": c["text"],
              "Constraint Classification": {"Scope": c["category"]["scope"],
                                            "Primary Target": c["category"]["primary_target"],
                                            "Secondary Target": c["category"]["secondary_target"],
                                            "Range": c["category"]["range"]}} for i, c in enumerate(constraints)]
    return CROSSOVER.format(constraint_schema=TAXONOMY, constraint_number=k, instruction=instruction,
                            given_constraints=_dumps(given))


def instruction_quality_prompt(instruction: str) -> str:
    return INSTRUCTION_QUALITY.format(instruction=instruction)


def checklist_quality_prompt(prompt: str, constraints: list[str]) -> str:
    return CHECKLIST_QUALITY.format(constraint_schema=TAXONOMY, prompt=prompt, constraint_checklist=_dumps(constraints))


# ---- parsing -------------------------------------------------------------------------------------------------

_RESULTS = re.compile(r"\[The Start of Construction Results\](.*?)\[The End of Construction Results\]",
                      re.DOTALL | re.IGNORECASE)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCOPE_PART = re.compile(r"\s*(\w+)\s*\(\s*([^()]+?)\s*\)\s*")


def _results(text: str) -> list:
    """The JSON list of construction results: the last results block (its fence, if any), else the last json
    fence. Raw newlines inside strings are escaped first (LLMs write multi-line instructions that way)."""
    blocks = _RESULTS.findall(text)
    body = blocks[-1].strip() if blocks else last_fence(text, "json")
    if body is None:
        raise JudgeParseError("no [The Start of Construction Results] block or ```json fence", text)
    body = last_fence(body, "json") or body
    body = _STRING.sub(lambda m: m[0].replace("\n", "\\n").replace("\r", ""), body)
    try:
        value = loads_lenient(body)
    except ValueError as e:
        raise JudgeParseError(f"the construction results are {e}", text) from None
    if not isinstance(value, list):
        raise JudgeParseError("the construction results are not a JSON list", text)
    return value


def _get(item: dict, *names: str):
    """A field by any of `names`, matching keys case- and spacing-insensitively; None when absent."""
    keys = {re.sub(r"[\s_-]+", " ", str(k)).strip().lower(): v for k, v in item.items()}
    return next((keys[n] for n in names if n in keys), None)


def _text(value) -> str | None:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = " ".join(v.strip() for v in value)
    return value.strip() if isinstance(value, str) and value.strip() else None


def normalize_scope(scope) -> str | None:
    """A Scope label as the schema spells it ("Traversal(Paragraph) -> Position(Sentence)"), forgiving case,
    plural units and spacing; None when a part names no known selector or unit."""
    if not isinstance(scope, str):
        return None
    selectors = {s.lower(): s for s in SCOPE_SELECTORS}
    units = {u.lower(): u for u in SCOPE_UNITS} | {u.lower() + "s": u for u in SCOPE_UNITS}
    parts = []
    for part in scope.split("->"):
        m = _SCOPE_PART.fullmatch(part)
        if not m or m[1].lower() not in selectors or m[2].lower() not in units:
            return None
        parts.append(f"{selectors[m[1].lower()]}({units[m[2].lower()]})")
    return " -> ".join(parts)


def _first_unit(scope: str) -> str:
    m = _SCOPE_PART.match(scope.split("->")[0])
    return m[2] if m else ""


def parse_atomic(text: str) -> tuple[list[dict], list[str]]:
    """Table 9's output -> ([{"original_instruction", "new_instruction", "constraint", "scope",
    "secondary_target"}, ...], rejected). An item lacking its new instruction or constraints, or with a scope
    outside the taxonomy, is rejected (one line saying why); no usable item at all is a JudgeParseError."""
    items, rejected = [], []
    for i, item in enumerate(_results(text)):
        if not isinstance(item, dict):
            rejected.append(f"item {i + 1}: not an object")
            continue
        new = _text(_get(item, "new instruction", "new user instruction"))
        constraint = _text(_get(item, "newly added constraints", "newly added constraint", "constraints"))
        scope = normalize_scope(_get(item, "scope"))
        second = _text(_get(item, "secondary target category", "secondary target"))
        problem = ("no new instruction" if not new else "no newly added constraints" if not constraint else
                   f"scope {_get(item, 'scope')!r} is not Selector(Unit) parts of the taxonomy" if not scope else
                   "no secondary target category" if not second else None)
        if problem:
            rejected.append(f"item {i + 1}: {problem}")
            continue
        items.append({"original_instruction": _text(_get(item, "original instruction")) or "",
                      "new_instruction": new, "constraint": constraint, "scope": scope,
                      "secondary_target": second})
    if not items:
        raise JudgeParseError("no usable construction result (" + "; ".join(rejected or ["the list is empty"]) + ")",
                              text)
    return items, rejected


def _integer(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        return int(value.strip().lstrip("#"))
    return None


def parse_crossover(text: str) -> tuple[list[dict], list[str]]:
    """Table 10's output -> ([{"instruction", "constraints": [{"text", "source"}, ...]}, ...], rejected), where
    `source` is the Source Constraint ID (an int). Items without an instruction, without constraints or with a
    constraint lacking its content or an integer source are rejected; none usable is a JudgeParseError."""
    items, rejected = [], []
    for i, item in enumerate(_results(text)):
        if not isinstance(item, dict):
            rejected.append(f"item {i + 1}: not an object")
            continue
        instruction = _text(_get(item, "new user instruction", "new instruction"))
        added = _get(item, "all added constraints in the new user instruction", "all added constraints",
                     "added constraints", "constraints")
        if not instruction or not isinstance(added, list) or not added:
            rejected.append(f"item {i + 1}: " + ("no new user instruction" if not instruction else
                                                "no list of added constraints"))
            continue
        constraints = []
        for j, c in enumerate(added):
            content = _text(_get(c, "constraint content", "content")) if isinstance(c, dict) else None
            source = _integer(_get(c, "source constraint id", "source id", "constraint id")) if content else None
            if source is None:
                rejected.append(f"item {i + 1}: constraint {j + 1} lacks " +
                                ("its content" if not content else "an integer Source Constraint ID"))
                break
            constraints.append({"text": content, "source": source})
        else:
            items.append({"instruction": instruction, "constraints": constraints})
    if not items:
        raise JudgeParseError("no usable construction result (" + "; ".join(rejected or ["the list is empty"]) + ")",
                              text)
    return items, rejected


_VERDICT = re.compile(r"\[\[\s*(high|low)\s+quality\s*\]\]|\[\s*(high|low)\s+quality\s*\]|\*\*\s*(high|low)\s+"
                      r"quality\s*\*\*|final conclusion\s*:?\s*\**\s*(high|low)[\s-]+quality", re.IGNORECASE)


def parse_quality(text: str) -> bool:
    """Table 11/12's output -> True for [[High Quality]], False for [[Low Quality]]; the last verdict wins, and
    [High Quality], **Low Quality** or a bare "Final Conclusion: High Quality" count too."""
    verdicts = [next(g for g in m.groups() if g) for m in _VERDICT.finditer(text)]
    if not verdicts:
        raise JudgeParseError("no verdict such as [[High Quality]] or [[Low Quality]]", text)
    return verdicts[-1].lower() == "high"
