"""The house's import rules, read from the package source with ast (nothing imported): no import circle between
ifcore's modules, lazy imports inside functions included (a circle hidden in a function still ties two modules
together), and ifcore/train/ never imports ifcore/run/ (run/ drives the trainer; the trainer knows no backend)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its __init__)."""
    found = {}
    for path in sorted((root / "ifcore").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the ifcore modules it imports anywhere in its source. `from ifcore.x import y` counts as importing
    ifcore.x.y when that is a module. A module's own enclosing packages are left out: Python imports them before
    the module in any case, so they close no circle of their own."""
    mods = modules(root)
    graph = {}
    for name, path in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ifcore":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    targets.add(sub if sub in mods else node.module)
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}: a relative import; the package imports absolutely")
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circles_finds_a_circle_of_three_and_ignores_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_between_ifcore_modules():
    assert circles(import_graph(ROOT)) == []


def test_the_check_sees_a_lazy_import_inside_a_function(tmp_path):
    pkg = tmp_path / "ifcore"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from ifcore import b\n")
    (pkg / "b.py").write_text("def f():\n    from ifcore.a import x\n    return x\n")
    assert circles(import_graph(tmp_path)) == [["ifcore.a", "ifcore.b"]]


def test_train_never_imports_run():
    graph = import_graph(ROOT)
    wrong = {name: sorted(t for t in targets if t == "ifcore.run" or t.startswith("ifcore.run."))
             for name, targets in graph.items() if name.startswith("ifcore.train")}
    assert {name: t for name, t in wrong.items() if t} == {}
