"""FLOPs and bytes of one op execution, from its type and tensor shapes.

Formulas (``n(x)`` is the number of elements of tensor ``x``; ``out`` the first output):

* ``MatMul``: ``2 * n(out) * K`` with ``K`` the contracted dimension of the first input
  (``transpose_a`` honoured). ``BatchMatMul*``: the same with the last-but-one/last
  dimension of the first input (``adj_x``).
* ``Conv2D``: ``2 * n(out) * kh * kw * cin``; ``Conv2DBackpropInput`` and
  ``Conv2DBackpropFilter``: ``2 * n(out_grad) * kh * kw * cin`` (the forward's count).
* element-wise ops (:data:`ELEMENTWISE`): ``n(out)`` (``AddN``: ``(k - 1) * n(out)``).
* reductions and ``BiasAddGrad``: ``n(input)``.
* ``SparseSoftmaxCrossEntropyWithLogits`` and ``Softmax``: ``5 * n(logits)`` (max, sub,
  exp, sum, div).
* pooling: ``MaxPool``/``AvgPool``: ``n(out) * kh * kw`` (one compare or add per window
  element); ``MaxPoolGrad``/``AvgPoolGrad``: ``n(grad) * kh * kw`` (``ksize`` attribute;
  ``n(input)`` if it is missing, as ptflops counts pooling).
* optimizer applies, per element of the largest input (the variable or its gradient):
  ``ResourceApplyAdam`` 10; ``ResourceApplyRMSProp`` 8; ``ResourceApplyMomentum`` 4
  (5 with Nesterov); ``ResourceApplyGradientDescent`` 2; scatter-adds: ``n(updates)``.
* data movement and bookkeeping (:data:`ZERO_FLOP`): 0 FLOPs.

Bytes accessed (the roofline's memory term) are the bytes of all data inputs plus all
outputs, except for :data:`ALIAS` ops whose outputs alias an input (no traffic, no new
memory). An op type with no rule here gets 0 FLOPs and is reported by
:func:`unknown_flop_types`, never silently.
"""

from __future__ import annotations

from math import prod

ELEMENTWISE = frozenset(
    """Add AddV2 Sub Mul RealDiv Div DivNoNan Maximum Minimum Pow SquaredDifference
    Neg Abs Sqrt Rsqrt Square Exp Log Log1p Sigmoid Tanh Relu Relu6 Elu Selu Softplus
    SigmoidGrad TanhGrad ReluGrad Relu6Grad EluGrad SeluGrad RsqrtGrad SqrtGrad
    BiasAdd Cast Floor FloorMod FloorDiv Mod Sign Reciprocal Equal NotEqual Less
    LessEqual Greater GreaterEqual LogicalAnd LogicalOr LogicalNot Select SelectV2
    OnesLike ZerosLike FusedBatchNormV3 FusedBatchNormGradV3 ClipByValue Erf""".split()
)
REDUCTIONS = frozenset("Sum Mean Max Min Prod ArgMax ArgMin BiasAddGrad L2Loss All Any".split())
SOFTMAX = frozenset("SparseSoftmaxCrossEntropyWithLogits SoftmaxCrossEntropyWithLogits Softmax LogSoftmax".split())
ALIAS = frozenset("Identity ReadVariableOp Reshape ExpandDims Squeeze StopGradient Snapshot IdentityN".split())
ZERO_FLOP = ALIAS | frozenset(
    """Const NoOp Placeholder PlaceholderWithDefault VarHandleOp VariableV2 VarIsInitializedOp
    AssignVariableOp Assign Shape ShapeN Size Rank Fill Range ConcatV2 Concat Split SplitV
    Slice StridedSlice StridedSliceGrad Pack Unpack Tile Transpose Gather GatherV2
    ResourceGather ConcatOffset BroadcastTo BroadcastGradientArgs Pad PadV2 OneHot
    Unique InvertPermutation DynamicStitch Where TruncatedNormal RandomUniform
    RandomStandardNormal AssignSubVariableOp AssignAddVariableOp ReverseV2""".split()
)
OPTIMIZER_FLOPS_PER_ELEMENT = {
    "ResourceApplyAdam": 10,
    "ApplyAdam": 10,
    "ResourceApplyRMSProp": 8,
    "ApplyRMSProp": 8,
    "ResourceApplyMomentum": 4,
    "ApplyMomentum": 4,
    "ResourceApplyKerasMomentum": 4,
    "ResourceApplyCenteredRMSProp": 10,
    "ResourceApplyGradientDescent": 2,
    "ApplyGradientDescent": 2,
}
POOLING = frozenset("MaxPool AvgPool MaxPoolV2 MaxPoolGrad AvgPoolGrad".split())
SCATTER = frozenset("ResourceScatterAdd ScatterAdd UnsortedSegmentSum SegmentSum ResourceScatterUpdate".split())


def numel(shape: tuple[int, ...] | None) -> int:
    """Number of elements of a shape; unknown (-1) dimensions count as 1; ``None`` -> 0."""
    if shape is None:
        return 0
    return prod(max(d, 1) for d in shape)


def has_flop_rule(op_type: str) -> bool:
    """True if :func:`estimate_flops` has a rule for ``op_type``."""
    return (
        op_type in ELEMENTWISE
        or op_type in REDUCTIONS
        or op_type in SOFTMAX
        or op_type in ZERO_FLOP
        or op_type in OPTIMIZER_FLOPS_PER_ELEMENT
        or op_type in SCATTER
        or op_type in POOLING
        or op_type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "AddN")
        or op_type.startswith("Conv2D")
    )


def estimate_flops(
    op_type: str,
    input_shapes: list[tuple[int, ...] | None],
    output_shapes: list[tuple[int, ...] | None],
    attrs: dict | None = None,
) -> float:
    """Estimated FLOPs of one execution of an op (see the module docstring for the rules).

    Args:
        op_type: TensorFlow op type.
        input_shapes: shapes of the data inputs, in order (``None`` for an unknown rank).
        output_shapes: shapes of the outputs, in order.
        attrs: the op's attributes that matter (``transpose_a``, ``adj_x``, ``ksize``, ``use_nesterov``).
    Returns:
        FLOPs (float, >= 0); 0 for types without a rule (see :func:`has_flop_rule`).
    """
    attrs = attrs or {}
    out = output_shapes[0] if output_shapes else None
    n_out = numel(out)
    if op_type == "MatMul" and input_shapes and input_shapes[0] is not None and len(input_shapes[0]) == 2:
        a = input_shapes[0]
        k = a[0] if attrs.get("transpose_a") else a[1]
        return 2.0 * n_out * max(k, 1)
    if op_type.startswith("BatchMatMul") and input_shapes and input_shapes[0] is not None and len(input_shapes[0]) >= 2:
        a = input_shapes[0]
        k = a[-2] if attrs.get("adj_x") else a[-1]
        return 2.0 * n_out * max(k, 1)
    if op_type in ("Conv2D", "Conv2DBackpropFilter") and len(input_shapes) >= 2:
        # forward: input, filter -> out. filter grad: input, filter_sizes, out_grad -> filter.
        if op_type == "Conv2D" and input_shapes[1] is not None and len(input_shapes[1]) == 4:
            kh, kw, cin, _ = input_shapes[1]
            return 2.0 * n_out * kh * kw * cin
        if op_type == "Conv2DBackpropFilter" and len(input_shapes) >= 3 and out is not None and len(out) == 4:
            kh, kw, cin, cout = out
            return 2.0 * numel(input_shapes[2]) * kh * kw * cin
    if op_type == "Conv2DBackpropInput" and len(input_shapes) >= 3 and input_shapes[1] is not None:
        filt = input_shapes[1]
        if len(filt) == 4:
            kh, kw, cin, _ = filt
            return 2.0 * numel(input_shapes[2]) * kh * kw * cin
    if op_type == "AddN":
        return float(max(len(input_shapes) - 1, 0) * n_out)
    if op_type in ELEMENTWISE:
        return float(n_out)
    if op_type in REDUCTIONS:
        return float(numel(input_shapes[0]) if input_shapes else 0)
    if op_type in SOFTMAX:
        return 5.0 * float(numel(input_shapes[0]) if input_shapes else n_out)
    if op_type in POOLING:
        ksize = attrs.get("ksize") or []
        window = ksize[1] * ksize[2] if len(ksize) == 4 else None  # NHWC
        if op_type in ("MaxPool", "AvgPool", "MaxPoolV2"):
            return float(n_out * window) if window else float(numel(input_shapes[0]) if input_shapes else 0)
        grad = input_shapes[-1] if input_shapes else None  # MaxPoolGrad: (in, out, grad); AvgPoolGrad: (shape, grad)
        return float(numel(grad) * window) if window else float(numel(input_shapes[0]) if input_shapes else 0)
    if op_type in OPTIMIZER_FLOPS_PER_ELEMENT:
        # per element of the variable: the largest input (the variable's handle has no shape).
        per = OPTIMIZER_FLOPS_PER_ELEMENT[op_type] + (1 if attrs.get("use_nesterov") else 0)
        return float(per * max((numel(x) for x in input_shapes), default=0))
    if op_type in SCATTER:
        return float(numel(input_shapes[-1]) if input_shapes else 0)
    return 0.0


def unknown_flop_types(op_types: list[str]) -> list[str]:
    """The sorted distinct op types in ``op_types`` that have no FLOPs rule."""
    return sorted({t for t in op_types if not has_flop_rule(t)})
