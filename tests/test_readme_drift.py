"""The README and docs/ cannot drift from the committed renderings: every number in a block marked
`<!-- numbers from papermill_runs/NAME.ipynb -->` ... `<!-- end numbers -->` (a decimal, or a count with a
thousands separator) must appear in that rendering's outputs (its printed text, tables and papermill's run time),
sign aside, so a number edited by hand, or left from an earlier run, fails here."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- numbers from (papermill_runs/[\w.]+\.ipynb) -->(.*?)<!-- end numbers -->", re.S)
NUMBER = re.compile(r"(?<![\w.,])[+-]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w]|\.\d)")
ANY_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")  # what a rendering shows: plain integers too ("1108")


def rendering_numbers(path: Path) -> set[str]:
    """Every number the executed notebook shows (thousands separators and signs dropped), and its run time in
    seconds and in minutes."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            for value in [out.get("text", "")] + [out.get("data", {}).get(k, "") for k in ("text/plain", "text/html",
                                                                                          "text/markdown")]:
                parts.append("".join(value) if isinstance(value, list) else value)
    seconds = nb["metadata"].get("papermill", {}).get("duration")
    if seconds:
        parts += [f"{seconds:.0f}", f"{seconds / 60:.1f}"]
    return {n.replace(",", "") for n in ANY_NUMBER.findall(" ".join(parts))}


def drift(readme: str) -> list[str]:
    """The README numbers that their rendering does not show, as `rendering: number`."""
    missing = []
    for name, text in BLOCK.findall(readme):
        shown = rendering_numbers(ROOT / name)
        missing += [f"{name}: {n}" for n in NUMBER.findall(text) if n.lstrip("+-").replace(",", "") not in shown]
    return missing


# Where the marked blocks live: the README, and the results it points to (moved to docs/ with their marks).
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_marked_number_is_in_its_rendering():
    texts = {path.name: path.read_text(encoding="utf-8") for path in DOCUMENTS}
    blocks = [block for text in texts.values() for block in BLOCK.findall(text)]
    assert {name for name, _ in blocks} == {f"papermill_runs/{p.name}" for p in (ROOT / "papermill_runs").glob("0[1-4]*")}
    assert sum(len(NUMBER.findall(text)) for _, text in blocks) > 50  # the primaries and the decided lines
    assert {name: drift(text) for name, text in texts.items() if drift(text)} == {}


def test_a_number_changed_by_hand_is_caught():
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    name, text = next(block for block in BLOCK.findall(page) if "02_raif" in block[0])
    shown = rendering_numbers(ROOT / name)
    for old in NUMBER.findall(text)[:5]:
        new = old[:-1] + str((int(old[-1]) + 1) % 10)
        if new.lstrip("+-").replace(",", "") not in shown:
            assert f"{name}: {new}" in drift(page.replace(old, new, 1))
            return
    pytest.fail("no number of the 02 block could be changed into one its rendering lacks")
