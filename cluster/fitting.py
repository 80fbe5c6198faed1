"""The fit of the presets' free parameters to measured step times, inside physical bounds.

**Parameters** ([`FIT_PARAMS`][cluster.fitting.FIT_PARAMS]). Properties of the hardware and of the TensorFlow of the
time, shared by every model and every preset of a table, never one per model or per cell:
per device kind (CPU, GPU) the achieved fractions of the datasheet peaks and the executor's
per-op overhead ([`cluster.cost_model`][cluster.cost_model]), and the Send/Recv overhead and achieved link
bandwidth of [`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]. Each has a documented range with its source
([`FitParam`][cluster.fitting.FitParam]), at least as tight as:

* Send/Recv overhead per transfer: 5 µs to 1 ms;
* achieved host<->GPU bandwidth: at least 3 GB/s per PCIe 3.0 x16 hop (of 15.75 GB/s);
* dense and convolution efficiency: at least 0.10 of the datasheet peak;
* memory efficiency: at least 0.30 of the datasheet bandwidth;
* per-op overhead: 1 µs to 100 µs.

**Software terms** ([`SOFTWARE_TERMS`][cluster.fitting.SOFTWARE_TERMS]) are not fitted: named properties of the software
of the time with a source each (e.g. the SIMD width the TensorFlow wheel was built for), set
per table in the preset ([`cluster.spec.Device`][cluster.spec.Device]'s ``software_flops_fraction``).

**The fit** ([`fit`][cluster.fitting.fit]): bounded least squares (``scipy.optimize.least_squares``, trust-region
reflective, with ``bounds``) in log-parameter space on ``log(ours / paper)`` over the numeric
cells of the rows fitted on, plus an optional weak prior ``prior_weight * log(p / ref)`` per
parameter towards its reference (the middle of its physical range, or a cited figure) so that
parameters the cells cannot tell apart stay near it (``prior_weight=0`` turns it off). The
baselines' placements depend on the parameters (Scotch and MinCut read the cost model), so a fit
round holds them fixed (the loss is then smooth); they are recomputed with the round's result
and the fit repeated (``rounds``). The result says which parameters sit on a bound
([`on_bound`][cluster.fitting.on_bound]).

**Memory.** ``allocator_overhead`` only decides OOM, so it is set after the time fit from the
fitted rows ([`fit_allocator_overhead`][cluster.fitting.fit_allocator_overhead]).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from cluster.spec import ClusterSpec


@dataclass(frozen=True)
class FitParam:
    """One free parameter: where it lives in the spec, its physical range and its source.

    Attributes:
        kind: ``cpu``/``gpu`` (a [`cluster.spec.Device`][cluster.spec.Device] field on every device of that
            kind) or ``transfer`` (a [`cluster.spec.TransferSpec`][cluster.spec.TransferSpec] field).
        name: the field.
        lo, hi: the physical range (the field's unit: a fraction, seconds or FLOP).
        ref: the value the optional prior pulls towards.
        source: where the range comes from.
    """

    kind: str
    name: str
    lo: float
    hi: float
    ref: float
    source: str

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.name}"


_EFF = ("at least 0.10 of the datasheet peak (no tuned BLAS or cuDNN kernel runs a large GEMM or "
        "convolution slower); at most 0.90: vendor libraries reach 80-90% of peak on large problems "
        "(MKL SGEMM on Haswell-EP, cuBLAS SGEMM and cuDNN on Kepler)")
_OTHER = ("element-wise ops, reductions and optimizer updates are memory-bound; their compute term "
          "is kept between 0.05 and 1.0 of peak so that it never dominates by itself")
_OVERHEAD = ("1 us to 100 us per op: TensorFlow's executor dispatch (a few us per op on a CPU thread) "
             "plus a CUDA kernel launch (5-10 us) on a GPU")

#: The free parameters of the K80 presets with their physical ranges (see the module docstring).
FIT_PARAMS: tuple[FitParam, ...] = (
    FitParam("cpu", "dense_efficiency", 0.10, 0.90, 0.30, _EFF),
    FitParam("cpu", "conv_efficiency", 0.10, 0.90, 0.30, _EFF),
    FitParam("cpu", "other_efficiency", 0.05, 1.0, 0.30, _OTHER),
    FitParam("cpu", "memory_efficiency", 0.30, 0.90, 0.60,
             "at least 0.30 of the datasheet bandwidth (streaming kernels do better); STREAM triad on a 4-channel "
             "DDR4-2133 Haswell-EP socket reaches about 85% of its 68 GB/s"),
    FitParam("cpu", "op_overhead_s", 1e-6, 1e-4, 1e-5, _OVERHEAD),
    FitParam("gpu", "dense_efficiency", 0.10, 0.90, 0.60, _EFF),
    FitParam("gpu", "conv_efficiency", 0.10, 0.90, 0.40, _EFF),
    FitParam("gpu", "other_efficiency", 0.05, 1.0, 0.30, _OTHER),
    FitParam("gpu", "memory_efficiency", 0.30, 0.90, 0.60,
             "at least 0.30 of the datasheet bandwidth; a GK210 with ECC on streams about 160-180 of "
             "its 240 GB/s (NVIDIA bandwidthTest / STREAM-like kernels, i.e. about 0.7)"),
    FitParam("gpu", "op_overhead_s", 1e-6, 1e-4, 1e-5, _OVERHEAD),
    FitParam("gpu", "half_efficiency_flops", 1e6, 1e9, 1e8,
             "size (FLOP) at which a GEMM or convolution reaches half its large-size efficiency: a problem "
             "must fill every SM's warps (13 SMX x 2048 threads on a GK210); cuBLAS SGEMM on Kepler gets "
             "there near n = 512 (2n^3 = 0.27 GFLOP); 1 MFLOP to 1 GFLOP"),
    FitParam("transfer", "send_recv_overhead_s", 5e-6, 1e-3, 5e-5,
             "TensorFlow's in-process Send/Recv rendezvous plus a cudaMemcpyAsync set-up: tens of "
             "microseconds; 5 us to 1 ms"),
    FitParam("transfer", "bandwidth_efficiency", 0.1905, 0.85, 0.5,
             "achieved fraction of PCIe 3.0 x16's 15.75 GB/s: at least 3 GB/s (3/15.75 = 0.19048, rounded up; "
             "pageable host memory), at most about 13.4 GB/s (pinned, NVIDIA bandwidthTest)"),
)

#: Named software terms of a table's machine: not fitted, each set from its source.
SOFTWARE_TERMS: dict[str, dict] = {
    "cpu.software_flops_fraction": {
        "2017-table2": (0.25, "the TensorFlow 1.0-1.5 pip wheels were built for SSE only (TensorFlow "
                              "logs 'Your CPU supports instructions that this TensorFlow binary was not "
                              "compiled to use: AVX AVX2 FMA'): 8 of Haswell's 32 FP32 FLOP per cycle"),
        "post-table1": (0.5, "the TensorFlow 1.6+ pip wheels use AVX but not FMA: 16 of Broadwell's 32 "
                             "FP32 FLOP per cycle"),
        "eagle-table4": (0.5, "TensorFlow 1.12's pip wheel: AVX, no FMA (16 of 32 FLOP per cycle)"),
    },
}


def param_table(params: tuple[FitParam, ...] = FIT_PARAMS) -> list[dict]:
    """``[{name, lower, upper, ref, source}]``: the parameters and their bounds as plain data."""
    return [{"name": p.key, "lower": p.lo, "upper": p.hi, "ref": p.ref, "source": p.source} for p in params]


def check_bounds(values: dict[str, float], params: tuple[FitParam, ...] = FIT_PARAMS, rtol: float = 1e-9) -> None:
    """Check every parameter of ``values`` lies inside its bound.

    Raises:
        ValueError: a parameter outside its bound (names it, its value and the bound).
    """
    for p in params:
        v = values.get(p.key)
        if v is None:
            continue
        if not (p.lo * (1 - rtol) <= v <= p.hi * (1 + rtol)):
            raise ValueError(f"{p.key}={v:.6g} is outside its bound [{p.lo:.6g}, {p.hi:.6g}] ({p.source})")


def rounded(values: dict[str, float], params: tuple[FitParam, ...] = FIT_PARAMS, digits: int = 6) -> dict[str, float]:
    """``values`` rounded to ``digits`` significant digits and kept inside their bounds (what a preset stores)."""
    bounds = {p.key: (p.lo, p.hi) for p in params}
    out = {}
    for k, v in values.items():
        r = float(f"{v:.{digits}g}")
        lo, hi = bounds.get(k, (-math.inf, math.inf))
        out[k] = min(max(r, lo), hi)
    return out


def on_bound(values: dict[str, float], params: tuple[FitParam, ...] = FIT_PARAMS, rtol: float = 1e-3) -> dict[str, str]:
    """The parameters sitting on a bound: ``key -> "lower" | "upper"`` (within ``rtol`` in log space)."""
    out = {}
    for p in params:
        v = values.get(p.key)
        if v is None:
            continue
        if abs(math.log(v / p.lo)) <= rtol:
            out[p.key] = "lower"
        elif abs(math.log(v / p.hi)) <= rtol:
            out[p.key] = "upper"
    return out


def start_values(params: tuple[FitParam, ...] = FIT_PARAMS) -> dict[str, float]:
    """The start of a fit: each parameter's reference value (inside its bound)."""
    return {p.key: p.ref for p in params}


def apply_params(spec: ClusterSpec, values: dict[str, float], allocator_overhead: float | None = None,
                 gpu_peer_access: bool | None = None, software: dict[str, float] | None = None) -> ClusterSpec:
    """``spec`` with the parameters ``values`` set (keys ``kind.name``: a device field on every device
    of that kind, or a ``transfer`` field).

    Also sets ``compute_memory_overlap = False`` (grappler's default: compute + memory) and, unless
    ``None``, ``allocator_overhead`` on the GPUs, ``transfer.gpu_peer_access`` and the
    ``software`` terms (keys as ``values``).

    Raises:
        pydantic.ValidationError: a value outside the field's range.
    """
    data = spec.model_dump()
    for key, v in {**values, **(software or {})}.items():
        kind, name = key.split(".", 1)
        if kind == "transfer":
            data["transfer"][name] = float(v)
        else:
            for dev in data["devices"]:
                if dev["kind"] == kind:
                    dev[name] = float(v)
    if allocator_overhead is not None:
        for dev in data["devices"]:
            if dev["kind"] == "gpu":
                dev["allocator_overhead"] = float(allocator_overhead)
    if gpu_peer_access is not None:
        data["transfer"]["gpu_peer_access"] = gpu_peer_access
    data["compute_memory_overlap"] = False
    return ClusterSpec.model_validate(data)


def spec_values(spec: ClusterSpec, params: tuple[FitParam, ...] = FIT_PARAMS) -> dict[str, float]:
    """The values of ``params`` a spec holds (the first device of each kind)."""
    out = {}
    for p in params:
        if p.kind == "transfer":
            out[p.key] = float(getattr(spec.transfer, p.name))
        else:
            dev = next(d for d in spec.devices if d.kind == p.kind)
            out[p.key] = float(getattr(dev, p.name))
    return out


Cell = tuple  # (row key, method, paper seconds or None for OOM)
Predict = Callable[[dict[str, float], object], dict]
"""``predict(values, placements) -> {(row key, method): {"step_time_s", "oom", "fits_below_overhead"}}``;
``placements`` ``None`` means: compute the baselines' placements under ``values``; the
returned dict also holds them under the key ``"placements"``."""


def fit_allocator_overhead(pred: dict, cells: list[Cell]) -> dict:
    """``allocator_overhead`` from the fitted cells: the smallest value at which every paper OOM
    cell is OOM (``lower``; 1.0 when there is none) and the largest at which no cell the paper
    measured is (``upper``); the value is their geometric mean (``lower`` if they cross)."""
    lower, upper = 1.0, math.inf
    for row, meth, paper in cells:
        f = pred[(row, meth)]["fits_below_overhead"]
        if paper is None:
            lower = max(lower, f * 1.001)
        else:
            upper = min(upper, f)
    value = math.sqrt(lower * upper) if math.isfinite(upper) and upper >= lower else lower
    return {"lower": lower, "upper": upper, "value": value, "consistent": upper >= lower}


def fit(predict: Predict, cells: list[Cell], params: tuple[FitParam, ...] = FIT_PARAMS,
        start: dict[str, float] | None = None, rounds: int = 3, max_nfev: int = 200, prior_weight: float = 0.05,
        fixed: dict[str, float] | None = None, log=print) -> dict:
    """Fit ``params`` to the numeric ``cells`` inside their bounds (module docstring).

    Args:
        predict: the model's prediction of every cell under some values ([`Predict`][cluster.fitting.Predict]).
        cells: ``(row key, method, paper seconds or None)``; OOM cells only set the allocator overhead.
        start: the first values (default: [`start_values`][cluster.fitting.start_values]), clipped into the bounds.
        rounds: placement recomputations; max_nfev: evaluations per round.
        prior_weight: weight of the pull towards each parameter's reference (0: none).
        fixed: values of other parameters held fixed (passed to ``predict`` beside ``params``).
    Returns:
        ``{"values", "allocator_overhead" ([`fit_allocator_overhead`][cluster.fitting.fit_allocator_overhead]), "rms_log_ratio",
        "nfev", "rounds", "on_bound" ([`on_bound`][cluster.fitting.on_bound]), "prior_weight"}``.
    """
    from scipy.optimize import least_squares

    numeric = [c for c in cells if c[2] is not None]
    fixed = dict(fixed or {})
    values = {**start_values(params), **{k: v for k, v in (start or {}).items() if k in {p.key for p in params}}}
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    refs = np.log([p.ref for p in params])

    def residuals(x, placements):
        vals = {**fixed, **{p.key: float(math.exp(v)) for p, v in zip(params, x)}}
        pred = predict(vals, placements)
        r = [math.log(pred[(row, m)]["step_time_s"] / paper) for row, m, paper in numeric]
        return np.array(r + list(prior_weight * (x - refs)))

    nfev = 0
    for r in range(rounds):
        placements = predict({**fixed, **values}, None)["placements"]
        x0 = np.clip(np.log([values[p.key] for p in params]), lo + 1e-9, hi - 1e-9)
        sol = least_squares(residuals, x0, bounds=(lo, hi), args=(placements,), max_nfev=max_nfev, x_scale=1.0,
                            diff_step=1e-3)
        nfev += sol.nfev
        values = {p.key: float(math.exp(min(max(v, a), b))) for p, v, a, b in zip(params, sol.x, lo, hi)}
        log(f"fit round {r + 1}: cost {sol.cost:.4f} nfev {sol.nfev}")
    check_bounds(values, params)
    pred = predict({**fixed, **values}, None)
    ratios = [math.log(pred[(row, m)]["step_time_s"] / paper) for row, m, paper in numeric]
    return {"values": {**fixed, **values}, "allocator_overhead": fit_allocator_overhead(pred, cells),
            "rms_log_ratio": float(np.sqrt(np.mean(np.square(ratios)))), "nfev": nfev, "rounds": rounds,
            "on_bound": on_bound(values, params), "prior_weight": prior_weight,
            "params": [asdict(p) for p in params]}


def required_value(predict: Predict, values: dict[str, float], key: str, cell: Cell, placements,
                   lo: float = 1e-7, hi: float = 10.0, iters: int = 60) -> float | None:
    """The value of parameter ``key`` (all others at ``values``, placements fixed) at which the model
    predicts ``cell``'s paper seconds: a bisection in log space on ``[lo, hi]``, assuming the step
    time grows with the parameter. ``None`` if even ``lo`` is too slow or ``hi`` too fast (the cell
    cannot be reached by this parameter alone). Used to say, for a cell the bounds cannot reach,
    how much slower one part of the step would have to be."""
    row, meth, paper = cell

    def t(v):
        return predict({**values, key: v}, placements)[(row, meth)]["step_time_s"]

    if paper is None or t(lo) > paper or t(hi) < paper:
        return None
    a, b = math.log(lo), math.log(hi)
    for _ in range(iters):
        m = 0.5 * (a + b)
        if t(math.exp(m)) < paper:
            a = m
        else:
            b = m
    return float(math.exp(0.5 * (a + b)))
