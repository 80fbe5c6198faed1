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


# --------------------------------------------------------------------------------------
# rules for today's models (hand-computed)
# --------------------------------------------------------------------------------------


def test_einsum_attention_scores_and_context():
    from compgraph.costs import einsum_flops, has_flop_rule

    # scores: q[b=2, q=5, h=4, d=8] . k[b=2, k=7, h=4, d=8] -> [2, 4, 5, 7]; d is summed:
    # 2 * (b q h d k) = 2 * 2*5*4*8*7 = 4480
    assert estimate_flops("Einsum", [(2, 5, 4, 8), (2, 7, 4, 8)], [(2, 4, 5, 7)], {"equation": "bqhd,bkhd->bhqk"}) == 4480
    # context: p[2,4,5,7] . v[2,7,4,8] -> [2,5,4,8]; k summed: 2 * 2*4*5*7*8 = 4480
    assert einsum_flops("acbe,aecd->abcd", [(2, 4, 5, 7), (2, 7, 4, 8)]) == 4480
    # Keras' dense projection "abc,cde->abde": x[2,5,16], W[16,4,8]: 2 * 2*5*16*4*8 = 10240
    assert einsum_flops("abc,cde->abde", [(2, 5, 16), (16, 4, 8)]) == 10240
    # ellipsis broadcast, right-aligned: [3,2,4,5] . [5,6] -> [3,2,4,6]: 2 * 3*2*4*5*6
    assert einsum_flops("...ij,jk->...ik", [(3, 2, 4, 5), (5, 6)]) == 1440
    # no summed label: element-wise / outer products cost one multiply per output
    assert einsum_flops("ab,ab->ab", [(3, 4), (3, 4)]) == 12
    assert einsum_flops("a,b->ab", [(3,), (4,)]) == 12
    # one operand: a transpose is free, a reduction adds every element
    assert einsum_flops("ab->ba", [(3, 4)]) == 0 and einsum_flops("ab->a", [(3, 4)]) == 12
    # malformed: 0 FLOPs, never an exception from estimate_flops
    assert estimate_flops("Einsum", [(2, 3)], [(2, 3)], {"equation": "abc->a"}) == 0
    assert has_flop_rule("Einsum")


def test_batch_matmul_v2_v3_and_adjoint():
    # [8, 5, 6] x [8, 6, 7] -> [8, 5, 7]: 2 * 280 * 6 = 3360
    for t in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        assert estimate_flops(t, [(8, 5, 6), (8, 6, 7)], [(8, 5, 7)]) == 3360
    # adj_x: a is [8, 6, 5], contracted dimension 6
    assert estimate_flops("BatchMatMulV2", [(8, 6, 5), (8, 6, 7)], [(8, 5, 7)], {"adj_x": True}) == 3360


def test_fused_ops():
    # _FusedMatMul(a[4,8], b[8,3], bias[3]) with BiasAdd, Relu: 2*12*8 + 2*12 = 216
    assert estimate_flops("_FusedMatMul", [(4, 8), (8, 3), (3,)], [(4, 3)], {"fused_ops": ["BiasAdd", "Relu"]}) == 216
    # _FusedConv2D(x[1,8,8,3], f[3,3,3,4], bias) -> [1,8,8,4]: 2*256*27 + 256 (BiasAdd)
    assert estimate_flops("_FusedConv2D", [(1, 8, 8, 3), (3, 3, 3, 4), (4,)], [(1, 8, 8, 4)], {"fused_ops": ["BiasAdd"]}) == 2 * 256 * 27 + 256
    # depthwise 3x3 over [1,8,8,4] -> [1,8,8,4] (multiplier 1): 2 * 256 * 9
    assert estimate_flops("DepthwiseConv2dNative", [(1, 8, 8, 4), (3, 3, 4, 1)], [(1, 8, 8, 4)]) == 4608
    assert estimate_flops("DepthwiseConv2dNativeBackpropInput", [(4,), (3, 3, 4, 1), (1, 8, 8, 4)], [(1, 8, 8, 4)]) == 4608
    assert estimate_flops("DepthwiseConv2dNativeBackpropFilter", [(1, 8, 8, 4), (4,), (1, 8, 8, 4)], [(3, 3, 4, 1)]) == 4608


def test_normalization_passes():
    x = (2, 4, 4, 8)  # 256 elements
    assert estimate_flops("FusedBatchNormV3", [x, (8,), (8,), (0,), (0,)], [x, (8,), (8,)]) == 5 * 256
    # grad(y_backprop, x, scale, ...): 7 passes over x
    assert estimate_flops("FusedBatchNormGradV3", [x, x, (8,), (8,), (8,), (0,)], [x]) == 7 * 256
    assert estimate_flops("_FusedBatchNormEx", [x, (8,), (8,), (8,), (8,)], [x], {"fused_ops": ["Relu"]}) == 6 * 256
    assert estimate_flops("_MklLayerNorm", [(4, 16), (16,), (16,)], [(4, 16)]) == 5 * 64


def test_control_flow_and_tensor_lists_are_covered():
    types = ["Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "TensorListPushBack",
             "TensorListPopBack", "EmptyTensorList", "StatelessRandomUniformV2", "VariableShape", "Einsum",
             "_FusedMatMul", "_FusedConv2D", "FusedBatchNormV3", "FusedBatchNormGradV3", "DepthwiseConv2dNative"]
    assert unknown_flop_types(types) == []
    assert estimate_flops("Switch", [(4, 4), ()], [(4, 4), (4, 4)]) == 0
