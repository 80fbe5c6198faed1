"""Step time of a placement executed eagerly, in program order, as PyTorch runs a placed step.

A placed PyTorch step ([`compgraph.torch_step.placed_module`][compgraph.torch_step.placed_module], run by
[`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]) is not a dataflow graph handed to an executor that
runs ready ops on every device at once, as TensorFlow's is ([`cluster.simulator`][cluster.simulator]): one host thread
walks the ops in program order (the captured step's node order, [`compgraph.ir.OpGraph.ops`][compgraph.ir.OpGraph.ops]) and
each op does what PyTorch's CUDA semantics say ("CUDA semantics: asynchronous execution", PyTorch
documentation):

* an op on a CPU runs on the host thread: the host is busy for its whole time ``t(o, cpu)``;
* an op on a GPU is launched: the host spends ``dispatch_s`` of that device (the eager dispatcher and
  the kernel launch; 0 for an op that does no work), and the kernel runs on the device's one stream
  after every kernel launched before it and not before its launch: ``start = max(stream, launch)``,
  ``stream = start + t(o, gpu)`` (``t`` is [`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix]'s, which
  already takes ``max(kernel, dispatch_s)``, so a step on one GPU takes exactly what the dataflow
  simulator says);
* a copy between devices (``aten._to_copy``, inserted before an op's first read of a tensor that lives
  elsewhere, once per tensor and destination) with pageable host memory is synchronous: it waits for
  the GPU stream(s) it involves to drain (the tensor's producer and everything launched before it),
  then holds the host and those streams for ``latency_s + bytes / bandwidth`` of the link
  ([`cluster.spec.ClusterSpec.link`][cluster.spec.ClusterSpec.link]), and a copy from a GPU to the host of at least
  ``fresh_host_threshold_bytes`` also ``bytes / fresh_host_bytes_per_s`` where the spec has that term (the copy
  lands in new pageable memory, ``aten._to_copy``, and glibc maps every allocation above 32 MiB afresh, so the
  kernel faults in and zeroes its pages; [`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]); a copy between two logical CPUs is a host memcpy; a copy
  between two GPUs is ordered after both streams' earlier work and holds both streams, not the host
  (a device-to-device copy is asynchronous to the host).

The step ends when the host and every stream are done (the timing synchronizes). Measured against the
two lent GPUs' CPU+GPU placements (``benchmarks/gpu_truth.py --judge``, 2026-11-26, with the copy terms
of then): median ``|sim/real - 1|`` 0.178 (GPT-2) and 0.257 (ResNet-50) on the H200 whose profiles
``h200x1`` was fitted on, against 0.314 and 0.410 with the dataflow model; 0.298 and 0.471 on the H100
(held out), against 0.403 and 0.580. The figures as shipped, four lent machines: docs/measurement.md.

Not modelled: peak memory ([`cluster.simulated.SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment] keeps the dataflow
simulator's, which frees a tensor after its last reader as the eager step does, but orders ops by
readiness), CUDA streams other than the default one, pinned-memory copies (asynchronous to the host).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from cluster.cost_model import op_time_matrix
from cluster.fast_simulator import link_matrices
from cluster.kernels import fallback_device, first_cpu, gpu_mask, op_gpu_ok
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


@njit(cache=True, nogil=True)
def _eager_steps(places, times, in_ptr, in_key, in_src, in_bytes, gpu_ok, is_gpu, fallback,
                 dispatch, works, lat, bw, fresh, fresh_threshold, num_keys):
    """Step seconds of ``K`` op placements (``places[K, n]``) executed in program order (module
    docstring). ``in_ptr``/``in_key``/``in_src``/``in_bytes``: each op's data inputs (CSR), the
    tensor's key (producer and output), its producer and its bytes; ``fresh[a, d]``: seconds a byte
    of a copy from ``a`` to ``d`` of at least ``fresh_threshold`` bytes pays on top (fresh host pages)."""
    K, n = places.shape
    D = times.shape[1]
    out = np.empty(K, np.float64)
    stamp = np.full((num_keys, D), -1, np.int64)  # stamp[key, dest] == k: copied to dest in placement k
    place = np.empty(n, np.int64)
    stream = np.zeros(D, np.float64)
    for k in range(K):
        for i in range(n):
            place[i] = fallback_device(places[k, i], gpu_ok[i], is_gpu, fallback)
        host = 0.0
        for d in range(D):
            stream[d] = 0.0
        for i in range(n):
            d = place[i]
            for j in range(in_ptr[i], in_ptr[i + 1]):
                a = place[in_src[j]]
                if a == d or stamp[in_key[j], d] == k:
                    continue
                stamp[in_key[j], d] = k
                t = lat[a, d] + in_bytes[j] / bw[a, d]
                if in_bytes[j] >= fresh_threshold:
                    t += in_bytes[j] * fresh[a, d]
                start = host
                if is_gpu[a] and stream[a] > start:
                    start = stream[a]
                if is_gpu[d] and stream[d] > start:
                    start = stream[d]
                end = start + t
                if not (is_gpu[a] and is_gpu[d]):  # pageable host memory: the host waits for the copy
                    host = end
                if is_gpu[a]:
                    stream[a] = end
                if is_gpu[d]:
                    stream[d] = end
            t = times[i, d]
            if not is_gpu[d]:
                host += t
            else:
                launch = host
                if works[i]:
                    host += dispatch[d]
                start = stream[d] if stream[d] > launch else launch
                stream[d] = start + t
        step = host
        for d in range(D):
            if stream[d] > step:
                step = stream[d]
        out[k] = step
    return out


def fresh_page_matrix(spec: ClusterSpec) -> tuple[np.ndarray, int]:
    """``(seconds per byte [D, D], threshold bytes)``: what a copy from device ``a`` to ``d`` of at least the
    threshold pays on top of its link for fresh host pages ([`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]'s
    ``fresh_host_bytes_per_s``): ``1 / fresh_host_bytes_per_s`` from a GPU to a CPU, 0 elsewhere and when
    the spec has no such term."""
    d = len(spec.devices)
    out = np.zeros((d, d), np.float64)
    rate = spec.transfer.fresh_host_bytes_per_s
    if rate:
        gpu = gpu_mask(spec)
        for a in range(d):
            for b in range(d):
                if gpu[a] and not gpu[b]:
                    out[a, b] = 1.0 / rate
    return out, int(spec.transfer.fresh_host_threshold_bytes)


class EagerExecution:
    """Step times of op placements of ``graph`` on ``spec`` executed in program order (module docstring).

    Args:
        graph: the step, ops in program order (a captured PyTorch step's are).
        spec: the cluster.
        op_times: ``[num_ops, num_devices]`` seconds replacing [`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix].

    Raises:
        ValueError: ``op_times`` of the wrong shape.
    """

    def __init__(self, graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> None:
        n, D = graph.num_ops, len(spec.devices)
        times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
        if times.shape != (n, D):
            raise ValueError(f"op_times: shape {times.shape}, expected {(n, D)}")
        self.times = np.ascontiguousarray(times)
        data = sorted((e.dst, e.src, e.src_output, e.bytes) for e in graph.edges if not e.control)
        keys: dict[tuple[int, int], int] = {}
        self.in_ptr = np.zeros(n + 1, np.int64)
        for dst, _, _, _ in data:
            self.in_ptr[dst + 1] += 1
        self.in_ptr = np.cumsum(self.in_ptr)
        self.in_key = np.array([keys.setdefault((s, o), len(keys)) for _, s, o, _ in data], np.int64)
        self.in_src = np.array([s for _, s, _, _ in data], np.int64)
        self.in_bytes = np.array([b for _, _, _, b in data], np.float64)
        self.num_keys = max(1, len(keys))
        self.gpu_ok, self.is_gpu, self.fallback = op_gpu_ok(graph), gpu_mask(spec), first_cpu(spec)
        self.dispatch = np.array([d.dispatch_s for d in spec.devices], np.float64)
        self.works = np.array([op.flops > 0 or op.bytes_accessed > 0 for op in graph.ops], bool)
        self.bw, self.lat = link_matrices(spec)
        self.fresh, self.fresh_threshold = fresh_page_matrix(spec)

    def step_times(self, op_placements: np.ndarray) -> np.ndarray:
        """Step seconds ``[K]`` of ``K`` op placements (``[K, num_ops]`` device indices; a GPU op
        without a GPU kernel runs on the first CPU, as in the dataflow simulator)."""
        p = np.ascontiguousarray(np.atleast_2d(op_placements), dtype=np.int64)
        return _eager_steps(p, self.times, self.in_ptr, self.in_key, self.in_src, self.in_bytes, self.gpu_ok,
                            self.is_gpu, self.fallback, self.dispatch, self.works, self.lat, self.bw, self.fresh,
                            float(self.fresh_threshold), self.num_keys)
