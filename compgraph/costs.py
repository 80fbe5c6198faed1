"""FLOPs and bytes of one op execution, from its type and tensor shapes.

Formulas (``n(x)`` is the number of elements of tensor ``x``; ``out`` the first output):

* ``MatMul``: ``2 * n(out) * K`` with ``K`` the contracted dimension of the first input
  (``transpose_a`` honoured). ``BatchMatMul``/``V2``/``V3``: the same with the
  last-but-one/last dimension of the first input (``adj_x``).
* ``Einsum``: the equation (``attrs["equation"]``, e.g. ``"bqhd,bkhd->bhqk"``, ``...``
  broadcast allowed) is parsed and every label sized from the operands' shapes. Two
  operands with a summed label (one in the inputs, not in the output):
  ``2 * prod(size of every distinct label)`` (a multiply and an add per term); two operands
  without one (an outer or element-wise product): ``prod(sizes)``; one operand: ``n(input)``
  if it sums a label (a reduction), else 0 (a transpose).
* grappler's fused ops: ``_FusedMatMul``/``_FusedConv2D``/``_FusedDepthwiseConv2dNative``:
  the base op's count plus ``n(out)`` per fused op (``fused_ops`` attribute: ``BiasAdd``,
  ``Relu``...); ``_FusedBatchNormEx``: as ``FusedBatchNormV3`` plus ``n(out)`` per fused
  activation/side input.
* ``DepthwiseConv2dNative``: ``2 * n(out) * kh * kw``; its backprop ops: ``2 * n(out_grad) * kh * kw``.
* batch and layer normalization (one pass over ``x`` counted as ``n(x)``):
  ``FusedBatchNorm``/``V2``/``V3`` 5 passes (mean, variance, normalize, scale, shift);
  their ``Grad`` ops 7 (two sums, a product, four element-wise terms of ``dx``);
  ``_MklLayerNorm`` 5, as batch norm over the last axis.
* ``Conv2D``: ``2 * n(out) * kh * kw * cin``; ``Conv2DBackpropInput`` and
  ``Conv2DBackpropFilter``: ``2 * n(out_grad) * kh * kw * cin`` (the forward's count).
* element-wise ops ([`ELEMENTWISE`][compgraph.costs.ELEMENTWISE]): ``n(out)`` (``AddN``: ``(k - 1) * n(out)``).
* reductions and ``BiasAddGrad``: ``n(input)``.
* ``SparseSoftmaxCrossEntropyWithLogits`` and ``Softmax``: ``5 * n(logits)`` (max, sub,
  exp, sum, div).
* pooling: ``MaxPool``/``AvgPool``: ``n(out) * kh * kw`` (one compare or add per window
  element); ``MaxPoolGrad``/``AvgPoolGrad``: ``n(grad) * kh * kw`` (``ksize`` attribute;
  ``n(input)`` if it is missing, as ptflops counts pooling).
* optimizer applies, per element of the largest input (the variable or its gradient):
  ``ResourceApplyAdam`` 10; ``ResourceApplyRMSProp`` 8; ``ResourceApplyMomentum`` 4
  (5 with Nesterov); ``ResourceApplyGradientDescent`` 2; scatter-adds: ``n(updates)``.
* data movement, control flow and bookkeeping ([`ZERO_FLOP`][compgraph.costs.ZERO_FLOP]: copies, shapes,
  ``Switch``/``Merge``/loop frames, TensorList accumulators of TF2 loops, random number
  generation, variable reads and writes): 0 FLOPs.

Bytes accessed (the roofline's memory term) are the bytes of all data inputs plus all
outputs, except for [`ALIAS`][compgraph.costs.ALIAS] ops whose outputs alias an input (no traffic, no new
memory). An op type with no rule here gets 0 FLOPs and is reported by
[`unknown_flop_types`][compgraph.costs.unknown_flop_types], never silently.
"""

from __future__ import annotations

from math import prod

ELEMENTWISE = frozenset(
    """Add AddV2 Sub Mul RealDiv Div DivNoNan Maximum Minimum Pow SquaredDifference
    Neg Abs Sqrt Rsqrt Square Exp Log Log1p Sigmoid Tanh Relu Relu6 Elu Selu Softplus
    SigmoidGrad TanhGrad ReluGrad Relu6Grad EluGrad SeluGrad RsqrtGrad SqrtGrad
    BiasAdd Cast Floor FloorMod FloorDiv Mod Sign Reciprocal Equal NotEqual Less
    LessEqual Greater GreaterEqual LogicalAnd LogicalOr LogicalNot Select SelectV2
    OnesLike ZerosLike ClipByValue Erf Erfc IsFinite IsNan IsInf Round Ceil Rint Inv InvGrad
    Sin Cos Tan Atan Atan2 Asin Acos Sinh Cosh Atanh Asinh Acosh Expm1 Softsign SoftsignGrad
    SoftplusGrad LeakyRelu LeakyReluGrad Gelu GeluGrad Mish Swish Xlogy Xdivy TruncateDiv
    TruncateMod BitwiseAnd BitwiseOr BitwiseXor LeftShift RightShift Conj Real Imag
    ReciprocalGrad SquaredDifference BiasAddV1 AddV2 PreventGradient""".split()
)
REDUCTIONS = frozenset(
    "Sum Mean Max Min Prod ArgMax ArgMin BiasAddGrad L2Loss All Any EuclideanNorm Cumsum Cumprod".split()
)
SOFTMAX = frozenset("SparseSoftmaxCrossEntropyWithLogits SoftmaxCrossEntropyWithLogits Softmax LogSoftmax".split())
ALIAS = frozenset(
    """Identity ReadVariableOp Reshape ExpandDims Squeeze StopGradient Snapshot IdentityN
    Switch Merge Enter Exit NextIteration RefEnter RefExit RefMerge RefSwitch RefNextIteration
    RefIdentity EnsureShape CheckNumerics PreventGradient""".split()
)
ZERO_FLOP = ALIAS | frozenset(
    """Const NoOp Placeholder PlaceholderWithDefault VarHandleOp VariableV2 VarIsInitializedOp
    AssignVariableOp Assign Shape ShapeN Size Rank Fill Range ConcatV2 Concat Split SplitV
    Slice StridedSlice StridedSliceGrad Pack Unpack Tile Transpose Gather GatherV2
    ResourceGather ConcatOffset BroadcastTo BroadcastGradientArgs Pad PadV2 OneHot
    Unique InvertPermutation DynamicStitch Where TruncatedNormal RandomUniform
    RandomStandardNormal AssignSubVariableOp AssignAddVariableOp ReverseV2
    LoopCond ControlTrigger VariableShape TensorListReserve EmptyTensorList TensorListPushBack
    TensorListPopBack TensorListFromTensor TensorListGetItem TensorListSetItem TensorListStack
    TensorListElementShape TensorListLength TensorListResize TensorListConcatV2 TensorListSplit
    TensorListGather TensorListScatterIntoExistingList TensorArrayV3 TensorArrayWriteV3
    TensorArrayReadV3 TensorArrayGatherV3 TensorArrayScatterV3 TensorArraySizeV3
    StatelessRandomUniformV2 StatelessRandomNormalV2 StatelessTruncatedNormalV2
    StatelessRandomGetKeyCounter StatelessRandomGetKeyCounterAlg StatelessRandomUniform
    StatelessRandomNormal StatelessTruncatedNormal StatelessRandomUniformIntV2 RandomUniformInt
    RngReadAndSkip StatelessRandomGetAlg RandomShuffle Multinomial StatelessMultinomial
    ScatterNd TensorScatterUpdate TensorScatterAdd GatherNd ResourceGatherNd MirrorPad
    MirrorPadGrad SpaceToDepth DepthToSpace SpaceToBatchND BatchToSpaceND ResizeNearestNeighbor
    Empty DeviceIndex Bitcast GuaranteeConst Print PrintV2 Assert
    StringFormat DestroyResourceOp ReadVariableXlaSplitND LinSpace
    UnravelIndex MatrixBandPart MatrixDiag MatrixDiagPart MatrixDiagV3 MatrixDiagPartV3
    MatrixSetDiagV3 TopKV2 InTopKV2 Bincount Reverse ParallelConcat DiagPart Diag
    AssignVariableXlaConcatND ResourceScatterNdUpdate ScatterNdUpdate""".split()
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
POOLING = frozenset("MaxPool AvgPool MaxPoolV2 MaxPoolGrad AvgPoolGrad MaxPoolGradV2".split())
#: passes over the input ``x`` (``n(x)`` FLOPs each) of normalization ops (module docstring)
NORM_PASSES = {
    "FusedBatchNorm": 5,
    "FusedBatchNormV2": 5,
    "FusedBatchNormV3": 5,
    "_FusedBatchNormEx": 5,
    "FusedBatchNormGrad": 7,
    "FusedBatchNormGradV2": 7,
    "FusedBatchNormGradV3": 7,
    "_FusedBatchNormGradEx": 7,
    "_MklLayerNorm": 5,
}
#: grappler's fused ops: fused type -> base type whose rule applies
FUSED = {
    "_FusedMatMul": "MatMul",
    "_FusedBatchMatMulV2": "BatchMatMulV2",
    "_FusedConv2D": "Conv2D",
    "_FusedDepthwiseConv2dNative": "DepthwiseConv2dNative",
}
DEPTHWISE = frozenset(
    "DepthwiseConv2dNative DepthwiseConv2dNativeBackpropInput DepthwiseConv2dNativeBackpropFilter".split()
)
SCATTER = frozenset(
    "ResourceScatterAdd ResourceScatterSub ResourceScatterMul ResourceScatterDiv ResourceScatterMin ResourceScatterMax "
    "ScatterAdd ScatterSub UnsortedSegmentSum SegmentSum ResourceScatterUpdate".split()
)


def numel(shape: tuple[int, ...] | None) -> int:
    """Number of elements of a shape; unknown (-1) dimensions count as 1; ``None`` -> 0."""
    if shape is None:
        return 0
    return prod(max(d, 1) for d in shape)


def has_flop_rule(op_type: str) -> bool:
    """True if [`estimate_flops`][compgraph.costs.estimate_flops] has a rule for ``op_type``; for an op of a captured PyTorch step
    (``aten.*`` and its bookkeeping types), if [`compgraph.torch_step`][compgraph.torch_step] has one."""
    if op_type.startswith("aten.") or op_type in ("Parameter", "Input", "getitem"):
        from compgraph.torch_step import has_aten_rule

        return has_aten_rule(op_type)
    return (
        op_type in ELEMENTWISE
        or op_type in REDUCTIONS
        or op_type in SOFTMAX
        or op_type in ZERO_FLOP
        or op_type in OPTIMIZER_FLOPS_PER_ELEMENT
        or op_type in SCATTER
        or op_type in POOLING
        or op_type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "AddN", "Einsum")
        or op_type in NORM_PASSES
        or op_type in FUSED
        or op_type in DEPTHWISE
        or op_type in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2DBackpropInputV2",
                       "Conv2DBackpropFilterV2")
    )


def einsum_flops(equation: str, input_shapes: list[tuple[int, ...] | None]) -> float:
    """FLOPs of ``Einsum`` (module docstring). Raises ``ValueError`` for a malformed
    equation or operands whose ranks do not match it."""
    eq = equation.replace(" ", "")
    if "->" not in eq:
        raise ValueError(f"einsum {equation!r}: no '->' (implicit output is not supported)")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(input_shapes):
        raise ValueError(f"einsum {equation!r}: {len(terms)} operands in the equation, {len(input_shapes)} given")
    sizes: dict[str, int] = {}
    labels_in: set[str] = set()
    for term, shape in zip(terms, input_shapes):
        if shape is None:
            raise ValueError(f"einsum {equation!r}: an operand of unknown rank")
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            # right-align the ellipsis dimensions (numpy broadcasting)
            labels = list(head) + [f"...{n_ell - 1 - i}" for i in range(max(n_ell, 0))] + list(tail)
        else:
            labels = list(term)
        if len(labels) != len(shape):
            raise ValueError(f"einsum {equation!r}: operand {term!r} has rank {len(shape)}")
        for lab, d in zip(labels, shape):
            sizes[lab] = max(sizes.get(lab, 1), max(int(d), 1))
            labels_in.add(lab)
    out_labels = set(out.replace("...", ""))
    if "..." in out:
        out_labels |= {lab for lab in labels_in if lab.startswith("...")}
    summed = labels_in - out_labels
    total = float(prod(sizes.values()))
    if len(terms) == 1:
        return total if summed else 0.0
    return 2.0 * total if summed else total


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
        attrs: the op's attributes that matter (``transpose_a``, ``adj_x``, ``ksize``, ``use_nesterov``,
            ``equation``, ``fused_ops``).
    Returns:
        FLOPs (float, >= 0); 0 for types without a rule (see [`has_flop_rule`][compgraph.costs.has_flop_rule]).
    """
    attrs = attrs or {}
    out = output_shapes[0] if output_shapes else None
    n_out = numel(out)
    if op_type in FUSED:
        base = estimate_flops(FUSED[op_type], input_shapes[:2], output_shapes, attrs)
        return base + float(n_out * len(attrs.get("fused_ops") or []))
    if op_type == "Einsum":
        try:
            return einsum_flops(attrs.get("equation", ""), input_shapes)
        except ValueError:
            return 0.0
    if op_type in NORM_PASSES:
        x = input_shapes[1] if op_type.startswith("FusedBatchNormGrad") or op_type == "_FusedBatchNormGradEx" else (
            input_shapes[0] if input_shapes else None)
        extra = len(attrs.get("fused_ops") or []) if op_type == "_FusedBatchNormEx" else 0
        return float((NORM_PASSES[op_type] + extra) * numel(x if x is not None else out))
    if op_type in DEPTHWISE and len(input_shapes) >= 2:
        # forward: (input, filter[kh, kw, cin, mult]) -> out; backprops: (sizes or input, filter or sizes, out_grad)
        if op_type == "DepthwiseConv2dNative" and input_shapes[1] is not None and len(input_shapes[1]) == 4:
            kh, kw = input_shapes[1][:2]
            return 2.0 * n_out * kh * kw
        if op_type == "DepthwiseConv2dNativeBackpropInput" and len(input_shapes) >= 3 and input_shapes[1] is not None \
                and len(input_shapes[1]) == 4:
            kh, kw = input_shapes[1][:2]
            return 2.0 * numel(input_shapes[2]) * kh * kw
        if op_type == "DepthwiseConv2dNativeBackpropFilter" and len(input_shapes) >= 3 and out is not None and len(out) == 4:
            kh, kw = out[:2]
            return 2.0 * numel(input_shapes[2]) * kh * kw
        return 0.0
    if op_type == "MatMul" and input_shapes and input_shapes[0] is not None and len(input_shapes[0]) == 2:
        a = input_shapes[0]
        k = a[0] if attrs.get("transpose_a") else a[1]
        return 2.0 * n_out * max(k, 1)
    if op_type.startswith("BatchMatMul") and input_shapes and input_shapes[0] is not None and len(input_shapes[0]) >= 2:
        x = input_shapes[0]
        k = x[-2] if attrs.get("adj_x") else x[-1]
        return 2.0 * n_out * max(k, 1)
    if op_type in ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropFilterV2") and len(input_shapes) >= 2:
        # forward: input, filter -> out. filter grad: input, filter_sizes, out_grad -> filter.
        if op_type == "Conv2D" and input_shapes[1] is not None and len(input_shapes[1]) == 4:
            kh, kw, cin, _ = input_shapes[1]
            return 2.0 * n_out * kh * kw * cin
        if op_type in ("Conv2DBackpropFilter", "Conv2DBackpropFilterV2") and len(input_shapes) >= 3 and out is not None \
                and len(out) == 4:
            kh, kw, cin, cout = out
            return 2.0 * numel(input_shapes[2]) * kh * kw * cin
    if op_type in ("Conv2DBackpropInput", "Conv2DBackpropInputV2") and len(input_shapes) >= 3 and input_shapes[1] is not None:
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
