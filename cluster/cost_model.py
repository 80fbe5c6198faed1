"""Per-op and per-transfer times "as TensorFlow executed them".

**Ops.** For op ``o`` (``f = flops(o)``, ``m = bytes_accessed(o)``, from
[`compgraph.costs`][compgraph.costs]) on device ``d``::

    compute(o, d) = f / (peak_flops(d) * software_flops_fraction(d) * eff(o, d))
    memory(o, d)  = m / (memory_bandwidth(d) * memory_efficiency(o, d))
    t(o, d) = op_overhead_s(d) + (max(compute, memory)   if spec.compute_memory_overlap
                                  else compute + memory)

where ``peak_flops(d)`` is the FP32 peak, or for a dense op or convolution the peak of the
device's matrix units in the op's precision when it has them (``tensor_peak_flops``: an op of
dtype ``bfloat16``/``float16``, or ``float32`` run as TF32 when ``tf32_matmul``/``tf32_conv``
says the framework does), and ``software_flops_fraction`` is a named software term (the share of the chip's peak the
software's kernels can issue, e.g. an SSE-only TensorFlow wheel on an AVX2-FMA CPU), and the
achieved compute efficiency depends on the op's class and size::

    eff(o, d) = dense_efficiency(d) * f / (f + half_efficiency_flops(d))   dense (MatMul, BatchMatMul*, aten.mm...)
              = conv_efficiency(d)  * f / (f + half_efficiency_flops(d))   conv (Conv2D*, aten.convolution*...)
              = other_efficiency(d)                                        every other op

The class is the front end's ([`op_class`][cluster.cost_model.op_class]: the op's ``op_class``, else its front end's
class of its type, [`compgraph.frontends.op_class`][compgraph.frontends.op_class]); this module reads no op type.

    memory_efficiency(o, d) = dense_memory_efficiency(d) or conv_memory_efficiency(d) for a dense
                              op or a convolution where the device gives one (a CPU's oneDNN
                              layout reorders, [`cluster.spec.Device`][cluster.spec.Device]), else memory_efficiency(d)

This is the structure of TensorFlow's own analytical cost model, grappler's
``OpLevelCostEstimator`` (``tensorflow/core/grappler/costs/op_level_cost_estimator.cc``):
per op a compute time (FLOPs over the device's GFLOP/s) and a memory time (bytes over its
GB/s), summed by default (``compute_memory_overlap_ = false``), with per-op-type FLOP
counts; grappler rates a CPU at ``num_cores * frequency`` (one FLOP per core-cycle, 32x
below a Haswell's AVX2-FMA peak) and a GPU at its peak. Here the achieved fractions of
peak are parameters of the cluster spec (fitted to measured step times,
[`cluster.reproduce`][cluster.reproduce]), with a size term for dense ops (small matrix products and
convolutions do not fill a GPU; a saturating curve, half efficiency at
``half_efficiency_flops``) and a per-op executor overhead per device kind (kernel launch
and TensorFlow's executor dispatch, which dominate small ops). With every efficiency 1,
``half_efficiency_flops`` 0 and ``compute_memory_overlap`` true (the defaults) this is the
plain roofline (Williams et al., "Roofline", CACM 2009) plus overhead.

**Host dispatch.** A device with ``dispatch_s > 0`` ([`cluster.spec.Device`][cluster.spec.Device]; PyTorch eager's
per-op host dispatch and kernel launch) gives every op that does work (``f > 0`` or ``m > 0``)
``max(t(o, d), dispatch_s(d))``: the host issues the next op while the device runs this one, so a
step of small ops is bounded below by its dispatches (launch-bound), one of large ops by its
kernels. Per op, this is an upper bound of a host queue running ahead of the device. With the
default ``dispatch_s = 0`` it changes nothing.

**Transfers.** A transfer of ``b`` bytes over an effective link takes
``latency_s + b / bandwidth`` seconds ([`transfer_time`][cluster.cost_model.transfer_time]); [`effective_link`][cluster.spec.effective_link]
folds TensorFlow's Send/Recv overhead, the achieved link bandwidth and, for GPUs without
peer access, staging through host memory into the link's figures
([`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]). [`cluster.spec.ClusterSpec.link`][cluster.spec.ClusterSpec.link] returns it, so
both simulators use it unchanged.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from cluster.spec import ClusterSpec, effective_link  # noqa: F401 (effective_link: its home is cluster.spec)
from compgraph.ir import OpGraph

CLASSES = ("dense", "conv", "other")
"""The compute classes, by index: ``dense_efficiency``, ``conv_efficiency``, the peak."""


@lru_cache(maxsize=None)
def _type_class(op_type: str) -> int:
    from compgraph.frontends import op_class as frontend_class

    return CLASSES.index(frontend_class(op_type))


def op_class(op) -> int:
    """0 for a dense matrix product, 1 for a convolution, 2 for any other op: the op's ``op_class``
    when its importer set one, else its front end's class of its type
    ([`compgraph.frontends.op_class`][compgraph.frontends.op_class]); a type string is classed the same way.

    Raises:
        ValueError: an ``op_class`` other than ``dense``, ``conv``, ``other`` (names the op and the value).
    """
    if isinstance(op, str):
        return _type_class(op)
    if op.op_class:
        if op.op_class not in CLASSES:
            raise ValueError(f"op {op.name!r}: op_class {op.op_class!r}; valid: {', '.join(CLASSES)}")
        return CLASSES.index(op.op_class)
    return _type_class(op.type)


def op_features(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(flops [num_ops] FLOP, bytes_accessed [num_ops] bytes, op_class [num_ops] int)`` of a graph."""
    flops = np.array([op.flops for op in graph.ops], dtype=np.float64)
    nbytes = np.array([op.bytes_accessed for op in graph.ops], dtype=np.float64)
    cls = np.array([op_class(op) for op in graph.ops], dtype=np.int64)
    return flops, nbytes, cls


#: Op precisions told apart by the matrix units' peaks ([`op_precisions`][cluster.cost_model.op_precisions]); anything else is FP32.
PRECISIONS = ("float32", "bfloat16", "float16")


def op_precisions(graph: OpGraph) -> np.ndarray:
    """``[num_ops]`` int: each op's index in [`PRECISIONS`][cluster.cost_model.PRECISIONS] (0, FP32, for any other dtype)."""
    index = {p: i for i, p in enumerate(PRECISIONS)}
    return np.array([index.get(op.dtype, 0) for op in graph.ops], dtype=np.int64)


def dense_peaks(dev) -> np.ndarray:
    """``[3 op classes, 3 precisions]`` peak FLOP/s of ``dev`` (a [`cluster.spec.Device`][cluster.spec.Device]): the
    matrix units' ``tensor_peak_flops`` for dense ops and convolutions where the device has them
    (FP32 as TF32 where ``tf32_matmul``/``tf32_conv``), else ``peak_flops``."""
    t = dev.tensor_peak_flops
    out = np.full((3, len(PRECISIONS)), dev.peak_flops, dtype=np.float64)
    for cls, tf32 in ((0, dev.tf32_matmul), (1, dev.tf32_conv)):
        if tf32 and "tf32" in t:
            out[cls, 0] = t["tf32"]
        for i, p in enumerate(PRECISIONS[1:], start=1):
            if p in t:
                out[cls, i] = t[p]  # type: ignore[index]
    return out


def op_times_from_features(flops: np.ndarray, nbytes: np.ndarray, cls: np.ndarray, spec: ClusterSpec,
                           precision: np.ndarray | None = None) -> np.ndarray:
    """[`op_time_matrix`][cluster.cost_model.op_time_matrix] from precomputed [`op_features`][cluster.cost_model.op_features] (for fits that vary the spec);
    ``precision``: [`op_precisions`][cluster.cost_model.op_precisions] (``None``: every op FP32)."""
    n, d = len(flops), len(spec.devices)
    prec = np.zeros(n, dtype=np.int64) if precision is None else precision
    out = np.empty((n, d), dtype=np.float64)
    for j, dev in enumerate(spec.devices):
        eff = np.array([dev.dense_efficiency, dev.conv_efficiency, dev.other_efficiency])[cls]
        if dev.half_efficiency_flops > 0:
            sized = cls < 2
            eff = np.where(sized, eff * flops / np.maximum(flops + dev.half_efficiency_flops, 1e-300), eff)
        peak = dense_peaks(dev)[cls, prec] if dev.tensor_peak_flops else dev.peak_flops
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(flops > 0, flops / (peak * dev.software_flops_fraction * eff), 0.0)
        mem_eff = np.array([dev.dense_memory_efficiency or dev.memory_efficiency,
                            dev.conv_memory_efficiency or dev.memory_efficiency, dev.memory_efficiency])[cls]
        memory = nbytes / (dev.memory_bandwidth * mem_eff)
        body = np.maximum(compute, memory) if spec.compute_memory_overlap else compute + memory
        out[:, j] = body + dev.op_overhead_s
        if dev.dispatch_s > 0:  # host dispatch overlapped with the kernels of ops that do work
            out[:, j] = np.where((flops > 0) | (nbytes > 0), np.maximum(out[:, j], dev.dispatch_s), out[:, j])
    return out


def op_time_matrix(graph: OpGraph, spec: ClusterSpec) -> np.ndarray:
    """Seconds each op takes on each device: float64 array ``[num_ops, num_devices]`` (module docstring)."""
    return op_times_from_features(*op_features(graph), spec, op_precisions(graph))


def transfer_time(nbytes: float, bandwidth: float, latency_s: float) -> float:
    """Seconds to move ``nbytes`` over a link: ``latency_s + nbytes / bandwidth``."""
    return latency_s + nbytes / bandwidth
