"""TensorFlow 2 graphs made flat and placeable: function calls inlined, static loops unrolled,
conditionals lowered, resource-variable placeholders turned back into variables.

A ``tf.function`` training step (a ``ConcreteFunction``, a SavedModel signature, or its
``GraphDef``) hides ops in a function library: ``PartitionedCall``/``StatefulPartitionedCall``
call library functions, ``If``/``Case`` choose a branch function, ``While`` runs a body
function, and variables are resource placeholders, so the GraphDef cannot run alone in a
``Session`` nor be placed op by op. [`flatten_graph_def`][compgraph.tf2.flatten_graph_def] makes it a flat graph whose
every op can be placed:

1. **Calls** (``PartitionedCall``, ``StatefulPartitionedCall``) are inlined in Python: the
   function's nodes are copied under ``<call name>/``, each argument becomes an
   ``Identity`` of the call's input, and the call node itself becomes an ``IdentityN`` of
   the function's results (so its consumers are unchanged) with control inputs on the
   function's control outputs (its side effects).
2. **While loops with a static trip count** are unrolled the way the papers unroll RNNs
   (Mirhoseini et al. 2017, Sec. 4: "RNNLM ... unrolled"): the body is copied once per
   iteration under ``<while name>/iter_<k>/``, each iteration's arguments fed by the
   previous one's results. The trip count is static when the loop's
   ``maximum_iterations`` input (input 1 of every ``tf.while_loop`` of TF2: loop counter,
   maximum iterations, then the user's loop variables) evaluates to a constant (its
   ancestors are constants and pure arithmetic: Keras RNN layers pass the sequence length;
   a gradient loop's count is its forward loop's counter, known once that one is unrolled),
   or when the condition is ``counter < C`` with a constant start, a constant ``C`` and a
   body that adds a constant. Trip counts above ``max_unroll`` are not unrolled.
3. **The rest** (``If``/``StatelessIf``/``Case`` and loops whose trip count is not static) is
   handed to grappler's function optimizer (``tf_optimizer.OptimizeGraph`` with only the
   ``function`` optimizer, ``min_graph_nodes=-1``: a private TensorFlow API), which inlines
   what is left and lowers functional control flow to TF1 ``Switch``/``Merge``
   (conditionals) and ``Enter``/``Exit``/``NextIteration`` frames (loops). The importer
   keeps one iteration of such a loop ([`compgraph.tf_import`][compgraph.tf_import]); [`loop_frames`][compgraph.tf2.loop_frames]
   names them so the graph stats and the run's params can say so.

[`materialize_variables`][compgraph.tf2.materialize_variables] replaces each resource ``Placeholder`` (how a ``tf.function``
graph receives a variable) with a ``VarHandleOp`` of the variable's dtype and shape and
adds an ``init`` op that fills the variables (random uniform in [0, 0.1) for floats,
zeros otherwise), so the flat graph runs alone in a v1 ``Session`` (``--env real``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compgraph.tf_env import import_tensorflow

#: Op types that call a function of the graph's function library (TF2 ``tf.function``
#: graphs and control flow v2): their ops are hidden from a per-op placement.
CALL_OP_TYPES = frozenset(
    """PartitionedCall StatefulPartitionedCall While StatelessWhile If StatelessIf Case
    StatelessCase RemoteCall SymbolicGradient""".split()
)

CALL_TYPES = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
WHILE_TYPES = frozenset({"While", "StatelessWhile"})
#: op types whose value a trip count may be computed through (pure, cheap, no inputs fed)
_PURE = frozenset(
    """Const Identity IdentityN AddV2 Add Sub Mul Maximum Minimum Cast FloorDiv Floordiv
    Neg Abs Pack StridedSlice Prod Sum Max Min Mean Range Reshape ConcatV2 ExpandDims Squeeze Fill
    Slice GatherV2 Select SelectV2 Less LessEqual Greater GreaterEqual Equal""".split()
)
#: default cap on the trip count of an unrolled loop (more iterations are kept as one)
MAX_UNROLL = 512


@dataclass
class FlattenReport:
    """What [`flatten_graph_def`][compgraph.tf2.flatten_graph_def] did.

    Attributes:
        inlined_calls: call ops inlined in Python.
        unrolled_loops: ``{while op name: trip count}`` of the loops unrolled.
        one_iteration_loops: loop frames left as one iteration (trip count not static or
            above the cap), after grappler lowered them.
        grappler: whether grappler's function optimizer ran (functional ops were left).
        library_functions: functions in the input's library.
    """

    inlined_calls: int = 0
    unrolled_loops: dict = field(default_factory=dict)
    one_iteration_loops: list = field(default_factory=list)
    grappler: bool = False
    library_functions: int = 0

    def as_params(self) -> dict:
        """A flat JSON-able summary for graph stats and MLflow params."""
        return {
            "library_functions": self.library_functions,
            "inlined_calls": self.inlined_calls,
            "unrolled_loops": len(self.unrolled_loops),
            "unrolled_iterations": int(sum(self.unrolled_loops.values())),
            "one_iteration_loops": len(self.one_iteration_loops),
            "one_iteration_loop_names": ",".join(self.one_iteration_loops)[:240],
        }


def _node_name(inp: str) -> str:
    return inp.lstrip("^").split(":")[0]


def _tensor(inp: str) -> tuple[str, int]:
    parts = inp.split(":")
    return parts[0], int(parts[1]) if len(parts) > 1 else 0


class _Library:
    """The graph's function library registered in a ``tf.Graph``, for
    ``function_def_to_graph_def`` (which needs the functions' op defs to flatten names)."""

    def __init__(self, graph_def):
        tf = import_tensorflow()
        self.fdefs = {f.signature.name: f for f in graph_def.library.function}
        self.graph = tf.Graph()
        lib_only = tf.compat.v1.GraphDef()
        lib_only.library.CopyFrom(graph_def.library)
        lib_only.versions.CopyFrom(graph_def.versions)
        with self.graph.as_default():
            tf.graph_util.import_graph_def(lib_only, name="")
        self._flat: dict[str, tuple] = {}

    def body(self, fname: str):
        """``(graph_def of the body, [flat result tensor names], [control output node names],
        [argument names])``; raises ``KeyError`` for a function not in the library."""
        if fname not in self._flat:
            from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

            fdef = self.fdefs[fname]
            with self.graph.as_default():
                gd, nested_to_flat = function_def_to_graph_def(fdef)
            rets = [nested_to_flat[fdef.ret[a.name]] for a in fdef.signature.output_arg]
            controls = [fdef.control_ret[c] for c in fdef.signature.control_output]
            args = [a.name for a in fdef.signature.input_arg]
            self._flat[fname] = (gd, rets, controls, args)
        return self._flat[fname]


def _copy_body(out_nodes: list, lib: _Library, fname: str, prefix: str, arg_inputs: list[str],
               arg_controls: list[str]) -> tuple[list[str], list[str]]:
    """Append ``fname``'s nodes, renamed under ``prefix``, to ``out_nodes``; arguments become
    ``Identity`` nodes of ``arg_inputs`` (with control inputs ``arg_controls``). Returns the
    renamed result tensors and control-output node names."""
    tf = import_tensorflow()
    gd, rets, controls, args = lib.body(fname)
    local = {n.name for n in gd.node}
    argset = set(args)

    def rename(inp: str) -> str:
        ctrl = inp.startswith("^")
        name = _node_name(inp)
        if name not in local:
            return inp
        rest = inp.lstrip("^")[len(name):]
        return ("^" if ctrl else "") + prefix + name + rest

    for node in gd.node:
        new = tf.compat.v1.NodeDef()
        if node.name in argset:
            i = args.index(node.name)
            new.name = prefix + node.name
            new.op = "Identity"
            new.attr["T"].type = node.attr["dtype"].type
            new.input.append(arg_inputs[i])
            new.input.extend(arg_controls)
        else:
            new.CopyFrom(node)
            new.name = prefix + node.name
            del new.input[:]
            new.input.extend(rename(i) for i in node.input)
            if "_class" in new.attr:
                vals = [v.decode() for v in new.attr["_class"].list.s]
                vals = [("loc:@" + prefix + v[5:]) if v.startswith("loc:@") and v[5:] in local else v for v in vals]
                del new.attr["_class"].list.s[:]
                new.attr["_class"].list.s.extend(v.encode() for v in vals)
            new.device = ""
        out_nodes.append(new)
    return [rename(r) for r in rets], [prefix + c for c in controls]


def _results_node(name: str, dtypes, results: list[str], controls: list[str]):
    """The node that replaces a call or loop: ``IdentityN`` of its results (its consumers'
    ``name:i`` stay valid) with control inputs on its side effects; ``NoOp`` if none."""
    tf = import_tensorflow()
    node = tf.compat.v1.NodeDef()
    node.name = name
    if results:
        node.op = "IdentityN"
        node.attr["T"].list.type.extend(dtypes)
        node.input.extend(results)
    else:
        node.op = "NoOp"
    node.input.extend("^" + c for c in controls)
    return node


def _split_inputs(node) -> tuple[list[str], list[str]]:
    data = [i for i in node.input if not i.startswith("^")]
    ctrl = [i for i in node.input if i.startswith("^")]
    return data, ctrl


class _TripCounter:
    """Static trip counts of ``While`` ops (module docstring, step 2)."""

    def __init__(self, graph_def, lib: _Library):
        self.nodes = {n.name: n for n in graph_def.node}
        self.lib = lib
        self._consts: dict[str, int | None] = {}

    def const_value(self, tensor: str) -> int | None:
        """The integer value of ``tensor`` if its ancestors are constants and pure ops."""
        if tensor in self._consts:
            return self._consts[tensor]
        value = None
        name, _ = _tensor(tensor)
        seen, stack, ok = set(), [name], True
        while stack and ok:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            node = self.nodes.get(n)
            if node is None or node.op not in _PURE:
                ok = False
                break
            stack.extend(_node_name(i) for i in node.input)
        if ok:
            tf = import_tensorflow()
            sub = tf.compat.v1.GraphDef()
            sub.node.extend(self.nodes[n] for n in self._ordered(seen))
            g = tf.Graph()
            try:
                with g.as_default():
                    tf.graph_util.import_graph_def(sub, name="")
                with tf.compat.v1.Session(graph=g) as s:
                    v = s.run(g.get_tensor_by_name(tensor if ":" in tensor else tensor + ":0"))
                if getattr(v, "size", 1) == 1:
                    value = int(v)
            except Exception:  # not evaluable: not static
                value = None
        self._consts[tensor] = value
        return value

    def _ordered(self, names: set[str]) -> list[str]:
        order, done = [], set()

        def visit(n):
            if n in done:
                return
            done.add(n)
            for i in self.nodes[n].input:
                visit(_node_name(i))
            order.append(n)

        for n in sorted(names):
            visit(n)
        return order

    def trip_count(self, node) -> int | None:
        data, _ = _split_inputs(node)
        counts = []
        if len(data) >= 2:
            mx = self.const_value(data[1])
            if mx is not None and mx >= 0:
                counts.append(mx)
        c = self._counter_pattern(node, data)
        if c is not None:
            counts.append(c)
        return min(counts) if counts else None

    def _counter_pattern(self, node, data) -> int | None:
        """``cond: arg_j < C`` (or ``<=``), ``body: arg_j + s`` with ``s > 0``, constant start."""
        try:
            cgd, crets, _, cargs = self.lib.body(node.attr["cond"].func.name)
            bgd, brets, _, bargs = self.lib.body(node.attr["body"].func.name)
        except KeyError:
            return None
        cnodes = {n.name: n for n in cgd.node}
        bnodes = {n.name: n for n in bgd.node}

        def through_identity(nodes, t):
            name = _node_name(t)
            while name in nodes and nodes[name].op in ("Identity", "Cast") and nodes[name].input:
                name = _node_name(nodes[name].input[0])
            return name

        def const_in(nodes, name):
            n = nodes.get(name)
            if n is None or n.op != "Const":
                return None
            from tensorflow.python.framework import tensor_util

            v = tensor_util.MakeNdarray(n.attr["value"].tensor)
            return int(v) if v.size == 1 else None

        cmp = cnodes.get(through_identity(cnodes, crets[0])) if crets else None
        if cmp is None or cmp.op not in ("Less", "LessEqual"):
            return None
        a, b = (through_identity(cnodes, i) for i in cmp.input[:2])
        if a not in cargs:
            return None
        limit = const_in(cnodes, b)
        if limit is None and b in cargs:
            limit = self.const_value(data[cargs.index(b)])
        if limit is None:
            return None
        j = cargs.index(a)
        start = self.const_value(data[j])
        upd = bnodes.get(through_identity(bnodes, brets[j]))
        if start is None or upd is None or upd.op not in ("AddV2", "Add"):
            return None
        x, y = (through_identity(bnodes, i) for i in upd.input[:2])
        step = const_in(bnodes, y) if x == bargs[j] else const_in(bnodes, x) if y == bargs[j] else None
        if not step or step <= 0:
            return None
        end = limit + (1 if cmp.op == "LessEqual" else 0)
        return max(0, -(-(end - start) // step))


def _python_pass(graph_def, max_unroll: int, report: FlattenReport):
    """One pass: inline every call, unroll every While whose trip count is static.
    Returns the new GraphDef and whether anything changed."""
    tf = import_tensorflow()
    lib = _Library(graph_def)
    counter = _TripCounter(graph_def, lib)
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    changed = False
    for node in graph_def.node:
        fname = node.attr["f"].func.name if node.op in CALL_TYPES else None
        if fname and fname in lib.fdefs:
            data, ctrl = _split_inputs(node)
            nodes: list = []
            rets, controls = _copy_body(nodes, lib, fname, node.name + "/", data, ctrl)
            out.node.extend(nodes)
            out.node.append(_results_node(node.name, node.attr["Tout"].list.type, rets, controls))
            report.inlined_calls += 1
            changed = True
            continue
        if node.op in WHILE_TYPES and node.attr["body"].func.name in lib.fdefs:
            n = counter.trip_count(node)
            if n is not None and n <= max_unroll:
                data, ctrl = _split_inputs(node)
                current, controls = data, []
                nodes = []
                for k in range(n):
                    current, controls = _copy_body(nodes, lib, node.attr["body"].func.name, f"{node.name}/iter_{k}/",
                                                   current, ctrl if k == 0 else ["^" + c for c in controls])
                out.node.extend(nodes)
                out.node.append(_results_node(node.name, node.attr["T"].list.type, current,
                                              controls + ([_node_name(c) for c in ctrl] if n == 0 else [])))
                report.unrolled_loops[node.name] = n
                changed = True
                continue
        out.node.add().CopyFrom(node)
    return out, changed


def _used_functions(graph_def) -> set[str]:
    """Names of library functions still referenced (transitively) by the graph's nodes."""
    fdefs = {f.signature.name: f for f in graph_def.library.function}
    used, stack = set(), []

    def refs(nodes):
        for n in nodes:
            if n.op in fdefs:
                stack.append(n.op)
            for a in n.attr.values():
                if a.HasField("func"):
                    stack.append(a.func.name)
                for f in a.list.func:
                    stack.append(f.name)

    refs(graph_def.node)
    while stack:
        f = stack.pop()
        if f in used or f not in fdefs:
            continue
        used.add(f)
        refs(fdefs[f].node_def)
    return used


def _prune_library(graph_def) -> None:
    used = _used_functions(graph_def)
    keep = [f for f in graph_def.library.function if f.signature.name in used]
    del graph_def.library.function[:]
    graph_def.library.function.extend(keep)
    grads = [g for g in graph_def.library.gradient if g.function_name in used]
    del graph_def.library.gradient[:]
    graph_def.library.gradient.extend(grads)


def grappler_inline(graph_def, fetches: list[str]):
    """Grappler's function optimizer alone: inlines the library and lowers functional
    control flow (``If``/``Case``/``While``) to TF1 ``Switch``/``Merge`` and loop frames."""
    tf = import_tensorflow()
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.grappler import tf_optimizer

    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(graph_def)
    col = meta_graph_pb2.CollectionDef()
    col.node_list.value.extend(fetches)
    mg.collection_def["train_op"].CopyFrom(col)
    cfg = config_pb2.ConfigProto()
    rw = cfg.graph_options.rewrite_options
    rw.optimizers[:] = ["function"]
    rw.min_graph_nodes = -1
    rw.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    out = tf_optimizer.OptimizeGraph(cfg, mg)
    result = tf.compat.v1.GraphDef()
    result.CopyFrom(out)
    return result


def loop_frames(graph_def) -> list[str]:
    """The distinct TF1 loop frames (``Enter`` ops' ``frame_name``) of a flat graph, sorted."""
    return sorted({n.attr["frame_name"].s.decode() for n in graph_def.node if n.op in ("Enter", "RefEnter")})


def flatten_graph_def(graph_def, fetches: list[str], max_unroll: int = MAX_UNROLL, max_passes: int = 64):
    """Make a TF2 graph flat (module docstring): ``(graph_def, report)``.

    Args:
        graph_def: a ``GraphDef``, possibly with a function library.
        fetches: op names one step runs (kept by grappler).
        max_unroll: largest trip count unrolled; longer loops stay one iteration.
        max_passes: bound on the Python inlining passes (nesting depth).
    Returns:
        The flat ``GraphDef`` (no library when everything could be inlined) and a
        [`FlattenReport`][compgraph.tf2.FlattenReport].
    Raises:
        ValueError: call ops remain after grappler (a function TensorFlow cannot inline),
            naming the first.
    """
    report = FlattenReport(library_functions=len(graph_def.library.function))
    if not len(graph_def.library.function):
        report.one_iteration_loops = loop_frames(graph_def)
        return graph_def, report
    gd = graph_def
    for _ in range(max_passes):
        gd, changed = _python_pass(gd, max_unroll, report)
        if not changed:
            break
    _prune_library(gd)
    if len(gd.library.function):
        report.grappler = True
        gd = grappler_inline(gd, fetches)
        _prune_library(gd)

    left = [f"{n.name} ({n.op})" for n in gd.node if n.op in CALL_OP_TYPES or n.op in {f.signature.name for f in gd.library.function}]
    if left:
        raise ValueError(f"{len(left)} call op(s) could not be inlined, e.g. {left[0]}")
    report.one_iteration_loops = loop_frames(gd)
    return gd, report


_RESOURCE_READERS = ("ReadVariableOp", "ResourceGather", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def materialize_variables(graph_def, variables: dict | None = None, init_name: str = "init"):
    """Replace resource ``Placeholder`` nodes by ``VarHandleOp`` variables and add an init op.

    Args:
        graph_def: a flat ``GraphDef`` (modified in place).
        variables: ``{placeholder name: (tf.DType, shape tuple)}`` of known variables (a
            ``ConcreteFunction``'s captures); others are inferred from the placeholder's
            ``_handle_dtypes``/``_handle_shapes`` attributes, from the ``_output_shapes`` its
            ``ReadVariableOp`` readers carry (a graph saved with ``as_graph_def(add_shapes=True)``),
            or from the graph, after import, by TensorFlow's shape inference (``ReadVariableOp``
            outputs, assigned values). A raw ``tf.function`` graph (``as_graph_def()``) records
            none of these: its variables cannot be sized.
        init_name: name of the added init op (``NoOp`` grouping the variables' assignments);
            a unique suffix is added if the name is taken.
    Returns:
        ``(init op name or None, [resource placeholders that could not be materialized])``.
    """
    tf = import_tensorflow()
    variables = dict(variables or {})
    names = {n.name for n in graph_def.node}
    resource_ph = [n for n in graph_def.node if n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum]
    if not resource_ph:
        return None, []
    # infer from readers: import once, look at ReadVariableOp outputs.
    missing = [n.name for n in resource_ph if n.name not in variables]
    if missing:
        for n in resource_ph:
            if n.name in variables:
                continue
            hd, hs = n.attr.get("_handle_dtypes"), n.attr.get("_handle_shapes")
            if hd is not None and hs is not None and len(hd.list.type) == 1 and len(hs.list.shape) == 1:
                shape = tf.TensorShape(hs.list.shape[0])
                if shape.is_fully_defined():
                    variables[n.name] = (tf.as_dtype(hd.list.type[0]), tuple(shape.as_list()))
        missing = [n.name for n in resource_ph if n.name not in variables]
    if missing:  # a GraphDef saved with add_shapes=True: the readers' recorded output shapes
        consumers: dict[str, list] = {}
        for node in graph_def.node:
            for k, inp in enumerate(node.input):
                consumers.setdefault(inp.lstrip("^").split(":")[0], []).append((node, k))
        for name in missing:
            for node, k in consumers.get(name, []):
                shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else []
                if node.op == "ReadVariableOp" and k == 0 and len(shapes) == 1:
                    shape = tf.TensorShape(shapes[0])
                    if shape.is_fully_defined():
                        variables[name] = (tf.as_dtype(node.attr["dtype"].type), tuple(shape.as_list()))
                        break
        missing = [n.name for n in resource_ph if n.name not in variables]
    if missing:
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        for name in missing:
            for consumer in g.get_operation_by_name(name).outputs[0].consumers():
                t = consumer.type
                if t == "ReadVariableOp" and consumer.outputs[0].shape.is_fully_defined():
                    variables[name] = (consumer.outputs[0].dtype, tuple(consumer.outputs[0].shape.as_list()))
                    break
                if t.startswith("Assign") and t.endswith("VariableOp") and len(consumer.inputs) > 1 \
                        and consumer.inputs[1].shape.is_fully_defined():
                    variables[name] = (consumer.inputs[1].dtype, tuple(consumer.inputs[1].shape.as_list()))
                    break
    unknown = []
    assigns: list = []
    init = init_name
    k = 0
    while init in names:
        k += 1
        init = f"{init_name}_{k}"
    new_nodes = []
    for n in resource_ph:
        spec = variables.get(n.name)
        if spec is None:
            unknown.append(n.name)
            continue
        dtype, shape = tf.as_dtype(spec[0]), tuple(int(d) for d in spec[1])
        attrs_keep = {k: n.attr[k] for k in n.attr if k in ("_class",)}
        n.op = "VarHandleOp"
        n.ClearField("attr")
        n.attr["dtype"].type = dtype.as_datatype_enum
        n.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
        n.attr["shared_name"].s = n.name.encode()
        n.attr["container"].s = b""
        n.attr["allowed_devices"].list.s.extend([])
        for k2, v in attrs_keep.items():
            n.attr[k2].CopyFrom(v)
        del n.input[:]
        base = f"{init}/{n.name}"
        shape_node = tf.compat.v1.NodeDef(name=f"{base}/shape", op="Const")
        shape_node.attr["dtype"].type = tf.int32.as_datatype_enum
        shape_node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(list(shape), dtype=tf.int32, shape=[len(shape)]))
        new_nodes.append(shape_node)
        if dtype.is_floating:
            value = tf.compat.v1.NodeDef(name=f"{base}/random", op="RandomUniform", input=[shape_node.name])
            value.attr["dtype"].type = dtype.as_datatype_enum
            value.attr["T"].type = tf.int32.as_datatype_enum
            value.attr["seed"].i = 1
            value.attr["seed2"].i = len(assigns) + 1
            scale = tf.compat.v1.NodeDef(name=f"{base}/scale", op="Const")
            scale.attr["dtype"].type = dtype.as_datatype_enum
            scale.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(0.1, dtype=dtype, shape=[]))
            scaled = tf.compat.v1.NodeDef(name=f"{base}/value", op="Mul", input=[value.name, scale.name])
            scaled.attr["T"].type = dtype.as_datatype_enum
            new_nodes += [value, scale, scaled]
            src = scaled.name
        else:
            zero = tf.compat.v1.NodeDef(name=f"{base}/zero", op="Const")
            zero.attr["dtype"].type = dtype.as_datatype_enum
            zero.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(0 if dtype != tf.bool else False, dtype=dtype, shape=[]))
            fill = tf.compat.v1.NodeDef(name=f"{base}/value", op="Fill", input=[shape_node.name, zero.name])
            fill.attr["T"].type = dtype.as_datatype_enum
            fill.attr["index_type"].type = tf.int32.as_datatype_enum
            new_nodes += [zero, fill]
            src = fill.name
        assign = tf.compat.v1.NodeDef(name=f"{base}/Assign", op="AssignVariableOp", input=[n.name, src])
        assign.attr["dtype"].type = dtype.as_datatype_enum
        assign.attr["_class"].list.s.append(f"loc:@{n.name}".encode())
        new_nodes.append(assign)
        assigns.append(assign.name)
    if not assigns:
        return None, unknown
    graph_def.node.extend(new_nodes)
    init_node = graph_def.node.add()
    init_node.name, init_node.op = init, "NoOp"
    init_node.input.extend("^" + a for a in assigns)
    return init, unknown



@dataclass
class FlatStep:
    """A TF2 training step made flat: the ``GraphDef``, the op names one step runs, the
    init op (``None`` when the graph has no variables), the [`FlattenReport`][compgraph.tf2.FlattenReport], and the
    resource placeholders that could not be sized ([`materialize_variables`][compgraph.tf2.materialize_variables])."""

    graph_def: object
    fetches: list
    init_op: str | None
    report: FlattenReport
    unsized_variables: list = field(default_factory=list)


def _unique(names: set[str], base: str) -> str:
    name, k = base, 0
    while name in names:
        k += 1
        name = f"{base}_{k}"
    return name


def flatten_step(graph_def, fetches: list[str], variables: dict | None = None, max_unroll: int = MAX_UNROLL) -> FlatStep:
    """[`flatten_graph_def`][compgraph.tf2.flatten_graph_def] then [`materialize_variables`][compgraph.tf2.materialize_variables].

    Fetch names survive flattening (inlined calls keep their name); a fetch that grappler
    removed raises ``ValueError``.
    """
    flat, report = flatten_graph_def(graph_def, fetches, max_unroll=max_unroll)
    names = {n.name for n in flat.node}
    for f in fetches:
        if f not in names:
            raise ValueError(f"fetch {f!r} disappeared while inlining the function library")
    init, unknown = materialize_variables(flat, variables)
    return FlatStep(flat, list(fetches), init, report, unknown)


def concrete_function_step(fn, max_unroll: int = MAX_UNROLL) -> FlatStep:
    """Flatten a ``ConcreteFunction`` (a ``tf.function`` traced for its inputs, or a
    SavedModel signature) into a runnable TF1-style training step.

    The step's fetches are the function's output ops and, when it has side effects (its
    control outputs: variable updates), a ``NoOp`` named ``<function>_side_effects`` that
    depends on them. Its captured variables become ``VarHandleOp`` variables of the
    captured dtype and shape ([`materialize_variables`][compgraph.tf2.materialize_variables]); its inputs stay
    ``Placeholder`` nodes. Raises ``ValueError`` as [`flatten_graph_def`][compgraph.tf2.flatten_graph_def].
    """
    tf = import_tensorflow()
    from tensorflow.python.ops import handle_data_util

    graph = fn.graph
    gd = graph.as_graph_def(add_shapes=True)
    variables = {}
    for ph in graph.internal_captures:
        if ph.dtype != tf.resource:
            continue
        data = handle_data_util.get_resource_handle_data(ph)
        if data is not None and len(data.shape_and_type) == 1:
            st = data.shape_and_type[0]
            shape = tf.TensorShape(st.shape)
            if shape.is_fully_defined():
                variables[ph.op.name] = (tf.as_dtype(st.dtype), tuple(shape.as_list()))
    fetches = []
    for t in graph.outputs:
        if t.op.name not in fetches:
            fetches.append(t.op.name)
    controls = sorted({op.name for op in graph.control_outputs} - set(fetches))
    if controls:
        names = {n.name for n in gd.node}
        node = gd.node.add()
        node.name = _unique(names, "side_effects")
        node.op = "NoOp"
        node.input.extend("^" + c for c in controls)
        fetches.append(node.name)
    if not fetches:
        raise ValueError("the function has no outputs and no side effects: nothing to run")
    return flatten_step(gd, fetches, variables, max_unroll=max_unroll)
