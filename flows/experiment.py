"""The ``placement-experiment`` flow: model -> graph -> groups -> placements -> measurement -> record."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

import tasks
from placer import LEARNERS
from tracking import artifact_root, default_tracking_uri

METHODS = ("single_cpu", "single_gpu", "expert", "scotch", "mincut", *LEARNERS)


@flow(name="placement-experiment")
def placement_experiment(
    model: str = "rnnlm",
    size: str = "small",
    cluster: str = "k80x2",
    methods: list[str] = list(METHODS),
    budget: int = 1000,
    k: int = 8,
    seed: int = 0,
    env: str = "sim",
    out_dir: str = "placement-runs",
    tracking_uri: str | None = None,
    graph_def: str | None = None,
    keras: str | None = None,
    grouper: str | None = None,
    num_groups: int | None = None,
    cache_dir: str | None = None,
    train_steps: int = 100,
    controllers: int = 0,
    ray_address: str | None = None,
    soft_placement: bool = False,
    learner_options: dict[str, dict] | None = None,
    resume: bool = False,
) -> dict:
    """Run every method on one model and cluster, measure all in one environment, log to MLflow.

    Learners are looked up in :data:`placer.LEARNERS`; ``learner_options`` (method -> fields
    of its config, e.g. ``{"rl": {"hidden_size": 64}}``) override the paper defaults (``k``
    is rl's K unless given there). Placement logs and checkpoints are named by the run's
    settings; ``resume`` continues an interrupted run from them (nothing measured twice).

    Returns the result object of ``placement experiment --json`` (see the README).
    """
    out = Path(out_dir)
    # real execution: an op placed where it has no kernel is an error unless soft placement is asked for
    env_options = {"soft_placement": True} if env == "real" and soft_placement else {}
    uri = tracking_uri or default_tracking_uri(out)
    prepared = tasks.preprocess(model, size, grouper, num_groups, cache_dir or str(out / "graph-cache"), seed, graph_def, keras)
    model = prepared.name
    spec = tasks.load_cluster_spec(cluster)
    placements: dict = {}
    for method in methods:
        if method not in LEARNERS:
            placements[method] = tasks.baseline_placement(method, prepared, spec)
    curves: dict = {}
    method_params: dict = {m: {} for m in methods}
    extra = {}
    groupings: dict = {}
    for method in methods:
        if method not in LEARNERS:
            continue
        options = {**({"k": k} if method == "rl" else {}), **(learner_options or {}).get(method, {})}
        config = tasks.learner_config(method, budget, seed, options)
        log_path, ckpt_path = tasks.run_paths(out, model, size, spec.name, prepared.grouping.grouper, method, seed, config.budget)
        if method == "rl" and controllers > 0:  # 2017 Sec. 3.4: controllers, workers and a parameter server on Ray
            log_path = log_path.with_name(log_path.name.replace("-rl-", f"-rl-ray{controllers}-"))
            if not resume:
                log_path.unlink(missing_ok=True)  # the distributed search replays an existing log
            found = tasks.distributed_placement_search(prepared, spec, env, config, log_path, controllers, ray_address,
                                                       env_options)
        else:
            found = tasks.learner_search(method, prepared, spec, env, config, log_path, ckpt_path, resume, env_options)
            if LEARNERS[method].units == "colocation":  # placed over its own units: measured over them
                groupings[method] = tasks.learner_grouping(method, prepared)
        method_params[method] = {**config.model_dump(), "failing_signal": found.failing_signal,
                                 "paper": LEARNERS[method].paper, "units": LEARNERS[method].units,
                                 "controllers": controllers if method == "rl" else 0}
        placements[method] = found.best_placement
        curves[method] = found.curve
        extra[f"placement-logs/{method}"] = str(log_path)
    results, summary = tasks.evaluate(prepared, spec, env, placements, env_options, groupings)
    # End-to-end training evaluation of the best learned and the best baseline placement:
    # trained for real with env "real", projected from the simulated step time with "sim".
    training = {}
    if train_steps > 0:
        from tasks.measure import train_placement

        for method in (summary.get("best_learned"), summary.get("best_baseline")):
            own_units = method in groupings  # TODO: train a colocation learner's placement (over other units)
            if method is not None and method not in training and placements.get(method) is not None and not own_units:
                training[method] = train_placement(prepared, spec, env, placements[method], train_steps, seed)
    summary["training"] = training
    flow_run_id = str(flow_run.get_id()) if flow_run.get_id() else None
    params = {"model": model, "size": size, "cluster": spec.name, "methods": ",".join(methods), "budget": budget,
              "k": k, "seed": seed, "env": env, "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups,
              "grouper": prepared.grouping.grouper}
    run_id = tasks.record(
        tracking_uri=uri,
        artifact_location=artifact_root(out),
        params=params,
        results=results,
        summary=summary,
        method_params=method_params,
        curves=curves,
        prefect_flow_run_id=flow_run_id,
        extra_artifacts=extra,
    )
    return {
        "model": model,
        "size": size,
        "cluster": spec.name,
        "env": env,
        "ops": prepared.graph.num_ops,
        "groups": prepared.grouping.num_groups,
        "methods": {m: {"step_time_s": r["step_time_s"], "oom": r["oom"], "placement": r["placement"]} for m, r in results.items()},
        **summary,
        "mlflow_run_id": run_id,
        "mlflow_tracking_uri": uri,
        "prefect_flow_run_id": flow_run_id,
    }
