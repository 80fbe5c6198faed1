"""The project's modules import each other without a circle (module-level imports; an import inside a
function, or under ``if TYPE_CHECKING``, runs later and is left out)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

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


def import_graph() -> nx.DiGraph:
    """Module -> the project modules it imports at module level (a package's ``__init__`` counts
    as the package; ``from pkg import sub`` imports ``pkg`` and, if it is a module, ``pkg.sub``;
    importing ``a.b.c`` imports ``a`` and ``a.b`` too, except the importing module's own parents,
    which Python is already importing when it runs)."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _top_level_imports(ast.parse(path.read_text())):
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


def test_no_import_circle():
    g = import_graph()
    assert g.number_of_nodes() > 50 and g.number_of_edges() > 100  # the graph is really built
    cycles = sorted((sorted(c) for c in nx.simple_cycles(g)), key=len)
    assert cycles == [], f"{len(cycles)} import circle(s), e.g. {cycles[:5]}"
