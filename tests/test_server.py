"""``placement server start|stop|status`` (:mod:`tracking.server`): one Prefect server kept running,
which commands use instead of starting a temporary server of their own; with no server recorded,
or a dead one, the temporary server stays the default. Every wait is on a handshake (the server's
``/api/health``, a process's exit), under a start-up limit that fits a loaded machine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_no_record_or_a_dead_server_leaves_the_temporary_server_as_the_default(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import cli.main
    from cli.runtime import check_prefect_api
    from tracking.server import ServerState, _write_state, running_api_url, state_path

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert running_api_url() is None and check_prefect_api() is None  # nothing recorded: a temporary server
    r = CliRunner().invoke(cli.main.app, ["server", "status"])
    assert r.exit_code == 1 and "not running" in r.output, r.output
    # a record left by a server that died (its process gone, its port closed): not used, and stop removes it
    port = _free_port()
    _write_state(ServerState(url=f"http://127.0.0.1:{port}", api_url=f"http://127.0.0.1:{port}/api", port=port,
                             pid=_dead_pid(), prefect_home=str(tmp_path / "prefect"), log=str(tmp_path / "log"), started=0.0))
    assert state_path() == tmp_path / "prefect-server.json" and state_path().is_file()
    assert running_api_url() is None and check_prefect_api() is None
    r = CliRunner().invoke(cli.main.app, ["server", "status"])
    assert r.exit_code == 1 and "its process is gone" in r.output, r.output
    r = CliRunner().invoke(cli.main.app, ["server", "stop"])
    assert r.exit_code == 0 and "stopped" in r.output and not state_path().exists(), r.output
    r = CliRunner().invoke(cli.main.app, ["server", "stop"])
    assert r.exit_code == 0 and "no Prefect server recorded" in r.output, r.output


FLOW = (
    "from prefect import flow\n"
    "from cli.runtime import prefect_api\n"
    "@flow(name='server-check')\n"
    "def check():\n"
    "    return 1\n"
    "with prefect_api() as url:\n"  # what every placement command runs its flow under (cli.runtime.run_flow)
    "    check()\n"
    "    print(url)\n"
)


@pytest.mark.slow
def test_start_a_commands_flow_runs_on_it_then_stop(tmp_path):
    import httpx

    from tracking.server import alive

    env = {**os.environ, "PLACEMENT_HOME": str(tmp_path / "home"), "PREFECT_HOME": str(tmp_path / "prefect"),
           "PYTHONPATH": str(ROOT), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300"}
    env.pop("PREFECT_API_URL", None)
    record = tmp_path / "home" / "prefect-server.json"
    port = _free_port()

    def placement(*args, timeout=420):
        return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=timeout)

    try:
        r = placement("server", "start", "--port", str(port))  # returns once /api/health answers
        assert r.returncode == 0, r.stderr
        state = json.loads(record.read_text())
        api = f"http://127.0.0.1:{port}/api"
        assert state["api_url"] == api and state["url"] in r.stdout and alive(state["pid"])
        assert httpx.get(f"{api}/health", timeout=10).status_code == 200
        r = placement("server", "status")
        assert r.returncode == 0 and api in r.stdout, r.stdout + r.stderr
        # a command's flow runs on it, with no temporary server of its own
        r = subprocess.run([sys.executable, "-c", FLOW], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == api and "temporary server" not in r.stderr, r.stdout + r.stderr
        assert "placement server start" in r.stderr  # it says which server it uses
        runs = httpx.post(f"{api}/flow_runs/filter", timeout=30, json={"flows": {"name": {"any_": ["server-check"]}}}).json()
        assert [run["state_type"] for run in runs] == ["COMPLETED"]
        # a second start keeps the running server
        r = placement("server", "start", "--port", str(port))
        assert r.returncode == 0 and "already running" in r.stdout and json.loads(record.read_text())["pid"] == state["pid"]
    finally:
        r = placement("server", "stop", timeout=120)
        if record.exists() and alive(json.loads(record.read_text())["pid"]):  # stop failed: end what this test started
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
    assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
    assert not record.exists() and not alive(state["pid"])
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{api}/health", timeout=5)
