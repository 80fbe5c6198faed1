"""FLOPs rules added for the CNN benchmarks, and TF1 loops in users' graphs."""

from compgraph.costs import estimate_flops, unknown_flop_types


def test_pooling_flops_use_the_window():
    # 2x8x8x3 -> 2x4x4x3 with a 2x2 window: 96 outputs x 4 window elements.
    assert estimate_flops("MaxPool", [(2, 8, 8, 3)], [(2, 4, 4, 3)], {"ksize": [1, 2, 2, 1]}) == 384
    assert estimate_flops("AvgPool", [(2, 8, 8, 3)], [(2, 4, 4, 3)], {"ksize": [1, 3, 3, 1]}) == 864
    # MaxPoolGrad(orig_in, orig_out, grad): per gradient element x window.
    assert estimate_flops("MaxPoolGrad", [(2, 8, 8, 3), (2, 4, 4, 3), (2, 4, 4, 3)], [(2, 8, 8, 3)], {"ksize": [1, 2, 2, 1]}) == 384
    # No ksize: n(input).
    assert estimate_flops("MaxPool", [(2, 8, 8, 3)], [(2, 4, 4, 3)]) == 384
    assert unknown_flop_types(["MaxPool", "AvgPoolGrad", "ResourceApplyMomentum"]) == []


def test_momentum_counts_the_variable_not_the_scalar_momentum():
    # ResourceApplyMomentum(var handle, accum handle, lr, grad, momentum)
    shapes = [(), (), (), (10, 20), ()]
    assert estimate_flops("ResourceApplyMomentum", shapes, []) == 4 * 200
    assert estimate_flops("ResourceApplyMomentum", shapes, [], {"use_nesterov": True}) == 5 * 200


def test_tf1_while_loop_imports_as_one_iteration():
    from compgraph.tf_env import import_tensorflow
    from compgraph.tf_import import import_graph_def

    tf = import_tensorflow()
    v1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [4, 4], name="x")
        _, y = v1.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.matmul(a, a)), [tf.constant(0), x])
        out = tf.identity(y, name="out")
    graph = import_graph_def(g.as_graph_def(add_shapes=True), [out.op.name], name="loop")
    types = {op.type for op in graph.ops}
    assert {"Merge", "NextIteration", "MatMul"} <= types
    # the NextIteration -> Merge back edges are dropped: the graph is a DAG (OpGraph checks it)
    merges = [i for i, op in enumerate(graph.ops) if op.type == "Merge"]
    assert all(graph.ops[e.src].type != "NextIteration" for e in graph.edges if e.dst in merges)
