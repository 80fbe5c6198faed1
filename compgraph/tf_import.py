"""Import a TensorFlow ``GraphDef`` of a training step into the project's [`OpGraph`][compgraph.ir.OpGraph].

The GraphDef is imported into a fresh TF1-style graph (so TensorFlow's own shape
inference fills shapes the GraphDef lacks), pruned to the ops one training step runs
(the ancestors of the fetches, through data and control inputs), and each op gets:
type, output shapes and bytes, estimated FLOPs and bytes accessed
([`compgraph.costs`][compgraph.costs]), resident parameter bytes (variables), whether TensorFlow's
kernel registry has a GPU kernel for its type, and its colocation constraints
(``op.colocation_groups()`` plus resource-typed inputs, which TensorFlow requires to
share the variable's device).

A TF1 ``tf.while_loop`` in a user's graph is kept as one iteration: the back edge from
``NextIteration`` into its ``Merge`` is dropped, so the op graph is a DAG (the benchmarks
unroll their loops statically and have none).
"""

from __future__ import annotations

from functools import lru_cache

from compgraph import costs
from compgraph.ir import Edge, Op, OpGraph
from compgraph.tf_env import import_tensorflow

DENSE_TYPES = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "SparseMatMul"})
"""TensorFlow's op types whose compute term uses a GPU's ``dense_efficiency`` ([`cluster.cost_model`][cluster.cost_model])."""
CONV_PREFIXES = ("Conv2D", "Conv3D", "DepthwiseConv2dNative")
"""TensorFlow's op type prefixes whose compute term uses ``conv_efficiency``."""


def tf_op_class(op_type: str) -> str:
    """The TensorFlow front end's compute class of ``op_type``: ``dense``, ``conv`` or ``other``."""
    if op_type in DENSE_TYPES:
        return "dense"
    return "conv" if op_type.startswith(CONV_PREFIXES) else "other"


def placed_graph_def(graph_def, devices, default: str = ""):
    """A copy of ``graph_def`` with each node's ``device`` set: ``devices`` maps node names to
    TensorFlow device strings (a ``Mapping``, or a sequence in the nodes' order); a node it lacks gets
    ``default``. The one place a placement is written into a GraphDef (real execution, grappler,
    ``placement export --format tf``)."""
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    if isinstance(devices, (list, tuple)):
        for node, device in zip(gd.node, devices):
            node.device = device if device is not None else default
    else:
        for node in gd.node:
            node.device = devices.get(node.name, default)
    return gd

VARIABLE_TYPES = frozenset({"VarHandleOp", "VariableV2", "Variable"})


@lru_cache(maxsize=None)
def has_gpu_kernel(op_type: str) -> bool:
    """True if TensorFlow's kernel registry holds a kernel for ``op_type`` that runs on a GPU.

    Kernels registered for ``DEFAULT`` (``NoOp``, ``VarHandleOp``, ``ReadVariableOp``,
    ``Placeholder``...) run on every device type, GPUs included.
    """
    import_tensorflow()
    from tensorflow.python.framework import kernels

    return any(k.device_type in ("GPU", "DEFAULT") for k in kernels.get_registered_kernels_for_op(op_type).kernel)


def _shape(tensor) -> tuple[int, ...] | None:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    if dims is None:
        return None
    return tuple(-1 if d is None else int(d) for d in dims)


def _dtype_size(dtype) -> int:
    try:
        return int(dtype.size) if dtype.name not in ("resource", "variant", "string") else 0
    except (TypeError, ValueError):
        return 0


#: ops whose output feeds a TF1 while loop's ``Merge`` from the previous iteration.
LOOP_BACK_EDGE_TYPES = frozenset({"NextIteration", "RefNextIteration"})


def import_graph_def(graph_def, fetches: list[str], name: str = "graph") -> OpGraph:
    """Turn a training-step ``GraphDef`` into an [`OpGraph`][compgraph.ir.OpGraph].

    Args:
        graph_def: a ``tf.compat.v1.GraphDef`` with no function library (a TF2 graph is
            flattened first: [`compgraph.tf2.flatten_step`][compgraph.tf2.flatten_step]).
        fetches: names of the ops one step runs (e.g. the train op and the loss);
            the graph is pruned to their ancestors.
        name: name recorded on the OpGraph.
    Returns:
        The OpGraph, ops in TensorFlow's topological order.
    Raises:
        ValueError: if a fetch is not in the graph, or the graph holds functions.
    """
    tf = import_tensorflow()
    if len(graph_def.library.function):
        raise ValueError(f"graph {name!r}: hides {len(graph_def.library.function)} functions in a function library")
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    known = {n.name for n in graph_def.node}
    for f in fetches:
        if f not in known:
            raise ValueError(f"fetch {f!r}: no such op in graph {name!r}")

    # prune to the step: ancestors of the fetches through data and control inputs.
    keep: set[str] = set()
    stack = [graph.get_operation_by_name(f) for f in fetches]
    while stack:
        op = stack.pop()
        if op.name in keep:
            continue
        keep.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    tf_ops = [op for op in graph.get_operations() if op.name in keep]  # creation order is topological
    index = {op.name: i for i, op in enumerate(tf_ops)}

    ops: list[Op] = []
    edges: list[Edge] = []
    for i, op in enumerate(tf_ops):
        out_shapes = [_shape(t) for t in op.outputs]
        out_bytes = [costs.numel(s) * _dtype_size(t.dtype) for s, t in zip(out_shapes, op.outputs)]
        in_shapes = [_shape(t) for t in op.inputs]
        in_bytes = 0
        coloc = set()
        for t in op.inputs:
            if t.op.type in LOOP_BACK_EDGE_TYPES:
                continue  # a TF1 loop's back edge: one iteration is modelled (module docstring)
            src = index[t.op.name]
            b = ops[src].output_bytes[t.value_index]
            in_bytes += b
            edges.append(Edge(src, i, b, t.value_index))
            if t.dtype.name == "resource" or t.dtype._is_ref_dtype:
                coloc.add(t.op.name)
        for c in sorted(op.control_inputs, key=lambda c: index[c.name]):  # a canonical order
            edges.append(Edge(index[c.name], i, 0, -1, control=True))
        for grp in op.colocation_groups():
            other = grp.decode()[len("loc:@"):]
            if other != op.name and other in index:
                coloc.add(other)
        attrs = {}
        for key in ("transpose_a", "adj_x", "use_nesterov"):
            if key in op.node_def.attr:
                attrs[key] = op.node_def.attr[key].b
        if "ksize" in op.node_def.attr:
            attrs["ksize"] = list(op.node_def.attr["ksize"].list.i)
        if "equation" in op.node_def.attr:
            attrs["equation"] = op.node_def.attr["equation"].s.decode()
        if "fused_ops" in op.node_def.attr:
            attrs["fused_ops"] = [f.decode() for f in op.node_def.attr["fused_ops"].list.s]
        param_bytes = 0
        if op.type in VARIABLE_TYPES:
            shape = tuple(tf.TensorShape(op.get_attr("shape")).as_list())
            param_bytes = costs.numel(shape) * _dtype_size(tf.as_dtype(op.get_attr("dtype")))
        alias = op.type in costs.ALIAS
        ops.append(
            Op(
                name=op.name,
                type=op.type,
                output_shapes=[s if s is not None else () for s in out_shapes],
                output_bytes=out_bytes,
                flops=costs.estimate_flops(op.type, in_shapes, out_shapes, attrs),
                bytes_accessed=0.0 if alias else float(in_bytes + sum(out_bytes)),
                alloc_bytes=0 if alias else int(sum(out_bytes)),
                param_bytes=param_bytes,
                gpu_kernel=has_gpu_kernel(op.type),
                colocation=sorted(coloc),
            )
        )
    return OpGraph(name=name, ops=ops, edges=edges, fetches=list(fetches))
