"""Tests of the hand-built CNN training steps: Inception-V3 and ResNet-50/101/200.

Real small TensorFlow graphs are built, imported and grouped once per module; the tests
check the block/branch structure visible in the name scopes and model-rule keys, the
gradients and optimizer updates, the flat (control-flow-free) graph, the expert layers,
the configs' checks, and that one training step really runs in a TF1 session.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from pydantic import ValidationError

from compgraph.costs import unknown_flop_types
from compgraph.grouping import group_ops
from compgraph.models import inception, resnet
from compgraph.tf_import import import_graph_def

CONTROL_FLOW = {
    "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "If", "StatelessIf",
    "While", "StatelessWhile", "PartitionedCall", "StatefulPartitionedCall", "Case",
}  # fmt: skip
#: Op types the FLOPs rules of compgraph.costs lack in these graphs (reported to the lead).
KNOWN_MISSING_FLOP_RULES = {"AvgPool", "AvgPoolGrad", "MaxPool", "MaxPoolGrad", "ResourceApplyMomentum"}


def _prepare(build, config, rule, name):
    graph_def, fetches = build(config)
    graph = import_graph_def(graph_def, fetches, name=name)
    return graph_def, fetches, graph, group_ops(graph, rule, grouper="2017")


@pytest.fixture(scope="module")
def inc():
    return _prepare(inception.build_training_graph, inception.SMALL, inception.model_rule, "inception_v3")


@pytest.fixture(scope="module")
def r50():
    return _prepare(resnet.build_training_graph, resnet.SMALL[50], resnet.model_rule, "resnet50")


@pytest.fixture(scope="module")
def r200():
    return _prepare(resnet.build_training_graph, resnet.SMALL[200], resnet.model_rule, "resnet200")


def _run_one_step(graph_def, fetches, feeds: dict[str, np.ndarray], watch: list[str]):
    """Run the initializer and one training step; return (loss, {var: (before, after)})."""
    from compgraph.tf_env import import_tensorflow

    tf = import_tensorflow()
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    config = v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    with v1.Session(graph=graph, config=config) as sess:
        sess.run("init")
        before = sess.run([f"{w}/Read/ReadVariableOp:0" for w in watch])
        _, loss = sess.run([fetches[0], f"{fetches[1]}:0"], feed_dict={f"{k}:0": v for k, v in feeds.items()})
        after = sess.run([f"{w}/Read/ReadVariableOp:0" for w in watch])
    return loss, {w: (b, a) for w, b, a in zip(watch, before, after)}


def _check_flat(graph_def, graph, fetches):
    assert len(graph_def.library.function) == 0
    types = {n.op for n in graph_def.node}
    assert not types & CONTROL_FLOW, types & CONTROL_FLOW
    assert not any(t.startswith("String") for t in types)
    for f in fetches:
        assert f in graph.index
    assert "init" in {n.name for n in graph_def.node}  # the initializer is built (and pruned from the step)
    assert "init" not in graph.index


# --------------------------------------------------------------------------------------
# Inception-V3
# --------------------------------------------------------------------------------------


def test_inception_flat_and_fetches(inc):
    graph_def, fetches, graph, _ = inc
    _check_flat(graph_def, graph, fetches)
    assert fetches == ["train_step", "inception_v3/logits/loss/total_loss"]
    # fixed static shapes on the inputs
    images = graph.ops[graph.index["inception_v3/images"]]
    assert images.output_shapes == [(2, 75, 75, 3)]


def test_inception_blocks_and_branches_in_keys(inc):
    _, _, graph, _ = inc
    keys = {inception.model_rule(op.name) for op in graph.ops} - {None}
    branches = defaultdict(set)
    for k in keys:
        parts = k.split("/")
        if len(parts) == 3 and parts[2].startswith("Branch_"):
            branches[parts[1]].add(parts[2])
    assert {b: len(v) for b, v in branches.items()} == inception.BRANCHES
    stem = {k for k in keys if k.startswith("inception_v3/stem/")}
    assert stem == {f"inception_v3/stem/{layer}" for layer in inception.STEM_LAYERS}
    concats = {k for k in keys if k.endswith("/concat")}
    assert concats == {f"inception_v3/{b}/concat" for b in inception.BLOCKS}
    assert {"inception_v3/logits", "inception_v3/AuxLogits"} <= keys
    assert len(keys) == 7 + 42 + 11 + 2


def test_inception_named_layers_and_gradients(inc):
    _, _, graph, _ = inc
    names = set(graph.index)
    # TF-slim's names: Mixed_6b's Branch_1 is 1x1, 1x7, 7x1; Branch_2 is 1x1, 7x1, 1x7, 7x1, 1x7
    fwd = "inception_v3/Mixed_6b/Branch_1/Conv2d_0c_7x1/Conv2D"
    assert fwd in names
    assert graph.ops[graph.index[fwd]].type == "Conv2D"
    grads = [n for n in names if n.startswith("gradients/inception_v3/Mixed_6b/Branch_1/Conv2d_0c_7x1/")]
    grad_types = {graph.ops[graph.index[n]].type for n in grads}
    assert {"Conv2DBackpropInput", "Conv2DBackpropFilter", "FusedBatchNormGradV3", "ReluGrad"} <= grad_types
    assert {inception.model_rule(n) for n in grads} == {"inception_v3/Mixed_6b/Branch_1"}
    assert "inception_v3/Mixed_6b/Branch_2/Conv2d_0e_1x7/Conv2D" in names
    # Mixed_7b's split towers stay inside their branch
    assert inception.model_rule("inception_v3/Mixed_7b/Branch_1/concat") == "inception_v3/Mixed_7b/Branch_1"
    # the kernel is (7, 1): shapes follow TF-slim's layer
    w = graph.ops[graph.index["inception_v3/Mixed_6b/Branch_1/Conv2d_0c_7x1/weights"]]
    assert w.param_bytes == 7 * 1 * 16 * 24 * 4  # 128/8 channels in, 192/8 out, float32


def test_inception_spatial_sizes(inc):
    _, _, graph, _ = inc
    # 75x75 (the minimum) leaves Mixed_7x 1x1 feature maps; 1/8 of the 2048 channels
    assert graph.ops[graph.index["inception_v3/Mixed_7c/concat"]].output_shapes == [(2, 1, 1, 256)]
    assert graph.ops[graph.index["inception_v3/stem/MaxPool_5a_3x3/MaxPool"]].output_shapes[0][1:3] == (7, 7)
    assert inception._spatial_sizes(299) == {"stem": 35, "Mixed_6": 17, "Mixed_7": 8}
    assert inception._spatial_sizes(inception.MIN_IMAGE_SIZE)["Mixed_7"] == 1


def test_inception_optimizer_and_batch_norm_updates(inc):
    _, _, graph, grouping = inc
    types = Counter(op.type for op in graph.ops)
    suffixes = ("/weights", "/beta", "/biases")
    trainable = [op for op in graph.ops if op.type == "VarHandleOp" and op.name.endswith(suffixes)]
    assert types["ResourceApplyRMSProp"] == len(trainable) > 0
    assert types["Conv2D"] == 94 + 3 + 1  # base network, aux head, logits
    assert types["FusedBatchNormV3"] == types["FusedBatchNormGradV3"] == 94 + 2
    assert types["AssignSubVariableOp"] == 2 * types["FusedBatchNormV3"]
    assert not any(t in types for t in CONTROL_FLOW)
    # each moving-average update stays in its branch's group (not lumped with the train op)
    update = "inception_v3/Mixed_6b/Branch_2/Conv2d_0d_7x1/BatchNorm/AssignMovingAvg/AssignSubVariableOp"
    assert grouping.names[grouping.op_group[graph.index[update]]] == "inception_v3/Mixed_6b/Branch_2"


def test_inception_grouping(inc):
    _, _, graph, grouping = inc
    keys = {inception.model_rule(op.name) for op in graph.ops} - {None}
    assert keys <= set(grouping.names)
    # no group mixes two model keys
    keys_of_group = defaultdict(set)
    for i, op in enumerate(graph.ops):
        k = inception.model_rule(op.name)
        if k is not None:
            keys_of_group[int(grouping.op_group[i])].add(k)
    assert all(len(v) == 1 for v in keys_of_group.values())
    # forward conv, its gradients and its optimizer update share a group
    g = grouping.op_group
    fwd = graph.index["inception_v3/Mixed_5b/Branch_1/Conv2d_0b_5x5/Conv2D"]
    for n in graph.index:
        if n.startswith(("gradients/", "train_step/update_")) and "inception_v3/Mixed_5b/Branch_1/" in n:
            assert g[graph.index[n]] == g[fwd], n
    print("inception_v3 small:", graph.num_ops, "ops,", grouping.num_groups, "groups")


def test_inception_expert_layers(inc):
    _, _, graph, _ = inc
    n = inception.num_layers(inception.SMALL)
    assert n == 17 and inception.EXPERT_CONTIGUOUS
    layers = [inception.expert_layer(op.name, inception.SMALL) for op in graph.ops]
    assert min(layers) == 0 and max(layers) == n - 1
    assert set(layers) == set(range(n))
    # contiguous: forward convolutions appear in non-decreasing layer order
    fwd = [layer for op, layer in zip(graph.ops, layers) if op.type == "Conv2D" and "AuxLogits" not in op.name]
    assert fwd == sorted(fwd)
    e = inception.expert_layer
    assert e("inception_v3/images") == 0
    assert e("inception_v3/stem/MaxPool_3a_3x3/MaxPool") == e("inception_v3/stem/Conv2d_2b_3x3/Conv2D") == 2
    assert e("inception_v3/Mixed_5b/Branch_0/Conv2d_0a_1x1/Conv2D") == 5
    assert e("gradients/inception_v3/Mixed_7c/Branch_3/Conv2d_0b_1x1/Conv2D_grad/Conv2DBackpropFilter") == 15
    assert e("train_step/update_inception_v3/Mixed_6e/Branch_0/Conv2d_0a_1x1/weights/ResourceApplyRMSProp") == 12
    assert e("inception_v3/AuxLogits/Conv2d_1b_1x1/Conv2D") == e("inception_v3/Mixed_6e/concat") == 12
    assert e("inception_v3/logits/loss/total_loss") == e("train_step/learning_rate") == 16


def test_inception_model_rule_names():
    r = inception.model_rule
    assert r("gradients_1/inception_v3/Mixed_6b/Branch_2/Conv2d_0d_7x1/Conv2D_grad/Conv2DBackpropInput") == (
        "inception_v3/Mixed_6b/Branch_2"
    )
    assert r("gradients/inception_v3/Mixed_6a/concat_grad/ConcatOffset") == "inception_v3/Mixed_6a/concat"
    assert r("inception_v3/stem/Conv2d_1a_3x3/BatchNorm/FusedBatchNormV3") == "inception_v3/stem/Conv2d_1a_3x3"
    assert r("inception_v3/logits/Conv2d_1c_1x1/Conv2D") == "inception_v3/logits"
    assert r("inception_v3/images") is None
    assert r("train_step/learning_rate") is None
    assert r("inception_v3/Mixed_6b") is None


def test_inception_config_checks():
    with pytest.raises(ValidationError, match="image_size"):
        inception.InceptionV3Config(image_size=74)
    with pytest.raises(ValidationError, match="batch_size"):
        inception.InceptionV3Config(batch_size=0)
    assert inception.InceptionV3Config(image_size=75).image_size == 75
    p = inception.PAPER
    assert (p.batch_size, p.image_size, p.num_classes, p.learning_rate) == (32, 299, 1000, 0.045)
    assert (p.rmsprop_decay, p.momentum, p.rmsprop_epsilon) == (0.9, 0.9, 1.0)


def test_inception_flop_rules_reported(inc):
    _, _, graph, _ = inc
    missing = unknown_flop_types([op.type for op in graph.ops])
    print("inception_v3 op types without a FLOPs rule:", missing)
    assert set(missing) <= KNOWN_MISSING_FLOP_RULES
    assert sum(op.flops for op in graph.ops if op.type == "Conv2D") > 0


def test_inception_small_step_runs(inc):
    graph_def, fetches, _, _ = inc
    rng = np.random.default_rng(0)
    feeds = {
        "inception_v3/images": rng.standard_normal((2, 75, 75, 3)).astype(np.float32),
        "inception_v3/labels": np.array([3, 7], dtype=np.int32),
    }
    watch = [
        "inception_v3/Mixed_6b/Branch_2/Conv2d_0d_7x1/weights",
        "inception_v3/Mixed_6b/Branch_2/Conv2d_0d_7x1/BatchNorm/moving_mean",
    ]
    loss, vals = _run_one_step(graph_def, fetches, feeds, watch)
    assert np.isfinite(loss) and loss > 0
    for w, (before, after) in vals.items():
        assert not np.allclose(before, after), w  # the optimizer and the moving average both ran


# --------------------------------------------------------------------------------------
# ResNet
# --------------------------------------------------------------------------------------


def _block_keys(graph, depth):
    keys = {resnet.model_rule(op.name) for op in graph.ops} - {None}
    per_stage = Counter(k.split("/")[1] for k in keys if "/stage_" in k)
    return keys, per_stage


def test_resnet50_structure(r50):
    graph_def, fetches, graph, grouping = r50
    _check_flat(graph_def, graph, fetches)
    keys, per_stage = _block_keys(graph, 50)
    assert per_stage == {"stage_2": 3, "stage_3": 4, "stage_4": 6, "stage_5": 3}
    assert {"resnet50/stem", "resnet50/head"} <= keys and len(keys) == 16 + 2
    names = set(graph.index)
    for sub in ("conv1", "conv2", "conv3", "shortcut"):
        assert f"resnet50/stage_2/block_1/{sub}/Conv2D" in names
    # projections only in each stage's first block; v1 has no pre-activation
    shortcuts = {n.split("/shortcut/")[0] for n in names if "/shortcut/" in n and n.startswith("resnet50/")}
    assert shortcuts == {f"resnet50/stage_{s}/block_1" for s in range(2, 6)}
    assert not any("/preact/" in n for n in names)
    # stride 2 in the first block of stages 3..5: 64 -> 32 (stem) -> 16 (pool) -> 16, 8, 4, 2
    for stage, side in ((2, 16), (3, 8), (4, 4), (5, 2)):
        shape = graph.ops[graph.index[f"resnet50/stage_{stage}/block_1/conv3/Conv2D"]].output_shapes[0]
        assert shape[1:3] == (side, side), stage
    assert graph.ops[graph.index["resnet50/stage_5/block_3/add/Relu"]].output_shapes == [(2, 2, 2, 256)]
    types = Counter(op.type for op in graph.ops)
    suffixes = ("/weights", "/beta", "/gamma", "/biases")
    trainable = [op for op in graph.ops if op.type == "VarHandleOp" and op.name.endswith(suffixes)]
    assert types["ResourceApplyMomentum"] == len(trainable) > 0
    assert types["Conv2D"] == 1 + 3 * 16 + 4
    assert types["Conv2D"] == types["Conv2DBackpropFilter"]
    assert types["AssignSubVariableOp"] == 2 * types["FusedBatchNormV3"]
    # forward, gradients and updates of a block share its group; no group mixes blocks
    g = grouping.op_group
    fwd = g[graph.index["resnet50/stage_4/block_5/conv2/Conv2D"]]
    for n in names:
        if n.startswith(("gradients/resnet50/stage_4/block_5/", "train_step/update_resnet50/stage_4/block_5/")):
            assert g[graph.index[n]] == fwd, n
    assert grouping.names[fwd] == "resnet50/stage_4/block_5"
    keys_of_group = defaultdict(set)
    for i, op in enumerate(graph.ops):
        if (k := resnet.model_rule(op.name)) is not None:
            keys_of_group[int(g[i])].add(k)
    assert all(len(v) == 1 for v in keys_of_group.values())
    print("resnet50 small:", graph.num_ops, "ops,", grouping.num_groups, "groups")


def test_resnet200_small_v2_structure(r200):
    graph_def, fetches, graph, grouping = r200
    _check_flat(graph_def, graph, fetches)
    cfg = resnet.SMALL[200]
    assert cfg.version == "v2" and cfg.blocks == (3, 8, 12, 3)
    keys, per_stage = _block_keys(graph, 200)
    assert per_stage == {"stage_2": 3, "stage_3": 8, "stage_4": 12, "stage_5": 3}
    assert all(k.startswith("resnet200/") for k in keys)
    names = set(graph.index)
    # pre-activation in every block, post-norm in the head, no BN in the stem
    preact = {n.split("/preact/")[0] for n in names if "/preact/" in n and n.startswith("resnet200/")}
    assert len(preact) == sum(cfg.blocks)
    assert "resnet200/head/postnorm/BatchNorm/FusedBatchNormV3" in names
    assert not any(n.startswith("resnet200/stem/conv1/BatchNorm") for n in names)
    types = Counter(op.type for op in graph.ops)
    assert types["FusedBatchNormV3"] == 3 * sum(cfg.blocks) + 1  # preact, conv1, conv2 per block; postnorm
    assert grouping.num_groups >= sum(cfg.blocks) + 2


def test_resnet_paper_depths_and_expert_layers(r50):
    for depth, cfg in resnet.PAPER.items():
        assert 3 * sum(cfg.blocks) + 2 == depth  # conv layers + fc = the name's depth
        assert (cfg.batch_size, cfg.image_size, cfg.num_classes) == (32, 224, 1000)
        assert resnet.num_layers(cfg) == sum(cfg.blocks) + 2
    assert [resnet.PAPER[d].version for d in (50, 101, 200)] == ["v1", "v1", "v2"]
    assert resnet.EXPERT_CONTIGUOUS
    _, _, graph, _ = r50
    cfg = resnet.SMALL[50]
    layers = [resnet.expert_layer(op.name, cfg) for op in graph.ops]
    assert set(layers) == set(range(resnet.num_layers(cfg)))
    fwd = [layer for op, layer in zip(graph.ops, layers) if op.type == "Conv2D"]
    assert fwd == sorted(fwd)
    e = resnet.expert_layer
    p101 = resnet.PAPER[101]
    assert e("resnet101/images", p101) == e("resnet101/stem/conv1/Conv2D", p101) == 0
    assert e("resnet101/stage_2/block_1/conv1/Conv2D", p101) == 1
    assert e("gradients/resnet101/stage_4/block_23/conv3/Conv2D_grad/Conv2DBackpropInput", p101) == 1 + 3 + 4 + 22
    assert e("train_step/update_resnet101/stage_5/block_3/conv3/weights/ResourceApplyMomentum", p101) == 33
    assert e("resnet101/head/logits/MatMul", p101) == e("train_step", p101) == 34
    with pytest.raises(ValueError, match="stage_4/block_24"):
        e("resnet101/stage_4/block_24/conv1/Conv2D", p101)


def test_resnet_model_rule_names():
    r = resnet.model_rule
    assert r("resnet200/stage_3/block_17/preact/BatchNorm/FusedBatchNormV3") == "resnet200/stage_3/block_17"
    assert r("gradients_2/resnet101/stage_4/block_23/add/add_grad/Sum") == "resnet101/stage_4/block_23"
    assert r("train_step/update_resnet50/stem/conv1/weights/ResourceApplyMomentum") == "resnet50/stem"
    assert r("resnet50/head/logits/MatMul") == "resnet50/head"
    assert r("resnet50/labels") is None
    assert r("train_step/momentum") is None


def test_resnet_config_checks():
    with pytest.raises(ValidationError, match="depth"):
        resnet.ResNetConfig(depth=34)
    with pytest.raises(ValidationError, match="blocks_per_stage"):
        resnet.ResNetConfig(blocks_per_stage=(3, 0, 6, 3))
    with pytest.raises(ValidationError, match="version"):
        resnet.ResNetConfig(version="v3")
    assert resnet.ResNetConfig(depth=101).blocks == (3, 4, 23, 3)
    assert resnet.ResNetConfig(depth=200).scope == "resnet200"


def test_resnet_flop_rules_reported(r50, r200):
    for _, _, graph, _ in (r50, r200):
        missing = unknown_flop_types([op.type for op in graph.ops])
        print(graph.name, "op types without a FLOPs rule:", missing)
        assert set(missing) <= KNOWN_MISSING_FLOP_RULES


def test_resnet50_small_step_runs(r50):
    graph_def, fetches, _, _ = r50
    rng = np.random.default_rng(0)
    feeds = {
        "resnet50/images": rng.standard_normal((2, 64, 64, 3)).astype(np.float32),
        "resnet50/labels": np.array([1, 99], dtype=np.int32),
    }
    watch = ["resnet50/stage_3/block_2/conv2/weights", "resnet50/stage_3/block_2/conv2/BatchNorm/moving_variance"]
    loss, vals = _run_one_step(graph_def, fetches, feeds, watch)
    assert np.isfinite(loss) and loss > 0
    for w, (before, after) in vals.items():
        assert not np.allclose(before, after), w
