"""Users' graphs whose costs or inputs the graph alone may not tell: a raw ``tf.function``
GraphDef (variables without shapes), integer inputs (the range of their ids), ops of unknown
size; and ``placement train`` / ``experiment --env real`` on such graphs."""

from __future__ import annotations

import json

import pytest

from compgraph.frontends import prepare_user_graph
from compgraph.prepare import cost_coverage
from compgraph.tf_env import import_tensorflow
from compgraph.user_graph import UserGraphError


@pytest.fixture(scope="module")
def user_graphs(tmp_path_factory):
    """One small Keras 3 training step (Dense-ReLU-Dense, Adam) saved three ways: a raw
    ``as_graph_def()``, an ``as_graph_def(add_shapes=True)`` and a SavedModel signature; a
    SavedModel whose int32 token input indexes an Embedding (Keras 3 ``take``: ids wrapped by a
    ``where``); and one whose int32 input is only cast to float (no table tells its range)."""
    tf = import_tensorflow()
    import keras

    d = tmp_path_factory.mktemp("user_graphs")

    class Dense(tf.Module):
        def __init__(self):
            self.model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                                           keras.layers.Dense(10)])
            self.opt = keras.optimizers.Adam()
            self.opt.build(self.model.trainable_variables)

        @tf.function(input_signature=[tf.TensorSpec([16, 32], tf.float32, name="x"), tf.TensorSpec([16], tf.int32, name="y")])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                logits = self.model(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            g = tape.gradient(loss, self.model.trainable_variables)
            self.opt.apply_gradients(zip(g, self.model.trainable_variables))
            return {"loss": loss}

    class Tokens(tf.Module):
        def __init__(self):
            self.model = keras.Sequential([keras.Input((8,), dtype="int32"), keras.layers.Embedding(100, 16),
                                           keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(5)])
            self.opt = keras.optimizers.SGD(0.1)
            self.opt.build(self.model.trainable_variables)

        @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.int32, name="x"), tf.TensorSpec([4], tf.int32, name="y")])
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                logits = self.model(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            g = tape.gradient(loss, self.model.trainable_variables)
            self.opt.apply_gradients(zip(g, self.model.trainable_variables))
            return {"loss": loss}

    class Counts(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.normal([8, 3], seed=1))

        @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.int32, name="counts")])
        def train_step(self, counts):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.cast(counts, tf.float32), self.w)))
            self.w.assign_sub(0.01 * tape.gradient(loss, self.w))
            return {"loss": loss}

    dense = Dense()
    fn = dense.train_step.get_concrete_function()
    tf.io.write_graph(fn.graph.as_graph_def(), str(d), "raw.pb", as_text=False)
    tf.io.write_graph(fn.graph.as_graph_def(add_shapes=True), str(d), "shaped.pb", as_text=False)
    tf.saved_model.save(dense, str(d / "dense"), signatures={"train_step": fn})
    tokens, counts = Tokens(), Counts()
    tf.saved_model.save(tokens, str(d / "tokens"), signatures={"train_step": tokens.train_step.get_concrete_function()})
    tf.saved_model.save(counts, str(d / "counts"), signatures={"train_step": counts.train_step.get_concrete_function()})
    return d


def test_raw_tf_function_graph_def_is_refused_and_a_shaped_one_costs_as_the_saved_model(user_graphs):
    with pytest.raises(UserGraphError) as err:
        prepare_user_graph(graph_def_path=user_graphs / "raw.pb")
    message = str(err.value)
    assert "\n" not in message and "raw.pb" in message
    assert "14 of 14 variables" in message and "add_shapes=True" in message  # 4 weights, 8 Adam slots, 2 counters
    shaped = prepare_user_graph(graph_def_path=user_graphs / "shaped.pb")
    saved = prepare_user_graph(saved_model=user_graphs / "dense")
    assert shaped.import_info["format"] == "tf2" and shaped.import_info["init_op"]
    # (32*64 + 64 + 64*10 + 10) float32 weights, Adam's two slots each, its iteration counter and learning rate
    assert saved.graph.total_param_bytes() == 3 * 4 * (32 * 64 + 64 + 64 * 10 + 10) + 8 + 4
    assert shaped.graph.total_param_bytes() == pytest.approx(saved.graph.total_param_bytes(), rel=0.05)
    assert shaped.graph.total_flops() == pytest.approx(saved.graph.total_flops(), rel=0.05)
    assert saved.graph.total_flops() > 2 * 16 * 32 * 64 * 3  # forward and both backward matmuls of the first layer


def test_integer_inputs_are_bounded_by_the_table_they_index_or_by_int_bounds(user_graphs):
    tokens = prepare_user_graph(saved_model=user_graphs / "tokens")
    assert tokens.int_bounds == {"x": 100, "y": 5} and tokens.unbounded_int_inputs == ()  # Embedding(100), 5 classes
    counts = prepare_user_graph(saved_model=user_graphs / "counts")
    assert counts.int_bounds == {} and counts.unbounded_int_inputs == ("counts",)
    assert prepare_user_graph(saved_model=user_graphs / "counts", int_bounds={"counts": 7}).int_bounds == {"counts": 7}
    assert prepare_user_graph(saved_model=user_graphs / "tokens", int_bounds={"x": 50}).int_bounds == {"x": 50, "y": 5}
    with pytest.raises(UserGraphError, match=r"no integer input 'nosuch' in the step; its integer inputs: counts"):
        prepare_user_graph(saved_model=user_graphs / "counts", int_bounds={"nosuch": 3})
    with pytest.raises(UserGraphError, match=r"counts=0: must be an integer >= 1"):
        prepare_user_graph(saved_model=user_graphs / "counts", int_bounds={"counts": 0})


def test_ops_of_unknown_size_and_without_flops_rule_are_counted(tmp_path):
    """A TF1 graph with an unknown batch dimension: every op downstream of it is counted, and
    the warning names the count; an op type without a FLOPs rule is counted and named."""
    tf = import_tensorflow()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.get_variable("w", [4, 2])
        loss = tf.reduce_mean(tf.matmul(x, w), name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    path = tmp_path / "batch.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    prepared = prepare_user_graph(graph_def_path=path, fetches=[train.name, "loss"])
    info = prepared.import_info
    assert info["ops_unknown_shape"] == cost_coverage(prepared.graph)["ops_unknown_shape"]
    unknown = [op.name for op in prepared.graph.ops if any(s is None or -1 in s for s in op.output_shapes)]
    assert "x" in unknown and "MatMul" in unknown and info["ops_unknown_shape"] == len(unknown)
    warning = prepared.cost_warning()
    assert warning.startswith("warning: batch: ") and f"{len(unknown)} of {prepared.graph.num_ops} ops" in warning
    assert prepared.run_params()["import_ops_unknown_shape"] == len(unknown)
    with_rule = cost_coverage(prepared.graph)
    prepared.graph.ops[0].type = "NoSuchOpType"
    without = cost_coverage(prepared.graph)
    assert without["ops_without_flops_rule"] == with_rule["ops_without_flops_rule"] + 1
    assert "NoSuchOpType" in without["op_types_without_flops_rule"]


@pytest.fixture(scope="module")
def prefect_harness():
    import flows.experiment  # noqa: F401  (Prefect's log handlers on pytest's stderr, not on a CliRunner stream)
    from conftest import prefect_harness as harness

    with harness():
        yield


@pytest.mark.slow
def test_train_and_real_experiment_on_saved_models_with_integer_inputs(prefect_harness, user_graphs, tmp_path):
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from cli.main import app

    out = tmp_path / "runs"
    r = CliRunner().invoke(app, ["train", "--saved-model", str(user_graphs / "tokens"), "--cluster", "cpu4",
                                 "--method", "single_cpu", "--steps", "2", "--out-dir", str(out),
                                 "--json", str(tmp_path / "train.json")])
    assert r.exit_code == 0, (r.output[-2000:], r.exception)
    trained = json.loads((tmp_path / "train.json").read_text())
    assert trained["label"] == "real" and trained["model"] == "tokens" and trained["size"] == "user"
    assert len(trained["losses"]) == 2 and all(x > 0 for x in trained["losses"])  # ids inside the tables: no NaN, no error
    params = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}").get_run(trained["mlflow_run_id"]).data.params
    assert params["import_format"] == "tf2" and params["import_ops_unknown_shape"] == "0"

    real = ["experiment", "--saved-model", str(user_graphs / "counts"), "--env", "real", "--cluster", "cpu4",
            "--methods", "single_cpu,m_etf", "--train-steps", "1", "--out-dir", str(out)]
    refused = CliRunner().invoke(app, real)
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines()[-1] == (
        "error: counts: integer input 'counts': the graph does not tell the range of its ids "
        "(no embedding table, logits or one-hot depth it reaches); give --int-bound counts=N")
    r = CliRunner().invoke(app, [*real, "--int-bound", "counts=7", "--json", str(tmp_path / "real.json")])
    assert r.exit_code == 0, (r.output[-2000:], r.exception)
    result = json.loads((tmp_path / "real.json").read_text())
    assert result["env"] == "real" and result["size"] == "user"
    assert all(row["step_time_s"] > 0 and not row["oom"] for row in result["methods"].values())
