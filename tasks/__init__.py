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
from compgraph.prepare import PreparedGraph, prepare
from placer.post import PostConfig, post_search
from placer.reinforce import ReinforceConfig, SearchResult, reinforce_search
from tracking import record_experiment


@task(name="preprocess-graph", cache_policy=NONE)
def preprocess(model: str, size: str) -> PreparedGraph:
    """Build, import and group the model's training step (:func:`compgraph.prepare.prepare`)."""
    return prepare(model, size)


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
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, config: ReinforceConfig, log_path: Path
) -> SearchResult:
    """The 2017 REINFORCE search (:func:`placer.reinforce.reinforce_search`)."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches)
    return reinforce_search(env, config, log_path=log_path)


@task(name="post-search", cache_policy=NONE)
def post_placement_search(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, config: PostConfig, log_path: Path
) -> SearchResult:
    """The Post search, cross-entropy + PPO (:func:`placer.post.post_search`)."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches)
    return post_search(env, config, log_path=log_path)


@task(name="evaluate-placements", cache_policy=NONE)
def evaluate(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, placements: dict) -> tuple[dict, dict]:
    """Measure every placement in one environment; returns ``(results, summary)``."""
    env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches)
    results = evaluate_placements(env, placements)
    return results, summarize(results)


@task(name="record-mlflow", cache_policy=NONE)
def record(**kwargs) -> str:
    """Log the experiment to MLflow (:func:`tracking.record_experiment`); returns the parent run id."""
    return record_experiment(**kwargs)
