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
* ``scotch``: Scotch static mapping of the cost-weighted *op graph* onto the target
  architecture of all devices, annotated with their compute capacities (peak FLOP/s)
  and the links' communication costs ([`baselines.scotch_mapping`][baselines.scotch_mapping]). 2017 Sec. 4.2 gives
  Scotch "the computational costs of each operation ... the amount of data along each edge":
  the op graph, with each TensorFlow colocation unit (a variable with its reads and updates,
  [`compgraph.grouping.colocation_units`][compgraph.grouping.colocation_units]) contracted to one vertex so that it stays
  whole. Returns an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] (``[num_ops]``).
* ``mincut``: the same without the CPU (2017 Sec. 4.2: "MinCut ... the same as Scotch but
  only considers GPUs").
* ``metis``: METIS k-way partition of the cost-weighted op graph (colocation units contracted)
  into one part per GPU (Post, Gao et al. 2018, Table 1: "partitions the network ... according
  to a cost model of operations"), target part weights proportional to the GPUs' peak
  FLOP/s (``tpwgts``); an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement].
* ``scotch_group``, ``mincut_group``, ``metis_group``: the same three on the co-location
  *group* graph (``[num_groups]``): one vertex per group of the 2017 co-location heuristics.
  Far fewer cut edges than the op-level mappings; not run by default (ask with ``--methods``).
* ``m_topo``, ``m_etf``, ``m_sct``: Baechi's memory-constrained list schedulers (Jeon et al.,
  SoCC 2020; [`baselines.baechi`][baselines.baechi]). They place the op graph, not the groups, and return
  an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] (``[num_ops]``), which
  [`cluster.evaluation.evaluate_placements`][cluster.evaluation.evaluate_placements] measures as well.
* ``optimum``: the best placement found by [`baselines.optimum`][baselines.optimum] (exact enumeration of
  the group placements when there are at most 3^10 of them, else a node-limited MILP);
  not run by default in the experiment (it can take a minute); a *reference* point beside
  the lower bound, not a baseline the learners are compared against.

Each method is one [`Baseline`][baselines.Baseline] in [`BASELINES`][baselines.BASELINES]: its placer and what it needs (a
GPU, a CPU, a benchmark's layer rules), what it places (``level``), whether it runs by
default. The CLI's checks, [`applicable_baselines`][baselines.applicable_baselines] and the experiment read them there.

A vertex's weight (a colocation unit's, or a group's) is its estimated compute time on the
fastest target device ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix], microseconds); an edge's
weight is the bytes crossing it (KiB, at least 1); a link's cost is its time to move 1 MiB
([`cluster.spec.ClusterSpec.link`][cluster.spec.ClusterSpec.link]: with the Send/Recv overhead and host staging).
A unit or group that holds an op with no GPU kernel goes to the CPU after the mapping, whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import cast
from dataclasses import dataclass

import numpy as np

from cluster.cost_model import op_time_matrix, transfer_time
from cluster.kernels import cpu_fallback, group_gpu_ok, op_gpu_ok
from cluster.spec import ClusterSpec
from cluster.op_placement import OpPlacement
from compgraph.grouping import unit_graph
from compgraph.ir import Grouping, OpGraph
from compgraph.models import Benchmark

BaselineFn = Callable[["BaselineContext"], "np.ndarray | OpPlacement | None"]


@dataclass(frozen=True)
class PartitionGraph:
    """What Scotch and METIS partition: vertices (co-location groups or colocation units) with
    compute weights, and the bytes between them.

    Attributes:
        level: ``"op"`` (vertices are the colocation units of the op graph) or ``"group"``.
        vertex_of_op: int64 ``[num_ops]``: the vertex of each op.
        edges: ``(a, b) -> bytes`` with ``a < b``, both directions summed (bytes).
        gpu_ok: bool ``[num_vertices]``: every op of the vertex has a GPU kernel.
    """

    level: str
    vertex_of_op: np.ndarray
    edges: dict
    gpu_ok: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.gpu_ok.shape[0])

    def vertex_weights_us(self, op_seconds: np.ndarray) -> np.ndarray:
        """int64 ``[num_vertices]``: the vertices' summed op times (``op_seconds`` ``[num_ops]``,
        seconds) in whole microseconds, at least 1."""
        us = np.zeros(self.num_vertices)
        np.add.at(us, self.vertex_of_op, op_seconds * 1e6)
        return np.maximum(np.rint(us), 1).astype(np.int64)


class BaselineContext:
    """What a baseline may look at: the graph, its groups, the cluster and the benchmark."""

    def __init__(
        self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, benchmark: Benchmark | None = None, config=None
    ) -> None:
        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.benchmark, self.config = benchmark, config
        self.group_gpu_ok = group_gpu_ok(graph, grouping)
        self.info: dict = {}  # what a baseline reports beside its placement (e.g. the optimum\'s bound)
        self._op_times: np.ndarray | None = None
        self._partition: dict[str, PartitionGraph] = {}

    @property
    def op_times(self) -> np.ndarray:
        """Seconds of each op on each device ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix]), ``[num_ops, num_devices]``."""
        if self._op_times is None:
            self._op_times = op_time_matrix(self.graph, self.spec)
        return self._op_times

    def partition_graph(self, level: str) -> PartitionGraph:
        """The op graph with its colocation units contracted (``level="op"``), or the group graph
        (``"group"``), as [`PartitionGraph`][baselines.PartitionGraph] (computed once per context)."""
        if level not in self._partition:
            if level == "op":
                units = unit_graph(self.graph)
                vertex_of_op, edges = units.unit_of_op, units.edges
                n = units.num_units
            elif level == "group":
                vertex_of_op, n = np.asarray(self.grouping.op_group, dtype=np.int64), self.grouping.num_groups
                edges = {}
                for (a, b), nbytes in self.grouping.group_edges(self.graph).items():
                    key = (min(a, b), max(a, b))
                    edges[key] = edges.get(key, 0) + int(nbytes)
            else:
                raise ValueError(f"level={level!r}: expected 'op' or 'group'")
            ok = np.ones(n, dtype=bool)
            ok[vertex_of_op[~op_gpu_ok(self.graph)]] = False
            self._partition[level] = PartitionGraph(level, vertex_of_op, edges, ok)
        return self._partition[level]

    def from_vertices(self, part: PartitionGraph, vertex_devices: np.ndarray) -> np.ndarray | OpPlacement:
        """A placement of ``part``'s vertices (``[num_vertices]`` device indices) with the no-GPU-kernel
        rule applied per vertex (whole: a colocation unit or group is never split), as the baseline's
        result: an [`OpPlacement`][cluster.op_placement.OpPlacement] at level ``op``, ``[num_groups]`` at level ``group``."""
        placed = cpu_fallback(vertex_devices, part.gpu_ok, self.spec, require_cpu=True)
        if part.level == "group":
            return placed
        return self.op_placement(placed[part.vertex_of_op])

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
        """Move groups with an op that has no GPU kernel to the CPU ([`cluster.kernels.cpu_fallback`][cluster.kernels.cpu_fallback])."""
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


def _scotch(ctx: BaselineContext, devices: list[int], level: str, seed: int = 0) -> np.ndarray | OpPlacement:
    """Scotch static mapping of ``ctx.partition_graph(level)`` onto ``devices`` (module docstring)."""
    from baselines.scotch_mapping import scotch_static_map

    part = ctx.partition_graph(level)
    vertex_weights = part.vertex_weights_us(ctx.op_times[:, devices].min(axis=1))  # on the fastest device
    edges = [(a, b, max(int(round(nbytes / 1024)), 1)) for (a, b), nbytes in part.edges.items()]
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
        # Scotch's target architecture is undirected (one cost a pair): where a spec prices the two
        # directions apart (transfer.host_to_device_efficiency) a pair costs the mean of its two directions
        secs = {(i, j): (s + secs[j, i]) / 2 for (i, j), s in secs.items()}
        fastest = min(secs.values())
        for (i, j), s in secs.items():
            cost[i, j] = max(int(round(10 * s / fastest)), 1)
    mapping = scotch_static_map(vertex_weights, edges, device_weights, cost, seed=seed)
    return ctx.from_vertices(part, np.asarray(devices, dtype=np.int64)[mapping])


def scotch(ctx: BaselineContext) -> OpPlacement:
    """Scotch static mapping of the op graph (colocation units whole) onto all devices (2017 Sec. 4.2
    "Scotch"); units with an op that has no GPU kernel on the CPU. ``[num_ops]``."""
    return cast(OpPlacement, _scotch(ctx, list(range(len(ctx.spec.devices))), "op"))


def mincut(ctx: BaselineContext) -> OpPlacement:
    """Scotch static mapping of the op graph onto the GPUs only (2017 Sec. 4.2 "MinCut"); only units
    with an op that has no GPU kernel go to the CPU. ``[num_ops]``."""
    return cast(OpPlacement, _scotch(ctx, ctx.gpus(), "op"))


def scotch_group(ctx: BaselineContext) -> np.ndarray:
    """[`scotch`][baselines.scotch] on the co-location group graph (``[num_groups]``)."""
    return cast(np.ndarray, _scotch(ctx, list(range(len(ctx.spec.devices))), "group"))


def mincut_group(ctx: BaselineContext) -> np.ndarray:
    """[`mincut`][baselines.mincut] on the co-location group graph (``[num_groups]``)."""
    return cast(np.ndarray, _scotch(ctx, ctx.gpus(), "group"))


def _metis(ctx: BaselineContext, level: str, seed: int = 0) -> np.ndarray | OpPlacement:
    """METIS k-way partition of ``ctx.partition_graph(level)`` into one part per GPU.

    Vertex weights: each vertex's compute time on the fastest GPU (microseconds); edge weights:
    bytes between vertices (KiB, both directions summed); ``tpwgts``: the GPUs' peak FLOP/s,
    normalised (equal for identical GPUs). Part ``k`` goes to the ``k``-th GPU. Deterministic for
    a given ``seed`` (METIS' ``seed`` option).

    Raises:
        ValueError: the cluster has no GPU.
    """
    import pymetis

    gpus = ctx.gpus()
    part = ctx.partition_graph(level)
    n = part.num_vertices
    if len(gpus) == 1 or n <= 1:
        return ctx.from_vertices(part, np.full(n, gpus[0], dtype=np.int64))
    vweights = part.vertex_weights_us(ctx.op_times[:, gpus].min(axis=1))
    nbrs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for (a, b), nbytes in part.edges.items():
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
    if n <= len(gpus):
        parts = np.arange(n) % len(gpus)
    else:
        from compgraph.grouping import _c_stdout_to_log

        with _c_stdout_to_log():
            _, metis_parts = pymetis.part_graph(
                len(gpus), adjacency=pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy), vweights=vweights.tolist(),
                eweights=eweights, tpwgts=(peaks / peaks.sum()).tolist(), options=pymetis.Options(seed=int(seed)))
        parts = np.asarray(metis_parts, dtype=np.int64)
    return ctx.from_vertices(part, np.asarray(gpus, dtype=np.int64)[np.asarray(parts, dtype=np.int64)])


def metis(ctx: BaselineContext) -> OpPlacement:
    """METIS k-way partition of the op graph (colocation units whole) into one part per GPU (Post,
    Gao et al. 2018, Table 1 "Metis"); units with an op that has no GPU kernel on the CPU. ``[num_ops]``.

    Raises:
        ValueError: the cluster has no GPU.
    """
    return cast(OpPlacement, _metis(ctx, "op"))


def metis_group(ctx: BaselineContext) -> np.ndarray:
    """[`metis`][baselines.metis] on the co-location group graph (``[num_groups]``)."""
    return cast(np.ndarray, _metis(ctx, "group"))


def _baechi(name: str) -> BaselineFn:
    def run(ctx: BaselineContext) -> OpPlacement:
        from baselines import baechi

        return ctx.op_placement(getattr(baechi, name)(ctx.graph, ctx.spec))

    run.__name__ = name
    run.__doc__ = f"Baechi's {name} on the op graph (`baselines.baechi.{name}`), as an OpPlacement ``[num_ops]``."
    return run


m_topo = _baechi("m_topo")
m_etf = _baechi("m_etf")
m_sct = _baechi("m_sct")


def optimum(ctx: BaselineContext) -> np.ndarray | None:
    """The best group placement [`baselines.optimum.optimum`][baselines.optimum.optimum] finds (exact or time-limited);
    its bound and whether it is proven go to ``ctx.info["optimum"]``."""
    from baselines.optimum import optimum as solve

    res = solve(ctx.graph, ctx.grouping, ctx.spec)
    ctx.info["optimum"] = res
    return res.placement


@dataclass(frozen=True)
class Baseline:
    """One baseline method: its placer and what it needs, in one place.

    Attributes:
        name: the method name (``--methods``, MLflow's ``method`` tag).
        place: ``place(ctx) -> [num_groups] int64`` device indices, or an
            [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] ``[num_ops]`` for ``level == "op"``.
        level: ``"op"`` (places the op graph) or ``"group"`` (the prepared co-location groups);
            recorded in MLflow as the param ``level``.
        needs_gpu: the cluster must have a GPU; ``needs_cpu``: a CPU.
        needs_benchmark: needs a benchmark's layer rules (``expert``), not a user's graph.
        default: run when ``--methods`` is not given.
        variant_of: the op-level method this is the group-level variant of (``scotch_group``:
            ``scotch``), run in its place where only group placements are measured.
        reference: a reference point computed with the lower bound ([`baselines.report.reference_points`][baselines.report.reference_points]),
            not a baseline the learners are compared against (``optimum``).
    """

    name: str
    place: BaselineFn
    level: str = "group"
    needs_gpu: bool = False
    needs_cpu: bool = False
    needs_benchmark: bool = False
    default: bool = True
    variant_of: str | None = None
    reference: bool = False

    def __call__(self, ctx: BaselineContext) -> np.ndarray | OpPlacement | None:
        """The placement ([`place`][baselines.Baseline.place])."""
        return self.place(ctx)

    def problem(self, spec: ClusterSpec, user_graph: bool) -> str | None:
        """Why this baseline cannot place a graph on ``spec`` (one line naming the method), or ``None``."""
        if self.needs_gpu and not spec.gpu_indices:
            return f"method {self.name!r} needs a GPU; cluster {spec.name!r} has none"
        if self.needs_cpu and not spec.cpu_indices:
            return f"method {self.name!r} needs a CPU; cluster {spec.name!r} has none"
        if self.needs_benchmark and user_graph:
            return (f"method {self.name!r} needs a benchmark's layer rules; a user's graph has none "
                    "(try single_gpu, m_etf or a learner)")
        return None


BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("single_cpu", single_cpu, needs_cpu=True),
    Baseline("single_gpu", single_gpu, needs_gpu=True),
    Baseline("expert", expert, needs_gpu=True, needs_benchmark=True),
    Baseline("scotch", scotch, level="op"),
    Baseline("mincut", mincut, level="op", needs_gpu=True),
    Baseline("metis", metis, level="op", needs_gpu=True),
    Baseline("scotch_group", scotch_group, default=False, variant_of="scotch"),
    Baseline("mincut_group", mincut_group, needs_gpu=True, default=False, variant_of="mincut"),
    Baseline("metis_group", metis_group, needs_gpu=True, default=False, variant_of="metis"),
    Baseline("m_topo", m_topo, level="op", needs_gpu=True),
    Baseline("m_etf", m_etf, level="op", needs_gpu=True),
    Baseline("m_sct", m_sct, level="op", needs_gpu=True),
    # the optimum may take a minute; the group-level partitioners are variants of the papers' op-level ones
    Baseline("optimum", optimum, default=False, reference=True),
)}
"""Method name -> [`Baseline`][baselines.Baseline], in the order tables list them."""

OP_LEVEL_BASELINES = tuple(n for n, b in BASELINES.items() if b.level == "op")
"""Baselines that place the op graph (return a [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement])."""


def baseline_level(name: str) -> str:
    """``"op"`` or ``"group"``: what baseline ``name`` places ([`Baseline.level`][baselines.Baseline.level])."""
    return BASELINES[name].level


def place_baselines(methods, prepared, spec: ClusterSpec) -> dict:
    """Each baseline of ``methods`` (names of [`BASELINES`][baselines.BASELINES]) on a prepared graph
    ([`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph]: its graph, groups, benchmark and config) under ``spec``:
    name -> ``[num_groups]`` device indices (an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] for
    ``level == "op"``). Raises KeyError for an unknown name."""
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    return {m: BASELINES[m](ctx) for m in methods}


def applicable_baselines(spec: ClusterSpec, user_graph: bool, optimum: bool = True, group_level: bool = False) -> list[str]:
    """Names of the [`BASELINES`][baselines.BASELINES] that apply to a graph on ``spec``, in their order: those whose
    [`Baseline.problem`][baselines.Baseline.problem] is ``None`` (a CPU, a GPU, a benchmark's layer rules); ``optimum=False``
    leaves out the reference points (the optimum: up to a minute). The group-level variants of the
    partitioners ([`Baseline.variant_of`][baselines.Baseline.variant_of]) are left out, unless ``group_level``: then the
    op-level placers (``level == "op"``) are left out and the group-level variants take their place
    (e.g. for an environment that measures group placements only)."""
    out = []
    for name, b in BASELINES.items():
        if b.problem(spec, user_graph) or (b.reference and not optimum):
            continue
        if (b.level == "op") if group_level else (b.variant_of is not None):
            continue
        out.append(name)
    return out
