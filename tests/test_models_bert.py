"""Tests of the BERT benchmark (compgraph/models/bert.py) on its small size: a real TF1 training
step, imported into an OpGraph, grouped with the 2017 rules, and run in a TF session."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from pydantic import ValidationError

from compgraph.costs import unknown_flop_types
from compgraph.grouping import group_ops
from compgraph.models import bert
from compgraph.models.bert import SMALL

L = SMALL.num_hidden_layers
EXPECTED_KEYS = {"bert/embeddings", "bert/head"} | {
    f"bert/encoder/layer_{i}/{sub}" for i in range(L) for sub in ("attention", "ffn")
}


@pytest.fixture(scope="module")
def small():
    """(graph_def, fetches, OpGraph, Grouping) of ``bert.SMALL``."""
    from compgraph.tf_import import import_graph_def

    gd, fetches = bert.build_training_graph(SMALL)
    og = import_graph_def(gd, fetches, name="bert")
    grouping = group_ops(og, bert.model_rule, grouper="2017")
    return gd, fetches, og, grouping


def _types(og):
    return [op.type for op in og.ops]


# --------------------------------------------------------------------------------------
# graph structure
# --------------------------------------------------------------------------------------


def test_small_size_and_flat(small):
    gd, _, og, _ = small
    assert 500 <= og.num_ops <= 3000, og.num_ops
    assert len(gd.library.function) == 0
    banned = {"While", "If", "StatelessWhile", "StatelessIf", "PartitionedCall", "StatefulPartitionedCall",
              "Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond"}
    assert not banned & {n.op for n in gd.node}
    assert not [t for t in _types(og) if "String" in t or t.startswith("Random") or "Dropout" in t]


def test_fetches_exist(small):
    _, fetches, og, _ = small
    train, loss = fetches
    assert og.ops[og.index[train]].type == "NoOp"
    assert og.ops[og.index[loss]].output_shapes == [()]
    assert loss == "bert/loss/total_loss"


def test_flop_rules_cover_every_type(small):
    _, _, og, _ = small
    assert unknown_flop_types(_types(og)) == []
    # a query projection on [batch*seq, hidden]: 2 * B*S * H * H FLOPs
    q = og.ops[og.index["bert/encoder/layer_0/attention/self/query/MatMul"]]
    rows = SMALL.batch_size * SMALL.seq_length
    assert q.output_shapes == [(rows, SMALL.hidden_size)]
    assert q.flops == 2.0 * rows * SMALL.hidden_size * SMALL.hidden_size


def test_layer_and_sublayer_scopes(small):
    _, _, og, _ = small
    names = [op.name for op in og.ops]
    for layer in range(L):
        p = f"bert/encoder/layer_{layer}/"
        for scope in ("attention/self/query/", "attention/self/key/", "attention/self/value/",
                      "attention/output/dense/", "attention/output/LayerNorm/moments/",
                      "intermediate/dense/", "output/dense/", "output/LayerNorm/moments/"):
            assert any(n.startswith(p + scope) for n in names), p + scope
        softmax = [op for op in og.ops if op.type == "Softmax" and op.name.startswith(p)]
        assert [op.name for op in softmax] == [p + "attention/self/Softmax"]
        scores = og.ops[og.index[p + "attention/self/MatMul"]]
        heads, head_size = SMALL.num_attention_heads, SMALL.hidden_size // SMALL.num_attention_heads
        assert scores.type == "BatchMatMulV2"
        assert scores.output_shapes == [(SMALL.batch_size, heads, SMALL.seq_length, SMALL.seq_length)]
        assert scores.flops == 2.0 * SMALL.batch_size * heads * SMALL.seq_length**2 * head_size
    layers = {int(m.group(1)) for n in names if (m := re.search(r"bert/encoder/layer_(\d+)/", n))}
    assert layers == set(range(L))
    # 2 batched matmuls per layer forward, 2 more for each one's gradient
    assert _types(og).count("BatchMatMulV2") == 6 * L
    assert any(n.startswith("bert/embeddings/attention_mask/") for n in names)
    assert any(op.type == "ResourceGather" and op.name.startswith("bert/embeddings/") for op in og.ops)
    assert sum(op.type == "SparseSoftmaxCrossEntropyWithLogits" and op.name.startswith("bert/loss/")
               for op in og.ops) == 2


def test_gradients_and_adam_present(small):
    _, _, og, _ = small
    n_vars = 5 + 16 * L + 2  # 3 tables + LayerNorm, 16 per layer, head kernel + bias
    assert _types(og).count("VarHandleOp") == 3 * n_vars + 2  # variable, 2 Adam slots; beta1/2_power
    # every dense variable has a ResourceApplyAdam; the word table gets Adam's sparse path
    applies = [op.name for op in og.ops if op.type == "ResourceApplyAdam"]
    assert len(applies) == n_vars - 1
    assert not any("word_embeddings" in a for a in applies)
    assert any(op.type == "ResourceScatterAdd" and "word_embeddings" in op.name for op in og.ops)
    for layer in range(L):
        for sub in ("attention/self/query/MatMul", "intermediate/dense/MatMul", "output/LayerNorm/moments/mean"):
            assert any(op.name.startswith(f"gradients/bert/encoder/layer_{layer}/{sub}_grad/") for op in og.ops)


def test_gradients_grouped_with_their_forward_op(small):
    _, _, og, grouping = small
    checked = 0
    for i, op in enumerate(og.ops):
        m = re.match(r"^gradients/(bert/.+?)_grad/", op.name)
        if m is None or m.group(1) not in og.index or op.name.endswith(("control_dependency", "control_dependency_1")):
            continue
        fwd = og.index[m.group(1)]
        assert grouping.op_group[i] == grouping.op_group[fwd], op.name
        assert bert.model_rule(op.name) == bert.model_rule(og.ops[fwd].name), op.name
        checked += 1
    assert checked > 500


# --------------------------------------------------------------------------------------
# model rule, grouping, expert layers
# --------------------------------------------------------------------------------------


def test_model_rule_keys_and_groups(small):
    _, _, og, grouping = small
    keys = {bert.model_rule(op.name) for op in og.ops} - {None}
    assert keys == EXPECTED_KEYS
    # every keyed op sits in the group named by its key: one group per sub-layer
    for i, op in enumerate(og.ops):
        k = bert.model_rule(op.name)
        if k is not None:
            assert grouping.names[grouping.op_group[i]] == k, op.name
    assert EXPECTED_KEYS <= set(grouping.names)
    # what is left: Adam's hyperparameter constants and the train op, each shared by all updates
    assert all(n.startswith("train_step") for n in set(grouping.names) - EXPECTED_KEYS)
    assert grouping.num_groups == len(EXPECTED_KEYS) + 5


def test_model_rule_on_names():
    r = bert.model_rule
    assert r("bert/encoder/layer_11/attention/self/Softmax") == "bert/encoder/layer_11/attention"
    assert r("bert/encoder/layer_3/attention/output/LayerNorm/mul") == "bert/encoder/layer_3/attention"
    assert r("bert/encoder/layer_3/output/LayerNorm/mul") == "bert/encoder/layer_3/ffn"
    assert r("gradients_2/bert/encoder/layer_3/intermediate/dense/MatMul_grad/MatMul") == "bert/encoder/layer_3/ffn"
    assert r("bert/encoder/layer_3/output/dense/kernel/Adam_1") == "bert/encoder/layer_3/ffn"
    assert r("gradients/bert/embeddings/GatherV2_grad/Reshape") == "bert/embeddings"
    assert r("bert/loss/total_loss") == r("bert/head/span/MatMul") == "bert/head"
    # gradient aliases TensorFlow colocates with the next sub-layer, and uncovered ops
    assert r("gradients/bert/embeddings/LayerNorm/add_1_grad/tuple/control_dependency") is None
    assert r("gradients/bert/encoder/layer_0/output/add_grad/tuple/control_dependency_1") is None
    assert r("bert/input_ids") is None
    assert r("train_step/update_bert/encoder/layer_0/output/dense/kernel/ResourceApplyAdam") is None
    assert r("beta1_power") is None


def test_expert_layers(small):
    _, _, og, _ = small
    assert bert.EXPERT_CONTIGUOUS is True
    assert bert.num_layers(SMALL) == L and bert.num_layers(bert.PAPER) == 12
    layers = [bert.expert_layer(op.name, SMALL) for op in og.ops]
    assert set(layers) == set(range(L))
    e = bert.expert_layer
    assert e("bert/embeddings/LayerNorm/mul", SMALL) == 0
    assert e("gradients/bert/embeddings/GatherV2_grad/Reshape", SMALL) == 0
    assert e("bert/encoder/layer_1/attention/self/MatMul", SMALL) == 1
    assert e("train_step/update_bert/encoder/layer_0/output/dense/kernel/ResourceApplyAdam", SMALL) == 0
    assert e("bert/head/span/MatMul", SMALL) == L - 1
    assert e("bert/loss/total_loss", SMALL) == L - 1
    assert e("bert/encoder/layer_11/output/dense/MatMul", bert.PAPER) == 11
    with pytest.raises(ValueError, match="layer_5"):
        e("bert/encoder/layer_5/output/dense/MatMul", SMALL)


# --------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------


def test_paper_config_is_bert_base():
    p = bert.PAPER
    assert (p.num_hidden_layers, p.hidden_size, p.num_attention_heads, p.intermediate_size) == (12, 768, 12, 3072)
    assert (p.seq_length, p.batch_size, p.vocab_size) == (384, 24, 30522)


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="hidden_size=65"):
        bert.BertConfig(hidden_size=65, num_attention_heads=4)
    with pytest.raises(ValidationError, match="seq_length=600"):
        bert.BertConfig(seq_length=600)
    with pytest.raises(ValidationError, match="batch_size"):
        bert.BertConfig(batch_size=0)
    with pytest.raises(TypeError, match="BertConfig"):
        bert.build_training_graph({"hidden_size": 64})


# --------------------------------------------------------------------------------------
# the graph runs: loss at init, training reduces it, the attention mask hides padding
# --------------------------------------------------------------------------------------


def _session_graph(graph_def):
    from compgraph.tf_env import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return tf, graph


def _feed(rng, cfg, real_len):
    B, S = cfg.batch_size, cfg.seq_length
    mask = np.zeros((B, S), np.int32)
    mask[:, :real_len] = 1
    return {
        "bert/input_ids:0": rng.integers(0, cfg.vocab_size, (B, S)).astype(np.int32),
        "bert/segment_ids:0": (np.arange(S)[None, :] >= S // 2).repeat(B, 0).astype(np.int32),
        "bert/input_mask:0": mask,
        "bert/start_positions:0": rng.integers(0, real_len, B).astype(np.int32),
        "bert/end_positions:0": rng.integers(0, real_len, B).astype(np.int32),
    }


def test_training_steps_reduce_loss():
    cfg = SMALL.model_copy(update={"learning_rate": 1e-3})
    gd, (train, loss) = bert.build_training_graph(cfg)
    tf, graph = _session_graph(gd)
    rng = np.random.default_rng(0)
    feed = _feed(rng, cfg, real_len=cfg.seq_length)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run("init")
        losses = [sess.run([train, loss + ":0"], feed)[1] for _ in range(8)]
    # logits start near 0 (weights ~ N(0, 0.02)): the loss is ~ ln(seq_length)
    assert abs(losses[0] - math.log(cfg.seq_length)) < 0.2, losses
    assert losses[-1] < losses[0] - 0.1, losses


def test_attention_mask_hides_padding(small):
    gd = small[0]
    tf, graph = _session_graph(gd)
    start_logits = next(op for op in graph.get_operations() if op.type == "Unpack" and op.name.startswith("bert/head/"))
    real = SMALL.seq_length - 8
    rng = np.random.default_rng(1)
    feed = _feed(rng, SMALL, real_len=real)
    other = dict(feed)
    ids = feed["bert/input_ids:0"].copy()
    ids[:, real:] = (ids[:, real:] + 7) % SMALL.vocab_size  # change only the padded tokens
    other["bert/input_ids:0"] = ids
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run("init")
        a = sess.run(start_logits.outputs[0], feed)
        b = sess.run(start_logits.outputs[0], other)
    assert a.shape == (SMALL.batch_size, SMALL.seq_length)
    np.testing.assert_allclose(a[:, :real], b[:, :real], atol=1e-4)
    assert np.abs(a[:, real:] - b[:, real:]).max() > 1e-3


def test_build_is_deterministic(small):
    gd, fetches, _, _ = small
    gd2, fetches2 = bert.build_training_graph(SMALL)
    assert fetches2 == fetches
    assert gd2.SerializeToString(deterministic=True) == gd.SerializeToString(deterministic=True)
