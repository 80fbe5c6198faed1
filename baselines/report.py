"""Reference points beside every result: the lower bound, the optimum, and the ratios to them.

Used by the experiment flow (``lower_bound_s``, ``optimum_s``, ``optimum_proven`` and the
per-method ``x_lower_bound`` / ``x_optimum`` columns) and by ``placement baselines``
([`run_baselines`][baselines.report.run_baselines]: every baseline with its step time, OOM, devices used and seconds).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from baselines import BASELINES, BaselineContext, applicable_baselines
from baselines.bounds import lower_bound
from baselines.optimum import DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S, MAX_MILP_OPS, optimum
from cluster.op_placement import is_op_placement


REFERENCE_ENVIRONMENT = "sim"
"""The environment the lower bound and the optimum are computed in: the simulator's cost model."""


def reference_note(env_kind: str) -> str | None:
    """Why the ratio columns are empty under ``env_kind`` (``None`` when they are filled: the simulator)."""
    if env_kind == REFERENCE_ENVIRONMENT:
        return None
    return (f"x lower bound / x optimum: empty, because the lower bound and the optimum are computed in the "
            f"simulator's cost model ({REFERENCE_ENVIRONMENT}) and these step times were measured in {env_kind}")


def reference_points(graph, grouping, spec, placements: dict | None = None, want_optimum: bool = False,
                     time_limit_s: float | None = DEFAULT_TIME_LIMIT_S, op_times: np.ndarray | None = None,
                     node_limit: int = DEFAULT_NODE_LIMIT, polish_evaluations: int | None = None,
                     max_milp_ops: int = MAX_MILP_OPS, on_progress: Callable[[dict], None] | None = None,
                     stage: Callable[[str], contextlib.AbstractContextManager[dict]] | None = None,
                     execution: str = "dataflow") -> dict:
    """The lower bound ([`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]) and, if asked, the optimum
    ([`baselines.optimum.optimum`][baselines.optimum.optimum], given the group placements among ``placements`` as
    MILP candidates; its work limits ``node_limit``, ``max_milp_ops`` and ``polish_evaluations``,
    ``None``: [`baselines.optimum.default_polish_evaluations`][baselines.optimum.default_polish_evaluations]; ``on_progress`` its progress).
    ``execution``: how the optimum's search measures a placement (``dataflow``, or ``eager`` for a
    PyTorch step: [`cluster.factory.sim_execution`][cluster.factory.sim_execution]), so that ``optimum_s`` is what the
    simulated environment measures for its placement.
    ``stage``: a context manager per step (``"lower bound"``, ``"optimum"``), as
    [`tracking.progress.stage`][tracking.progress.stage]; it may set ``["result"]``.

    Returns:
        ``{"lower_bound_s", "lower_bound": {...components}, "optimum_s", "optimum_proven",
        "optimum_bound_s", "optimum_gap", "optimum_method", "optimum_seconds", "optimum_placement",
        "optimum_deterministic", "optimum_work", "reference_environment"}`` (seconds; the optimum
        keys are ``None`` when not computed; ``optimum_gap`` is ``optimum_s / optimum_bound_s - 1``,
        a fraction, 0 when proven; ``optimum_work`` the work limits and what was spent,
        [`baselines.optimum.OptimumResult.work`][baselines.optimum.OptimumResult.work]; ``optimum_placement`` is ``[num_groups]`` device
        indices or ``None``; ``reference_environment`` is ``"sim"``: both come from the simulator's
        cost model, so a ratio to them means something only for step times measured in the simulator).
    """
    stage = stage or _quiet_stage
    with stage("lower bound") as st:
        lb = lower_bound(graph, spec, op_times)
        st["result"] = f"{lb.value_s:.5g} s" if np.isfinite(lb.value_s) else "none"
    out: dict[str, Any] = {"reference_environment": REFERENCE_ENVIRONMENT,
           "lower_bound_s": lb.value_s if np.isfinite(lb.value_s) else None, "lower_bound": lb.as_dict(),
           "optimum_s": None, "optimum_proven": None, "optimum_bound_s": None, "optimum_gap": None,
           "optimum_method": None, "optimum_seconds": None, "optimum_placement": None, "optimum_deterministic": None,
           "optimum_work": None}
    if want_optimum:
        # only placements over these groups (not op placements, nor learners' own units)
        candidates = [np.asarray(p, dtype=np.int64) for p in (placements or {}).values()
                      if p is not None and not is_op_placement(p) and len(p) == grouping.num_groups]
        with stage("optimum") as st:
            res = optimum(graph, grouping, spec, op_times, time_limit_s=time_limit_s, candidates=candidates,
                          lower_bound_s=out["lower_bound_s"], node_limit=node_limit,
                          polish_evaluations=polish_evaluations, max_milp_ops=max_milp_ops, on_progress=on_progress,
                          execution=execution)
            st["result"] = optimum_summary(res.step_time_s, res.bound_s, res.gap, res.proven, res.method)
        out.update(optimum_s=res.step_time_s, optimum_proven=res.proven, optimum_bound_s=res.bound_s,
                   optimum_gap=res.gap, optimum_method=res.method, optimum_seconds=res.seconds,
                   optimum_placement=res.placement, optimum_deterministic=res.deterministic,
                   optimum_work=res.work or None)
    return out


def optimum_summary(step_time_s: float | None, bound_s: float | None, gap: float | None, proven: bool | None,
                    method: str | None) -> str:
    """One line on the optimum: its step time, how it was found, and its gap to the proven bound
    (``"0.88055 s (polish), gap 129.9% to the proven bound 0.38301 s"``)."""
    if step_time_s is None:
        return f"no placement fits in memory ({method})"
    if proven:
        return f"{step_time_s:.5f} s ({method}, proven optimal)"
    if bound_s is None or gap is None:
        return f"{step_time_s:.5f} s ({method}, no bound)"
    return f"{step_time_s:.5f} s ({method}), gap {100 * gap:.1f}% to the proven bound {bound_s:.5f} s"


@contextlib.contextmanager
def _quiet_stage(name: str) -> Iterator[dict]:
    """A stage that says nothing (the default of [`run_baselines`][baselines.report.run_baselines] and [`reference_points`][baselines.report.reference_points])."""
    yield {"result": ""}


def reference_placements(refs: dict) -> dict:
    """The placements of the reference methods [`reference_points`][baselines.report.reference_points] computed (method -> ``[num_groups]``
    device indices, or ``None`` when none fits): ``{"optimum": ...}`` when it was asked for, else empty."""
    return {} if refs.get("optimum_method") is None else {"optimum": refs.get("optimum_placement")}


def wants_optimum(methods) -> bool:
    """True if ``methods`` ask for the optimum (the one reference method, [`baselines.Baseline.reference`][baselines.Baseline.reference])."""
    return any(m in BASELINES and BASELINES[m].reference for m in methods)


def ratio(step_time_s: float | None, reference_s: float | None) -> float | None:
    """``step_time_s / reference_s`` ("x lower bound", "x optimum"); ``None`` if either is missing."""
    if step_time_s is None or not reference_s:
        return None
    return step_time_s / reference_s


def add_ratio_columns(results: dict[str, dict], refs: dict, env_kind: str = REFERENCE_ENVIRONMENT) -> dict[str, float]:
    """Add ``x_lower_bound`` and ``x_optimum`` to every method row of ``results`` (in place).

    The columns are filled only when the step times were measured in the environment the
    references were computed in (``refs["reference_environment"]``, the simulator); under any
    other ``env_kind`` they are ``None`` ([`reference_note`][baselines.report.reference_note] says why).

    Returns:
        flat ``{"<method>.x_lower_bound": float, "<method>.x_optimum": float}`` for MLflow
        parent-run metrics (only the ratios that exist).
    """
    flat = {}
    same = env_kind == refs.get("reference_environment", REFERENCE_ENVIRONMENT)
    for method, row in results.items():
        row["x_lower_bound"] = ratio(row.get("step_time_s"), refs.get("lower_bound_s")) if same else None
        row["x_optimum"] = ratio(row.get("step_time_s"), refs.get("optimum_s")) if same else None
        for key in ("x_lower_bound", "x_optimum"):
            if row[key] is not None:
                flat[f"{method}.{key}"] = float(row[key])
    return flat


def run_baselines(prepared, spec, methods: list[str] | None = None, time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
                  env_kind: str = "sim", env_options: dict | None = None, node_limit: int = DEFAULT_NODE_LIMIT,
                  polish_evaluations: int | None = None, max_milp_ops: int = MAX_MILP_OPS,
                  stage: Callable[[str], contextlib.AbstractContextManager[dict]] | None = None,
                  say: Callable[[str], None] | None = None,
                  on_progress: Callable[[dict], None] | None = None) -> dict:
    """Run baselines, measure them in one environment and add the reference points.

    Args:
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph].
        spec: the cluster.
        methods: baseline names (default: [`applicable_baselines`][baselines.applicable_baselines]); ``optimum`` is
            computed last, with the others' group placements as MILP candidates.
        time_limit_s: an optional wall-clock cap on the optimum (seconds; ``None``: none, deterministic).
        node_limit, polish_evaluations, max_milp_ops: the optimum's work limits
            ([`baselines.optimum.milp_optimum`][baselines.optimum.milp_optimum]; ``polish_evaluations=None``: by the graph's size).
        env_kind, env_options: the measurement environment ([`cluster.factory.make_environment`][cluster.factory.make_environment]).
        stage: a context manager per stage (``"baselines"``, ``"lower bound"``, ``"optimum"``,
            ``"evaluation (sim)"``), as [`tracking.progress.stage`][tracking.progress.stage]; default: silent.
        say: one progress line (each baseline as it ends), as [`tracking.progress.say`][tracking.progress.say].
        on_progress: the optimum's progress ([`baselines.optimum.milp_optimum`][baselines.optimum.milp_optimum]).
    Returns:
        ``{"methods": {m: {"step_time_s", "oom", "devices_used", "seconds", "placement",
        "x_lower_bound", "x_optimum"}}, "lower_bound_s", "lower_bound", "optimum_s",
        "optimum_proven", "optimum_bound_s", "optimum_gap", "optimum_method", "optimum_work",
        "best_baseline"}`` (seconds; the rest of [`reference_points`][baselines.report.reference_points]).
    Raises:
        ValueError: an unknown method (lists the valid ones).
    """
    from cluster.evaluation import evaluate_placements
    from cluster.factory import make_environment, sim_execution

    methods = list(methods) if methods is not None else applicable_baselines(spec, prepared.benchmark is None)
    for m in methods:
        if m not in BASELINES:
            raise ValueError(f"unknown method {m!r}; valid: {', '.join(BASELINES)}")
    stage = stage or _quiet_stage
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    placements: dict[str, Any] = {}
    seconds: dict[str, float | None] = {}
    placers = [m for m in methods if not BASELINES[m].reference]  # the optimum: with the lower bound, below
    with stage("baselines") as st:
        for i, m in enumerate(placers):
            start = time.perf_counter()
            placements[m] = BASELINES[m](ctx)
            seconds[m] = time.perf_counter() - start
            if say is not None:
                say(f"baselines: {m} placed in {seconds[m]:.1f} s ({i + 1}/{len(placers)})")
        st["result"] = ", ".join(placers) or "none"
    start = time.perf_counter()
    refs = reference_points(prepared.graph, prepared.grouping, spec, placements, want_optimum=wants_optimum(methods),
                            time_limit_s=time_limit_s, node_limit=node_limit, polish_evaluations=polish_evaluations,
                            max_milp_ops=max_milp_ops, on_progress=on_progress, stage=stage,
                            execution=sim_execution(prepared, env_options))
    for m, p in reference_placements(refs).items():
        placements[m], seconds[m] = p, refs["optimum_seconds"]
    refs["lower_bound_seconds"] = time.perf_counter() - start - (refs["optimum_seconds"] or 0.0)
    with stage(f"evaluation ({env_kind})") as st:
        env = make_environment(env_kind, prepared, spec, env_options)
        results = evaluate_placements(env, {m: placements[m] for m in methods})
        st["result"] = "; ".join(f"{m} " + ("OOM" if r["oom"] else "-" if r["step_time_s"] is None
                                            else f"{r['step_time_s']:.5g} s") for m, r in results.items())
    add_ratio_columns(results, refs, env_kind)
    refs["reference_note"] = reference_note(env_kind)
    rows = {}
    for m in methods:
        r = results[m]
        rows[m] = {"step_time_s": r["step_time_s"], "oom": r["oom"], "devices_used": len(set(r["placement"].values())),
                   "seconds": seconds[m], "x_lower_bound": r["x_lower_bound"], "x_optimum": r["x_optimum"],
                   "op_level": is_op_placement(placements[m]), "placement": r["placement"]}
    ran = {m: r["step_time_s"] for m, r in rows.items() if r["step_time_s"] is not None and not BASELINES[m].reference}
    refs.pop("optimum_placement", None)
    return {"methods": rows, **refs, "best_baseline": min(ran, key=lambda k: (ran[k], k)) if ran else None}
