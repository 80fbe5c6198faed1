"""Prefect tasks of the learner searches: one environment helper, one search task for every
learner of [`placer.LEARNERS`][placer.learner.LEARNERS] (no per-learner dispatch), the placement evaluation."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from prefect import task
from prefect.cache_policies import NONE
from prefect.utilities.annotations import quote

from baselines import BASELINES
from cluster.environment import Environment
from cluster.factory import make_environment
from cluster.evaluation import evaluate_placements, summarize
from cluster.machine_readers import host_cpu_model
from cluster.spec import ClusterSpec
from compgraph.grouping import coarse_of, colocation_grouping
from compgraph.ir import Grouping
from compgraph.prepare import PreparedGraph
from placer import LEARNERS
from placer.learner import LearnerConfig, learner_units
from placer.distributed import RaySettings, ray_controllers
from placer.search import SearchResult, run_name, run_search
from placer.warm import fits_units, is_warm, warm_label
from tasks.config import ExperimentConfig, RayOptions
from tracking.progress import say


def environment(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict | None = None,
                grouping: Grouping | None = None) -> Environment:
    """The environment of ``prepared`` on ``spec`` over ``grouping`` (default: the prepared grouping).
    Every flow and task builds its environments here (one place to change the factory's signature)."""
    return make_environment(env_kind, prepared, spec, env_options, grouping=grouping)


def learner_grouping(method: str, prepared: PreparedGraph, config: LearnerConfig | None = None) -> Grouping:
    """The units ``method`` with ``config`` (``None``: its paper's) places: the prepared groups, or the
    colocation units for a learner that groups ops itself ([`placer.learner.learner_units`][placer.learner.learner_units]
    ``"colocation"``), each with the prepared group that holds it (``coarse_group``: every prepared group is a
    union of colocation units, [`compgraph.grouping.group_ops`][compgraph.grouping.group_ops])."""
    if learner_units(LEARNERS[method], config) == "colocation":
        return coarse_of(colocation_grouping(prepared.graph), prepared.grouping)
    return prepared.grouping


def learner_config(method: str, budget: int, seed: int, options: dict | None = None, on_ray: bool = False) -> LearnerConfig:
    """``method``'s config: its paper defaults, then ``budget``, ``seed`` and ``options``. ``on_ray`` (a
    search on Ray): a warm variant's default ``restart_after`` and ``layer_descent`` are left out
    (``None``, 0): its restarts and descent are a single search's, and on Ray each controller has its
    own incumbent (given in ``options``, [`placer.distributed.ray_controllers`][placer.distributed.ray_controllers] refuses them).

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
    for name, off in (("restart_after", None), ("layer_descent", 0.0)):  # a single search's: a warm default off on Ray
        if on_ray and name in cls.model_fields and name not in options:
            options[name] = off
    return cls(**{"budget": budget, "seed": seed, **options})


@dataclass
class WarmStart:
    """A warm start ([`placer.warm`][placer.warm]; in no paper): the op placement a learner starts from.

    Attributes:
        source: the best baseline's method name, or the placement file's path.
        ops: int64 ``[num_ops]`` device indices.
        step_time_s: its step time measured in the experiment's environment (seconds; ``None``: OOM).
        oom: it ran out of memory.
        note: a placement file exported for another model or cluster
            ([`tracking.evaluate.origin_note`][tracking.evaluate.origin_note]); ``None``: none.
    """

    source: str
    ops: np.ndarray
    step_time_s: float | None
    oom: bool = False
    note: str | None = None

    def label(self, method: str) -> str:
        """``method``'s label in the results table: ``rl (warm: expert)`` ([`placer.warm.warm_label`][placer.warm.warm_label])."""
        return warm_label(method, self.source)


def _measure(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, placements: dict,
             env_options: dict | None) -> dict:
    """``placements`` (group placements over the prepared groups, or [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement])
    measured as [`evaluate`][tasks.search.evaluate] measures them: method -> its row ([`cluster.evaluation.evaluate_placements`][cluster.evaluation.evaluate_placements])."""
    placements, groupings = unit_placements(prepared, env_kind, placements, None)
    env = environment(prepared, spec, env_kind, env_options)
    others = {m: environment(prepared, spec, env_kind, env_options, g) for m, g in groupings.items()}
    return evaluate_placements(env, placements, others)


def op_devices_of(prepared: PreparedGraph, placement) -> np.ndarray:
    """A baseline's placement (``[num_groups]`` over the prepared groups, or an
    [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement]) as int64 ``[num_ops]`` device indices."""
    from cluster.op_placement import is_op_placement

    return placement.ops.copy() if is_op_placement(placement) else prepared.grouping.expand(placement)


def best_baseline_start(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict | None = None,
                        baselines: dict | None = None) -> WarmStart:
    """The best baseline as a warm start: the baseline placement with the lowest step time in
    ``env_kind`` (ties: the first name in alphabetical order, as the report's best baseline,
    [`baselines.report.run_baselines`][baselines.report.run_baselines]' ``best_baseline``); if every one runs out of memory, the first.

    Args:
        baselines: method -> placement of the baselines the experiment ran (reference methods such as
            the optimum are left out); ``None`` or empty: every baseline that applies to the graph
            and cluster but the optimum ([`baselines.applicable_baselines`][baselines.applicable_baselines]), run here.
    Raises:
        ValueError: no baseline applies (names the cluster).
    """
    from baselines import BaselineContext, applicable_baselines

    chosen = {m: p for m, p in (baselines or {}).items() if m in BASELINES and not BASELINES[m].reference
              and p is not None}
    if not chosen:
        ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
        for m in applicable_baselines(spec, prepared.benchmark is None, optimum=False):
            placement = BASELINES[m](ctx)
            if placement is not None:
                chosen[m] = placement
    if not chosen:
        raise ValueError(f"init best_baseline: no baseline applies to this graph on cluster {spec.name!r}; give "
                         "init_placement (--init-placement FILE)")
    results = _measure(prepared, spec, env_kind, chosen, env_options)
    ran = {m: r["step_time_s"] for m, r in results.items() if not r["oom"] and r["step_time_s"] is not None}
    best = min(ran, key=lambda m: (ran[m], m)) if ran else next(iter(chosen))
    return WarmStart(best, op_devices_of(prepared, chosen[best]), ran.get(best), oom=best not in ran)


def file_start(path: str, prepared: PreparedGraph, spec: ClusterSpec, env_kind: str,
               env_options: dict | None = None) -> WarmStart:
    """The placement file ``path`` (``{"devices": {op name: device name}}``, what ``placement export
    --format json`` writes; [`tracking.evaluate.load_placement_file`][tracking.evaluate.load_placement_file]) as a warm start, measured
    in ``env_kind``.

    Raises:
        ValueError: the file is missing, unreadable or not of that shape, names an op the graph lacks
            or a device the cluster lacks, or leaves an op out (one line naming ``init_placement``,
            the file and the op or device).
    """
    from cluster.op_placement import OpPlacement
    from tracking.evaluate import EvaluateError, load_placement_record, op_devices, origin_note

    try:
        devices, origin = load_placement_record(path)
        ops = op_devices(prepared.graph, list(spec.device_names), devices, repr(spec.name))
    except EvaluateError as exc:
        from tasks.config import init_placement_error

        raise ValueError(init_placement_error(exc, str(path))) from None
    row = _measure(prepared, spec, env_kind, {"start": OpPlacement(ops)}, env_options)["start"]
    return WarmStart(str(path), ops, None if row["oom"] else row["step_time_s"], oom=bool(row["oom"]),
                     note=origin_note(str(path), origin, prepared.name, spec.name))


def warm_start_config(method: str, config: LearnerConfig, prepared: PreparedGraph, spec: ClusterSpec, env_kind: str,
                      env_options: dict | None = None, baselines: dict | None = None,
                      cache: dict | None = None) -> tuple[LearnerConfig, WarmStart | None]:
    """``config`` with its warm start filled in (``init_ops``, ``init_source``; [`placer.warm`][placer.warm]),
    and the start; ``(config, None)`` for a learner with its paper's start.

    ``init="best_baseline"``: [`best_baseline_start`][tasks.search.best_baseline_start] (over ``baselines``, the run's baseline
    placements, else every baseline that applies); ``init="placement"``: [`file_start`][tasks.search.file_start] of
    ``config.init_placement``. ``cache`` (a dict the caller keeps): starts already resolved, by source.

    Raises:
        ValueError: see [`best_baseline_start`][tasks.search.best_baseline_start] and [`file_start`][tasks.search.file_start].
    """
    if not is_warm(config):
        return config, None
    from_file = getattr(config, "init", None) == "placement"
    key = str(config.init_placement) if from_file else "best_baseline"
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = (file_start(str(config.init_placement), prepared, spec, env_kind, env_options) if from_file else
                      best_baseline_start(prepared, spec, env_kind, env_options, baselines))
    start = cache[key]
    return config.model_copy(update={"init_ops": start.ops.tolist(), "init_source": start.source}), start


def run_paths(out: Path, model: str, size: str, cluster: str, grouper: str, method: str, seed: int,
              budget: int) -> tuple[Path, Path]:
    """``(placement log, checkpoint)`` of a run, named by its settings ([`placer.search.run_name`][placer.search.run_name])."""
    from compgraph.paths import inside

    name = run_name(model, size, cluster, grouper, method, seed, budget)
    log, ckpt = out / "placement-logs" / f"{name}.jsonl", out / "checkpoints" / f"{name}.pt"
    inside(out, log), inside(out, ckpt)
    return log, ckpt


def log_names(config: ExperimentConfig, prepared: PreparedGraph | None = None) -> tuple[str, str, str, str]:
    """``(model, size, cluster, grouper)`` that name the run's placement logs ([`run_paths`][tasks.search.run_paths]):
    the prepared graph's, else (a benchmark, before it is prepared) the config's model and size, its
    cluster's name and its grouper (default ``2017``)."""
    if prepared is not None:
        return prepared.name, prepared.size, config.spec().name, prepared.grouping.grouper
    src = config.source
    if config.user_graph:
        raise ValueError("a user's graph is named by its prepared graph: give prepared")
    return src.model, src.size, config.spec().name, config.grouping.grouper or "2017"  # type: ignore[union-attr]


def resume_problem(config: ExperimentConfig, names: tuple[str, str, str, str]) -> str | None:
    """Before a ``--resume`` starts: the first learner of ``config``'s methods whose placement log
    (named by ``names``: [`log_names`][tasks.search.log_names]) exists but was written with other learner settings, as one line naming the setting ([`placer.search.settings_difference`][placer.search.settings_difference]);
    ``None`` if every existing log matches (a learner with no log starts afresh).

    Raises:
        ValueError: a learner option its config refuses (as [`learner_config`][tasks.search.learner_config]).
    """
    import json

    from placer import LEARNER_NAMES
    from placer.search import settings_difference

    out, seed, budget, learner_options = Path(config.tracking.out_dir), config.seed, config.budget, config.learner_options
    ray = config.ray
    for method in config.resolved_methods:
        if method not in LEARNER_NAMES:
            continue
        log = searched_log(run_paths(out, *names, method, seed, budget)[0], method, ray)
        if not log.is_file() or log.stat().st_size == 0:
            continue
        with log.open() as fh:
            try:
                old = json.loads(fh.readline()).get("search")
            except (json.JSONDecodeError, AttributeError):
                return f"--resume: placement log {log} has no readable header; run without --resume to start afresh"
        config = learner_config(method, budget, seed, (learner_options or {}).get(method), ray.distributes(method))
        now = json.loads(json.dumps({"learner": method, **config.model_dump()}))
        if old != now:
            return (f"--resume: placement log {log} was written with other {method} settings: "
                    f"{settings_difference(old, now, 'search')}")
    return None


def searched_log(log: Path, method: str, ray: RayOptions) -> Path:
    """The placement log a search writes: ``log`` ([`run_paths`][tasks.search.run_paths]), named ``-<method>-ray<N>-``
    when ``ray`` distributes ``method`` (as [`learner_searches`][tasks.search.learner_searches] names it)."""
    if ray.distributes(method):
        return log.with_name(log.name.replace(f"-{method}-", f"-{method}-ray{ray.controllers}-"))
    return log


def busy_problem(config: ExperimentConfig, names: tuple[str, str, str, str]) -> str | None:
    """Before a run starts (the CLI, before Prefect): the first learner whose placement log another run
    holds now (the same settings, at once), as [`placer.search.PlacementLogBusy`][placer.search.PlacementLogBusy]'s line; ``None``
    if none is held. ``names``: the logs' names ([`log_names`][tasks.search.log_names]). Each log is named as [`learner_searches`][tasks.search.learner_searches] names it (``-ray<N>`` on Ray)."""
    from placer import LEARNER_NAMES
    from placer.search import placement_log_busy

    ray, out = config.ray, Path(config.tracking.out_dir)
    for method in config.resolved_methods:
        if method not in LEARNER_NAMES:
            continue
        learner = learner_config(method, config.budget, config.seed, config.learner_options.get(method))
        log, _ = run_paths(out, *names, method, config.seed, learner.budget)
        problem = placement_log_busy(searched_log(log, method, ray))
        if problem:
            return problem
    return None


def ray_settings(ray: RayOptions | RaySettings | None, method: str, log_path: Path | None = None) -> RaySettings | None:
    """How ``method`` searches on Ray: ``None`` in-process (no ``ray``, or the experiment's ``ray``
    section does not distribute it: [`tasks.config.RayOptions.distributes`][tasks.config.RayOptions.distributes]), else the
    [`placer.distributed.RaySettings`][placer.distributed.RaySettings] of the section (or ``ray`` itself), with a local Ray's
    files in the placement log's folder unless ``temp_dir`` says otherwise."""
    if isinstance(ray, RayOptions):
        if not ray.distributes(method):
            return None
        ray = RaySettings(controllers=ray.controllers, workers=ray.workers or None, gpus_per_worker=ray.gpus_per_worker,
                          policy_device=ray.policy_device, async_updates=ray.async_updates, address=ray.address)
    if ray is not None and ray.temp_dir is None and log_path is not None:
        ray = replace(ray, temp_dir=Path(log_path).parent)
    return ray


def _search_run_name(parameters: dict) -> str:
    """The task run's name: ``search-<method>``, ``search-<method>-ray`` on Ray."""
    on_ray = ray_settings(parameters.get("ray"), parameters["method"]) is not None
    return f"search-{parameters['method']}" + ("-ray" if on_ray else "")


@task(name="learner-search", task_run_name=_search_run_name, cache_policy=NONE)
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
    on_update=None,
    ray: RayOptions | RaySettings | None = None,
) -> SearchResult:
    """One learner's search ([`placer.LEARNERS`][placer.learner.LEARNERS]) over its units ([`learner_grouping`][tasks.search.learner_grouping]),
    in this process or on Ray: [`placer.search.run_search`][placer.search.run_search] with the learner and its
    environment, or with the controllers and workers of [`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]
    ([`ray_settings`][tasks.search.ray_settings]; task run ``search-<method>-ray``). A warm start whose ``init_ops`` the
    caller did not fill in is resolved here ([`warm_start_config`][tasks.search.warm_start_config]: the best of every baseline
    that applies, or the ``init_placement`` file).

    Args:
        method: the learner's name; ``config``: its config (``budget`` placements, ``seed``).
        prepared, spec, env_kind, env_options: the graph, the cluster and the environment that measures.
        log_path: the placement log (``None``: none); ``resume``: replay it (and the checkpoint)
            instead of starting afresh.
        checkpoint_path: the learner's checkpoint in-process (a search on Ray has none: its log is replayed).
        on_update: called with each learning-curve point ([`placer.search.run_search`][placer.search.run_search]).
        ray: the experiment's ``ray`` section, or [`placer.distributed.RaySettings`][placer.distributed.RaySettings]
            (tests, benchmarks: fault and delay knobs); ``None``: in-process.
    Returns:
        The [`placer.search.SearchResult`][placer.search.SearchResult]; with one synchronous controller on Ray the
        in-process search's, for the same seed (``distributed`` aside).
    Raises:
        ValueError: an unknown learner; bad Ray settings ([`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]);
            a warm start that cannot be resolved; a placement log of other settings.
    """
    if method not in LEARNERS:
        raise ValueError(f"learner: unknown learner {method!r}; valid: {', '.join(sorted(LEARNERS))}")
    if is_warm(config) and config.init_ops is None:
        config, _ = warm_start_config(method, config, prepared, spec, env_kind, env_options)
    units = learner_grouping(method, prepared, config)
    settings = ray_settings(ray, method, log_path)
    if settings is None:
        env = environment(prepared, spec, env_kind, env_options, units)
        return run_search(LEARNERS[method](env, config), env, log_path=log_path, checkpoint_path=checkpoint_path,
                          resume=resume, on_update=on_update)
    with ray_controllers(method, config, prepared, spec, env_kind, settings, env_options=env_options,
                         grouping=units) as (controllers, evaluator):
        return run_search(controllers, evaluator, log_path=log_path, resume=resume, on_update=on_update)


def unit_placements(prepared: PreparedGraph, env_kind: str, placements: dict,
                    groupings: dict[str, Grouping] | None) -> tuple[dict, dict[str, Grouping]]:
    """For an environment that measures group placements only (``real``, ``grappler``): every op-level
    placement ([`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement], e.g. Scotch or m-ETF) that splits the
    prepared groups but keeps each TensorFlow colocation unit whole is handed over as a placement of
    the colocation units (``[num_units]``, with the units' grouping in the returned ``groupings``);
    everything else unchanged. The simulator measures op placements directly."""
    from cluster.op_placement import is_op_placement

    groupings = dict(groupings or {})
    if env_kind == "sim":
        return placements, groupings
    units, out = None, dict(placements)
    g = prepared.grouping
    for m, p in placements.items():
        if is_op_placement(p) and p.group_placement(g.op_group, g.num_groups) is None:
            units = units or colocation_grouping(prepared.graph)
            per_unit = p.group_placement(units.op_group, units.num_groups)
            if per_unit is not None:
                out[m], groupings[m] = per_unit, units
    return out, groupings


@task(name="evaluate-placements", task_run_name="evaluate-{env_kind}", cache_policy=NONE)
def evaluate(
    prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, placements: dict, env_options: dict | None = None,
    groupings: dict[str, Grouping] | None = None,
) -> tuple[dict, dict]:
    """Measure every placement in one environment; returns ``(results, summary)``.

    ``placements`` are over the prepared groups except for methods in ``groupings``
    (method -> the grouping its placement is over, e.g. a colocation learner's units): those
    are measured in an environment of the same kind over their own grouping. Every
    environment simulates (or runs) the same op graph, each op on its unit's device, so the
    step times compare. The summary's learners are the methods of [`placer.LEARNERS`][placer.learner.LEARNERS].
    """
    placements, groupings = unit_placements(prepared, env_kind, placements, groupings)
    env = environment(prepared, spec, env_kind, env_options)
    others = {m: environment(prepared, spec, env_kind, env_options, g) for m, g in (groupings or {}).items()
              if g is not prepared.grouping}
    results = evaluate_placements(env, placements, others)
    references = [m for m in results if m in BASELINES and BASELINES[m].reference]
    return results, summarize(results, [m for m in results if m in LEARNERS], references)


@dataclass
class LearnerSearches:
    """What the learner searches of one experiment found.

    Attributes:
        placements: method -> best placement (``[num_units]`` device indices over ``groupings[method]``;
            ``None`` if every sampled placement ran out of memory).
        curves: method -> learning curve ([`placer.search.SearchResult.curve`][placer.search.SearchResult.curve]).
        method_params: method -> its settings for MLflow (config, paper, units, controllers, Ray settings).
        groupings: method -> the grouping its placement is over ([`learner_grouping`][tasks.search.learner_grouping]).
        extra_artifacts: ``placement-logs/<method>`` -> the path of its placement log.
        labels: method -> its label in the results table, for the warm-started learners only
            (``rl (warm: expert)``: [`placer.warm`][placer.warm]).
    """

    placements: dict = field(default_factory=dict)
    curves: dict = field(default_factory=dict)
    method_params: dict = field(default_factory=dict)
    groupings: dict = field(default_factory=dict)
    extra_artifacts: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)


def learner_searches(config: ExperimentConfig, prepared: PreparedGraph, spec: ClusterSpec, progress=None,
                     baselines: dict | None = None) -> LearnerSearches:
    """Every learner of the config's methods (those in [`placer.LEARNERS`][placer.learner.LEARNERS], in order) searches
    the config's ``budget`` placements with the one search task ([`learner_search`][tasks.search.learner_search]): in-process (task run
    ``search-<method>``) or on Ray (``search-<method>-ray``, see [`tasks.config.RayOptions`][tasks.config.RayOptions]), with its
    placement log and checkpoint under ``tracking.out_dir`` named by the run's settings ([`run_paths`][tasks.search.run_paths];
    ``-ray<N>`` in the log's name on Ray), resumed from them with ``tracking.resume``.

    Args:
        config: the experiment ([`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig]): its methods, budget, seed,
            env (and ``env_options``), each learner's options overriding the paper defaults
            (``learner_options``: [`learner_config`][tasks.search.learner_config]), ``ray`` and ``tracking``.
        prepared: the graph (its ``size`` names the logs: ``user`` for a user's graph).
        spec: the cluster ([`tasks.config.ExperimentConfig.spec`][tasks.config.ExperimentConfig.spec]).
        progress: ``progress(method, budget) -> on_update`` callback factory (e.g.
            [`tracking.live.ExperimentRecorder.callback`][tracking.live.ExperimentRecorder.callback]), or ``None``.
        baselines: method -> placement of the baselines the experiment ran: a warm-started
            learner ([`placer.warm`][placer.warm]) starts from the fastest of them ([`warm_start_config`][tasks.search.warm_start_config];
            none given: from the fastest baseline that applies, run for that purpose). Its start is
            placement 0 of its search; when the start splits the learner's units (an op-level
            baseline) and nothing the learner sampled beats it, the start itself (op-level) is the
            learner's placement, so a warm-started learner's row is never slower than its start.

    The simulator's compiled kernel is loaded before the first in-process search
    ([`cluster.fast_simulator.load_kernel`][cluster.fast_simulator.load_kernel]), so no search's ``placements_per_cpu_s`` holds
    that one-time load. MLflow params of each learner's run: ``search_cpu_s`` (this process's
    CPU-seconds in the search task, the environment's and the learner's construction included),
    ``search_loop_cpu_s`` (those of the search loop, [`placer.search.SearchResult`][placer.search.SearchResult] ``cpu_time_s``)
    and ``placements_per_cpu_s``, the placements this run measured over ``search_loop_cpu_s``, with
    ``host_cpu``, the CPU they were counted on ([`cluster.machine_readers.host_cpu_model`][cluster.machine_readers.host_cpu_model]:
    the same search runs at twice the rate on one 2-core machine as on another).

    Raises:
        ValueError: an option a learner's config refuses ([`learner_config`][tasks.search.learner_config]); a warm start
            that cannot be resolved ([`warm_start_config`][tasks.search.warm_start_config]).
    """
    methods, budget, seed, env_kind, env_options = (config.resolved_methods, config.budget, config.seed, config.env,
                                                     config.env_options)
    learner_options, ray, resume = config.learner_options, config.ray, config.tracking.resume
    out, size = Path(config.tracking.out_dir), prepared.size
    dist = {"workers": ray.workers or None, "gpus_per_worker": ray.gpus_per_worker, "policy_device": ray.policy_device,
            "async_updates": ray.async_updates}
    found_all = LearnerSearches()
    starts: dict = {}  # warm starts resolved so far, by source (warm_start_config)
    if env_kind == "sim" and any(m in LEARNERS and not ray.distributes(m) for m in methods):
        from cluster.fast_simulator import load_kernel

        load_kernel(spec)  # numba's compiled simulator, once per process: not in the first search's CPU-seconds
    said: set[str] = set()
    for method in methods:
        if method not in LEARNERS:
            continue
        on_ray = ray.distributes(method)
        config = learner_config(method, budget, seed, (learner_options or {}).get(method, {}), on_ray)
        for name, what in (("restart_after", "no restarts from the incumbent"),
                           ("layer_descent", "no descent over whole layers first")):  # a warm default learner_config left out
            field = LEARNERS[method].Config.model_fields.get(name)
            if on_ray and field is not None and field.default and not getattr(config, name):
                say(f"{method} on Ray: {what} (its default {name}; each controller's incumbent is its own)")
        start: WarmStart | None = None
        if is_warm(config):  # placer.warm: the start, resolved once per run (and said once)
            config, start = warm_start_config(method, config, prepared, spec, env_kind, env_options, baselines, starts)
            if start is not None and start.source not in said:
                said.add(start.source)
                when = "OOM" if start.oom else f"{start.step_time_s:.5g} s"
                kind = "best baseline" if getattr(config, "init", None) == "best_baseline" else "placement file"
                say(f"warm start: {kind} {start.source} ({when})" + (f"; {start.note}" if start.note else ""))
        log_path, ckpt_path = run_paths(out, prepared.name, size, spec.name, prepared.grouping.grouper, method,
                                        seed, config.budget)
        on_update = progress(method, config.budget) if progress is not None else None
        distributed = on_ray
        units = learner_grouping(method, prepared, config)
        say(f"search {method}: {config.budget} placements" + (f" on Ray ({ray.controllers} controllers)" if distributed
                                                              else "") + (", resuming" if resume else "") + " ...")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        log_path = searched_log(log_path, method, ray)  # on Ray its own log (a search on Ray is not checkpointed)
        found = learner_search(method, quote(prepared), spec, env_kind, quote(config), log_path,
                               None if distributed else ckpt_path, resume, env_options, on_update,
                               ray if distributed else None)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        best = "none fits in memory" if found.best_step_time_s is None else f"best {found.best_step_time_s:.5g} s"
        say(f"search {method}: done in {wall:.1f} s, {best}")
        found_all.groupings[method] = units
        # this process's CPU seconds (the policy, the simulator, the placement log, MLflow and progress;
        # on Ray the workers' and controllers' CPU is not in it): the search task's (with the environment
        # and the learner's construction) and the search loop's, whose placements per CPU-second are the rate
        params = {**config.model_dump(), "failing_signal": found.failing_signal, "paper": LEARNERS[method].paper,
                  "units": learner_units(LEARNERS[method], config), "controllers": ray.controllers if distributed else 0,
                  "search_wall_s": round(wall, 3), "search_cpu_s": round(cpu, 3),
                  "search_loop_cpu_s": round(found.cpu_time_s, 3),
                  "placements_per_cpu_s": (round(found.measured / found.cpu_time_s, 2)
                                           if found.cpu_time_s > 0 and found.measured else None),
                  "host_cpu": host_cpu_model()}
        if distributed:
            params.update({**dist, "workers": ray.workers or "K per controller", **(found.distributed or {}),
                           "ray_address": ray.address or "local"})
        found_all.placements[method] = found.best_placement
        if start is not None:
            params.update({"init_source": start.source, "start_step_time_s": start.step_time_s,
                           "start_fits_units": fits_units(start.ops, units)})
            found_all.labels[method] = start.label(method)
            kept = start.step_time_s is not None and not fits_units(start.ops, units) and (
                found.best_step_time_s is None or found.best_step_time_s > start.step_time_s)
            if kept:  # the op-level start is still the incumbent: the learner's placement, measured as the baseline
                from cluster.op_placement import OpPlacement

                found_all.placements[method] = OpPlacement(start.ops)
                units = found_all.groupings[method] = prepared.grouping
            params["kept_start"] = kept
        found_all.method_params[method] = params
        found_all.curves[method] = found.curve
        found_all.extra_artifacts[f"placement-logs/{method}"] = str(log_path)
    return found_all
