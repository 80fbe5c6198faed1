"""The ``placement-sweep`` flow: the experiment flow over several models, clusters and seeds.

Each combination is one ``placement-experiment`` subflow run (so each has its own MLflow
parent run, nested under the sweep's MLflow run, and its own Prefect flow run); at the end the
sweep's comparison table ([`tracking.live.finish_sweep`][tracking.live.finish_sweep]: JSON, markdown and a plot) is logged
to the sweep run and published as a Prefect artifact; benchmarks default to their paper sizes, as sweeps
should, and the preprocessed graphs are shared through the cache in ``<out_dir>/graph-cache``.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from compgraph.frontends import BenchmarkSource
from flows.experiment import placement_experiment
from tasks.choices import ClusterName, ModelName, NonNegative
from tasks.config import ExperimentConfig
from tasks.publish import publish_sweep
from tracking import artifact_root, default_tracking_uri
from tracking.live import finish_sweep, start_sweep

NIGHTLY_BASE = ExperimentConfig(source=BenchmarkSource(size="paper"))
"""The sweep's default base: the default experiment at the paper sizes."""


@flow(name="placement-sweep")
def placement_sweep(
    base: ExperimentConfig = NIGHTLY_BASE,
    models: list[ModelName] = ["rnnlm", "nmt", "inception_v3"],
    clusters: list[ClusterName] = ["k80x2", "k80x4"],
    seeds: list[NonNegative] = [0],
) -> list[dict]:
    """Run [`flows.experiment.placement_experiment`][flows.experiment.placement_experiment] with ``base`` for every (model, cluster, seed).

    Args:
        base: the experiment every run starts from (tasks.config.ExperimentConfig: the graph's size, methods,
            budget, learner options, Ray, tracking...); the grid below sets its benchmark model, cluster and seed.
        models: benchmark models (2017 Table 2: rnnlm, nmt, inception_v3), each at the base's size.
        clusters: preset clusters or paths of YAML cluster specs.
        seeds: one experiment per seed; the comparison table gives the median and spread over them.

    Returns:
        One summary per run: ``model``, ``cluster``, ``seed``, ``best_baseline``,
        ``best_learned``, ``speedup_over_best_baseline`` and ``mlflow_run_id``; a run that
        fails is reported with its ``error`` and the sweep goes on.
    Raises:
        ValueError: a base whose source is not a benchmark (the grid sets the benchmark model).
    """
    if base.source.kind != "benchmark":
        raise ValueError(f"base.source: the sweep runs benchmarks (models x clusters x seeds), got kind {base.source.kind!r}")
    out_dir, size = base.tracking.out_dir, base.source.size
    uri = base.tracking.tracking_uri or default_tracking_uri(out_dir)
    sweep_id = start_sweep(uri, artifact_root(out_dir), {"models": ",".join(models), "size": size, "clusters": ",".join(clusters),
                                                         "seeds": ",".join(map(str, seeds)), "budget": base.budget})
    rows = []
    for model in models:
        for cluster in clusters:
            for seed in seeds:
                try:  # the grid's settings on the base, validated together (an unknown cluster fails this run only)
                    config = ExperimentConfig.model_validate({
                        **base.model_dump(), "source": BenchmarkSource(model=model, size=size),
                        "cluster": cluster, "seed": seed,
                        "tracking": base.tracking.model_copy(update={"parent_run_id": sweep_id})})
                    r = placement_experiment(**config.flow_parameters())  # taken back whole, not validated again
                except Exception as exc:  # one bad combination must not stop the nightly sweep
                    rows.append({"model": model, "cluster": cluster, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                rows.append({"model": model, "cluster": cluster, "seed": seed,
                             **{k: r.get(k) for k in ("best_baseline", "best_learned", "speedup_over_best_baseline", "mlflow_run_id")}})
    # the comparison table over the sweep (methods x models x clusters over seeds), logged and published
    table = finish_sweep(uri, sweep_id, Path(out_dir) / "sweeps" / sweep_id, failed=sum("error" in r for r in rows))
    publish_sweep(table, uri, sweep_id)
    return rows
