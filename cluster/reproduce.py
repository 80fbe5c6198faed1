"""2017 Table 2 as data, and the fit of the K80 presets' hardware/TensorFlow parameters to it.

The table (Mirhoseini et al. 2017, Table 2: step seconds of RNNLM, NMT and Inception-V3 on
1 Haswell + 2 or 4 K80 GPUs) is :data:`PAPER_TABLE2`. Its cells (:func:`paper_cells`) are one
single-CPU and one single-GPU time per model (shared by its 2- and 4-GPU rows) and a Scotch,
MinCut and expert time per row: 24 cells, 23 numbers and one OOM (NMT on one GPU).

**The fit** (:func:`fit`). The free parameters (:data:`FIT_PARAMS`) are properties of the
hardware and of 2017 TensorFlow, shared by every model and both presets: per device kind
(CPU, GPU) the achieved efficiencies, per-op executor overhead and memory efficiency of
:mod:`cluster.cost_model`, and the Send/Recv overhead and achieved link bandwidth of
:class:`cluster.spec.TransferSpec`; never one per model or per cell. The loss is the sum
of squared log ratios ``log(ours / paper)`` over the numeric cells of the models fitted on,
plus a weak prior ``PRIOR_WEIGHT * log(p / ref)`` per parameter towards its reference value
(the datasheet / grappler figure, :data:`FIT_PARAMS`; convolution and "other" efficiencies are fitted relative to the dense one, reference ratio 1, so a model with no convolutions leaves them at the dense efficiency) so that parameters the cells cannot
tell apart stay at their references; ``scipy.optimize.least_squares`` (trust-region
reflective, bounds) in log-parameter space.

Baseline placements (computed by a placer the caller injects, :attr:`TableData.place`, so that
``cluster`` does not import ``baselines``; ``tasks.reproduce`` passes :func:`baselines.place_baselines`):
Scotch and MinCut map the group graph with the cost model's op times
and link costs, so they depend on the parameters. A fit round holds the placements fixed
(the loss is then smooth); the placements are recomputed with the round's result and the
fit repeated (:data:`FIT_ROUNDS` rounds); reported figures always use placements computed
with the parameters they are reported for.

**Memory.** ``allocator_overhead`` only decides OOM, so it is set from the fitted models'
cells after the time fit: the smallest value at which every paper OOM cell is OOM
(``lower``; 1.0 when no OOM cell is fitted on) and the largest at which no cell the paper
measured is (``upper``); the fit takes their geometric mean.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cluster.cost_model import op_features, op_times_from_features
from cluster.spec import ClusterSpec, load_cluster

#: 2017 Table 2, seconds per step (``None`` = OOM). ``rows`` per number of GPUs: baselines,
#: the RL placement and the Speedup column (RL over the fastest baseline, percent).
PAPER_TABLE2: dict[str, dict] = {
    "rnnlm": {"single_cpu": 6.89, "single_gpu": 1.57,
              "rows": {2: {"scotch": 13.43, "mincut": 11.94, "expert": 3.81, "rl": 1.57, "speedup": 0.0},
                       4: {"scotch": 11.52, "mincut": 10.44, "expert": 4.46, "rl": 1.57, "speedup": 0.0}}},
    "nmt": {"single_cpu": 10.72, "single_gpu": None,
            "rows": {2: {"scotch": 14.19, "mincut": 11.54, "expert": 4.99, "rl": 4.04, "speedup": 23.5},
                     4: {"scotch": 11.23, "mincut": 11.78, "expert": 4.73, "rl": 3.92, "speedup": 20.6}}},
    "inception_v3": {"single_cpu": 26.21, "single_gpu": 4.60,
                     "rows": {2: {"scotch": 25.24, "mincut": 22.88, "expert": 11.22, "rl": 4.60, "speedup": 0.0},
                              4: {"scotch": 23.41, "mincut": 24.52, "expert": 10.65, "rl": 3.85, "speedup": 19.0}}},
}
MODELS = tuple(PAPER_TABLE2)
CLUSTERS = {2: "k80x2", 4: "k80x4"}
BASELINE_METHODS = ("single_cpu", "single_gpu", "scotch", "mincut", "expert")
ROW_METHODS = ("scotch", "mincut", "expert")
PRIOR_WEIGHT = 0.05
FIT_ROUNDS = 3


@dataclass(frozen=True)
class FitParam:
    """One free parameter: where it lives in the spec, its bounds and reference value.

    ``kind`` is ``cpu``/``gpu`` (a :class:`cluster.spec.Device` field on every device of that
    kind) or ``transfer`` (a :class:`cluster.spec.TransferSpec` field); ``ref`` is the value
    the prior pulls towards, with ``ref_source`` saying where it comes from.
    """

    kind: str
    name: str
    lo: float
    hi: float
    ref: float
    ref_source: str

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.name}"


FIT_PARAMS: tuple[FitParam, ...] = (
    FitParam("cpu", "dense_efficiency", 1e-3, 1.0, 1 / 32, "grappler OpLevelCostEstimator: CPU at num_cores*frequency, 1/32 of AVX2-FMA peak"),
    FitParam("cpu", "conv_relative", 1e-3, 1e3, 1.0, "conv_efficiency / dense_efficiency; grappler rates all op types alike"),
    FitParam("cpu", "other_relative", 1e-3, 1e3, 1.0, "other_efficiency / dense_efficiency; grappler rates all op types alike"),
    FitParam("cpu", "memory_efficiency", 1e-2, 1.0, 1.0, "datasheet bandwidth"),
    FitParam("cpu", "op_overhead_s", 1e-7, 1e-2, 2e-6, "previous preset estimate (executor dispatch)"),
    FitParam("gpu", "dense_efficiency", 1e-3, 1.0, 1.0, "grappler: GPU at SMs*cores*clock (peak)"),
    FitParam("gpu", "conv_relative", 1e-3, 1e3, 1.0, "conv_efficiency / dense_efficiency; grappler rates all op types alike"),
    FitParam("gpu", "other_relative", 1e-3, 1e3, 1.0, "other_efficiency / dense_efficiency; grappler rates all op types alike"),
    FitParam("gpu", "memory_efficiency", 1e-2, 1.0, 1.0, "datasheet bandwidth"),
    FitParam("gpu", "op_overhead_s", 1e-7, 1e-2, 5e-6, "previous preset estimate (CUDA launch through the executor)"),
    FitParam("gpu", "half_efficiency_flops", 1e3, 1e12, 1e7, "order of a GEMM that fills 13 SMs (estimate)"),
    FitParam("transfer", "send_recv_overhead_s", 1e-7, 1e-1, 1e-5, "previous preset estimate (10 us)"),
    FitParam("transfer", "bandwidth_efficiency", 1e-3, 1.0, 1.0, "datasheet PCIe 3.0 x16"),
)

#: the start of a fit (inside the bounds; a rough hand estimate from the single-device cells).
START = {"cpu.dense_efficiency": 0.15, "cpu.conv_relative": 0.3, "cpu.other_relative": 0.3,
         "cpu.memory_efficiency": 0.5, "cpu.op_overhead_s": 2e-5, "gpu.dense_efficiency": 0.3,
         "gpu.conv_relative": 0.3, "gpu.other_relative": 1.0, "gpu.memory_efficiency": 0.5,
         "gpu.op_overhead_s": 5e-5, "gpu.half_efficiency_flops": 1e8,
         "transfer.send_recv_overhead_s": 1e-3, "transfer.bandwidth_efficiency": 0.3}


def device_fields(values: dict[str, float], kind: str) -> dict[str, float]:
    """The :class:`cluster.spec.Device` fields of device kind ``kind`` from fit values: the
    ``*_relative`` parameters become ``conv_efficiency`` / ``other_efficiency`` =
    ``min(1, dense_efficiency * relative)``; the rest are fields already."""
    out = {}
    for key, v in values.items():
        k, name = key.split(".", 1)
        if k == kind:
            out[name] = float(v)
    dense = out.get("dense_efficiency", 1.0)
    for rel, eff in (("conv_relative", "conv_efficiency"), ("other_relative", "other_efficiency")):
        if rel in out:
            out[eff] = min(1.0, dense * out.pop(rel))
    return out


def apply_params(spec: ClusterSpec, values: dict[str, float], allocator_overhead: float | None = None,
                 gpu_peer_access: bool | None = False) -> ClusterSpec:
    """``spec`` with the fitted parameters set (keys ``kind.name`` of :data:`FIT_PARAMS`).

    Also sets ``compute_memory_overlap = False`` (grappler's default: compute + memory) and,
    unless ``None``, ``allocator_overhead`` on the GPUs and ``transfer.gpu_peer_access``.

    Raises:
        pydantic.ValidationError: a value outside the field's range.
    """
    data = spec.model_dump()
    for dev in data["devices"]:
        dev.update(device_fields(values, dev["kind"]))
        if allocator_overhead is not None and dev["kind"] == "gpu":
            dev["allocator_overhead"] = float(allocator_overhead)
    for key, v in values.items():
        kind, name = key.split(".", 1)
        if kind == "transfer":
            data["transfer"][name] = float(v)
    if gpu_peer_access is not None:
        data["transfer"]["gpu_peer_access"] = gpu_peer_access
    data["compute_memory_overlap"] = False
    return ClusterSpec.model_validate(data)


def spec_values(spec: ClusterSpec) -> dict[str, float]:
    """The :data:`FIT_PARAMS` values a spec holds (first device of each kind)."""
    out = {}
    for p in FIT_PARAMS:
        if p.kind == "transfer":
            out[p.key] = float(getattr(spec.transfer, p.name))
        else:
            dev = next(d for d in spec.devices if d.kind == p.kind)
            if p.name.endswith("_relative"):
                out[p.key] = float(getattr(dev, p.name.replace("_relative", "_efficiency")) / dev.dense_efficiency)
            else:
                out[p.key] = float(getattr(dev, p.name))
    return out


def paper_cells(models=MODELS) -> list[tuple[str, int, str, float | None]]:
    """``(model, gpus, method, paper seconds or None for OOM)``: single-device cells once per
    model (listed under ``gpus = 2``), then Scotch, MinCut, expert per row."""
    cells = []
    for m in models:
        t = PAPER_TABLE2[m]
        cells.append((m, 2, "single_cpu", t["single_cpu"]))
        cells.append((m, 2, "single_gpu", t["single_gpu"]))
        for gpus in (2, 4):
            for method in ROW_METHODS:
                cells.append((m, gpus, method, t["rows"][gpus][method]))
    return cells


@dataclass
class ModelData:
    """One model's paper-size graph, groups and op features (FLOP, bytes, op class)."""

    prepared: object
    features: tuple[np.ndarray, np.ndarray, np.ndarray]


Placer = Callable[[object, ClusterSpec], dict]
"""``place(prepared, spec) -> {method: [num_groups] device indices}``: the baselines of the table
(:data:`BASELINE_METHODS`) on one prepared graph under one spec (e.g.
``functools.partial(baselines.place_baselines, BASELINE_METHODS)``)."""


@dataclass
class TableData:
    """The paper-size graphs of the table's models, the two base presets, and the baseline placer
    (:data:`Placer`, injected by the caller; ``None``: nothing can be placed)."""

    models: dict[str, ModelData]
    base: dict[int, ClusterSpec] = field(default_factory=dict)
    place: Placer | None = None

    def baseline_placements(self, model: str, spec: ClusterSpec) -> dict[str, np.ndarray]:
        """Group placements of the 2017 baselines of ``model`` under ``spec`` (:attr:`place`).

        Raises:
            ValueError: no placer was given (:func:`load_table_data`'s ``place``).
        """
        if self.place is None:
            raise ValueError("TableData.place: no baseline placer given (load_table_data(..., place=...))")
        return self.place(self.models[model].prepared, spec)


def load_table_data(models=MODELS, cache_dir: str | Path = "placement-runs/graph-cache", size: str = "paper",
                    presets: dict[int, str] | None = None, place: Placer | None = None) -> TableData:
    """Prepare (or read from the cache) each model at ``size`` and load the presets; ``place``:
    the baseline placer (:data:`Placer`) the table's baselines are computed with."""
    from compgraph.prepare import prepare

    data = {}
    for m in models:
        p = prepare(m, size, cache_dir=str(cache_dir))
        data[m] = ModelData(p, op_features(p.graph))
    base = {g: load_cluster(name) for g, name in (presets or CLUSTERS).items()}
    return TableData(data, base, place)


def simulate(md: ModelData, spec: ClusterSpec, placements: dict[str, np.ndarray]) -> dict[str, dict]:
    """Step time, OOM and the highest device peak of each group placement (fast simulator)."""
    from cluster.fast_simulator import FastSimulator

    times = op_times_from_features(*md.features, spec)
    sim = FastSimulator(md.prepared.graph, spec, op_times=times)
    names = list(placements)
    res = sim.run_group_arrays(np.stack([placements[n] for n in names]), md.prepared.grouping.op_group)
    cap = np.array([d.memory_bytes for d in spec.devices])
    return {n: {"step_time_s": float(res.step_time_s[i]), "oom": bool(res.oom[i]),
                "peak_memory_bytes": res.peak_memory_bytes[i].tolist(),
                # allocator overhead at which this placement would just fit: min over devices of capacity / peak
                "fits_below_overhead": float(np.min(np.where(res.peak_memory_bytes[i] > 0,
                                                             cap / np.maximum(res.peak_memory_bytes[i], 1), np.inf)))}
            for i, n in enumerate(names)}


def specs_for(data: TableData, values: dict[str, float], allocator_overhead: float | None = None) -> dict[int, ClusterSpec]:
    return {g: apply_params(s, values, allocator_overhead) for g, s in data.base.items()}


def all_placements(data: TableData, specs: dict[int, ClusterSpec], models) -> dict[tuple[str, int], dict]:
    return {(m, g): data.baseline_placements(m, specs[g]) for m in models for g in specs}


def predict(data: TableData, values: dict[str, float], models, allocator_overhead: float | None = None,
            placements: dict | None = None) -> dict[tuple[str, int], dict[str, dict]]:
    """Simulated baseline cells of ``models`` under ``values``: ``(model, gpus) -> method -> result``.
    Placements are recomputed with ``values`` unless given."""
    specs = specs_for(data, values, allocator_overhead)
    placements = placements or all_placements(data, specs, models)
    return {(m, g): simulate(data.models[m], specs[g], placements[(m, g)]) for m in models for g in specs}


def _residuals(x, data, models, placements, cells):
    values = {p.key: float(math.exp(v)) for p, v in zip(FIT_PARAMS, x)}
    pred = predict(data, values, models, placements=placements)
    r = [math.log(pred[(m, g)][meth]["step_time_s"] / paper) for m, g, meth, paper in cells if paper is not None]
    r += [PRIOR_WEIGHT * (v - math.log(p.ref)) for p, v in zip(FIT_PARAMS, x)]
    return np.array(r)


def fit_allocator_overhead(pred: dict, models) -> dict:
    """``allocator_overhead`` from the fitted models' cells (module docstring, "Memory")."""
    lower, upper = 1.0, math.inf
    for m, g, meth, paper in paper_cells(models):
        f = pred[(m, g)][meth]["fits_below_overhead"]
        if paper is None:
            lower = max(lower, f * 1.001)
        else:
            upper = min(upper, f)
    value = math.sqrt(lower * upper) if math.isfinite(upper) and upper >= lower else lower
    return {"lower": lower, "upper": upper, "value": value, "consistent": upper >= lower}


def fit(data: TableData, models, start: dict[str, float] | None = None, rounds: int = FIT_ROUNDS,
        max_nfev: int = 200, log=print) -> dict:
    """Fit :data:`FIT_PARAMS` on the numeric cells of ``models`` (module docstring).

    Returns:
        ``{"models", "values" (key -> value), "allocator_overhead" (see
        :func:`fit_allocator_overhead`), "rms_log_ratio", "nfev", "rounds"}``.
    """
    from scipy.optimize import least_squares

    cells = paper_cells(models)
    values = dict(start or START)
    lo = np.log([p.lo for p in FIT_PARAMS])
    hi = np.log([p.hi for p in FIT_PARAMS])
    nfev = 0
    for r in range(rounds):
        specs = specs_for(data, values)
        placements = all_placements(data, specs, models)
        x0 = np.clip(np.log([values[p.key] for p in FIT_PARAMS]), lo + 1e-9, hi - 1e-9)
        sol = least_squares(_residuals, x0, bounds=(lo, hi), args=(data, models, placements, cells),
                            max_nfev=max_nfev, x_scale=1.0, diff_step=1e-3)
        nfev += sol.nfev
        values = {p.key: float(math.exp(v)) for p, v in zip(FIT_PARAMS, sol.x)}
        log(f"fit {'+'.join(models)} round {r + 1}: cost {sol.cost:.4f} nfev {sol.nfev}")
    pred = predict(data, values, models)
    ratios = [math.log(pred[(m, g)][meth]["step_time_s"] / paper) for m, g, meth, paper in cells if paper is not None]
    return {"models": list(models), "values": values, "allocator_overhead": fit_allocator_overhead(pred, models),
            "rms_log_ratio": float(np.sqrt(np.mean(np.square(ratios)))), "nfev": nfev, "rounds": rounds}


def kendall_tau(ours: list[float | None], paper: list[float | None]) -> float:
    """Kendall's tau-b between two orders of the same methods (OOM / ``None`` = slowest)."""
    from scipy.stats import kendalltau

    big = 1e9
    a = [big if v is None else v for v in ours]
    b = [big if v is None else v for v in paper]
    tau = kendalltau(a, b).statistic
    return float(tau) if tau == tau else 1.0


def table_rows(pred: dict, heldout: dict | None = None, learners: dict | None = None, models=MODELS) -> list[dict]:
    """One dict per (model, GPUs) row: per method ours vs paper (ratio, held-out prediction,
    OOM), the row's Kendall tau against the paper's order, and the learners' speedups.

    Args:
        pred: ``(model, gpus) -> method -> {"step_time_s", "oom"}`` under the shipped presets.
        heldout: the same under the parameters fitted without the row's model (or ``None``).
        learners: ``(model, gpus) -> method -> {"step_time_s", "oom"}`` of learned placements.
    """
    rows = []
    for m in models:
        t = PAPER_TABLE2[m]
        for g in (2, 4):
            if (m, g) not in pred:
                continue
            paper = {"single_cpu": t["single_cpu"], "single_gpu": t["single_gpu"], **{k: t["rows"][g][k] for k in ROW_METHODS}}
            cells = {}
            for meth, pv in paper.items():
                r = pred[(m, g)][meth]
                ours = None if r["oom"] else r["step_time_s"]
                h = (heldout or {}).get((m, g), {}).get(meth)
                hv = None if h is None or h["oom"] else h["step_time_s"]
                cells[meth] = {"paper_s": pv, "ours_s": ours, "ours_time_s": r["step_time_s"], "oom": r["oom"],
                               "ratio": (ours / pv) if ours is not None and pv is not None else None,
                               "heldout_s": hv, "heldout_oom": None if h is None else h["oom"],
                               "heldout_ratio": (hv / pv) if hv is not None and pv is not None else None}
            order = list(paper)
            row = {"model": m, "gpus": g, "cells": cells,
                   "tau": kendall_tau([cells[k]["ours_s"] for k in order], [paper[k] for k in order]),
                   "tau_heldout": (kendall_tau([cells[k]["heldout_s"] for k in order], [paper[k] for k in order])
                                   if heldout else None),
                   "learners": {}}
            best_base = min((c["ours_s"] for c in cells.values() if c["ours_s"] is not None), default=None)
            for lname, lr in ((learners or {}).get((m, g)) or {}).items():
                ls = None if lr["oom"] else lr["step_time_s"]
                row["learners"][lname] = {"ours_s": ls, "paper_rl_s": t["rows"][g]["rl"],
                                          "speedup_pct": (100 * (best_base - ls) / best_base) if ls and best_base else None,
                                          "paper_speedup_pct": t["rows"][g]["speedup"]}
            rows.append(row)
    return rows


def within(rows: list[dict], key: str = "ratio", factor: float = 1.5) -> dict:
    """Share of cells within ``factor`` of the paper (an OOM cell counts as within if both are OOM).
    Single-device cells count once per model (the 2-GPU row)."""
    hit = total = 0
    for row in rows:
        for meth, c in row["cells"].items():
            if meth in ("single_cpu", "single_gpu") and row["gpus"] != 2:
                continue
            total += 1
            oom_key = "oom" if key == "ratio" else "heldout_oom"
            if c["paper_s"] is None:
                hit += bool(c[oom_key])
            elif c[key] is not None and 1 / factor <= c[key] <= factor:
                hit += 1
    return {"within": hit, "cells": total, "share": hit / total if total else None}


PRESET_DIR = Path(__file__).parent / "presets"
#: every fit of ``scripts/fit_presets.py --write`` (leave-one-model-out and all rows).
FIT_JSON = PRESET_DIR / "k80_fit.json"
#: GPU memory TensorFlow sees on one GK210 of a K80 with ECC on: nvidia-smi reports 11441 MiB
#: (TensorFlow 1.x logs "totalMemory: 11.17GiB"), not the datasheet's 12 GiB.
K80_VISIBLE_MEMORY = 11441 * 2**20


def load_fit(path: str | Path = FIT_JSON) -> dict | None:
    """The stored fits (``scripts/fit_presets.py --write``), or ``None`` if there are none."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def preset_yaml(gpus: int, values: dict[str, float], allocator_overhead: float, fit_record: dict) -> str:
    """The YAML text of preset ``k80x{gpus}`` with the fitted ``values`` (every figure with its source)."""
    cpu = device_fields(values, "cpu")
    gpu = device_fields(values, "gpu")
    tr = {p.name: values[p.key] for p in FIT_PARAMS if p.kind == "transfer"}
    cpu_f = ", ".join(f"{k}: {_fmt(v)}" for k, v in cpu.items())
    gpu_f = ", ".join(f"{k}: {_fmt(v)}" for k, v in gpu.items())
    lines = [
        f"# The 2017 paper's machine with {gpus} GPUs (Mirhoseini et al. 2017, Sec. 4.1 \"Devices\"), as TensorFlow",
        "# of 2017 ran on it: one Intel Haswell 2300 CPU with 18 cores and "
        f"{gpus} Nvidia Tesla K80 GPUs; 50 GB of RAM allowed.",
        "#",
        "# DATASHEET figures:",
        "# - CPU: Intel Xeon E5-2699 v3 (Haswell-EP, 18 cores, 2.3 GHz; ark.intel.com). Peak FP32 =",
        "#   18 cores x 2.3e9 Hz x 32 FLOP/cycle (two 256-bit FMA units) = 1.3248e12 FLOP/s.",
        "#   Max memory bandwidth 68 GB/s (4 channels DDR4-2133). Memory: the paper's 50 GB.",
        "# - GPU: one GK210 of an NVIDIA Tesla K80 board (TensorFlow sees each of the board's two GK210",
        "#   as a GPU). K80 datasheet: 8.73 TFLOP/s FP32 with GPU Boost, 480 GB/s per board, i.e. per GPU",
        "#   4.365e12 FLOP/s, 240 GB/s. memory_bytes: 11441 MiB, what nvidia-smi reports per GK210 with",
        "#   ECC on (TensorFlow 1.x logs totalMemory 11.17GiB), not the datasheet's 12 GiB.",
        "# - Links: PCI Express 3.0 x16, 15.75 GB/s per direction (PCI-SIG); latency_s 10 us (estimate).",
        "# - transfer.gpu_peer_access: false. 2017 TensorFlow copied between K80s through host memory",
        "#   (device -> host -> device), as the issue's brief and TF's GPUUtil::DeviceToDevice fallback do.",
        "# - compute_memory_overlap: false, grappler OpLevelCostEstimator's default (compute + memory).",
        "#",
        "# FITTED figures (scripts/fit_presets.py, cluster/reproduce.py: least squares on log(ours/paper)",
        "# over all 23 numeric cells of 2017 Table 2, all three models, both presets, shared parameters):",
        f"# - CPU: {cpu_f}",
        f"# - GPU: {gpu_f}",
        f"# - transfer: " + ", ".join(f"{k}: {_fmt(v)}" for k, v in tr.items()),
        f"# - GPU allocator_overhead {_fmt(allocator_overhead)}: geometric mean of the interval in which NMT on one",
        f"#   GPU is OOM and every placement the paper measured fits "
        f"[{_fmt(fit_record['allocator_overhead']['lower'])}, {_fmt(fit_record['allocator_overhead']['upper'])}].",
        f"# Fit: rms log ratio {fit_record['rms_log_ratio']:.4f} over the fitted cells; every fit, with the",
        "# leave-one-model-out ones, is in cluster/presets/k80_fit.json.",
        f"name: k80x{gpus}",
        f"description: 1x 18-core Haswell CPU + {gpus}x Tesla K80 (GK210) over PCIe 3.0 x16 (2017 Sec. 4.1), fitted to 2017 Table 2",
        "devices:",
        "  - {name: /cpu:0, kind: cpu, model: Intel Xeon E5-2699 v3, peak_flops: 1.3248e12, memory_bandwidth: 68.0e9, "
        f"memory_bytes: 50.0e9, {cpu_f}}}",
    ]
    for i in range(gpus):
        lines.append(f"  - {{name: /gpu:{i}, kind: gpu, model: Tesla K80 (one GK210), peak_flops: 4.365e12, memory_bandwidth: 240.0e9, "
                     f"memory_bytes: {K80_VISIBLE_MEMORY}, {gpu_f}, allocator_overhead: {_fmt(allocator_overhead)}}}")
    lines += [
        "default_link: {bandwidth: 15.75e9, latency_s: 10.0e-6}",
        "links: []",
        "transfer: {" + ", ".join(f"{k}: {_fmt(v)}" for k, v in tr.items()) + ", gpu_peer_access: false}",
        "compute_memory_overlap: false",
        "fit: {script: scripts/fit_presets.py, table: 2017-table2, cells: all 23 numeric cells, "
        f"rms_log_ratio: {fit_record['rms_log_ratio']:.4f}, record: cluster/presets/k80_fit.json}}",
        "sources:",
        "  - Mirhoseini et al. 2017, Sec. 4.1 (devices, 50 GB RAM) and Table 2 (the fitted step times)",
        "  - Intel ARK, Xeon E5-2699 v3 (18 cores, 2.3 GHz, 68 GB/s)",
        "  - NVIDIA Tesla K80 datasheet (8.73 TFLOPS FP32 boost, 480 GB/s, 24 GB, PCIe Gen3 x16)",
        "  - PCI-SIG, PCI Express 3.0 x16 (15.75 GB/s per direction)",
        "  - TensorFlow grappler OpLevelCostEstimator (tensorflow/core/grappler/costs/op_level_cost_estimator.cc)",
    ]
    return "\n".join(lines) + "\n"


def write_presets(fits: dict) -> None:
    """Write ``k80x2.yaml``, ``k80x4.yaml`` from ``fits["all_rows"]`` and every fit to :data:`FIT_JSON`."""
    res = fits["all_rows"]
    for gpus in (2, 4):
        text = preset_yaml(gpus, res["values"], res["allocator_overhead"]["value"], res)
        (PRESET_DIR / f"k80x{gpus}.yaml").write_text(text)
        load_cluster(f"k80x{gpus}")  # validates
    FIT_JSON.write_text(json.dumps(fits, indent=1, default=str) + "\n")


def evaluate_specs(data: TableData, specs: dict[int, ClusterSpec], models,
                   extra: dict[tuple[str, int], dict[str, np.ndarray]] | None = None) -> dict:
    """Every baseline of ``models`` on each spec (placements computed with that spec), plus any
    ``extra`` group placements per ``(model, gpus)``: ``(model, gpus) -> method -> result``."""
    out = {}
    for m in models:
        for g, spec in specs.items():
            placements = data.baseline_placements(m, spec)
            placements.update((extra or {}).get((m, g), {}))
            out[(m, g)] = simulate(data.models[m], spec, placements)
    return out


def heldout_specs(data: TableData, fits: dict, model: str) -> dict[int, ClusterSpec]:
    """The presets with the parameters fitted without ``model`` (``fits["leave_one_out"][model]``)."""
    res = fits["leave_one_out"][model]
    return specs_for(data, res["values"], res["allocator_overhead"]["value"])


def reproduce_table(data: TableData, models, specs: dict[int, ClusterSpec] | None = None, fits: dict | None = None,
                    learned: dict | None = None) -> dict:
    """The whole comparison with the paper (what ``placement reproduce`` prints).

    Args:
        data: the graphs and base presets (:func:`load_table_data`).
        models: the models (rows) to run.
        specs: the presets to measure with (default: ``data.base``, the shipped presets).
        fits: the stored fits (:func:`load_fit`); gives the held-out column; ``None``: none.
        learned: ``(model, gpus) -> learner -> group placement`` found by the searches.
    Returns:
        ``{"rows": table_rows(...), "shipped": within(...), "heldout": within(..., "heldout_ratio")
        or None, "tau": {row: tau}, "fit": fits summary or None}``.
    """
    specs = specs or data.base
    pred = evaluate_specs(data, specs, models, learned)
    heldout = None
    if fits is not None and "leave_one_out" in fits:
        heldout = {}
        for m in models:
            if m in fits["leave_one_out"]:
                heldout.update(evaluate_specs(data, heldout_specs(data, fits, m), [m]))
    learners = {k: {n: v[n] for n in (learned or {}).get(k, {})} for k, v in pred.items()}
    rows = table_rows(pred, heldout, learners, models)
    return {
        "rows": rows,
        "shipped": within(rows, "ratio"),
        "heldout": within(rows, "heldout_ratio") if heldout else None,
        "tau": {f"{r['model']}/{r['gpus']}": r["tau"] for r in rows},
        "tau_heldout": {f"{r['model']}/{r['gpus']}": r["tau_heldout"] for r in rows} if heldout else None,
        "fit": None if fits is None else {
            "all_rows": {k: fits["all_rows"][k] for k in ("values", "allocator_overhead", "rms_log_ratio")},
            "leave_one_out": {m: {k: f[k] for k in ("values", "allocator_overhead", "rms_log_ratio")}
                              for m, f in fits.get("leave_one_out", {}).items()}},
    }
