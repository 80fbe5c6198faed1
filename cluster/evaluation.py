"""Evaluation: every method's placement measured in one environment, in the shape of 2017 Table 2."""

from __future__ import annotations

import numpy as np

from cluster.environment import Environment
from cluster.op_placement import is_op_placement, measure_placement


def speedup(baseline_s: float | None, learned_s: float | None) -> float | None:
    """2017 Table 2's speedup: ``baseline / learned - 1`` (0.235 = 23.5% faster); ``None`` if either is missing."""
    if baseline_s is None or learned_s is None:
        return None
    return baseline_s / learned_s - 1.0


def evaluate_placements(
    env: Environment, placements: dict[str, np.ndarray | None], envs: dict[str, Environment] | None = None
) -> dict[str, dict]:
    """Measure each method's group placement in ``env``.

    Args:
        env: the environment (the same for every method).
        placements: method name -> ``[num_groups]`` device indices, or an
            [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] (``[num_ops]``, keyed by op name in
            ``placement``), or ``None`` (no placement).
        envs: method -> the environment to measure that method's placement in instead: one of
            the same kind, graph and cluster over the grouping its placement is over (a
            learner that groups ops itself places other units). Environments simulate or run
            the op graph with each op on its unit's device, so the step times compare.
    Returns:
        method -> ``{"step_time_s": float | None, "oom": bool, "placement": {group: device}}``
        plus per-device ``compute_s``, ``transfer_s`` and ``peak_memory_bytes``.
    """
    names = env.spec.device_names
    out: dict[str, dict] = {}
    for method, placement in placements.items():
        if placement is None:
            out[method] = {"step_time_s": None, "oom": False, "placement": {}}
            continue
        menv = (envs or {}).get(method, env)
        m = measure_placement(menv, placement)  # a group placement or an OpPlacement (cluster.op_placement)
        if is_op_placement(placement):
            units, devices = [op.name for op in menv.graph.ops], placement.ops
        else:
            units, devices = menv.grouping.names, placement
        out[method] = {
            "step_time_s": m.step_time_s,
            "oom": m.oom,
            "placement": {g: names[int(d)] for g, d in zip(units, devices)},
            "compute_s": dict(zip(names, m.compute_s)),
            "transfer_s": dict(zip(names, m.transfer_s)),
            "peak_memory_bytes": dict(zip(names, m.peak_memory_bytes)),
            # a real measurement's spread (cluster.torch_real.TorchMeasurement: median, quartiles, count)
            **{k: getattr(m, k) for k in ("step_times_s", "q1_s", "q3_s", "iqr_s", "steps", "threads", "failure")
               if getattr(m, k, None) is not None},
        }
    return out


def summarize(results: dict[str, dict], learners: list[str] | tuple[str, ...] = (),
              references: list[str] | tuple[str, ...] = ()) -> dict:
    """The best baseline, each learner's speedups over it and over ``expert`` (2017 Table 2's last column).

    Args:
        results: method -> row of [`evaluate_placements`][cluster.evaluation.evaluate_placements].
        learners: the methods whose placement was searched for (the rest are baselines).
        references: reference points, neither baselines nor learners (the optimum).

    Returns:
        ``best_baseline``; ``speedups``: learner -> ``{"over_best_baseline", "over_expert"}``;
        ``best_learned``: the fastest learner; ``speedup_over_best_baseline`` and
        ``speedup_over_expert``: those of ``best_learned``. A speedup is ``None`` when a
        step time is missing (OOM or no placement).
    """
    baselines = {k: v["step_time_s"] for k, v in results.items()
                 if k not in learners and k not in references and v["step_time_s"] is not None}
    best = min(baselines, key=lambda k: (baselines[k], k)) if baselines else None
    learned = {k: v["step_time_s"] for k, v in results.items() if k in learners}
    speedups = {
        k: {"over_best_baseline": speedup(baselines.get(best) if best else None, t), "over_expert": speedup(baselines.get("expert"), t)}
        for k, t in learned.items()
    }
    ran = {k: t for k, t in learned.items() if t is not None}
    best_learned = min(ran, key=lambda k: (ran[k], k)) if ran else None
    return {
        "best_baseline": best,
        "best_learned": best_learned,
        "speedups": speedups,
        "speedup_over_best_baseline": speedups[best_learned]["over_best_baseline"] if best_learned else None,
        "speedup_over_expert": speedups[best_learned]["over_expert"] if best_learned else None,
    }
