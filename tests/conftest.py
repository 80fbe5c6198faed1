"""Shared fixtures: the small RNNLM training step, imported and grouped once per session."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Prefect's temporary server waits 20 s by default; on a busy 2-core machine it needs more (a command's
# server, in a child process; cli/runtime.py sets the same 180 s for the CLI)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
#: The start-up limit of every test's Prefect server, in seconds. A limit, never a sleep: the harness
#: returns as soon as ``/api/health`` answers. ``prefect_test_harness()``'s own default is 30 s, which
#: a loaded 2-core CI machine exceeded (6 errors at setup, CI of stop 32).
PREFECT_STARTUP_LIMIT_S = 600
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
#: The suite's user-level home (``PLACEMENT_HOME``, :func:`tracking.placement_home`): a fresh temporary folder,
#: set before any project module is imported (the flows take their default out-dir from it at import), so no
#: test, and no command a test starts, writes into the real user data folder. Removed when the session ends.
SUITE_HOME = tempfile.mkdtemp(prefix="placement-home-")
os.environ["PLACEMENT_HOME"] = SUITE_HOME
#: Where the platform's user data folder points during the suite (Linux: ``XDG_DATA_HOME``), for a test that
#: unsets ``PLACEMENT_HOME``: inside the temporary home too.
SUITE_XDG_DATA_HOME = os.path.join(SUITE_HOME, "xdg-data")
os.environ["XDG_DATA_HOME"] = SUITE_XDG_DATA_HOME
# Prefect sets up its logging with logging.config.dictConfig when first imported, and dictConfig closes every
# handler already installed. absl's handler (TensorFlow installs it) then closes the stream it was given: under
# pytest's capture, a capture file pytest goes on using, so a module that imported TensorFlow before anything
# imported Prefect failed the next test with "I/O operation on closed file" (tests/test_learners_signals.py
# before tests/test_learners_benchmark.py). Prefect's logging comes first, before any absl handler exists.
import prefect.main  # noqa: E402,F401


#: One line per test module (the seconds since the suite began, and the load average) where ``CI`` is set, as CI
#: sets it, or ``PLACEMENT_TEST_TIMELINE=1``: a CI log cut off at its time limit then says where the time went.
TIMELINE = os.environ.get("CI", "").lower() in ("1", "true") or os.environ.get("PLACEMENT_TEST_TIMELINE") == "1"
_timeline: dict = {"config": None, "last": None, "t0": time.monotonic()}
#: Under CI (``CI=true``): the seconds after which the suite skips the slow tests it has not begun
#: (``PLACEMENT_TEST_BUDGET_S``; 0 or unset: none skipped). In one process the whole suite had grown to
#: 57-115 minutes on 2 cores by the load, CPU-bound (two workers were no faster), past CI's 90. The fast tests run
#: first, then the slow ones module by module from a module the commit picks; each one skipped says so,
#: and ``bash scripts/test.sh`` outside CI runs every test.
BUDGET_S = float(os.environ.get("PLACEMENT_TEST_BUDGET_S") or 0)


def _commit() -> str:
    """The checked-out commit (``git rev-parse HEAD``), or "" where there is none."""
    import subprocess

    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def pytest_collection_modifyitems(config, items):
    """With a time budget (``BUDGET_S``): the fast tests first, then the slow ones module by module, starting
    at a module picked by the commit (sha256 of ``git rev-parse HEAD``), so that successive commits' CI runs
    reach different slow tests; the same commit, the same order."""
    if BUDGET_S <= 0:
        return
    import hashlib

    fast = [item for item in items if item.get_closest_marker("slow") is None]
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    modules = list(dict.fromkeys(str(item.path) for item in slow))
    start = int(hashlib.sha256(_commit().encode()).hexdigest(), 16) % len(modules) if modules else 0
    rank = {module: (i - start) % len(modules) for i, module in enumerate(modules)}
    slow.sort(key=lambda item: rank[str(item.path)])  # stable: the order inside a module is kept
    items[:] = fast + slow


def pytest_runtest_setup(item):
    """Skip a slow test that would begin after the suite's time budget (``BUDGET_S``) is spent."""
    elapsed = time.monotonic() - _timeline["t0"]
    if BUDGET_S > 0 and elapsed > BUDGET_S and item.get_closest_marker("slow") is not None:
        pytest.skip(f"the suite's time budget is spent (PLACEMENT_TEST_BUDGET_S={BUDGET_S:.0f} s, {elapsed:.0f} s "
                    "gone): run it without one, `bash scripts/test.sh` outside CI")


def pytest_configure(config):
    """Keep the config for the timeline's terminal writer."""
    _timeline["config"] = config


def pytest_runtest_logstart(nodeid, location):
    """Print the timeline's line as each run of a test module's tests begins: under the budget a module's
    fast tests and its slow ones come apart, so its slow ones get a line of their own."""
    module = nodeid.split("::", 1)[0]
    if not TIMELINE or module == _timeline["last"] or _timeline["config"] is None:
        return
    _timeline["last"] = module
    reporter = _timeline["config"].pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        load = os.getloadavg()[0]
        reporter.write("\n")  # after the module's dots (write_line starts no new line in -q's progress)
        reporter.write_line(f"[{time.monotonic() - _timeline['t0']:5.0f} s, load {load:4.1f}] {module}")


@pytest.fixture(autouse=True)
def _suite_home(monkeypatch):
    """Every test starts with ``PLACEMENT_HOME`` and ``XDG_DATA_HOME`` at the suite's temporary folders
    (restored if an earlier test changed them without ``monkeypatch``)."""
    monkeypatch.setenv("PLACEMENT_HOME", SUITE_HOME)
    monkeypatch.setenv("XDG_DATA_HOME", SUITE_XDG_DATA_HOME)
    yield


def pytest_sessionfinish(session, exitstatus):
    """Remove the suite's temporary home."""
    import shutil

    shutil.rmtree(SUITE_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def rnnlm_small():
    """``compgraph.prepare.prepare("rnnlm", "small")``: a real TF training step (~1.6k ops, 61 groups)."""
    from compgraph.prepare import prepare

    return prepare("rnnlm", "small")


@pytest.fixture(scope="session")
def k80x2():
    from cluster.spec import load_cluster

    return load_cluster("k80x2")


def one_line_exit_2(args: list[str], needle: str):
    """``placement ARGS`` in this process must fail as bad input does: exit 2, one line holding
    ``needle``, no traceback. Returns typer's ``Result`` (``.output``)."""
    from typer.testing import CliRunner

    from cli.main import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, (r.output, r.exception)
    assert needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert "Traceback" not in r.output
    return r


def default_sigint() -> None:
    """``preexec_fn`` of a child a test stops with SIGINT: SIGINT back to its default before the
    child starts, so Python installs its KeyboardInterrupt handler even when the tests run with
    SIGINT ignored (a shell's background job, ``(cmd &)``: the child inherits the ignore and the
    signal would do nothing)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def prefect_harness():
    """Prefect's own test harness (a temporary server on a temporary SQLite database) with the
    start-up limit :data:`PREFECT_STARTUP_LIMIT_S`. Every test module's Prefect fixture goes
    through this (``tests/test_test_hygiene.py`` checks it)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=PREFECT_STARTUP_LIMIT_S):
        yield
