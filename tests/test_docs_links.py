"""Every relative link of the README and of docs/ resolves to a file or folder of the repository, and the README
stays short: what it is, how to start, where the rest is (docs/README.md is the index)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # links inside code are text


def broken_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file that name nothing on disk (anchors and URLs aside)."""
    targets = LINK.findall(CODE.sub("", path.read_text(encoding="utf-8")))
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z][a-z+.-]*:|#", t)]
    return [t for t in relative if t and not (path.parent / t).exists()]


def test_every_relative_link_resolves():
    assert {p.relative_to(ROOT).as_posix(): broken_links(p) for p in DOCUMENTS if broken_links(p)} == {}


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [anchor](there.md#part) [web](https://example.org/x) [gone](missing.md)\n"
                    "`[code](not-a-link.md)`\n")
    assert broken_links(page) == ["missing.md"]


def test_every_docs_page_is_in_the_index_and_the_readme_is_short():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert {name for name in pages if f"]({name})" not in index} == set()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert not re.search(r"\bissues? \d+", readme, re.I)  # the tracker's numbers mean nothing to a reader
    assert "](docs/README.md)" in readme and (ROOT / "LICENSE").is_file() and (ROOT / "CITATION.cff").is_file()
