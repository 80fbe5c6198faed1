"""A run killed with SIGKILL cannot end its MLflow runs; the next run of the same settings does."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path) -> dict:
    env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONPATH": str(ROOT),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}
    env.pop("PREFECT_API_URL", None)
    return env


def _statuses(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as con:
        return sorted(con.execute("select name, status from runs"))


@pytest.mark.slow
def test_sigkill_then_resume_leaves_no_run_of_those_settings_running(tmp_path):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "cli.main", "experiment", "--methods", "single_gpu,post", "--budget", "2400",
            "--train-steps", "0", "--out-dir", str(out)]
    proc = subprocess.Popen(args, env=_env(tmp_path / "home"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: the kill takes its Prefect server too
    log = out / "placement-logs" / "rnnlm-small-k80x2-2017-post-seed0-budget2400.jsonl"
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_bytes().splitlines()) > 1:  # the search has begun: a handshake
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    killed = _statuses(out / "mlflow.db")
    assert ("post", "RUNNING") in killed and len(killed) == 3, killed  # parent, single_gpu, post: left RUNNING
    r = subprocess.run([*args, "--resume"], env=_env(tmp_path / "home"), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # without a terminal (a pipe), one line as each stage starts and ends, the first one before any work
    lines = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert lines[0].split("] ", 1)[1].startswith("experiment: rnnlm (small) on k80x2, env sim"), lines[:3]
    for done in ("preprocess: done", "search post: done", "evaluation (sim): done", "record: done"):
        assert any(done in line for line in lines), (done, lines)
    after = _statuses(out / "mlflow.db")
    assert [s for _, s in after].count("RUNNING") == 0, after
    assert [s for _, s in after].count("KILLED") == 3 and [s for _, s in after].count("FINISHED") == 3, after
