"""Shared fixtures: the small RNNLM training step, imported and grouped once per session."""

from __future__ import annotations

import os
import sys
import tempfile
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
