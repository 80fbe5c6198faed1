"""Rules the test suite keeps so that it passes on a loaded 2-core CI machine (DEVELOPERS.md: servers
get a start-up limit that fits a loaded machine)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _calls_to(name: str, path: Path) -> list[int]:
    """Line numbers of the calls to a function called ``name`` (``f(...)`` or ``mod.f(...)``) in ``path``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called == name:
                lines.append(node.lineno)
    return lines


def test_prefect_servers_start_through_the_shared_harness():
    """``prefect_test_harness()`` waits 30 s for its server by default; CI's loaded machine took longer
    and 6 tests errored at setup. Every test module goes through ``conftest.prefect_harness``, whose
    limit is ``conftest.PREFECT_STARTUP_LIMIT_S``."""
    from conftest import PREFECT_STARTUP_LIMIT_S

    direct = {p.name: _calls_to("prefect_test_harness", p) for p in sorted(TESTS.glob("*.py")) if p.name != "conftest.py"}
    assert {name: lines for name, lines in direct.items() if lines} == {}
    assert _calls_to("prefect_test_harness", TESTS / "conftest.py"), "conftest.prefect_harness calls Prefect's harness"
    assert PREFECT_STARTUP_LIMIT_S >= 180
    users = [p.name for p in TESTS.glob("test_*.py") if _calls_to("harness", p)]
    assert len(users) >= 8, users  # the modules that run flows under Prefect
