"""The ``placement-reproduce`` flow: the papers' tables, row by row, beside the papers.

For every row of 2017 Table 2, Post Table 1 and EAGLE Table IV ([`cluster.tables`][cluster.tables]; one table
or ``all``): the table's baselines on the row's model at the table's settings and on its machine's
preset ([`cluster.machines`][cluster.machines]), under the shipped presets and, for 2017 Table 2, under the
presets fitted without that model (the held-out prediction, from ``cluster/presets/k80_fit.json``);
the learners at ``budget`` placements (none at budget 0). The comparison is
[`cluster.reproduce.reproduce_tables`][cluster.reproduce.reproduce_tables], logged to MLflow (experiment ``placement-reproduce``,
[`tracking.reproduce`][tracking.reproduce]).
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

import tasks.reproduce as rtasks
from cluster.op_placement import OpPlacement
from cluster.spec import load_cluster
from cluster.tables import ROWS
from cluster.tables import TABLES as PAPER_TABLES
from tasks.choices import TABLE_METHODS, TABLE_SIZE, TABLES, GpuCount, NonNegative, TableMethod, TableModel, TableName, TableSize, Unset, unset
from tasks.search import learner_config, learner_search
from tracking import artifact_root, default_tracking_uri, placement_home
from compgraph.paths import named_path

METHODS = TABLE_METHODS  # the learners a row can search; the table's baselines always run


def select_rows(table: str, models: list[str] | None = None, gpus: list[int] | None = None) -> list:
    """The rows of ``table`` (or of every table for ``all``), filtered by model and GPU count.

    Raises:
        ValueError: an unknown table, or a filter that leaves no row (names the filter).
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    tables = PAPER_TABLES if table == "all" else (table,)
    rows = [r for r in ROWS if r.table in tables and (not models or r.model in models) and (not gpus or r.gpus in gpus)]
    if not rows:
        raise ValueError(f"no row of {table} has model in {models} and GPUs in {gpus}")
    return rows


def search_learner(method: str, prepared, spec, budget: int, seed: int, log_path: Path) -> OpPlacement:
    """The best placement one learner ([`placer.LEARNERS`][placer.learner.LEARNERS]) finds in ``budget`` simulated
    placements, through the experiment's search task, as a per-op placement (any learner's units)."""
    from tasks.search import learner_grouping

    config = learner_config(method, budget, seed)
    best = learner_search(method, quote(prepared), spec, "sim", config, log_path).best_placement
    return OpPlacement(learner_grouping(method, prepared).expand(best))


@flow(name="placement-reproduce")
def placement_reproduce(
    table: TableName = "2017-table2",
    models: Unset[list[TableModel]] = [],
    gpus: Unset[list[GpuCount]] = [],
    methods: Unset[list[TableMethod]] = [],
    budget: NonNegative = 0,
    seed: NonNegative = 0,
    out_dir: str = str(placement_home()),  # the user-level home when imported
    cache_dir: Unset[str] = "",
    tracking_uri: Unset[str] = "",
    fit_path: Unset[str] = "",
    size: Unset[TableSize] = TABLE_SIZE,
) -> dict:
    """Run the table's rows and compare them with the paper; returns
    [`cluster.reproduce.reproduce_tables`][cluster.reproduce.reproduce_tables]'s dict plus the run's ids.

    Args:
        table: 2017-table2 (Mirhoseini et al. 2017, Table 2), post-table1 (Post, Table 1),
            eagle-table4 (EAGLE, Table IV, never fitted) or all.
        models: only the rows of these models (empty: every row).
        gpus: only the rows with these GPU counts (empty: every row).
        methods: learners searched on every row when budget > 0 (empty: the table's learner columns
            that we have: rl for 2017, pg and post for Post, hierarchical, post, eagle and eagle_ce for EAGLE).
        budget: placements each learner samples per row (0: baselines only).
        seed: seed of the searches.
        out_dir: folder of the MLflow store (when tracking_uri is empty), the graph cache and the placement logs.
        cache_dir: preprocessed-graph cache (empty: out_dir/graph-cache).
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        fit_path: the stored preset fits giving 2017's held-out column (empty: cluster/presets/k80_fit.json).
        size: a benchmark size for every row instead of the table's (table: each row's own; small: a quick check,
            not comparable).

    Raises:
        ValueError: an unknown table, model, GPU count or method, or filters that leave no row.
    """
    from cluster.tables import LEARNER_COLUMNS
    from compgraph.prepare import prepare
    from placer import LEARNERS

    models, gpus, methods, size = unset(models), unset(gpus), unset(methods), unset(size, TABLE_SIZE)
    cache_dir, tracking_uri, fit_path = unset(cache_dir), unset(tracking_uri), unset(fit_path)
    rows = select_rows(table, models, gpus)
    for m in methods or []:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; valid: {', '.join(METHODS)}")
    if budget < 0:
        raise ValueError(f"budget must be at least 0, got {budget}")
    logger = get_run_logger()
    out = Path(out_dir)
    cache = cache_dir or str(out / "graph-cache")
    learned: dict = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if budget > 0:
        for row in rows:
            prepared = prepare(row.model, size or row.size, cache_dir=cache)
            spec = load_cluster(row.cluster)
            for method in methods or [m for m in LEARNER_COLUMNS[row.table] if m in LEARNERS]:
                logger.info(f"{row.table} {row.model} on {row.cluster}: searching {method}, {budget} placements")
                log_path = named_path(out, "placement-logs", stamp, "reproduce", method, row.model, spec.name,
                                      f"seed{seed}", suffix=".jsonl")
                learned.setdefault((row.table, row.model, row.gpus), {})[method] = search_learner(
                    method, prepared, spec, budget, seed, log_path)
    result = rtasks.compare_with_paper(rows, cache, fit_path, learned, size, log=logger.info)
    uri = tracking_uri or default_tracking_uri(out)
    params = {"table": table, "models": ",".join(models or []), "gpus": ",".join(map(str, gpus or [])),
              "methods": ",".join(methods or []), "budget": budget, "seed": seed, "size": size or "table",
              "presets": ",".join(dict.fromkeys(r.cluster for r in rows))}
    flow_run_id = str(flow_run.get_id()) if flow_run.get_id() else None
    run_id = rtasks.record(uri, artifact_root(out), params, result, flow_run_id)
    return {"table": table, "budget": budget, **result, "mlflow_run_id": run_id, "mlflow_tracking_uri": uri,
            "prefect_flow_run_id": flow_run_id}
