"""Evaluation: every method's placement measured in one environment, in the shape of 2017 Table 2."""

from __future__ import annotations

import numpy as np

from cluster.environment import Environment

LEARNED = "rl"


def speedup(baseline_s: float | None, learned_s: float | None) -> float | None:
    """2017 Table 2's speedup: ``baseline / learned - 1`` (0.235 = 23.5% faster); ``None`` if either is missing."""
    if baseline_s is None or learned_s is None:
        return None
    return baseline_s / learned_s - 1.0


def evaluate_placements(env: Environment, placements: dict[str, np.ndarray | None]) -> dict[str, dict]:
    """Measure each method's group placement in ``env``.

    Args:
        env: the environment (the same for every method).
        placements: method name -> ``[num_groups]`` device indices (``None``: no placement).
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
        m = env.measure(placement)
        out[method] = {
            "step_time_s": m.step_time_s,
            "oom": m.oom,
            "placement": {g: names[int(d)] for g, d in zip(env.grouping.names, placement)},
            "compute_s": dict(zip(names, m.compute_s)),
            "transfer_s": dict(zip(names, m.transfer_s)),
            "peak_memory_bytes": dict(zip(names, m.peak_memory_bytes)),
        }
    return out


def summarize(results: dict[str, dict]) -> dict:
    """The best baseline and the learned placement's speedups over it and over ``expert``."""
    baselines = {k: v["step_time_s"] for k, v in results.items() if k != LEARNED and v["step_time_s"] is not None}
    best = min(baselines, key=lambda k: (baselines[k], k)) if baselines else None
    learned = results.get(LEARNED, {}).get("step_time_s")
    return {
        "best_baseline": best,
        "speedup_over_best_baseline": speedup(baselines.get(best) if best else None, learned),
        "speedup_over_expert": speedup(baselines.get("expert"), learned),
    }
