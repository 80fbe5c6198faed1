"""ResNet-50/101/200 benchmarks: one full training step, built by hand in TF1 graph mode.

Gao et al. 2018 (Post), Sec. 4 and Table 1: ResNet-50, -101 and -200 on ImageNet
(224x224x3, 1000 classes), batch 32; Post cites He et al. 2016 and TF-slim's model
library. Bottleneck residual blocks (1x1, 3x3, 1x1 convolutions, widths
``64·2^k, 64·2^k, 256·2^k`` in stage ``k+2``) stacked ``[3, 4, 6, 3]`` (50),
``[3, 4, 23, 3]`` (101) and ``[3, 24, 36, 3]`` (200).

Variant: ResNet-50 and -101 are the original post-activation ResNet ("v1", He et al.,
CVPR 2016, the paper Post cites); ResNet-200 is the pre-activation ResNet ("v2", He et al.,
"Identity mappings in deep residual networks", ECCV 2016), which is where a 200-layer
ImageNet ResNet comes from (the CVPR paper stops at 152 layers; its v1 form trains worse
at that depth). [`ResNetConfig`][compgraph.models.resnet.ResNetConfig] takes either variant for any depth.

* ``resnet<D>/stem/``: ``conv1`` 7x7/2 (64 channels; v1 adds batch norm + ReLU, v2 has a
  bias and no normalization, as TF-slim's ``resnet_v2``), ``pool1`` 3x3/2 max pool.
* ``resnet<D>/stage_S/block_B/`` (``S`` = 2..5 as He et al.'s conv2_x..conv5_x, ``B`` from
  1): ``conv1`` (1x1), ``conv2`` (3x3, stride 2 in the first block of stages 3..5, the
  TF-slim/torchvision position), ``conv3`` (1x1, 4x wider), ``shortcut`` (a 1x1 projection
  with the block's stride where the width or size changes: the first block of each
  stage, He et al.'s option B), ``add``; v2 adds ``preact`` (batch norm + ReLU before the
  block, shared by the residual and the projection).
* ``resnet<D>/head/``: (v2: ``postnorm`` batch norm + ReLU,) global average pool,
  ``logits`` (dense), softmax cross-entropy loss, weight-decay sum and total loss.

Batch norm runs in training mode (batch statistics, ``FusedBatchNormV3``, learned
``gamma`` and ``beta``), with the moving-average updates as plain assign ops (no
conditionals). Optimizer: SGD with momentum 0.9 (He et al. 2016, Sec. 3.4: learning rate
0.1, weight decay 1e-4); Post does not name one (TF-slim's ``train_image_classifier``
defaults to RMSProp).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from compgraph.models.cnn import LayerBuilder, finish_training_step
from compgraph.tf_env import import_tensorflow

#: Bottleneck blocks per stage (stages 2..5) of each depth (He et al. 2016, Table 1;
#: He et al. ECCV 2016 for 200).
BLOCKS_PER_STAGE: dict[int, tuple[int, int, int, int]] = {
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    200: (3, 24, 36, 3),
}
#: The expert maps layers (stem, each block, head) to GPUs as contiguous chunks
#: (``layer * num_gpus // num_layers``, 2017 Sec. 4.2 for CNNs).
EXPERT_CONTIGUOUS = True


class ResNetConfig(BaseModel):
    """Sizes and training settings of a ResNet training step.

    Units: ``batch_size`` images; ``image_size`` pixels (square RGB input);
    ``width_multiplier`` scales every layer's channel count (at least 1 channel); rates and
    coefficients are dimensionless. ``depth`` names the model (``resnet<depth>``) and picks
    [`BLOCKS_PER_STAGE`][compgraph.models.resnet.BLOCKS_PER_STAGE] unless ``blocks_per_stage`` overrides it (for small test
    graphs; the scope name keeps ``depth``).

    Raises:
        pydantic.ValidationError: a field out of range, a depth other than 50/101/200, or
            ``blocks_per_stage`` not four positive counts.
    """

    depth: Literal[50, 101, 200] = 50
    version: Literal["v1", "v2"] = "v1"
    blocks_per_stage: tuple[int, int, int, int] | None = None
    batch_size: int = Field(32, ge=1)
    image_size: int = Field(224, ge=1)
    num_classes: int = Field(1000, ge=2)
    width_multiplier: float = Field(1.0, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    batch_norm_decay: float = Field(0.997, ge=0, lt=1)
    batch_norm_epsilon: float = Field(1e-5, gt=0)
    moving_average_updates: bool = True
    learning_rate: float = Field(0.1, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)

    @field_validator("blocks_per_stage")
    @classmethod
    def _positive_blocks(cls, v):
        if v is not None and any(n < 1 for n in v):
            raise ValueError(f"blocks_per_stage {v}: every stage needs at least 1 block")
        return v

    @property
    def blocks(self) -> tuple[int, int, int, int]:
        """Blocks per stage 2..5 actually built."""
        return self.blocks_per_stage or BLOCKS_PER_STAGE[self.depth]

    @property
    def scope(self) -> str:
        """The model's top name scope, ``resnet<depth>``."""
        return f"resnet{self.depth}"


#: Post's sizes (Table 1): batch 32, 224x224x3, 1000 classes; v1 for 50/101, v2 for 200.
PAPER: dict[int, ResNetConfig] = {
    50: ResNetConfig(depth=50, version="v1"),
    101: ResNetConfig(depth=101, version="v1"),
    200: ResNetConfig(depth=200, version="v2"),
}
_SMALL_SIZES = {"batch_size": 2, "image_size": 64, "num_classes": 100, "width_multiplier": 0.125}
#: Same scopes and variant at batch 2, 64x64 input and 1/8 of the channels. ResNet-50 and
#: -101 keep every block (about 3.1k and 5.9k ops in the step); ResNet-200 keeps its four
#: stages but (3, 8, 12, 3) blocks (about 4.9k ops instead of 12k).
SMALL: dict[int, ResNetConfig] = {
    50: ResNetConfig(**{**PAPER[50].model_dump(), **_SMALL_SIZES}),
    101: ResNetConfig(**{**PAPER[101].model_dump(), **_SMALL_SIZES}),
    200: ResNetConfig(**{**PAPER[200].model_dump(), **_SMALL_SIZES, "blocks_per_stage": (3, 8, 12, 3)}),
}


def _bottleneck(L: LayerBuilder, tf, v1, x, width: int, stride: int, project: bool, version: str):
    """One bottleneck block in the current variable scope; returns ``[b, h/stride, w/stride, 4*width]``."""
    out = 4 * width
    if version == "v1":
        shortcut = x
        if project:
            shortcut = L.conv(x, out, (1, 1), "shortcut", stride=stride, bn_scale=True, relu=False)
        r = L.conv(x, width, (1, 1), "conv1", bn_scale=True)
        r = L.conv(r, width, (3, 3), "conv2", stride=stride, bn_scale=True)
        r = L.conv(r, out, (1, 1), "conv3", bn_scale=True, relu=False)
        with tf.name_scope("add"):
            return tf.nn.relu(shortcut + r)
    with v1.variable_scope("preact"):
        pre = tf.nn.relu(L.batch_norm(x, scale=True))
    shortcut = x
    if project:
        shortcut = L.conv(pre, out, (1, 1), "shortcut", stride=stride, bn=False, relu=False, bias=True)
    r = L.conv(pre, width, (1, 1), "conv1", bn_scale=True)
    r = L.conv(r, width, (3, 3), "conv2", stride=stride, bn_scale=True)
    r = L.conv(r, out, (1, 1), "conv3", bn=False, relu=False, bias=True)
    with tf.name_scope("add"):
        return shortcut + r


def build_training_graph(config: ResNetConfig):
    """Build the ResNet training step (depth and variant from ``config``) in a new TF1-style graph.

    Inputs: float32 placeholder ``resnet<D>/images`` ``[batch, image_size, image_size, 3]``
    and int32 placeholder ``resnet<D>/labels`` ``[batch]`` (class ids in ``[0, num_classes)``).

    Returns:
        ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every node (no
        function library, no control flow), and ``[train op name, loss op name]``.
    """
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config

    def width(d: int) -> int:
        return max(1, int(d * c.width_multiplier))

    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        L = LayerBuilder(tf, c.weight_decay, c.batch_norm_decay, c.batch_norm_epsilon, c.moving_average_updates)
        v2 = c.version == "v2"
        with v1.variable_scope(c.scope):
            images = v1.placeholder(tf.float32, [c.batch_size, c.image_size, c.image_size, 3], name="images")
            labels = v1.placeholder(tf.int32, [c.batch_size], name="labels")
            with v1.variable_scope("stem"):
                x = L.conv(images, width(64), (7, 7), "conv1", stride=2, bn=not v2, bn_scale=True, relu=not v2, bias=v2)
                x = L.max_pool(x, 3, 2, "SAME", "pool1")
            for s, n_blocks in enumerate(c.blocks):
                stage = s + 2
                for b in range(n_blocks):
                    stride = 2 if (b == 0 and stage > 2) else 1
                    with v1.variable_scope(f"stage_{stage}/block_{b + 1}"):
                        x = _bottleneck(L, tf, v1, x, width(64 * 2**s), stride, b == 0, c.version)
            with v1.variable_scope("head"):
                if v2:
                    with v1.variable_scope("postnorm"):
                        x = tf.nn.relu(L.batch_norm(x, scale=True))
                x = tf.reduce_mean(x, [1, 2], name="global_pool")
                logits = L.dense(x, c.num_classes, "logits")
                with tf.name_scope("loss"):
                    loss = tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="xent_loss"
                    )
                    if L.decay_terms:
                        loss = tf.add(loss, tf.math.add_n(L.decay_terms, name="weight_decay"), name="total_loss")
        optimizer = v1.train.MomentumOptimizer(c.learning_rate, c.momentum)
        train_op, loss = finish_training_step(tf, optimizer, loss)
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_PREFIX = r"^(?:gradients(?:_\d+)?/|train_step/update_)?"
_KEY = re.compile(_PREFIX + r"(resnet\d+/(?:stem|head|stage_\d+/block_\d+))(?:/|$)")
_EXPERT = re.compile(r"resnet\d+/(?:(stem)|(head)|stage_(\d+)/block_(\d+))(?:/|$)")


def model_rule(op_name: str) -> str | None:
    """Co-location key of a ResNet op (2017 Sec. 3.3/4.1 per-model rule: each residual block).

    Forward ops, their gradients (``gradients/`` or ``gradients_N/`` prefix) and their
    variables' optimizer updates (``train_step/update_`` prefix) map to
    ``resnet<D>/stage_S/block_B`` (each residual block), ``resnet<D>/stem`` or
    ``resnet<D>/head``; other ops (inputs, optimizer bookkeeping) -> ``None``. Works for
    every depth.
    """
    m = _KEY.match(op_name)
    return m.group(1) if m else None


def num_layers(config: ResNetConfig) -> int:
    """Number of expert layers: the stem, every residual block, the head (``sum(blocks) + 2``)."""
    return sum(config.blocks) + 2


def expert_layer(op_name: str, config: ResNetConfig) -> int:
    """Expert layer (contiguous chunks, 2017 Sec. 4.2 for CNNs) of an op, in ``[0, num_layers(config))``.

    Layer 0 is the stem (and the input images), layers ``1 .. sum(blocks)`` the residual
    blocks in order (stage 2 block 1 first), the last the head. Gradients and optimizer
    updates follow their forward op or variable (searched in the name); every other op
    (labels, optimizer bookkeeping, the train op) goes with the head.

    Raises:
        ValueError: the name holds a stage or block that ``config`` does not have.
    """
    last = num_layers(config) - 1
    m = _EXPERT.search(op_name)
    if m is None:
        return 0 if op_name == f"{config.scope}/images" else last
    stem, head, stage, block = m.groups()
    if stem:
        return 0
    if head:
        return last
    s, b = int(stage) - 2, int(block)
    if not (0 <= s < 4 and 1 <= b <= config.blocks[s]):
        raise ValueError(f"op {op_name!r}: stage_{stage}/block_{block} is not in {config.scope} {config.blocks}")
    return 1 + sum(config.blocks[:s]) + (b - 1)
