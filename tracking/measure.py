"""MLflow records of the measurement commands: simulator fidelity and end-to-end training.

Same store conventions as [`tracking`][tracking] (a SQLite file ``<out_dir>/mlflow.db`` with
artifacts in ``<out_dir>/mlartifacts`` by default). One run per command invocation:

* experiment ``placement-fidelity`` ([`record_fidelity`][tracking.measure.record_fidelity]): parameters, metrics
  ``kendall_tau``, ``mape``, ``kendall_tau_calibrated``, ``mape_calibrated`` (MAPE as a
  fraction; a metric that is undefined, NaN or ``None``, is not logged and the tag
  ``undefined_metrics`` names it) and ``n`` (placements compared), the rows as
  ``fidelity_rows.json``, the placements as ``placements.json`` and the cost table used
  as ``cost_table.json``.
* experiment ``placement-training`` ([`record_training`][tracking.measure.record_training]): parameters; for a real run,
  metrics ``step_time_s`` and ``loss`` with ``step`` = the training step (0-based), plus
  ``total_s`` and ``setup_s``; for a simulated projection, ``projected_seconds`` and
  ``simulated_step_time_s`` and the tag ``simulated=true``; the placement as ``placement.json``.

The Prefect flow run id is tagged ``prefect.flow_run_id`` on each run.
"""

from __future__ import annotations

import math
import os
import time

from tracking import experiment_id, mlflow_client, new_run

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

FIDELITY_EXPERIMENT = "placement-fidelity"
TRAINING_EXPERIMENT = "placement-training"
FIDELITY_METRICS = ("kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def record_fidelity(
    tracking_uri: str,
    artifact_location: str,
    params: dict,
    result: dict,
    placements: dict[str, dict[str, str]] | None = None,
    cost_table_path: str | None = None,
    prefect_flow_run_id: str | None = None,
) -> str:
    """Log one fidelity measurement as a run of experiment ``placement-fidelity``; returns its run id.

    Args:
        tracking_uri: MLflow tracking URI (SQLite file or server).
        artifact_location: where the experiment's artifacts go (used when it is created).
        params: the run's parameters (model, size, cluster, steps, seed, budget...), logged as strings.
        result: [`cluster.fidelity.fidelity`][cluster.fidelity.fidelity]'s dict (``kendall_tau``, ``mape``,
            ``kendall_tau_calibrated``, ``mape_calibrated``, ``n``, ``rows``); tau in [-1, 1],
            MAPE a fraction; NaN or ``None`` values are not logged (see the module docstring).
        placements: placement name -> ``{group name: device name}``, logged as ``placements.json``.
        cost_table_path: a local cost-table JSON file, logged as ``cost_table.json``.
        prefect_flow_run_id: tagged on the run.
    """
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow_client(tracking_uri)
    exp_id = experiment_id(client, FIDELITY_EXPERIMENT, artifact_location)
    run = new_run(client, exp_id,
        run_name=f"{params.get('model')}-{params.get('size')}-{params.get('cluster')}-seed{params.get('seed')}",
        tags={"prefect.flow_run_id": prefect_flow_run_id or ""},
    )
    rid = run.info.run_id
    now = int(time.time() * 1000)
    metrics, undefined = [], []
    for key in (*FIDELITY_METRICS, "n"):
        v = result.get(key)
        if _finite(v):
            metrics.append(Metric(key, float(v), now, 0))
        else:
            undefined.append(key)
    tags = [RunTag("undefined_metrics", ",".join(undefined))] if undefined else []
    client.log_batch(rid, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()], tags=tags)
    client.log_dict(rid, {"rows": result.get("rows", [])}, "fidelity_rows.json")
    if placements is not None:
        client.log_dict(rid, placements, "placements.json")
    if cost_table_path:
        client.log_artifact(rid, cost_table_path)
    client.set_terminated(rid)
    return rid


def record_training(
    tracking_uri: str,
    artifact_location: str,
    params: dict,
    result: dict,
    placement: dict[str, str] | None = None,
    prefect_flow_run_id: str | None = None,
) -> str:
    """Log one training run (or its simulated projection) in experiment ``placement-training``; returns its run id.

    Args:
        tracking_uri, artifact_location: as in [`record_fidelity`][tracking.measure.record_fidelity].
        params: the run's parameters (model, size, cluster, method, steps, seed, env...).
        result: [`tasks.measure.train_placement`][tasks.measure.train_placement]'s dict: ``steps``, ``seconds``,
            ``simulated``, ``step_times_s`` ``[steps]`` (seconds), ``losses`` ``[steps]``,
            and optionally ``step_time_s``, ``setup_s`` and the spread ``median_s``, ``q1_s``,
            ``q3_s``, ``iqr_s`` (seconds; logged as ``step_time_<key>``).
        placement: ``{group name: device name}``, logged as ``placement.json``.
        prefect_flow_run_id: tagged on the run.
    Raises:
        ValueError: ``step_times_s`` and ``losses`` of different lengths.
    """
    from mlflow.entities import Metric, Param, RunTag

    times, losses = list(result.get("step_times_s", [])), list(result.get("losses", []))
    if len(times) != len(losses):
        raise ValueError(f"result: {len(times)} step_times_s but {len(losses)} losses; expected one of each per step")
    simulated = bool(result.get("simulated"))
    client = mlflow_client(tracking_uri)
    exp_id = experiment_id(client, TRAINING_EXPERIMENT, artifact_location)
    run = new_run(client, exp_id,
        run_name=f"{params.get('model')}-{params.get('method')}-{params.get('cluster')}-{'sim' if simulated else 'real'}",
        tags={"prefect.flow_run_id": prefect_flow_run_id or "", "simulated": str(simulated).lower()},
    )
    rid = run.info.run_id
    now = int(time.time() * 1000)
    metrics = []
    for k, (t, loss) in enumerate(zip(times, losses)):
        metrics.append(Metric("step_time_s", float(t), now, k))
        if _finite(loss):
            metrics.append(Metric("loss", float(loss), now, k))
    if simulated:
        metrics.append(Metric("projected_seconds", float(result["seconds"]), now, 0))
        if _finite(result.get("step_time_s")):
            metrics.append(Metric("simulated_step_time_s", float(result["step_time_s"]), now, 0))
    else:
        metrics.append(Metric("total_s", float(result["seconds"]), now, 0))
        if _finite(result.get("setup_s")):
            metrics.append(Metric("setup_s", float(result["setup_s"]), now, 0))
        for key in ("median_s", "q1_s", "q3_s", "iqr_s"):  # the spread of the real steps
            if _finite(result.get(key)):
                metrics.append(Metric(f"step_time_{key}", float(result[key]), now, 0))
    client.log_batch(rid, params=[Param(k, str(v)) for k, v in params.items()], tags=[RunTag("oom", str(bool(result.get("oom"))))])
    for i in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[i : i + 1000])
    if placement is not None:
        client.log_dict(rid, placement, "placement.json")
    client.set_terminated(rid)
    return rid
