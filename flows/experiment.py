"""The ``placement-experiment`` flow: model -> graph -> groups -> placements -> measurement -> record."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

import tasks
from cluster.evaluation import LEARNERS
from placer.post import PostConfig
from placer.reinforce import ReinforceConfig
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
    workers: int = 0,
    gpus_per_worker: float = 0,
    policy_device: str = "cpu",
    async_updates: bool = False,
) -> dict:
    """Run every method on one model and cluster, measure all in one environment, log to MLflow.

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
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # controllers > 0: rl and post on Ray (placer.distributed.distributed_search, 2017 Sec. 3.4)
    dist = {"num_controllers": controllers, "workers": workers or None, "gpus_per_worker": gpus_per_worker,
            "policy_device": policy_device, "async_updates": async_updates}
    for method in methods:
        if method not in LEARNERS:
            continue
        log_path = out / "placement-logs" / f"{stamp}-{method}-{model}-{size}-{spec.name}-seed{seed}.jsonl"
        if method == "rl":
            config = ReinforceConfig(budget=budget, k=k, seed=seed)
            if controllers > 0:  # 2017 Sec. 3.4: controllers, workers and a parameter server on Ray
                found = tasks.distributed_placement_search(prepared, spec, env, config, log_path, controllers, ray_address,
                                                           env_options, method, **{k: v for k, v in dist.items() if k != "num_controllers"})
            else:
                found = tasks.placement_search(prepared, spec, env, config, log_path, env_options)
            method_params[method] = {**config.model_dump(), "failing_signal": found.failing_signal, "placer": "seq2seq-2017",
                                     "controllers": controllers, "ray_address": ray_address or ("local" if controllers else "")}
        else:
            config = PostConfig(budget=budget, seed=seed)
            if controllers > 0:
                found = tasks.distributed_placement_search(prepared, spec, env, config, log_path, controllers, ray_address,
                                                           env_options, method, **{k: v for k, v in dist.items() if k != "num_controllers"})
            else:
                found = tasks.post_placement_search(prepared, spec, env, config, log_path, env_options)
            method_params[method] = {**config.model_dump(), "failing_time_s": found.failing_signal, "placer": "post-softmax"}
        if controllers > 0:
            method_params[method].update({**dist, "workers": workers or "K per controller", **getattr(found, "distributed", {}),
                                          "ray_address": ray_address or "local"})
        placements[method] = found.best_placement
        curves[method] = found.curve
        extra[f"placement-logs/{method}"] = str(log_path)
    results, summary = tasks.evaluate(prepared, spec, env, placements, env_options)
    # End-to-end training evaluation of the best learned and the best baseline placement:
    # trained for real with env "real", projected from the simulated step time with "sim".
    training = {}
    if train_steps > 0:
        from tasks.measure import train_placement

        for method in (summary.get("best_learned"), summary.get("best_baseline")):
            if method is not None and method not in training and placements.get(method) is not None:
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
