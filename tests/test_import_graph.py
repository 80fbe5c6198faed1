"""The project's modules import each other without a circle: neither at module level nor through the
imports inside functions (an import under ``if TYPE_CHECKING`` never runs and is left out). A function-level
import that closes a circle only hides it: the two modules still cannot be understood apart."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["baselines", "cli", "cluster", "compgraph", "flows", "placer", "tasks", "tracking"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module):
    """Import nodes executed when the module is imported: the module body, and the bodies of
    module-level ``try``/``if``/``with`` blocks, except ``if TYPE_CHECKING``."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
        elif isinstance(node, ast.With):
            stack += node.body


def _all_imports(tree: ast.Module):
    """Every import node of the module, inside functions and classes too (except ``if TYPE_CHECKING``)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
            yield node


def import_graph(function_level: bool = False) -> nx.DiGraph:
    """Module -> the project modules it imports at module level (a package's ``__init__`` counts
    as the package; ``from pkg import sub`` imports ``pkg`` and, if it is a module, ``pkg.sub``;
    importing ``a.b.c`` imports ``a`` and ``a.b`` too, except the importing module's own parents,
    which Python is already importing when it runs); ``function_level``: the imports inside functions too."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        for node in (_all_imports(tree) if function_level else _top_level_imports(tree)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            for target in targets:
                # importing a.b.c runs a, a.b and a.b.c
                parts = target.split(".")
                for k in range(1, len(parts) + 1):
                    mod = ".".join(parts[:k])
                    # a module's own parent packages are already importing when it runs: no edge to them
                    if mod in files and mod != name and not name.startswith(mod + "."):
                        g.add_edge(name, mod)
    return g


@pytest.mark.parametrize("function_level", [False, True], ids=["module-level", "function-level-too"])
def test_no_import_circle(function_level):
    g = import_graph(function_level)
    assert g.number_of_nodes() > 50 and g.number_of_edges() > 100  # the graph is really built
    cycles = sorted((sorted(c) for c in nx.simple_cycles(g)), key=len)
    assert cycles == [], f"{len(cycles)} import circle(s), e.g. {cycles[:5]}"


def test_the_guard_sees_a_function_level_circle(tmp_path, monkeypatch):
    """A circle closed only by an import inside a function is found (so the guard can fail)."""
    import sys

    pkg = tmp_path / "cluster"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cluster import b\n")
    (pkg / "b.py").write_text("def f():\n    from cluster import a\n    return a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ["cluster"])
    assert list(nx.simple_cycles(import_graph(False))) == []
    assert sorted(map(sorted, nx.simple_cycles(import_graph(True)))) == [["cluster.a", "cluster.b"]]
