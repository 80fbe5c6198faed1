"""Tests of the learners' features: per-op 2017 features and EAGLE's group embedding, on a
hand-made graph (hand-checked values) and on the real small RNNLM training step."""

from __future__ import annotations

import numpy as np
import pytest

from compgraph.ir import Edge, Grouping, Op, OpGraph
from placer.features import EagleGroupFeatures, OpFeatures, eagle_group_features, group_features, op_features


@pytest.fixture()
def hand():
    """x -> sp (two outputs, both into m) -> m -> r -> big; control edge x -> r."""
    ops = [
        Op("x", "Placeholder", [(4, 3)], [48]),
        Op("sp", "Split", [(4, 1), (4, 2)], [16, 32]),
        Op("m", "MatMul", [(4, -1)], [16]),
        Op("r", "Reshape", [(20,)], [80]),
        Op("big", "Foo", [(1, 2, 3, 4, 5), (6,), (7,)], [480, 24, 28]),
    ]
    edges = [
        Edge(0, 1, 48),
        Edge(1, 2, 16, 0),
        Edge(1, 2, 32, 1),  # a second edge between the same ops: one neighbour
        Edge(2, 3, 16),
        Edge(0, 3, 0, -1, control=True),
        Edge(3, 4, 80),
    ]
    return OpGraph("hand", ops, edges)


def test_op_features_hand(hand):
    f = op_features(hand, max_outputs=2, max_rank=4)
    assert isinstance(f, OpFeatures) and f.num_ops == 5
    # types: sorted names, ids index them
    assert f.type_names == ["Foo", "MatMul", "Placeholder", "Reshape", "Split"]
    assert f.type_ids.dtype == np.int64 and f.type_ids.tolist() == [2, 4, 1, 3, 0]
    # output shapes: each output padded at its end to max_rank, outputs padded to max_outputs
    assert f.output_shapes.dtype == np.float32 and f.output_shapes.shape == (5, 8)
    assert f.output_shapes[0].tolist() == [4, 3, 0, 0, 0, 0, 0, 0]
    assert f.output_shapes[1].tolist() == [4, 1, 0, 0, 4, 2, 0, 0]
    assert f.output_shapes[2].tolist() == [4, -1, 0, 0, 0, 0, 0, 0]  # unknown dim -> -1
    assert f.output_shapes[4].tolist() == [1, 2, 3, 4, 6, 0, 0, 0]  # rank 5 cut to 4; third output dropped
    # adjacency: inputs (ascending) then outputs, 1-based, zero-padded to the largest degree (3)
    assert f.adjacency.dtype == np.int64 and f.adjacency.shape == (5, 3)
    assert f.adjacency.tolist() == [[2, 4, 0], [1, 3, 0], [2, 4, 0], [1, 3, 5], [4, 0, 0]]
    assert f.adjacency_direction.dtype == np.int64
    assert f.adjacency_direction.tolist() == [[1, 1, 0], [-1, 1, 0], [-1, 1, 0], [-1, -1, 1], [-1, 0, 0]]
    # CSR: 0-based, full
    assert f.adj_indptr.dtype == np.int64 and f.adj_indptr.tolist() == [0, 2, 4, 6, 9, 10]
    assert f.neighbours(3).tolist() == [0, 2, 4]
    dense = f.dense_adjacency()
    assert dense.dtype == np.float32 and dense.shape == (5, 5)
    assert np.array_equal(dense, dense.T) and dense.sum() == 10
    assert dense[3].tolist() == [1, 0, 1, 0, 1]


def test_op_features_notes_example():
    # the worked example of the reading notes (004): outputs [20, 40, 20, 30] and [20, 30]
    g = OpGraph("ex", [Op("a", "T", [(20, 40, 20, 30), (20, 30)], [0, 0])], [])
    f = op_features(g, max_outputs=2, max_rank=4)
    assert f.output_shapes[0].tolist() == [20, 40, 20, 30, 20, 30, 0, 0]
    assert f.adjacency.shape == (1, 1) and f.adjacency.tolist() == [[0]]  # no neighbour: padding only


def test_op_features_truncates_neighbours(hand):
    f = op_features(hand, max_neighbours=2)
    assert f.adjacency.shape == (5, 2)
    assert f.adjacency[3].tolist() == [1, 3]  # inputs kept first
    assert f.neighbours(3).tolist() == [0, 2, 4]  # CSR never truncated
    for bad in ({"max_neighbours": 0}, {"max_outputs": 0}, {"max_rank": -1}, {"max_rank": 2.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            op_features(hand, **bad)


def test_eagle_group_features_hand(hand):
    gr = Grouping(np.array([0, 0, 1, 1, 2]), ["x", "m", "big"], "test")
    f = eagle_group_features(hand, gr, max_outputs=2, max_rank=4)
    assert isinstance(f, EagleGroupFeatures) and f.num_groups == 3
    # counts of each type: types Foo, MatMul, Placeholder, Reshape, Split
    assert f.type_counts.dtype == np.float32
    assert f.type_counts.tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 1, 0], [1, 0, 0, 0, 0]]
    # summed output shapes, unknown dims as 0: group 0 = x [4,3,..] + sp [4,1,0,0,4,2,0,0]
    assert f.output_shapes.dtype == np.float32 and f.output_shapes.shape == (3, 8)
    assert f.output_shapes[0].tolist() == [8, 4, 0, 0, 4, 2, 0, 0]
    assert f.output_shapes[1].tolist() == [24, 0, 0, 0, 0, 0, 0, 0]  # m [4, -1 -> 0] + r [20]
    # D[a, b]: op pairs from group a to b: x->sp (0,0); sp->m, x->r (0,1); m->r (1,1); r->big (1,2)
    d = np.array([[1, 2, 0], [0, 1, 1], [0, 0, 0]], dtype=np.float32)
    assert f.adjacency.dtype == np.float32 and f.adjacency.shape == (3, 6)
    assert np.array_equal(f.adjacency, np.concatenate([d, d.T], axis=1))
    # the embedding: [adjacency, counts, shapes] / (row max + 1)
    e = f.embedding()
    assert e.dtype == np.float32 and e.shape == (3, 6 + 5 + 8)
    row0 = np.concatenate([[1, 2, 0, 1, 0, 0], [0, 0, 1, 0, 1], [8, 4, 0, 0, 4, 2, 0, 0]]) / 9.0
    assert np.allclose(e[0], row0)
    assert f.embedding(include_adjacency=False).shape == (3, 5 + 8)


def test_eagle_rejects_mismatched_grouping(hand):
    with pytest.raises(ValueError, match="op_group has shape"):
        eagle_group_features(hand, Grouping(np.array([0, 0]), ["a"], "t"))


def test_features_on_rnnlm(rnnlm_small):
    g, gr = rnnlm_small.graph, rnnlm_small.grouping
    n = g.num_ops
    f = op_features(g)
    assert f.type_ids.shape == (n,) and f.type_ids.dtype == np.int64
    assert f.type_ids.max() == len(f.type_names) - 1
    assert f.output_shapes.shape == (n, 24) and f.output_shapes.dtype == np.float32
    assert f.adjacency.dtype == np.int64 and f.adjacency.shape[0] == n
    assert f.adjacency.max() <= n and f.adjacency.min() == 0
    pairs = {(e.src, e.dst) for e in g.edges}
    assert f.adj_indices.shape == (2 * len(pairs),)  # every neighbour pair, once from each side
    mm = g.index["rnnlm/layer_0/step_0/MatMul"]
    assert f.output_shapes[mm, :2].tolist() == [64, 2048]  # batch 64, 4 x 512 gates
    ef = eagle_group_features(g, gr)
    k = gr.num_groups
    assert ef.type_counts.shape == (k, len(f.type_names)) and ef.type_counts.sum() == n
    assert ef.adjacency.shape == (k, 2 * k) and ef.adjacency[:, :k].sum() == len(pairs)
    assert ef.embedding().shape == (k, 2 * k + len(f.type_names) + 24)
    assert np.all(ef.embedding() < 1.0) and np.all(ef.embedding() >= 0.0)
    # the current placer's features still work
    old = group_features(g, gr)
    assert old.adjacency.shape == (k, k)
