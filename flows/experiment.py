"""The ``placement-experiment`` flow: model -> graph -> groups -> placements -> measurement -> record."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

import tasks
from baselines import BASELINES, DEFAULT_EXCLUDED
from baselines.report import add_ratio_columns
from cluster.op_placement import is_op_placement
from flows.choices import ClusterName, EnvName, GrouperName, MethodName, ModelName, SizeName
from placer import DEFAULT_LEARNERS, LEARNERS
from tracking import artifact_root, default_tracking_uri
from tracking.live import ExperimentRecorder, mark_failed, mark_killed, run_folder, save_run_folder

METHODS = (*(b for b in BASELINES if b not in DEFAULT_EXCLUDED), *DEFAULT_LEARNERS)  # the default run's methods


@flow(name="placement-experiment", on_failure=[mark_failed], on_crashed=[mark_killed], on_cancellation=[mark_killed])
def placement_experiment(
    model: ModelName = "rnnlm",
    size: SizeName = "small",
    cluster: ClusterName = "k80x2",
    methods: list[MethodName] = list(METHODS),
    budget: int = 1000,
    k: int = 8,
    seed: int = 0,
    env: EnvName = "sim",
    out_dir: str = "placement-runs",
    tracking_uri: str | None = None,
    graph_def: str | None = None,
    keras: str | None = None,
    grouper: GrouperName | None = None,
    num_groups: int | None = None,
    cache_dir: str | None = None,
    train_steps: int = 100,
    controllers: int = 0,
    ray_address: str | None = None,
    soft_placement: bool = False,
    learner_options: dict[str, dict] | None = None,
    resume: bool = False,
    saved_model: str | None = None,
    signature: str | None = None,
    spool: bool = False,
    mlflow_parent_run_id: str | None = None,
    workers: int = 0,
    gpus_per_worker: float = 0,
    policy_device: str = "cpu",
    async_updates: bool = False,
) -> dict:
    """Run every method on one model and cluster, measure all in one environment, log to MLflow.

    Args:
        model: benchmark model (2017 Table 2: rnnlm, nmt, inception_v3); ignored with graph_def or keras.
        size: benchmark size: small (a demo in seconds) or paper (the 2017 sizes).
        cluster: preset cluster (k80x2: 2 K80 GPUs and a CPU, as in 2017) or the path of a YAML cluster spec.
        methods: baselines (baselines.BASELINES: single_cpu, single_gpu, expert, scotch, mincut, metis, m_topo,
            m_etf, m_sct, optimum) and learners (placer.LEARNERS: rl, post, ppo, ce, pg, hierarchical, eagle, eagle_ce).
        budget: placements each learner samples.
        k: placements per policy update of rl (2017: K).
        seed: seed of the searches.
        env: where placements are measured: sim (simulator), real (TensorFlow on this machine) or grappler
            (TensorFlow's own cost model).
        out_dir: folder of the run folders, the MLflow store (when tracking_uri is empty) and the graph cache.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        graph_def: path of a user's training-step GraphDef (.pb/.pbtxt) instead of a benchmark.
        keras: MODULE:FUNCTION returning (keras model, input specs) instead of a benchmark.
        grouper: how ops are grouped (empty: 2017 for benchmarks, heuristic for users' graphs).
        num_groups: target number of groups of metis and fluid (empty: 256).
        cache_dir: preprocessed-graph cache (empty: out_dir/graph-cache).
        train_steps: steps of the end-to-end training evaluation of the best placements (0: none).
        ray_address: an existing Ray cluster; empty: a local Ray.
        soft_placement: with env real, move ops without a kernel on their device to the CPU.
        learner_options: per learner, fields of its config overriding the paper defaults,
            e.g. {"rl": {"hidden_size": 64}} (k is rl's K unless given there).
        resume: continue an interrupted run with the same settings from its placement logs and
            checkpoints (named by the settings; nothing measured twice).
        saved_model: a user's SavedModel folder instead of a benchmark.
        signature: the SavedModel signature holding the training step.
        spool: log nothing to MLflow; the run folder is logged later with `placement log-run DIR`.
        mlflow_parent_run_id: nest the MLflow run under this run (set by the sweep).
        controllers: with more than 0, every learner that places the prepared groups searches on Ray.
        workers: measuring workers on Ray (0: K per controller, 2017 Sec. 3.4).
        gpus_per_worker: GPUs each Ray worker asks for (real execution on GPU nodes).
        policy_device: where controllers run the policy: cpu or cuda.
        async_updates: 2017's asynchronous updates instead of synchronous rounds (not reproducible).

    Returns the result object of ``placement experiment --json`` (see the README).
    The MLflow runs are created at the start and the searches logged as they go
    (:class:`tracking.live.ExperimentRecorder`); the results are written to the run folder
    ``<out_dir>/runs/...`` before MLflow; ``spool``: nothing goes to MLflow (``placement log-run``
    logs the folder later). ``mlflow_parent_run_id``: nest the experiment's run under it (a sweep).
    """
    out = Path(out_dir)
    # real execution: an op placed where it has no kernel is an error unless soft placement is asked for
    env_options = {"soft_placement": True} if env == "real" and soft_placement else {}
    uri = tracking_uri or default_tracking_uri(out)
    flow_run_id = str(flow_run.get_id()) if flow_run.get_id() else None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    recorder = ExperimentRecorder(uri, artifact_root(out), {"methods": ",".join(methods), "budget": budget, "k": k, "seed": seed,
                                  "env": env}, methods, spool, mlflow_parent_run_id, flow_run_id)
    prepared = tasks.preprocess(model, size, grouper, num_groups, cache_dir or str(out / "graph-cache"), seed, graph_def, keras,
                                saved_model, signature)
    model = prepared.name
    spec = tasks.load_cluster_spec(cluster)
    recorder.log_params({"model": model, "size": size, "cluster": spec.name, "ops": prepared.graph.num_ops,
                         "groups": prepared.grouping.num_groups, "grouper": prepared.grouping.grouper})
    placements: dict = {}
    for method in methods:
        if method not in LEARNERS and method != "optimum":  # the optimum comes with the reference points below
            placements[method] = tasks.baseline_placement(method, prepared, spec)
    curves: dict = {}
    method_params: dict = {m: {} for m in methods}
    extra = {}
    groupings: dict = {}
    # controllers > 0: the learners on Ray (placer.distributed.distributed_search, 2017 Sec. 3.4)
    dist = {"workers": workers or None, "gpus_per_worker": gpus_per_worker, "policy_device": policy_device,
            "async_updates": async_updates}
    for method in methods:
        if method not in LEARNERS:
            continue
        options = {**({"k": k} if method == "rl" else {}), **(learner_options or {}).get(method, {})}
        config = tasks.learner_config(method, budget, seed, options)
        log_path, ckpt_path = tasks.run_paths(out, model, size, spec.name, prepared.grouping.grouper, method, seed, config.budget)
        progress = recorder.callback(method, config.budget, get_run_logger())
        distributed = controllers > 0 and LEARNERS[method].units == "groups"  # op-grouping learners: in-process
        if distributed:
            log_path = log_path.with_name(log_path.name.replace(f"-{method}-", f"-{method}-ray{controllers}-"))
            if not resume:
                log_path.unlink(missing_ok=True)  # the distributed search replays an existing log
            found = tasks.distributed_placement_search(prepared, spec, env, config, log_path, controllers, ray_address,
                                                       env_options, progress, method, **dist)
        else:
            found = tasks.learner_search(method, prepared, spec, env, config, log_path, ckpt_path, resume, env_options,
                                         progress)
        groupings[method] = tasks.learner_grouping(method, prepared)
        method_params[method] = {**config.model_dump(), "failing_signal": found.failing_signal,
                                 "paper": LEARNERS[method].paper, "units": LEARNERS[method].units,
                                 "controllers": controllers if distributed else 0}
        if distributed:
            method_params[method].update({**dist, "workers": workers or "K per controller", **getattr(found, "distributed", {}),
                                          "ray_address": ray_address or "local"})
        placements[method] = found.best_placement
        curves[method] = found.curve
        extra[f"placement-logs/{method}"] = str(log_path)
    # reference points (baselines.report): the lower bound, and the optimum when asked for
    refs = tasks.reference_points(prepared, spec, placements, "optimum" in methods)
    if "optimum" in methods:
        placements["optimum"] = refs["optimum_placement"]
    results, summary = tasks.evaluate(prepared, spec, env, placements, env_options, groupings)
    # MLflow parent metrics "<method>.x_lower_bound", "<method>.x_optimum", lower_bound_s, optimum_s
    ref_metrics = {**add_ratio_columns(results, refs), "lower_bound_s": refs["lower_bound_s"], "optimum_s": refs["optimum_s"],
                   "optimum_proven": refs["optimum_proven"]}
    # End-to-end training evaluation of the best learned and the best baseline placement:
    # trained for real with env "real", projected from the simulated step time with "sim".
    training = {}
    if train_steps > 0:
        from tasks.measure import train_placement

        for method in (summary.get("best_learned"), summary.get("best_baseline")):
            own_units = method in groupings and groupings[method] is not prepared.grouping
            if method is not None and method not in training and placements.get(method) is not None \
                    and not own_units and not is_op_placement(placements[method]):  # op-level placements: not trained yet
                training[method] = train_placement(prepared, spec, env, placements[method], train_steps, seed)
    summary["training"] = training
    params = {"model": model, "size": size, "cluster": spec.name, "methods": ",".join(methods), "budget": budget,
              "k": k, "seed": seed, "env": env, "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups,
              "grouper": prepared.grouping.grouper}
    params.update(prepared.run_params())  # a user's graph: how it was imported (loops unrolled or kept as one iteration)
    record = dict(params=params, results=results, summary={**summary, **ref_metrics}, method_params=method_params,
                  curves=curves, prefect_flow_run_id=flow_run_id, extra_artifacts=extra)
    result = {
        "model": model,
        "size": size,
        "cluster": spec.name,
        "env": env,
        "ops": prepared.graph.num_ops,
        "groups": prepared.grouping.num_groups,
        "methods": {m: {"step_time_s": r["step_time_s"], "oom": r["oom"], "placement": r["placement"],
                        "x_lower_bound": r["x_lower_bound"], "x_optimum": r["x_optimum"]} for m, r in results.items()},
        "lower_bound_s": refs["lower_bound_s"],
        "optimum_s": refs["optimum_s"],
        "optimum_proven": refs["optimum_proven"],
        **summary,
        "mlflow_run_id": None,
        "mlflow_tracking_uri": uri,
        "prefect_flow_run_id": flow_run_id,
    }
    # the run folder first (results.json, table.md, placements.json, plots/), then MLflow
    run_dir = result["run_dir"] = str(save_run_folder(run_folder(out, stamp, model, size, spec.name, seed), record, result,
                                                      prepared, spec))
    if not spool:
        result["mlflow_run_id"] = tasks.record(tracking_uri=uri, artifact_location=artifact_root(out), run_ids=recorder.run_ids,
                                               run_dir=run_dir, **record)
    recorder.finish(result["mlflow_run_id"] if not spool else "spooled")
    tasks.publish_experiment(result)
    return result
