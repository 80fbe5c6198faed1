"""The NMT (2017 Sec. 4.1) and GNMT (EAGLE Sec. IV-A) training-step benchmarks at small size.

Each small graph is built, imported and grouped once per module (a few seconds each);
the tests then check its structure on the real TensorFlow graph: flat (no control flow,
no functions), the expected layer/step/branch keys, gradients colocated with their
forward ops, the optimizer updates, the parameter bytes, the expert layers, FLOPs rules,
and that one training step actually runs in a TF1 session.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pydantic
import pytest

from compgraph.costs import unknown_flop_types
from compgraph.grouping import group_ops
from compgraph.models import gnmt, nmt
from compgraph.tf_import import import_graph_def

MODULES = {"nmt": nmt, "gnmt": gnmt}
CONTROL_FLOW = {"While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall",
                "Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond"}


class Built:
    """A small benchmark's GraphDef, fetches, OpGraph and 2017 grouping."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mod = MODULES[name]
        self.config = self.mod.SMALL
        self.graph_def, self.fetches = self.mod.build_training_graph(self.config)
        self.graph = import_graph_def(self.graph_def, self.fetches, name=name)
        self.grouping = group_ops(self.graph, self.mod.model_rule, grouper="2017")
        self.nodes = {n.name: n for n in self.graph_def.node}

    def group_of(self, op_name: str) -> int:
        return int(self.grouping.op_group[self.graph.index[op_name]])


@pytest.fixture(scope="module", params=["nmt", "gnmt"])
def built(request):
    return _cache(request.param)


_BUILT: dict[str, Built] = {}


def _cache(name: str) -> Built:
    if name not in _BUILT:
        _BUILT[name] = Built(name)
    return _BUILT[name]


@pytest.fixture(scope="module")
def nmt_small():
    return _cache("nmt")


@pytest.fixture(scope="module")
def gnmt_small():
    return _cache("gnmt")


def expected_keys(name: str, c) -> set[str]:
    """Every model-rule key the small graph must carry: one per cell, lookup, attention and softmax step."""
    p = name
    keys = {f"{p}/decoder/attention/memory"}
    for t in range(c.source_length):
        keys.add(f"{p}/encoder/embedding/step_{t}")
        if name == "gnmt":
            keys |= {f"{p}/encoder/layer_0/fw/step_{t}", f"{p}/encoder/layer_0/bw/step_{t}"}
            keys |= {f"{p}/encoder/layer_{L}/step_{t}" for L in range(1, c.num_layers)}
        else:
            keys |= {f"{p}/encoder/layer_{L}/step_{t}" for L in range(c.num_layers)}
    for t in range(c.target_length):
        keys |= {f"{p}/decoder/{part}/step_{t}" for part in ("embedding", "attention", "softmax")}
        keys |= {f"{p}/decoder/layer_{L}/step_{t}" for L in range(c.num_layers)}
    return keys


def cell_keys(name: str, c) -> list[str]:
    return sorted(k for k in expected_keys(name, c) if "/layer_" in k)


# --------------------------------------------------------------------------------------
# both models
# --------------------------------------------------------------------------------------


def test_graph_is_flat_and_fetches_exist(built):
    types = {n.op for n in built.graph_def.node}
    assert not types & CONTROL_FLOW
    assert len(built.graph_def.library.function) == 0
    assert all(n.op not in ("StringJoin", "AsString", "StringFormat") for n in built.graph_def.node)
    assert built.fetches == ["train_step", f"{built.name}/loss/truediv"]
    for f in built.fetches:
        assert f in built.graph.index
    # the small size stays small: a few thousand ops
    assert 500 <= built.graph.num_ops <= 3000
    assert built.graph.num_ops <= len(built.graph_def.node)  # pruned to the step


def test_model_rule_keys_match_structure(built):
    keys = {built.mod.model_rule(op.name) for op in built.graph.ops} - {None}
    assert keys == expected_keys(built.name, built.config)
    # every cell, attention step and softmax step is one named group
    for k in keys:
        if "/embedding/" in k:
            continue  # a lookup feeding only one cell is merged into it by the single-consumer rule
        assert k in built.grouping.names, k
    assert len(set(built.grouping.names)) == built.grouping.num_groups
    assert sorted(set(built.grouping.op_group.tolist())) == list(range(built.grouping.num_groups))


def test_model_rule_strings(built):
    rule, p = built.mod.model_rule, built.name
    assert rule(f"{p}/decoder/layer_1/step_3/MatMul") == f"{p}/decoder/layer_1/step_3"
    assert rule(f"gradients/{p}/decoder/attention/step_2/Softmax_grad/mul") == f"{p}/decoder/attention/step_2"
    assert rule(f"gradients_3/{p}/decoder/softmax/step_0/MatMul_grad/MatMul") == f"{p}/decoder/softmax/step_0"
    assert rule(f"{p}/encoder/embedding/step_5/embedding_lookup") == f"{p}/encoder/embedding/step_5"
    assert rule(f"{p}/decoder/attention/memory/stack") == f"{p}/decoder/attention/memory"
    assert rule(f"{p}/decoder/layer_1/kernel") is None  # a variable shared by every step
    assert rule(f"{p}/loss/truediv") is None
    assert rule(f"train_step/update_{p}/decoder/layer_1/kernel/ResourceApplyAdam") is None
    assert rule(f"x{p}/decoder/layer_1/step_3/MatMul") is None


def test_cell_gradients_are_colocated_with_forward(built):
    g = built.graph
    for key in cell_keys(built.name, built.config):
        cell = built.group_of(f"{key}/MatMul")
        assert built.grouping.names[cell] == key
        for grad in ("MatMul_grad/MatMul", "MatMul_grad/MatMul_1", "BiasAdd_grad/BiasAddGrad",
                     "Tanh_1_grad/TanhGrad", "Sigmoid_grad/SigmoidGrad"):
            name = f"gradients/{key}/{grad}"
            assert name in g.index, name
            assert built.group_of(name) == cell, name
            assert f"loc:@{key}/{grad.split('_grad')[0]}".encode() in built.nodes[name].attr["_class"].list.s


def test_optimizer_updates_and_param_bytes(built):
    types = Counter(op.type for op in built.graph.ops)
    variables = [op for op in built.graph.ops if op.type == "VarHandleOp" and "/Adam" not in op.name
                 and "power" not in op.name]
    embeddings = [v for v in variables if v.name.endswith("/embedding/embedding")]
    assert len(embeddings) == 2
    # dense variables: one ResourceApplyAdam each; embeddings: sparse Adam (two scatter-adds each)
    assert types["ResourceApplyAdam"] == len(variables) - 2
    assert types["ResourceScatterAdd"] == 2 * 2
    c = built.config
    h = c.hidden_size
    lstm = lambda d_in: (d_in + h) * 4 * h + 4 * h  # noqa: E731
    if built.name == "nmt":
        n_params = ((c.source_vocab_size + c.target_vocab_size) * h
                    + c.num_layers * lstm(h) + lstm(2 * h) + (c.num_layers - 1) * lstm(h)
                    + 4 * h * h + h + h * c.target_vocab_size + c.target_vocab_size)
    else:
        n_params = ((c.source_vocab_size + c.target_vocab_size) * h
                    + 2 * lstm(h) + lstm(2 * h) + (c.num_layers - 2) * lstm(h)
                    + c.num_layers * lstm(2 * h) + 2 * h * h + h + h * c.target_vocab_size)
    # weights + Adam m and v (float32) + beta1/beta2 powers
    assert built.graph.total_param_bytes() == 3 * 4 * n_params + 2 * 4


def test_no_unknown_flop_types_and_all_gpu(built):
    # every op type of both graphs has a FLOPs rule in compgraph.costs (checked: the list is empty)
    assert unknown_flop_types([op.type for op in built.graph.ops]) == []
    assert all(op.gpu_kernel for op in built.graph.ops)
    assert built.graph.total_flops() > 0


def test_cell_matmul_shapes_and_flops(built):
    c, g = built.config, built.graph
    h, b = c.hidden_size, c.batch_size
    mm = g.ops[g.index[f"{built.name}/decoder/layer_1/step_0/MatMul"]]
    d_in = h if built.name == "nmt" else 2 * h  # gnmt: input + attention context
    assert mm.output_shapes == [(b, 4 * h)]
    assert mm.flops == 2 * b * 4 * h * (d_in + h)
    sm = g.ops[g.index[f"{built.name}/decoder/softmax/step_0/MatMul"]]
    assert sm.output_shapes == [(b, c.target_vocab_size)]
    ctx = g.ops[g.index[f"{built.name}/decoder/attention/step_0/MatMul_1"]]
    assert ctx.type == "BatchMatMulV2"
    assert ctx.output_shapes == [(b, 1, h)]
    assert ctx.flops == 2 * b * h * c.source_length


def test_expert_layers_in_range_and_all_used(built):
    mod, c = built.mod, built.config
    n = mod.num_layers(c)
    assert n == c.num_layers
    assert mod.EXPERT_CONTIGUOUS is False
    per_group = []
    for members in built.grouping.members():
        counts = Counter(mod.expert_layer(built.graph.ops[i].name, c) for i in members)
        per_group.append(min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0])
    assert set(per_group) == set(range(n))
    for op in built.graph.ops:
        assert 0 <= mod.expert_layer(op.name, c) < n


def test_one_training_step_runs(built):
    """The graph runs as built: one step's loss is about ln(vocab) at the small initial weights."""
    from compgraph.tf_env import import_tensorflow

    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = built.config
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(built.graph_def, name="")
    rng = np.random.default_rng(0)
    feed = {
        f"{built.name}/source:0": rng.integers(0, c.source_vocab_size, (c.batch_size, c.source_length)),
        f"{built.name}/target_inputs:0": rng.integers(0, c.target_vocab_size, (c.batch_size, c.target_length)),
        f"{built.name}/targets:0": rng.integers(0, c.target_vocab_size, (c.batch_size, c.target_length)),
    }
    with v1.Session(graph=graph) as sess:
        sess.run("init")
        loss0 = sess.run(built.fetches[1] + ":0", feed)
        sess.run(built.fetches[0], feed)
        loss1 = sess.run(built.fetches[1] + ":0", feed)
    assert abs(loss0 - math.log(c.target_vocab_size)) < 0.5
    assert loss1 < loss0  # the Adam update moved the weights downhill on this batch


# --------------------------------------------------------------------------------------
# NMT
# --------------------------------------------------------------------------------------


def test_nmt_attention_wiring(nmt_small):
    nodes = nmt_small.nodes
    top = nmt_small.config.num_layers - 1
    # query: the top decoder layer's output at the same step
    assert nodes["nmt/decoder/attention/step_2/MatMul"].input[0] == f"nmt/decoder/layer_{top}/step_2/mul_2"
    # keys and memory come from the encoder's top layer, computed once
    stack = nodes["nmt/decoder/attention/memory/stack"]
    assert list(stack.input) == [f"nmt/encoder/layer_{top}/step_{t}/mul_2"
                                 for t in range(nmt_small.config.source_length)]
    # input feeding: the attention vector of step t enters the bottom layer at step t + 1
    assert "nmt/decoder/attention/step_2/Tanh_1" in nodes["nmt/decoder/layer_0/step_3/concat"].input
    assert nodes["nmt/decoder/softmax/step_2/MatMul"].input[0] == "nmt/decoder/attention/step_2/Tanh_1"
    # the decoder starts from the encoder's final states
    last = nmt_small.config.source_length - 1
    assert nodes["nmt/decoder/layer_1/step_0/mul"].input[1] == f"nmt/encoder/layer_1/step_{last}/add_1"


def test_nmt_expert_layer():
    c = nmt.PAPER
    assert nmt.expert_layer("nmt/encoder/layer_1/step_3/MatMul", c) == 1
    assert nmt.expert_layer("gradients/nmt/decoder/layer_0/step_3/MatMul_grad/MatMul", c) == 0
    assert nmt.expert_layer("train_step/update_nmt/decoder/layer_0/kernel/ResourceApplyAdam", c) == 0
    assert nmt.expert_layer("nmt/encoder/embedding/step_0/embedding_lookup", c) == 0
    assert nmt.expert_layer("nmt/decoder/embedding/embedding", c) == 0
    for name in ("nmt/decoder/attention/step_0/Softmax", "nmt/decoder/attention/memory/stack",
                 "nmt/decoder/softmax/step_4/MatMul", "nmt/loss/truediv", "train_step/beta1_power"):
        assert nmt.expert_layer(name, c) == 1, name


def test_nmt_sizes():
    assert (nmt.PAPER.num_layers, nmt.PAPER.hidden_size, nmt.PAPER.batch_size) == (2, 1024, 64)
    assert (nmt.PAPER.source_length, nmt.PAPER.target_length) == (40, 40)
    assert (nmt.PAPER.source_vocab_size, nmt.PAPER.target_vocab_size) == (32000, 32000)
    assert (nmt.LARGE.hidden_size, nmt.LARGE.batch_size) == (2048, 256)
    with pytest.raises(pydantic.ValidationError, match="hidden_size"):
        nmt.NMTConfig(hidden_size=0)
    with pytest.raises(TypeError, match="NMTConfig"):
        nmt.build_training_graph(gnmt.SMALL)


# --------------------------------------------------------------------------------------
# GNMT
# --------------------------------------------------------------------------------------


def test_gnmt_bidirectional_first_layer(gnmt_small):
    nodes, s = gnmt_small.nodes, gnmt_small.config.source_length
    # forward runs 0 -> S-1, backward S-1 -> 0; both read token T's embedding
    assert "gnmt/encoder/layer_0/fw/step_0/mul_2" in nodes["gnmt/encoder/layer_0/fw/step_1/concat"].input
    assert f"gnmt/encoder/layer_0/bw/step_{s - 1}/mul_2" in nodes[f"gnmt/encoder/layer_0/bw/step_{s - 2}/concat"].input
    for t in range(s):
        emb = f"gnmt/encoder/embedding/step_{t}/embedding_lookup/Identity"
        assert emb in nodes[f"gnmt/encoder/layer_0/fw/step_{t}/concat"].input
        assert emb in nodes[f"gnmt/encoder/layer_0/bw/step_{t}/concat"].input
    # layer 1 reads both directions at the same position
    inputs = list(nodes["gnmt/encoder/layer_1/step_1/concat"].input)
    assert inputs[:2] == ["gnmt/encoder/layer_0/fw/step_1/mul_2", "gnmt/encoder/layer_0/bw/step_1/mul_2"]


def test_gnmt_residual_from_layer_2(gnmt_small):
    nodes = gnmt_small.nodes
    for part in ("encoder", "decoder"):
        for layer in range(gnmt_small.config.num_layers):
            name = f"gnmt/{part}/layer_{layer}/step_1/add_2"
            assert (name in nodes) == (layer >= gnmt.FIRST_RESIDUAL_LAYER), name
    # output = LSTM output + the layer's input (the previous layer's output, not the attention)
    assert list(nodes["gnmt/decoder/layer_2/step_1/add_2"].input) == [
        "gnmt/decoder/layer_2/step_1/mul_2", "gnmt/decoder/layer_1/step_1/mul_2"]
    assert list(nodes["gnmt/encoder/layer_3/step_0/add_2"].input) == [
        "gnmt/encoder/layer_3/step_0/mul_2", "gnmt/encoder/layer_2/step_0/add_2"]


def test_gnmt_attention_fed_to_all_decoder_layers(gnmt_small):
    nodes, c = gnmt_small.nodes, gnmt_small.config
    # query: the bottom decoder layer's output at the same step
    assert nodes["gnmt/decoder/attention/step_1/MatMul"].input[0] == "gnmt/decoder/layer_0/step_1/mul_2"
    ctx = "gnmt/decoder/attention/step_1/Squeeze"
    for layer in range(1, c.num_layers):
        assert ctx in nodes[f"gnmt/decoder/layer_{layer}/step_1/concat"].input
    assert ctx in nodes["gnmt/decoder/layer_0/step_2/concat"].input  # and the bottom layer's next step
    top = f"gnmt/decoder/layer_{c.num_layers - 1}/step_1/add_2"
    assert nodes["gnmt/decoder/softmax/step_1/MatMul"].input[0] == top
    # memory: the encoder's top (residual) outputs
    assert list(nodes["gnmt/decoder/attention/memory/stack"].input) == [
        f"gnmt/encoder/layer_{c.num_layers - 1}/step_{t}/add_2" for t in range(c.source_length)]
    # decoder layer 0 starts from the backward layer's final state, layer L from encoder layer L's
    assert nodes["gnmt/decoder/layer_0/step_0/mul"].input[1] == "gnmt/encoder/layer_0/bw/step_0/add_1"
    last = c.source_length - 1
    assert nodes["gnmt/decoder/layer_2/step_0/mul"].input[1] == f"gnmt/encoder/layer_2/step_{last}/add_1"


def test_gnmt_expert_layer():
    c = gnmt.PAPER
    assert gnmt.expert_layer("gnmt/encoder/layer_0/fw/step_3/MatMul", c) == 0
    assert gnmt.expert_layer("gradients/gnmt/encoder/layer_0/bw/step_3/MatMul_grad/MatMul", c) == 1
    assert gnmt.expert_layer("train_step/update_gnmt/encoder/layer_0/bw/kernel/ResourceApplyAdam", c) == 1
    assert gnmt.expert_layer("gnmt/encoder/layer_3/step_0/add_2", c) == 3
    assert gnmt.expert_layer("gnmt/decoder/layer_2/step_9/MatMul", c) == 2
    for name in ("gnmt/decoder/attention/step_0/Softmax", "gnmt/decoder/attention/memory/stack",
                 "gnmt/encoder/embedding/step_0/embedding_lookup", "train_step/beta1_power"):
        assert gnmt.expert_layer(name, c) == 0, name
    for name in ("gnmt/decoder/softmax/step_4/MatMul", "gradients/gnmt/loss/truediv_grad/RealDiv"):
        assert gnmt.expert_layer(name, c) == 3, name
    assert gnmt.expert_layer("gnmt/encoder/layer_0/bw/step_0/MatMul", gnmt.GNMTConfig(num_layers=2)) == 1


def test_gnmt_sizes_and_sgd():
    p = gnmt.PAPER
    assert (p.num_layers, p.hidden_size, p.batch_size, p.source_length, p.target_length) == (4, 256, 256, 50, 50)
    assert (p.source_vocab_size, p.target_vocab_size, p.optimizer) == (32000, 32000, "adam")
    with pytest.raises(pydantic.ValidationError, match="num_layers"):
        gnmt.GNMTConfig(num_layers=1)
    with pytest.raises(pydantic.ValidationError, match="optimizer"):
        gnmt.GNMTConfig(optimizer="rmsprop")
    cfg = gnmt.GNMTConfig(num_layers=2, hidden_size=8, source_length=2, target_length=2, batch_size=2,
                          source_vocab_size=10, target_vocab_size=10, optimizer="sgd")
    graph_def, fetches = gnmt.build_training_graph(cfg)
    types = Counter(n.op for n in graph_def.node)
    assert types["ResourceApplyAdam"] == 0
    # kernel and bias of fw, bw, layer_1 and of 2 decoder layers; 3 attention weights; softmax weights
    assert types["ResourceApplyGradientDescent"] == 2 * 3 + 2 * 2 + 3 + 1
    assert unknown_flop_types(list(types)) == []
