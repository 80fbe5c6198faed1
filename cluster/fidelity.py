"""Fidelity of the simulator: simulated against reference step times on the same placements.

For each placement, [`fidelity`][cluster.fidelity.fidelity] gets the simulated step time with the roofline cost
model, with a calibrated [`cluster.calibrate.CostTable`][cluster.calibrate.CostTable] if one is given (per-op
measured times and, if fitted, its link cost), and the reference step time: the real one
(``against="real"``, [`cluster.real.RealEnvironment`][cluster.real.RealEnvironment], ``steps`` steps, the first
dropped) or TensorFlow's own cost model (``against="grappler"``,
[`cluster.grappler.GrapplerEnvironment`][cluster.grappler.GrapplerEnvironment]). The row fields ``real_*`` hold the
reference's values whichever it is. It reports the
rank agreement (Kendall's tau, ``scipy.stats.kendalltau``, tau-b) and the mean absolute
percentage error ``mean(|sim - real| / real)`` as a fraction. Only placements whose real
run did not run out of memory count; the simulator's step time is used even where it
reports OOM (its capacity model is not what is compared here).
"""

from __future__ import annotations

from typing import Any

import math

import numpy as np

from cluster.factory import make_environment
from cluster.spec import ClusterSpec

AGAINST = ("real", "grappler")  #: the reference environments [`fidelity`][cluster.fidelity.fidelity] compares against


def random_placements(num_groups: int, num_devices: int, n: int, seed: int = 0, devices: list[int] | None = None,
                      prefix: str = "random") -> dict[str, np.ndarray]:
    """``n`` uniformly random group placements: name ``{prefix}_{k}`` -> ``[num_groups]`` device indices.

    Args:
        devices: draw only among these device indices (e.g. the GPUs, for GPU-only splits);
            default all ``num_devices``.
    Raises:
        ValueError: a non-positive ``num_groups``, ``num_devices`` or negative ``n``, or an empty
            or out-of-range ``devices`` (names it).
    """
    for name, v, lo in (("num_groups", num_groups, 1), ("num_devices", num_devices, 1), ("n", n, 0)):
        if v < lo:
            raise ValueError(f"{name}: must be >= {lo}, got {v}")
    choices = np.arange(num_devices) if devices is None else np.asarray(devices, dtype=np.int64)
    if choices.size == 0 or choices.min() < 0 or choices.max() >= num_devices:
        raise ValueError(f"devices: {list(choices)} is empty or outside 0..{num_devices - 1}")
    rng = np.random.default_rng(seed)
    return {f"{prefix}_{k}": choices[rng.integers(0, len(choices), size=num_groups)].astype(np.int64)
            for k in range(n)}


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
             warmup: int = 1, seed: int = 0, soft_placement: bool = True, on_row=None, against: str = "real") -> dict:
    """Simulated vs reference (real or grappler) step times of ``placements`` on ``spec``.

    Args:
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] (with ``graph_def``).
        spec: the cluster (real runs use [`cluster.real.tf_devices`][cluster.real.tf_devices]).
        placements: name -> group placement ``[num_groups]``.
        cost_table: optional [`cluster.calibrate.CostTable`][cluster.calibrate.CostTable] for the calibrated simulation.
        steps, warmup: real steps per placement and how many are dropped (2017 Sec. 3.4: 10, 1).
        seed: seed of the synthetic inputs.
        soft_placement: real runs move groups with no kernel on their device to the CPU, as
            the simulator does.
        on_row: optional callback receiving each row as it is measured.
        against: the reference, ``real`` (TensorFlow on this machine's devices) or ``grappler``
            (TensorFlow's cost model; ``steps``, ``warmup``, ``seed``, ``soft_placement`` unused).
    Returns:
        ``{"against", "kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated", "n",
        "kendall_tau_gpu_only", "mape_gpu_only", "n_gpu_only", "rows"}``: tau in [-1, 1] (NaN
        with fewer than 2 rows or no calibration), MAPE a fraction, ``n`` the placements compared,
        ``*_gpu_only`` over the placements that use GPUs only; each row has ``name``, ``sim_s``,
        ``sim_calibrated_s`` (or ``None``), ``real_s`` (the reference's seconds, ``None`` if
        OOM), ``real_std_s``, ``real_min_s``, ``real_max_s`` (``None`` for grappler),
        ``real_oom``, ``sim_oom``, ``devices_used``, ``gpu_only``.
    Raises:
        ValueError: empty ``placements``, a placement of the wrong length, an unknown ``against``;
        cluster.real.PlacementError: a placement TensorFlow cannot run.
    """
    if against not in AGAINST:
        raise ValueError(f"against: unknown reference {against!r}; valid: {', '.join(AGAINST)}")
    if not placements:
        raise ValueError("placements: empty; give at least one")
    grouping = prepared.grouping
    sim = make_environment("sim", prepared, spec)
    sim_cal = make_environment("sim", prepared, spec, {"cost_table": cost_table}) if cost_table is not None else None
    env = make_environment(against, prepared, spec, {"steps": steps, "warmup": warmup, "seed": seed,
                                                     "soft_placement": soft_placement})
    gpus = set(spec.gpu_indices)
    rows: list[dict[str, Any]] = []
    for name, gp in placements.items():
        gp = np.asarray(gp, dtype=np.int64)
        if gp.shape != (grouping.num_groups,):
            raise ValueError(f"placements[{name!r}]: length {gp.shape}, expected ({grouping.num_groups},)")
        r = sim.measure(gp)
        rc = sim_cal.measure(gp) if sim_cal is not None else None
        m = env.measure(gp)
        row = {
            "name": name,
            "sim_s": r.simulated_step_time_s,
            "sim_oom": r.oom,
            "sim_calibrated_s": rc.simulated_step_time_s if rc is not None else None,
            "real_s": m.step_time_s,
            "real_std_s": getattr(m, "std_s", None),
            "real_min_s": getattr(m, "min_s", None),
            "real_max_s": getattr(m, "max_s", None),
            "real_oom": m.oom,
            "devices_used": int(len(np.unique(gp))),
            "gpu_only": bool(gpus) and set(np.unique(gp).tolist()) <= gpus,
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
    gpu_only = [r for r in ok if r["gpu_only"]]
    tau_g, mape_g = _agreement([r["sim_s"] for r in gpu_only], [r["real_s"] for r in gpu_only])
    return {
        "against": against,
        "kendall_tau_gpu_only": tau_g,
        "mape_gpu_only": mape_g,
        "n_gpu_only": len(gpu_only),
        "kendall_tau": tau,
        "mape": mape,
        "kendall_tau_calibrated": tau_c,
        "mape_calibrated": mape_c,
        "n": len(ok),
        "rows": rows,
    }
