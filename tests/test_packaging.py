"""pyproject.toml declares every third-party package the project's code imports, and
requirements.lock pins every declared one (the set-up installs from the lock)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["baselines", "cli", "cluster", "compgraph", "flows", "placer", "tasks", "tracking"]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _imported_modules() -> dict[str, str]:
    """Top-level third-party module -> a file that imports it (the project's packages only)."""
    out: dict[str, str] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
                        out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_every_imported_package_is_declared_and_locked():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]} | {_name(r) for r in project["optional-dependencies"]["test"]}
    distributions = md.packages_distributions()
    missing = {}
    for module, where in _imported_modules().items():
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        assert dists, f"{module} (imported by {where}) is not installed"
        if not dists & declared:
            missing[module] = where
    assert missing == {}, f"imported but not declared in pyproject.toml: {missing}"
    locked = {_name(line) for line in (ROOT / "requirements.lock").read_text().splitlines()
              if line.strip() and not line.startswith(("#", "-"))}
    assert declared - locked == set(), f"declared but not pinned in requirements.lock: {declared - locked}"
