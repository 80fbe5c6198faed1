"""The experiment flow's bookkeeping, kept out of the flow: its MLflow parameters, the
assembly of the record (what :func:`tracking.record_experiment` logs and the run folder keeps)
and of the result object (``placement experiment --json``), and the record stage (run folder,
MLflow, Prefect artifacts). Plain functions; the Prefect tasks they call keep their names."""

from __future__ import annotations

from pathlib import Path

from prefect.utilities.annotations import quote

from baselines import BASELINES, baseline_level
from baselines.report import add_ratio_columns, reference_note
from cluster.spec import ClusterSpec
from compgraph.prepare import PreparedGraph
from tasks.search import LearnerSearches, learner_setting


def start_params(methods: list[str], budget: int, seed: int, env: str, learner_options: dict | None) -> dict:
    """The MLflow parameters known before any work: methods, budget, ``k`` (rl's K, 2017 Eq. 3:
    ``learner_options["rl"]["k"]`` or the paper default), seed, env."""
    return {"methods": ",".join(methods), "budget": budget, "k": learner_setting("rl", "k", learner_options),
            "seed": seed, "env": env, "learner_options": options_param(learner_options)}


def options_param(learner_options: dict | None) -> str:
    """The learner options as one MLflow parameter: compact JSON with sorted keys (``{}`` for none), so
    runs of equal settings carry equal strings (``placement compare`` groups by it)."""
    import json

    return json.dumps(learner_options or {}, sort_keys=True, separators=(",", ":"), default=str)


def source_param(source) -> str | None:
    """The graph source as the MLflow parameter ``source`` (its JSON), so that ``placement export``
    can prepare the same graph again; ``None`` when not known."""
    return None if source is None else source.model_dump_json()


def graph_params(prepared: PreparedGraph, size: str, spec: ClusterSpec, num_groups: int | None = None,
                 source=None) -> dict:
    """The MLflow parameters known once the graph is prepared: model, size, cluster, op count,
    grouper, the grouper's target number of groups (``num_groups_target``: ``num_groups``, else
    the grouper's default; ``none`` for a grouper that sets its own), the groups it formed
    (``groups``) and, given, the graph source (``source``: :func:`source_param`)."""
    from compgraph.grouping import default_num_groups

    target = num_groups if num_groups is not None else default_num_groups(prepared.grouping.grouper)
    out = {"model": prepared.name, "size": size, "cluster": spec.name, "ops": prepared.graph.num_ops,
           "groups": prepared.grouping.num_groups, "grouper": prepared.grouping.grouper,
           "num_groups_target": "none" if target is None else target}
    if source is not None:
        out["source"] = source_param(source)
    return out


def experiment_outcome(prepared: PreparedGraph, size: str, spec: ClusterSpec, env: str, methods: list[str], budget: int,
                       seed: int, learner_options: dict | None, searches: LearnerSearches, results: dict, summary: dict,
                       refs: dict, training: dict, tracking_uri: str, flow_run_id: str | None,
                       source=None) -> tuple[dict, dict]:
    """``(record, result)`` of one experiment.

    Args:
        searches: the learners' searches (:func:`tasks.search.learner_searches`).
        results, summary: :func:`tasks.search.evaluate`'s pair (``results`` gets the ratio columns).
        refs: :func:`baselines.report.reference_points`'s dict (lower bound, optimum).
        training: :func:`tasks.measure.train_best`'s dict (method -> training result).
        source: the graph source, recorded as the parameter ``source`` (:func:`source_param`).
    Returns:
        ``record``: the keyword arguments of :func:`tracking.record_experiment` but the store
        (params, results, summary with the reference metrics, method_params, curves,
        prefect_flow_run_id, extra_artifacts); ``result``: the flow's result object (the README's
        ``--json`` shape, with ``labels``: method -> table label of each warm-started learner, e.g.
        ``rl (warm: expert)``; ``mlflow_run_id`` ``None`` until recorded, no ``run_dir`` yet).
    """
    summary = {**summary, "training": training}
    # MLflow parent metrics "<method>.x_lower_bound", "<method>.x_optimum", lower_bound_s, optimum_s
    ref_metrics = {**add_ratio_columns(results, refs, env), "lower_bound_s": refs["lower_bound_s"],
                   "optimum_s": refs["optimum_s"], "optimum_proven": refs["optimum_proven"]}
    # a baseline's level: "op" (places the op graph, e.g. Scotch as 2017 ran it) or "group"
    method_params = {m: ({"level": baseline_level(m)} if m in BASELINES else searches.method_params.get(m, {}))
                     for m in methods}
    params = {"model": prepared.name, "size": size, "cluster": spec.name, "methods": ",".join(methods), "budget": budget,
              "k": learner_setting("rl", "k", learner_options), "seed": seed, "env": env, "ops": prepared.graph.num_ops,
              "learner_options": options_param(learner_options),
              "groups": prepared.grouping.num_groups, "grouper": prepared.grouping.grouper}
    if source is not None:
        params["source"] = source_param(source)
    params.update(prepared.run_params())  # a user's graph: how it was imported (loops unrolled or kept as one iteration)
    record = dict(params=params, results=results, summary={**summary, **ref_metrics}, method_params=method_params,
                  curves=searches.curves, prefect_flow_run_id=flow_run_id, extra_artifacts=searches.extra_artifacts)
    result = {
        "model": prepared.name,
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
        "reference_environment": refs.get("reference_environment"),
        "reference_note": reference_note(env),
        **summary,
        "labels": dict(searches.labels),  # the warm-started learners' table labels, "rl (warm: expert)" (placer.warm)
        "mlflow_run_id": None,
        "mlflow_tracking_uri": tracking_uri,
        "prefect_flow_run_id": flow_run_id,
    }
    return record, result


def save_and_record(out: Path, stamp: str, record: dict, result: dict, prepared: PreparedGraph, spec: ClusterSpec,
                    tracking_uri: str, recorder, spool: bool) -> dict:
    """The experiment's record stage, in this order: the run folder
    ``<out>/runs/<stamp>-<model>-<size>-<cluster>-seed<seed>`` (:func:`tracking.live.save_run_folder`:
    results.json, table.md, placements.json, plots/), then MLflow (task ``record-mlflow``, unless
    ``spool``: ``placement log-run`` logs the folder later), then the recorder's runs closed
    (:class:`tracking.live.ExperimentRecorder`) and the Prefect artifacts published.

    Returns:
        ``result`` with ``run_dir``, ``recommendation`` (:func:`tracking.advice.recommendation`) and
        ``mlflow_run_id`` (``None`` when spooled or if MLflow failed) set.
    """
    from tasks import stages
    from tasks.publish import publish_experiment
    from tracking import artifact_root
    from tracking.live import run_folder, save_run_folder

    recorder.flush(force=True)  # the learning-curve points still buffered go to their nested runs before these are completed
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
