"""BERT benchmark: BERT-Base fine-tuned for SQuAD-style span prediction, one training step.

EAGLE (Lan, Chen, Li, IPDPS 2021) Sec. IV-A places "a smaller version of BERT model,
BERT-Base, with a max sequence length of 384 and a batch size of 24", taken from Google's
implementation (github.com/google-research/bert). BERT-Base (Devlin et al., NAACL 2019,
Sec. 3): 12 transformer layers, hidden size 768, 12 attention heads, feed-forward size
3072 (4 x hidden), GELU activations, token + position + segment embeddings summed and
layer-normalised, a 30,522-token WordPiece vocabulary (the vocabulary size is given
neither in EAGLE nor numerically in Devlin et al. -- "30,000 token vocabulary" -- 30,522
is the size of Google's released ``uncased_L-12_H-768_A-12`` ``vocab.txt``), at most 512
positions. Sequence length 384 is the one BERT's SQuAD fine-tuning uses, so the task head
here is SQuAD's: start and end logits over the sequence, each with a softmax
cross-entropy over the positions, the loss their mean (Devlin et al. Sec. 4.2).

Simplifications, stated once:

* **no dropout** (BERT uses 0.1 on attention probabilities and sub-layer outputs); the
  graph is then deterministic and has no random ops in the step;
* **Adam** (``tf.compat.v1.train.AdamOptimizer``, learning rate 3e-5, epsilon 1e-6)
  instead of BERT's AdamW with weight decay 0.01 and a warm-up/decay schedule;
* GELU is the tanh approximation of Google's ``modeling.py``, with ``x*x*x`` instead of
  ``tf.pow`` (the same values, fewer gradient ops);
* layer normalisation is written out with ``tf.nn.moments`` (epsilon 1e-12, as BERT).

The graph is built by hand in TF1 graph mode with Google's scope names, so every op says
which layer and sub-layer it belongs to:

* ``bert/embeddings``: word lookup (``GatherV2``), segment embedding (one-hot matmul),
  position embedding (slice of the 512-row table), sum, LayerNorm, and the additive
  attention mask built from ``input_mask`` (``bert/embeddings/attention_mask``);
* ``bert/encoder/layer_L/attention/self``: query/key/value projections on
  ``[batch*seq, hidden]``, reshape + transpose to ``[batch, heads, seq, head_size]``,
  batched-matmul scores, scale, mask, softmax, batched-matmul context;
* ``bert/encoder/layer_L/attention/output``: projection, residual, LayerNorm;
* ``bert/encoder/layer_L/intermediate``: dense to ``intermediate_size`` + GELU;
* ``bert/encoder/layer_L/output``: dense back to ``hidden``, residual, LayerNorm;
* ``bert/head``: span logits ``[batch*seq, 2]`` -> start/end logits ``[batch, seq]``;
* ``bert/loss``: the two sparse softmax cross-entropies and their mean.

Gradient ops carry the forward scope under ``gradients/`` and are colocated with their
forward op (``colocate_gradients_with_ops=True``); the Adam update of each variable sits
under ``train_step/update_<variable>``, joined to the variable by its resource input.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, Field, model_validator

from compgraph.tf_env import import_tensorflow


class BertConfig(BaseModel):
    """Sizes of the BERT training step.

    Units: counts (layers, heads, tokens, sequences, vocabulary entries); hidden,
    intermediate and embedding sizes are vector widths; ``learning_rate`` and ``adam_epsilon``
    are dimensionless.

    Raises:
        pydantic.ValidationError (a ``ValueError``): a size below its minimum, ``hidden_size``
            not a multiple of ``num_attention_heads``, or ``seq_length`` above
            ``max_position_embeddings``; the message names the field and value.
    """

    num_hidden_layers: int = Field(12, ge=1)
    hidden_size: int = Field(768, ge=1)
    num_attention_heads: int = Field(12, ge=1)
    intermediate_size: int = Field(3072, ge=1)
    seq_length: int = Field(384, ge=1)
    batch_size: int = Field(24, ge=1)
    vocab_size: int = Field(30522, ge=2)
    type_vocab_size: int = Field(2, ge=1)
    max_position_embeddings: int = Field(512, ge=1)
    initializer_range: float = Field(0.02, gt=0)
    learning_rate: float = Field(3e-5, gt=0)
    adam_epsilon: float = Field(1e-6, gt=0)

    @model_validator(mode="after")
    def _check_shapes(self) -> "BertConfig":
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads={self.num_attention_heads}"
            )
        if self.seq_length > self.max_position_embeddings:
            raise ValueError(
                f"seq_length={self.seq_length} exceeds max_position_embeddings={self.max_position_embeddings}"
            )
        return self


#: BERT-Base as EAGLE Sec. IV-A places it: 12 x 768, 12 heads, FFN 3072, sequence 384, batch 24.
PAPER = BertConfig()
#: A small BERT for the demo and the tests: same scopes, 2 layers x 64, 4 heads, sequence 32.
SMALL = BertConfig(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    intermediate_size=128,
    seq_length=32,
    batch_size=4,
    vocab_size=1000,
    max_position_embeddings=64,
)

#: The expert placement splits BERT's transformer layers into contiguous chunks
#: (``layer * num_gpus // num_layers``), as for CNNs: layers are a chain, not a wavefront.
EXPERT_CONTIGUOUS = True

_LN_EPSILON = 1e-12


def build_training_graph(config: BertConfig):
    """Build the BERT SQuAD fine-tuning training step in a new TF1-style graph.

    Inputs (int32 placeholders, static shapes): ``bert/input_ids``, ``bert/segment_ids``
    and ``bert/input_mask`` of shape ``[batch_size, seq_length]`` (token ids in
    ``[0, vocab_size)``, segment ids in ``[0, type_vocab_size)``, mask 1 for real tokens,
    0 for padding), ``bert/start_positions`` and ``bert/end_positions`` of shape
    ``[batch_size]`` (positions in ``[0, seq_length)``).

    Args:
        config: the sizes ([`BertConfig`][compgraph.models.bert.BertConfig]).
    Returns:
        ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every node and
        no function library, and ``[train op name, loss op name]`` (the loss is a float32
        scalar, the mean of the start and end cross-entropies, in nats).
    Raises:
        TypeError: ``config`` is not a [`BertConfig`][compgraph.models.bert.BertConfig].
    """
    if not isinstance(config, BertConfig):
        raise TypeError(f"config: expected BertConfig, got {type(config).__name__}")
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config
    B, S, H = c.batch_size, c.seq_length, c.hidden_size
    heads = c.num_attention_heads
    head_size = H // heads
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        init = v1.truncated_normal_initializer(stddev=c.initializer_range)

        def layer_norm(x):
            """LayerNorm over the last axis of ``x`` [rows, H], in the current scope ``LayerNorm``."""
            with v1.variable_scope("LayerNorm"):
                gamma = v1.get_variable("gamma", [H], initializer=v1.ones_initializer())
                beta = v1.get_variable("beta", [H], initializer=v1.zeros_initializer())
                mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
                return (x - mean) * tf.math.rsqrt(variance + _LN_EPSILON) * gamma + beta

        def dense(x, n_in, n_out, name):
            """``x`` [rows, n_in] @ kernel [n_in, n_out] + bias, in variable scope ``name``."""
            with v1.variable_scope(name):
                kernel = v1.get_variable("kernel", [n_in, n_out], initializer=init)
                bias = v1.get_variable("bias", [n_out], initializer=v1.zeros_initializer())
                return tf.nn.bias_add(tf.matmul(x, kernel), bias)

        def gelu(x):
            """GELU, tanh approximation (Google BERT ``modeling.gelu``)."""
            cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))
            return x * cdf

        with v1.variable_scope("bert", initializer=init):
            input_ids = v1.placeholder(tf.int32, [B, S], name="input_ids")
            segment_ids = v1.placeholder(tf.int32, [B, S], name="segment_ids")
            input_mask = v1.placeholder(tf.int32, [B, S], name="input_mask")
            start_positions = v1.placeholder(tf.int32, [B], name="start_positions")
            end_positions = v1.placeholder(tf.int32, [B], name="end_positions")

            with v1.variable_scope("embeddings"):
                word_table = v1.get_variable("word_embeddings", [c.vocab_size, H], initializer=init)
                type_table = v1.get_variable("token_type_embeddings", [c.type_vocab_size, H], initializer=init)
                pos_table = v1.get_variable("position_embeddings", [c.max_position_embeddings, H], initializer=init)
                words = tf.gather(word_table, tf.reshape(input_ids, [B * S]))  # [B*S, H]
                one_hot_types = tf.one_hot(tf.reshape(segment_ids, [B * S]), depth=c.type_vocab_size)
                types = tf.matmul(one_hot_types, type_table)  # [B*S, H]
                positions = tf.slice(pos_table, [0, 0], [S, H])  # [S, H]
                emb = tf.reshape(words + types, [B, S, H]) + tf.expand_dims(positions, 0)
                x = layer_norm(tf.reshape(emb, [B * S, H]))  # [B*S, H]
                with tf.name_scope("attention_mask"):
                    # [B, 1, 1, S]: 0 where attended, -10000 at padding (added to the scores).
                    mask = tf.cast(tf.reshape(input_mask, [B, 1, 1, S]), tf.float32)
                    mask_bias = (1.0 - mask) * -10000.0

            with v1.variable_scope("encoder"):
                for layer in range(c.num_hidden_layers):
                    with v1.variable_scope(f"layer_{layer}"):
                        with v1.variable_scope("attention"):
                            with v1.variable_scope("self"):

                                def split_heads(t):
                                    """[B*S, H] -> [B, heads, S, head_size]."""
                                    return tf.transpose(tf.reshape(t, [B, S, heads, head_size]), [0, 2, 1, 3])

                                q = split_heads(dense(x, H, H, "query"))
                                k = split_heads(dense(x, H, H, "key"))
                                v = split_heads(dense(x, H, H, "value"))
                                scores = tf.matmul(q, k, transpose_b=True)  # [B, heads, S, S]
                                scores = scores * (1.0 / math.sqrt(head_size)) + mask_bias
                                probs = tf.nn.softmax(scores)
                                context = tf.matmul(probs, v)  # [B, heads, S, head_size]
                                context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [B * S, H])
                            with v1.variable_scope("output"):
                                attn = layer_norm(dense(context, H, H, "dense") + x)
                        with v1.variable_scope("intermediate"):
                            inter = gelu(dense(attn, H, c.intermediate_size, "dense"))
                        with v1.variable_scope("output"):
                            x = layer_norm(dense(inter, c.intermediate_size, H, "dense") + attn)

            with v1.variable_scope("head"):
                span = dense(x, H, 2, "span")  # [B*S, 2]
                span = tf.transpose(tf.reshape(span, [B, S, 2]), [2, 0, 1])  # [2, B, S]
                start_logits, end_logits = tf.unstack(span, axis=0)
            with v1.variable_scope("loss"):
                start_loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=start_positions, logits=start_logits)
                )
                end_loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=end_positions, logits=end_logits)
                )
                loss = tf.identity((start_loss + end_loss) / 2.0, name="total_loss")
        optimizer = v1.train.AdamOptimizer(c.learning_rate, epsilon=c.adam_epsilon)
        train_op = optimizer.minimize(loss, colocate_gradients_with_ops=True, name="train_step")
        v1.global_variables_initializer()
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_KEY = re.compile(
    r"^(?:gradients(?:_\d+)?/)?bert/(?:(embeddings|head|loss)|encoder/layer_(\d+)/(attention|intermediate|output))/"
)
_GRAD_ALIAS = re.compile(r"_grad/tuple/control_dependency(?:_\d+)?$")
_LAYER = re.compile(r"(?:^|/|update_)bert/encoder/layer_(\d+)/")
_EMBEDDINGS = re.compile(r"(?:^|/|update_)bert/embeddings/")


def model_rule(op_name: str) -> str | None:
    """Co-location key of an op: each transformer sub-layer for BERT (EAGLE's BERT, 2017 Sec. 3.3 rule 3).

    Forward ops and their gradients (a leading ``gradients/`` or ``gradients_N/`` stripped)
    map to:

    * ``bert/encoder/layer_L/attention``: ``attention/self`` and ``attention/output``;
    * ``bert/encoder/layer_L/ffn``: ``intermediate`` and ``output``;
    * ``bert/embeddings``: the embeddings and the attention mask;
    * ``bert/head``: the span head and the loss.

    Other ops (Adam's ``train_step/...`` updates, its ``beta1_power``/``beta2_power``,
    placeholders) -> ``None``; the updates join their variable through its resource input.
    So do the gradients' ``..._grad/tuple/control_dependency[_N]`` identities: TensorFlow
    colocates each with the op producing the gradient it forwards, which at a residual or
    LayerNorm boundary lies in the *next* sub-layer (e.g.
    ``gradients/bert/embeddings/LayerNorm/add_1_grad/tuple/control_dependency`` must sit with
    ``bert/encoder/layer_0/attention/output/LayerNorm/mul``); keyed by name they would leave a
    mixed-key group at every sub-layer boundary, unkeyed they follow their colocation.
    """
    m = _KEY.match(op_name)
    if m is None or _GRAD_ALIAS.search(op_name):
        return None
    top, layer, sub = m.groups()
    if top == "embeddings":
        return "bert/embeddings"
    if top is not None:
        return "bert/head"
    return f"bert/encoder/layer_{layer}/{'attention' if sub == 'attention' else 'ffn'}"


def num_layers(config: BertConfig) -> int:
    """Layers of the expert placement: the transformer layers (``num_hidden_layers``)."""
    return config.num_hidden_layers


def expert_layer(op_name: str, config: BertConfig) -> int:
    """Layer of an op for the expert placement (2017 Sec. 4.2), in ``[0, num_layers(config))``.

    Transformer layer ``L`` (forward, gradient, variables, Adam slots and updates) -> ``L``;
    the embeddings -> 0; the head, the loss and everything else (Adam's ``beta*_power``,
    placeholders, the train op) -> the last layer. Chunks of consecutive layers share a
    GPU ([`EXPERT_CONTIGUOUS`][compgraph.models.bert.EXPERT_CONTIGUOUS]).

    Raises:
        ValueError: the op names a layer ``>= config.num_hidden_layers``.
    """
    m = _LAYER.search(op_name)
    if m:
        layer = int(m.group(1))
        if layer >= config.num_hidden_layers:
            raise ValueError(
                f"op_name={op_name!r}: layer {layer} out of range for num_hidden_layers={config.num_hidden_layers}"
            )
        return layer
    if _EMBEDDINGS.search(op_name):
        return 0
    return config.num_hidden_layers - 1
