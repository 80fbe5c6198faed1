"""Fidelity of the simulator: simulated against real step times on the same placements.

For each placement, :func:`fidelity` gets the simulated step time with the roofline cost
model, with a calibrated :class:`cluster.calibrate.CostTable` if one is given (per-op
measured times and, if fitted, its link cost), and the real step time
(:class:`cluster.real.RealEnvironment`, ``steps`` steps, the first dropped). It reports the
rank agreement (Kendall's tau, ``scipy.stats.kendalltau``, tau-b) and the mean absolute
percentage error ``mean(|sim - real| / real)`` as a fraction. Only placements whose real
run did not run out of memory count; the simulator's step time is used even where it
reports OOM (its capacity model is not what is compared here).
"""

from __future__ import annotations

import math

import numpy as np

from cluster.simulator import Simulator
from cluster.spec import ClusterSpec


def random_placements(num_groups: int, num_devices: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` uniformly random group placements: name ``random_{k}`` -> ``[num_groups]`` device indices.

    Raises:
        ValueError: a non-positive ``num_groups``, ``num_devices`` or negative ``n`` (names it).
    """
    for name, v, lo in (("num_groups", num_groups, 1), ("num_devices", num_devices, 1), ("n", n, 0)):
        if v < lo:
            raise ValueError(f"{name}: must be >= {lo}, got {v}")
    rng = np.random.default_rng(seed)
    return {f"random_{k}": rng.integers(0, num_devices, size=num_groups, dtype=np.int64) for k in range(n)}


def _agreement(sim: list[float], real: list[float]) -> tuple[float, float]:
    """(Kendall tau-b, MAPE as a fraction) of ``sim`` against ``real``; NaN where undefined."""
    from scipy.stats import kendalltau

    if not sim:
        return math.nan, math.nan
    s, r = np.asarray(sim, dtype=np.float64), np.asarray(real, dtype=np.float64)
    mape = float(np.mean(np.abs(s - r) / r))
    tau = float(kendalltau(s, r).statistic) if len(s) >= 2 else math.nan
    return tau, mape


def fidelity(prepared, spec: ClusterSpec, placements: dict[str, np.ndarray], cost_table=None, steps: int = 10,
             warmup: int = 1, seed: int = 0, soft_placement: bool = True, on_row=None) -> dict:
    """Simulated vs real step times of ``placements`` on ``spec``.

    Args:
        prepared: a :class:`compgraph.prepare.PreparedGraph` (with ``graph_def``).
        spec: the cluster (real runs use :func:`cluster.real.tf_devices`).
        placements: name -> group placement ``[num_groups]``.
        cost_table: optional :class:`cluster.calibrate.CostTable` for the calibrated simulation.
        steps, warmup: real steps per placement and how many are dropped (2017 Sec. 3.4: 10, 1).
        seed: seed of the synthetic inputs.
        soft_placement: real runs move groups with no kernel on their device to the CPU, as
            the simulator does.
        on_row: optional callback receiving each row as it is measured.
    Returns:
        ``{"kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated", "n", "rows"}``:
        tau in [-1, 1] (NaN with fewer than 2 rows or no calibration), MAPE a fraction, ``n``
        the placements compared; each row has ``name``, ``sim_s``, ``sim_calibrated_s`` (or
        ``None``), ``real_s`` (``None`` if OOM), ``real_std_s``, ``real_min_s``,
        ``real_max_s``, ``real_oom``, ``sim_oom``.
    Raises:
        ValueError: empty ``placements`` or a placement of the wrong length;
        cluster.real.PlacementError: a placement TensorFlow cannot run.
    """
    from cluster.real import RealEnvironment

    if not placements:
        raise ValueError("placements: empty; give at least one")
    graph, grouping = prepared.graph, prepared.grouping
    sim = Simulator(graph, spec)
    sim_cal = None
    if cost_table is not None:
        sim_cal = Simulator(graph, cost_table.apply_link(spec), op_times=cost_table.op_times(graph, spec))
    env = RealEnvironment.from_prepared(prepared, spec, steps=steps, warmup=warmup, seed=seed,
                                        soft_placement=soft_placement)
    rows = []
    for name, gp in placements.items():
        gp = np.asarray(gp, dtype=np.int64)
        if gp.shape != (grouping.num_groups,):
            raise ValueError(f"placements[{name!r}]: length {gp.shape}, expected ({grouping.num_groups},)")
        op_p = grouping.expand(gp)
        r = sim.run(op_p)
        rc = sim_cal.run(op_p) if sim_cal is not None else None
        m = env.measure(gp)
        row = {
            "name": name,
            "sim_s": r.step_time_s,
            "sim_oom": r.oom,
            "sim_calibrated_s": rc.step_time_s if rc is not None else None,
            "real_s": m.step_time_s,
            "real_std_s": m.std_s,
            "real_min_s": m.min_s,
            "real_max_s": m.max_s,
            "real_oom": m.oom,
            "devices_used": int(len(np.unique(gp))),
        }
        rows.append(row)
        if on_row is not None:
            on_row(row)
    ok = [r for r in rows if r["real_s"] is not None]
    real = [r["real_s"] for r in ok]
    tau, mape = _agreement([r["sim_s"] for r in ok], real)
    tau_c = mape_c = math.nan
    if sim_cal is not None:
        tau_c, mape_c = _agreement([r["sim_calibrated_s"] for r in ok], real)
    return {
        "kendall_tau": tau,
        "mape": mape,
        "kendall_tau_calibrated": tau_c,
        "mape_calibrated": mape_c,
        "n": len(ok),
        "rows": rows,
    }
