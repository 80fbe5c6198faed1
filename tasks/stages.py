"""Prefect tasks of the experiment's stages: the graph, the cluster, the baselines, the reference points, the record."""

from __future__ import annotations

import numpy as np
from prefect import task
from prefect.cache_policies import NONE
from prefect.utilities.annotations import quote

from baselines import BASELINES, BaselineContext
from cluster.spec import ClusterSpec, load_cluster
from compgraph.frontends import GraphSource, prepare_source
from compgraph.prepare import PreparedGraph
from tracking import record_experiment


@task(name="preprocess-graph", cache_policy=NONE)
def preprocess(source: GraphSource, grouper: str | None = None, num_groups: int | None = None,
               cache_dir: str | None = None, seed: int = 0, int_bounds: dict[str, int] | None = None) -> PreparedGraph:
    """Build (or read from the cache), import and group the training step of ``source`` (a
    benchmark, or a user's GraphDef / SavedModel / Keras model) with its front end
    ([`compgraph.frontends.prepare_source`][compgraph.frontends.prepare_source])."""
    return prepare_source(source, grouper, num_groups, seed, cache_dir, int_bounds)


@task(name="load-cluster", cache_policy=NONE)
def load_cluster_spec(cluster: str) -> ClusterSpec:
    """The cluster spec ([`cluster.spec.load_cluster`][cluster.spec.load_cluster])."""
    return load_cluster(cluster)


@task(name="baseline-placement", task_run_name="baseline-{method}", cache_policy=NONE)
def baseline_placement(method: str, prepared: PreparedGraph, spec: ClusterSpec) -> np.ndarray:
    """One baseline's group placement ([`baselines.BASELINES`][baselines.BASELINES])."""
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    return BASELINES[method](ctx)


def baseline_placements(methods: list[str], prepared: PreparedGraph, spec: ClusterSpec) -> dict:
    """The placement of every baseline of ``methods`` (one task ``baseline-<method>`` each, in
    order); learners and reference methods (the optimum: [`reference_points`][tasks.stages.reference_points]) are skipped."""
    return {m: baseline_placement(m, quote(prepared), spec) for m in methods
            if m in BASELINES and not BASELINES[m].reference}


@task(name="reference-points", cache_policy=NONE)
def reference_points(prepared: PreparedGraph, spec: ClusterSpec, placements: dict, methods: list[str],
                     env_options: dict | None = None) -> dict:
    """The lower bound and the reference methods among ``methods`` (the optimum), with ``placements``
    as the optimum's candidates ([`baselines.report.reference_points`][baselines.report.reference_points]); the returned
    ``"placements"`` holds the reference methods' placements ([`baselines.report.reference_placements`][baselines.report.reference_placements]).
    The optimum measures placements as the simulated environment of ``env_options`` does
    ([`cluster.factory.sim_execution`][cluster.factory.sim_execution]: in program order for a PyTorch step)."""
    from baselines.report import reference_placements, wants_optimum
    from baselines.report import reference_points as compute
    from cluster.factory import sim_execution

    refs = compute(prepared.graph, prepared.grouping, spec, placements, wants_optimum(methods),
                   execution=sim_execution(prepared, env_options))
    return {**refs, "placements": reference_placements(refs)}


@task(name="record-mlflow", cache_policy=NONE)
def record(**kwargs) -> str | None:
    """Log the experiment to MLflow ([`tracking.record_experiment`][tracking.record_experiment]); returns the parent run id,
    or ``None`` if MLflow failed (the run folder ``kwargs["run_dir"]`` keeps the results: ``placement log-run DIR``)."""
    try:
        return record_experiment(**kwargs)
    except Exception as exc:
        from prefect import get_run_logger

        run_dir = kwargs.get("run_dir")
        get_run_logger().error(f"MLflow logging failed ({type(exc).__name__}: {exc}); the results are in {run_dir}: "
                               f"log them later with `placement log-run {run_dir}`")
        return None
