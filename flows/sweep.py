"""The ``placement-sweep`` flow: the experiment flow over several models, clusters and seeds.

Each combination is one ``placement-experiment`` subflow run (so each has its own MLflow
parent run, nested under the sweep's MLflow run, and its own Prefect flow run); at the end the
sweep's comparison table (:func:`tracking.live.finish_sweep`: JSON, markdown and a plot) is logged
to the sweep run and published as a Prefect artifact; benchmarks default to their paper sizes, as sweeps
should, and the preprocessed graphs are shared through the cache in ``<out_dir>/graph-cache``.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.choices import ClusterName, Count, MethodName, ModelName, NonNegative, SizeName
from flows.experiment import placement_experiment
from tasks.publish import publish_sweep
from tracking import artifact_root, default_tracking_uri
from tracking.live import finish_sweep, start_sweep


@flow(name="placement-sweep")
def placement_sweep(
    models: list[ModelName] = ["rnnlm", "nmt", "inception_v3"],
    size: SizeName = "paper",
    clusters: list[ClusterName] = ["k80x2", "k80x4"],
    seeds: list[NonNegative] = [0],
    budget: Count = 1000,
    methods: list[MethodName] | None = None,
    out_dir: str = "placement-runs",
    tracking_uri: str | None = None,
    learner_options: dict[str, dict] | None = None,
) -> list[dict]:
    """Run :func:`flows.experiment.placement_experiment` for every (model, cluster, seed).

    Args:
        models: benchmark models (2017 Table 2: rnnlm, nmt, inception_v3).
        size: benchmark size of every model (paper: the 2017 sizes; small: a quick check).
        clusters: preset clusters or paths of YAML cluster specs.
        seeds: one experiment per seed; the comparison table gives the median and spread over them.
        budget: placements each learner samples.
        methods: methods of every experiment (empty: every method that applies).
        out_dir: folder of the run folders, the MLflow store (when tracking_uri is empty) and the graph cache.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        learner_options: per learner, fields of its config overriding the paper defaults in every experiment,
            e.g. {"rl": {"k": 8}} (rl's K, 2017 Eq. 3).

    Returns:
        One summary per run: ``model``, ``cluster``, ``seed``, ``best_baseline``,
        ``best_learned``, ``speedup_over_best_baseline`` and ``mlflow_run_id``; a run that
        fails is reported with its ``error`` and the sweep goes on.
    """
    uri = tracking_uri or default_tracking_uri(out_dir)
    sweep_id = start_sweep(uri, artifact_root(out_dir), {"models": ",".join(models), "size": size, "clusters": ",".join(clusters),
                                                         "seeds": ",".join(map(str, seeds)), "budget": budget})
    rows = []
    for model in models:
        for cluster in clusters:
            for seed in seeds:
                kwargs = dict(model=model, size=size, cluster=cluster, budget=budget, seed=seed, out_dir=out_dir,
                              tracking_uri=tracking_uri, mlflow_parent_run_id=sweep_id)
                if methods is not None:
                    kwargs["methods"] = methods
                if learner_options is not None:
                    kwargs["learner_options"] = learner_options
                try:
                    r = placement_experiment(**kwargs)
                except Exception as exc:  # one bad combination must not stop the nightly sweep
                    rows.append({"model": model, "cluster": cluster, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                rows.append({"model": model, "cluster": cluster, "seed": seed,
                             **{k: r.get(k) for k in ("best_baseline", "best_learned", "speedup_over_best_baseline", "mlflow_run_id")}})
    # the comparison table over the sweep (methods x models x clusters over seeds), logged and published
    table = finish_sweep(uri, sweep_id, Path(out_dir) / "sweeps" / sweep_id, failed=sum("error" in r for r in rows))
    publish_sweep(table, uri, sweep_id)
    return rows
