"""MLflow record of ``placement reproduce``: one run of experiment ``placement-reproduce``.

Same store conventions as :mod:`tracking`. The run holds the parameters (table, models,
GPUs, methods, budget, presets), metrics ``shipped_within_1_5x`` and
``heldout_within_1_5x`` (shares of cells within a factor 1.5 of the paper),
``tau.<model>.<gpus>`` (Kendall tau of each row's order of methods against the paper's),
``ratio.<model>.<gpus>.<method>`` (ours / paper) and, for learners,
``speedup_pct.<model>.<gpus>.<learner>``; the whole result as ``reproduce.json``; the
Prefect flow run id as tag ``prefect.flow_run_id``.
"""

from __future__ import annotations

import math
import time

from tracking import experiment_id

REPRODUCE_EXPERIMENT = "placement-reproduce"


def record_reproduction(tracking_uri: str, artifact_location: str, params: dict, result: dict,
                        prefect_flow_run_id: str | None = None) -> str:
    """Log one reproduction (:func:`cluster.reproduce.reproduce_table`'s dict) as an MLflow run; returns its id.

    Metrics that are ``None`` or not finite are not logged.
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = experiment_id(client, REPRODUCE_EXPERIMENT, artifact_location)
    run = client.create_run(exp_id, run_name=f"{params.get('table')}-budget{params.get('budget')}",
                            tags={"prefect.flow_run_id": prefect_flow_run_id or ""})
    rid = run.info.run_id
    now = int(time.time() * 1000)
    metrics = {"shipped_within_1_5x": (result.get("shipped") or {}).get("share"),
               "heldout_within_1_5x": (result.get("heldout") or {}).get("share")}
    for row in result["rows"]:
        key = f"{row['model']}.{row['gpus']}"
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
