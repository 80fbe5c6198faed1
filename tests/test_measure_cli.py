"""The measurement commands (``placement calibrate``, ``fidelity``, ``train``) end to end:
real TensorFlow runs of the small RNNLM on the ``cpu4`` preset (logical CPUs of this
machine), Prefect flows under the test harness, a real SQLite MLflow store in ``tmp_path``.
No timed assertions: times are only checked for consistency with what was logged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

ROW_NAMES = ["random_0", "random_1", "single_cpu", "single_gpu", "expert", "scotch_group", "mincut_group", "metis_group", "rl", "post"]
METRICS = ("kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated")


@pytest.fixture(scope="module")
def prefect_harness():
    import cli.main  # noqa: F401  (sets the environment defaults before Prefect reads its settings)
    import flows.measure  # noqa: F401  (Prefect sets up its log handlers on import: on pytest's stderr,
    # not on a CliRunner stream that is closed after the command)
    from conftest import prefect_harness as harness

    with harness():
        yield


def invoke(args):
    from cli.main import app
    import cli.measure  # noqa: F401  (registers the commands)

    return CliRunner().invoke(app, args)


@pytest.fixture(scope="module")
def calibrated(prefect_harness, tmp_path_factory):
    """``placement calibrate`` of the small RNNLM on cpu4 (3 traced steps): (result JSON, table path)."""
    path = tmp_path_factory.mktemp("calib") / "rnnlm.json"
    r = invoke(["calibrate", "--model", "rnnlm", "--cluster", "cpu4", "--steps", "3", "--out", str(path), "--json", "-"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), path


def _client(out):
    from mlflow.tracking import MlflowClient

    assert (out / "mlflow.db").exists()
    return MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")


@pytest.mark.slow
def test_calibrate_writes_a_table_that_loads(calibrated, rnnlm_small):
    from cluster.calibrate import CostTable

    result, path = calibrated
    table = CostTable.load(path)
    assert result["path"] == str(path)
    assert (table.model, table.size, table.cluster, table.steps) == ("rnnlm", "small", "cpu4", 3)
    assert table.devices == result["devices"] == {"cpu": "/device:CPU:0", "gpu": "/device:CPU:1"}
    assert result["coverage"] == pytest.approx(table.coverage(rnnlm_small.graph)) and result["coverage"] > 0.99
    assert result["measured_ops"] == len(table.op_seconds) and result["ops"] == rnnlm_small.graph.num_ops
    assert all(set(row) == {"cpu", "gpu"} and min(row.values()) >= 0 for row in table.op_seconds.values())
    assert result["wall_time_s"] > 0 and result["prefect_flow_run_id"]


@pytest.mark.slow
def test_fidelity_calibrates_first_prints_metrics_and_logs_an_mlflow_run(prefect_harness, tmp_path, rnnlm_small):
    from cluster.calibrate import CostTable

    out = tmp_path / "runs"
    r = invoke(["fidelity", "--model", "rnnlm", "--cluster", "cpu4", "--random", "2", "--steps", "3", "--budget", "16",
                "--calibrate-steps", "2", "--out-dir", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert {"model", "size", "cluster", *METRICS, "rows", "mlflow_run_id"} <= set(res)
    assert (res["model"], res["size"], res["cluster"]) == ("rnnlm", "small", "cpu4")
    rows = res["rows"]
    assert [row["name"] for row in rows] == ROW_NAMES
    assert [row["kind"] for row in rows] == ["random"] * 2 + ["baseline"] * 6 + ["learner"] * 2
    for row in rows:
        assert row["sim_s"] > 0 and row["sim_calibrated_s"] > 0 and row["real_s"] > 0 and not row["real_oom"]
    real = np.array([row["real_s"] for row in rows])
    for key, col in (("mape", "sim_s"), ("mape_calibrated", "sim_calibrated_s")):
        sim = np.array([row[col] for row in rows])
        assert res[key] == pytest.approx(np.mean(np.abs(sim - real) / real))
    assert -1 <= res["kendall_tau"] <= 1 and -1 <= res["kendall_tau_calibrated"] <= 1
    assert res["n"] == len(ROW_NAMES)

    # no --cost-table: calibrated first and saved under --out-dir
    table = CostTable.load(out / "cost-tables" / "rnnlm-small-cpu4.json")
    assert res["cost_table"] == str(out / "cost-tables" / "rnnlm-small-cpu4.json") and table.steps == 2
    assert res["coverage"] == pytest.approx(table.coverage(rnnlm_small.graph))

    client = _client(out)
    run = client.get_run(res["mlflow_run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "placement-fidelity"
    for key in METRICS:
        assert run.data.metrics[key] == pytest.approx(res[key])
    assert run.data.params["model"] == "rnnlm" and run.data.params["budget"] == "16" and run.data.params["random"] == "2"
    assert run.data.tags["prefect.flow_run_id"] == res["prefect_flow_run_id"]
    logged = json.loads(open(client.download_artifacts(run.info.run_id, "fidelity_rows.json", str(tmp_path))).read())
    assert logged["rows"] == rows
    placements = json.loads(open(client.download_artifacts(run.info.run_id, "placements.json", str(tmp_path))).read())
    assert list(placements) == ROW_NAMES and all(len(p) == rnnlm_small.grouping.num_groups for p in placements.values())
    assert set(placements["single_cpu"].values()) == {"/cpu:0"}
    assert "Kendall tau" in r.stderr and "MAPE" in r.stderr


@pytest.mark.slow  # over 5 s here
def test_train_real_logs_step_time_and_loss_per_step(prefect_harness, tmp_path):
    out = tmp_path / "runs"
    r = invoke(["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "expert", "--steps", "3", "--env", "real",
                "--out-dir", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["simulated"] is False and res["label"] == "real" and res["steps"] == 3
    assert len(res["step_times_s"]) == 3 and len(res["losses"]) == 3
    assert res["seconds"] == pytest.approx(sum(res["step_times_s"]))
    assert all(np.isfinite(res["losses"])) and min(res["step_times_s"]) > 0
    assert set(res["placement"].values()) <= {"/cpu:0", "/gpu:0", "/gpu:1", "/gpu:2"}

    client = _client(out)
    run = client.get_run(res["mlflow_run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "placement-training"
    assert run.data.tags["simulated"] == "false" and run.data.params["method"] == "expert"
    times = client.get_metric_history(run.info.run_id, "step_time_s")
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in times) == [0, 1, 2] and sorted(m.step for m in losses) == [0, 1, 2]
    assert [m.value for m in sorted(times, key=lambda m: m.step)] == pytest.approx(res["step_times_s"])
    assert [m.value for m in sorted(losses, key=lambda m: m.step)] == pytest.approx(res["losses"])
    assert "real training: 3 steps" in r.stderr


@pytest.mark.slow  # over 5 s here
def test_train_a_learner_that_places_colocation_units_for_real(prefect_harness, tmp_path, rnnlm_small):
    """hierarchical groups ops itself (over the colocation units): its best placement trains too (issue 9)."""
    from compgraph.grouping import colocation_grouping

    out = tmp_path / "runs"
    r = invoke(["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "hierarchical", "--budget", "4",
                "--steps", "2", "--env", "real", "--out-dir", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["simulated"] is False and res["steps"] == 2 and all(np.isfinite(res["losses"]))
    assert res["units"] == "colocation" and set(res["placement"]) == set(colocation_grouping(rnnlm_small.graph).names)
    assert _client(out).get_run(res["mlflow_run_id"]).data.params["units"] == "colocation"


@pytest.mark.slow  # over 5 s here
def test_train_an_op_level_placement_projects_its_simulated_step(prefect_harness, tmp_path, rnnlm_small, k80x2):
    """m_topo places every op (splitting the 2017 groups): trained (here projected) like any other placement."""
    from baselines import BASELINES, BaselineContext
    from cluster.factory import make_environment
    from cluster.op_placement import measure_placement

    out = tmp_path / "runs"
    r = invoke(["train", "--model", "rnnlm", "--cluster", "k80x2", "--method", "m_topo", "--steps", "3", "--env", "sim",
                "--out-dir", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["units"] == "ops" and list(res["placement"]) == [op.name for op in rnnlm_small.graph.ops]
    ctx = BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, k80x2, rnnlm_small.benchmark, rnnlm_small.config)
    step = measure_placement(make_environment("sim", rnnlm_small, k80x2), BASELINES["m_topo"](ctx)).step_time_s
    assert res["simulated"] is True and res["step_time_s"] == pytest.approx(step) and res["seconds"] == pytest.approx(3 * step)


@pytest.mark.slow  # over 5 s here
def test_train_sim_is_labelled_simulated_and_projects_the_calibrated_step(prefect_harness, tmp_path, calibrated,
                                                                           rnnlm_small):
    from cluster.calibrate import CostTable
    from cluster.simulated import SimulatedEnvironment
    from cluster.spec import load_cluster

    _, table_path = calibrated
    out = tmp_path / "runs"
    r = invoke(["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "single_cpu", "--steps", "3", "--env", "sim",
                "--cost-table", str(table_path), "--out-dir", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["simulated"] is True and res["label"] == "simulated"
    assert res["step_times_s"] == [] and res["losses"] == []
    spec, table = load_cluster("cpu4"), CostTable.load(table_path)
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, table.apply_link(spec),
                               op_times=table.op_times(rnnlm_small.graph, spec))
    step = env.measure(np.zeros(rnnlm_small.grouping.num_groups, dtype=np.int64)).step_time_s
    assert res["step_time_s"] == pytest.approx(step) and res["seconds"] == pytest.approx(3 * step)
    assert "SIMULATED" in r.stderr

    client = _client(out)
    run = client.get_run(res["mlflow_run_id"])
    assert run.data.tags["simulated"] == "true"
    assert run.data.metrics["projected_seconds"] == pytest.approx(3 * step)
    assert client.get_metric_history(run.info.run_id, "step_time_s") == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["calibrate", "--model", "nope", "--cluster", "cpu4"], "unknown model 'nope'; valid: rnnlm"),
        (["calibrate", "--model", "rnnlm", "--size", "huge", "--cluster", "cpu4"], "unknown size 'huge' for rnnlm; valid: small"),
        (["calibrate", "--model", "rnnlm", "--cluster", "nope"], "unknown cluster 'nope'; valid: a100x4-pcie, a100x8, cpu4"),
        (["calibrate", "--model", "rnnlm", "--cluster", "cpu4", "--steps", "1"], "--steps must be at least 2 (the first traced step is dropped), got 1"),
        (["fidelity", "--model", "rnnlm", "--cluster", "nope"], "unknown cluster 'nope'; valid: a100x4-pcie, a100x8, cpu4"),
        (["fidelity", "--model", "rnnlm", "--cluster", "cpu4", "--steps", "1"], "--steps must be at least 2 (the first real step is dropped), got 1"),
        (["fidelity", "--model", "rnnlm", "--cluster", "cpu4", "--random", "-1"], "--random must be at least 0, got -1"),
        (["fidelity", "--model", "rnnlm", "--cluster", "cpu4", "--budget", "0"], "--budget must be at least 1, got 0"),
        (["fidelity", "--model", "rnnlm", "--cluster", "cpu4", "--cost-table", "/nonexistent/t.json"], "--cost-table: cost table /nonexistent/t.json: no such file"),
        (["calibrate", "--torch", "--model", "rnnlm", "--cluster", "h200x1"], "--model rnnlm: for a TensorFlow cost table, not with --torch"),
        (["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "magic"], "unknown method 'magic'; valid: single_cpu, single_gpu, expert, scotch, mincut, metis, scotch_group, mincut_group, metis_group, m_topo, m_etf, m_sct, optimum, rl, post, ppo, ce, pg, hierarchical, eagle, eagle_ce"),
        (["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "expert", "--env", "cloud"], "unknown environment 'cloud'; valid: sim, real"),
        (["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "expert", "--steps", "0"], "--steps must be at least 1, got 0"),
        (["train", "--model", "nope", "--cluster", "cpu4", "--method", "expert"], "unknown model 'nope'"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, needle):
    r = invoke(args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert "Traceback" not in r.output


@pytest.mark.parametrize("content, needle", [
    ('{"foo": 1}', "foo: Extra inputs are not permitted"),
    ("{}", "op_seconds: no op times (not a cost table"),
])
def test_a_json_file_that_is_not_a_cost_table_is_refused(tmp_path, content, needle):
    path = tmp_path / "t.json"
    path.write_text(content)
    r = invoke(["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "expert", "--env", "sim", "--cost-table", str(path)])
    assert r.exit_code == 2, r.output
    assert f"--cost-table: cost table {path}: {needle}" in r.output and len(r.output.strip().splitlines()) == 1


def test_cost_table_of_another_model_is_refused(tmp_path):
    from cluster.calibrate import CostTable

    path = CostTable(model="rnnlm", size="small", cluster="cpu4", op_seconds={"a": {"cpu": 1e-6}}).save(tmp_path / "t.json")
    r = invoke(["train", "--model", "inception_v3", "--cluster", "cpu4", "--method", "expert", "--env", "sim",
                "--cost-table", str(path)])
    assert r.exit_code == 2
    assert f"--cost-table {path}: measured for model 'rnnlm', not 'inception_v3'" in r.output
    assert len(r.output.strip().splitlines()) == 1
