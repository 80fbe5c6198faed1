"""Graph sources and the front-end registry (compgraph/frontends.py): one dispatch, and a new
front end is one source model and one loader."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import TypeAdapter, ValidationError

from compgraph.frontends import (FRONTENDS, BenchmarkSource, Frontend, GraphDefSource, GraphSource, KerasSource,
                                 SavedModelSource, graph_source, is_user_graph, prepare_source, register, user_frontend)
from compgraph.frontends import _Source


def test_every_source_kind_has_a_front_end_and_parses_by_kind():
    adapter = TypeAdapter(GraphSource)
    for kind, cls in (("benchmark", BenchmarkSource), ("graph_def", GraphDefSource), ("saved_model", SavedModelSource),
                      ("keras", KerasSource)):
        assert FRONTENDS[kind].source is cls
    assert adapter.validate_python({"kind": "keras", "spec": "mod:build"}) == KerasSource(spec="mod:build")
    assert adapter.validate_python({"kind": "benchmark", "model": "nmt", "size": "paper"}).model == "nmt"
    with pytest.raises(ValidationError, match="kind"):
        adapter.validate_python({"kind": "onnx", "path": "m.onnx"})
    with pytest.raises(ValidationError, match="signatur"):  # an unknown field is named, not ignored
        adapter.validate_python({"kind": "graph_def", "path": "a.pb", "signatur": "x"})


def test_graph_source_from_the_flat_options():
    assert graph_source("nmt", "paper") == BenchmarkSource(model="nmt", size="paper")
    assert graph_source(None, "small", graph_def="a.pb") == GraphDefSource(path="a.pb")
    assert graph_source(saved_model="dir", signature="train") == SavedModelSource(path="dir", signature="train")
    assert is_user_graph(graph_source(keras="m:f")) and not is_user_graph(graph_source("rnnlm"))
    with pytest.raises(ValueError, match=r"not several \(graph_def, keras\)"):
        graph_source(graph_def="a.pb", keras="m:f")
    with pytest.raises(ValueError, match="signature is for saved_model"):
        graph_source(graph_def="a.pb", signature="s")
    with pytest.raises(ValueError, match="fetches is for GraphDef files"):
        graph_source(keras="m:f", fetches=["x"])


def test_a_benchmark_through_its_front_end(rnnlm_small):
    prepared = prepare_source(BenchmarkSource(model="rnnlm", size="small"))
    assert prepared.graph.num_ops == rnnlm_small.graph.num_ops
    assert prepared.grouping.grouper == "2017" and prepared.benchmark is not None
    with pytest.raises(ValueError, match="int_bounds: for a user's graph only"):
        prepare_source(BenchmarkSource(), int_bounds={"x": 3})


class _FunctionSource(_Source):
    kind: Literal["test_function"] = "test_function"
    width: int


def _load_function(src: _FunctionSource):
    """A tiny ``tf.function`` training step: ``w -= 0.1 * d/dw sum((x w)^2)``."""
    from compgraph.tf_env import import_tensorflow
    from compgraph.user_graph import load_concrete_function_step

    tf = import_tensorflow()
    w = tf.Variable(tf.ones([src.width, src.width]), name="w")

    @tf.function(autograph=False)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    fn = step.get_concrete_function(tf.TensorSpec([4, src.width], tf.float32, name="x"))
    return load_concrete_function_step(fn, f"function {src.width}")


def test_a_new_front_end_is_one_source_model_and_one_loader():
    """What the PyTorch front end will do: register, then prepare_source imports, costs and groups it."""
    frontend = register(user_frontend("test_function", _FunctionSource, _load_function,
                                      lambda s: (f"test function {s.width}", f"fn{s.width}")))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(Frontend("test_function", _FunctionSource, frontend.prepare))
        prepared = prepare_source(_FunctionSource(width=8), grouper="heuristic")
        assert prepared.name == "fn8" and prepared.size == "user" and prepared.benchmark is None
        assert {"MatMul", "AssignSubVariableOp"} <= {op.type for op in prepared.graph.ops}
        assert prepared.graph.total_flops() >= 2 * 4 * 8 * 8  # the forward matmul at least
        assert prepared.grouping.num_groups >= 1 and prepared.import_info["format"] == "tf2"
        with pytest.raises(ValueError, match="unknown grouper"):  # checked before the loader runs
            prepare_source(_FunctionSource(width=8), grouper="nope")
    finally:
        FRONTENDS.pop("test_function")
    with pytest.raises(ValueError, match="source kind 'test_function': no front end"):
        prepare_source(_FunctionSource(width=8))


class _FileSource(_Source):
    kind: Literal["test_file"] = "test_file"
    path: str


def test_a_kept_user_graph_is_handed_to_the_next_preparation_once(tmp_path):
    """The CLI checks a user's graph with ``keep=True`` before its flow starts; the flow's own
    preparation with the same source and settings takes that graph, once; other settings, or the
    file changed in between, import it again."""
    loads = []

    def load(src):
        loads.append(src.path)
        return _load_function(_FunctionSource(width=4))

    register(user_frontend("test_file", _FileSource, load, lambda s: (f"file {s.path}", "f")))
    try:
        f = tmp_path / "step.pb"
        f.write_bytes(b"v1")
        src = _FileSource(path=str(f))
        checked = prepare_source(src, keep=True)
        assert prepare_source(src) is checked and len(loads) == 1
        again = prepare_source(src)
        assert again is not checked and len(loads) == 2  # handed once
        checked = prepare_source(src, keep=True)
        assert prepare_source(src, seed=1) is not checked and len(loads) == 4  # other settings
        f.write_bytes(b"v2, changed")
        assert prepare_source(src) is not checked and len(loads) == 5  # the file changed in between
        assert prepare_source(src) is not checked and len(loads) == 6
        bench = prepare_source(BenchmarkSource(model="rnnlm", size="small"), keep=True)
        assert prepare_source(BenchmarkSource(model="rnnlm", size="small")) is not bench  # benchmarks: the disk cache
    finally:
        FRONTENDS.pop("test_file")
