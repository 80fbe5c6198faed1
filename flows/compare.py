"""The ``compare-learners`` flow: every learner on the same graph, cluster, environment and
budget over several seeds; summary, curves and one plot to MLflow."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from tasks import stages
from tasks.choices import AUTO, ClusterName, Count, EnvName, GrouperChoice, LearnerName, NonNegative, Unset, unset
from tasks.config import LearnerOptions, learner_overrides
from compgraph.frontends import BenchmarkSource, GraphSource, is_user_graph
from placer import LEARNERS
from placer.compare import summarize_runs
from placer.search import run_name
from tasks.search import learner_config, learner_search, run_paths
from tracking import artifact_root, default_tracking_uri, placement_home
from tracking.learners import plot_learner_curves, record_comparison


@task(name="plot-learner-curves", cache_policy=NONE)
def plot(runs: dict, path: Path, title: str) -> Path:
    """[`tracking.learners.plot_learner_curves`][tracking.learners.plot_learner_curves]."""
    return plot_learner_curves(runs, path, title)


@task(name="record-comparison", cache_policy=NONE)
def record(**kwargs) -> str:
    """[`tracking.learners.record_comparison`][tracking.learners.record_comparison]."""
    return record_comparison(**kwargs)


@flow(name="compare-learners")
def compare_learners(
    source: GraphSource = BenchmarkSource(),
    cluster: ClusterName = "k80x2",
    learners: Unset[list[LearnerName]] = [],
    seeds: list[NonNegative] = [0, 1, 2],
    budget: Count = 1000,
    env: EnvName = "sim",
    grouper: Unset[GrouperChoice] = AUTO,
    learner_options: LearnerOptions = LearnerOptions(),  # type: ignore[valid-type]
    resume: bool = False,
    out_dir: str = str(placement_home()),  # the user-level home when imported
    tracking_uri: Unset[str] = "",
    cache_dir: Unset[str] = "",
) -> dict:
    """Run every learner of ``learners`` (default: all of [`placer.LEARNERS`][placer.learner.LEARNERS]) once per seed
    with the same budget in the same kind of environment; returns the per-learner summary
    ([`placer.compare.summarize_runs`][placer.compare.summarize_runs]), the plot's path and the MLflow run.

    Args:
        source: the graph, as the experiment's (tasks.config.ExperimentConfig.source): a benchmark (kind benchmark:
            model, size: small for seconds, paper for the 2017 sizes) or a user's training step.
        cluster: preset cluster or the path of a YAML cluster spec.
        learners: the learners compared (empty: every learner of placer.LEARNERS).
        seeds: one search per learner and seed; the summary gives the median and spread over them.
        budget: placements each learner samples per seed.
        env: where placements are measured: sim (simulator), real (TensorFlow on this machine) or grappler.
        grouper: how ops are grouped (auto: 2017 for benchmarks, heuristic for users' graphs).
        learner_options: each learner's options, its paper's defaults pre-filled (the experiment's learners
            section); a field left at its default is no override.
        resume: continue interrupted searches from their placement logs and checkpoints.
        out_dir: folder of the MLflow store (when tracking_uri is empty), the plots, logs and graph cache.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        cache_dir: preprocessed-graph cache (empty: out_dir/graph-cache).
    """
    learners, grouper, tracking_uri, cache_dir = unset(learners), unset(grouper, AUTO), unset(tracking_uri), unset(cache_dir)
    out = Path(out_dir)
    uri = tracking_uri or default_tracking_uri(out)
    chosen = list(learners or LEARNERS)
    overrides = learner_overrides(learner_options, chosen)
    prepared = stages.preprocess(source, grouper, None, cache_dir or str(out / "graph-cache"))
    size = "user" if is_user_graph(source) else source.size
    spec = stages.load_cluster_spec(cluster)
    runs: dict = {}
    for method in chosen:
        for seed in seeds:
            config = learner_config(method, budget, seed, overrides.get(method))
            log_path, ckpt_path = run_paths(out, prepared.name, size, spec.name, prepared.grouping.grouper, method,
                                            seed, config.budget)
            runs.setdefault(method, []).append(
                learner_search(method, quote(prepared), spec, env, config, log_path, ckpt_path, resume))
    summary = summarize_runs(runs)
    name = run_name(prepared.name, size, spec.name, prepared.grouping.grouper, "compare", min(seeds), budget)
    title = (f"{prepared.name} ({size}, {prepared.grouping.num_groups} groups) on {spec.name} [{env}], "
             f"{budget} placements, seeds {','.join(map(str, seeds))}")
    plot_path = plot(runs, out / "plots" / f"{name}.png", title)
    flow_run_id = str(flow_run.get_id()) if flow_run.get_id() else None
    params = {"model": prepared.name, "size": size, "cluster": spec.name, "env": env, "budget": budget,
              "seeds": ",".join(map(str, seeds)), "learners": ",".join(chosen), "groups": prepared.grouping.num_groups,
              "grouper": prepared.grouping.grouper}
    run_id = record(tracking_uri=uri, artifact_location=artifact_root(out), params=params, summary=summary, runs=runs,
                    plot_path=plot_path, seeds=list(seeds), prefect_flow_run_id=flow_run_id)
    return {"model": prepared.name, "size": size, "cluster": spec.name, "env": env, "budget": budget, "seeds": list(seeds),
            "groups": prepared.grouping.num_groups, "learners": summary, "plot": str(plot_path),
            "mlflow_run_id": run_id, "mlflow_tracking_uri": uri, "prefect_flow_run_id": flow_run_id}
