"""TF2 graphs (tf.function, SavedModel signatures, GraphDefs with a function library) and
Keras 3 models as users bring them: flattened, imported, and run through `placement`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from compgraph import tf2
from compgraph.tf_env import import_tensorflow
from compgraph.tf_import import import_graph_def
from compgraph.user_graph import load_concrete_function_step, load_graph_def_step, load_saved_model_step

ROOT = Path(__file__).resolve().parents[1]


def _run_flat(step, feed: dict, fetch: str):
    tf = import_tensorflow()
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(step.graph_def, name="")
    with tf.compat.v1.Session(graph=g) as s:
        if step.init_op:
            s.run(step.init_op)
        return s.run(fetch, {k + ":0": v for k, v in feed.items()})


def test_control_flow_inlined_unrolled_and_lowered_same_values():
    """A nested call, a static loop (5 trips), a loop whose trip count depends on an input,
    and a conditional: the flat graph has no library, the static loop is unrolled, the
    dynamic one kept as one iteration (a TF1 frame), and it computes what TF computes."""
    tf = import_tensorflow()

    @tf.function(autograph=False)
    def inner(x):
        return tf.matmul(x, x) * 0.5

    @tf.function(autograph=False)
    def f(x, n):
        _, y = tf.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, inner(y) + 1.0), [tf.constant(0), x])
        _, z = tf.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * 1.5), [tf.constant(0), y])
        return tf.cond(tf.reduce_sum(z) > 0.0, lambda: z * 2.0, lambda: z - 1.0)

    fn = f.get_concrete_function(tf.TensorSpec([3, 3], tf.float32, name="x"), tf.TensorSpec([], tf.int32, name="n"))
    gd = fn.graph.as_graph_def()
    assert len(gd.library.function) >= 4 and {"While", "StatelessIf"} & {n.op for n in gd.node}
    step = load_concrete_function_step(fn, "f")
    flat = step.graph_def
    assert len(flat.library.function) == 0
    types = Counter(n.op for n in flat.node)
    assert not set(types) & set(tf2.CALL_TYPES | tf2.WHILE_TYPES | {"If", "StatelessIf", "Case"})
    assert types["MatMul"] == 5  # the static loop's body, once per trip
    assert {"Switch", "Merge", "Enter", "Exit", "NextIteration"} <= set(types)  # cond + dynamic loop, lowered
    assert step.info["format"] == "tf2"
    assert step.info["unrolled_loops"] == 1 and step.info["unrolled_iterations"] == 5
    assert step.info["one_iteration_loops"] == 1 and "while" in step.info["one_iteration_loop_names"]
    x = np.random.RandomState(0).uniform(-0.3, 0.3, (3, 3)).astype(np.float32)
    for n in (0, 3):
        got = _run_flat(step, {"x": x, "n": np.int32(n)}, step.fetches[0] + ":0")
        np.testing.assert_allclose(got, f(tf.constant(x), tf.constant(n)).numpy(), rtol=1e-5)
    og = import_graph_def(flat, step.fetches, name="f")
    assert sum(op.type == "MatMul" for op in og.ops) == 5
    assert og.total_flops() > 5 * 2 * 27  # the five matmuls, 2*9*3 FLOPs each, and more


def test_trip_count_from_a_static_maximum_iterations():
    tf = import_tensorflow()

    @tf.function(autograph=False)
    def f(x):
        return tf.while_loop(lambda y: tf.reduce_sum(y) < 1e9, lambda y: y * 2.0, [x], maximum_iterations=4)[0]

    step = load_concrete_function_step(f.get_concrete_function(tf.TensorSpec([2], tf.float32, name="x")))
    assert step.info["unrolled_iterations"] == 4 and step.info["one_iteration_loops"] == 0
    got = _run_flat(step, {"x": np.array([1.0, 2.0], np.float32)}, step.fetches[0] + ":0")
    np.testing.assert_allclose(got, [16.0, 32.0])


@pytest.fixture(scope="module")
def saved_train_step(tmp_path_factory):
    """A SavedModel whose signature ``train_step`` is a tf.function training step: an einsum
    layer, a conditional on the loss, momentum SGD by hand."""
    tf = import_tensorflow()

    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.normal([3, 2], seed=1), name="w")
            self.b = tf.Variable(tf.zeros([2]), name="b")
            self.m = tf.Variable(tf.zeros([3, 2]), name="m")

        @tf.function(input_signature=[tf.TensorSpec([4, 3], tf.float32, name="x"), tf.TensorSpec([4], tf.int32, name="y")])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                logits = tf.einsum("bi,io->bo", x, self.w) + self.b
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
                loss = tf.cond(loss > 100.0, lambda: loss * 0.5, lambda: loss)
            gw, gb = tape.gradient(loss, [self.w, self.b])
            self.m.assign(0.9 * self.m + gw)
            self.w.assign_sub(0.5 * self.m)
            self.b.assign_sub(0.5 * gb)
            return {"loss": loss}

    d = tmp_path_factory.mktemp("saved") / "step_model"
    m = Model()
    tf.saved_model.save(m, str(d), signatures={"train_step": m.train_step})
    return d


def test_saved_model_signature_is_a_runnable_step(saved_train_step):
    tf = import_tensorflow()
    step = load_saved_model_step(saved_train_step, "train_step")
    assert step.info["format"] == "tf2" and step.info["init_op"] == "init"
    flat = step.graph_def
    vars_ = {n.name: n for n in flat.node if n.op == "VarHandleOp"}
    shapes = sorted(tuple(tf.TensorShape(n.attr["shape"].shape).as_list()) for n in vars_.values())
    assert shapes == [[2], [3, 2], [3, 2]] or shapes == [(2,), (3, 2), (3, 2)]
    assert not [n for n in flat.node if n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum]
    assert "Einsum" in {n.op for n in flat.node}
    og = import_graph_def(flat, step.fetches, name="s")
    einsum = next(op for op in og.ops if op.type == "Einsum")
    assert einsum.flops == 2 * 4 * 3 * 2  # bi,io->bo: 2 * b*i*o
    assert og.total_param_bytes() == (2 + 6 + 6) * 4
    # it runs alone in a v1 session, and training moves the loss
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(flat, name="")
    x = np.random.RandomState(0).normal(size=(4, 3)).astype(np.float32)
    y = np.array([0, 1, 1, 0], np.int32)
    fetches = [g.get_operation_by_name(f) for f in step.fetches]
    loss_t = next(op.outputs[0] for op in fetches if op.outputs and op.outputs[0].dtype == tf.float32)
    with tf.compat.v1.Session(graph=g) as s:
        s.run(step.init_op)
        losses = [s.run([loss_t, *[op for op in fetches if not op.outputs]], {"x:0": x, "y:0": y})[0] for _ in range(5)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    with pytest.raises(ValueError, match=r"no signature 'nope'; valid: train_step"):
        load_saved_model_step(saved_train_step, "nope")


def test_graph_def_file_with_library_is_flattened(tmp_path):
    tf = import_tensorflow()

    @tf.function(autograph=False)
    def inner(x):
        return x * 2.0

    @tf.function(autograph=False)
    def outer(x):
        return inner(x) + 1.0

    gd = outer.get_concrete_function(tf.TensorSpec([2], tf.float32, name="x")).graph.as_graph_def()
    path = tmp_path / "tf2.pb"
    path.write_bytes(gd.SerializeToString())
    step = load_graph_def_step(path)
    assert len(step.graph_def.library.function) == 0 and step.info["inlined_calls"] >= 1
    got = _run_flat(step, {"x": np.array([1.0, 2.0], np.float32)}, step.fetches[0] + ":0")
    np.testing.assert_allclose(got, [3.0, 5.0])


# --------------------------------------------------------------------------------------
# Keras 3, as a user runs it: `placement graph-stats --keras my_models:build` in their folder
# --------------------------------------------------------------------------------------

KERAS3_MODULE = textwrap.dedent(
    """
    import keras

    def build():
        inp = keras.Input((6, 4), batch_size=2)
        h = keras.layers.LSTM(8)(inp)
        h = keras.layers.LayerNormalization()(h)
        return keras.Model(inp, keras.layers.Dense(3)(h))

    def attention():
        tokens = keras.Input((5,), dtype="int32", batch_size=2)
        x = keras.layers.Embedding(50, 8)(tokens)
        a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x, use_causal_mask=True)
        x = keras.layers.LayerNormalization()(x + a)
        return keras.Model(tokens, keras.layers.Dense(50)(x))
    """
)


def _user_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"), TF_CPP_MIN_LOG_LEVEL="3")
    return env


@pytest.mark.slow  # over 5 s here
def test_keras3_graph_stats_from_the_users_folder(tmp_path):
    (tmp_path / "my_models.py").write_text(KERAS3_MODULE)
    # -P: no current folder on sys.path from Python itself, as with the installed `placement` script
    cmd = [sys.executable, "-P", "-m", "cli.main", "graph-stats", "--keras", "my_models:build", "--json", "-"]
    r = subprocess.run(cmd, cwd=tmp_path, env=_user_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    stats = json.loads(r.stdout)
    assert stats["model"] == "my_models:build" and stats["ops"] > 100
    assert stats["op_types_without_flops_rule"] == []
    assert stats["import"]["format"] == "keras3"
    # the LSTM's loop (6 steps) and its gradient loop are unrolled, none kept as one iteration
    assert stats["import"]["unrolled_iterations"] == 12 and stats["import"]["one_iteration_loops"] == 0
    assert stats["param_bytes"] > 0


@pytest.fixture(scope="module")
def prefect_harness():
    import cli.main  # noqa: F401  (sets the environment defaults before Prefect reads its settings)
    import flows.experiment  # noqa: F401  (Prefect sets up its log handlers on import: on pytest's stderr,
    # not on a CliRunner stream that is closed after the command)
    from conftest import prefect_harness as harness

    with harness():
        yield


@pytest.mark.slow
def test_experiment_end_to_end_saved_model_and_keras3(prefect_harness, saved_train_step, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    import compgraph.user_graph as user_graph
    from cli.main import app

    (tmp_path / "user_k3_models.py").write_text(KERAS3_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_k3_models", raising=False)
    loads = []
    for loader in ("load_saved_model_step", "load_keras_step"):
        def counted(*args, _load=getattr(user_graph, loader), _name=loader):
            loads.append(_name)
            return _load(*args)
        monkeypatch.setattr(user_graph, loader, counted)
    runs = {}
    for name, source in (("saved", ["--saved-model", str(saved_train_step), "--signature", "train_step"]),
                         ("keras3", ["--keras", "user_k3_models:attention"])):
        out = tmp_path / f"runs-{name}"
        args = ["experiment", *source, "--cluster", "k80x2", "--methods", "single_gpu,single_cpu,post",
                "--budget", "4", "--train-steps", "0", "--out-dir", str(out), "--json", str(tmp_path / f"{name}.json")]
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, (r.output[-2000:], r.exception)
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert set(result["methods"]) == {"single_gpu", "single_cpu", "post"}
        for m, row in result["methods"].items():
            assert row["oom"] is False and row["step_time_s"] > 0, m
            assert len(row["placement"]) == result["groups"]
        runs[name] = (result, out)
    # each imported once: the CLI's check before the flow, whose own preparation takes the checked graph
    assert loads == ["load_saved_model_step", "load_keras_step"]
    result, out = runs["keras3"]
    assert result["model"] == "user_k3_models:attention"
    params = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}").get_run(result["mlflow_run_id"]).data.params
    assert params["import_format"] == "keras3" and params["import_one_iteration_loops"] == "0"
    result, out = runs["saved"]
    params = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}").get_run(result["mlflow_run_id"]).data.params
    assert params["import_format"] == "tf2" and params["model"] == "step_model:train_step"


def test_env_real_runs_a_keras3_step_on_two_devices(tmp_path, monkeypatch):
    """--env real on a Keras 3 model: variables made real, the label's class range inferred,
    a placement over two logical CPUs measured."""
    from cluster.factory import make_environment
    from cluster.spec import load_cluster
    from compgraph.frontends import prepare_user_graph

    (tmp_path / "user_k3_real.py").write_text(KERAS3_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_k3_real", raising=False)
    prep = prepare_user_graph(keras="user_k3_real:build")
    assert prep.import_info["init_op"] == "init"
    env = make_environment("real", prep, load_cluster("cpu4"), {"steps": 3, "warmup": 1})
    placement = np.arange(prep.grouping.num_groups) % 2
    m = env.measure(placement)
    assert m.oom is False and m.step_time_s > 0
