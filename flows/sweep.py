"""The ``placement-sweep`` flow: the experiment flow over several models, clusters and seeds.

Each combination is one ``placement-experiment`` subflow run (so each has its own MLflow
parent run and Prefect flow run); benchmarks default to their paper sizes, as sweeps
should, and the preprocessed graphs are shared through the cache in ``<out_dir>/graph-cache``.
"""

from __future__ import annotations

from prefect import flow

from flows.experiment import placement_experiment


@flow(name="placement-sweep")
def placement_sweep(
    models: list[str] = ["rnnlm", "nmt", "inception_v3"],
    size: str = "paper",
    clusters: list[str] = ["k80x2", "k80x4"],
    seeds: list[int] = [0],
    budget: int = 1000,
    methods: list[str] | None = None,
    out_dir: str = "placement-runs",
    tracking_uri: str | None = None,
) -> list[dict]:
    """Run :func:`flows.experiment.placement_experiment` for every (model, cluster, seed).

    Returns:
        One summary per run: ``model``, ``cluster``, ``seed``, ``best_baseline``,
        ``best_learned``, ``speedup_over_best_baseline`` and ``mlflow_run_id``; a run that
        fails is reported with its ``error`` and the sweep goes on.
    """
    rows = []
    for model in models:
        for cluster in clusters:
            for seed in seeds:
                kwargs = dict(model=model, size=size, cluster=cluster, budget=budget, seed=seed, out_dir=out_dir,
                              tracking_uri=tracking_uri)
                if methods is not None:
                    kwargs["methods"] = methods
                try:
                    r = placement_experiment(**kwargs)
                except Exception as exc:  # one bad combination must not stop the nightly sweep
                    rows.append({"model": model, "cluster": cluster, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                rows.append({"model": model, "cluster": cluster, "seed": seed,
                             **{k: r.get(k) for k in ("best_baseline", "best_learned", "speedup_over_best_baseline", "mlflow_run_id")}})
    return rows
