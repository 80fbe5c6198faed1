"""The project's graph IR: ops, tensor edges and co-location groups.

An [`OpGraph`][compgraph.ir.OpGraph] is the training step of a model as a DAG of ops. Each op carries
what placement needs (type, output shapes and bytes, estimated FLOPs, bytes it reads
and writes, resident parameter bytes, GPU-kernel availability, colocation constraints);
each [`Edge`][compgraph.ir.Edge] carries the bytes of the tensor it moves (0 for a control edge).
A [`Grouping`][compgraph.ir.Grouping] maps every op to a co-location group; placements are made per group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np


@dataclass
class Op:
    """One op of the graph.

    Attributes:
        name: unique TensorFlow node name, e.g. ``rnnlm/layer_0/step_3/MatMul``.
        type: TensorFlow op type, e.g. ``MatMul``.
        output_shapes: one tuple per output; ``-1`` marks an unknown dimension.
        output_bytes: bytes of each output tensor (unknown dimensions count as 1).
        flops: estimated floating-point operations of one execution (FLOP).
        bytes_accessed: bytes read plus bytes written by one execution (roofline memory term).
        alloc_bytes: bytes of new device memory its outputs occupy (0 for ops whose
            outputs alias an input, such as ``Identity`` or ``ReadVariableOp``).
        param_bytes: bytes resident for the whole step (variables: weights and optimizer slots).
        gpu_kernel: TensorFlow's kernel registry has a GPU kernel for this op type.
        colocation: names of ops this op must share a device with (TensorFlow's
            ``_class`` colocation attribute and ops reached through resource inputs).
        dtype: the precision its FLOPs run in (``float32``, ``bfloat16``, ``float16``...): the
            matrix units' peak a GPU offers a dense op or convolution depends on it
            ([`cluster.cost_model`][cluster.cost_model]). ``float32`` for the TensorFlow importer's ops.
        op_class: its compute class for the cost model, ``dense`` (matrix products), ``conv``
            (convolutions) or ``other``, set by a front end's importer; empty: its front end's
            class of ``type`` ([`compgraph.frontends.op_class`][compgraph.frontends.op_class]).
    """

    name: str
    type: str
    output_shapes: list[tuple[int, ...]]
    output_bytes: list[int]
    flops: float = 0.0
    bytes_accessed: float = 0.0
    alloc_bytes: int = 0
    param_bytes: int = 0
    gpu_kernel: bool = True
    colocation: list[str] = field(default_factory=list)
    dtype: str = "float32"
    op_class: str = ""


@dataclass(frozen=True)
class Edge:
    """A dependency ``src -> dst`` (op indices). ``bytes`` is 0 for a control edge."""

    src: int
    dst: int
    bytes: int
    src_output: int = 0
    control: bool = False


@dataclass
class OpGraph:
    """A training-step graph: ops in a topological order and the edges between them.

    Raises:
        ValueError: if an edge names an op index out of range or the graph has a cycle.
    """

    name: str
    ops: list[Op]
    edges: list[Edge]
    fetches: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.ops)
        for e in self.edges:
            if not (0 <= e.src < n and 0 <= e.dst < n):
                raise ValueError(f"edge {e.src}->{e.dst}: op index out of range 0..{n - 1}")
        if not nx.is_directed_acyclic_graph(self.to_networkx()):
            raise ValueError(f"graph {self.name!r}: has a cycle")

    @cached_property
    def index(self) -> dict[str, int]:
        """Op name -> op index."""
        return {op.name: i for i, op in enumerate(self.ops)}

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    def to_networkx(self) -> nx.DiGraph:
        """A ``networkx.DiGraph`` on op indices; edge attribute ``bytes`` sums parallel edges."""
        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.ops)))
        for e in self.edges:
            if g.has_edge(e.src, e.dst):
                g[e.src][e.dst]["bytes"] += e.bytes
            else:
                g.add_edge(e.src, e.dst, bytes=e.bytes)
        return g

    @cached_property
    def topological_order(self) -> np.ndarray:
        """Op indices in a deterministic topological order (lexicographic on index)."""
        return np.array(list(nx.lexicographical_topological_sort(self.to_networkx())), dtype=np.int64)

    def total_flops(self) -> float:
        """Sum of the ops' estimated FLOPs (FLOP)."""
        return float(sum(op.flops for op in self.ops))

    def total_param_bytes(self) -> int:
        """Sum of the resident parameter and optimizer-slot bytes (bytes)."""
        return int(sum(op.param_bytes for op in self.ops))


@dataclass
class Grouping:
    """Co-location groups of an [`OpGraph`][compgraph.ir.OpGraph].

    Attributes:
        op_group: int array of shape ``[num_ops]``: the group index of each op.
        names: ``[num_groups]`` unique, stable group names (a model-rule key such as
            ``rnnlm/layer_0/step_3``, or the name of the group's first op).
        grouper: name of the grouping rules that produced it.
        coarse_group: for a finer grouping (the colocation units a learner that groups ops itself
            places, [`tasks.search.learner_grouping`][tasks.search.learner_grouping]), int64 ``[num_groups]``: the group of the
            coarser grouping (the prepared co-location groups) that holds each of its groups; ``None``:
            none given. Read by the named option ``moves_over`` ([`placer.features.ScopeMoves.of_learner`][placer.features.ScopeMoves.of_learner]).
        coarse_names: with ``coarse_group``, the coarser grouping's ``[C]`` group names.
    Groups are numbered in the topological order of their first op.
    """

    op_group: np.ndarray
    names: list[str]
    grouper: str = ""
    coarse_group: np.ndarray | None = None
    coarse_names: list[str] | None = None

    @property
    def num_groups(self) -> int:
        return len(self.names)

    def members(self) -> list[list[int]]:
        """Op indices of each group, ``[num_groups][*]``."""
        out: list[list[int]] = [[] for _ in self.names]
        for op, g in enumerate(self.op_group.tolist()):
            out[g].append(op)
        return out

    def expand(self, group_placement: np.ndarray) -> np.ndarray:
        """Per-group device indices ``[num_groups]`` -> per-op device indices ``[num_ops]``."""
        return np.asarray(group_placement, dtype=np.int64)[self.op_group]

    def group_edges(self, graph: OpGraph) -> dict[tuple[int, int], int]:
        """Edges between distinct groups: ``(src_group, dst_group) -> bytes`` (summed)."""
        out: dict[tuple[int, int], int] = {}
        og = self.op_group
        for e in graph.edges:
            a, b = int(og[e.src]), int(og[e.dst])
            if a != b:
                out[(a, b)] = out.get((a, b), 0) + e.bytes
        return out
