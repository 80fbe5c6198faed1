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


def test_a_time_budget_skips_only_the_slow_tests_not_begun_and_orders_the_fast_ones_first(monkeypatch, request):
    """CI's 90 minutes: with ``PLACEMENT_TEST_BUDGET_S`` spent, a slow test is skipped saying why, a fast one runs."""
    import pytest

    import conftest

    fast_item, slow_item = request.node, _Marked(request.node, slow=True)
    monkeypatch.setattr(conftest, "BUDGET_S", 10.0)
    monkeypatch.setitem(conftest._timeline, "t0", conftest.time.monotonic() - 11.0)
    conftest.pytest_runtest_setup(fast_item)  # a fast test runs whatever the time
    with pytest.raises(pytest.skip.Exception, match="time budget is spent .*PLACEMENT_TEST_BUDGET_S=10 s"):
        conftest.pytest_runtest_setup(slow_item)
    monkeypatch.setitem(conftest._timeline, "t0", conftest.time.monotonic())
    conftest.pytest_runtest_setup(slow_item)  # inside the budget: runs
    slow_b = _Marked(request.node, slow=True, path="tests/test_b.py")
    slow_a1, slow_a2 = (_Marked(request.node, slow=True, path="tests/test_a.py") for _ in range(2))
    orders = []
    for commit in ("c1", "c5", "c1"):  # sha256 mod 2: 0, 1, 0
        monkeypatch.setattr(conftest, "_commit", lambda commit=commit: commit)
        items = [slow_a1, fast_item, slow_b, slow_a2]
        conftest.pytest_collection_modifyitems(None, items)
        assert items[0] is fast_item
        assert items.index(slow_a2) - items.index(slow_a1) == 1  # a module's tests together, in their order
        orders.append(tuple(id(i) for i in items))
    assert orders[0] == orders[-1] and len(set(orders)) == 2  # the commit picks the first module; the same commit, the same order
    monkeypatch.setattr(conftest, "BUDGET_S", 0.0)  # no budget (outside CI): the order is kept, nothing skipped
    items = [slow_item, fast_item]
    conftest.pytest_collection_modifyitems(None, items)
    assert items == [slow_item, fast_item]
    monkeypatch.setitem(conftest._timeline, "t0", conftest.time.monotonic() - 1e6)
    conftest.pytest_runtest_setup(slow_item)


class _Marked:
    """A stand-in item whose ``get_closest_marker("slow")`` says it is slow."""

    def __init__(self, item, slow: bool, path: str = "tests/test_x.py"):
        self.item, self.slow, self.path = item, slow, path

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else self.item.get_closest_marker(name)
