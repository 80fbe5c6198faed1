"""Users' own graphs: a TensorFlow ``GraphDef`` file or a Keras model, checked and loaded.

Two ways in, both giving ``(graph_def, fetches)`` for :func:`compgraph.tf_import.import_graph_def`:

* :func:`load_graph_def`: a ``GraphDef`` saved as ``.pb`` (binary protobuf, e.g.
  ``tf.io.write_graph(graph_def, dir, "step.pb", as_text=False)``) or ``.pbtxt`` (protobuf
  text format, parsed with ``google.protobuf.text_format``). It must be a flat, TF1-style
  graph (``shared/notes/stack.md``): no function library, no call ops.
* :func:`load_keras`: ``"module:function"``; the function returns ``(model, input_specs)``
  and the model's training step is built here in TF1 graph mode (legacy Keras, control
  flow v1; :mod:`compgraph.tf_env`): placeholders, the loss, Adam under the model's
  update ops.

Every problem with a user's graph raises :class:`UserGraphError` (a ``ValueError``) with
a one-line message that names the file (or the Keras spec) and the problem.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import networkx as nx

from compgraph.tf_env import import_tensorflow

#: Op types that call a function of the graph's function library (TF2 ``tf.function``
#: graphs and control flow v2): their ops are hidden from a per-op placement.
CALL_OP_TYPES = frozenset(
    """PartitionedCall StatefulPartitionedCall While StatelessWhile If StatelessIf Case
    StatelessCase RemoteCall SymbolicGradient""".split()
)
#: Op types whose outputs feed TensorFlow v1 loops' back edges (``NextIteration -> Merge``).
LOOP_BACK_EDGE_TYPES = frozenset({"NextIteration", "RefNextIteration"})

_TF1_EXPORT_HINT = (
    "export a flat TF1-style graph instead (tf.compat.v1.disable_control_flow_v2(), build the step "
    "inside a tf.Graph on placeholders, save graph.as_graph_def()), or load the model with a Keras spec"
)
_INITIALIZER = re.compile(r"^(init(_\d+)?|save(_\d+)?/.*|report_uninitialized.*)$")


class UserGraphError(ValueError):
    """A user's graph file or Keras model cannot be used; the message names the source and the problem."""


def _node_name(inp: str) -> str:
    """``"^a"``, ``"a:1"``, ``"a"`` -> ``"a"``."""
    return inp.lstrip("^").split(":")[0]


def _parse(path: Path):
    tf = import_tensorflow()
    from google.protobuf import message, text_format

    graph_def = tf.compat.v1.GraphDef()
    suffix = path.suffix.lower()
    if suffix not in (".pb", ".pbtxt"):
        raise UserGraphError(
            f"{path}: unknown file suffix {path.suffix!r}; expected .pb (binary GraphDef) or .pbtxt (text format)"
        )
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserGraphError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        if suffix == ".pb":
            graph_def.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8"), graph_def)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as e:
        kind = "binary GraphDef" if suffix == ".pb" else "text-format GraphDef"
        raise UserGraphError(f"{path}: does not parse as a {kind}: {' '.join(str(e).split())}") from e
    return graph_def


def check_graph_def(graph_def, source: str) -> None:
    """Check that ``graph_def`` is a flat, acyclic training-step graph.

    Args:
        graph_def: a ``tf.compat.v1.GraphDef``.
        source: the file name or Keras spec named in error messages.
    Raises:
        UserGraphError: no nodes; a node without a name or op type; an input naming no node;
            a function library or call ops (named; the message suggests the TF1-style export);
            a cycle other than a TensorFlow v1 loop's ``NextIteration -> Merge`` back edge (the
            message names an op on it).
    """
    if len(graph_def.node) == 0:
        raise UserGraphError(f"{source}: empty graph (no nodes)")
    names: dict[str, str] = {}
    for i, node in enumerate(graph_def.node):
        if not node.name or not node.op:
            raise UserGraphError(f"{source}: node #{i} has no {'name' if not node.name else 'op type'}")
        if node.name in names:
            raise UserGraphError(f"{source}: two nodes named {node.name!r}")
        names[node.name] = node.op
    funcs = [f.signature.name for f in graph_def.library.function]
    calls = [f"{n.name} ({n.op})" for n in graph_def.node if n.op in CALL_OP_TYPES]
    if funcs or calls:
        parts = []
        if funcs:
            parts.append(f"{len(funcs)} function(s) in its library: {', '.join(funcs[:3])}{', ...' if len(funcs) > 3 else ''}")
        if calls:
            parts.append(f"{len(calls)} call op(s): {', '.join(calls[:3])}{', ...' if len(calls) > 3 else ''}")
        raise UserGraphError(f"{source}: ops are hidden in a function library ({'; '.join(parts)}); {_TF1_EXPORT_HINT}")
    g = nx.DiGraph()
    g.add_nodes_from(names)
    for node in graph_def.node:
        for inp in node.input:
            src = _node_name(inp)
            if src not in names:
                raise UserGraphError(f"{source}: node {node.name!r} has input {inp!r}, which names no node")
            if names[src] in LOOP_BACK_EDGE_TYPES:
                continue  # a TF v1 loop's back edge
            g.add_edge(src, node.name)
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        ops = [a for a, _ in cycle]
        raise UserGraphError(
            f"{source}: has a cycle outside TensorFlow loop constructs through op {min(ops)!r} "
            f"({len(ops)} ops on it: {' -> '.join(ops[:4])}{' -> ...' if len(ops) > 4 else ''})"
        )


def default_fetches(graph_def) -> list[str]:
    """The ops one step runs when the user names none, in GraphDef order.

    The graph's sinks (ops no other op consumes, through data or control inputs), without
    TF1 bookkeeping: initializer and saver ops (``init``, ``init_N``, ``save/...``,
    ``report_uninitialized...``, variables' initial ``.../Assign``), ``VarIsInitializedOp``
    and the ``<variable>/Read/ReadVariableOp`` snapshot every resource variable creates. If
    some of the remaining sinks are ``NoOp`` (a train op made by ``minimize``/``group``),
    only those: other sinks of a TF1 training graph are by-products (the gradient with
    respect to an input placeholder, reads after the update) that a session running the
    train op never computes. Otherwise all remaining sinks.
    """
    consumed = {_node_name(i) for n in graph_def.node for i in n.input}
    sinks = []
    for n in graph_def.node:
        if n.name in consumed or _INITIALIZER.match(n.name) or n.op == "VarIsInitializedOp":
            continue
        if n.op in ("Assign", "AssignVariableOp") and (n.name.endswith("/Assign") or "/Initializer/" in n.name):
            continue
        if n.op == "ReadVariableOp" and n.name.endswith("/Read/ReadVariableOp"):
            continue
        sinks.append(n)
    no_ops = [n.name for n in sinks if n.op == "NoOp"]
    return no_ops or [n.name for n in sinks]


def _resolve_fetches(graph_def, fetches, source: str) -> list[str]:
    names = {n.name for n in graph_def.node}
    if fetches is None:
        out = default_fetches(graph_def)
        if not out:
            raise UserGraphError(f"{source}: no op to fetch (every sink is an initializer or saver op); name the fetches")
        return out
    if isinstance(fetches, str):
        fetches = [fetches]
    out = []
    for f in fetches:
        name = _node_name(str(f))
        if name not in names:
            raise UserGraphError(f"{source}: fetch {f!r} names no op of the graph")
        if name not in out:
            out.append(name)
    if not out:
        raise UserGraphError(f"{source}: fetches is empty")
    return out


def load_graph_def(path: str | Path, fetches: list[str] | str | None = None):
    """Load and check a user's training-step ``GraphDef``.

    Args:
        path: a ``.pb`` (binary) or ``.pbtxt`` (text format) ``GraphDef`` file.
        fetches: the op (or tensor, ``name:0``) names one step runs; default
            :func:`default_fetches` (the graph's sinks, initializers left out).
    Returns:
        ``(graph_def, fetches)``: the ``tf.compat.v1.GraphDef`` and a list of op names.
    Raises:
        UserGraphError: the file is missing or unreadable, has an unknown suffix, does not
            parse, or fails :func:`check_graph_def`; a fetch names no op.
    """
    path = Path(path)
    if not path.is_file():
        raise UserGraphError(f"{path}: no such file")
    graph_def = _parse(path)
    check_graph_def(graph_def, str(path))
    return graph_def, _resolve_fetches(graph_def, fetches, str(path))


def _input_specs(tf, specs, spec: str):
    """Input specs -> ``[(shape tuple, tf.DType, name or None)]``; raises UserGraphError."""
    if not isinstance(specs, (list, tuple)) or len(specs) < 2:
        raise UserGraphError(
            f"keras {spec!r}: input_specs must list the model's inputs and then the label "
            f"(at least 2 entries: tf.TensorSpec or (shape, dtype)); got {specs!r}"
        )
    out = []
    for i, s in enumerate(specs):
        what = "label" if i == len(specs) - 1 else f"input {i}"
        try:
            if isinstance(s, tf.TensorSpec):
                shape, dtype, name = s.shape, s.dtype, s.name
            else:
                shape, dtype = s
                name = None
            shape = tf.TensorShape(shape)
            dtype = tf.as_dtype(dtype)
        except (TypeError, ValueError) as e:
            raise UserGraphError(
                f"keras {spec!r}: {what} spec {s!r} is not a tf.TensorSpec or (shape, dtype): {e}"
            ) from e
        if not shape.is_fully_defined():
            raise UserGraphError(
                f"keras {spec!r}: {what} spec has shape {shape}; give every dimension (the batch size too)"
            )
        out.append((tuple(shape.as_list()), dtype, name))
    return out


def _loss(tf, model, label, outputs, spec: str):
    """The model's compiled loss if it has one (a name, a function or a ``Loss``), else
    sparse categorical cross-entropy (from logits unless the output op is a ``Softmax``);
    plus the model's regularization losses. A scalar tensor."""
    if isinstance(outputs, (list, tuple, dict)):
        raise UserGraphError(f"keras {spec!r}: the model has several outputs; give a model with one output")
    compiled = getattr(model, "loss", None)
    if compiled is None:
        from_logits = outputs.op.type != "Softmax"
        per_sample = tf.keras.losses.sparse_categorical_crossentropy(label, outputs, from_logits=from_logits)
    elif isinstance(compiled, str) or callable(compiled):
        try:
            fn = tf.keras.losses.get(compiled) if isinstance(compiled, str) else compiled
        except ValueError as e:
            raise UserGraphError(f"keras {spec!r}: unknown compiled loss {compiled!r}") from e
        per_sample = fn(label, outputs)
    else:
        raise UserGraphError(f"keras {spec!r}: compiled loss {compiled!r} is not one loss; compile with one loss")
    loss = tf.reduce_mean(per_sample, name="loss")
    if model.losses:
        loss = tf.math.add_n([loss, *model.losses], name="total_loss")
    return loss


def load_keras(spec: str):
    """Build the training step of a user's Keras model as a flat TF1-style ``GraphDef``.

    ``spec`` is ``"module:function"``: the module is imported and the function called with
    no arguments inside a fresh ``tf.Graph`` (legacy Keras, control flow v1: see
    :mod:`compgraph.tf_env`); it returns ``(model, input_specs)``, ``input_specs`` listing
    the model's inputs then the label, each a ``tf.TensorSpec`` or ``(shape, dtype)`` with
    every dimension given. The step: a placeholder per spec (``input_0``..., ``label``),
    ``model(inputs, training=True)`` (batch norm in training mode, no conditionals), the
    loss (the model's compiled loss if any, else sparse categorical cross-entropy; plus
    regularization losses), ``tf.compat.v1.train.AdamOptimizer().minimize(loss)`` under
    ``control_dependencies`` on the model's update ops (batch-norm moving averages),
    gradients colocated with their ops.

    Returns:
        ``(graph_def, fetches)``: the ``GraphDef`` (``_output_shapes`` on every node) and
        ``[train op name, loss op name]``.
    Raises:
        UserGraphError: the spec is not ``module:function``; the module cannot be imported;
            it has no such function; the function fails or returns something else than
            ``(model, input_specs)``; a spec is malformed or has an unknown dimension; the
            model has several outputs; building the step fails; or the graph fails
            :func:`check_graph_def`.
    """
    m = re.fullmatch(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)", spec or "")
    if m is None:
        raise UserGraphError(f"keras spec {spec!r}: expected 'module:function', e.g. 'mypackage.models:build_model'")
    module_name, func_name = m.groups()
    tf = import_tensorflow()
    v1 = tf.compat.v1
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UserGraphError(f"keras {spec!r}: no module {module_name!r} ({e})") from e
    except Exception as e:  # the user's module raised while importing
        raise UserGraphError(f"keras {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise UserGraphError(f"keras {spec!r}: module {module_name!r} has no function {func_name!r}")
    graph = tf.Graph()
    with graph.as_default():
        try:
            result = fn()
        except Exception as e:
            raise UserGraphError(f"keras {spec!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
        if not (isinstance(result, tuple) and len(result) == 2):
            raise UserGraphError(f"keras {spec!r}: {func_name}() must return (model, input_specs); got {type(result).__name__}")
        model, specs = result
        if not callable(model):
            raise UserGraphError(f"keras {spec!r}: {func_name}() returned a model that is not callable: {model!r}")
        specs = _input_specs(tf, specs, spec)
        xs = [
            v1.placeholder(dtype, shape, name=name or f"input_{i}") for i, (shape, dtype, name) in enumerate(specs[:-1])
        ]
        shape, dtype, _ = specs[-1]
        label = v1.placeholder(dtype, shape, name="label")
        try:
            outputs = model(xs[0] if len(xs) == 1 else xs, training=True)
            loss = _loss(tf, model, label, outputs, spec)
            if hasattr(model, "get_updates_for"):
                updates = list(model.get_updates_for(xs[0] if len(xs) == 1 else xs)) + list(model.get_updates_for(None))
            else:
                updates = list(getattr(model, "updates", []))
            with tf.control_dependencies(updates):
                train_op = v1.train.AdamOptimizer().minimize(loss, colocate_gradients_with_ops=True, name="train_step")
            v1.global_variables_initializer()
        except UserGraphError:
            raise
        except Exception as e:
            raise UserGraphError(f"keras {spec!r}: building the training step failed: {type(e).__name__}: {e}") from e
    graph_def = graph.as_graph_def(add_shapes=True)
    check_graph_def(graph_def, f"keras {spec!r}")
    return graph_def, [train_op.name, loss.op.name]
