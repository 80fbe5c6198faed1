"""Users' own graphs: a TensorFlow ``GraphDef`` file or a Keras model, checked and loaded.

Three ways in, each giving a [`UserStep`][compgraph.user_graph.UserStep] (``graph_def``, ``fetches``, ``info``) for
[`compgraph.tf_import.import_graph_def`][compgraph.tf_import.import_graph_def]:

* [`load_graph_def_step`][compgraph.user_graph.load_graph_def_step]: a ``GraphDef`` saved as ``.pb`` (binary protobuf, e.g.
  ``tf.io.write_graph(graph_def, dir, "step.pb", as_text=False)``) or ``.pbtxt`` (protobuf
  text format, parsed with ``google.protobuf.text_format``). A flat TF1-style graph is used
  as it is; a TF2 graph with a function library (``tf.function``'s
  ``get_concrete_function(...).graph.as_graph_def()``) is flattened by
  [`compgraph.tf2.flatten_step`][compgraph.tf2.flatten_step] (calls inlined, static loops unrolled, ``If``/``Case``
  lowered to ``Switch``/``Merge``, resource placeholders made variables).
* [`load_saved_model_step`][compgraph.user_graph.load_saved_model_step]: a SavedModel folder and the name of a signature whose
  function is the training step (``tf.saved_model.save(module, dir, signatures={"train_step":
  module.step.get_concrete_function(...)})``), flattened the same way.
* [`load_keras_step`][compgraph.user_graph.load_keras_step]: ``"module:function"``, the module imported from the current
  folder as Python imports a script's modules. The function returns a Keras 3 model
  (``import keras``), ``(keras 3 model, input_specs)``, or ``(legacy tf.keras model,
  input_specs)``: see [`load_keras_step`][compgraph.user_graph.load_keras_step] for the step each gets.

[`load_graph_def`][compgraph.user_graph.load_graph_def] and [`load_keras`][compgraph.user_graph.load_keras] return the ``(graph_def, fetches)`` pair only.

Every problem with a user's graph raises [`UserGraphError`][compgraph.user_spec.UserGraphError] (a ``ValueError``) with
a one-line message that names the file (or the Keras spec) and the problem.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from compgraph.tf2 import CALL_OP_TYPES  # noqa: F401 (its home is compgraph.tf2; re-exported)
from compgraph.tf_env import import_tensorflow
from compgraph.user_spec import (FILE_SPEC_PATTERN, SPEC_FORMS, SPEC_PATTERN, UserGraphError, _cwd_on_path,  # noqa: F401
                                 _import_user_file, parse_spec, probe_user_function, resolve_user_function)

#: Op types whose outputs feed TensorFlow v1 loops' back edges (``NextIteration -> Merge``).
LOOP_BACK_EDGE_TYPES = frozenset({"NextIteration", "RefNextIteration"})

_TF1_EXPORT_HINT = (
    "export a flat TF1-style graph instead (tf.compat.v1.disable_control_flow_v2(), build the step "
    "inside a tf.Graph on placeholders, save graph.as_graph_def()), or load the model with a Keras spec"
)
_INITIALIZER = re.compile(r"^(init(_\d+)?|save(_\d+)?/.*|report_uninitialized.*)$")


#: Largest GraphDef file or SavedModel folder read, in bytes (parsing takes several times
#: that in memory); the environment variable [`MAX_GRAPH_ENV`][compgraph.user_graph.MAX_GRAPH_ENV] (``--max-graph-mb``) raises it.
MAX_GRAPH_BYTES = 1_000_000_000
MAX_GRAPH_ENV = "PLACEMENT_MAX_GRAPH_BYTES"


def max_graph_bytes() -> int:
    """The size limit of a user's graph in bytes: [`MAX_GRAPH_ENV`][compgraph.user_graph.MAX_GRAPH_ENV] if set, else [`MAX_GRAPH_BYTES`][compgraph.user_graph.MAX_GRAPH_BYTES]."""
    value = os.environ.get(MAX_GRAPH_ENV, "")
    return int(value) if value.isdigit() else MAX_GRAPH_BYTES


def _check_size(nbytes: int, source: str, what: str) -> None:
    limit = max_graph_bytes()
    if nbytes > limit:
        raise UserGraphError(f"{source}: {what} is {nbytes:,} bytes, more than the {limit:,} allowed "
                             f"(raise the limit with --max-graph-mb or {MAX_GRAPH_ENV})")


@dataclass
class UserStep:
    """A user's training step ready for import.

    Attributes:
        graph_def: a flat ``tf.compat.v1.GraphDef`` (no function library).
        fetches: op names one step runs.
        info: how it was obtained, JSON-able: ``format`` (``tf1``, ``tf2``, ``keras2``,
            ``keras3``), and for TF2 graphs [`compgraph.tf2.FlattenReport.as_params`][compgraph.tf2.FlattenReport.as_params]
            (inlined calls, unrolled loops, loops kept as one iteration) and the ``init_op``.
    """

    graph_def: object
    fetches: list
    info: dict = field(default_factory=dict)

    @property
    def init_op(self) -> str | None:
        """The op that initializes the step's variables (``None``: none added; a TF1 graph's
        own ``init`` op, if any, is not reported here)."""
        return self.info.get("init_op") or None


def _flatten(graph_def, fetches: list[str], source: str, variables: dict | None = None) -> UserStep:
    """A TF2 graph (function library) made flat by [`compgraph.tf2.flatten_step`][compgraph.tf2.flatten_step]."""
    from compgraph import tf2

    try:
        step = tf2.flatten_step(graph_def, fetches, variables)
    except Exception as e:  # grappler's and our errors
        raise UserGraphError(f"{source}: cannot inline the function library: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    return _from_flat(step, source, "tf2")


def _refuse_unsized(unsized: list[str], graph_def, source: str) -> None:
    """One line when resource placeholders (variables) could not be sized: their parameter
    bytes and the FLOPs of every op reading them would be unknown, so the graph is refused."""
    if not unsized:
        return
    total = sum(1 for n in graph_def.node if n.op == "VarHandleOp") + len(unsized)
    raise UserGraphError(
        f"{source}: {len(unsized)} of {total} variables (resource placeholders) have no known shape, e.g. {unsized[0]!r}, "
        "so their bytes and the FLOPs of the ops reading them are unknown; a raw tf.function graph records none: "
        "save it with as_graph_def(add_shapes=True), or as a SavedModel (--saved-model)"
    )


def _from_flat(step, source: str, fmt: str) -> UserStep:
    _refuse_unsized(list(getattr(step, "unsized_variables", []) or []), step.graph_def, source)
    check_graph_def(step.graph_def, source)
    info = {"format": fmt, "init_op": step.init_op or "", **step.report.as_params()}
    return UserStep(step.graph_def, list(step.fetches), info)


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
        _check_size(path.stat().st_size, str(path), "the file")
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
            a function library or call ops left (named; the loaders inline them first);
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
        raise UserGraphError(
            f"{source}: ops are hidden in a function library ({'; '.join(parts)}); load it with load_graph_def or "
            f"--graph-def, which inline the library{'' if funcs else ' (this graph lacks it)'}, or {_TF1_EXPORT_HINT}"
        )
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


def load_graph_def_step(path: str | Path, fetches: list[str] | str | None = None) -> UserStep:
    """Load and check a user's training-step ``GraphDef``; a TF2 graph (function library) is
    flattened ([`compgraph.tf2.flatten_step`][compgraph.tf2.flatten_step]).

    Args:
        path: a ``.pb`` (binary) or ``.pbtxt`` (text format) ``GraphDef`` file.
        fetches: the op (or tensor, ``name:0``) names one step runs; default
            [`default_fetches`][compgraph.user_graph.default_fetches] of the graph as saved (the graph's sinks, initializers
            left out).
    Returns:
        A [`UserStep`][compgraph.user_graph.UserStep].
    Raises:
        UserGraphError: the file is missing or unreadable, larger than [`max_graph_bytes`][compgraph.user_graph.max_graph_bytes],
            has an unknown suffix, does not parse, cannot be flattened, or fails [`check_graph_def`][compgraph.user_graph.check_graph_def]; a fetch names no op.
    """
    path = Path(path)
    if not path.is_file():
        raise UserGraphError(f"graph def {str(path)!r}: no such file")
    graph_def = _parse(path)
    if len(graph_def.node) and len(graph_def.library.function):
        return _flatten(graph_def, _resolve_fetches(graph_def, fetches, str(path)), str(path))
    from compgraph.tf2 import loop_frames, materialize_variables

    tf = import_tensorflow()
    if any(n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum for n in graph_def.node):
        # a tf.function graph without nested calls: flat already, its variables still placeholders
        resolved = _resolve_fetches(graph_def, fetches, str(path))
        init, unsized = materialize_variables(graph_def)
        _refuse_unsized(unsized, graph_def, str(path))
        check_graph_def(graph_def, str(path))
        frames = loop_frames(graph_def)
        info = {"format": "tf2", "init_op": init or "", "one_iteration_loops": len(frames),
                "one_iteration_loop_names": ",".join(frames)[:240]}
        return UserStep(graph_def, resolved, info)
    check_graph_def(graph_def, str(path))
    frames = loop_frames(graph_def)
    info = {"format": "tf1", "one_iteration_loops": len(frames), "one_iteration_loop_names": ",".join(frames)[:240]}
    return UserStep(graph_def, _resolve_fetches(graph_def, fetches, str(path)), info)


def load_graph_def(path: str | Path, fetches: list[str] | str | None = None):
    """[`load_graph_def_step`][compgraph.user_graph.load_graph_def_step] as ``(graph_def, fetches)``: the flat
    ``tf.compat.v1.GraphDef`` and a list of op names. Raises as [`load_graph_def_step`][compgraph.user_graph.load_graph_def_step]."""
    step = load_graph_def_step(path, fetches)
    return step.graph_def, step.fetches


def load_saved_model_step(directory: str | Path, signature: str | None = None) -> UserStep:
    """The training step saved as a SavedModel signature, flattened.

    Args:
        directory: the SavedModel folder (``saved_model.pb`` and ``variables/``).
        signature: the signature's name; ``None`` if the SavedModel has exactly one.
    Returns:
        A [`UserStep`][compgraph.user_graph.UserStep] ([`compgraph.tf2.concrete_function_step`][compgraph.tf2.concrete_function_step]: the signature's
        outputs and a ``NoOp`` on its side effects are fetched; its variables become
        ``VarHandleOp`` variables with an ``init`` op, filled with random values, not the
        saved ones).
    Raises:
        UserGraphError: no such folder, not a SavedModel, larger than [`max_graph_bytes`][compgraph.user_graph.max_graph_bytes],
            no such signature (the message
            lists them), or the function cannot be flattened.
    """
    directory = Path(directory)
    source = f"saved model {str(directory)!r}"
    if not directory.is_dir():
        raise UserGraphError(f"{source}: no such folder")
    if not (directory / "saved_model.pb").is_file() and not (directory / "saved_model.pbtxt").is_file():
        raise UserGraphError(f"{source}: not a SavedModel (no saved_model.pb in it)")
    _check_size(sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()), source, "the folder")
    tf = import_tensorflow()
    try:
        loaded = tf.saved_model.load(str(directory))
    except Exception as e:
        raise UserGraphError(f"{source}: cannot load: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    names = sorted(loaded.signatures.keys())
    if signature is None:
        if len(names) != 1:
            raise UserGraphError(f"{source}: has {len(names)} signatures; name one with --signature: {', '.join(names) or 'none'}")
        signature = names[0]
    if signature not in loaded.signatures:
        raise UserGraphError(f"{source}: no signature {signature!r}; valid: {', '.join(names) or 'none'}")
    return _concrete_step(loaded.signatures[signature], f"{source} signature {signature!r}", "tf2")


def _concrete_step(fn, source: str, fmt: str) -> UserStep:
    from compgraph import tf2

    try:
        step = tf2.concrete_function_step(fn)
    except Exception as e:
        raise UserGraphError(f"{source}: cannot flatten the function: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    return _from_flat(step, source, fmt)


def load_concrete_function_step(fn, name: str = "function") -> UserStep:
    """A ``tf.function`` training step given as a ``ConcreteFunction``
    (``step.get_concrete_function(tf.TensorSpec(...), ...)``), flattened as
    [`load_saved_model_step`][compgraph.user_graph.load_saved_model_step] does. Raises [`UserGraphError`][compgraph.user_spec.UserGraphError]."""
    return _concrete_step(fn, name, "tf2")


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


#: batch size of a Keras 3 model's inputs whose batch dimension is not given
KERAS_DEFAULT_BATCH = 8


def _is_keras3_model(obj) -> bool:
    """True for a Keras 3 (``import keras``, version 3) model, not a legacy ``tf.keras`` one."""
    if "keras" not in sys.modules:
        return False
    keras = sys.modules["keras"]
    try:
        return int(str(getattr(keras, "__version__", "0")).split(".")[0]) >= 3 and isinstance(obj, keras.Model)
    except (TypeError, ValueError, AttributeError):
        return False


def _keras3_specs(tf, model, spec: str):
    """Input specs ``[(shape, dtype, name)]`` of a Keras 3 model returned alone: its
    ``inputs`` (batch [`KERAS_DEFAULT_BATCH`][compgraph.user_graph.KERAS_DEFAULT_BATCH] when not given), then the label: sparse
    integer labels of the output's shape without its last axis, or the output's shape for a
    compiled non-sparse loss."""
    inputs = list(getattr(model, "inputs", None) or [])
    outputs = list(getattr(model, "outputs", None) or [])
    if not inputs or not outputs:
        raise UserGraphError(
            f"keras {spec!r}: the Keras 3 model has no symbolic inputs/outputs (a subclassed model?); "
            f"return (model, input_specs) instead"
        )
    if len(outputs) != 1:
        raise UserGraphError(f"keras {spec!r}: the model has {len(outputs)} outputs; give a model with one output")

    def full(shape, what):
        dims = list(shape)
        if dims and dims[0] is None:
            dims[0] = KERAS_DEFAULT_BATCH
        if any(d is None for d in dims):
            raise UserGraphError(f"keras {spec!r}: {what} has shape {tuple(shape)}; give every dimension but the batch, "
                                 f"or return (model, input_specs)")
        return tuple(int(d) for d in dims)

    out = [(full(t.shape, f"input {i}"), tf.as_dtype(t.dtype), None) for i, t in enumerate(inputs)]
    oshape = full(outputs[0].shape, "the output")
    loss = getattr(model, "loss", None)
    sparse = loss is None or "sparse" in (loss if isinstance(loss, str) else type(loss).__name__ + getattr(loss, "name", "")).lower()
    out.append((oshape[:-1], tf.int32, None) if sparse else (oshape, tf.float32, None))
    return out


def _keras3_step(tf, model, specs, spec: str) -> UserStep:
    """The training step of a Keras 3 model as a ``tf.function``, flattened.

    The step: ``model(inputs, training=True)``, the compiled loss (``model.loss``) or sparse
    categorical cross-entropy (from logits unless the last layer's activation is
    ``softmax``), plus ``model.losses``; ``tape.gradient`` over the trainable variables;
    the compiled optimizer (``model.optimizer``) or ``keras.optimizers.Adam()``, ``apply``.
    """
    import keras

    loss = getattr(model, "loss", None)
    try:
        if loss is None:
            act = getattr(getattr(model.layers[-1], "activation", None), "__name__", "") if model.layers else ""
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=act != "softmax")
        else:
            loss_fn = keras.losses.get(loss) if isinstance(loss, str) else loss
    except (ValueError, TypeError) as e:
        raise UserGraphError(f"keras {spec!r}: unknown compiled loss {loss!r}") from e
    if not callable(loss_fn):
        raise UserGraphError(f"keras {spec!r}: compiled loss {loss!r} is not one loss; compile with one loss")
    opt = getattr(model, "optimizer", None)
    if not isinstance(opt, keras.optimizers.Optimizer):
        opt = keras.optimizers.Adam()
    n_in = len(specs) - 1
    signature = [tf.TensorSpec(shape, dtype, name=name or f"input_{i}") for i, (shape, dtype, name) in enumerate(specs[:-1])]
    signature.append(tf.TensorSpec(specs[-1][0], specs[-1][1], name="label"))

    def train_step(*args):
        xs, label = args[:n_in], args[n_in]
        with tf.GradientTape() as tape:
            outputs = model(xs[0] if n_in == 1 else list(xs), training=True)
            if isinstance(outputs, (list, tuple, dict)):
                raise UserGraphError(f"keras {spec!r}: the model has several outputs; give a model with one output")
            # Loss.call, not __call__: __call__ casts integer labels to float first, which hides
            # their class range from --env real's synthetic inputs (cluster.real.SyntheticInputs)
            per_sample = loss_fn.call(label, outputs) if isinstance(loss_fn, keras.losses.Loss) else loss_fn(label, outputs)
            value = tf.reduce_mean(per_sample)
            if model.losses:
                value = value + tf.math.add_n(list(model.losses))
        variables = model.trainable_variables
        grads = tape.gradient(value, variables)
        opt.apply(grads, variables)
        return value

    try:
        if not opt.built:
            opt.build(model.trainable_variables)
        fn = tf.function(train_step, autograph=False).get_concrete_function(*signature)
    except UserGraphError:
        raise
    except Exception as e:
        raise UserGraphError(f"keras {spec!r}: building the training step failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    return _concrete_step(fn, f"keras {spec!r}", "keras3")


def load_keras_step(spec: str) -> UserStep:
    """Build the training step of a user's Keras model.

    ``spec`` is ``"module:function"``; the module is imported with the current folder first
    on ``sys.path`` (as Python resolves a script's modules; no ``PYTHONPATH`` needed) and the
    function called with no arguments inside a fresh ``tf.Graph``. Accepted returns:

    * a **Keras 3 model** (``import keras``, ``keras.Model``, functional or sequential with
      known input shapes): inputs from ``model.inputs`` (an unknown batch dimension becomes
      [`KERAS_DEFAULT_BATCH`][compgraph.user_graph.KERAS_DEFAULT_BATCH]), sparse integer labels (or labels of the output's shape
      for a compiled non-sparse loss). The function is called a second time outside the
      ``tf.Graph`` (eagerly), since Keras 3 builds its variables eagerly.
    * ``(keras 3 model, input_specs)``: the same with the given specs.
    * ``(legacy tf.keras model, input_specs)`` (``TF_USE_LEGACY_KERAS=1`` makes ``tf.keras``
      the legacy Keras 2; [`compgraph.tf_env`][compgraph.tf_env]): the TF1 step described below.

    ``input_specs`` lists the model's inputs then the label, each a ``tf.TensorSpec`` or
    ``(shape, dtype)`` with every dimension given.

    Keras 3 step (`_keras3_step`): a ``tf.function`` (forward in training mode, loss,
    ``GradientTape`` gradients, the optimizer's ``apply``), flattened by
    [`compgraph.tf2.concrete_function_step`][compgraph.tf2.concrete_function_step] (the RNN layers' loops unrolled); inputs
    are placeholders ``input_0``... and ``label``.

    Legacy step: a placeholder per spec (``input_0``..., ``label``), ``model(inputs,
    training=True)`` (batch norm in training mode, no conditionals), the loss (the model's
    compiled loss if any, else sparse categorical cross-entropy; plus regularization
    losses), ``tf.compat.v1.train.AdamOptimizer().minimize(loss)`` under
    ``control_dependencies`` on the model's update ops (batch-norm moving averages),
    gradients colocated with their ops; fetches ``[train op, loss op]``.

    Returns:
        A [`UserStep`][compgraph.user_graph.UserStep] (``_output_shapes`` on every node of a legacy step).
    Raises:
        UserGraphError: the spec is not ``module:function``; the module cannot be imported;
            it has no such function; the function fails or returns something else than the
            accepted shapes; a spec is malformed or has an unknown dimension; the model has
            several outputs; building the step fails; or the graph fails
            [`check_graph_def`][compgraph.user_graph.check_graph_def].
    """
    if parse_spec(spec) is None:
        resolve_user_function(spec, "keras")  # raises: a malformed spec is refused before TensorFlow loads
    tf = import_tensorflow()  # before the user's module, which may import TensorFlow itself
    v1 = tf.compat.v1
    fn, func_name = resolve_user_function(spec, "keras")
    graph = tf.Graph()
    with graph.as_default():
        try:
            result = fn()
        except Exception as e:
            raise UserGraphError(f"keras {spec!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
        except SystemExit as e:
            raise UserGraphError(f"keras {spec!r}: {func_name}() called sys.exit({e.code!r})") from None
        first = result[0] if isinstance(result, tuple) and len(result) == 2 else result
        keras3 = _is_keras3_model(first)
        if not keras3:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise UserGraphError(
                    f"keras {spec!r}: {func_name}() must return a Keras 3 model or (model, input_specs); "
                    f"got {type(result).__name__}"
                )
            model, specs = result
            if not callable(model):
                raise UserGraphError(f"keras {spec!r}: {func_name}() returned a model that is not callable: {model!r}")
            specs = _input_specs(tf, specs, spec)
    if keras3:
        try:
            result = fn()  # eagerly: Keras 3 makes eager variables, captured by the tf.function
        except Exception as e:
            raise UserGraphError(f"keras {spec!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
        if isinstance(result, tuple):
            model, specs = result
            specs = _input_specs(tf, specs, spec)
        else:
            model = result
            specs = _keras3_specs(tf, model, spec)
        return _keras3_step(tf, model, specs, spec)
    with graph.as_default():
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
    return UserStep(graph_def, [train_op.name, loss.op.name], {"format": "keras2"})


def load_keras(spec: str):
    """[`load_keras_step`][compgraph.user_graph.load_keras_step] as ``(graph_def, fetches)``. Raises as [`load_keras_step`][compgraph.user_graph.load_keras_step]."""
    step = load_keras_step(spec)
    return step.graph_def, step.fetches
