"""The deployments of prefect.yaml, as a user runs them from the UI: a local Prefect server,
``prefect work-pool create``, ``prefect --no-prompt deploy --all``, ``prefect deployment run`` of the
experiment and of the sweep, and a process worker that runs them (``--run-once``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``prefect server start`` on 127.0.0.1 with its own PREFECT_HOME; waits (up to 300 s) for /api/health."""
    import httpx

    home = tmp_path_factory.mktemp("prefect-server-home")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONPATH": str(ROOT), "PREFECT_UI_ENABLED": "false",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=home)
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, (home / "server.log").read_text()[-2000:]
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("prefect server did not answer /api/health within 300 s")
    yield {**env, "PREFECT_API_URL": api}
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def _prefect(env, *args, timeout=300):
    r = subprocess.run([PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"prefect {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.slow
def test_deploy_all_and_run_experiment_and_sweep_through_a_worker(server, tmp_path):
    env = server
    _prefect(env, "work-pool", "create", "placement", "--type", "process")
    out = _prefect(env, "--no-prompt", "deploy", "--all")
    for name in ("demo", "nightly-sweep", "calibrate", "fidelity", "train"):
        assert name in out, out
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            deployments = {d.name: d for d in client.read_deployments()}
            assert set(deployments) >= {"demo", "nightly-sweep", "reproduce", "calibrate", "fidelity", "train", "distributed"}
            assert [s.schedule.cron for s in deployments["nightly-sweep"].schedules] == ["0 3 * * *"]
            # the UI form: dropdowns (enums) and help text
            schema = deployments["demo"].parameter_openapi_schema["properties"]
            assert "k80x2" in json.dumps(schema["cluster"]) and schema["model"]["enum"][0] == "rnnlm"
            assert schema["budget"]["description"]

    runs = tmp_path / "runs"
    common = ["-p", "budget=4", "-p", 'methods=["single_gpu", "post"]', "-p", f"out_dir={runs}"]
    _prefect(env, "deployment", "run", "placement-experiment/demo", *common, "-p", "train_steps=0")
    _prefect(env, "deployment", "run", "placement-sweep/nightly-sweep", *common, "-p", 'models=["rnnlm"]',
             "-p", "size=small", "-p", 'clusters=["k80x2"]')
    _prefect(env, "worker", "start", "--pool", "placement", "--run-once", timeout=900)

    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            states = {(r.name, r.state_type.value) for r in client.read_flow_runs() if r.parent_task_run_id is None}
            flows = {client.read_flow(r.flow_id).name: r.state_type.value for r in client.read_flow_runs()
                     if r.deployment_id is not None}
    assert flows == {"placement-experiment": "COMPLETED", "placement-sweep": "COMPLETED"}, states
    folders = list((runs / "runs").iterdir())
    assert len(folders) == 2 and all((f / "results.json").exists() for f in folders)
    assert list((runs / "sweeps").iterdir())  # the sweep's comparison table
