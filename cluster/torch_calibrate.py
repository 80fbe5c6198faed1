"""Fit a cluster's cost-model terms from real PyTorch profiles (one machine's measurements).

**Input** (the shared format of ``shared/measurements/<machine>-<date>/``, its README):

* ``steps.json``: measured steps; ``eager`` rows (``model``, ``device`` ``cuda``/``cpu``, ``foreach``,
  ``median_s`` seconds, ``peak_bytes`` bytes of ``torch.cuda.max_memory_allocated``).
* ``prof_<model>_shapes.json``: ``torch.profiler`` rows of one eager GPU step grouped by op and input
  shapes: ``name`` (``aten::mm``), ``count``, ``shapes`` (input shapes, ``[]`` for a non-tensor),
  ``self_device_us`` (µs of its kernels), ``self_cpu_us`` (µs of host time).
* ``cpuprof_<model>.json``: one eager CPU step: ``wall_s`` and rows with ``self_cpu_us``.
* ``copies.json``: host<->device copies: ``bytes``, ``pinned``, ``dir`` (``h2d``, ``d2h``,
  ``to_cuda_new``), ``median_s``.
* ``env.json``: the machine (GPU, torch version, threads, ``lscpu``).

Models: ``gpt2`` is the benchmark ``gpt`` at size ``gpt2`` and ``resnet50`` the benchmark
``resnet50_torch`` at size ``paper`` ([`PROFILE_MODELS`][cluster.torch_calibrate.PROFILE_MODELS]); their steps are captured with the
project's own front end ([`compgraph.torch_models.capture_benchmark`][compgraph.torch_models.capture_benchmark]), which gives each op its
FLOPs and bytes.

**Matching** ([`match_groups`][cluster.torch_calibrate.match_groups]). Each captured op is matched to the profile's op that runs its
kernels ([`GPU_LEAF`][cluster.torch_calibrate.GPU_LEAF], [`CPU_LEAF`][cluster.torch_calibrate.CPU_LEAF]: ``aten.convolution`` -> ``aten::cudnn_convolution`` on
the GPU, ``aten::mkldnn_convolution`` on the CPU; otherwise the same ATen name). Ops of one name are
matched by their input shapes when the capture and the profile hold the same multiset of shapes,
else on the name's aggregate when both count the same calls, else left out (reported, with their
time). A group is ``(ATen name, shapes or None)``: the measured seconds of its calls beside the
captured ops it covers.

**The fit** ([`fit_device`][cluster.torch_calibrate.fit_device]). Per device kind, bounded least squares in log-parameter space
(``scipy.optimize.least_squares``, trust-region reflective, as [`cluster.fitting.fit`][cluster.fitting.fit]) of

* every matched group: ``sqrt(share) * log(predicted / measured)`` (``share`` its part of the
  measured kernel time; the predicted time is [`cluster.cost_model.op_times_from_features`][cluster.cost_model.op_times_from_features]
  without host dispatch, i.e. the kernels), and
* the measured step of each fit model: ``STEP_WEIGHT * log(simulated / measured)``, the simulated
  step being the sum of the op times on the one device (every op serial on it; host dispatch in),
* a weak pull of each parameter towards its reference (``PRIOR_WEIGHT * log(p / ref)``).

Each parameter is a [`cluster.fitting.FitParam`][cluster.fitting.FitParam] with a cited physical bound
([`TORCH_GPU_PARAMS`][cluster.torch_calibrate.TORCH_GPU_PARAMS], [`TORCH_CPU_PARAMS`][cluster.torch_calibrate.TORCH_CPU_PARAMS], [`TORCH_TRANSFER_PARAMS`][cluster.torch_calibrate.TORCH_TRANSFER_PARAMS]); the optimizer
works inside them, and [`cluster.fitting.check_bounds`][cluster.fitting.check_bounds] checks the stored (rounded) values. The
terms are per op class (dense, convolution, other, memory), a size term for dense ops and
convolutions (``half_efficiency_flops``: on the CPU it is the shape term of oneDNN's convolutions,
whose small problems do not fill 16 cores' AVX-512 units), the per-op device overhead and the
host dispatch per op (``dispatch_s``, [`cluster.spec.Device`][cluster.spec.Device]: a launch-bound step takes at
least its ops' dispatches).

**Copies** ([`fit_copies`][cluster.torch_calibrate.fit_copies]). A copy of ``b`` bytes takes ``overhead + b / (eff * link)``; the
pageable copies set the spec's ``transfer`` (``send_recv_overhead_s``, ``bandwidth_efficiency`` for the copies
from the GPU and ``host_to_device_efficiency`` for those to it: at 64-256 MiB a pageable copy to the GPU ran
at 5.5-10.4 GB/s on the lent H200s and H100s, one from it at 10.4-16.5 GB/s where it faulted in no new pages); the
pinned ones are fitted the same way and kept in the fit record (``fit["pinned"]``): the simulator has one
transfer model. Where the profile has them, the fit takes the copies a placed step makes
([`PLACED_STEP_COPIES`][cluster.torch_calibrate.PLACED_STEP_COPIES]: ``aten._to_copy`` allocating its result, to the GPU and to the host):
a copy to the host into new pageable memory of 256 MiB takes 4-8x as long as one into a reused buffer
(fresh pages; the lent H100s and H200s, ``benchmarks/results/``), and a placed step's every copy to the
host is one. Older profiles without ``to_cpu_new`` rows fit on all pageable rows, as before.

**Memory.** ``allocator_overhead`` (GPU) is the measured peak over the simulated peak of the fit
models, at least 1 and at most [`ALLOCATOR_BOUND`][cluster.torch_calibrate.ALLOCATOR_BOUND] (PyTorch's caching allocator rounds blocks up
and keeps freed segments).

**Hold-out.** ``holdout="gpt2"`` fits on ResNet-50 only (GPU profile and step, CPU profile and step,
copies) and judges GPT-2; ``holdout="resnet50"`` the reverse (the CPU fit then uses GPT-2's profiled
CPU step, ``cpuprof_gpt2.json``'s ``wall_s``); ``None`` fits on both. [`fidelity_rows`][cluster.torch_calibrate.fidelity_rows] gives every
figure of the set, simulated beside measured, marked ``fit`` or ``held-out``.

``python -m cluster.torch_calibrate [PROFILE_DIR]`` prints the fidelity table of the shipped
``h200x1`` preset and of both hold-out fits.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cluster.cost_model import op_features, op_precisions, op_times_from_features
from cluster.fitting import FitParam, check_bounds, on_bound, rounded
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph

PROFILE_MODELS: dict[str, tuple[str, str]] = {"gpt2": ("gpt", "gpt2"), "resnet50": ("resnet50_torch", "paper")}
"""Profile model name -> (benchmark, size) of [`compgraph.models.BENCHMARKS`][compgraph.models.BENCHMARKS]."""

GPU_LEAF = {"aten.convolution": "aten::cudnn_convolution", "aten.native_batch_norm": "aten::cudnn_batch_norm",
            "aten.native_batch_norm_backward": "aten::cudnn_batch_norm_backward", "aten.relu_": "aten::clamp_min_",
            "aten.masked_fill": "aten::masked_fill_", "aten.clone": "aten::copy_", "aten.ones_like": "aten::fill_"}
"""Captured op type -> the profile op that runs its CUDA kernels, where the names differ."""
CPU_LEAF = {"aten.convolution": "aten::mkldnn_convolution", "aten.relu_": "aten::clamp_min_",
            "aten.masked_fill": "aten::masked_fill_", "aten.clone": "aten::copy_", "aten.ones_like": "aten::fill_"}
"""Captured op type -> the profile op that runs its CPU kernel, where the names differ."""

STEP_WEIGHT = 3.0
"""Weight of a measured step's log ratio in the fit (the groups' weights sum to 1)."""
PRIOR_WEIGHT = 0.05
"""Weight of each parameter's pull towards its reference (as [`cluster.fitting.fit`][cluster.fitting.fit])."""
ALLOCATOR_BOUND = (1.0, 2.0)
"""``allocator_overhead`` range: 1 (no overhead) to 2 (PyTorch's caching allocator rounds a block up to
512 bytes or to 2 MiB segments and caches freed blocks; ``torch.cuda.memory_reserved`` stays under twice
``max_memory_allocated`` in practice: PyTorch docs, "CUDA semantics: memory management")."""

_EFF_SRC = ("at least 0.10 of the datasheet peak of the op's precision (no cuBLAS/cuDNN/oneDNN kernel runs a large "
            "GEMM or convolution slower); at most 0.90: vendor libraries reach 80-90% of peak on large problems "
            "(cluster.fitting's bound)")
_CONV_SRC = ("0.05 to 0.90 of the TF32 tensor-core peak (GPU) or the AVX-512 FP32 peak (CPU): ResNet-50's "
             "convolutions at batch 32 include NCHW<->NHWC transposes and 1x1/stride-2 shapes that reach 10-30% "
             "(MLPerf ResNet-50 submissions on H100 reach about 50% in mixed precision with NHWC); 0.05 leaves room "
             "below, 0.90 as cluster.fitting's bound")
_OTHER_SRC = ("element-wise ops, reductions and optimizer updates are memory-bound; their compute term is kept "
              "between 0.05 and 1.0 of peak so that it never dominates by itself (cluster.fitting)")
_GPU_MEM_SRC = ("0.30 to 0.95 of the HBM3e datasheet bandwidth (4.8 TB/s): streaming kernels (BabelStream, NVIDIA "
                "bandwidthTest) reach about 90% on Hopper; 0.30 for kernels that do not stream")
_CPU_MEM_SRC = ("0.05 to 0.90 of the socket's DDR5 datasheet bandwidth: a 16-core slice streams 8-16 GB/s a core "
                "(Intel MLC on Sapphire/Emerald Rapids) and eager PyTorch element-wise ops allocate and fault in "
                "fresh pages; 0.05 for single-threaded kernels")
_HALF_GPU_SRC = ("size (FLOP) at which a GEMM or convolution reaches half its large-size efficiency: the problem must "
                 "fill 132 SMs x 2048 threads of an H200/H100 SXM; 1 MFLOP to 100 GFLOP (cuBLAS SGEMM on Hopper "
                 "saturates near n = 2048-4096, 2n^3 = 17-137 GFLOP)")
_HALF_CPU_SRC = ("size (FLOP) at which a CPU GEMM or convolution reaches half its large-size efficiency: oneDNN "
                 "blocks a problem over 16 cores x 2 AVX-512 FMA units; 0.1 MFLOP to 100 GFLOP")
_DEV_OVH_SRC = ("device-side gap between back-to-back kernels (launch latency on the GPU, 1-5 us on Hopper: "
                "NVIDIA Nsight Systems traces of CUDA-graph-free eager steps); 0.5 us to 100 us")
_DISPATCH_SRC = ("PyTorch eager per-op host time: cudaLaunchKernel costs 2-5 us of host time, the dispatcher, "
                 "autograd and the Python frame 5-20 us more (PyTorch Performance Tuning Guide, 'use CUDA "
                 "Graphs' for launch-bound models; profiler self-CPU of small ops here 7-15 us); 2 us to 50 us")
_CPU_OVH_SRC = ("PyTorch eager per-op host cost on the CPU: the dispatcher and autograd 5-20 us for a small op, up "
                "to about 1 ms where the autograd engine frees or zero-fills large host buffers (the profiled CPU "
                "steps' autograd::engine rows, cpuprof_*.json); 1 us to 2 ms")

_CPU_LAYOUT_SRC = ("the memory term of a CPU convolution or matrix product: oneDNN reorders NCHW tensors into blocked "
                   "layouts and back (oneDNN developer guide, 'Memory format propagation'), so each tensor crosses "
                   "memory two to three times, some reorders single-threaded: from one core's streaming rate "
                   "(about 7 GB/s, 0.02 of the socket's DDR5 bandwidth) to the socket's 0.90")
TORCH_GPU_PARAMS: tuple[FitParam, ...] = (
    FitParam("gpu", "dense_efficiency", 0.10, 0.90, 0.60, _EFF_SRC),
    FitParam("gpu", "conv_efficiency", 0.05, 0.90, 0.25, _CONV_SRC),
    FitParam("gpu", "other_efficiency", 0.05, 1.0, 0.30, _OTHER_SRC),
    FitParam("gpu", "memory_efficiency", 0.30, 0.95, 0.70, _GPU_MEM_SRC),
    FitParam("gpu", "half_efficiency_flops", 1e6, 1e11, 1e9, _HALF_GPU_SRC),
    FitParam("gpu", "op_overhead_s", 5e-7, 1e-4, 2e-6, _DEV_OVH_SRC),
    FitParam("gpu", "dispatch_s", 2e-6, 5e-5, 1e-5, _DISPATCH_SRC),
)
"""The GPU terms fitted from a PyTorch profile, each with its cited bound."""
TORCH_CPU_PARAMS: tuple[FitParam, ...] = (
    FitParam("cpu", "dense_efficiency", 0.10, 0.90, 0.50, _EFF_SRC),
    FitParam("cpu", "conv_efficiency", 0.05, 0.90, 0.30, _CONV_SRC),
    FitParam("cpu", "other_efficiency", 0.05, 1.0, 0.30, _OTHER_SRC),
    FitParam("cpu", "memory_efficiency", 0.05, 0.90, 0.30, _CPU_MEM_SRC),
    FitParam("cpu", "dense_memory_efficiency", 0.02, 0.90, 0.10, _CPU_LAYOUT_SRC),
    FitParam("cpu", "conv_memory_efficiency", 0.02, 0.90, 0.10, _CPU_LAYOUT_SRC),
    FitParam("cpu", "half_efficiency_flops", 1e5, 1e11, 1e8, _HALF_CPU_SRC),
    FitParam("cpu", "op_overhead_s", 1e-6, 2e-3, 2e-5, _CPU_OVH_SRC),
)
"""The CPU terms fitted from a PyTorch CPU profile, each with its cited bound."""
TORCH_TRANSFER_PARAMS: tuple[FitParam, ...] = (
    FitParam("transfer", "send_recv_overhead_s", 2e-6, 1e-3, 2e-5,
             "a cudaMemcpy's set-up and synchronization: 2-10 us pinned (NVIDIA bandwidthTest, small sizes), tens of "
             "us pageable (a staging copy through a pinned bounce buffer); 2 us to 1 ms"),
    FitParam("transfer", "bandwidth_efficiency", 0.075, 0.90, 0.3,
             "achieved fraction of PCIe 5.0 x16's 63 GB/s: pageable copies go through a CPU memcpy into a pinned "
             "staging buffer, at least about 5 GB/s (5/63 = 0.079, rounded down); pinned DMA at most about 57 GB/s "
             "(0.90, NVIDIA bandwidthTest on Gen5 hosts)"),
)
"""The host<->GPU copy terms, each with its cited bound (pageable into the spec, pinned into the record)."""
H2D_EFFICIENCY_PARAM = FitParam(
    "transfer", "host_to_device_efficiency", 0.075, 0.90, 0.3,
    "achieved fraction of PCIe 5.0 x16's 63 GB/s for a pageable copy to the GPU, apart from the other direction "
    "(a host memcpy into the pinned staging buffer, then DMA): at least about 5 GB/s (0.075), at most pinned "
    "DMA's 57 GB/s (0.90, NVIDIA bandwidthTest on Gen5 hosts), as bandwidth_efficiency's bound")
"""The pageable copy-to-GPU efficiency, fitted beside ``bandwidth_efficiency`` (the copies from the GPU)
where the profile has copies both ways ([`fit_copies`][cluster.torch_calibrate.fit_copies])."""
FRESH_PAGE_PARAM = FitParam(
    "transfer", "fresh_host_bytes_per_s", 5e8, 5e10, 2e9,
    "bytes a second at which the kernel faults in and zeroes fresh anonymous pages: a 4 KiB fault with its zeroing "
    "costs about 0.5-3 us (1.4-8 GB/s; Linux page-fault latency as measured by will-it-scale's page_fault "
    "tests), a 2 MiB transparent huge page is zeroed at up to a core's memory bandwidth (tens of GB/s); "
    "0.5 to 50 GB/s")
"""The fresh-page term of a copy into new host memory ([`fit_fresh_pages`][cluster.torch_calibrate.fit_fresh_pages])."""
ALL_PARAMS = TORCH_GPU_PARAMS + TORCH_CPU_PARAMS + TORCH_TRANSFER_PARAMS + (H2D_EFFICIENCY_PARAM, FRESH_PAGE_PARAM)


# ----------------------------------------------------------------------------------------------- input


@dataclass
class Profile:
    """The measurements of one machine (module docstring): raw rows as read."""

    root: Path
    steps: dict
    gpu_rows: dict[str, list[dict]]
    cpu_rows: dict[str, list[dict]]
    cpu_wall_s: dict[str, float]
    copies: list[dict]
    env: dict

    def eager_step(self, model: str, device: str, foreach: bool = False) -> dict | None:
        """The ``steps.json`` eager row of ``model`` on ``device`` (``cuda``/``cpu``), or ``None``."""
        for r in self.steps.get("eager", []):
            if r["model"] == model and r["device"] == device and bool(r.get("foreach")) == foreach:
                return r
        return None


def _read_json(path: Path, max_bytes: int = 20_000_000):
    if path.stat().st_size > max_bytes:
        raise ValueError(f"{path}: larger than {max_bytes:,} bytes")
    return json.loads(path.read_text())


def load_profile(profile_dir: str | Path, copies_from: str | Path | None = None) -> Profile:
    """Read the shared files of ``profile_dir`` (missing model files are skipped); the copies from the
    ``copies.json``-format file ``copies_from`` instead of the folder's, where given (a later
    measurement of the same machine's copies).

    Raises:
        ValueError: the folder or its ``steps.json`` is missing, ``copies_from`` is missing, or a file is not
            the format.
    """
    root = Path(profile_dir)
    if not (root / "steps.json").is_file():
        raise ValueError(f"{root}: no steps.json (a profile folder holds steps.json, prof_<model>_shapes.json, "
                         "cpuprof_<model>.json, copies.json, env.json)")
    try:
        steps = _read_json(root / "steps.json")
        gpu, cpu, wall = {}, {}, {}
        for m in PROFILE_MODELS:
            if (root / f"prof_{m}_shapes.json").is_file():
                gpu[m] = list(_read_json(root / f"prof_{m}_shapes.json"))
            if (root / f"cpuprof_{m}.json").is_file():
                d = _read_json(root / f"cpuprof_{m}.json")
                cpu[m], wall[m] = list(d["rows"]), float(d["wall_s"])
        if copies_from is not None:
            if not Path(copies_from).is_file():
                raise ValueError(f"copies_from {str(copies_from)!r}: no such file (a copies.json of the profile format)")
            copies = list(_read_json(Path(copies_from)))
            if any(not {"bytes", "pinned", "dir", "median_s"} <= set(c) for c in copies):
                raise ValueError(f"copies_from {str(copies_from)!r}: rows need bytes, pinned, dir and median_s")
        else:
            copies = list(_read_json(root / "copies.json")) if (root / "copies.json").is_file() else []
        env = dict(_read_json(root / "env.json")) if (root / "env.json").is_file() else {}
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{root}: not the shared profile format ({type(exc).__name__}: {exc})") from None
    return Profile(root, steps, gpu, cpu, wall, copies, env)


# ------------------------------------------------------------------------------------------- capture


@dataclass
class Captured:
    """A benchmark's captured step: the graph, its features and each op's input-shape key."""

    graph: OpGraph
    flops: np.ndarray
    nbytes: np.ndarray
    cls: np.ndarray
    prec: np.ndarray
    shape_keys: list[tuple | None]


def _shape_key(shapes: list) -> tuple:
    """The first three tensor shapes of an op's inputs (non-empty shapes only): its matching key."""
    out = []
    for s in shapes[:3]:
        if isinstance(s, (list, tuple)) and s and all(isinstance(x, int) for x in s):
            out.append(tuple(s))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def captured(model: str) -> Captured:
    """Capture ``model``'s step ([`PROFILE_MODELS`][cluster.torch_calibrate.PROFILE_MODELS]) with the project's front end; cached per process."""
    import torch

    from compgraph.models import BENCHMARKS
    from compgraph.torch_models import capture_benchmark

    bench, size = PROFILE_MODELS[model]
    step = capture_benchmark(bench, BENCHMARKS[bench].sizes[size])
    graph = step.graph
    index = {op.name: i for i, op in enumerate(graph.ops)}
    keys: list[tuple | None] = [None] * graph.num_ops
    for n in step.gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = step.holder.get(n.name)
        if name is None or name.rsplit("/", 1)[-1] != n.name:
            continue  # a folded view or tuple element
        shapes = []
        for a in n.args:
            val = a.meta.get("val") if hasattr(a, "meta") else None
            shapes.append(list(val.shape) if isinstance(val, torch.Tensor) else [])
        keys[index[name]] = _shape_key(shapes)
    flops, nbytes, cls = op_features(graph)
    return Captured(graph, flops, nbytes, cls, op_precisions(graph), keys)


# ------------------------------------------------------------------------------------------ matching


@dataclass
class Group:
    """Captured ops matched to profile rows: ``ops`` (indices), ``measured_s`` (their measured seconds)."""

    name: str
    shapes: tuple | None
    ops: list[int]
    measured_s: float
    calls: int


@dataclass
class Matching:
    """[`match_groups`][cluster.torch_calibrate.match_groups]'s result: the groups, and the measured time left out (seconds, by name)."""

    groups: list[Group]
    unmatched_s: dict[str, float] = field(default_factory=dict)

    @property
    def matched_s(self) -> float:
        return sum(g.measured_s for g in self.groups)


def match_groups(cap: Captured, rows: list[dict], kind: str) -> Matching:
    """Match ``cap``'s ops to profile ``rows`` on device ``kind`` (module docstring: by ATen name and
    input shapes, else by name when the call counts agree)."""
    leaf = GPU_LEAF if kind == "gpu" else CPU_LEAF
    time_key = "self_device_us" if kind == "gpu" else "self_cpu_us"
    by_name_ops: dict[str, list[int]] = {}
    for i, op in enumerate(cap.graph.ops):
        if op.type.startswith("aten.") and (cap.flops[i] > 0 or cap.nbytes[i] > 0):
            by_name_ops.setdefault(leaf.get(op.type, op.type.replace("aten.", "aten::", 1)), []).append(i)
    by_name_rows: dict[str, list[dict]] = {}
    for r in rows:
        if r["name"].startswith("aten::") and float(r[time_key]) > 0:
            by_name_rows.setdefault(r["name"], []).append(r)
    groups, unmatched = [], {}
    for name, rs in by_name_rows.items():
        ops = by_name_ops.get(name, [])
        total = sum(float(r[time_key]) for r in rs) * 1e-6
        calls = sum(int(r["count"]) for r in rs)
        if not ops:
            unmatched[name] = total
            continue
        ops_by_key: dict[tuple, list[int]] = {}
        for i in ops:
            ops_by_key.setdefault(cap.shape_keys[i] or (), []).append(i)
        rows_by_key: dict[tuple, list[dict]] = {}
        for r in rs:
            try:
                key = _shape_key(json.loads(r["shapes"]))
            except (ValueError, TypeError):
                key = ("?",)
            rows_by_key.setdefault(key, []).append(r)
        counts = {k: sum(int(r["count"]) for r in v) for k, v in rows_by_key.items()}
        if counts == {k: len(v) for k, v in ops_by_key.items()}:
            for k, v in rows_by_key.items():
                groups.append(Group(name, k, ops_by_key[k], sum(float(r[time_key]) for r in v) * 1e-6, counts[k]))
        elif calls == len(ops):
            groups.append(Group(name, None, ops, total, calls))
        else:
            unmatched[name] = total
    return Matching(groups, unmatched)


# ------------------------------------------------------------------------------------------- the fit


def _one_device_spec(base: ClusterSpec, kind: str) -> ClusterSpec:
    """``base`` reduced to its first device of ``kind`` (the fit prices ops on it alone)."""
    dev = next(d for d in base.devices if d.kind == kind)
    return ClusterSpec(name=f"{base.name}-{kind}", devices=[dev], compute_memory_overlap=base.compute_memory_overlap)


def _with(spec: ClusterSpec, values: dict[str, float]) -> ClusterSpec:
    """``spec`` with ``values`` (keys ``kind.field``) set on every device of that kind or on ``transfer``."""
    data = spec.model_dump()
    for key, v in values.items():
        kind, name = key.split(".", 1)
        if kind == "transfer":
            data["transfer"][name] = float(v)
        elif kind == "allocator":
            for dev in data["devices"]:
                if dev["kind"] == name:
                    dev["allocator_overhead"] = float(v)
        else:
            for dev in data["devices"]:
                if dev["kind"] == kind:
                    dev[name] = float(v)
    return ClusterSpec.model_validate(data)


def kernel_and_step_times(cap: Captured, spec1: ClusterSpec) -> tuple[np.ndarray, float]:
    """``(per-op kernel seconds without host dispatch, the one-device step in seconds with it)`` of
    ``cap`` on ``spec1`` (one device: the step is the sum of its op times, every op serial on it)."""
    with_dispatch = op_times_from_features(cap.flops, cap.nbytes, cap.cls, spec1, cap.prec)[:, 0]
    dev = spec1.devices[0]
    if dev.dispatch_s > 0:
        kern = op_times_from_features(cap.flops, cap.nbytes, cap.cls,
                                      spec1.model_copy(update={"devices": [dev.model_copy(update={"dispatch_s": 0.0})]}),
                                      cap.prec)[:, 0]
    else:
        kern = with_dispatch
    return kern, float(with_dispatch.sum())


def fit_device(kind: str, base: ClusterSpec, targets: list[tuple[Captured, Matching, float]],
               params: tuple[FitParam, ...] | None = None, prior_weight: float = PRIOR_WEIGHT,
               step_weight: float = STEP_WEIGHT, max_nfev: int = 400) -> dict:
    """Fit ``params`` (default [`TORCH_GPU_PARAMS`][cluster.torch_calibrate.TORCH_GPU_PARAMS] / [`TORCH_CPU_PARAMS`][cluster.torch_calibrate.TORCH_CPU_PARAMS]) of device ``kind``
    inside their bounds to ``targets``: ``(captured step, its matching, measured step seconds)``.

    Returns:
        ``{"values" (key -> value, rounded, inside the bounds), "on_bound", "groups" (rows: name, shapes,
        calls, measured_s, predicted_s), "steps" (measured_s, simulated_s), "rms_log_ratio", "nfev"}``.
    """
    from scipy.optimize import least_squares

    params = params or (TORCH_GPU_PARAMS if kind == "gpu" else TORCH_CPU_PARAMS)
    spec1 = _one_device_spec(base, kind)
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    refs = np.log([p.ref for p in params])
    total = sum(m.matched_s for _, m, _ in targets) or 1.0

    def spec_of(x) -> ClusterSpec:
        return _with(spec1, {p.key: math.exp(v) for p, v in zip(params, x)})

    def residuals(x):
        s = spec_of(x)
        out = []
        for cap, match, step in targets:
            kern, sim = kernel_and_step_times(cap, s)
            for g in match.groups:
                pred = float(kern[g.ops].sum())
                out.append(math.sqrt(g.measured_s / total) * math.log(max(pred, 1e-12) / g.measured_s))
            out.append(step_weight * math.log(sim / step))
        return np.array(out + list(prior_weight * (np.asarray(x) - refs)))

    x0 = np.clip(refs, lo + 1e-9, hi - 1e-9)
    sol = least_squares(residuals, x0, bounds=(lo, hi), max_nfev=max_nfev, diff_step=1e-3)
    values = rounded({p.key: float(math.exp(min(max(v, a), b))) for p, v, a, b in zip(params, sol.x, lo, hi)}, params)
    check_bounds(values, params)
    s = _with(spec1, values)
    groups, steps, ratios = [], [], []
    for cap, match, step in targets:
        kern, sim = kernel_and_step_times(cap, s)
        for g in match.groups:
            groups.append({"model": cap.graph.name, "name": g.name, "shapes": g.shapes, "calls": g.calls,
                           "measured_s": g.measured_s, "predicted_s": float(kern[g.ops].sum())})
        steps.append({"model": cap.graph.name, "measured_s": step, "simulated_s": sim})
        ratios.append(math.log(sim / step))
    return {"values": values, "on_bound": on_bound(values, params), "groups": groups, "steps": steps,
            "rms_log_ratio": float(np.sqrt(np.mean(np.square(ratios)))) if ratios else 0.0, "nfev": int(sol.nfev),
            "unmatched_s": {cap.graph.name: m.unmatched_s for cap, m, _ in targets}}


PLACED_STEP_COPIES = ("to_cuda_new", "to_cpu_new")
"""The ``copies.json`` rows of the copies a placed PyTorch step makes (``aten._to_copy`` to the other device,
allocating its result): pageable host memory to a new GPU tensor, and a GPU tensor to new pageable host memory."""


def _copy_rows(copies: list[dict], pinned: bool) -> list[dict]:
    """The rows [`fit_copies`][cluster.torch_calibrate.fit_copies] fits: pageable, the placed step's
    ([`PLACED_STEP_COPIES`][cluster.torch_calibrate.PLACED_STEP_COPIES]) where the profile has ``to_cpu_new`` rows, else every direction."""
    dirs: tuple[str, ...] = ("h2d", "d2h", "to_cuda_new")
    if not pinned and any(c["dir"] == "to_cpu_new" and not c["pinned"] for c in copies):
        dirs = PLACED_STEP_COPIES
    return [c for c in copies if bool(c["pinned"]) == pinned and c["dir"] in dirs]


FRESH_THRESHOLD_BYTES = 32 * 2**20
"""glibc's largest dynamic mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``, mallopt(3)): every
allocation from this size up is a new ``mmap``, whose pages the kernel faults in and zeroes on first touch."""


def fit_fresh_pages(copies: list[dict], threshold: int = FRESH_THRESHOLD_BYTES) -> dict | None:
    """The fresh-page rate from a profile's copies: for each pageable size of at least ``threshold`` bytes
    measured both into new host memory (``to_cpu_new``) and into a reused buffer (``d2h``), the rate
    ``bytes / (t_new - t_reused)``; their median, clipped to [`FRESH_PAGE_PARAM`][cluster.torch_calibrate.FRESH_PAGE_PARAM]'s
    bound. A copy of 256 MiB to new host memory took 0.179 s against 0.021 s into a reused buffer on a lent
    H200 (1.70 GB/s for the pages), 0.176 s against 0.018 s on a lent H100 (``benchmarks/results/``).

    Returns:
        ``{"values": {"transfer.fresh_host_bytes_per_s"}, "on_bound", "rows": [{bytes, new_s, reused_s,
        rate}]}``, or ``None`` when the profile has no such pair (older profiles) or the new copy was not
        slower.
    """
    new = {c["bytes"]: c["median_s"] for c in copies if c["dir"] == "to_cpu_new" and not c["pinned"]}
    reused = {c["bytes"]: c["median_s"] for c in copies if c["dir"] == "d2h" and not c["pinned"]}
    rows = [{"bytes": b, "new_s": new[b], "reused_s": reused[b], "rate": b / (new[b] - reused[b])}
            for b in sorted(new) if b >= threshold and b in reused and new[b] > reused[b]]
    if not rows:
        return None
    p = FRESH_PAGE_PARAM
    rate = float(np.median([r["rate"] for r in rows]))
    values = rounded({p.key: rate}, (p,))  # rounded keeps it inside the bound
    check_bounds(values, (p,))
    return {"values": values, "on_bound": on_bound(values, (p,)), "rows": rows}


TO_GPU_COPIES = ("h2d", "to_cuda_new")
"""The copy directions from the host to the GPU (a profile's ``dir``)."""


def fresh_page_s(copy: dict, rate: float | None, threshold: int = FRESH_THRESHOLD_BYTES) -> float:
    """Seconds a profile's copy row pays for fresh host pages as the eager model prices them
    ([`cluster.eager.fresh_page_matrix`][cluster.eager.fresh_page_matrix]): ``bytes / rate`` for a copy to new host
    memory (``to_cpu_new``) of at least ``threshold`` bytes, else 0 (and 0 without a ``rate``)."""
    paid = rate and copy["dir"] == "to_cpu_new" and copy["bytes"] >= threshold
    return copy["bytes"] / rate if paid else 0.0


def fit_copies(copies: list[dict], link_bandwidth: float, link_latency_s: float, pinned: bool,
               params: tuple[FitParam, ...] = TORCH_TRANSFER_PARAMS, fresh_bytes_per_s: float | None = None,
               fresh_threshold: int = FRESH_THRESHOLD_BYTES, per_direction: bool = False,
               time_weighted: bool = False) -> dict:
    """Fit ``overhead + b / (eff * link_bandwidth)`` (plus the link's ``latency_s``) to the copies of one
    kind (``pinned`` or pageable; of the pageable ones the placed step's where the profile has ``to_cpu_new``
    rows, [`PLACED_STEP_COPIES`][cluster.torch_calibrate.PLACED_STEP_COPIES]) in log space, inside
    [`TORCH_TRANSFER_PARAMS`][cluster.torch_calibrate.TORCH_TRANSFER_PARAMS]' bounds. With ``fresh_bytes_per_s``
    ([`fit_fresh_pages`][cluster.torch_calibrate.fit_fresh_pages]) a ``to_cpu_new`` copy of at least ``fresh_threshold``
    bytes is predicted with ``bytes / fresh_bytes_per_s`` on top, as the eager model prices it.

    With ``per_direction`` and copies both ways, the copies to the GPU
    ([`TO_GPU_COPIES`][cluster.torch_calibrate.TO_GPU_COPIES]) get their own efficiency,
    [`H2D_EFFICIENCY_PARAM`][cluster.torch_calibrate.H2D_EFFICIENCY_PARAM] (``transfer.host_to_device_efficiency``),
    and ``transfer.bandwidth_efficiency`` is fitted on the copies from the GPU; one overhead for both.

    With ``time_weighted`` each copy's squared log error is weighted by its measured seconds (over the
    rows' mean), about the squared error in seconds over the seconds: the loss a step's total copy time
    sees. One bandwidth cannot fit both a copy of 1-16 MiB and one of 256 MiB (to the GPU 8.1-9.3 GB/s
    against 6.9 GB/s on the lent H200), and a placed step's copies are its activations, 25-400 MB for
    GPT-2 and ResNet-50, so the large copies should decide it; with equal weights the 4 KiB to 16 MiB rows
    (8 of 10) do.

    Returns:
        ``{"values": {"transfer.send_recv_overhead_s", "transfer.bandwidth_efficiency"[,
        "transfer.host_to_device_efficiency"]}, "on_bound", "rows": [{bytes, dir, measured_s, predicted_s}]}``.
    """
    from scipy.optimize import least_squares

    rows = _copy_rows(copies, pinned)
    to_gpu = [c["dir"] in TO_GPU_COPIES for c in rows]
    if per_direction and any(to_gpu) and not all(to_gpu):
        params = (*params, H2D_EFFICIENCY_PARAM)
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    refs = np.log([p.ref for p in params])

    def pred(x, c):
        eff = x[2] if len(x) > 2 and c["dir"] in TO_GPU_COPIES else x[1]
        fresh = fresh_page_s(c, fresh_bytes_per_s, fresh_threshold)
        return math.exp(x[0]) + link_latency_s + c["bytes"] / (math.exp(eff) * link_bandwidth) + fresh

    mean_s = float(np.mean([c["median_s"] for c in rows])) if rows else 1.0
    weights = [math.sqrt(c["median_s"] / mean_s) if time_weighted else 1.0 for c in rows]

    def residuals(x):
        r = [w * math.log(pred(x, c) / c["median_s"]) for w, c in zip(weights, rows)]
        return np.array(r + list(PRIOR_WEIGHT * (np.asarray(x) - refs)))

    if rows:
        sol = least_squares(residuals, np.clip(refs, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), diff_step=1e-3)
        x = sol.x
    else:
        x = refs
    values = rounded({p.key: float(math.exp(min(max(v, a), b))) for p, v, a, b in zip(params, x, lo, hi)}, params)
    check_bounds(values, params)
    xr = np.log([values[p.key] for p in params])
    return {"values": values, "on_bound": on_bound(values, params),
            "rows": [{"bytes": c["bytes"], "dir": c["dir"], "pinned": pinned, "measured_s": c["median_s"],
                      "predicted_s": pred(xr, c)} for c in rows]}


def simulate_single(cap: Captured, spec: ClusterSpec, kind: str) -> tuple[float, int]:
    """``(step seconds, peak bytes)`` of ``cap``'s step with every op on the first device of ``kind``
    (the reference simulator, [`cluster.simulator.Simulator`][cluster.simulator.Simulator])."""
    from cluster.simulator import Simulator

    dev = next(i for i, d in enumerate(spec.devices) if d.kind == kind)
    res = Simulator(cap.graph, spec).run(np.full(cap.graph.num_ops, dev, dtype=np.int64))
    return float(res.step_time_s), int(res.peak_memory_bytes[dev])


def fit_from_profile(profile_dir: str | Path, base_spec: ClusterSpec, holdout: str | None = None,
                     models: tuple[str, ...] | None = None,
                     copies_from: str | Path | None = None) -> tuple[ClusterSpec, dict]:
    """Fit ``base_spec``'s cost-model terms to the PyTorch profiles in ``profile_dir`` (module docstring).

    Args:
        profile_dir: the shared folder ([`load_profile`][cluster.torch_calibrate.load_profile]).
        base_spec: datasheet figures (peaks, bandwidths, capacities, links); its CPU and GPU terms in
            [`ALL_PARAMS`][cluster.torch_calibrate.ALL_PARAMS] are replaced by the fit. A spec without a GPU fits the CPU only.
        holdout: a model of [`PROFILE_MODELS`][cluster.torch_calibrate.PROFILE_MODELS] left out of the fit (judged in the report), or ``None``.
        models: the models to use (default: every model with files in ``profile_dir``).
        copies_from: a ``copies.json``-format file to fit the copies on instead of the folder's
            ([`load_profile`][cluster.torch_calibrate.load_profile]).
    Returns:
        ``(spec, report)``: the fitted spec (its ``fit`` records the fit) and ``{"gpu", "cpu", "pageable",
        "pinned", "memory", "fit_models", "holdout", "values"}``.
    Raises:
        ValueError: an unknown ``holdout`` or model, or no model left to fit on.
    """
    prof = load_profile(profile_dir, copies_from)
    models = tuple(models or [m for m in PROFILE_MODELS if m in prof.gpu_rows or m in prof.cpu_rows])
    for m in (*models, *([holdout] if holdout else [])):
        if m not in PROFILE_MODELS:
            raise ValueError(f"unknown profile model {m!r}; valid: {', '.join(PROFILE_MODELS)}")
    fit_models = [m for m in models if m != holdout]
    if not fit_models:
        raise ValueError(f"no model left to fit on (models {list(models)}, holdout {holdout!r})")
    kinds = {d.kind for d in base_spec.devices}
    values: dict[str, float] = {}
    report: dict = {"fit_models": fit_models, "holdout": holdout}
    if "gpu" in kinds:
        targets = []
        for m in fit_models:
            row = prof.eager_step(m, "cuda")
            if m in prof.gpu_rows and row:
                cap = captured(m)
                targets.append((cap, match_groups(cap, prof.gpu_rows[m], "gpu"), float(row["median_s"])))
        if targets:
            report["gpu"] = fit_device("gpu", base_spec, targets)
            values.update(report["gpu"]["values"])
    if "cpu" in kinds:
        targets = []
        for m in fit_models:
            row = prof.eager_step(m, "cpu")
            step = float(row["median_s"]) if row else prof.cpu_wall_s.get(m)
            if m in prof.cpu_rows and step:
                cap = captured(m)
                targets.append((cap, match_groups(cap, prof.cpu_rows[m], "cpu"), step))
        if targets:
            report["cpu"] = fit_device("cpu", base_spec, targets)
            values.update(report["cpu"]["values"])
    if "gpu" in kinds and "cpu" in kinds and prof.copies:
        c, g = base_spec.cpu_indices[0], base_spec.gpu_indices[0]
        raw = base_spec.raw_link(c, g)
        fresh = fit_fresh_pages(prof.copies)
        rate = fresh["values"][FRESH_PAGE_PARAM.key] if fresh else None
        report["pageable"] = fit_copies(prof.copies, raw.bandwidth, raw.latency_s, pinned=False, fresh_bytes_per_s=rate,
                                        per_direction=True, time_weighted=True)
        report["pinned"] = fit_copies(prof.copies, raw.bandwidth, raw.latency_s, pinned=True)
        values.update(report["pageable"]["values"])
        if fresh:
            report["fresh_pages"] = fresh
            values.update(fresh["values"])
    spec = _with(base_spec, values)
    # memory: the measured peak over the simulated one (fit models), inside ALLOCATOR_BOUND
    ratios, mem_rows = [], []
    if "gpu" in kinds:
        for m in fit_models:
            row = prof.eager_step(m, "cuda")
            if row and row.get("peak_bytes"):
                _, peak = simulate_single(captured(m), spec, "gpu")
                ratios.append(row["peak_bytes"] / peak)
                mem_rows.append({"model": m, "measured_bytes": row["peak_bytes"], "simulated_bytes": peak})
        alloc = min(max(max(ratios, default=1.0), ALLOCATOR_BOUND[0]), ALLOCATOR_BOUND[1])
        alloc = float(f"{alloc:.4g}")
        spec = _with(spec, {"allocator.gpu": alloc})
        report["memory"] = {"allocator_overhead": alloc, "rows": mem_rows}
    report["values"] = values
    record = {"script": "cluster/torch_calibrate.py fit_from_profile", "profile_dir": str(prof.root),
              "fit_models": fit_models, "holdout": holdout, "values": values,
              "on_bound": {**report.get("gpu", {}).get("on_bound", {}), **report.get("cpu", {}).get("on_bound", {}),
                           **report.get("pageable", {}).get("on_bound", {}),
                           **report.get("fresh_pages", {}).get("on_bound", {})},
              "params": [{"key": p.key, "lower": p.lo, "upper": p.hi, "ref": p.ref, "source": p.source}
                         for p in ALL_PARAMS]}
    if copies_from is not None:
        record["copies_from"] = str(copies_from)
    if "pinned" in report:
        record["pinned"] = report["pinned"]["values"]
    if "memory" in report:
        record["allocator_overhead"] = report["memory"]["allocator_overhead"]
    spec = spec.model_copy(update={"fit": record})
    return spec, report


# --------------------------------------------------------------------------------------- fidelity


def fidelity_rows(profile_dir: str | Path, spec: ClusterSpec, fit_models: tuple[str, ...] | list[str],
                  copies: bool = True, copies_from: str | Path | None = None) -> list[dict]:
    """Every figure of the shared set simulated on ``spec`` beside the measurement: each model's eager
    single-GPU step (``foreach=False``; the ``foreach=True`` figure beside it, which the capture's
    single-tensor update does not model), its CPU step, GPU peak memory, and the copies (pageable from
    ``spec.transfer``, pinned from ``spec.fit["pinned"]`` when present). ``set`` is ``fit`` for a
    model in ``fit_models`` and a copy the fit uses ([`PLACED_STEP_COPIES`][cluster.torch_calibrate.PLACED_STEP_COPIES] where
    present), else ``held-out``. ``copies_from``: as [`load_profile`][cluster.torch_calibrate.load_profile]'s."""
    prof = load_profile(profile_dir, copies_from)
    out: list[dict] = []
    for m in PROFILE_MODELS:
        which = "fit" if m in fit_models else "held-out"
        cap = None
        for device, kind in (("cuda", "gpu"), ("cpu", "cpu")):
            row = prof.eager_step(m, device)
            measured = float(row["median_s"]) if row else prof.cpu_wall_s.get(m) if kind == "cpu" else None
            if measured is None or not any(d.kind == kind for d in spec.devices):
                continue
            cap = cap or captured(m)
            sim, peak = simulate_single(cap, spec, kind)
            what = "eager step, median" if row else "profiled step (cpuprof wall_s)"
            out.append({"figure": f"{m} step on {kind} ({what})", "set": which, "unit": "s",
                        "simulated": sim, "measured": measured})
            fe = prof.eager_step(m, device, foreach=True)
            if fe:
                out.append({"figure": f"{m} step on {kind}, foreach=True (not modelled: single-tensor update)",
                            "set": which, "unit": "s", "simulated": sim, "measured": float(fe["median_s"])})
            if row and row.get("peak_bytes"):
                dev = next(d for d in spec.devices if d.kind == kind)
                out.append({"figure": f"{m} peak memory on {kind} (x allocator_overhead {dev.allocator_overhead:g})",
                            "set": which, "unit": "GB", "simulated": peak * dev.allocator_overhead / 1e9,
                            "measured": row["peak_bytes"] / 1e9})
    if copies and prof.copies and spec.cpu_indices and spec.gpu_indices:
        to_gpu_link = spec.link(spec.cpu_indices[0], spec.gpu_indices[0])
        from_gpu_link = spec.link(spec.gpu_indices[0], spec.cpu_indices[0])
        raw = spec.raw_link(spec.cpu_indices[0], spec.gpu_indices[0])
        pinned = (spec.fit or {}).get("pinned")
        fitted = {id(c) for c in _copy_rows(prof.copies, False) + _copy_rows(prof.copies, True)}
        for c in prof.copies:
            if c["dir"] not in ("h2d", "d2h", "to_cuda_new", "to_cpu_new"):
                continue
            if c["pinned"] and pinned:
                sim = (pinned["transfer.send_recv_overhead_s"] + raw.latency_s
                       + c["bytes"] / (pinned["transfer.bandwidth_efficiency"] * raw.bandwidth))
            elif c["pinned"]:
                continue
            else:
                link = to_gpu_link if c["dir"] in TO_GPU_COPIES else from_gpu_link
                sim = link.latency_s + c["bytes"] / link.bandwidth + fresh_page_s(
                    c, spec.transfer.fresh_host_bytes_per_s, spec.transfer.fresh_host_threshold_bytes)
            out.append({"figure": f"copy {c['dir']} {c['bytes']:,} B {'pinned' if c['pinned'] else 'pageable'}",
                        "set": "fit" if id(c) in fitted else "held-out", "unit": "us", "simulated": sim * 1e6,
                        "measured": c["median_s"] * 1e6})
    for r in out:
        r["ratio"] = r["simulated"] / r["measured"]
    return out


def format_table(rows: list[dict], title: str = "") -> str:
    """``rows`` ([`fidelity_rows`][cluster.torch_calibrate.fidelity_rows]) as a Markdown table."""
    lines = [f"**{title}**", ""] if title else []
    lines += ["| figure | set | simulated | measured | sim/meas |", "|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['figure']} | {r['set']} | {r['simulated']:.4g} {r['unit']} | {r['measured']:.4g} {r['unit']} "
                     f"| {r['ratio']:.3f} |")
    return "\n".join(lines)


def print_fidelity(profile_dir: str | Path, spec: ClusterSpec | None = None) -> None:
    """Print the fidelity table of ``spec`` (default: the shipped ``h200x1``, fit on both models), then
    of the two hold-out fits (fit on one model, judged on the other) from ``h200x1``'s datasheet figures."""
    from cluster.spec import load_cluster

    spec = spec or load_cluster("h200x1")
    fit_models = tuple((spec.fit or {}).get("fit_models", PROFILE_MODELS))
    copies_from = (spec.fit or {}).get("copies_from")
    if copies_from and not Path(copies_from).is_absolute():
        copies_from = _ROOT / copies_from
    if copies_from and not Path(copies_from).is_file():
        copies_from = None
    print(format_table(fidelity_rows(profile_dir, spec, fit_models, copies_from=copies_from),
                       f"{spec.name} (fit on {', '.join(fit_models)})"))
    for holdout in PROFILE_MODELS:
        fitted, rep = fit_from_profile(profile_dir, spec, holdout=holdout)
        print()
        print(format_table(fidelity_rows(profile_dir, fitted, rep["fit_models"], copies=False),
                           f"hold-out: fit on {', '.join(rep['fit_models'])}, {holdout} held out"))


# ------------------------------------------------------------------------------------------ presets

PROVENANCE_TERMS = ("dense_efficiency", "conv_efficiency", "other_efficiency", "memory_efficiency",
                    "dense_memory_efficiency", "conv_memory_efficiency",
                    "half_efficiency_flops", "op_overhead_s", "dispatch_s", "allocator_overhead")


def preset_yaml(spec: ClusterSpec, header: list[str]) -> str:
    """The YAML text of ``spec`` with ``header`` lines as comments (provenance) on top."""
    import yaml

    data = spec.model_dump(mode="json", exclude_defaults=False)
    for dev in data["devices"]:
        for k in ("tf_device", "compute_pool", "dense_memory_efficiency", "conv_memory_efficiency"):
            if dev.get(k) is None:
                dev.pop(k, None)
    text = yaml.safe_dump(data, sort_keys=False, width=120)
    return "".join(f"# {h}\n" if h else "#\n" for h in header) + text


def provenance_header(spec: ClusterSpec, report: dict, env: dict, profile_dir: str | Path) -> list[str]:
    """Comment lines for a fitted preset: machine, software, date, models, and which terms were fitted
    (with their values and bounds), which are datasheet figures and which are carried."""
    lines = [f"{spec.description or spec.name}.", "",
             f"CALIBRATED by cluster/torch_calibrate.py fit_from_profile from {profile_dir}:",
             f"- measured on: {env.get('gpu', '?')}; host {env.get('threads', '?')} threads; torch {env.get('torch', '?')}, "
             f"CUDA {env.get('cuda', '?')}; TF32 matmul {env.get('tf32_matmul')}, TF32 conv {env.get('tf32_conv')}.",
             f"- models fitted on: {', '.join(report['fit_models'])} (held out: {report['holdout'] or 'none'}); eager "
             "foreach=False steps (steps.json), torch.profiler rows by op and shape, copies.json.",
             "", "FITTED terms (bounded least squares, cluster/torch_calibrate.py TORCH_*_PARAMS give each bound's source):"]
    bounds = {p.key: p for p in ALL_PARAMS}
    for key, v in sorted(report["values"].items()):
        p = bounds.get(key)
        lines.append(f"- {key} = {v:.6g}" + (f" in [{p.lo:g}, {p.hi:g}]" if p else ""))
    if "pinned" in report:
        pv = report["pinned"]["values"]
        lines.append(f"- pinned copies (fit record only; the spec's transfer is pageable, as the exported step copies): "
                     f"overhead {pv['transfer.send_recv_overhead_s']:.3g} s, bandwidth_efficiency "
                     f"{pv['transfer.bandwidth_efficiency']:.3g}")
    if "memory" in report:
        lines.append(f"- gpu.allocator_overhead = {report['memory']['allocator_overhead']:g} (measured peak / simulated "
                     f"peak, in [{ALLOCATOR_BOUND[0]:g}, {ALLOCATOR_BOUND[1]:g}])")
    return lines


def calibrated_yaml(spec: ClusterSpec, report: dict, env: dict, profile_label: str,
                    extra: list[str] | None = None) -> str:
    """The YAML text of a fitted ``spec`` with its provenance ([`provenance_header`][cluster.torch_calibrate.provenance_header]) and the datasheet
    figures' sources, as ``placement calibrate --torch`` and [`write_single_gpu_presets`][cluster.torch_calibrate.write_single_gpu_presets] write it."""
    header = provenance_header(spec, report, env, profile_label)
    header += ["", "DATASHEET figures (peaks, bandwidths, capacities, the link; cluster/servers.py SERVER_CHIPS):"]
    header += [f"- {src}" for src in spec.sources]
    header += ["", "NAMED software terms (not fitted): software_flops_fraction 1 (oneDNN/MKL use AVX-512 FMA); "
               "tf32_matmul false, tf32_conv true (PyTorch's defaults, env.json); compute_memory_overlap false "
               "(compute + memory, as every preset)."]
    return preset_yaml(spec, header + (extra or []))


_ROOT = Path(__file__).resolve().parents[1]
H200_PLACED_COPIES = _ROOT / "benchmarks/results/h200-2026-11-27/profile/copies.json"
"""The copies h200x1's transfer terms are fitted on: ``python -m cluster.torch_profile`` on a lent H200 on
2026-11-27 (the shared set of 2026-11-26 has no copy to new host memory, ``to_cpu_new``)."""


def write_single_gpu_presets(profile_dir: str | Path, out_dir: str | Path | None = None,
                             profile_label: str = "shared/measurements/h200-2026-11-26",
                             copies_from: str | Path | None = H200_PLACED_COPIES) -> list[Path]:
    """Fit ``h200x1`` from ``profile_dir`` (both models; the copies from ``copies_from``, default
    [`H200_PLACED_COPIES`][cluster.torch_calibrate.H200_PLACED_COPIES], ``None``: the folder's) on its datasheet figures
    ([`cluster.servers.single_gpu_datasheet_spec`][cluster.servers.single_gpu_datasheet_spec]) and derive ``h100x1`` (the H100's datasheet
    figures, h200x1's chip-independent terms: "derived, unmeasured"); write both into ``out_dir``
    (default ``cluster/presets``). Returns the paths."""
    from cluster.servers import single_gpu_datasheet_spec
    from cluster.spec import PRESET_DIR

    out = Path(out_dir or PRESET_DIR)
    prof = load_profile(profile_dir)
    spec, report = fit_from_profile(profile_dir, single_gpu_datasheet_spec("h200x1"), copies_from=copies_from)
    copies_label = ""
    if copies_from is not None:
        cf = Path(copies_from).resolve()
        copies_label = str(cf.relative_to(_ROOT)) if cf.is_relative_to(_ROOT) else str(copies_from)
    spec = spec.model_copy(update={"fit": {**(spec.fit or {}), "profile_dir": profile_label,
                                           **({"copies_from": copies_label} if copies_label else {})}})
    rows = fidelity_rows(profile_dir, spec, report["fit_models"], copies_from=copies_from)
    table = [f"- {r['figure']}: simulated {r['simulated']:.4g} {r['unit']}, measured {r['measured']:.4g} {r['unit']} "
             f"({r['set']})" for r in rows if "copy" not in r["figure"]]
    paths = [out / "h200x1.yaml", out / "h100x1.yaml"]
    paths[0].write_text(calibrated_yaml(spec, report, prof.env, profile_label,
                                        ["", "FIDELITY on the calibration set (cluster/torch_calibrate.py fidelity_rows):",
                                         *table, "", "measured 2026-11-26 with the project at f20744c."]
                                        + ([f"COPIES: the pageable copy terms (transfer) are fitted on the copies a placed "
                                            f"step makes (to_cuda_new, to_cpu_new) in {copies_label}, the fresh pages of "
                                            "a copy to new host memory of 32 MiB and up priced apart "
                                            "(transfer.fresh_host_bytes_per_s, fit_fresh_pages): "
                                            "python -m cluster.torch_profile on a lent H200, 2026-11-27."]
                                           if copies_label else [])))
    h100 = single_gpu_datasheet_spec("h100x1")
    carried = {k: v for k, v in report["values"].items() if k.split(".")[0] in ("gpu", "cpu", "transfer")}
    carried["allocator.gpu"] = report.get("memory", {}).get("allocator_overhead", 1.0)
    derived = _with(h100, carried).model_copy(update={"fit": {"derived_from": "h200x1", "measured": False,
                                                              "values": report["values"]}})
    header = [f"{h100.description}.", "", "DERIVED: nothing here was fitted on an H100. Judged out of sample against "
              "gpu_truth runs on two lent H100s (benchmarks/results/h100-2026-11-26 and h100-2026-11-27; "
              "docs/measurement.md's fidelity table).",
              "- CARRIED from h200x1 (fitted on one H200, torch 2.11.0+cu130, 2026-11-26, GPT-2 small and ResNet-50; "
              "cluster/torch_calibrate.py; its copies on 2026-11-27): every efficiency, half_efficiency_flops, "
              "op_overhead_s, dispatch_s, allocator_overhead, and the pageable copy terms with the fresh-page rate "
              "(transfer); the CPU's "
              "efficiencies although the host "
              "differs (Sapphire Rapids here, Emerald Rapids there).",
              *[f"  - {k.replace('allocator.gpu', 'gpu.allocator_overhead')} = {v:.6g}" for k, v in sorted(carried.items())],
              "- DATASHEET: the H100 SXM5 80GB's peaks, HBM3 3.35 TB/s and 80 GB; the host's (lscpu on the lent H100: "
              "model 143, 16 vCPUs) peaks and DDR5-4800 bandwidth.",
              "", "Sources:", *[f"- {src}" for src in h100.sources]]
    paths[1].write_text(preset_yaml(derived, header))
    for p in paths:
        ClusterSpec.from_yaml(p)  # validates
    return paths


def main(argv: list[str] | None = None) -> None:
    """``python -m cluster.torch_calibrate [--write-presets] [PROFILE_DIR]``: print the fidelity tables
    (with ``--write-presets``: first rewrite ``h200x1`` and ``h100x1`` from the profiles)."""
    import sys

    args = sys.argv[1:] if argv is None else list(argv)
    write = "--write-presets" in args
    args = [a for a in args if a != "--write-presets"]
    root = Path(__file__).resolve().parents[1]
    default = root.parent / "shared" / "measurements" / "h200-2026-11-26"
    if not default.is_dir():
        default = root / "tests" / "data" / "h200-2026-11-26"
    if write:
        for p in write_single_gpu_presets(args[0] if args else default):
            print(p)
    print_fidelity(args[0] if args else default)


if __name__ == "__main__":
    main()
