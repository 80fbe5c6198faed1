"""The inputs of a training step: which placeholders it feeds, and the range of its integer ids.

Real execution feeds synthetic inputs ([`cluster.real.SyntheticInputs`][cluster.real.SyntheticInputs]); an integer
input (token ids, labels) must stay inside the table it indexes, or TensorFlow fails mid-step.
[`int_inputs`][compgraph.inputs.int_inputs] finds each integer placeholder's exclusive upper bound from the graph
([`infer_int_bound`][compgraph.inputs.infer_int_bound]), so a user's graph can be checked before any work.
"""

from __future__ import annotations

from compgraph.tf_env import import_tensorflow

#: ops whose int input ``k`` indexes into something: op type -> (input index, how to get the bound)
_INDEX_CONSUMERS = {
    "GatherV2": 1,
    "Gather": 1,
    "ResourceGather": 1,
    "SparseSoftmaxCrossEntropyWithLogits": 1,
    "OneHot": 0,
}
#: ops an int input flows through unchanged in value (slicing, reshaping, copying)
_PASS_THROUGH = frozenset(
    {"StridedSlice", "Slice", "Identity", "Reshape", "Squeeze", "ExpandDims", "Unpack", "Split", "SplitV",
     "Transpose", "ConcatV2", "Pack", "Cast"}
)


def ancestors(tf_graph, fetches) -> set[str]:
    """Names of the ops ``fetches`` (op names) depend on through data and control inputs, themselves included."""
    seen: set[str] = set()
    stack = [tf_graph.get_operation_by_name(f) for f in fetches]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _resource_shape(tensor):
    op = tensor.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    if op.type in ("VarHandleOp", "VariableV2", "Variable"):
        import_tensorflow()
        from tensorflow.python.framework import tensor_shape

        return tensor_shape.TensorShape(op.get_attr("shape")).as_list()
    return tensor.shape.as_list() if tensor.shape.rank is not None else None


def infer_int_bound(tensor) -> int | None:
    """The exclusive upper bound of the integer ids ``tensor`` carries, read from its consumers:
    the value is followed through ops that keep it (slicing, reshaping, ``Identity``, ``Cast``,
    the value branches of a ``Select``: Keras 3's ``take`` wraps negative ids so) to a
    ``GatherV2``/``ResourceGather`` (the table's first dimension), a
    ``SparseSoftmaxCrossEntropyWithLogits`` (the logits' last dimension) or a ``OneHot`` (its
    depth); the smallest such bound wins. ``None``: no consumer tells."""
    bounds = []
    stack, seen = [tensor], set()
    while stack:
        t = stack.pop()
        if t.name in seen:
            continue
        seen.add(t.name)
        for consumer in t.consumers():
            pos = [k for k, x in enumerate(consumer.inputs) if x is t]
            typ = consumer.type
            if typ in _INDEX_CONSUMERS and _INDEX_CONSUMERS[typ] in pos:
                b = None
                if typ in ("GatherV2", "Gather", "ResourceGather"):
                    shape = _resource_shape(consumer.inputs[0]) if typ == "ResourceGather" else (
                        consumer.inputs[0].shape.as_list() if consumer.inputs[0].shape.rank else None)
                    if shape and shape[0] is not None:
                        b = shape[0]
                elif typ == "SparseSoftmaxCrossEntropyWithLogits":
                    s = consumer.inputs[0].shape
                    if s.rank and s.as_list()[-1] is not None:
                        b = s.as_list()[-1]
                elif typ == "OneHot":
                    depth = consumer.inputs[1].op
                    if depth.type == "Const":
                        b = int(depth.get_attr("value").int_val[0])
                if b:
                    bounds.append(int(b))
            data_pos = 1 if typ == "Split" else 0  # Split(axis, value); the others take the value first
            follows = typ in _PASS_THROUGH and (data_pos in pos or (typ in ("ConcatV2", "Pack") and bool(pos)))
            # where(cond, ids, other): the ids flow through unchanged (Keras 3's take wraps negative ids so)
            follows = follows or (typ in ("Select", "SelectV2") and bool({1, 2} & set(pos)))
            if follows:
                stack.extend(o for o in consumer.outputs if o.dtype.is_integer)
    return min(bounds) if bounds else None


def int_inputs(tf_graph, fetches) -> dict[str, tuple[str, int | None]]:
    """The integer placeholders one step (``fetches``) depends on.

    Args:
        tf_graph: an imported ``tf.Graph``.
        fetches: op names one step runs.
    Returns:
        ``{placeholder name: (dtype name, exclusive upper bound of its ids or None)}``, the
        bound from [`infer_int_bound`][compgraph.inputs.infer_int_bound] (``None``: the graph does not tell).
    """
    needed = ancestors(tf_graph, fetches)
    out = {}
    for op in tf_graph.get_operations():
        if op.type in ("Placeholder", "PlaceholderV2") and op.name in needed and op.outputs[0].dtype.is_integer:
            out[op.name] = (op.outputs[0].dtype.name, infer_int_bound(op.outputs[0]))
    return out
