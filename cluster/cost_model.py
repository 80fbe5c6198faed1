"""Per-op execution time on each device: a roofline plus a launch overhead.

For op ``o`` on device ``d``::

    t(o, d) = max(flops(o) / peak_flops(d), bytes_accessed(o) / memory_bandwidth(d)) + op_overhead_s(d)

``flops`` and ``bytes_accessed`` come from :mod:`compgraph.costs` (the roofline's compute
and memory terms, Williams et al., "Roofline", CACM 2009); the overhead models kernel
launch / executor dispatch, which dominates small ops. Peak figures are datasheet
peaks, so the model is optimistic for big ops; calibration from profiles replaces it
per graph and device kind (a later stage).
"""

from __future__ import annotations

import numpy as np

from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


def op_time_matrix(graph: OpGraph, spec: ClusterSpec) -> np.ndarray:
    """Seconds each op takes on each device: float64 array ``[num_ops, num_devices]``."""
    flops = np.array([op.flops for op in graph.ops], dtype=np.float64)
    nbytes = np.array([op.bytes_accessed for op in graph.ops], dtype=np.float64)
    peak = np.array([d.peak_flops for d in spec.devices], dtype=np.float64)
    bw = np.array([d.memory_bandwidth for d in spec.devices], dtype=np.float64)
    overhead = np.array([d.op_overhead_s for d in spec.devices], dtype=np.float64)
    return np.maximum(flops[:, None] / peak[None, :], nbytes[:, None] / bw[None, :]) + overhead[None, :]


def transfer_time(nbytes: float, bandwidth: float, latency_s: float) -> float:
    """Seconds to move ``nbytes`` over a link: ``latency_s + nbytes / bandwidth``."""
    return latency_s + nbytes / bandwidth
