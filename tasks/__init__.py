"""Prefect tasks: thin wrappers around the stages; the algorithms live in the packages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prefect import task
from prefect.cache_policies import NONE

from baselines import BASELINES, BaselineContext
from cluster.environment import make_environment
from cluster.evaluation import evaluate_placements, summarize
from cluster.spec import ClusterSpec, load_cluster
from compgraph.prepare import PreparedGraph, prepare, prepare_user_graph
from placer.post import PostConfig, post_search
from placer.reinforce import ReinforceConfig, SearchResult, reinforce_search
from tracking import record_experiment


@task(name="preprocess-graph", cache_policy=NONE)
def preprocess(
    model: str,
    size: str,
    grouper: str | None = None,
    num_groups: int | None = None,
    cache_dir: str | None = None,
    seed: int = 0,
    graph_def: str | None = None,
    keras: str | None = None,
) -> PreparedGraph:
    """Build (or read from the cache), import and group the training step: a benchmark
    (:func:`compgraph.prepare.prepare`) or a user's GraphDef / Keras model
    (:func:`compgraph.prepare.prepare_user_graph`)."""
    if graph_def is not None or keras is not None:
        return prepare_user_graph(graph_def_path=graph_def, keras=keras, grouper=grouper or "heuristic",
                                  num_groups=num_groups, seed=seed)
    return prepare(model, size, grouper=grouper or "2017", num_groups=num_groups, cache_dir=cache_dir, seed=seed)


@task(name="load-cluster", cache_policy=NONE)
def load_cluster_spec(cluster: str) -> ClusterSpec:
    """The cluster spec (:func:`cluster.spec.load_cluster`)."""
    return load_cluster(cluster)


@task(name="baseline-placement", cache_policy=NONE)
def baseline_placement(method: str, prepared: PreparedGraph, spec: ClusterSpec) -> np.ndarray:
    """One baseline's group placement (:data:`baselines.BASELINES`)."""
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    return BASELINES[method](ctx)


@task(name="placement-search", cache_policy=NONE)
def placement_search(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, config: ReinforceConfig, log_path: Path,
    env_options: dict | None = None,
) -> SearchResult:
    """The 2017 REINFORCE search (:func:`placer.reinforce.reinforce_search`)."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches,
                           **(env_options or {}))
    return reinforce_search(env, config, log_path=log_path)


@task(name="distributed-placement-search", cache_policy=NONE)
def distributed_placement_search(
    prepared: PreparedGraph,
    spec: ClusterSpec,
    env_kind: str,
    config: ReinforceConfig,
    log_path: Path,
    num_controllers: int,
    ray_address: str | None,
    env_options: dict | None = None,
    method: str = "rl",
    workers: int | None = None,
    gpus_per_worker: float = 0,
    policy_device: str = "cpu",
    async_updates: bool = False,
) -> SearchResult:
    """A learner's search on Ray: controllers, workers and a parameter server
    (:func:`placer.distributed.distributed_search`; synchronous rounds reproducible by seed)."""
    from placer.distributed import distributed_search

    return distributed_search(method, config, prepared, spec, env_kind, controllers=num_controllers, workers=workers,
                              gpus_per_worker=gpus_per_worker, policy_device=policy_device,
                              async_updates=async_updates, ray_address=ray_address, log_path=log_path,
                              env_options=env_options)


@task(name="post-search", cache_policy=NONE)
def post_placement_search(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, config: PostConfig, log_path: Path,
    env_options: dict | None = None,
) -> SearchResult:
    """The Post search, cross-entropy + PPO (:func:`placer.post.post_search`)."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches,
                           **(env_options or {}))
    return post_search(env, config, log_path=log_path)


@task(name="evaluate-placements", cache_policy=NONE)
def evaluate(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, placements: dict, env_options: dict | None = None
) -> tuple[dict, dict]:
    """Measure every placement in one environment; returns ``(results, summary)``."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches,
                           **(env_options or {}))
    results = evaluate_placements(env, placements)
    return results, summarize(results)


@task(name="record-mlflow", cache_policy=NONE)
def record(**kwargs) -> str:
    """Log the experiment to MLflow (:func:`tracking.record_experiment`); returns the parent run id."""
    return record_experiment(**kwargs)
