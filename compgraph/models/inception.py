"""Inception-V3 benchmark: one full training step, built by hand in TF1 graph mode.

Mirhoseini et al. 2017, Sec. 4.1: Inception-V3 (Szegedy et al. 2016, "Rethinking the
Inception architecture") on 299x299x3 images, batch 32, trained with RMSProp (learning
rate 0.045, decay 0.9, momentum 0.9, epsilon 1.0: the paper's Sec. 4.3 rate and TF-slim's
``train_image_classifier`` RMSProp settings). The architecture follows TF-slim's
``inception_v3`` (= ``tf_keras.applications.inception_v3``):

* ``inception_v3/stem/``: ``Conv2d_1a_3x3`` (stride 2, VALID), ``Conv2d_2a_3x3`` (VALID),
  ``Conv2d_2b_3x3``, ``MaxPool_3a_3x3`` (stride 2), ``Conv2d_3b_1x1``, ``Conv2d_4a_3x3``
  (VALID), ``MaxPool_5a_3x3`` (stride 2).
* eleven inception blocks ``inception_v3/Mixed_5b`` .. ``Mixed_7c``, each with 3 or 4
  branches ``Branch_k`` (convolutions, or a pool then a convolution), joined by
  ``inception_v3/Mixed_X/concat``. Layer names are TF-slim's, so an op reads e.g.
  ``inception_v3/Mixed_6b/Branch_1/Conv2d_0c_7x1/BatchNorm/FusedBatchNormV3``.
* ``inception_v3/AuxLogits/`` (included when ``aux_logits``; TF-slim trains with it, its
  loss weighted 0.4): from ``Mixed_6e``, 5x5/3 average pool, 1x1 conv, 5x5 conv, 1x1
  logits conv; kernels shrink to the feature map's size on small inputs, as TF-slim's
  ``_reduced_kernel_size_for_small_input``.
* ``inception_v3/logits/``: global average pool (``AvgPool_1a_8x8``), dropout (keep 0.8),
  1x1 logits conv, softmax cross-entropy losses, the weight-decay sum and the total loss.

Every convolution but the logits is followed by batch norm in training mode (batch
statistics; ``FusedBatchNormV3``, no ``gamma`` as in TF-slim) and ReLU. The moving-average
updates of the batch-norm statistics are plain ``AssignSubVariableOp`` ops joined to the
train op by control edges (no conditionals). Gradient ops appear under
``gradients/<forward scope>/`` and are colocated with their forward op.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, model_validator

from compgraph.models.cnn import LayerBuilder, finish_training_step
from compgraph.tf_env import import_tensorflow

SCOPE = "inception_v3"
#: The stem's layers in order (TF-slim's names).
STEM_LAYERS = (
    "Conv2d_1a_3x3",
    "Conv2d_2a_3x3",
    "Conv2d_2b_3x3",
    "MaxPool_3a_3x3",
    "Conv2d_3b_1x1",
    "Conv2d_4a_3x3",
    "MaxPool_5a_3x3",
)
#: The inception blocks in order.
BLOCKS = (
    "Mixed_5b", "Mixed_5c", "Mixed_5d",
    "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e",
    "Mixed_7a", "Mixed_7b", "Mixed_7c",
)  # fmt: skip
#: Branches per block (Mixed_6a and Mixed_7a have three: two conv towers and a max pool).
BRANCHES = {b: (3 if b in ("Mixed_6a", "Mixed_7a") else 4) for b in BLOCKS}
#: The smallest input side (pixels) that leaves every block a spatial size >= 1.
MIN_IMAGE_SIZE = 75

#: The expert placement's layers (2017 Sec. 4.2): each stem convolution (a stem max pool
#: goes with the convolution before it), each inception block, then the head.
_STEM_EXPERT_LAYER = {
    "Conv2d_1a_3x3": 0,
    "Conv2d_2a_3x3": 1,
    "Conv2d_2b_3x3": 2,
    "MaxPool_3a_3x3": 2,
    "Conv2d_3b_1x1": 3,
    "Conv2d_4a_3x3": 4,
    "MaxPool_5a_3x3": 4,
}
_NUM_STEM_EXPERT_LAYERS = 5
NUM_EXPERT_LAYERS = _NUM_STEM_EXPERT_LAYERS + len(BLOCKS) + 1
#: The expert maps layers to GPUs as contiguous chunks (``layer * num_gpus // num_layers``):
#: 2017 Sec. 4.2, "we heuristically partition the model into contiguous parts that have
#: roughly the same number of layers".
EXPERT_CONTIGUOUS = True


def _valid(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


def _spatial_sizes(image_size: int) -> dict[str, int]:
    """Feature-map side (pixels) after the stem, Mixed_6a and Mixed_7a for a square input."""
    s = _valid(image_size, 3, 2)  # Conv2d_1a_3x3
    s = _valid(s, 3, 1)  # Conv2d_2a_3x3
    s = _valid(s, 3, 2)  # MaxPool_3a_3x3
    s = _valid(s, 3, 1)  # Conv2d_4a_3x3
    stem = _valid(s, 3, 2)  # MaxPool_5a_3x3
    m6 = _valid(stem, 3, 2)  # Mixed_6a
    m7 = _valid(m6, 3, 2)  # Mixed_7a
    return {"stem": stem, "Mixed_6": m6, "Mixed_7": m7}


class InceptionV3Config(BaseModel):
    """Sizes and training settings of the Inception-V3 training step.

    Units: ``batch_size`` images; ``image_size`` pixels (square RGB input);
    ``depth_multiplier`` scales every layer's channel count (TF-slim's, at least 1 channel);
    rates and coefficients are dimensionless.

    Raises:
        pydantic.ValidationError: a field out of range, or ``image_size`` below
            [`MIN_IMAGE_SIZE`][compgraph.models.inception.MIN_IMAGE_SIZE] (a block would have no spatial extent).
    """

    batch_size: int = Field(32, ge=1)
    image_size: int = Field(299, ge=MIN_IMAGE_SIZE)
    num_classes: int = Field(1000, ge=2)
    depth_multiplier: float = Field(1.0, gt=0)
    aux_logits: bool = True
    aux_loss_weight: float = Field(0.4, ge=0)
    dropout_keep_prob: float = Field(0.8, gt=0, le=1)
    weight_decay: float = Field(4e-5, ge=0)
    batch_norm_decay: float = Field(0.9997, ge=0, lt=1)
    batch_norm_epsilon: float = Field(0.001, gt=0)
    moving_average_updates: bool = True
    learning_rate: float = Field(0.045, gt=0)
    rmsprop_decay: float = Field(0.9, ge=0, lt=1)
    momentum: float = Field(0.9, ge=0, lt=1)
    rmsprop_epsilon: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _check_spatial(self):
        sizes = _spatial_sizes(self.image_size)
        if sizes["Mixed_7"] < 1:
            raise ValueError(
                f"image_size {self.image_size}: Mixed_7a would have no spatial extent (min {MIN_IMAGE_SIZE})"
            )
        return self


#: The 2017 paper's Inception-V3 (Sec. 4.1): batch 32, 299x299x3, 1000 classes, RMSProp.
PAPER = InceptionV3Config()
#: EAGLE's Inception-V3 (Lan et al. 2021, Sec. IV-A: "The batch size of the model is set to 1").
EAGLE = InceptionV3Config(batch_size=1)
#: Same blocks, branches and scopes at batch 2, 75x75 input and 1/8 of the channels.
SMALL = InceptionV3Config(batch_size=2, image_size=75, num_classes=100, depth_multiplier=0.125)


def _inception_block(L: LayerBuilder, tf, v1, x, block: str, depth):
    """One inception block (TF-slim's ``inception_v3_base``), in variable scope ``block``."""
    conv = L.conv
    branches = []
    with v1.variable_scope(block):
        if block in ("Mixed_5b", "Mixed_5c", "Mixed_5d"):
            pool_depth = 32 if block == "Mixed_5b" else 64
            with v1.variable_scope("Branch_0"):
                branches.append(conv(x, depth(64), (1, 1), "Conv2d_0a_1x1"))
            with v1.variable_scope("Branch_1"):
                if block == "Mixed_5c":  # TF-slim's names for Mixed_5c's 5x5 tower
                    b = conv(x, depth(48), (1, 1), "Conv2d_0b_1x1")
                    b = conv(b, depth(64), (5, 5), "Conv_1_0c_5x5")
                else:
                    b = conv(x, depth(48), (1, 1), "Conv2d_0a_1x1")
                    b = conv(b, depth(64), (5, 5), "Conv2d_0b_5x5")
                branches.append(b)
            with v1.variable_scope("Branch_2"):
                b = conv(x, depth(64), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(96), (3, 3), "Conv2d_0b_3x3")
                branches.append(conv(b, depth(96), (3, 3), "Conv2d_0c_3x3"))
            with v1.variable_scope("Branch_3"):
                b = L.avg_pool(x, 3, 1, "SAME", "AvgPool_0a_3x3")
                branches.append(conv(b, depth(pool_depth), (1, 1), "Conv2d_0b_1x1"))
        elif block == "Mixed_6a":
            with v1.variable_scope("Branch_0"):
                branches.append(conv(x, depth(384), (3, 3), "Conv2d_1a_1x1", stride=2, padding="VALID"))
            with v1.variable_scope("Branch_1"):
                b = conv(x, depth(64), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(96), (3, 3), "Conv2d_0b_3x3")
                branches.append(conv(b, depth(96), (3, 3), "Conv2d_1a_1x1", stride=2, padding="VALID"))
            with v1.variable_scope("Branch_2"):
                branches.append(L.max_pool(x, 3, 2, "VALID", "MaxPool_1a_3x3"))
        elif block in ("Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"):
            mid = {"Mixed_6b": 128, "Mixed_6c": 160, "Mixed_6d": 160, "Mixed_6e": 192}[block]
            with v1.variable_scope("Branch_0"):
                branches.append(conv(x, depth(192), (1, 1), "Conv2d_0a_1x1"))
            with v1.variable_scope("Branch_1"):
                b = conv(x, depth(mid), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(mid), (1, 7), "Conv2d_0b_1x7")
                branches.append(conv(b, depth(192), (7, 1), "Conv2d_0c_7x1"))
            with v1.variable_scope("Branch_2"):
                b = conv(x, depth(mid), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(mid), (7, 1), "Conv2d_0b_7x1")
                b = conv(b, depth(mid), (1, 7), "Conv2d_0c_1x7")
                b = conv(b, depth(mid), (7, 1), "Conv2d_0d_7x1")
                branches.append(conv(b, depth(192), (1, 7), "Conv2d_0e_1x7"))
            with v1.variable_scope("Branch_3"):
                b = L.avg_pool(x, 3, 1, "SAME", "AvgPool_0a_3x3")
                branches.append(conv(b, depth(192), (1, 1), "Conv2d_0b_1x1"))
        elif block == "Mixed_7a":
            with v1.variable_scope("Branch_0"):
                b = conv(x, depth(192), (1, 1), "Conv2d_0a_1x1")
                branches.append(conv(b, depth(320), (3, 3), "Conv2d_1a_3x3", stride=2, padding="VALID"))
            with v1.variable_scope("Branch_1"):
                b = conv(x, depth(192), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(192), (1, 7), "Conv2d_0b_1x7")
                b = conv(b, depth(192), (7, 1), "Conv2d_0c_7x1")
                branches.append(conv(b, depth(192), (3, 3), "Conv2d_1a_3x3", stride=2, padding="VALID"))
            with v1.variable_scope("Branch_2"):
                branches.append(L.max_pool(x, 3, 2, "VALID", "MaxPool_1a_3x3"))
        else:  # Mixed_7b, Mixed_7c
            with v1.variable_scope("Branch_0"):
                branches.append(conv(x, depth(320), (1, 1), "Conv2d_0a_1x1"))
            with v1.variable_scope("Branch_1"):
                b = conv(x, depth(384), (1, 1), "Conv2d_0a_1x1")
                second = "Conv2d_0b_3x1" if block == "Mixed_7b" else "Conv2d_0c_3x1"
                b = tf.concat(
                    [conv(b, depth(384), (1, 3), "Conv2d_0b_1x3"), conv(b, depth(384), (3, 1), second)],
                    3,
                    name="concat",
                )
                branches.append(b)
            with v1.variable_scope("Branch_2"):
                b = conv(x, depth(448), (1, 1), "Conv2d_0a_1x1")
                b = conv(b, depth(384), (3, 3), "Conv2d_0b_3x3")
                b = tf.concat(
                    [conv(b, depth(384), (1, 3), "Conv2d_0c_1x3"), conv(b, depth(384), (3, 1), "Conv2d_0d_3x1")],
                    3,
                    name="concat",
                )
                branches.append(b)
            with v1.variable_scope("Branch_3"):
                b = L.avg_pool(x, 3, 1, "SAME", "AvgPool_0a_3x3")
                branches.append(conv(b, depth(192), (1, 1), "Conv2d_0b_1x1"))
        return tf.concat(branches, 3, name="concat")


def build_training_graph(config: InceptionV3Config):
    """Build the Inception-V3 training step in a new TF1-style graph.

    Inputs: float32 placeholder ``inception_v3/images`` ``[batch, image_size, image_size, 3]``
    and int32 placeholder ``inception_v3/labels`` ``[batch]`` (class ids in
    ``[0, num_classes)``).

    Returns:
        ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every node (no
        function library, no control flow), and ``[train op name, loss op name]``.
    """
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config

    def depth(d: int) -> int:
        return max(1, int(d * c.depth_multiplier))

    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        L = LayerBuilder(tf, c.weight_decay, c.batch_norm_decay, c.batch_norm_epsilon, c.moving_average_updates)
        with v1.variable_scope(SCOPE):
            images = v1.placeholder(tf.float32, [c.batch_size, c.image_size, c.image_size, 3], name="images")
            labels = v1.placeholder(tf.int32, [c.batch_size], name="labels")
            with v1.variable_scope("stem"):
                x = L.conv(images, depth(32), (3, 3), "Conv2d_1a_3x3", stride=2, padding="VALID")
                x = L.conv(x, depth(32), (3, 3), "Conv2d_2a_3x3", padding="VALID")
                x = L.conv(x, depth(64), (3, 3), "Conv2d_2b_3x3")
                x = L.max_pool(x, 3, 2, "VALID", "MaxPool_3a_3x3")
                x = L.conv(x, depth(80), (1, 1), "Conv2d_3b_1x1", padding="VALID")
                x = L.conv(x, depth(192), (3, 3), "Conv2d_4a_3x3", padding="VALID")
                x = L.max_pool(x, 3, 2, "VALID", "MaxPool_5a_3x3")
            aux_input = None
            for block in BLOCKS:
                x = _inception_block(L, tf, v1, x, block, depth)
                if block == "Mixed_6e":
                    aux_input = x
            losses = []
            aux_loss = None
            if c.aux_logits:
                with v1.variable_scope("AuxLogits"):
                    assert aux_input is not None, "the auxiliary head reads Mixed_6e's output"
                    side = int(aux_input.shape[1])
                    k = min(5, side)
                    a = L.avg_pool(aux_input, k, 3, "VALID", "AvgPool_1a_5x5")
                    a = L.conv(a, depth(128), (1, 1), "Conv2d_1b_1x1")
                    k2 = min(5, int(a.shape[1]))
                    a = L.conv(a, depth(768), (k2, k2), "Conv2d_2a_5x5", padding="VALID", stddev=0.01)
                    a = L.conv(a, c.num_classes, (1, 1), "Conv2d_2b_1x1", bn=False, relu=False, bias=True, stddev=0.001)
                    aux = tf.squeeze(a, [1, 2], name="SpatialSqueeze")
                    aux_loss = tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=aux), name="aux_loss"
                    )
            with v1.variable_scope("logits"):
                side = int(x.shape[1])
                x = L.avg_pool(x, (side, side), 1, "VALID", "AvgPool_1a_8x8")
                if c.dropout_keep_prob < 1:
                    x = tf.nn.dropout(x, rate=1.0 - c.dropout_keep_prob, name="Dropout_1b")
                x = L.conv(x, c.num_classes, (1, 1), "Conv2d_1c_1x1", bn=False, relu=False, bias=True, stddev=0.001)
                logits = tf.squeeze(x, [1, 2], name="SpatialSqueeze")
                with tf.name_scope("loss"):
                    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                    losses.append(tf.reduce_mean(xent, name="logits_loss"))
                    if aux_loss is not None:
                        losses.append(tf.multiply(c.aux_loss_weight, aux_loss, name="weighted_aux_loss"))
                    if L.decay_terms:
                        losses.append(tf.math.add_n(L.decay_terms, name="weight_decay"))
                    if len(losses) > 1:
                        loss = tf.math.add_n(losses, name="total_loss")
                    else:
                        loss = tf.identity(losses[0], name="total_loss")
        optimizer = v1.train.RMSPropOptimizer(
            c.learning_rate, decay=c.rmsprop_decay, momentum=c.momentum, epsilon=c.rmsprop_epsilon
        )
        train_op, loss = finish_training_step(tf, optimizer, loss)
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_PREFIX = r"^(?:gradients(?:_\d+)?/|train_step/update_)?"
_KEY = re.compile(
    _PREFIX + r"(inception_v3/(?:stem/[^/]+|Mixed_\d[a-e]/(?:Branch_\d|concat)|logits|AuxLogits))(?:_grad)?(?:/|$)"
)


def model_rule(op_name: str) -> str | None:
    """2017 Sec. 4.1 co-location key of an Inception-V3 op ("we treat each branch as a group").

    Forward ops, their gradients (``gradients/`` or ``gradients_N/`` prefix) and their
    variables' optimizer updates (``train_step/update_`` prefix) map to:

    * ``inception_v3/Mixed_X/Branch_k``: each branch of each inception block;
    * ``inception_v3/Mixed_X/concat``: the block's join (the concat of its branches);
    * ``inception_v3/stem/<layer>``: each stem convolution and stem max pool;
    * ``inception_v3/AuxLogits`` and ``inception_v3/logits``: the heads (with the losses).

    Other ops (inputs, optimizer bookkeeping) -> ``None``.
    """
    m = _KEY.match(op_name)
    return m.group(1) if m else None


_EXPERT = re.compile(r"inception_v3/(?:stem/([^/]+)|(Mixed_\d[a-e])|(AuxLogits|logits))(?:/|$)")


def num_layers(config: InceptionV3Config | None = None) -> int:
    """Number of expert layers: 5 stem convolutions + 11 inception blocks + the head = 17."""
    return NUM_EXPERT_LAYERS


def expert_layer(op_name: str, config: InceptionV3Config | None = None) -> int:
    """Expert layer (2017 Sec. 4.2, contiguous parts) of an op, in ``[0, num_layers())``.

    Layers in order: the 5 stem convolutions (0..4; a stem max pool with the convolution
    before it, the input images with the first), the blocks ``Mixed_5b`` .. ``Mixed_7c``
    (5..15), the head (16). ``AuxLogits`` goes with ``Mixed_6e``, the block it hangs off;
    gradients and optimizer updates follow their forward op or variable (searched in the
    name); every other op (labels, optimizer bookkeeping, the train op) with the head.
    With [`EXPERT_CONTIGUOUS`][compgraph.models.inception.EXPERT_CONTIGUOUS] the baseline maps layer ``l`` to GPU
    ``l * num_gpus // num_layers``.
    """
    m = _EXPERT.search(op_name)
    if m:
        stem, block, head = m.groups()
        if stem is not None:
            return _STEM_EXPERT_LAYER.get(stem, 0)
        if block is not None:
            return _NUM_STEM_EXPERT_LAYERS + BLOCKS.index(block)
        if head == "AuxLogits":
            return _NUM_STEM_EXPERT_LAYERS + BLOCKS.index("Mixed_6e")
        return NUM_EXPERT_LAYERS - 1
    if op_name == f"{SCOPE}/images":
        return 0
    return NUM_EXPERT_LAYERS - 1
