"""Tests of users' graphs: GraphDef files (.pb, .pbtxt) and their errors, Keras models built
into a TF1-style training step, and ``prepare_user_graph``."""

from __future__ import annotations

import sys
import textwrap

import pytest

from compgraph.frontends import prepare_user_graph
from compgraph.tf_env import import_tensorflow
from compgraph.tf_import import import_graph_def
from compgraph.user_graph import UserGraphError, check_graph_def, default_fetches, load_graph_def, load_keras


def _edges(graph_def) -> set[tuple[str, str]]:
    return {(i, n.name) for n in graph_def.node for i in n.input}


@pytest.fixture(scope="module")
def tiny():
    """A real tiny TF1 training step: x[4,3] @ W[3,2] -> sum, Adam, and an initializer."""
    tf = import_tensorflow()
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [4, 3], name="x")
        w = v1.get_variable("W", [3, 2])
        loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
        train = v1.train.AdamOptimizer(0.1).minimize(loss, colocate_gradients_with_ops=True, name="train")
        v1.global_variables_initializer()
    return graph.as_graph_def(add_shapes=True), train.name, loss.op.name


@pytest.fixture(scope="module")
def tiny_files(tiny, tmp_path_factory):
    from google.protobuf import text_format

    gd = tiny[0]
    d = tmp_path_factory.mktemp("graphs")
    (d / "step.pb").write_bytes(gd.SerializeToString())
    (d / "step.pbtxt").write_text(text_format.MessageToString(gd))
    return d


# --------------------------------------------------------------------------------------
# GraphDef files
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fname", ["step.pb", "step.pbtxt"])
def test_round_trip(tiny, tiny_files, fname):
    gd, train, loss = tiny
    back, fetches = load_graph_def(tiny_files / fname)
    assert len(back.node) == len(gd.node)
    assert {n.name: n.op for n in back.node} == {n.name: n.op for n in gd.node}
    assert _edges(back) == _edges(gd)
    # the sinks, without the initializer: the train op only (the loss feeds the gradients)
    assert fetches == [train]
    assert "init" in {n.name for n in gd.node}
    # explicit fetches, tensor names accepted
    _, f2 = load_graph_def(tiny_files / fname, fetches=[train, loss + ":0"])
    assert f2 == [train, loss]


def test_prepare_user_graph_pb(tiny, tiny_files):
    gd, train, loss = tiny
    prep = prepare_user_graph(tiny_files / "step.pb")
    expected = import_graph_def(gd, [train])  # default fetches: the train op
    assert [op.name for op in prep.graph.ops] == [op.name for op in expected.ops]
    assert prep.fetches == (train,)
    with_loss = prepare_user_graph(tiny_files / "step.pb", fetches=[train, loss])
    assert with_loss.fetches == (train, loss) and loss in with_loss.graph.index
    assert prep.benchmark is None and prep.config is None and prep.size == "user"
    assert prep.graph.name == "step" and prep.grouping.grouper == "heuristic"
    stats = prep.stats()
    assert stats["model"] == "step" and stats["ops"] == expected.num_ops
    assert "ResourceApplyAdam" in {op.type for op in prep.graph.ops}
    m = prepare_user_graph(tiny_files / "step.pbtxt", grouper="metis", num_groups=3)
    assert m.grouping.grouper == "metis" and 1 <= m.grouping.num_groups <= 3


def test_prepare_user_graph_argument_errors(tiny_files):
    with pytest.raises(ValueError, match="exactly one"):
        prepare_user_graph()
    with pytest.raises(ValueError, match="exactly one"):
        prepare_user_graph(tiny_files / "step.pb", keras="m:f")
    with pytest.raises(ValueError, match="needs the model's rule"):
        prepare_user_graph(tiny_files / "step.pb", grouper="2017")


@pytest.mark.parametrize(
    "fname, data, match",
    [
        ("garbage.pb", b"\xff\xfe garbage \x00\x01 not a protobuf", "does not parse as a binary GraphDef"),
        ("garbage.pbtxt", b"node { name: 'a' op: ", "does not parse as a text-format GraphDef"),
        ("latin.pbtxt", b"\xff\xfe\xfa", "does not parse"),
        ("empty.pb", b"", "empty graph"),
        ("empty.pbtxt", b"", "empty graph"),
        ("graph.json", b"{}", "unknown file suffix"),
    ],
)
def test_bad_files(tmp_path, fname, data, match):
    p = tmp_path / fname
    p.write_bytes(data)
    with pytest.raises(UserGraphError, match=match) as e:
        load_graph_def(p)
    msg = str(e.value)
    assert str(p) in msg and "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(UserGraphError, match=r"graph def '.*nope\.pb': no such file"):
        load_graph_def(tmp_path / "nope.pb")


def _hand_graph(nodes):
    """GraphDef from ``[(name, op, [inputs])]``."""
    tf = import_tensorflow()
    gd = tf.compat.v1.GraphDef()
    for name, op, inputs in nodes:
        n = gd.node.add()
        n.name, n.op = name, op
        n.input.extend(inputs)
    return gd


def test_cycle_names_an_op(tmp_path):
    gd = _hand_graph([("p", "Placeholder", []), ("a", "AddV2", ["p", "c"]), ("b", "Identity", ["a"]),
                      ("c", "Identity", ["^b"])])
    path = tmp_path / "cycle.pb"
    path.write_bytes(gd.SerializeToString())
    with pytest.raises(UserGraphError, match=r"cycle outside TensorFlow loop constructs through op 'a'") as e:
        load_graph_def(path)
    assert str(path) in str(e.value)


def test_tf_v1_loop_back_edge_allowed():
    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        (out,) = tf.while_loop(lambda i: i < 10, lambda i: i + 1, [tf.constant(0)])
    gd = graph.as_graph_def()
    assert "NextIteration" in {n.op for n in gd.node}
    check_graph_def(gd, "loop.pb")  # no error: NextIteration -> Merge is TF's own back edge
    assert out.op.name in default_fetches(gd)


def test_dangling_input(tmp_path):
    gd = _hand_graph([("a", "Identity", ["ghost:0"])])
    with pytest.raises(UserGraphError, match="input 'ghost:0', which names no node"):
        check_graph_def(gd, "x.pb")


def test_function_library_inlined_and_lone_call_ops_rejected(tmp_path):
    """A TF2 GraphDef with a function library is flattened (it was refused before issue 11);
    call ops whose library is missing cannot be inlined and are refused with one line."""
    tf = import_tensorflow()

    @tf.function(autograph=False)
    def inner(x):
        return x * 2.0

    @tf.function(autograph=False)
    def outer(x):
        return inner(x) + 1.0

    gd = outer.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    assert len(gd.library.function) >= 1
    path = tmp_path / "tf2.pb"
    path.write_bytes(gd.SerializeToString())
    flat, fetches = load_graph_def(path)
    assert len(flat.library.function) == 0
    assert not {n.op for n in flat.node} & {"PartitionedCall", "StatefulPartitionedCall"}
    assert "Mul" in {n.op for n in flat.node} and fetches
    # check_graph_def still refuses a graph that hides ops, naming them
    with pytest.raises(UserGraphError, match="hidden in a function library") as e:
        check_graph_def(gd, str(path))
    assert "PartitionedCall" in str(e.value) and "inner" in str(e.value) and "\n" not in str(e.value)
    # a call op alone (library stripped) cannot be inlined
    del gd.library.function[:]
    path.write_bytes(gd.SerializeToString())
    with pytest.raises(UserGraphError, match="call op.*this graph lacks it"):
        load_graph_def(path)


def test_bad_fetch(tiny_files):
    with pytest.raises(UserGraphError, match="fetch 'nope' names no op"):
        load_graph_def(tiny_files / "step.pb", fetches=["nope"])


# --------------------------------------------------------------------------------------
# Keras models
# --------------------------------------------------------------------------------------

KERAS_MODULE = textwrap.dedent(
    """
    import tensorflow as tf

    def compiled():
        inp = tf.keras.Input((8,))
        h = tf.keras.layers.Dense(16, activation="relu")(inp)
        h = tf.keras.layers.BatchNormalization()(h)
        out = tf.keras.layers.Dense(3, activation="softmax")(h)
        model = tf.keras.Model(inp, out)
        model.compile(loss="categorical_crossentropy", optimizer="adam")
        return model, [tf.TensorSpec([4, 8], tf.float32), ([4, 3], tf.float32)]

    def logits():
        model = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(6,))])
        return model, [([2, 6], "float32"), ([2], "int64")]

    def unknown_batch():
        model = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(6,))])
        return model, [tf.TensorSpec([None, 6], tf.float32), ([2], tf.int32)]

    def not_a_pair():
        return 42

    def raises():
        raise RuntimeError("no GPU here")

    NOT_CALLABLE = 3
    """
)


@pytest.fixture()
def keras_module(tmp_path, monkeypatch):
    (tmp_path / "user_keras_models.py").write_text(KERAS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_keras_models"
    sys.modules.pop("user_keras_models", None)


def test_keras_compiled_model_training_step(keras_module):
    gd, fetches = load_keras(f"{keras_module}:compiled")
    assert len(gd.library.function) == 0
    train, loss = fetches
    og = import_graph_def(gd, fetches, name="k")
    types = {op.type for op in og.ops}
    assert "ResourceApplyAdam" in types  # Adam updates every weight
    assert sum(op.type == "ResourceApplyAdam" for op in og.ops) == 6  # 2 Dense x (kernel, bias) + BN gamma, beta
    # the batch-norm moving averages are updated by the step (control dependencies of Adam)
    assert any("AssignMovingAvg" in op.name for op in og.ops)
    # the model's compiled loss (categorical, one-hot labels), not the sparse default
    assert "SoftmaxCrossEntropyWithLogits" in types
    assert "SparseSoftmaxCrossEntropyWithLogits" not in types
    assert og.ops[og.index["label"]].output_shapes == [(4, 3)]
    assert og.ops[og.index["input_0"]].output_shapes == [(4, 8)]
    # no training-phase conditionals, no unfed placeholders of the model's own Input
    assert not types & {"Switch", "Merge"}
    assert {op.name for op in og.ops if op.type == "Placeholder"} == {"input_0", "label"}


def test_keras_default_loss_from_logits(keras_module):
    gd, fetches = load_keras(f"{keras_module}:logits")
    og = import_graph_def(gd, fetches)
    assert any(op.type == "SparseSoftmaxCrossEntropyWithLogits" for op in og.ops)
    prep = prepare_user_graph(keras=f"{keras_module}:logits", grouper="fluid", num_groups=4)
    assert prep.graph.name == f"{keras_module}:logits" and prep.grouping.num_groups <= 4


@pytest.mark.parametrize(
    "func, match",
    [
        ("unknown_batch", r"input 0 spec has shape \(None, 6\)"),
        ("not_a_pair", r"must return a Keras 3 model or \(model, input_specs\)"),
        ("raises", "raises\\(\\) failed: RuntimeError: no GPU here"),
        ("missing", "has no function 'missing'"),
        ("NOT_CALLABLE", "has no function 'NOT_CALLABLE'"),
    ],
)
def test_keras_errors(keras_module, func, match):
    with pytest.raises(UserGraphError, match=match):
        load_keras(f"{keras_module}:{func}")


@pytest.mark.parametrize(
    "spec, match",
    [
        ("no_colon", "expected 'module:function'"),
        ("a:b:c", "expected 'module:function'"),
        ("", "expected 'module:function'"),
        ("no_such_module_xyz:build", "no module 'no_such_module_xyz'"),
    ],
)
def test_keras_bad_spec(spec, match):
    with pytest.raises(UserGraphError, match=match):
        load_keras(spec)


def test_a_spec_can_name_a_python_file(tmp_path, monkeypatch):
    """`--torch my_cnn.py:cnn` and `--torch nets/my_cnn.py:cnn` (issue 37: refused, only module:function
    worked): the file, relative to the current folder, runs as a module of its own with its folder
    first on sys.path; two files of one name stay apart; a bad file or function is one line naming it."""
    from compgraph.user_graph import parse_spec, resolve_user_function

    nets = tmp_path / "nets"
    nets.mkdir()
    (nets / "helper.py").write_text("WIDTH = 7\n")
    (nets / "my_cnn.py").write_text("from helper import WIDTH\n\ndef cnn():\n    return ('nets', WIDTH)\n")
    (tmp_path / "my_cnn.py").write_text("def cnn():\n    return 'top'\n\nNOT_CALLABLE = 3\n")
    monkeypatch.chdir(tmp_path)
    assert parse_spec("my_cnn.py:cnn") == ("file", "my_cnn.py", "cnn")  # a file, not module 'my_cnn.py'
    assert parse_spec("pkg.mod:fn") == ("module", "pkg.mod", "fn")
    fn, name = resolve_user_function("nets/my_cnn.py:cnn", "torch")
    assert (fn(), name) == (("nets", 7), "cnn")  # its sibling module imported from its own folder
    assert resolve_user_function("my_cnn.py:cnn", "torch")[0]() == "top"
    assert resolve_user_function(str(nets / "my_cnn.py") + ":cnn", "torch")[0] is fn  # the same file: run once
    assert str(nets) not in sys.path
    for spec, message in [
        ("nets/nope.py:cnn", f"torch 'nets/nope.py:cnn': no file 'nets/nope.py' in {tmp_path}"),
        ("my_cnn.py:dnn", "torch 'my_cnn.py:dnn': file 'my_cnn.py' has no function 'dnn'"),
        ("my_cnn.py:NOT_CALLABLE", "file 'my_cnn.py' has no function 'NOT_CALLABLE'"),
        ("my_cnn.py", "torch spec 'my_cnn.py': expected 'module:function' or 'path/to/file.py:function'"),
    ]:
        with pytest.raises(UserGraphError) as exc:
            resolve_user_function(spec, "torch")
        assert message in str(exc.value) and "\n" not in str(exc.value)
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(UserGraphError, match="running 'broken.py' failed: RuntimeError: no GPU here"):
        resolve_user_function("broken.py:f", "keras")


def test_the_probe_runs_a_file_spec_in_its_child(tmp_path, monkeypatch):
    """A file spec whose function ends its process is caught in the child (as a module spec's)."""
    from compgraph.user_graph import probe_user_function

    (tmp_path / "ends.py").write_text("import os\n\ndef build():\n    os._exit(3)\n\ndef fine():\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserGraphError, match=r"the function build\(\) ended its process \(exit code 3\)"):
        probe_user_function("ends.py:build", "torch")
    probe_user_function("ends.py:fine", "torch")


def test_graph_stats_takes_a_torch_file(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from cli.main import app

    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "my_cnn.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def cnn():
            body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = body

                def forward(self, x, y):
                    return nn.functional.cross_entropy(self.body(x), y)
            return Net(), (torch.randn(4, 8), torch.randint(0, 4, (4,)))
    """))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["graph-stats", "--torch", "nets/my_cnn.py:cnn", "--json", "-"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    assert stats["model"] == "nets/my_cnn.py:cnn" and stats["ops"] > 10
