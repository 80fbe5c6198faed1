"""Tests of the compgraph stage: TF GraphDef importer, FLOPs rules, 2017 co-location grouping,
the small RNNLM training step and ``prepare``'s argument checks."""

from __future__ import annotations

import re

import pytest

from compgraph import costs
from compgraph.grouping import group_ops
from compgraph.ir import Edge, Op, OpGraph
from compgraph.models.rnnlm import model_rule

# --------------------------------------------------------------------------------------
# 1. the importer on a tiny real TensorFlow training graph
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    """x[4,3] @ W[3,2] -> reduce_sum, Adam, plus an initializer; returns (graph_def, OpGraph, names)."""
    from compgraph.tf_env import import_tensorflow
    from compgraph.tf_import import import_graph_def

    tf = import_tensorflow()
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [4, 3], name="x")
        w = v1.get_variable("W", [3, 2])
        y = tf.matmul(x, w)
        loss = tf.reduce_sum(y)
        train_op = v1.train.AdamOptimizer(0.1).minimize(loss, colocate_gradients_with_ops=True)
        init = v1.global_variables_initializer()
    gd = graph.as_graph_def(add_shapes=True)
    og = import_graph_def(gd, [train_op.name, loss.op.name])
    names = {"x": x.op.name, "W": w.op.name, "matmul": y.op.name, "loss": loss.op.name,
             "train": train_op.name, "init": init.name}
    return gd, og, names


def _op(og: OpGraph, name: str) -> Op:
    return og.ops[og.index[name]]


def _ops_of_type(og: OpGraph, op_type: str) -> list[Op]:
    return [op for op in og.ops if op.type == op_type]


def test_tiny_initializers_pruned(tiny):
    gd, og, names = tiny
    gd_names = {n.name for n in gd.node}
    assert names["init"] in gd_names  # the initializer exists in the GraphDef...
    assert names["init"] not in og.index  # ...but is not part of the step
    for n in ("W/Assign", "W/Initializer/random_uniform", "W/Adam/Initializer/zeros", "beta1_power/Assign"):
        assert n in gd_names and n not in og.index, n
    assert not any(op.type in ("VarIsInitializedOp", "RandomUniform") for op in og.ops)
    assert not any(op.name.endswith("/Assign") for op in og.ops)
    # every kept op comes from the GraphDef, and the fetches are kept
    assert set(og.index) <= gd_names
    assert og.num_ops < len(gd_names)
    assert names["train"] in og.index and names["loss"] in og.index
    assert og.fetches == [names["train"], names["loss"]]


def test_tiny_matmul_shapes_bytes_flops_kernel(tiny):
    _, og, names = tiny
    mm = _op(og, names["matmul"])
    assert mm.type == "MatMul"
    assert mm.output_shapes == [(4, 2)]
    assert mm.output_bytes == [32]
    assert mm.alloc_bytes == 32
    assert mm.flops == 2 * 4 * 2 * 3 == 48
    # bytes accessed: x (48) + W read (24) + output (32)
    assert mm.bytes_accessed == 48 + 24 + 32
    assert mm.gpu_kernel is True
    # the gradient w.r.t. W is x^T @ dy (transpose_a): K = 4, out (3, 2) -> 2*6*4
    dw = _op(og, "gradients/MatMul_grad/MatMul_1")
    assert dw.output_shapes == [(3, 2)]
    assert dw.flops == 2 * 3 * 2 * 4


def test_tiny_variables_and_adam_slots(tiny):
    _, og, names = tiny
    w = _op(og, names["W"])
    assert w.type == "VarHandleOp"
    assert w.param_bytes == 3 * 2 * 4 == 24
    for slot in ("W/Adam", "W/Adam_1"):
        assert slot in og.index, slot
        assert _op(og, slot).param_bytes == 24
    for power in ("beta1_power", "beta2_power"):
        assert _op(og, power).param_bytes == 4
    # only variables hold parameters
    assert all(op.param_bytes == 0 for op in og.ops if op.type != "VarHandleOp")
    assert og.total_param_bytes() == 3 * 24 + 2 * 4


def test_tiny_apply_adam_colocated_with_variable(tiny):
    _, og, names = tiny
    (apply,) = _ops_of_type(og, "ResourceApplyAdam")
    assert names["W"] in apply.colocation
    assert {"W/Adam", "W/Adam_1"} <= set(apply.colocation)
    assert apply.flops == 10 * 3 * 2
    # colocation names only ops of the graph, never the op itself
    for op in og.ops:
        assert op.name not in op.colocation
        assert all(c in og.index for c in op.colocation)


def test_tiny_read_variable_is_alias(tiny):
    _, og, names = tiny
    read = _op(og, "MatMul/ReadVariableOp")
    assert read.type == "ReadVariableOp"
    assert read.output_bytes == [24]
    assert read.alloc_bytes == 0
    assert read.bytes_accessed == 0.0
    assert names["W"] in read.colocation  # resource input
    for op in _ops_of_type(og, "ReadVariableOp"):
        assert op.alloc_bytes == 0


def test_tiny_edges_carry_tensor_bytes(tiny):
    _, og, names = tiny
    ix, imm = og.index[names["x"]], og.index[names["matmul"]]
    (e,) = [e for e in og.edges if e.src == ix and e.dst == imm]
    assert e.bytes == 48 and not e.control and e.src_output == 0
    # the read of W feeds MatMul with the 24 bytes of W
    (e2,) = [e for e in og.edges if e.src == og.index["MatMul/ReadVariableOp"] and e.dst == imm]
    assert e2.bytes == 24
    # MatMul -> Sum: the (4, 2) product
    (e3,) = [e for e in og.edges if e.src == imm and e.dst == og.index[names["loss"]]]
    assert e3.bytes == 32
    # every data edge carries exactly the bytes of its source output
    for e in og.edges:
        if not e.control:
            assert e.bytes == og.ops[e.src].output_bytes[e.src_output]
    # edges follow the op order (topological)
    assert all(e.src < e.dst for e in og.edges)


def test_tiny_control_edges(tiny):
    _, og, names = tiny
    control = [e for e in og.edges if e.control]
    assert control
    for e in control:
        assert e.bytes == 0
        assert e.src_output == -1
    (apply,) = _ops_of_type(og, "ResourceApplyAdam")
    ia, it = og.index[apply.name], og.index[names["train"]]
    assert any(e.src == ia and e.dst == it and e.control and e.bytes == 0 for e in og.edges)


def test_tiny_missing_fetch_raises(tiny):
    from compgraph.tf_import import import_graph_def

    gd, _, names = tiny
    with pytest.raises(ValueError, match="no_such_fetch"):
        import_graph_def(gd, [names["train"], "no_such_fetch"])


def test_function_library_raises():
    from compgraph.tf_env import import_tensorflow
    from compgraph.tf_import import import_graph_def

    tf = import_tensorflow()
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():

        @tf.function(autograph=False)
        def double(a):
            return a * 2.0

        a = v1.placeholder(tf.float32, [2])
        b = double(a)
    gd = graph.as_graph_def()
    assert len(gd.library.function) > 0
    with pytest.raises(ValueError, match="function"):
        import_graph_def(gd, [b.op.name])


# --------------------------------------------------------------------------------------
# 2. GPU kernels
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("op_type", "expected"), [("MatMul", True), ("NoOp", True), ("StringJoin", False)])
def test_has_gpu_kernel(op_type, expected):
    from compgraph.tf_import import has_gpu_kernel

    assert has_gpu_kernel(op_type) is expected


# --------------------------------------------------------------------------------------
# 3. FLOPs rules
# --------------------------------------------------------------------------------------


def test_flops_matmul_transpose_a():
    # a: [K=3, M=4] transposed, b: [3, 2] -> out [4, 2]: K = a[0] = 3
    assert costs.estimate_flops("MatMul", [(3, 4), (3, 2)], [(4, 2)], {"transpose_a": True}) == 2 * 8 * 3
    # without transpose, a: [4, 3] -> K = a[1] = 3 as well; a [3, 5] untransposed -> K = 5
    assert costs.estimate_flops("MatMul", [(4, 3), (3, 2)], [(4, 2)]) == 2 * 8 * 3
    assert costs.estimate_flops("MatMul", [(3, 5), (5, 2)], [(3, 2)], {"transpose_a": False}) == 2 * 6 * 5
    assert costs.estimate_flops("MatMul", [(5, 3), (5, 2)], [(3, 2)], {"transpose_a": True}) == 2 * 6 * 5


def test_flops_addn_elementwise_reduction():
    assert costs.estimate_flops("AddN", [(2, 5)] * 3, [(2, 5)]) == 2 * 10
    assert costs.estimate_flops("AddN", [(2, 5)], [(2, 5)]) == 0
    assert costs.estimate_flops("Tanh", [(3, 4)], [(3, 4)]) == 12
    assert costs.estimate_flops("Mul", [(3, 4), ()], [(3, 4)]) == 12
    # reductions count their input, not their output
    assert costs.estimate_flops("Sum", [(3, 4), (1,)], [(4,)]) == 12
    assert costs.estimate_flops("Mean", [(6, 7), (2,)], [()]) == 42
    # a type without a rule costs 0
    assert costs.estimate_flops("FrobnicateV9", [(3, 4)], [(3, 4)]) == 0.0


def test_unknown_flop_types():
    out = costs.unknown_flop_types(["MatMul", "FrobnicateV9", "Relu", "FrobnicateV9", "NoOp"])
    assert out == ["FrobnicateV9"]
    assert costs.unknown_flop_types(["MatMul", "AddN", "Sum"]) == []


# --------------------------------------------------------------------------------------
# 4. grouping rules on hand-built graphs
# --------------------------------------------------------------------------------------


def _mk(names, edges=(), coloc=None, params=None):
    coloc = coloc or {}
    params = params or {}
    ops = [Op(n, "Add", [(1,)], [4], colocation=list(coloc.get(n, [])), param_bytes=params.get(n, 0)) for n in names]
    idx = {n: i for i, n in enumerate(names)}
    es = [Edge(idx[a], idx[b], 4) for a, b in edges]
    return OpGraph("t", ops, es)


def _same(graph, grouping, *names) -> bool:
    return len({int(grouping.op_group[graph.index[n]]) for n in names}) == 1


def test_grouping_colocation():
    g = _mk(["p", "q", "r", "s", "t"], coloc={"q": ["p"], "r": ["q"], "t": []})
    gr = group_ops(g)
    assert _same(g, gr, "p", "q", "r")  # transitive
    assert not _same(g, gr, "p", "s")
    assert not _same(g, gr, "s", "t")
    assert gr.num_groups == 3
    assert gr.names == ["p", "s", "t"]
    # the op_group array covers every op with valid group ids
    assert sorted(set(gr.op_group.tolist())) == list(range(gr.num_groups))


def test_grouping_single_consumer_chain():
    # a -> b -> c ; d -> c ; d -> e : a, b single consumers; d has two consumers
    g = _mk(["a", "b", "d", "c", "e"], edges=[("a", "b"), ("b", "c"), ("d", "c"), ("d", "e")])
    gr = group_ops(g)
    assert _same(g, gr, "a", "b", "c")
    assert not _same(g, gr, "d", "c")
    assert not _same(g, gr, "d", "e")
    assert gr.num_groups == 3


def test_grouping_single_consumer_recursive():
    # diamond x -> {y, z} -> w: x has two consumers at first; y and z merge into w,
    # then x's outputs all go to the one group {y, z, w} and it merges too.
    g = _mk(["x", "y", "z", "w", "lone"], edges=[("x", "y"), ("x", "z"), ("y", "w"), ("z", "w")])
    gr = group_ops(g)
    assert _same(g, gr, "x", "y", "z", "w")
    assert not _same(g, gr, "x", "lone")
    assert gr.num_groups == 2


def test_grouping_single_consumer_sees_colocated_units():
    # m feeds u1 and u2 (two ops) that are colocated: one consumer *group* -> merged
    g = _mk(["m", "u1", "u2"], edges=[("m", "u1"), ("m", "u2")], coloc={"u2": ["u1"]})
    gr = group_ops(g)
    assert gr.num_groups == 1


def test_grouping_model_rule():
    # u -> a1 merges by the single-consumer rule (group keyed A through a1);
    # a1, a2 carry key A; m1 (A) colocated with m2 (B): a two-key group; b1 (B); n unkeyed.
    keys = {"a1": "A", "a2": "A", "m1": "A", "m2": "B", "b1": "B"}
    g = _mk(["u", "a1", "a2", "m1", "m2", "b1", "n"], edges=[("u", "a1")], coloc={"m2": ["m1"]})
    gr = group_ops(g, rule=keys.get)
    assert _same(g, gr, "u", "a1", "a2")
    assert gr.names[gr.op_group[g.index["a1"]]] == "A"
    assert gr.names[gr.op_group[g.index["b1"]]] == "B"
    # the two-key group stays on its own, named by its first op
    assert _same(g, gr, "m1", "m2")
    assert not _same(g, gr, "m1", "a1")
    assert not _same(g, gr, "m2", "b1")
    assert gr.names[gr.op_group[g.index["m1"]]] == "m1"
    # unkeyed ops are untouched
    assert not any(_same(g, gr, "n", other) for other in ("u", "a1", "m1", "b1"))
    assert gr.num_groups == 4
    assert len(set(gr.names)) == gr.num_groups
    # without the rule the keyed ops stay apart
    gr0 = group_ops(g)
    assert not _same(g, gr0, "a1", "a2")


def test_grouping_named_after_variable():
    g = _mk(["r", "v"], edges=[("r", "v")], params={"v": 24})
    gr = group_ops(g)
    assert gr.names == ["v"]


def test_grouping_never_splits_colocation(rnnlm_small):
    g, gr = rnnlm_small.graph, rnnlm_small.grouping
    pairs = [(i, g.index[c]) for i, op in enumerate(g.ops) for c in op.colocation]
    assert len(pairs) > 500
    split = [(g.ops[a].name, g.ops[b].name) for a, b in pairs if gr.op_group[a] != gr.op_group[b]]
    assert split == []


# --------------------------------------------------------------------------------------
# 5. the small RNNLM
# --------------------------------------------------------------------------------------


def test_rnnlm_counts(rnnlm_small):
    g, gr = rnnlm_small.graph, rnnlm_small.grouping
    assert g.num_ops > 1000
    assert 40 <= gr.num_groups <= 100
    assert len(gr.op_group) == g.num_ops
    assert len(set(gr.names)) == gr.num_groups
    assert sorted(set(gr.op_group.tolist())) == list(range(gr.num_groups))
    assert gr.grouper == "2017"
    c = rnnlm_small.config
    for layer in range(c.num_layers):
        for step in range(c.num_steps):
            assert f"rnnlm/layer_{layer}/step_{step}" in gr.names
    for step in range(c.num_steps):
        assert f"rnnlm/softmax/step_{step}" in gr.names


def test_rnnlm_group_names(rnnlm_small):
    names = set(rnnlm_small.grouping.names)
    for n in ("rnnlm/layer_0/step_0", "rnnlm/layer_1/step_7", "rnnlm/softmax/step_3"):
        assert n in names


#: the ops of an LSTM cell that TF colocation does not tie to a neighbouring step or to
#: the embedding lookup (see test_rnnlm_cell_groups_hold_forward_and_gradient)
_CELL_CORE = ("MatMul", "BiasAdd", "split", "add", "add_1", "mul_1", "mul_2",
              "Sigmoid", "Sigmoid_1", "Sigmoid_2", "Tanh", "Tanh_1")
_CELL_CORE_GRADS = ("MatMul_grad/MatMul", "MatMul_grad/MatMul_1", "BiasAdd_grad/BiasAddGrad",
                    "split_grad/concat", "Sigmoid_grad/SigmoidGrad", "Sigmoid_1_grad/SigmoidGrad",
                    "Sigmoid_2_grad/SigmoidGrad", "Tanh_grad/TanhGrad", "Tanh_1_grad/TanhGrad",
                    "mul_1_grad/Mul", "mul_1_grad/Mul_1", "mul_2_grad/Mul", "mul_2_grad/Mul_1")


def test_rnnlm_cell_groups_hold_forward_and_gradient(rnnlm_small):
    """Each cell group holds its forward MatMul and its gradient ops.

    Not *all* ops named ``gradients/rnnlm/layer_L/step_T/``: TensorFlow itself colocates
    ``add_1_grad/tuple/*`` of step T with ``mul`` of step T+1 (through the gradient AddN),
    and the single-consumer rule joins layer 0's ``concat`` (and its colocated gradient)
    with the embedding lookup feeding it. Those groups carry two model keys, so the model
    rule leaves them alone (documented in compgraph.grouping); every gradient op outside
    its cell group must sit in such a multi-key group.
    """
    g, gr = rnnlm_small.graph, rnnlm_small.grouping
    c = rnnlm_small.config
    members = gr.members()
    group_keys = [{model_rule(g.ops[i].name) for i in m} - {None} for m in members]
    for layer in range(c.num_layers):
        for step in range(c.num_steps):
            key = f"rnnlm/layer_{layer}/step_{step}"
            cell = gr.names.index(key)
            assert gr.op_group[g.index[f"{key}/MatMul"]] == cell
            for n in _CELL_CORE:
                assert gr.op_group[g.index[f"{key}/{n}"]] == cell, n
            for n in _CELL_CORE_GRADS:
                assert gr.op_group[g.index[f"gradients/{key}/{n}"]] == cell, n
            grads = [i for i, op in enumerate(g.ops) if op.name.startswith(f"gradients/{key}/")]
            assert len(grads) > 40
            inside = [i for i in grads if gr.op_group[i] == cell]
            assert len(inside) >= 0.6 * len(grads)
            for i in grads:
                if gr.op_group[i] != cell:
                    assert len(group_keys[gr.op_group[i]]) >= 2, g.ops[i].name
            # the cell group holds ops of this cell only (forward and gradient) plus unkeyed ops
            assert group_keys[cell] == {key}


def test_rnnlm_gpu_kernels_and_flops_rules(rnnlm_small):
    assert all(op.gpu_kernel for op in rnnlm_small.graph.ops)
    stats = rnnlm_small.stats()
    assert stats["ops_without_gpu_kernel"] == 0
    assert stats["op_types_without_flops_rule"] == []
    assert stats["ops"] == rnnlm_small.graph.num_ops
    assert stats["groups"] == rnnlm_small.grouping.num_groups
    assert stats["total_flops"] > 0


def test_rnnlm_param_bytes(rnnlm_small):
    c = rnnlm_small.config
    v, h, n_layers = c.vocab_size, c.hidden_size, c.num_layers
    n_params = v * h + n_layers * (2 * h * 4 * h + 4 * h) + h * v + v
    expected = 3 * 4 * n_params + 2 * 4  # weights + Adam m and v (float32) + beta1/beta2 powers
    assert rnnlm_small.graph.total_param_bytes() == expected
    assert rnnlm_small.stats()["param_bytes"] == expected


def test_rnnlm_forward_matmul_flops(rnnlm_small):
    c = rnnlm_small.config
    g = rnnlm_small.graph
    mm = g.ops[g.index["rnnlm/layer_0/step_0/MatMul"]]
    assert mm.output_shapes == [(c.batch_size, 4 * c.hidden_size)]
    assert mm.flops == 2 * c.batch_size * 4 * c.hidden_size * 2 * c.hidden_size


# --------------------------------------------------------------------------------------
# 6. prepare's argument checks
# --------------------------------------------------------------------------------------


def test_prepare_unknown_model():
    from compgraph.prepare import prepare

    with pytest.raises(ValueError, match=r"'nope'.*rnnlm"):
        prepare("nope")


def test_prepare_unknown_size():
    from compgraph.prepare import prepare

    with pytest.raises(ValueError, match=re.escape("'huge'")) as exc:
        prepare("rnnlm", "huge")
    assert "small" in str(exc.value) and "paper" in str(exc.value)
