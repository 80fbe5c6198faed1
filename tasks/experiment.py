"""The experiment flow's bookkeeping, kept out of the flow: its MLflow parameters, the
assembly of the record (what [`tracking.record_experiment`][tracking.record_experiment] logs and the run folder keeps)
and of the result object (``placement experiment --json``), and the record stage (run folder,
MLflow, Prefect artifacts). Plain functions; the Prefect tasks they call keep their names."""

from __future__ import annotations

from pathlib import Path

from prefect.utilities.annotations import quote

from baselines import BASELINES, baseline_level
from baselines.report import add_ratio_columns, reference_note
from cluster.spec import ClusterSpec
from compgraph.prepare import PreparedGraph
from tasks.config import ExperimentConfig
from tasks.search import LearnerSearches


def open_recorder(config: ExperimentConfig, tracking_uri: str, flow_run_id: str | None, started: str):
    """The experiment's live MLflow runs ([`tracking.live.ExperimentRecorder`][tracking.live.ExperimentRecorder]), created now with
    [`tasks.config.ExperimentConfig.mlflow_params`][tasks.config.ExperimentConfig.mlflow_params], one nested run per method, the run settings'
    hash ([`tasks.config.ExperimentConfig.run_settings`][tasks.config.ExperimentConfig.run_settings]) and the config's tracking section
    (spool, parent run, resume); ``started``: the run folder's time stamp."""
    from tracking import artifact_root
    from tracking.live import ExperimentRecorder

    track = config.tracking
    return ExperimentRecorder(tracking_uri, artifact_root(Path(track.out_dir)), config.mlflow_params(),
                              config.resolved_methods, spool=track.spool, parent_run_id=track.parent_run_id,
                              prefect_flow_run_id=flow_run_id, settings=config.run_settings(), resume=track.resume,
                              started=started)


def graph_params(prepared: PreparedGraph, config: ExperimentConfig) -> dict:
    """The MLflow parameters known once the graph is prepared: model, size (``user`` for a user's
    graph), op count, grouper, the grouper's target number of groups (``num_groups_target``: the
    config's ``grouping.num_groups``, else the grouper's default; ``none`` for a grouper that sets
    its own), the groups it formed (``groups``), and how a user's graph was imported
    ([`compgraph.prepare.PreparedGraph.run_params`][compgraph.prepare.PreparedGraph.run_params])."""
    from compgraph.grouping import default_num_groups

    num_groups = config.grouping.num_groups
    target = num_groups if num_groups is not None else default_num_groups(prepared.grouping.grouper)
    return {"model": prepared.name, "size": prepared.size, "ops": prepared.graph.num_ops,
            "groups": prepared.grouping.num_groups, "grouper": prepared.grouping.grouper,
            "num_groups_target": "none" if target is None else target, **prepared.run_params()}


def experiment_outcome(config: ExperimentConfig, prepared: PreparedGraph, spec: ClusterSpec, searches: LearnerSearches,
                       results: dict, summary: dict, refs: dict, training: dict, tracking_uri: str,
                       flow_run_id: str | None) -> tuple[dict, dict]:
    """``(record, result)`` of one experiment.

    Args:
        config: the experiment (its MLflow parameters: [`tasks.config.ExperimentConfig.mlflow_params`][tasks.config.ExperimentConfig.mlflow_params]).
        searches: the learners' searches ([`tasks.search.learner_searches`][tasks.search.learner_searches]).
        results, summary: [`tasks.search.evaluate`][tasks.search.evaluate]'s pair (``results`` gets the ratio columns).
        refs: [`baselines.report.reference_points`][baselines.report.reference_points]'s dict (lower bound, optimum).
        training: [`tasks.measure.train_best`][tasks.measure.train_best]'s dict (method -> training result).
    Returns:
        ``record``: the keyword arguments of [`tracking.record_experiment`][tracking.record_experiment] but the store
        (params, results, summary with the reference metrics, method_params, curves,
        prefect_flow_run_id, extra_artifacts); ``result``: the flow's result object (the README's
        ``--json`` shape, with ``labels``: method -> table label of each warm-started learner, e.g.
        ``rl (warm: expert)``; ``mlflow_run_id`` ``None`` until recorded, no ``run_dir`` yet).
    """
    env, methods = config.env, config.resolved_methods
    summary = {**summary, "training": training}
    # MLflow parent metrics "<method>.x_lower_bound", "<method>.x_optimum", lower_bound_s, optimum_s
    ref_metrics = {**add_ratio_columns(results, refs, env), "lower_bound_s": refs["lower_bound_s"],
                   "optimum_s": refs["optimum_s"], "optimum_proven": refs["optimum_proven"]}
    # a baseline's level: "op" (places the op graph, e.g. Scotch as 2017 ran it) or "group"
    method_params = {m: ({"level": baseline_level(m)} if m in BASELINES else searches.method_params.get(m, {}))
                     for m in methods}
    params = {**config.mlflow_params(), **graph_params(prepared, config)}
    record = dict(params=params, results=results, summary={**summary, **ref_metrics}, method_params=method_params,
                  curves=searches.curves, prefect_flow_run_id=flow_run_id, extra_artifacts=searches.extra_artifacts)
    result = {
        "model": prepared.name,
        "size": prepared.size,
        "cluster": spec.name,
        "env": env,
        "ops": prepared.graph.num_ops,
        "groups": prepared.grouping.num_groups,
        "methods": {m: {"step_time_s": r["step_time_s"], "oom": r["oom"], "placement": r["placement"],
                        "x_lower_bound": r["x_lower_bound"], "x_optimum": r["x_optimum"]} for m, r in results.items()},
        "lower_bound_s": refs["lower_bound_s"],
        "optimum_s": refs["optimum_s"],
        "optimum_proven": refs["optimum_proven"],
        "reference_environment": refs.get("reference_environment"),
        "reference_note": reference_note(env),
        **summary,
        "labels": dict(searches.labels),  # the warm-started learners' table labels, "rl (warm: expert)" (placer.warm)
        "mlflow_run_id": None,
        "mlflow_tracking_uri": tracking_uri,
        "prefect_flow_run_id": flow_run_id,
    }
    return record, result


def save_and_record(config: ExperimentConfig, stamp: str, record: dict, result: dict, prepared: PreparedGraph,
                    spec: ClusterSpec, tracking_uri: str, recorder) -> dict:
    """The experiment's record stage, in this order: the run folder
    ``<out>/runs/<stamp>-<model>-<size>-<cluster>-seed<seed>`` ([`tracking.live.save_run_folder`][tracking.live.save_run_folder]:
    results.json, table.md, placements.json, plots/), then MLflow (task ``record-mlflow``, unless
    ``spool``: ``placement log-run`` logs the folder later), then the recorder's runs closed
    ([`tracking.live.ExperimentRecorder`][tracking.live.ExperimentRecorder]) and the Prefect artifacts published.

    Returns:
        ``result`` with ``run_dir``, ``recommendation`` ([`tracking.advice.recommendation`][tracking.advice.recommendation]) and
        ``mlflow_run_id`` (``None`` when spooled or if MLflow failed) set.
    """
    from tasks import stages
    from tasks.publish import publish_experiment
    from tracking import artifact_root
    from tracking.live import run_folder, save_run_folder

    recorder.flush(force=True)  # the learning-curve points still buffered go to their nested runs before these are completed
    out, spool = Path(config.tracking.out_dir), config.tracking.spool
    folder = run_folder(out, stamp, prepared.name, result["size"], spec.name, record["params"]["seed"])
    run_dir = result["run_dir"] = str(save_run_folder(folder, record, result, prepared, spec))
    from tracking.advice import recommendation

    result["recommendation"] = recommendation(result, record["params"].get("budget"))  # what to do next (the CLI prints it)
    if not spool:
        # quote: Prefect would otherwise visit every element of the results (op-level placements) to look for futures
        result["mlflow_run_id"] = stages.record(tracking_uri=tracking_uri, artifact_location=artifact_root(out),
                                               run_ids=recorder.run_ids, run_dir=run_dir,
                                               **{k: quote(v) for k, v in record.items()})
    recorder.finish(result["mlflow_run_id"] if not spool else "spooled")
    publish_experiment(quote(result))
    return result
