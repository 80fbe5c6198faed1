"""The 2017 paper's baseline placements (Mirhoseini et al. 2017, Sec. 4.2).

Every baseline returns a group placement: an int64 array ``[num_groups]`` of device
indices into ``spec.devices``. A group that holds an op with no GPU kernel always goes to
the CPU (the paper: "if an operation lacks GPU implementation, it will be placed on CPU").

* ``single_cpu``: everything on the CPU.
* ``single_gpu``: everything on the first GPU.
* ``expert``: each LSTM layer on its own GPU, the embedding with the first layer, the
  softmax (and the loss and optimizer bookkeeping) with the last (layers wrap around when
  there are more layers than GPUs); for CNNs and BERT, contiguous chunks of layers with
  roughly the same number of layers per GPU ("we heuristically partition the model into
  contiguous parts that have roughly the same number of layers").
* ``scotch``: Scotch static mapping of the cost-weighted group graph onto the target
  architecture of all devices, annotated with their compute capacities (peak FLOP/s)
  and the links' communication costs (:mod:`baselines.scotch_mapping`).
* ``mincut``: the same without the CPU.

Scotch sees the group graph, not the op graph: placements are per co-location group, so
an op-level mapping would have to be folded back onto the groups anyway. A group's weight
is its estimated compute time on the fastest device (roofline, microseconds); an edge's
weight is the bytes crossing it (KiB); a link's cost is its time to move 1 MiB.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from cluster.cost_model import op_time_matrix, transfer_time
from cluster.kernels import cpu_fallback, group_gpu_ok
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph
from compgraph.models import Benchmark

BaselineFn = Callable[["BaselineContext"], np.ndarray]


class BaselineContext:
    """What a baseline may look at: the graph, its groups, the cluster and the benchmark."""

    def __init__(
        self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, benchmark: Benchmark | None = None, config=None
    ) -> None:
        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.benchmark, self.config = benchmark, config
        self.group_gpu_ok = group_gpu_ok(graph, grouping)

    @property
    def cpu(self) -> int:
        """Index of the first CPU device.

        Raises:
            ValueError: the cluster has no CPU.
        """
        if not self.spec.cpu_indices:
            raise ValueError(f"cluster {self.spec.name!r}: has no CPU device")
        return self.spec.cpu_indices[0]

    def gpus(self) -> list[int]:
        """GPU device indices; raises ValueError if there are none."""
        if not self.spec.gpu_indices:
            raise ValueError(f"cluster {self.spec.name!r}: has no GPU device")
        return self.spec.gpu_indices

    def cpu_fallback(self, placement: np.ndarray) -> np.ndarray:
        """Move groups with an op that has no GPU kernel to the CPU (:func:`cluster.kernels.cpu_fallback`)."""
        return cpu_fallback(placement, self.group_gpu_ok, self.spec, require_cpu=True)


def single_cpu(ctx: BaselineContext) -> np.ndarray:
    """Every group on the CPU (2017 Sec. 4.2 "Single-CPU")."""
    return np.full(ctx.grouping.num_groups, ctx.cpu, dtype=np.int64)


def single_gpu(ctx: BaselineContext) -> np.ndarray:
    """Every group on the first GPU, CPU-only groups on the CPU (2017 Sec. 4.2 "Single-GPU")."""
    return ctx.cpu_fallback(np.full(ctx.grouping.num_groups, ctx.gpus()[0], dtype=np.int64))


def expert(ctx: BaselineContext) -> np.ndarray:
    """Each layer on its own GPU (2017 Sec. 4.2 "Expert-designed"); a group goes where most of its ops' layer does.

    Raises:
        ValueError: no benchmark with an expert rule was given (a user graph).
    """
    if ctx.benchmark is None:
        raise ValueError("expert: needs a benchmark with layer rules; this graph has none")
    gpus = ctx.gpus()
    num_layers = ctx.benchmark.num_layers(ctx.config)
    out = np.empty(ctx.grouping.num_groups, dtype=np.int64)
    for g, members in enumerate(ctx.grouping.members()):
        layers = Counter(ctx.benchmark.expert_layer(ctx.graph.ops[i].name, ctx.config) for i in members)
        layer = min(layers.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if ctx.benchmark.expert_contiguous:
            out[g] = gpus[min(layer * len(gpus) // num_layers, len(gpus) - 1)]
        else:
            out[g] = gpus[layer % len(gpus)]
    return ctx.cpu_fallback(out)


def _scotch(ctx: BaselineContext, devices: list[int], seed: int = 0) -> np.ndarray:
    from baselines.scotch_mapping import scotch_static_map

    times = op_time_matrix(ctx.graph, ctx.spec)[:, devices].min(axis=1)  # seconds on the fastest device
    group_us = np.zeros(ctx.grouping.num_groups)
    np.add.at(group_us, ctx.grouping.op_group, times * 1e6)
    vertex_weights = np.maximum(np.rint(group_us), 1).astype(np.int64)
    edges = [(a, b, max(int(round(nbytes / 1024)), 1)) for (a, b), nbytes in ctx.grouping.group_edges(ctx.graph).items()]
    peaks = np.array([ctx.spec.devices[d].peak_flops for d in devices])
    device_weights = np.maximum(np.rint(10 * peaks / peaks.min()), 1).astype(np.int64)
    cost = np.ones((len(devices), len(devices)), dtype=np.int64)
    mib = float(1 << 20)
    if len(devices) > 1:
        secs = {
            (i, j): transfer_time(mib, ctx.spec.link(a, b).bandwidth, ctx.spec.link(a, b).latency_s)
            for i, a in enumerate(devices)
            for j, b in enumerate(devices)
            if i != j
        }
        fastest = min(secs.values())
        for (i, j), s in secs.items():
            cost[i, j] = max(int(round(10 * s / fastest)), 1)
    mapping = scotch_static_map(vertex_weights, edges, device_weights, cost, seed=seed)
    return np.asarray(devices, dtype=np.int64)[mapping]


def scotch(ctx: BaselineContext) -> np.ndarray:
    """Scotch static mapping onto all devices (2017 Sec. 4.2 "Scotch"), CPU-only groups on the CPU."""
    return ctx.cpu_fallback(_scotch(ctx, list(range(len(ctx.spec.devices)))))


def mincut(ctx: BaselineContext) -> np.ndarray:
    """Scotch static mapping onto the GPUs only (2017 Sec. 4.2 "MinCut"), CPU-only groups on the CPU."""
    return ctx.cpu_fallback(_scotch(ctx, ctx.gpus()))


BASELINES: dict[str, BaselineFn] = {
    "single_cpu": single_cpu,
    "single_gpu": single_gpu,
    "expert": expert,
    "scotch": scotch,
    "mincut": mincut,
}
