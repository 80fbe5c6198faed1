"""MLflow record of ``placement reproduce``: one run of experiment ``placement-reproduce``.

Same store conventions as [`tracking`][tracking]. The run holds the parameters (table, models,
GPUs, methods, budget, presets), per table ``<table>.shipped_within_1_5x``,
``<table>.heldout_within_1_5x`` (shares of cells within a factor 1.5 of the paper) and
``<table>.winners_matched`` (share of rows whose fastest baseline is the paper's), per row
``tau.<table>.<model>.<gpus>`` (Kendall tau of the row's order of methods against the paper's),
``ratio.<table>.<model>.<gpus>.<method>`` (ours / paper) and, for learners,
``speedup_pct.<table>.<model>.<gpus>.<learner>``; the fitted parameters as params
``param.<name>``; the whole result as ``reproduce.json``; the Prefect flow run id as tag
``prefect.flow_run_id``.
"""

from __future__ import annotations

import math
import time

from tracking import experiment_id, new_run

REPRODUCE_EXPERIMENT = "placement-reproduce"


def record_reproduction(tracking_uri: str, artifact_location: str, params: dict, result: dict,
                        prefect_flow_run_id: str | None = None) -> str:
    """Log one reproduction ([`cluster.reproduce.reproduce_tables`][cluster.reproduce.reproduce_tables]'s dict) as an MLflow run; returns its id.

    Metrics that are ``None`` or not finite are not logged.
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = experiment_id(client, REPRODUCE_EXPERIMENT, artifact_location)
    run = new_run(client, exp_id, run_name=f"{params.get('table')}-budget{params.get('budget')}",
                            tags={"prefect.flow_run_id": prefect_flow_run_id or ""})
    rid = run.info.run_id
    now = int(time.time() * 1000)
    metrics = {}
    for table, summary in result["summary"].items():
        metrics[f"{table}.shipped_within_1_5x"] = (summary.get("shipped") or {}).get("share")
        metrics[f"{table}.heldout_within_1_5x"] = (summary.get("heldout") or {}).get("share")
        metrics[f"{table}.winners_matched"] = (summary.get("winners") or {}).get("share")
    params = {**params, **{f"param.{p['name']}": f"{p['value']:.6g}" for p in result.get("parameters", [])}}
    for row in result["rows"]:
        key = f"{row['table']}.{row['model']}.{row['gpus']}"
        metrics[f"tau.{key}"] = row["tau"]
        for meth, c in row["cells"].items():
            metrics[f"ratio.{key}.{meth}"] = c["ratio"]
        for lname, lr in row["learners"].items():
            metrics[f"speedup_pct.{key}.{lname}"] = lr["speedup_pct"]
    batch = [Metric(k, float(v), now, 0) for k, v in metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    client.log_batch(rid, params=[Param(k, str(v)) for k, v in params.items()], metrics=batch)
    client.log_dict(rid, result, "reproduce.json")
    client.set_terminated(rid)
    return rid
