"""The deployments of prefect.yaml, as a user runs them from the UI: a local Prefect server,
``prefect work-pool create``, ``prefect --no-prompt deploy --all``, ``prefect deployment run`` of every
deployment (demo, nightly-sweep, distributed, reproduce, calibrate, fidelity, train, compare-learners) with tiny
parameters, and one process worker that runs them all (``--run-once``)."""

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


#: every deployment of prefect.yaml with the smallest parameters that still exercise it (where its results go added
#: per run: OUT_PARAMS)
RUNS = {
    "placement-experiment/demo": ["-p", "budget=4", "-p", 'methods=["single_gpu", "rl"]', "-p", "train_steps=0",
                                  "-p", 'learners={"rl": {"k": 2}}'],
    "placement-sweep/nightly-sweep": ["-p", 'models=["rnnlm"]', "-p", 'clusters=["k80x2"]'],
    "placement-experiment/distributed": ["-p", "budget=4", "-p", 'methods=["single_gpu", "post", "hierarchical"]',
                                         "-p", 'ray={"controllers": 1, "workers": 1}', "-p", "train_steps=0",
                                         "-p", 'learners={"hierarchical": {"k": 2, "hidden_size": 16}}'],
    "placement-reproduce/reproduce": ["-p", 'models=["rnnlm"]', "-p", "gpus=[2]", "-p", "size=small", "-p", "budget=0"],
    "placement-calibrate/calibrate": ["-p", "steps=2"],
    "placement-fidelity/fidelity": ["-p", "random=2", "-p", "steps=2", "-p", "calibrate_steps=2", "-p", "budget=4"],
    "placement-train/train": ["-p", "steps=2", "-p", "method=single_cpu"],
    "compare-learners/compare-learners": ["-p", "budget=4", "-p", 'learners=["rl", "post"]', "-p", "seeds=[0]"],
}


def _run_log_tail(client, flow_run_id, lines: int = 40) -> str:
    """The last ``lines`` log lines the flow run sent to the Prefect API (its traceback among them)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=lines,
                            sort=LogSort.TIMESTAMP_DESC)
    return "\n".join(f"{log.level} {log.message}" for log in reversed(logs))


def _finished_mlflow_runs(out: Path) -> dict[str, int]:
    """experiment name -> FINISHED runs in ``out/mlflow.db``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    return {e.name: sum(r.info.status == "FINISHED" for r in client.search_runs([e.experiment_id], max_results=100))
            for e in client.search_experiments()}


@pytest.mark.slow
def test_deploy_all_and_run_every_deployment_through_one_worker(server, tmp_path):
    env = server
    _prefect(env, "work-pool", "create", "placement", "--type", "process")
    out = _prefect(env, "--no-prompt", "deploy", "--all")
    for name in ("demo", "nightly-sweep", "calibrate", "fidelity", "train"):
        assert name in out, out
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            deployments = {d.name: d for d in client.read_deployments()}
            assert set(deployments) >= {"demo", "nightly-sweep", "reproduce", "calibrate", "fidelity", "train", "distributed",
                                        "compare-learners"}
            assert {f"{client.read_flow(d.flow_id).name}/{n}" for n, d in deployments.items()} == set(RUNS)
            assert [s.schedule.cron for s in deployments["nightly-sweep"].schedules] == ["0 3 * * *"]
            # the UI form: dropdowns (enums) and help text (every flow: tests/test_flow_schema.py)
            schema = deployments["demo"].parameter_openapi_schema
            assert "k80x2" in json.dumps(schema["properties"]["cluster"]) and schema["properties"]["budget"]["description"]
            assert schema["definitions"]["BenchmarkSource"]["properties"]["model"]["enum"][0] == "rnnlm"
            assert "controllers" in schema["definitions"]["RayOptions"]["properties"]  # a section of the form

    # one run of every deployment, as `prefect deployment run` from a terminal or the UI's Run button;
    # one process worker (--run-once) takes every scheduled run it finds and runs them side by side
    outs = {name: tmp_path / name.split("/")[1] for name in RUNS}
    for name, params in RUNS.items():
        where = ["-p", f"out_dir={outs[name]}"]
        if name.endswith("/calibrate"):
            where = ["-p", f"out={outs[name] / 'table.json'}"]
        elif name.startswith("placement-experiment/"):  # the experiment config's tracking section
            where = ["-p", "tracking=" + json.dumps({"out_dir": str(outs[name])})]
        elif name.endswith("/nightly-sweep"):  # the sweep's base experiment, small
            where = ["-p", "base=" + json.dumps({"source": {"kind": "benchmark", "size": "small"}, "budget": 4,
                                                 "methods": ["single_gpu", "post"], "tracking": {"out_dir": str(outs[name])}})]
        _prefect(env, "deployment", "run", name, *params, *where)
    t0 = time.monotonic()
    _prefect(env, "worker", "start", "--pool", "placement", "--run-once", timeout=1200)
    print(f"worker ran {len(RUNS)} deployments in {time.monotonic() - t0:.0f} s")

    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            names = {d.id: f"{client.read_flow(d.flow_id).name}/{d.name}" for d in client.read_deployments()}
            runs = [r for r in client.read_flow_runs() if r.deployment_id]
            states = {names[r.deployment_id]: r.state_type.value for r in runs}
            why = {names[r.deployment_id]: _run_log_tail(client, r.id) for r in runs if r.state_type.value != "COMPLETED"}
            # by name: the runs make more task runs than one page of the API returns (200)
            wanted = TaskRunFilter(name=TaskRunFilterName(any_=["search-post-ray", "search-hierarchical-ray"]))
            task_names = {t.name for t in client.read_task_runs(task_run_filter=wanted)}
    assert states == dict.fromkeys(RUNS, "COMPLETED"), (states, why)  # first: a run that did not complete says why
    # the distributed searches say what they are; the op-grouping learner too (it once ran in-process)
    assert {"search-post-ray", "search-hierarchical-ray"} <= task_names, sorted(task_names)
    # what came out: run folders, MLflow runs, the cost table
    for name in ("demo", "nightly-sweep", "distributed"):
        folders = list((tmp_path / name / "runs").iterdir())
        assert len(folders) == 1 and (folders[0] / "results.json").exists(), name
        assert _finished_mlflow_runs(tmp_path / name)["placement-experiment"] >= 3, name  # parent + one per method
    assert list((tmp_path / "nightly-sweep" / "sweeps").iterdir())  # the sweep's comparison table
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'demo' / 'mlflow.db'}")
    (parent,) = [r for r in client.search_runs([client.get_experiment_by_name("placement-experiment").experiment_id])
                 if r.data.tags.get("placement.kind") == "experiment"]
    assert parent.data.params["k"] == "2"  # the learners' options from the run's parameters reached rl
    logs = sorted(p.name for p in (tmp_path / "distributed" / "placement-logs").glob("*.jsonl"))
    assert logs == [f"rnnlm-small-k80x2-2017-{m}-ray1-seed0-budget4.jsonl" for m in ("hierarchical", "post")], logs
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'distributed' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("placement-experiment").experiment_id])
    by_method = {r.data.tags.get("method"): r.data.params for r in runs}
    assert by_method["hierarchical"]["controllers"] == "1" and by_method["hierarchical"]["units"] == "colocation"
    assert _finished_mlflow_runs(tmp_path / "reproduce")["placement-reproduce"] == 1
    table = json.loads((tmp_path / "calibrate" / "table.json").read_text())
    assert table["model"] == "rnnlm" and table["op_seconds"]
    assert (tmp_path / "fidelity" / "cost-tables" / "rnnlm-small-cpu4.json").exists()  # calibrated first
    assert sum(_finished_mlflow_runs(tmp_path / "fidelity").values()) == 1
    assert sum(_finished_mlflow_runs(tmp_path / "train").values()) == 1
    assert _finished_mlflow_runs(tmp_path / "compare-learners")["learner-comparison"] == 3  # parent, rl-seed0, post-seed0
