"""Statistics of a fair comparison: every learner on the same graph, cluster, environment and
budget over several seeds (the figures of Post Fig. 2 and EAGLE Fig. 5-7)."""

from __future__ import annotations

import numpy as np

from placer.search import SearchResult


def _stats(values: list[float | None]) -> dict:
    ran = [float(v) for v in values if v is not None]
    if not ran:
        return {"median": None, "min": None, "max": None, "iqr": None, "values": values}
    q1, q3 = np.percentile(ran, [25, 75])
    return {"median": float(np.median(ran)), "min": min(ran), "max": max(ran), "iqr": float(q3 - q1), "values": values}


def summarize_runs(runs: dict[str, list[SearchResult]], within: float = 0.05) -> dict[str, dict]:
    """Per learner, over its seeds: the best step time (seconds; median, min, max, interquartile
    range, each seed's value), the placements each seed needed to come within ``within``
    (5%) of its own final best, and the search's wall time (seconds).

    Args:
        runs: learner -> one [`placer.search.SearchResult`][placer.search.SearchResult] per seed (same budget).
    Returns:
        learner -> ``{"best_step_time_s", "placements_to_within_5pct", "wall_time_s"}``,
        each a dict of ``median``, ``min``, ``max``, ``iqr``, ``values`` (``None`` where no
        placement of a seed ran).
    """
    return {
        name: {
            "best_step_time_s": _stats([r.best_step_time_s for r in results]),
            "placements_to_within_5pct": _stats([r.placements_to_within(within) for r in results]),
            "wall_time_s": _stats([r.wall_time_s for r in results]),
        }
        for name, results in runs.items()
    }


def best_so_far(result: SearchResult) -> np.ndarray:
    """float64 ``[len(step_times)]``: the best step time (seconds) after each placement (``nan`` until one ran)."""
    out = np.full(len(result.step_times), np.nan)
    best = np.inf
    for i, t in enumerate(result.step_times):
        if t is not None and t < best:
            best = t
        out[i] = best if np.isfinite(best) else np.nan
    return out
