"""Prefect tasks of the ``placement-reproduce`` flow: thin wrappers around
:mod:`cluster.reproduce` and :mod:`tracking.reproduce`."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from functools import partial

from baselines import place_baselines
from cluster.reproduce import BASELINE_METHODS, TableData, load_fit, load_table_data, reproduce_table
from tracking.reproduce import record_reproduction


@task(name="reproduce-load-graphs", cache_policy=NONE)
def load_graphs(models: list[str], cache_dir: str, size: str = "paper") -> TableData:
    """The table's graphs (through the graph cache), the shipped presets and the 2017 baselines
    (:func:`baselines.place_baselines` of :data:`cluster.reproduce.BASELINE_METHODS`) as the table's placer
    (:func:`cluster.reproduce.load_table_data`)."""
    return load_table_data(models, cache_dir, size, place=partial(place_baselines, BASELINE_METHODS))


@task(name="reproduce-table", cache_policy=NONE)
def compare_with_paper(data: TableData, models: list[str], fit_path: str | None, learned: dict) -> dict:
    """Every row measured under the shipped and the held-out presets (:func:`cluster.reproduce.reproduce_table`)."""
    fits = load_fit(fit_path) if fit_path else load_fit()
    return reproduce_table(data, models, fits=fits, learned=learned)


@task(name="record-reproduce-mlflow", cache_policy=NONE)
def record(tracking_uri: str, artifact_location: str, params: dict, result: dict, flow_run_id: str | None) -> str:
    """Log the reproduction to MLflow (:func:`tracking.reproduce.record_reproduction`)."""
    return record_reproduction(tracking_uri, artifact_location, params, result, flow_run_id)
