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
* ``metis``: METIS k-way partition of the cost-weighted group graph into one part per GPU
  (Post, Gao et al. 2018, Table 1), target part weights proportional to the GPUs' peak
  FLOP/s (``tpwgts``).
* ``m_topo``, ``m_etf``, ``m_sct``: Baechi's memory-constrained list schedulers (Jeon et al.,
  SoCC 2020; :mod:`baselines.baechi`). They place the op graph, not the groups, and return
  an :class:`cluster.op_placement.OpPlacement` (``[num_ops]``), which
  :func:`cluster.evaluation.evaluate_placements` measures as well.
* ``optimum``: the best placement found by :mod:`baselines.optimum` (exact enumeration of
  the group placements when there are at most 3^10 of them, else a time-limited MILP);
  not run by default in the experiment (it can take a minute).

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
from cluster.op_placement import OpPlacement
from compgraph.ir import Grouping, OpGraph
from compgraph.models import Benchmark

BaselineFn = Callable[["BaselineContext"], "np.ndarray | OpPlacement"]


class BaselineContext:
    """What a baseline may look at: the graph, its groups, the cluster and the benchmark."""

    def __init__(
        self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, benchmark: Benchmark | None = None, config=None
    ) -> None:
        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.benchmark, self.config = benchmark, config
        self.group_gpu_ok = group_gpu_ok(graph, grouping)
        self.info: dict = {}  # what a baseline reports beside its placement (e.g. the optimum\'s bound)

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

    def op_placement(self, ops: np.ndarray) -> OpPlacement:
        """Wrap a per-op placement (``[num_ops]`` device indices) as an op-level baseline's result."""
        ops = np.asarray(ops, dtype=np.int64)
        if ops.shape != (self.graph.num_ops,):
            raise ValueError(f"op placement: shape {ops.shape}, expected ({self.graph.num_ops},)")
        return OpPlacement(ops)


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


def metis(ctx: BaselineContext, seed: int = 0) -> np.ndarray:
    """METIS k-way partition of the group graph into one part per GPU (Post, Gao et al. 2018,
    Table 1 "METIS"), CPU-only groups on the CPU.

    Vertex weights: each group's compute time on the fastest GPU (microseconds, roofline);
    edge weights: bytes between groups (KiB, both directions summed); ``tpwgts``: the GPUs'
    peak FLOP/s, normalised (equal for identical GPUs). Part ``k`` goes to the ``k``-th GPU.
    Deterministic for a given ``seed`` (METIS' ``seed`` option).

    Raises:
        ValueError: the cluster has no GPU.
    """
    import pymetis

    gpus = ctx.gpus()
    g = ctx.grouping.num_groups
    if len(gpus) == 1 or g <= 1:
        return ctx.cpu_fallback(np.full(g, gpus[0], dtype=np.int64))
    times = op_time_matrix(ctx.graph, ctx.spec)[:, gpus].min(axis=1)
    group_us = np.zeros(g)
    np.add.at(group_us, ctx.grouping.op_group, times * 1e6)
    vweights = np.maximum(np.rint(group_us), 1).astype(np.int64)
    adj: dict[tuple[int, int], int] = {}
    for (a, b), nbytes in ctx.grouping.group_edges(ctx.graph).items():
        key = (min(a, b), max(a, b))
        adj[key] = adj.get(key, 0) + nbytes
    nbrs: list[list[tuple[int, int]]] = [[] for _ in range(g)]
    for (a, b), nbytes in adj.items():
        w = max(int(round(nbytes / 1024)), 1)
        nbrs[a].append((b, w))
        nbrs[b].append((a, w))
    xadj, adjncy, eweights = [0], [], []
    for row in nbrs:
        for b, w in sorted(row):
            adjncy.append(b)
            eweights.append(w)
        xadj.append(len(adjncy))
    peaks = np.array([ctx.spec.devices[d].peak_flops for d in gpus], dtype=np.float64)
    if g <= len(gpus):
        parts = np.arange(g) % len(gpus)
    else:
        from compgraph.grouping import _c_stdout_to_log

        with _c_stdout_to_log():
            _, parts = pymetis.part_graph(
                len(gpus), adjacency=pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy), vweights=vweights.tolist(),
                eweights=eweights, tpwgts=(peaks / peaks.sum()).tolist(), options=pymetis.Options(seed=int(seed)))
    return ctx.cpu_fallback(np.asarray(gpus, dtype=np.int64)[np.asarray(parts, dtype=np.int64)])


def _baechi(name: str) -> BaselineFn:
    def run(ctx: BaselineContext) -> OpPlacement:
        from baselines import baechi

        return ctx.op_placement(getattr(baechi, name)(ctx.graph, ctx.spec))

    run.__name__ = name
    run.__doc__ = f"Baechi's {name} on the op graph (:func:`baselines.baechi.{name}`), as an OpPlacement ``[num_ops]``."
    return run


m_topo = _baechi("m_topo")
m_etf = _baechi("m_etf")
m_sct = _baechi("m_sct")


def optimum(ctx: BaselineContext) -> np.ndarray:
    """The best group placement :func:`baselines.optimum.optimum` finds (exact or time-limited);
    its bound and whether it is proven go to ``ctx.info["optimum"]``."""
    from baselines.optimum import optimum as solve

    res = solve(ctx.graph, ctx.grouping, ctx.spec)
    ctx.info["optimum"] = res
    return res.placement


BASELINES: dict[str, BaselineFn] = {
    "single_cpu": single_cpu,
    "single_gpu": single_gpu,
    "expert": expert,
    "scotch": scotch,
    "mincut": mincut,
    "metis": metis,
    "m_topo": m_topo,
    "m_etf": m_etf,
    "m_sct": m_sct,
    "optimum": optimum,
}

GPU_BASELINES = ("single_gpu", "expert", "mincut", "metis", "m_topo", "m_etf", "m_sct")
"""Baselines that need a GPU in the cluster."""

OP_LEVEL_BASELINES = ("m_topo", "m_etf", "m_sct")
"""Baselines that place the op graph (return a :class:`cluster.op_placement.OpPlacement`)."""

DEFAULT_EXCLUDED = ("optimum",)
"""Baselines the experiment runs only when asked (``--methods``): the optimum may take a minute."""


def place_baselines(methods, prepared, spec: ClusterSpec) -> dict:
    """Each baseline of ``methods`` (names of :data:`BASELINES`) on a prepared graph
    (:class:`compgraph.prepare.PreparedGraph`: its graph, groups, benchmark and config) under ``spec``:
    name -> ``[num_groups]`` device indices (an :class:`cluster.op_placement.OpPlacement` for
    :data:`OP_LEVEL_BASELINES`). Raises KeyError for an unknown name."""
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    return {m: BASELINES[m](ctx) for m in methods}


def applicable_baselines(spec: ClusterSpec, user_graph: bool, optimum: bool = True, group_level: bool = False) -> list[str]:
    """Names of the :data:`BASELINES` that apply to a graph on ``spec``, in their order: ``single_cpu``
    needs a CPU, :data:`GPU_BASELINES` need a GPU, ``expert`` needs a benchmark's layer rules (not a
    user's graph); ``optimum=False`` leaves out :data:`DEFAULT_EXCLUDED` (the optimum, up to a minute);
    ``group_level`` leaves out the op-level placers (:data:`OP_LEVEL_BASELINES`)."""
    out = []
    for name in BASELINES:
        if (name == "single_cpu" and not spec.cpu_indices) or (name in GPU_BASELINES and not spec.gpu_indices):
            continue
        if (name == "expert" and user_graph) or (not optimum and name in DEFAULT_EXCLUDED):
            continue
        if group_level and name in OP_LEVEL_BASELINES:
            continue
        out.append(name)
    return out
