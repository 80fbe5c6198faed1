"""The ``placement-reproduce`` flow: 2017 Table 2, row by row, beside the paper.

For every model (rnnlm, nmt, inception_v3) and preset (k80x2, k80x4): the baselines
(single_cpu, single_gpu, scotch, mincut, expert) under the shipped presets and under the
presets fitted without that model (the held-out prediction, from
``cluster/presets/k80_fit.json``), and the learners at ``budget`` placements (none at
budget 0); the comparison is :func:`cluster.reproduce.reproduce_table`, logged to MLflow
(experiment ``placement-reproduce``, :mod:`tracking.reproduce`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from prefect import flow
from prefect.runtime import flow_run

import tasks.reproduce as rtasks
from cluster.reproduce import CLUSTERS, MODELS
from flows.choices import TABLE_METHODS, TABLES, GpuCount, SizeName, TableMethod, TableModel, TableName
from placer import LEARNERS
from tracking import artifact_root, default_tracking_uri

METHODS = TABLE_METHODS  # the baselines and the learners that place the prepared groups (the table compares group placements)


def search_learner(method: str, prepared, spec, budget: int, seed: int, log_path: Path) -> np.ndarray:
    """The best group placement one learner (:data:`placer.LEARNERS`) finds in ``budget``
    simulated placements, through the experiment's search task."""
    import tasks

    config = tasks.learner_config(method, budget, seed)
    return tasks.learner_search(method, prepared, spec, "sim", config, log_path).best_placement


@flow(name="placement-reproduce")
def placement_reproduce(
    table: TableName = "2017-table2",
    models: list[TableModel] = list(MODELS),
    gpus: list[GpuCount] = [2, 4],
    methods: list[TableMethod] = list(METHODS),
    budget: int = 0,
    seed: int = 0,
    out_dir: str = "placement-runs",
    cache_dir: str | None = None,
    tracking_uri: str | None = None,
    fit_path: str | None = None,
    size: SizeName = "paper",
) -> dict:
    """Run the table's rows and compare them with the paper; returns
    :func:`cluster.reproduce.reproduce_table`'s dict plus the run's ids.

    Args:
        table: the paper table (2017-table2: Mirhoseini et al. 2017, Table 2).
        models: the table's rows to run (rnnlm, nmt, inception_v3).
        gpus: the K80 counts of the rows (2: k80x2, 4: k80x4).
        methods: baselines (always run) and learners (searched only with budget > 0).
        budget: placements each learner samples per row (0: baselines only).
        seed: seed of the searches.
        out_dir: folder of the MLflow store (when tracking_uri is empty), the graph cache and the placement logs.
        cache_dir: preprocessed-graph cache (empty: out_dir/graph-cache).
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        fit_path: the stored preset fits giving the held-out column (empty: cluster/presets/k80_fit.json).
        size: benchmark size of the rows (paper: the table's; small: a quick check, not comparable to the paper).

    Raises:
        ValueError: an unknown table, model, GPU count or method.
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"unknown model {m!r}; valid: {', '.join(MODELS)}")
    for g in gpus:
        if g not in CLUSTERS:
            raise ValueError(f"unknown GPU count {g}; valid: {', '.join(map(str, CLUSTERS))}")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; valid: {', '.join(METHODS)}")
    out = Path(out_dir)
    data = rtasks.load_graphs(models, cache_dir or str(out / "graph-cache"), size)
    data.base = {g: s for g, s in data.base.items() if g in gpus}
    learned: dict = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if budget > 0:
        for m in models:
            for g, spec in data.base.items():
                for method in methods:
                    if method in LEARNERS:
                        log_path = out / "placement-logs" / f"{stamp}-reproduce-{method}-{m}-{spec.name}-seed{seed}.jsonl"
                        learned.setdefault((m, g), {})[method] = search_learner(
                            method, data.models[m].prepared, spec, budget, seed, log_path)
    result = rtasks.compare_with_paper(data, models, fit_path, learned)
    uri = tracking_uri or default_tracking_uri(out)
    params = {"table": table, "models": ",".join(models), "gpus": ",".join(map(str, gpus)),
              "methods": ",".join(methods), "budget": budget, "seed": seed, "size": size,
              "presets": ",".join(s.name for s in data.base.values())}
    flow_run_id = str(flow_run.get_id()) if flow_run.get_id() else None
    run_id = rtasks.record(uri, artifact_root(out), params, result, flow_run_id)
    return {"table": table, "budget": budget, **result, "mlflow_run_id": run_id, "mlflow_tracking_uri": uri,
            "prefect_flow_run_id": flow_run_id}
