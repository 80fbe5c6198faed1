"""Prefect tasks of the ``placement-reproduce`` flow: thin wrappers around
[`cluster.reproduce`][cluster.reproduce] and [`tracking.reproduce`][tracking.reproduce]."""

from __future__ import annotations

from functools import partial

from prefect import task
from prefect.cache_policies import NONE

from baselines import place_baselines
from cluster.reproduce import load_fit, reproduce_tables
from cluster.tables import PaperRow
from compgraph.prepare import prepare
from tracking.reproduce import record_reproduction


def table_placer(prepared, spec, methods):
    """The baseline placer of the tables: [`baselines.place_baselines`][baselines.place_baselines] of ``methods``."""
    return place_baselines(methods, prepared, spec)


@task(name="reproduce-tables", cache_policy=NONE)
def compare_with_paper(rows: list[PaperRow], cache_dir: str, fit_path: str | None, learned: dict,
                       size: str | None = None, log=lambda s: None) -> dict:
    """Every row's baselines measured beside the paper ([`cluster.reproduce.reproduce_tables`][cluster.reproduce.reproduce_tables]),
    graphs through the cache in ``cache_dir``."""
    fits = load_fit(fit_path, required=True) if fit_path else load_fit()
    return reproduce_tables(rows, partial(prepare, cache_dir=cache_dir), table_placer, fits, learned, size, log)


@task(name="record-reproduce-mlflow", cache_policy=NONE)
def record(tracking_uri: str, artifact_location: str, params: dict, result: dict, flow_run_id: str | None) -> str:
    """Log the reproduction to MLflow ([`tracking.reproduce.record_reproduction`][tracking.reproduce.record_reproduction])."""
    return record_reproduction(tracking_uri, artifact_location, params, result, flow_run_id)
