"""Group embeddings for the 2017 placer (Mirhoseini et al. 2017, Sec. 3.2).

The paper embeds each operation as the concatenation of (1) a tunable embedding of its
type, (2) its output shapes concatenated into a fixed-size zero-padded list and (3) a
one-hot encoding of the operations that are its direct inputs and outputs. We place
co-location groups, so a group's inputs are:

* ``type_counts``: float32 ``[num_groups, num_types]``, the fraction of the group's ops
  of each type. The placer multiplies it by a tunable ``[num_types, d]`` table: the mean
  of the tunable type embeddings of the group's ops.
* ``output_shapes``: float32 ``[num_groups, max_outputs * max_rank]``: the shapes of the
  tensors leaving the group (largest first), each zero-padded to ``max_rank`` dims, the
  list zero-padded to ``max_outputs`` tensors; values are ``log1p(dim)`` so that 2048
  and 4 are on one scale.
* ``adjacency``: float32 ``[num_groups, num_groups]``, 1 where a group is a direct input
  or output of the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compgraph.ir import Grouping, OpGraph


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
    """Compute :class:`GroupFeatures` for ``grouping`` of ``graph``."""
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
        for j, ((op, out), _) in enumerate(tensors):
            dims = graph.ops[op].output_shapes[out][:max_rank]
            for k, dim in enumerate(dims):
                shapes[gi, j * max_rank + k] = np.log1p(max(dim, 0))
    return GroupFeatures(counts, shapes, adjacency, types)
