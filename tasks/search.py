"""Prefect tasks of the learner searches: one environment helper, one search task for every
learner of :data:`placer.LEARNERS` (no per-learner dispatch), the placement evaluation."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from cluster.environment import Environment, make_environment
from cluster.evaluation import evaluate_placements, summarize
from cluster.spec import ClusterSpec
from compgraph.grouping import colocation_grouping
from compgraph.ir import Grouping
from compgraph.prepare import PreparedGraph
from placer import LEARNERS
from placer.learner import LearnerConfig
from placer.search import SearchResult, run_name, run_search


def environment(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict | None = None,
                grouping: Grouping | None = None) -> Environment:
    """The environment of ``prepared`` on ``spec`` over ``grouping`` (default: the prepared grouping).
    Every flow and task builds its environments here (one place to change the factory's signature)."""
    return make_environment(env_kind, prepared.graph, grouping if grouping is not None else prepared.grouping, spec,
                            prepared.graph_def, prepared.fetches, **(env_options or {}))


def learner_grouping(method: str, prepared: PreparedGraph) -> Grouping:
    """The units ``method`` places: the prepared groups, or the colocation units for a
    learner that groups ops itself (``units == "colocation"``)."""
    if LEARNERS[method].units == "colocation":
        return colocation_grouping(prepared.graph)
    return prepared.grouping


def learner_config(method: str, budget: int, seed: int, options: dict | None = None) -> LearnerConfig:
    """``method``'s config: its paper defaults, then ``budget``, ``seed`` and ``options``.

    Raises:
        ValueError: unknown method (lists the valid ones), or an option its config refuses
            (pydantic's message names the field; unknown fields are refused).
    """
    if method not in LEARNERS:
        raise ValueError(f"unknown learner {method!r}; valid: {', '.join(LEARNERS)}")
    cls = LEARNERS[method].Config
    options = dict(options or {})
    unknown = sorted(set(options) - set(cls.model_fields))
    if unknown:
        raise ValueError(f"learner option {method}.{unknown[0]}: unknown; valid: {', '.join(cls.model_fields)}")
    return cls(**{"budget": budget, "seed": seed, **options})


def run_paths(out: Path, model: str, size: str, cluster: str, grouper: str, method: str, seed: int,
              budget: int) -> tuple[Path, Path]:
    """``(placement log, checkpoint)`` of a run, named by its settings (:func:`placer.search.run_name`)."""
    name = run_name(model, size, cluster, grouper, method, seed, budget)
    return out / "placement-logs" / f"{name}.jsonl", out / "checkpoints" / f"{name}.pt"


@task(name="learner-search", cache_policy=NONE)
def learner_search(
    method: str,
    prepared: PreparedGraph,
    spec: ClusterSpec,
    env_kind: str,
    config: LearnerConfig,
    log_path: Path | None = None,
    checkpoint_path: Path | None = None,
    resume: bool = False,
    env_options: dict | None = None,
) -> SearchResult:
    """One learner's search (:data:`placer.LEARNERS`, :func:`placer.search.run_search`) in an
    environment over its units (:func:`learner_grouping`)."""
    env = environment(prepared, spec, env_kind, env_options, learner_grouping(method, prepared))
    return run_search(LEARNERS[method](env, config), env, log_path=log_path, checkpoint_path=checkpoint_path,
                      resume=resume)


@task(name="evaluate-placements", cache_policy=NONE)
def evaluate(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, placements: dict, env_options: dict | None = None,
    groupings: dict[str, Grouping] | None = None,
) -> tuple[dict, dict]:
    """Measure every placement in one environment; returns ``(results, summary)``.

    ``placements`` are over the prepared groups except for methods in ``groupings``
    (method -> the grouping its placement is over, e.g. a colocation learner's units): those
    are measured in an environment of the same kind over their own grouping. Every
    environment simulates (or runs) the same op graph, each op on its unit's device, so the
    step times compare. The summary's learners are the methods of :data:`placer.LEARNERS`.
    """
    env = environment(prepared, spec, env_kind, env_options)
    others = {m: environment(prepared, spec, env_kind, env_options, g) for m, g in (groupings or {}).items()}
    results = evaluate_placements(env, placements, others)
    return results, summarize(results, [m for m in results if m in LEARNERS])
