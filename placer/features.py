"""Learner inputs: per-op embeddings (2017), group embeddings (2017 placer, EAGLE), and a
placement's static memory load ([`static_memory_load`][placer.features.static_memory_load], for out-of-memory signals).

**Group features of the current 2017 placer** ([`group_features`][placer.features.group_features], [`GroupFeatures`][placer.features.GroupFeatures]).
Mirhoseini et al. 2017, Sec. 3.2 embed each operation as the concatenation of (1) a
tunable embedding of its type, (2) its output shapes concatenated into a fixed-size
zero-padded list and (3) a one-hot encoding of the operations that are its direct inputs
and outputs. We place co-location groups, so a group's inputs are:

* ``type_counts``: float32 ``[num_groups, num_types]``, the fraction of the group's ops
  of each type. The placer multiplies it by a tunable ``[num_types, d]`` table: the mean
  of the tunable type embeddings of the group's ops.
* ``output_shapes``: float32 ``[num_groups, max_outputs * max_rank]``: the shapes of the
  tensors leaving the group (largest first), each zero-padded to ``max_rank`` dims, the
  list zero-padded to ``max_outputs`` tensors; values are ``log1p(dim)`` so that 2048
  and 4 are on one scale.
* ``adjacency``: float32 ``[num_groups, num_groups]``, 1 where a group is a direct input
  or output of the other.

**Per-op features** ([`op_features`][placer.features.op_features], [`OpFeatures`][placer.features.OpFeatures]), 2017 Sec. 3.2 as laid out
in the worked example of the reading notes (``shared/papers/004``) and in the Hierarchical
Planner's code (TensorFlow ``grappler/hierarchical_controller.py``,
``create_op_embeddings``). ``N`` = number of ops, ``T`` = number of op types,
``K = max_outputs * max_rank``:

* ``type_ids``: int64 ``[N]``: index of the op's type in ``type_names`` (the graph's op
  types, sorted); the learner looks it up in a tunable ``[T, d]`` embedding table.
* ``output_shapes``: float32 ``[N, K]``: output ``j``'s dims in columns
  ``j * max_rank ... j * max_rank + rank - 1`` (raw sizes, e.g. 2048.0; an unknown dim is
  -1), zero-padded to ``max_rank`` per output and to ``max_outputs`` outputs; outputs past
  ``max_outputs`` and dims past ``max_rank`` are dropped. Example (notes 004): outputs
  ``[20, 40, 20, 30]`` and ``[20, 30]``, ``max_rank=4``, ``max_outputs=2`` ->
  ``[20, 40, 20, 30, 20, 30, 0, 0]`` (the notes print ``[20, 40, 20, 30, 0, 20, 30, 0]``,
  which pads neither consistently; we pad each output at its end, as the grappler code).
* ``adjacency``: int64 ``[N, max_neighbours]``: the op's direct inputs (ascending op
  index) then its direct outputs (ascending), data or control edges, each once, stored
  as **op index + 1**, zero-padded (0 = no neighbour). ``max_neighbours`` defaults to
  the graph's largest number of neighbours (nothing dropped).
* ``adjacency_direction``: int64 ``[N, max_neighbours]``: -1 for an input, +1 for an
  output, 0 for padding (the grappler code's ``[index, +-1]`` pairs).
* ``adj_indptr`` int64 ``[N + 1]`` and ``adj_indices`` int64 ``[nnz]``: the same
  neighbours, 0-based, never truncated, as CSR rows; [`OpFeatures.dense_adjacency`][placer.features.OpFeatures.dense_adjacency]
  gives the paper's one-hot form, float32 ``[N, N]`` (only for small graphs).

**EAGLE group embedding** ([`eagle_group_features`][placer.features.eagle_group_features], [`EagleGroupFeatures`][placer.features.EagleGroupFeatures];
Lan et al. 2021, Sec. III-C: "the number of operations of each operation type in the
group, the output shapes, and the adjacency information of the group ... aggregating the
embedding of operations in the same group in the same way as Hierarchical Planner",
i.e. ``create_group_embeddings`` of the grappler code). ``G`` = number of groups:

* ``type_counts``: float32 ``[G, T]``: number of the group's ops of each type.
* ``output_shapes``: float32 ``[G, K]``: the sum over the group's ops of their
  ``output_shapes`` rows, unknown dims counted as 0 (the grappler code adds these onto the
  first ``K`` columns of the type counts, which looks like a bug; we keep them apart).
* ``adjacency``: float32 ``[G, 2G]``: ``[D, D^T]`` with ``D[a, b]`` the number of
  op-to-op edges (data or control, each op pair once) from group ``a`` to group ``b``;
  the diagonal counts edges inside a group.
* [`EagleGroupFeatures.embedding`][placer.features.EagleGroupFeatures.embedding]: float32 ``[G, 2G + T + K]``, the concatenation
  ``[adjacency, type_counts, output_shapes]``, each row divided by (its max + 1) as the
  grappler code; ``include_adjacency=False`` gives ``[G, T + K]`` for a GCN placer, which
  takes the adjacency separately (EAGLE Sec. III-C).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from compgraph.ir import Grouping, OpGraph

if TYPE_CHECKING:
    from cluster.environment import Environment


@dataclass
class GroupFeatures:
    """Placer inputs; shapes in the module docstring."""

    type_counts: np.ndarray
    output_shapes: np.ndarray
    adjacency: np.ndarray
    type_names: list[str]

    @property
    def num_groups(self) -> int:
        return self.adjacency.shape[0]


def group_features(graph: OpGraph, grouping: Grouping, max_outputs: int = 6, max_rank: int = 4) -> GroupFeatures:
    """Compute [`GroupFeatures`][placer.features.GroupFeatures] for ``grouping`` of ``graph``."""
    types = sorted({op.type for op in graph.ops})
    tindex = {t: i for i, t in enumerate(types)}
    g = grouping.num_groups
    og = grouping.op_group
    counts = np.zeros((g, len(types)), dtype=np.float32)
    for i, op in enumerate(graph.ops):
        counts[og[i], tindex[op.type]] += 1
    counts /= np.maximum(counts.sum(axis=1, keepdims=True), 1)

    leaving: list[dict[tuple[int, int], int]] = [{} for _ in range(g)]
    adjacency = np.zeros((g, g), dtype=np.float32)
    for e in graph.edges:
        a, b = int(og[e.src]), int(og[e.dst])
        if a == b:
            continue
        adjacency[a, b] = adjacency[b, a] = 1.0
        if not e.control:
            leaving[a][(e.src, e.src_output)] = e.bytes
    shapes = np.zeros((g, max_outputs * max_rank), dtype=np.float32)
    for gi in range(g):
        tensors = sorted(leaving[gi].items(), key=lambda kv: (-kv[1], kv[0]))[:max_outputs]
        for j, ((src, out), _) in enumerate(tensors):
            dims = graph.ops[src].output_shapes[out][:max_rank]
            for k, dim in enumerate(dims):
                shapes[gi, j * max_rank + k] = np.log1p(max(dim, 0))
    return GroupFeatures(counts, shapes, adjacency, types)


# --------------------------------------------------------------------------------------
# per-op features (2017 Sec. 3.2)
# --------------------------------------------------------------------------------------


@dataclass
class OpFeatures:
    """Per-op learner inputs; shapes and dtypes in the module docstring."""

    type_ids: np.ndarray
    type_names: list[str]
    output_shapes: np.ndarray
    adjacency: np.ndarray
    adjacency_direction: np.ndarray
    adj_indptr: np.ndarray
    adj_indices: np.ndarray

    @property
    def num_ops(self) -> int:
        return int(self.type_ids.shape[0])

    def neighbours(self, op: int) -> np.ndarray:
        """0-based indices of ``op``'s direct inputs then outputs: int64 ``[degree]``."""
        return self.adj_indices[self.adj_indptr[op] : self.adj_indptr[op + 1]]

    def dense_adjacency(self) -> np.ndarray:
        """The paper's one-hot adjacency: float32 ``[N, N]``, 1 where an op is a direct input or output."""
        n = self.num_ops
        out = np.zeros((n, n), dtype=np.float32)
        rows = np.repeat(np.arange(n), np.diff(self.adj_indptr))
        out[rows, self.adj_indices] = 1.0
        return out


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r}: must be an integer >= 1")
    return int(value)


def _op_shape_rows(graph: OpGraph, max_outputs: int, max_rank: int, unknown: float) -> np.ndarray:
    out = np.zeros((graph.num_ops, max_outputs * max_rank), dtype=np.float32)
    for i, op in enumerate(graph.ops):
        for j, shape in enumerate(op.output_shapes[:max_outputs]):
            for k, dim in enumerate(shape[:max_rank]):
                out[i, j * max_rank + k] = float(dim) if dim >= 0 else unknown
    return out


def op_features(graph: OpGraph, max_outputs: int = 6, max_rank: int = 4, max_neighbours: int | None = None) -> OpFeatures:
    """Per-op features of 2017 Sec. 3.2 (see the module docstring for the layout).

    Args:
        graph: the op graph (``N`` ops).
        max_outputs: outputs kept per op (the grappler code's ``max_num_outputs``).
        max_rank: dims kept per output (``max_output_size``).
        max_neighbours: width of ``adjacency``; ``None``: the largest number of neighbours
            of any op (at least 1). Wider rows are truncated (inputs kept first).
    Returns:
        An [`OpFeatures`][placer.features.OpFeatures].
    Raises:
        ValueError: ``max_outputs``, ``max_rank`` or ``max_neighbours`` not an integer >= 1.
    """
    max_outputs = _check_positive("max_outputs", max_outputs)
    max_rank = _check_positive("max_rank", max_rank)
    types = sorted({op.type for op in graph.ops})
    tindex = {t: i for i, t in enumerate(types)}
    type_ids = np.array([tindex[op.type] for op in graph.ops], dtype=np.int64)
    shapes = _op_shape_rows(graph, max_outputs, max_rank, unknown=-1.0)

    ins: list[set[int]] = [set() for _ in graph.ops]
    outs: list[set[int]] = [set() for _ in graph.ops]
    for e in graph.edges:
        ins[e.dst].add(e.src)
        outs[e.src].add(e.dst)
    rows = [(sorted(a), sorted(b)) for a, b in zip(ins, outs)]
    degree = [len(a) + len(b) for a, b in rows]
    indptr = np.zeros(graph.num_ops + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(degree)
    indices = np.array([j for a, b in rows for j in (*a, *b)], dtype=np.int64)
    width = max(1, max(degree, default=0)) if max_neighbours is None else _check_positive("max_neighbours", max_neighbours)
    adj = np.zeros((graph.num_ops, width), dtype=np.int64)
    direction = np.zeros((graph.num_ops, width), dtype=np.int64)
    for i, (a, b) in enumerate(rows):
        nb = ([(j, -1) for j in a] + [(j, 1) for j in b])[:width]
        for k, (j, d) in enumerate(nb):
            adj[i, k] = j + 1
            direction[i, k] = d
    return OpFeatures(type_ids, types, shapes, adj, direction, indptr, indices)


# --------------------------------------------------------------------------------------
# EAGLE group embedding (EAGLE Sec. III-C, Hierarchical Planner's aggregation)
# --------------------------------------------------------------------------------------


@dataclass
class EagleGroupFeatures:
    """EAGLE's per-group inputs; shapes and dtypes in the module docstring."""

    type_counts: np.ndarray
    output_shapes: np.ndarray
    adjacency: np.ndarray
    type_names: list[str]

    @property
    def num_groups(self) -> int:
        return int(self.type_counts.shape[0])

    def embedding(self, include_adjacency: bool = True) -> np.ndarray:
        """Row-normalised group embedding: float32 ``[G, 2G + T + K]`` (``[G, T + K]`` without
        the adjacency): ``[adjacency, type_counts, output_shapes]`` / (row max + 1)."""
        parts = ([self.adjacency] if include_adjacency else []) + [self.type_counts, self.output_shapes]
        x = np.concatenate(parts, axis=1).astype(np.float32)
        return x / (x.max(axis=1, keepdims=True) + 1.0)


def eagle_group_features(graph: OpGraph, grouping: Grouping, max_outputs: int = 6, max_rank: int = 4) -> EagleGroupFeatures:
    """EAGLE's group embedding parts for ``grouping`` of ``graph`` (module docstring).

    Raises:
        ValueError: ``grouping`` does not cover ``graph``'s ops, or ``max_outputs``/``max_rank``
            not an integer >= 1.
    """
    max_outputs = _check_positive("max_outputs", max_outputs)
    max_rank = _check_positive("max_rank", max_rank)
    og = np.asarray(grouping.op_group)
    if og.shape != (graph.num_ops,):
        raise ValueError(f"grouping.op_group has shape {og.shape}; graph {graph.name!r} has {graph.num_ops} ops")
    g = grouping.num_groups
    types = sorted({op.type for op in graph.ops})
    tindex = {t: i for i, t in enumerate(types)}
    counts = np.zeros((g, len(types)), dtype=np.float32)
    for i, op in enumerate(graph.ops):
        counts[og[i], tindex[op.type]] += 1
    shapes = np.zeros((g, max_outputs * max_rank), dtype=np.float32)
    np.add.at(shapes, og, _op_shape_rows(graph, max_outputs, max_rank, unknown=0.0))
    dag = np.zeros((g, g), dtype=np.float32)
    for a, b in sorted({(e.src, e.dst) for e in graph.edges}):
        dag[og[a], og[b]] += 1
    return EagleGroupFeatures(counts, shapes, np.concatenate([dag, dag.T], axis=1), types)


def oom_values(failing: float, memory_load: Callable[[np.ndarray], np.ndarray] | None, placements: np.ndarray,
               oom: np.ndarray) -> np.ndarray:
    """The failing value of each of ``K`` placements: ``failing`` (a step time in seconds, or a
    reward), times ``max(1, static memory load)`` ([`static_memory_load`][placer.features.static_memory_load]) when ``memory_load``
    is given and a placement ran out of memory (the learners' ``oom_reward="memory_scaled"``).

    Args:
        placements: int ``[K, num_units]``; oom: bool ``[K]``.
    Returns:
        float64 ``[K]`` (every entry, OOM or not; the caller picks the OOM ones).
    """
    values = np.full(len(oom), float(failing))
    if memory_load is not None and np.any(oom):
        values = values * np.maximum(1.0, memory_load(placements))
    return values


def static_memory_load(env: Environment) -> Callable[[np.ndarray], np.ndarray]:
    """A function ``placements [K, num_groups] -> [K]``: each placement's static memory load,
    ``max_d bytes_d / memory_bytes_d`` (dimensionless; > 1 means it overflows some device).

    ``bytes_d`` sums, over the ops that effectively run on device ``d``, their resident
    ``param_bytes`` plus every output's ``alloc_bytes`` (all activations held at once: an
    upper bound of the simulator's live peak, [`compgraph.memory`][compgraph.memory]). An op without a GPU
    kernel whose group is on a GPU counts on the first CPU (soft placement).
    """
    graph, spec = env.graph, env.spec
    d = len(spec.devices)
    og = np.asarray(env.grouping.op_group, dtype=np.int64)
    g = int(env.grouping.num_groups)
    nbytes = np.array([op.param_bytes + op.alloc_bytes for op in graph.ops], dtype=np.float64)
    gpu_ok = np.array([op.gpu_kernel for op in graph.ops], dtype=bool)
    ok_bytes = np.bincount(og[gpu_ok], weights=nbytes[gpu_ok], minlength=g)  # [G]
    cpu_only = np.bincount(og[~gpu_ok], weights=nbytes[~gpu_ok], minlength=g)  # [G]
    is_gpu = np.array([dev.kind == "gpu" for dev in spec.devices])
    cap = np.array([dev.memory_bytes for dev in spec.devices], dtype=np.float64)
    fallback = spec.cpu_indices[0] if spec.cpu_indices else None

    def load(placements: np.ndarray) -> np.ndarray:
        p = np.asarray(placements, dtype=np.int64)
        onehot = np.eye(d)[p]  # [K, G, D]
        per_dev = onehot.transpose(0, 2, 1) @ ok_bytes  # [K, D]
        if fallback is not None:
            on_gpu = is_gpu[p]  # [K, G]
            per_dev += (onehot * ~is_gpu[None, None, :]).transpose(0, 2, 1) @ cpu_only
            per_dev[:, fallback] += (on_gpu * cpu_only[None, :]).sum(axis=1)
        else:
            per_dev += onehot.transpose(0, 2, 1) @ cpu_only
        return (per_dev / cap[None, :]).max(axis=1)

    return load


def unit_neighbours(env: Environment, blocks: np.ndarray | None = None) -> list[np.ndarray]:
    """The units each unit of ``env``'s grouping exchanges a tensor or a control edge with, ``[U]`` int64
    arrays (sorted, without the unit itself): the neighbourhoods of the named option ``unit_dont_look``
    ([`ScopeMoves`][placer.features.ScopeMoves]). With ``blocks`` (int64 ``[U]``, the block of each unit, blocks ``0..B-1``;
    the named option ``moves_over="groups"``): the blocks each block exchanges a tensor or a control edge with,
    ``[B]`` arrays."""
    group = np.asarray(env.grouping.op_group, dtype=np.int64)
    num_units = env.grouping.num_groups
    if blocks is not None:
        blocks = np.asarray(blocks, dtype=np.int64)
        group, num_units = blocks[group], (int(blocks.max()) + 1 if len(blocks) else 0)
    if not env.graph.edges:
        return [np.zeros(0, dtype=np.int64) for _ in range(num_units)]
    src = group[np.array([e.src for e in env.graph.edges], dtype=np.int64)]
    dst = group[np.array([e.dst for e in env.graph.edges], dtype=np.int64)]
    cut = src != dst
    pairs = np.unique(np.concatenate([np.stack([src[cut], dst[cut]], 1), np.stack([dst[cut], src[cut]], 1)]), axis=0)
    starts = np.searchsorted(pairs[:, 0], np.arange(num_units + 1))
    return [pairs[starts[u]:starts[u + 1], 1].copy() for u in range(num_units)]


def scopes_by_depth(names: list[str]) -> dict[int, list[np.ndarray]]:
    """The name scopes of several groups ([`compgraph.grouping.name_scopes`][compgraph.grouping.name_scopes]) by depth:
    ``{depth: [int64 [n] group indices]}`` (empty when no name has a scope)."""
    from compgraph.grouping import name_scopes

    out: dict[int, list[np.ndarray]] = {}
    for depth, groups in name_scopes(names):
        out.setdefault(depth, []).append(groups)
    return out


def move_scope(rng: np.random.Generator, placement: np.ndarray, scopes: dict[int, list[np.ndarray]],
               num_devices: int, majority: float = 0.0) -> None:
    """Move one name scope of ``placement`` (``[G]`` device indices, changed in place) whole to one
    device: a depth of ``scopes`` ([`scopes_by_depth`][placer.features.scopes_by_depth]), a scope at that depth and a
    device, each uniformly (three draws of ``rng``: the depth, the device, the scope). A layer, a time
    step or a block moves at once, as a human expert moves them (Mirhoseini et al. 2017, Sec. 4.2);
    nothing moves when ``scopes`` is empty.

    ``majority`` (the named option ``scope_majority``; 0: off, and no fourth draw): with this probability (a
    fourth draw) only the scope's groups on its most common device (the lowest index on a tie) move, and
    its other groups stay where they are, so a layer whose few groups the search has put elsewhere moves
    as a whole with its exceptions kept."""
    if not scopes:
        return
    depths = sorted(scopes)
    at = scopes[depths[int(rng.integers(len(depths)))]]
    device = int(rng.integers(num_devices))  # before the scope's index: the order of the draws of the whole move
    groups = at[int(rng.integers(len(at)))]
    if majority > 0 and rng.random() < majority:
        on = placement[groups]
        groups = groups[on == int(np.bincount(on, minlength=num_devices).argmax())]
    placement[groups] = device


DESCENT_KICK = 2
"""Layers a kick of [`LayerDescent`][placer.features.LayerDescent] moves at once, each to a device drawn uniformly."""


class LayerDescent:
    """The named option ``layer_descent`` (in no paper): early placements of a search are an
    iterated local search over whole layers (Lourenco, Martin and Stutzle, *Iterated Local Search*,
    2003), the layers of [`compgraph.grouping.layer_scopes`][compgraph.grouping.layer_scopes], each moved whole to one of
    ``devices``, every other unit where the placement has it. It takes the first rows of each batch
    ([`rows`][placer.features.LayerDescent.rows]), at most what its point has left to measure, so the batch
    that ends a neighbourhood is topped up with the policy's samples (on nmt, 27 moves a neighbourhood
    and batches of 12: a 300-placement descent ends near placement 400).

    From its point (first the incumbent: the warm start) it measures every neighbour of the point
    (each layer whole on each device it is not wholly on, in an order drawn from ``rng``), over as
    many batches as that takes, and then moves to the fastest if that beats the point (steepest
    descent). When none does, the point becomes a *kick* of it: [`DESCENT_KICK`][placer.features.DESCENT_KICK] layers, each to
    a device drawn uniformly (its own too: about one kick in 16 on nmt gives the point back, one
    in 3 moves a single layer), measured first and taken whatever its time; the descent goes on
    from there. A point with no neighbour (one device) ends the descent. So a layer whose better device is a step back from the start (nmt's decoder to a
    free GPU, +0.3%, before its softmax comes back, -4.6%) is reached by a kick, where moves from
    the incumbent alone never take the step.

    Args:
        layers: ``[L]`` int64 unit index arrays, one per layer (disjoint).
        devices: the devices a layer moves to (in a kick too).
        budget: placements the descent hands out in all ([`next`][placer.features.LayerDescent.next] calls).
        rng: the numpy generator of the orders and kicks (the learner's or the scope moves').

    Attributes:
        used: placements handed out so far.
        point, point_time: the descent's placement (int64 ``[U]``; ``None`` before the first) and its
            step time (seconds; ``inf`` for OOM or the learner's failing value; ``nan`` while a kick
            is not yet measured).
        queue: int64 ``[n, 2]``, what the point still has to measure, as (layer, device) rows; ``(-1,
            -1)``: the point itself (a kick).
        best, best_time: the fastest neighbour of the point measured so far (``None``, ``inf``).
        kicks: the kicks so far.
        ended: set by the [`keep`][placer.features.LayerDescent.keep] after which no placement is left; the learner's
            [`Restarts.due`][placer.features.Restarts.due] restarts the policy on the incumbent and sets it back.
    """

    def __init__(self, layers: list[np.ndarray], devices: list[int], budget: int, rng: np.random.Generator) -> None:
        self.layers, self.devices, self.budget, self.rng = layers, [int(d) for d in devices], int(budget), rng
        self.used, self.kicks, self.ended = 0, 0, False
        self.point: np.ndarray | None = None
        self.point_time = float("inf")
        self.best: np.ndarray | None = None
        self.best_time = float("inf")
        self.queue = np.zeros((0, 2), dtype=np.int64)
        self._handed: dict[bytes, bool] = {}  # this batch's placements: bytes -> is the point itself

    def left(self) -> int:
        """Placements the descent has left to hand out."""
        return max(0, self.budget - self.used)

    def rows(self, k: int, incumbent: np.ndarray, incumbent_time: float) -> int:
        """How many of a batch of ``k`` the descent takes: what it has left, at most what the point
        has left to measure. The first call starts the point at ``incumbent`` (``[U]``; step time
        ``incumbent_time``, seconds)."""
        if self.point is None:
            self.point, self.point_time = np.array(incumbent, dtype=np.int64), float(incumbent_time)
            self._neighbours()
        return min(int(k), self.left(), len(self.queue))

    def _neighbours(self, kick: bool = False) -> None:
        """Queue the point's neighbours in an order drawn from ``rng`` (each layer on each device it is
        not wholly on), after the point itself for a kick; the fastest neighbour starts afresh."""
        p = self.point
        assert p is not None
        rows = [(i, d) for i, g in enumerate(self.layers) for d in self.devices if not np.all(p[g] == d)]
        order = self.rng.permutation(len(rows))
        self.queue = np.asarray(([(-1, -1)] if kick else []) + [rows[j] for j in order], dtype=np.int64).reshape(-1, 2)
        self.best, self.best_time = None, float("inf")
        if not len(self.queue):  # nothing to measure (one device): the descent ends here, having handed out what it did
            self.budget = self.used
            self.ended = self.used > 0

    def next(self) -> np.ndarray:
        """The descent's next placement, a copy ``[U]``: the point's next neighbour (or the point
        itself after a kick).

        Raises:
            RuntimeError: before [`rows`][placer.features.LayerDescent.rows] started the point, or more placements
                than it gave before the batch was kept.
        """
        if self.point is None or not len(self.queue):
            raise RuntimeError("layer descent: no placement left to measure before the batch is kept (ask rows() first)")
        layer, device = (int(v) for v in self.queue[0])
        self.queue = self.queue[1:]
        p = self.point.copy()
        if layer >= 0:
            p[self.layers[layer]] = device
        self.used += 1
        self._handed[p.tobytes()] = layer < 0
        return p

    def keep(self, placements: np.ndarray, times_s: np.ndarray) -> None:
        """After a batch (``placements`` ``[K, U]``; ``times_s`` ``[K]`` seconds, ``inf`` or a failing value
        for OOM): the descent's placements in it are taken (a kick's time, the fastest neighbour);
        when the point has measured every neighbour, it moves to the fastest if that beats it, else
        to a kick of it."""
        if not self._handed:
            return
        handed, self._handed = self._handed, {}
        for row, t in zip(placements, times_s):
            key = np.asarray(row, dtype=np.int64).tobytes()
            if key not in handed:
                continue
            t = float(t) if np.isfinite(t) else float("inf")  # a NaN would never compare: as slow as OOM
            if handed[key]:
                self.point_time = t
            elif t < self.best_time:
                self.best, self.best_time = np.asarray(row, dtype=np.int64).copy(), t
        if not len(self.queue):
            if self.best is not None and self.best_time < self.point_time:
                self.point, self.point_time = self.best, self.best_time
                self._neighbours()
            else:  # a local optimum over whole layers: a kick
                assert self.point is not None
                p = self.point.copy()
                for layer in self.rng.choice(len(self.layers), min(DESCENT_KICK, len(self.layers)), replace=False):
                    p[self.layers[int(layer)]] = self.devices[int(self.rng.integers(len(self.devices)))]
                self.point, self.point_time = p, float("nan")
                self.kicks += 1
                self._neighbours(kick=True)
        if self.left() == 0:
            self.ended = True

    def state_dict(self) -> dict:
        """``descent_used``, ``descent_kicks``, ``descent_time``, ``descent_best_time``, and the tensors
        ``descent_point``, ``descent_best`` (empty for none) and ``descent_queue`` (``[n, 2]``)."""
        import torch

        def tensor(a: np.ndarray | None):
            return torch.from_numpy(a.copy() if a is not None else np.zeros(0, dtype=np.int64))

        return {"descent_used": self.used, "descent_kicks": self.kicks, "descent_time": self.point_time,
                "descent_best_time": self.best_time, "descent_point": tensor(self.point),
                "descent_best": tensor(self.best), "descent_queue": tensor(self.queue)}

    def load_state_dict(self, state: dict) -> None:
        """The inverse of [`state_dict`][placer.features.LayerDescent.state_dict] (keys absent: the descent not begun)."""
        def array(key: str) -> np.ndarray | None:
            a = state[key].numpy().copy() if key in state else np.zeros(0, dtype=np.int64)
            return a if len(a) else None

        self.used, self.kicks = int(state.get("descent_used", 0)), int(state.get("descent_kicks", 0))
        self.point_time = float(state.get("descent_time", float("inf")))
        self.best_time = float(state.get("descent_best_time", float("inf")))
        self.point, self.best = array("descent_point"), array("descent_best")
        queue = array("descent_queue")
        self.queue = queue.reshape(-1, 2) if queue is not None else np.zeros((0, 2), dtype=np.int64)
        self.ended, self._handed = False, {}


class ScopeMoves:
    """A learner's named option ``scope_moves`` (in no paper; [`placer.configs.PostConfig`][placer.configs.PostConfig]): the
    name scopes, the generator that picks the moves, and the incumbent they start from (or, with
    ``travel``, the walk).

    Args:
        names: ``[U]`` unit names (the scopes: [`scopes_by_depth`][placer.features.scopes_by_depth]); units may share a
            name (``moves_over="groups"``: each unit by its group's), and a scope then holds them all.
        share: the share of samples to replace by scope moves (0 and no ``units``: nothing is computed,
            nothing drawn).
        num_devices: ``D``, the devices a scope can move to.
        rng: the numpy generator of the moves.
        owns_rng: the generator is this object's (its state goes in [`state_dict`][placer.features.ScopeMoves.state_dict]); else
            the learner's own, which the learner saves.
        travel: the named option ``scope_travel`` (in no paper; ``None``: off): the moves start from
            a walk instead of the incumbent, record-to-record travel (G. Dueck, *New optimization
            heuristics: the great deluge algorithm and the record-to-record travel*, J. Comput.
            Phys. 104, 1993): a scope move whose step time is below ``incumbent_time x (1 +
            travel)`` becomes the walk's placement, so a move a little slower than the incumbent (a
            layer to a free GPU before its output layer comes back) can be followed by a second;
            a new incumbent puts the walk back on it.
        majority: the named option ``scope_majority`` (in no paper; 0: off): the share of the moves that
            move only the scope's groups on its most common device ([`move_scope`][placer.features.move_scope]).
        descent: the named option ``layer_descent`` (in no paper; 0: off): after the first incumbent,
            ``descent`` placements of a descent over whole layers ([`LayerDescent`][placer.features.LayerDescent]),
            the first rows of each batch until they are spent (a batch that ends a neighbourhood is
            topped up with the policy's samples); then the learner restarts its policy on the
            incumbent ([`Restarts.due`][placer.features.Restarts.due]). No descent with fewer than two devices.
        descent_devices: the devices a layer moves to in the descent (default: every device).
        units: the named option ``unit_moves`` (in no paper; 0: off, and nothing more drawn): a
            further share of samples (coin flips, with ``share``'s: each sample replaced with
            probability ``share + units``) that are the incumbent (or the walk) with one unit moved to
            one other device, each uniformly: a hill climber's move (Russell and Norvig, *AIMA*,
            Sec. 4.1.1) beside the scope moves. For each replaced sample a draw before the scope
            move's makes it a unit move with probability ``units / (share + units)``; with no scopes,
            every one. A unit move enters the walk as a scope move does. None on one device.
        neighbours: the named option ``unit_dont_look`` (in no paper; ``None``: off): ``[U]`` arrays, the
            units each unit exchanges tensors with. A unit move is then drawn uniformly among the
            (unit, device) pairs not tried from its base: one handed out is tried until its batch
            is kept, and stays tried unless it was faster than the incumbent; when the base moves
            (a new incumbent, a walk's step), the pairs of each unit that moved and of its
            neighbours are untried again (don't-look bits, Bentley 1992, Sec. 3); with every pair
            tried, all are untried. One draw a unit move instead of two.
        blocks: with the named option ``moves_over="groups"`` ([`of_learner`][placer.features.ScopeMoves.of_learner]; in no
            paper; ``None``: off, a unit move moves one unit): int64 ``[U]``, the block (``0..B-1``) of each unit, e.g. the prepared co-location
            group that holds each colocation unit (``Grouping.coarse_group``). A unit move then moves every
            unit of one block to one device that not all of them are on already, and the don't-look bits
            are over (block, device) pairs, with ``neighbours`` over blocks
            ([`unit_neighbours`][placer.features.unit_neighbours] with ``blocks``). Without ``units``: unused.
        kick: the named option ``unit_kick`` (in no paper; 0: off; only with ``neighbours``, not with
            ``travel``): where every (unit, device) pair is tried from the moves' base, a kick
            instead of all drawable again, an iterated local search (Lourenço, Martin and Stützle,
            *Iterated local search*, Handbook of Metaheuristics, 2003, Sec. 3): the incumbent with a
            connected set of ``kick`` units (blocks: a unit, then neighbours of those drawn) moved to one device,
            handed out as a unit move and the walk's placement (``current``); the moves start from the walk, which
            takes the fastest of a batch's moves handed out since it began when faster than it; a new
            incumbent puts it back there, and the next local optimum kicks the incumbent again (their
            "better" acceptance, Sec. 3.4). From the first kick on, a unit move whose placement was
            measured or handed out before is not drawn (a memo of digests), nor is such a kick (100
            tries); until then the draws are those without the option.
        adaptive: the named option ``adaptive_shares`` (in no paper; ``False``: off): after the
            descent, the shares of the policy's samples, the scope moves and the unit moves (at the
            start ``1 - share - units``, ``share``, ``units``) follow their rates of samples faster
            than the incumbent at their batch, probability matching (Goldberg 1990; Thierens 2005,
            Sec. 2): each rate is discounted faster samples over discounted samples (every weight
            times ``ADAPTIVE_DECAY`` a placement), and each kind on gets ``ADAPTIVE_FLOOR`` plus the
            rest in proportion to its rate. A kind at 0 stays 0; until some sample is faster the
            shares stay as given.

    Attributes:
        incumbent: int64 ``[U]``, the fastest placement measured so far (the start first), or ``None``.
        incumbent_time: its step time (seconds; ``inf`` before any).
        current: with ``travel`` or ``kick``: int64 ``[U]``, the walk's placement (``None`` before the first
            incumbent: the moves start from the incumbent).
        current_time: its step time (seconds).
        walked: with ``travel``: the batches after which the walk stood on another placement, not a
            new incumbent; with ``kick``: the walk's steps that were not a new incumbent.
        kicks: with ``kick``: the kicks handed out.
        descent: the [`LayerDescent`][placer.features.LayerDescent] with ``descent`` > 0 and layer scopes, else ``None``.
        shares: the shares now, ``[3]``: the policy's samples, the scope moves, the unit moves
            (``adaptive``: they change; else fixed).
    """

    ADAPTIVE_FLOOR = 0.05
    """``adaptive``: the least share of each kind of sample that is on (Thierens 2005's ``P_min``)."""
    ADAPTIVE_DECAY = 0.999
    """``adaptive``: the weight of a sample's outcome in its kind's rate is multiplied by this for each
    placement measured after it (a memory of about 1,000 placements)."""

    def __init__(self, names: list[str], share: float, num_devices: int, rng: np.random.Generator,
                 owns_rng: bool = True, travel: float | None = None, majority: float = 0.0, descent: int = 0,
                 descent_devices: list[int] | None = None, units: float = 0.0,
                 neighbours: list[np.ndarray] | None = None, adaptive: bool = False,
                 blocks: np.ndarray | None = None, kick: int = 0) -> None:
        self.share, self.num_devices, self.rng, self.owns_rng = float(share), int(num_devices), rng, owns_rng
        self.units = float(units) if num_devices > 1 else 0.0  # one device: a unit has nowhere to go
        self.num_units = len(names)
        self.travel, self.majority = travel, float(majority)
        self.scopes = scopes_by_depth(names) if share > 0 else {}
        self.share = self.share if self.scopes else 0.0  # no scope to move: none of the samples are scope moves
        self.descent: LayerDescent | None = None
        if descent > 0:
            from compgraph.grouping import layer_scopes

            layers = [np.asarray(g, dtype=np.int64) for _, g in layer_scopes(names)]
            devices = list(range(num_devices)) if descent_devices is None else [int(d) for d in descent_devices]
            # one device (a one-GPU cluster): no layer has anywhere to go, so no descent
            self.descent = LayerDescent(layers, devices, int(descent), rng) if layers and len(devices) > 1 else None
        self.incumbent: np.ndarray | None = None
        self.incumbent_time = float("inf")
        self.current: np.ndarray | None = None  # travel: the walk's placement (None: the incumbent)
        self.current_time = float("inf")
        self.walked = 0  # travel: moves the walk accepted that were not a new incumbent
        self._pending: set[bytes] = set()  # travel, kick: the moved placements handed out since the last keep (and the kick)
        self.shares = np.array([1.0 - self.share - self.units, self.share, self.units])
        self.adaptive = bool(adaptive) and bool(self.share or self.units)
        self._faster = np.zeros(3)  # adaptive: discounted samples faster than the incumbent, per kind
        self._tried = np.zeros(3)  # adaptive: discounted samples, per kind
        self._kinds: dict[bytes, int] = {}  # adaptive: moved placements handed out since the last keep -> kind
        self._counting = False  # adaptive: the batch being drawn is not the descent's
        self.neighbours = neighbours if self.units else None
        #: unit_kick: the blocks (or units) a kick moves (0: off; only with the don't-look bits, which say when to kick)
        self.kick = int(kick) if self.neighbours is not None and travel is None else 0
        self.kicks = 0  # unit_kick: kicks handed out
        self._seen: set[bytes] = set()  # unit_kick: digests of the placements measured or handed out
        #: moves_over="groups": the block of each unit, each block's units and size (None: a unit a move)
        self.block_of: np.ndarray | None = None
        self.movable = self.num_units  # what a unit move moves: units, or blocks
        if blocks is not None and self.units:
            self.block_of = np.asarray(blocks, dtype=np.int64)
            self.movable = int(self.block_of.max()) + 1 if len(self.block_of) else 0
            if self.block_of.shape != (self.num_units,) or (len(self.block_of) and (
                    self.block_of.min() < 0 or len(np.unique(self.block_of)) != self.movable)):
                raise ValueError(f"blocks: expected one block index per unit ({self.num_units}), blocks 0..B-1 each used; "
                                 f"got {self.block_of.shape[0]} indices over {len(np.unique(self.block_of))} blocks, "
                                 f"from {int(self.block_of.min()) if len(self.block_of) else 0} to {self.movable - 1}")
            order = np.argsort(self.block_of, kind="stable")
            starts = np.searchsorted(self.block_of[order], np.arange(self.movable + 1))
            self.members = [order[starts[b]:starts[b + 1]] for b in range(self.movable)]
            self.block_size = np.bincount(self.block_of, minlength=self.movable)
        self._untried: np.ndarray | None = None  # dont-look: [U, D] pairs drawable from _dl_base
        self._dl_base: np.ndarray | None = None
        self._dl_moves: dict[bytes, tuple[int, int]] = {}  # dont-look: handed out since the last keep

    @classmethod
    def of_learner(cls, env: Environment, config, rng: np.random.Generator, owns_rng: bool = True) -> ScopeMoves:
        """A learner's scope moves from its config's named options (``scope_moves``, ``scope_travel``,
        ``scope_majority``, ``layer_descent``, its share of ``budget``, ``unit_moves``) over ``env``'s units and devices;
        the descent moves layers to the cluster's GPUs (every device without one).

        The named option ``moves_over="groups"`` (the Hierarchical Planner's and EAGLE's, whose units are
        colocation units; in no paper): where ``env.grouping`` gives the prepared co-location groups that hold
        its units (``coarse_group``, ``coarse_names``: [`compgraph.grouping.coarse_of`][compgraph.grouping.coarse_of]), each unit
        goes by its group's name, so the scopes and the layers are those of the groups (the softmax learners';
        besides, each group of several units is a scope of its own, the deepest), and the unit moves move whole
        groups (``blocks``: the group of each unit). On nmt paper, scope moves,
        layer descent and unit moves alone from the warm start (no policy; 2,400 placements, seeds 0-2,
        medians): over the 5,803 colocation units by their ops' names 1.630 s, over them by their groups'
        names with group moves 1.449 s, over the 502 groups (Post's units) 1.435 s."""
        grouping = env.grouping
        over_groups = (getattr(config, "moves_over", "units") == "groups" and grouping.coarse_group is not None
                       and grouping.coarse_names is not None)
        blocks = grouping.coarse_group if over_groups else None
        names = ([grouping.coarse_names[g] for g in grouping.coarse_group.tolist()]  # type: ignore[index,union-attr]
                 if over_groups else list(grouping.names))
        return cls(names, config.scope_moves, len(env.spec.devices), rng, owns_rng=owns_rng,
                   travel=config.scope_travel, majority=config.scope_majority, units=getattr(config, "unit_moves", 0.0),
                   neighbours=(unit_neighbours(env, blocks) if getattr(config, "unit_dont_look", False)
                               and getattr(config, "unit_moves", 0.0) else None), blocks=blocks,
                   adaptive=getattr(config, "adaptive_shares", False), kick=getattr(config, "unit_kick", 0),
                   descent=round(config.layer_descent * config.budget),
                   descent_devices=(env.spec.gpu_indices or None) if config.layer_descent else None)

    def descending(self) -> bool:
        """``layer_descent``: the descent has placements left and an incumbent to start from."""
        return self.descent is not None and self.incumbent is not None and self.descent.left() > 0

    def rows(self, k: int) -> np.ndarray:
        """Which of ``k`` samples to replace (one coin flip each, at ``share + units``; empty without
        scopes nor unit moves). While the
        layer descent runs ([`descending`][placer.features.ScopeMoves.descending]): the first rows, as many as it
        takes ([`LayerDescent.rows`][placer.features.LayerDescent.rows]; nothing drawn)."""
        if self.descending():
            self._counting = False
            return np.arange(self.descent.rows(k, self.incumbent, self.incumbent_time),  # type: ignore[union-attr,arg-type]
                             dtype=np.int64)
        if not self.share and not self.units:
            return np.zeros(0, dtype=np.int64)
        self._counting = self.adaptive and self.incumbent is not None  # nothing to be faster than: no count
        return np.flatnonzero(self.rng.random(k) < self.shares[1] + self.shares[2])

    def incumbent_rows(self, k: int) -> np.ndarray:
        """[`rows`][placer.features.ScopeMoves.rows] once there is an incumbent; before, none (and nothing drawn)."""
        return self.rows(k) if self.incumbent is not None else np.zeros(0, dtype=np.int64)

    def moved(self, base: np.ndarray | None = None) -> np.ndarray:
        """``base`` (default: the incumbent, or the walk's placement with ``travel``) with one scope
        moved to one device (whole, or with ``majority`` its majority only: [`move_scope`][placer.features.move_scope]), or with
        ``units`` (by a draw) one unit to another device (with ``blocks``, one block whole), a copy ``[U]``.
        While the layer descent runs: its next placement ([`LayerDescent.next`][placer.features.LayerDescent.next]; ``base`` unused)."""
        if self.descending():
            return self.descent.next()  # type: ignore[union-attr]
        if base is None:
            base = self.current if self.current is not None else self.incumbent  # the walk exists only with travel or kick
        p = np.array(base, dtype=np.int64)
        scope, units = self.shares[1], self.shares[2]
        kind = 2
        if units and (not scope or self.rng.random() * (scope + units) < units):
            pair = self._untried_move(p) if self.neighbours is not None else None  # unit_dont_look: one not tried
            if self.neighbours is not None and pair is None:  # unit_kick: a local optimum of the unit moves
                return self._kicked()
            if pair is not None:
                unit, device = pair
            else:  # unit_moves: one unit (block) to another device (any, for a block that is split)
                unit = int(self.rng.integers(self.movable))
                device = self._other_device(p[self._members(unit)])
            p[self._members(unit)] = device
        else:
            move_scope(self.rng, p, self.scopes, self.num_devices, self.majority)
            kind = 1
        key = p.tobytes()
        if self.kick:
            self._seen.add(self._digest(p))
        if kind == 2 and self.neighbours is not None:
            self._dl_moves[key] = (unit, device)
        if self._counting:
            self._kinds[key] = kind
        if self.travel is not None or self.kick:
            self._pending.add(key)
        return p

    def _kicked(self) -> np.ndarray:
        """``unit_kick``: the incumbent with a connected set of at most ``kick`` units (blocks: a unit drawn uniformly,
        then each next one uniformly among the neighbours of those drawn, fewer where they have none) all moved to one device, uniformly among
        those not all of them are on; it becomes the walk's placement (step time unknown until it is
        measured), the moves handed out before it are no longer the walk's, and it is handed out as a unit
        move."""
        assert self.incumbent is not None
        for _ in range(100):  # a kick not seen before (a few tries)
            p = self.incumbent.copy()
            chosen = [int(self.rng.integers(self.movable))]  # a connected set: a unit and neighbours of the set
            while len(chosen) < self.kick:
                frontier = sorted({int(j) for u in chosen for j in self.neighbours[u]} - set(chosen))  # type: ignore[index]
                if not frontier:
                    break
                chosen.append(frontier[int(self.rng.integers(len(frontier)))])
            members = np.concatenate([self._members(u) for u in chosen])
            p[members] = self._other_device(p[members])
            if self._digest(p) not in self._seen:
                break
        self._seen.add(self._digest(p))
        self.current, self.current_time = p.copy(), float("inf")
        self.kicks += 1
        key = p.tobytes()
        self._pending = {key}
        if self._counting:
            self._kinds[key] = 2
        return p

    def keep(self, placements: np.ndarray, times_s: np.ndarray) -> None:
        """Keep the fastest of ``placements`` (``[K, U]``; ``times_s`` ``[K]`` seconds, ``inf`` for OOM,
        or a learner's failing value) if it beats the incumbent (and the walk on it, with ``travel``);
        else, with ``travel``, the walk moves to the last of the batch's scope or unit moves (those
        [`moved`][placer.features.ScopeMoves.moved] handed out since the last call) within ``1 + travel`` of
        the incumbent's time; with ``kick``, a kick's step time is its row's, and the walk moves to the fastest
        of the batch's moves handed out since the last call (since the kick, when the batch holds one; the kick
        included) when faster than it. The layer descent
        ([`LayerDescent.keep`][placer.features.LayerDescent.keep]) sees the batch first."""
        if self.descent is not None:
            self.descent.keep(placements, times_s)
        if self.kick:
            self._seen.update(self._digest(np.asarray(row)) for row in placements)
            if self.current is not None and np.isinf(self.current_time):  # a kick's time, before the moves from it count
                key = self.current.tobytes()
                for row, t in zip(placements, times_s):
                    if np.asarray(row, dtype=np.int64).tobytes() == key:
                        self.current_time = float(t) if np.isfinite(t) else float("inf")
        if self._counting or self._dl_moves:
            self._learn_kinds(placements, times_s)
        if len(times_s) and float(np.min(times_s)) < self.incumbent_time:
            i = int(np.argmin(times_s))
            self.incumbent_time, self.incumbent = float(times_s[i]), np.asarray(placements[i], dtype=np.int64).copy()
            if self.travel is not None or self.kick:
                self.current, self.current_time = self.incumbent.copy(), self.incumbent_time
        elif self.kick and self._pending and self.current is not None:  # unit_kick: the walk's fastest move, if faster
            t_of = np.where(np.isnan(np.asarray(times_s, dtype=np.float64)), np.inf, np.asarray(times_s, dtype=np.float64))
            ours = [i for i, row in enumerate(placements) if np.asarray(row, dtype=np.int64).tobytes() in self._pending]
            i = min(ours, key=lambda j: float(t_of[j])) if ours else -1
            if i >= 0 and float(t_of[i]) < self.current_time:
                self.walked += not np.isinf(self.current_time)  # from an OOM kick: no step
                self.current, self.current_time = np.asarray(placements[i], dtype=np.int64).copy(), float(t_of[i])
        elif self.travel is not None and self._pending:
            bar = self.incumbent_time * (1.0 + self.travel)
            step: tuple[np.ndarray, float] | None = None
            for row, t in zip(placements, times_s):
                row = np.asarray(row, dtype=np.int64)
                if float(t) < bar and row.tobytes() in self._pending:
                    step = (row.copy(), float(t))  # the last such move of the batch
            if step is not None:
                if self.current is None or not np.array_equal(self.current, step[0]):
                    self.walked += 1
                self.current, self.current_time = step
        self._pending.clear()

    def _untried_move(self, base: np.ndarray) -> tuple[int, int] | None:
        """``unit_dont_look``: a (unit, device) pair not tried from ``base``, uniformly (one draw), and
        marked tried; first the pairs of the units that moved since the last base, and of their
        neighbours, are untried again. With ``blocks``: (block, device) pairs, a block that is not all on
        the device."""
        if self._untried is None or self._dl_base is None:
            self._untried = np.ones((self.movable, self.num_devices), dtype=bool)
        else:
            moved = np.flatnonzero(self._dl_base != base)
            if len(moved) and self.block_of is not None:
                moved = np.unique(self.block_of[moved])
            if len(moved):
                self._untried[moved] = True
                for u in moved.tolist():
                    self._untried[self.neighbours[u]] = True  # type: ignore[index]
        self._dl_base = base.copy()
        if self.block_of is None:
            other = np.ones_like(self._untried)
            other[np.arange(self.num_units), base] = False  # a unit's own device is no move
        else:  # a block all on a device has nowhere to go there
            on = np.bincount(self.block_of * self.num_devices + base, minlength=self.movable * self.num_devices)
            other = on.reshape(self.movable, self.num_devices) != self.block_size[:, None]
        last: tuple[int, int] | None = None
        while True:
            if not (self._untried & other).any():  # every move tried from here: all drawable again
                if self.kick and self.incumbent is not None:  # unit_kick: a local optimum, kick instead
                    return None
                if last is not None:  # every move seen, and no incumbent to kick: the last drawn, seen or not
                    return last
                self._untried[:] = True
            pairs = np.flatnonzero((self._untried & other).ravel())
            unit, device = divmod(int(pairs[int(self.rng.integers(len(pairs)))]), self.num_devices)
            self._untried[unit, device] = False
            last = (unit, device)
            if not self.kicks or self._digest(self._apply(base, unit, device)) not in self._seen:
                return unit, device  # unit_kick, once it has kicked: a placement measured or handed out before is not drawn

    def _members(self, unit: int) -> np.ndarray:
        """The units that a unit move of ``unit`` moves: ``[unit]``, or with ``blocks`` the block's units."""
        return self.members[unit] if self.block_of is not None else np.array([unit])

    def _other_device(self, on: np.ndarray) -> int:
        """A device drawn uniformly (one draw) among those not all of ``on`` (the devices of the units to move) are on."""
        whole = bool((on == on[0]).all())
        device = int(self.rng.integers(self.num_devices - whole))
        return device + int(whole and device >= on[0])

    def _apply(self, base: np.ndarray, unit: int, device: int) -> np.ndarray:
        """``base`` with ``unit`` (a block with ``blocks``) on ``device``, a copy."""
        p = base.copy()
        p[self._members(unit)] = device
        return p

    @staticmethod
    def _digest(p: np.ndarray) -> bytes:
        """``unit_kick``: a placement's 16-byte BLAKE2b digest (the memo of placements seen)."""
        import hashlib

        return hashlib.blake2b(np.ascontiguousarray(p, dtype=np.int64).tobytes(), digest_size=16).digest()

    def _learn_kinds(self, placements: np.ndarray, times_s: np.ndarray) -> None:
        """Before the incumbent moves: ``adaptive``, each sample's kind (a handed-out move's, else the
        policy's) counts as faster or not than the incumbent, and the shares follow; ``unit_dont_look``,
        a unit move faster than the incumbent (with ``kick``, than the walk once measured) is drawable again."""
        times = np.asarray(times_s, dtype=np.float64)
        faster = times < self.incumbent_time
        keys = [np.asarray(row, dtype=np.int64).tobytes() for row in placements]
        if self._dl_moves and self._untried is not None:
            walk = self.kick and self.current is not None and np.isfinite(self.current_time)  # unit_kick: the walk's base
            base_faster = times < self.current_time if walk else faster
            for key, fast in zip(keys, base_faster.tolist()):
                pair = self._dl_moves.get(key) if fast else None
                if pair is not None:
                    self._untried[pair] = True
        self._dl_moves.clear()
        if not self._counting or not np.isfinite(self.incumbent_time):
            self._kinds.clear()
            return
        kinds = np.array([self._kinds.get(key, 0) for key in keys], dtype=np.int64)
        self._kinds.clear()
        decay = self.ADAPTIVE_DECAY ** len(kinds)
        self._faster *= decay
        self._tried *= decay
        np.add.at(self._faster, kinds, faster.astype(np.float64))
        np.add.at(self._tried, kinds, 1.0)
        on = np.array([1.0 - self.share - self.units > 1e-9, self.share > 0, self.units > 0])  # a kind at 0 stays 0
        rates = np.where(on & (self._tried > 0), self._faster / np.maximum(self._tried, 1e-12), 0.0)
        if rates.sum() > 0:
            self.shares = np.where(on, self.ADAPTIVE_FLOOR + (1.0 - self.ADAPTIVE_FLOOR * on.sum()) * rates / rates.sum(), 0.0)

    def observe_start(self, start: np.ndarray | None, step_time_s: float | None) -> None:
        """The start is the first incumbent when it ran ([`placer.learner.Learner.observe_start`][placer.learner.Learner.observe_start])."""
        if start is not None and step_time_s is not None:
            self.keep(np.asarray(start, dtype=np.int64)[None, :], np.array([step_time_s], dtype=np.float64))

    def state_dict(self) -> dict:
        """``incumbent`` (a tensor, empty for none), ``incumbent_time``, the generator's state when owned,
        with ``travel`` the walk: ``walk`` (a tensor), ``walk_time``, ``walk_accepted``, with
        ``kick`` the same walk, ``unit_kicks`` and the memo of placements seen (``unit_seen``, ``[N, 16]`` digests), with ``adaptive`` the ``shares`` and their counts (``shares_faster``, ``shares_tried``), with
        ``neighbours`` the moves still drawable (``dont_look_untried``, ``[U, D]``; ``[B, D]`` with ``blocks``) and their base
        (``dont_look_base``), and with the layer descent its state ([`LayerDescent.state_dict`][placer.features.LayerDescent.state_dict])."""
        import json

        import torch

        state = {"incumbent_time": self.incumbent_time,
                 "incumbent": torch.from_numpy(self.incumbent if self.incumbent is not None
                                               else np.zeros(0, dtype=np.int64))}
        if self.travel is not None or self.kick:
            state.update(walk_time=self.current_time, walk_accepted=self.walked,
                         walk=torch.from_numpy(self.current if self.current is not None else np.zeros(0, dtype=np.int64)))
        if self.kick:  # the memo in a stable order, [N, 16] bytes
            state.update(unit_kicks=self.kicks, unit_seen=torch.from_numpy(
                np.frombuffer(b"".join(sorted(self._seen)), dtype=np.uint8).reshape(-1, 16).copy()))
        if self.descent is not None:
            state.update(self.descent.state_dict())
        if self.adaptive:
            state.update(shares=torch.from_numpy(self.shares.copy()), shares_faster=torch.from_numpy(self._faster.copy()),
                         shares_tried=torch.from_numpy(self._tried.copy()))
        if self.neighbours is not None and self._untried is not None and self._dl_base is not None:
            state.update(dont_look_untried=torch.from_numpy(self._untried.copy()),
                         dont_look_base=torch.from_numpy(self._dl_base.copy()))
        if self.owns_rng:
            state["scope_rng"] = json.dumps(self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state: dict) -> None:
        """The inverse of [`state_dict`][placer.features.ScopeMoves.state_dict] (keys absent in older checkpoints: nothing kept)."""
        import json

        if self.owns_rng and "scope_rng" in state:
            self.rng.bit_generator.state = json.loads(state["scope_rng"])
        self.incumbent_time = float(state.get("incumbent_time", float("inf")))
        kept = state["incumbent"].numpy().copy() if "incumbent" in state else np.zeros(0, dtype=np.int64)
        self.incumbent = kept if len(kept) else None
        walk = state["walk"].numpy().copy() if "walk" in state else np.zeros(0, dtype=np.int64)
        self.current = walk if len(walk) else None  # None: the moves start from the incumbent
        self.current_time = float(state.get("walk_time", self.incumbent_time))
        self.walked = int(state.get("walk_accepted", 0))
        self.kicks = int(state.get("unit_kicks", 0))
        if self.kick and "unit_seen" in state:
            self._seen = {bytes(row) for row in state["unit_seen"].numpy().astype(np.uint8)}
        if self.descent is not None:
            self.descent.load_state_dict(state)
        if self.adaptive and "shares" in state:
            self.shares = state["shares"].numpy().astype(np.float64).copy()
            self._faster = state["shares_faster"].numpy().astype(np.float64).copy()
            self._tried = state["shares_tried"].numpy().astype(np.float64).copy()
        if self.neighbours is not None and "dont_look_untried" in state:
            self._untried = state["dont_look_untried"].numpy().astype(bool).copy()
            self._dl_base = state["dont_look_base"].numpy().astype(np.int64).copy()


def initial_state(module) -> dict:
    """A copy of a ``torch.nn.Module``'s parameters and buffers as they are now: a learner's initial
    policy, to which the named option ``restart_after`` returns ([`Restarts`][placer.features.Restarts])."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


class Restarts:
    """A learner's named option ``restart_after`` (in no paper; [`placer.configs.PostConfig`][placer.configs.PostConfig]):
    after ``after`` placements without a faster one, the policy starts again, as a warm start on
    the fastest placement measured so far (the incumbent of [`ScopeMoves`][placer.features.ScopeMoves]).

    The restart is the learner's (``_restart``): its policy back to its initial parameters (Post's
    tables: the start's distribution), with the warm start's bias ([`placer.warm`][placer.warm],
    ``init_prob``) on the incumbent, and its step-time baseline, optimizer and KL coefficient
    afresh. It is an iterated local search (Lourenço, Martin and Stützle, *Iterated Local Search*,
    2003) whose moves are the policy's samples: where a policy update drifts the distribution
    away from the incumbent and stops finding faster placements, the search starts again there.

    Args:
        after: placements without a new incumbent before a restart (``None``: never, the paper's).

    Attributes:
        stale: placements since the incumbent last improved (or since the last restart).
        count: restarts so far.
        centre: int64 ``[U]``, the incumbent of the latest restart (``None`` before one); a learner
            whose warm-start bias is not a parameter (a seq2seq decoder's prior) rebuilds it from
            this after loading a checkpoint.
    """

    def __init__(self, after: int | None) -> None:
        self.after = after
        self.stale, self.count = 0, 0
        self.centre: np.ndarray | None = None

    def due(self, scope: ScopeMoves, before_s: float, k: int) -> np.ndarray | None:
        """After a batch of ``k`` placements: the placement to restart on, or ``None``.

        Args:
            scope: the learner's incumbent, already updated with the batch ([`ScopeMoves.keep`][placer.features.ScopeMoves.keep]).
            before_s: the incumbent's step time before the batch (seconds; ``inf`` before any).
            k: the batch's placements.
        Returns:
            A copy of the incumbent (int64 ``[U]``) when ``after`` placements have passed without a
            faster one, or when the layer descent (``layer_descent``, [`LayerDescent`][placer.features.LayerDescent]) has just
            ended; ``None`` otherwise, or without either option.
        """
        if scope.descent is not None and scope.descent.ended and scope.incumbent is not None:
            scope.descent.ended = False  # the layer descent has ended: the policy starts on its incumbent
            self.stale = 0
            self.centre = np.asarray(scope.incumbent, dtype=np.int64).copy()
            return self.centre.copy()
        if self.after is None:
            return None
        if scope.descending():  # no restart while the layer descent runs (it restarts the policy when it ends)
            self.stale = 0
            return None
        if scope.incumbent_time < before_s:
            self.stale = 0
            return None
        self.stale += int(k)
        if self.stale < self.after or scope.incumbent is None:
            return None
        self.stale, self.count = 0, self.count + 1
        self.centre = np.asarray(scope.incumbent, dtype=np.int64).copy()
        return self.centre.copy()

    def diagnostics(self) -> dict[str, float]:
        """``{"restarts": count}`` with the option, else nothing (the learning curve's extra series)."""
        return {} if self.after is None else {"restarts": float(self.count)}

    def state_dict(self) -> dict:
        """``restart_stale``, ``restarts`` and ``restart_centre`` (a tensor, empty before a restart)."""
        import torch

        return {"restart_stale": self.stale, "restarts": self.count,
                "restart_centre": torch.from_numpy(self.centre if self.centre is not None else np.zeros(0, dtype=np.int64))}

    def load_state_dict(self, state: dict) -> None:
        """The inverse of [`state_dict`][placer.features.Restarts.state_dict] (keys absent in older checkpoints: no restart yet)."""
        self.stale, self.count = int(state.get("restart_stale", 0)), int(state.get("restarts", 0))
        centre = state["restart_centre"].numpy().copy() if "restart_centre" in state else np.zeros(0, dtype=np.int64)
        self.centre = centre if len(centre) else None
