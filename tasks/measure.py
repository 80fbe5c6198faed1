"""Prefect tasks of the measurement flows (calibration, fidelity, training): thin wrappers
around [`cluster.calibrate`][cluster.calibrate], [`cluster.fidelity`][cluster.fidelity], [`cluster.training`][cluster.training], the
searches and [`tracking.measure`][tracking.measure]."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prefect import task
from prefect.cache_policies import NONE
from prefect.utilities.annotations import quote

from baselines import applicable_baselines as baselines_for
from cluster.calibrate import CostTable, calibrate
from cluster.environment import ENVIRONMENTS, Environment
from cluster.factory import make_environment
from cluster.fidelity import fidelity, random_placements
from cluster.op_placement import is_op_placement, measure_placement
from cluster.spec import ClusterSpec
from cluster.training import projected_training, train
from compgraph.ir import Grouping
from compgraph.prepare import PreparedGraph
from placer import LEARNERS
from placer.search import SearchResult, run_search
from tracking.measure import record_fidelity, record_training


def applicable_baselines(prepared: PreparedGraph, spec: ClusterSpec, group_level: bool = False) -> list[str]:
    """The baselines that apply to ``prepared`` on ``spec``, not the optimum
    ([`baselines.applicable_baselines`][baselines.applicable_baselines]); ``group_level``: group placements only."""
    return baselines_for(spec, prepared.benchmark is None, optimum=False, group_level=group_level)


def _simulated_env(prepared: PreparedGraph, spec: ClusterSpec, cost_table: CostTable | None,
                   grouping: Grouping | None = None) -> Environment:
    """The fast simulator over ``grouping`` (default the prepared groups): calibrated (the table's op
    times and link) if ``cost_table`` is given, else roofline."""
    return make_environment("sim", prepared, spec, {"cost_table": cost_table}, grouping=grouping)


def named_placement(prepared: PreparedGraph, spec: ClusterSpec, placement, grouping: Grouping | None = None) -> dict[str, str]:
    """A placement as unit name -> device name: group names of ``grouping`` (default the prepared
    groups) for ``[num_groups]`` device indices, op names for an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement]."""
    names = spec.device_names
    if is_op_placement(placement):
        return {op.name: names[int(d)] for op, d in zip(prepared.graph.ops, placement.ops)}
    return {g: names[int(d)] for g, d in zip((grouping or prepared.grouping).names, placement)}


@task(name="calibrate-costs", cache_policy=NONE)
def calibrate_costs(prepared: PreparedGraph, spec: ClusterSpec, steps: int, seed: int, out_path: Path) -> CostTable:
    """Measure every op's seconds per device kind from traced steps ([`cluster.calibrate.calibrate`][cluster.calibrate.calibrate])
    and save the table as JSON to ``out_path`` (folders created).

    Raises:
        ValueError: ``steps < 2``; cluster.real.PlacementError: see [`cluster.calibrate.calibrate`][cluster.calibrate.calibrate].
    """
    table = calibrate(prepared, spec, steps=steps, seed=seed)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    table.save(out_path)
    return table


@task(name="load-cost-table", cache_policy=NONE)
def load_cost_table(path: Path) -> CostTable:
    """A saved cost table ([`cluster.calibrate.CostTable.load`][cluster.calibrate.CostTable.load]; ValueError names the file and field)."""
    return CostTable.load(path)


@task(name="random-placements", cache_policy=NONE)
def random_placement_set(prepared: PreparedGraph, spec: ClusterSpec, n: int, seed: int,
                         gpu_only: bool = False) -> dict[str, np.ndarray]:
    """``n`` seeded uniformly random group placements ([`cluster.fidelity.random_placements`][cluster.fidelity.random_placements]);
    ``gpu_only``: among the GPUs only, named ``gpu_random_k``."""
    if gpu_only:
        return random_placements(prepared.grouping.num_groups, len(spec.devices), n, seed=seed,
                                 devices=spec.gpu_indices, prefix="gpu_random")
    return random_placements(prepared.grouping.num_groups, len(spec.devices), n, seed=seed)


@task(name="simulated-search", cache_policy=NONE)
def simulated_search(prepared: PreparedGraph, spec: ClusterSpec, learner: str, budget: int, seed: int,
                     cost_table: CostTable | None, log_path: Path | None) -> SearchResult:
    """A learner's search ([`placer.LEARNERS`][placer.learner.LEARNERS], [`placer.search.run_search`][placer.search.run_search]) in the
    simulator over its units ([`tasks.search.learner_grouping`][tasks.search.learner_grouping]: the prepared groups, or the
    colocation units of a learner that groups ops itself): calibrated with ``cost_table``, else roofline.

    Raises:
        ValueError: an unknown learner (lists the valid ones).
    """
    if learner not in LEARNERS:
        raise ValueError(f"unknown learner {learner!r}; valid: {', '.join(LEARNERS)}")
    from tasks.search import learner_grouping

    from tasks.search import warm_start_config

    env = _simulated_env(prepared, spec, cost_table, learner_grouping(learner, prepared))
    config = LEARNERS[learner].Config(budget=budget, seed=seed)
    config, _ = warm_start_config(learner, config, prepared, spec, "sim")  # a warm start's placement (placer.warm)
    return run_search(LEARNERS[learner](env, config), env, log_path=log_path, resume=True)


@task(name="measure-fidelity", cache_policy=NONE)
def measure_fidelity(prepared: PreparedGraph, spec: ClusterSpec, placements: dict[str, np.ndarray],
                     cost_table: CostTable | None, steps: int, seed: int, against: str = "real") -> dict:
    """Simulated (roofline, calibrated) against real (or grappler's, ``against``) step times of ``placements``
    ([`cluster.fidelity.fidelity`][cluster.fidelity.fidelity])."""
    return fidelity(prepared, spec, placements, cost_table=cost_table, steps=steps, seed=seed, against=against)


@task(name="train-placement", cache_policy=NONE)
def train_placement(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, group_placement,
                    steps: int, seed: int, cost_table: CostTable | None = None, grouping: Grouping | None = None) -> dict:
    """Train ``steps`` steps with a placement, for real or simulated.

    The placement: ``[num_groups]`` device indices over ``grouping`` (default the prepared
    groups; e.g. the colocation units of hierarchical and eagle, [`tasks.search.learner_grouping`][tasks.search.learner_grouping]),
    or an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] (``[num_ops]``, Baechi's m_topo / m_etf / m_sct).
    ``env_kind="real"``: [`cluster.training.train`][cluster.training.train] (synthetic inputs from ``seed``, units
    with no kernel on their device moved to the first CPU as the simulator does).
    ``env_kind="sim"``: [`cluster.training.projected_training`][cluster.training.projected_training] of the simulated step time
    (calibrated with ``cost_table`` if given, else roofline; measured in an environment over the
    placement's own units as [`tasks.search.evaluate`][tasks.search.evaluate] does, so the step time is the evaluated one;
    the step time is used even if the simulator reports OOM, flagged by ``oom``);
    ``env_kind="grappler"``: the same from grappler's estimate.

    Returns:
        ``{"steps", "seconds", "simulated", "step_times_s", "losses", "step_time_s", "setup_s", "oom"}``:
        ``seconds`` the summed real step times or the projected seconds; ``step_times_s``
        and ``losses`` ``[steps]`` for a real run, empty lists when simulated; ``step_time_s``
        the mean real step (seconds) or the simulated one; ``setup_s`` seconds to build the
        session (``None`` when simulated).
    Raises:
        ValueError: unknown ``env_kind`` (lists the valid ones), ``steps < 1``, a bad placement;
        cluster.real.PlacementError: a placement TensorFlow cannot run.
    """
    if env_kind not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {env_kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    if steps < 1:
        raise ValueError(f"steps: must be >= 1, got {steps}")
    op_level = is_op_placement(group_placement)
    placement = group_placement if op_level else np.asarray(group_placement, dtype=np.int64)
    units = None if op_level else grouping  # an op placement is measured over the prepared groups (or per op)
    if env_kind in ("sim", "grappler"):
        options = {"cost_table": cost_table} if env_kind == "sim" else None
        env = make_environment(env_kind, prepared, spec, options, grouping=units)
        m = measure_placement(env, placement)
        proj = projected_training(m.simulated_step_time_s, steps)
        return {"steps": proj.steps, "seconds": proj.seconds, "simulated": True, "step_times_s": [], "losses": [],
                "step_time_s": proj.step_time_s, "setup_s": None, "oom": m.oom}
    r = train(prepared, spec, placement, steps=steps, seed=seed, soft_placement=True, grouping=units)
    from cluster.torch_real import spread

    s = spread(list(r.step_times_s))
    return {"steps": steps, "seconds": r.total_s, "simulated": False, "step_times_s": list(r.step_times_s),
            "losses": list(r.losses), "step_time_s": float(np.mean(r.step_times_s)), "setup_s": r.setup_s, "oom": False,
            "median_s": s["median_s"], "q1_s": s["q1_s"], "q3_s": s["q3_s"], "iqr_s": s["iqr_s"]}


def train_best(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, summary: dict, placements: dict,
               groupings: dict[str, Grouping] | None, steps: int, seed: int) -> dict:
    """The experiment's end-to-end training evaluation (2017 Sec. 4.3): the best learned and the best
    baseline placement (``summary["best_learned"]``, ``summary["best_baseline"]``) trained for
    ``steps`` steps with [`train_placement`][tasks.measure.train_placement] (for real with ``env_kind="real"``, projected from
    the simulated step time otherwise), whatever their units: the prepared groups, a learner's own
    units (``groupings[method]``) or an op-level placement.

    Returns:
        method -> [`train_placement`][tasks.measure.train_placement]'s dict; empty with ``steps == 0`` or no placement (all OOM).
    """
    training: dict = {}
    if steps <= 0:
        return training
    for method in (summary.get("best_learned"), summary.get("best_baseline")):
        if method is None or method in training or placements.get(method) is None:
            continue
        training[method] = train_placement(quote(prepared), spec, env_kind, placements[method], steps, seed,
                                           grouping=(groupings or {}).get(method))
    return training


@task(name="record-fidelity", cache_policy=NONE)
def record_fidelity_run(**kwargs) -> str:
    """Log a fidelity measurement to MLflow ([`tracking.measure.record_fidelity`][tracking.measure.record_fidelity]); returns the run id."""
    return record_fidelity(**kwargs)


@task(name="record-training", cache_policy=NONE)
def record_training_run(**kwargs) -> str:
    """Log a training run to MLflow ([`tracking.measure.record_training`][tracking.measure.record_training]); returns the run id."""
    return record_training(**kwargs)
