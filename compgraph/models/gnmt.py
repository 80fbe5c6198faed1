"""GNMT benchmark: Google's neural machine translation model's full training step.

Lan, Chen, Li (EAGLE, IPDPS 2021), Sec. IV-A, after Wu et al. 2016 (GNMT) as implemented
in TensorFlow's NMT tutorial (``tensorflow/nmt``, the EAGLE paper's [27]): "We use the
4-layer version with an attention layer, where each LSTM layer has 256 hidden units. The
sequence length is limited within 20 to 50. [...] we increase the batch size of the model
from 128 to 256". [`PAPER`][compgraph.models.gnmt.PAPER] is that: 4 LSTM layers of 256 units in the encoder and
in the decoder, batch 256, source and target length 50 (the upper limit), and Adam (as
the task asks; ``tensorflow/nmt``'s own default optimizer is SGD with learning rate 1.0,
selectable here with ``optimizer="sgd"``). **The EAGLE paper does not give the
vocabulary**; 32,000 word pieces (source and target) is an assumption, the size of
Wu et al. 2016's and Mirhoseini et al. 2017's (Sec. 4.4) word-piece vocabularies.

Structure (Wu et al. 2016, Sec. 3; ``tensorflow/nmt`` ``gnmt_model.py`` with
``encoder_type=gnmt``, ``attention_architecture=gnmt_v2``, ``residual=True``):

* encoder: a source embedding lookup per step; layer 0 is bidirectional (a forward LSTM
  over steps ``0..S-1`` and a backward LSTM over ``S-1..0``, their outputs concatenated);
  layers ``1..num_layers-1`` are unidirectional; layers 2 and up ("from layer 3 on",
  counting from 1) add residual connections (output = LSTM output + layer input;
  ``tensorflow/nmt``: ``num_residual_layers = num_layers - 2``).
* decoder: a target embedding lookup per step, ``num_layers`` unidirectional LSTM layers
  (initial states: layer 0 from the backward encoder layer's final state, layer ``L``
  from encoder layer ``L``'s, as ``tensorflow/nmt`` ``pass_hidden_state``); residual
  connections from layer 2 on.
* attention: additive (Bahdanau) over the encoder's top-layer outputs; the query is the
  bottom decoder layer's output at step ``t``, and the context is fed, concatenated with
  each layer's input, to every upper decoder layer at step ``t`` and to the bottom layer
  at step ``t + 1`` (GNMT's recurrent attention, ``gnmt_v2``). No attention layer:
  the attention is the context itself (``attention_layer_size=None``).
* a softmax prediction per target step on the top decoder layer's output (projection
  without bias, as ``tensorflow/nmt``'s output layer), the mean softmax cross-entropy
  loss, gradients, and the optimizer update. No dropout, no gradient clipping.

Every step is unrolled statically, so the graph is flat. Name scopes:
``gnmt/encoder/embedding/step_T``, ``gnmt/encoder/layer_0/fw/step_T``,
``gnmt/encoder/layer_0/bw/step_T``, ``gnmt/encoder/layer_L/step_T``,
``gnmt/decoder/embedding/step_T``, ``gnmt/decoder/layer_L/step_T``,
``gnmt/decoder/attention/step_T``, ``gnmt/decoder/attention/memory`` (the attention
keys, computed once), ``gnmt/decoder/softmax/step_T``, ``gnmt/loss``. ``T`` is the
token position (the backward layer's ``step_T`` reads token ``T``). The LSTM cell and
the attention are [`compgraph.models.nmt.lstm_cell`][compgraph.models.nmt.lstm_cell] and
[`compgraph.models.nmt.additive_attention`][compgraph.models.nmt.additive_attention].

Expert placement ([`expert_layer`][compgraph.models.gnmt.expert_layer]): ``tensorflow/nmt``'s multi-GPU placement, the
one the EAGLE paper's "Human Expert" uses for GNMT (Sec. IV-B: "it places each LSTM
layer, attention layer and softmax layer on a separate device"): layer ``i`` of the
encoder and of the decoder on GPU ``i % num_gpus`` (``model_helper.get_device_str``),
so [`EXPERT_CONTIGUOUS`][compgraph.models.gnmt.EXPERT_CONTIGUOUS] is False.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from compgraph.models.nmt import additive_attention, attention_keys, lstm_cell
from compgraph.tf_env import import_tensorflow

#: Layer ``i`` goes on GPU ``i % num_gpus`` (``tensorflow/nmt``), not contiguous chunks.
EXPERT_CONTIGUOUS = False
#: First layer (0-based) with a residual connection, in the encoder and in the decoder
#: (GNMT: "residual connections from layer 3 on"; ``tensorflow/nmt``: the last
#: ``num_layers - 2`` layers).
FIRST_RESIDUAL_LAYER = 2


class GNMTConfig(BaseModel):
    """Sizes of the GNMT training step. Units: counts of tokens, units and sequences.

    Attributes:
        num_layers: LSTM layers in the encoder (the first bidirectional) and, separately,
            in the decoder; at least 2 (one bidirectional, one unidirectional encoder layer).
        hidden_size: units of every LSTM (each direction of layer 0), embedding and attention.
        source_length: source tokens per sequence (encoder steps).
        target_length: target tokens per sequence (decoder steps).
        batch_size: sequences per step.
        source_vocab_size: source vocabulary (rows of the encoder embedding).
        target_vocab_size: target vocabulary (rows of the decoder embedding, softmax width).
        optimizer: ``adam`` (default, as asked) or ``sgd`` (``tensorflow/nmt``'s default).
        learning_rate: the optimizer's learning rate.
    """

    num_layers: int = Field(4, ge=2)
    hidden_size: int = Field(256, ge=1)
    source_length: int = Field(50, ge=1)
    target_length: int = Field(50, ge=1)
    batch_size: int = Field(256, ge=1)
    source_vocab_size: int = Field(32000, ge=2)
    target_vocab_size: int = Field(32000, ge=2)
    optimizer: Literal["adam", "sgd"] = "adam"
    learning_rate: float = Field(0.001, gt=0)


#: EAGLE Sec. IV-A's GNMT: 4 layers x 256, length 50, batch 256; vocabulary 32k assumed (not in the paper).
PAPER = GNMTConfig()
#: A small GNMT for the demo and the tests (same structure and scopes, residual layers included).
SMALL = GNMTConfig(hidden_size=64, source_length=3, target_length=3, batch_size=16,
                   source_vocab_size=1000, target_vocab_size=1000)


def build_training_graph(config: GNMTConfig):
    """Build the GNMT training step in a new TF1-style graph.

    Inputs are int32 placeholders ``gnmt/source`` ``[batch_size, source_length]``,
    ``gnmt/target_inputs`` and ``gnmt/targets`` ``[batch_size, target_length]``.

    Args:
        config: the sizes ([`GNMTConfig`][compgraph.models.gnmt.GNMTConfig]).
    Returns:
        ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every node,
        and the names of the ops one training step runs (the train op and the loss).
    Raises:
        TypeError: if ``config`` is not a [`GNMTConfig`][compgraph.models.gnmt.GNMTConfig].
    """
    if not isinstance(config, GNMTConfig):
        raise TypeError(f"config: expected GNMTConfig, got {type(config).__name__}")
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config
    h = c.hidden_size
    n = c.num_layers
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        init = v1.random_uniform_initializer(-0.1, 0.1)  # tensorflow/nmt init_weight 0.1
        zeros_init = v1.zeros_initializer()

        def lstm_vars(in_units):
            return (v1.get_variable("kernel", [in_units + h, 4 * h]),
                    v1.get_variable("bias", [4 * h], initializer=zeros_init))

        with v1.variable_scope("gnmt", initializer=init):
            source = v1.placeholder(tf.int32, [c.batch_size, c.source_length], name="source")
            target_inputs = v1.placeholder(tf.int32, [c.batch_size, c.target_length], name="target_inputs")
            targets = v1.placeholder(tf.int32, [c.batch_size, c.target_length], name="targets")
            # variables, created once and shared by every step
            with v1.variable_scope("encoder"):
                with v1.variable_scope("embedding"):
                    enc_embedding = v1.get_variable("embedding", [c.source_vocab_size, h])
                enc_vars: dict[str | int, tuple] = {}  # by direction (layer 0), then by layer
                with v1.variable_scope("layer_0"):
                    for direction in ("fw", "bw"):
                        with v1.variable_scope(direction):
                            enc_vars[direction] = lstm_vars(h)
                for layer in range(1, n):
                    with v1.variable_scope(f"layer_{layer}"):
                        enc_vars[layer] = lstm_vars(2 * h if layer == 1 else h)
            with v1.variable_scope("decoder"):
                with v1.variable_scope("embedding"):
                    dec_embedding = v1.get_variable("embedding", [c.target_vocab_size, h])
                dec_vars = []
                for layer in range(n):
                    with v1.variable_scope(f"layer_{layer}"):
                        dec_vars.append(lstm_vars(2 * h))  # input and attention context
                with v1.variable_scope("attention"):
                    memory_w = v1.get_variable("memory_weights", [h, h])
                    query_w = v1.get_variable("query_weights", [h, h])
                    score_v = v1.get_variable("score_vector", [h])
                with v1.variable_scope("softmax"):
                    softmax_w = v1.get_variable("weights", [h, c.target_vocab_size])

            zeros = tf.zeros([c.batch_size, h], name="initial_state")
            # encoder
            embedded = []
            for step in range(c.source_length):
                with tf.name_scope(f"gnmt/encoder/embedding/step_{step}/"):
                    embedded.append(tf.nn.embedding_lookup(enc_embedding, source[:, step]))
            fw_out, bw_out = [None] * c.source_length, [None] * c.source_length
            state = (zeros, zeros)
            for step in range(c.source_length):
                with tf.name_scope(f"gnmt/encoder/layer_0/fw/step_{step}/"):
                    state = lstm_cell(tf, [embedded[step]], state, *enc_vars["fw"])
                    fw_out[step] = state[0]
            state = (zeros, zeros)
            for step in reversed(range(c.source_length)):
                with tf.name_scope(f"gnmt/encoder/layer_0/bw/step_{step}/"):
                    state = lstm_cell(tf, [embedded[step]], state, *enc_vars["bw"])
                    bw_out[step] = state[0]
            final_states = [state]  # the decoder's layer 0 starts from the backward layer's final state
            enc_state = [(zeros, zeros) for _ in range(n)]
            top_outputs: list = []
            for step in range(c.source_length):
                inputs = [fw_out[step], bw_out[step]]
                for layer in range(1, n):
                    with tf.name_scope(f"gnmt/encoder/layer_{layer}/step_{step}/"):
                        enc_state[layer] = lstm_cell(tf, inputs, enc_state[layer], *enc_vars[layer])
                        out = enc_state[layer][0]
                        if layer >= FIRST_RESIDUAL_LAYER:
                            out = out + inputs[0]
                        inputs = [out]
                top_outputs.append(inputs[0])
            final_states += enc_state[1:]
            with tf.name_scope("gnmt/decoder/attention/memory/"):
                memory = tf.stack(top_outputs, axis=1)  # [batch, source_length, h]
                keys = attention_keys(tf, memory, memory_w)
            # decoder
            dec_state = list(final_states)
            context = tf.zeros([c.batch_size, h], name="initial_attention")
            losses = []
            for step in range(c.target_length):
                with tf.name_scope(f"gnmt/decoder/embedding/step_{step}/"):
                    x = tf.nn.embedding_lookup(dec_embedding, target_inputs[:, step])
                with tf.name_scope(f"gnmt/decoder/layer_0/step_{step}/"):
                    dec_state[0] = lstm_cell(tf, [x, context], dec_state[0], *dec_vars[0])
                    x = dec_state[0][0]
                with tf.name_scope(f"gnmt/decoder/attention/step_{step}/"):
                    context = additive_attention(tf, x, keys, memory, query_w, score_v)
                for layer in range(1, n):
                    with tf.name_scope(f"gnmt/decoder/layer_{layer}/step_{step}/"):
                        dec_state[layer] = lstm_cell(tf, [x, context], dec_state[layer], *dec_vars[layer])
                        out = dec_state[layer][0]
                        if layer >= FIRST_RESIDUAL_LAYER:
                            out = out + x
                        x = out
                with tf.name_scope(f"gnmt/decoder/softmax/step_{step}/"):
                    logits = tf.matmul(x, softmax_w)
                    losses.append(
                        tf.reduce_mean(
                            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets[:, step], logits=logits)
                        )
                    )
            with tf.name_scope("gnmt/loss/"):
                loss = tf.math.add_n(losses) / float(c.target_length)
        if c.optimizer == "adam":
            optimizer = v1.train.AdamOptimizer(c.learning_rate)
        else:
            optimizer = v1.train.GradientDescentOptimizer(c.learning_rate)
        train_op = optimizer.minimize(loss, colocate_gradients_with_ops=True, name="train_step")
        v1.global_variables_initializer()
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_KEY = re.compile(
    r"^(?:gradients(?:_\d+)?/)?"
    r"(gnmt/encoder/(?:embedding|layer_0/fw|layer_0/bw|layer_\d+)/step_\d+"
    r"|gnmt/decoder/(?:embedding|layer_\d+|attention|softmax)/step_\d+"
    r"|gnmt/decoder/attention/memory)/"
)
_LAYER = re.compile(r"gnmt/(?:encoder|decoder)/layer_(\d+)/(bw/)?")


def model_rule(op_name: str) -> str | None:
    """2017 Sec. 4.1 groups, applied to GNMT: each LSTM cell, embedding lookup, attention and softmax step.

    Maps an op (forward, or its gradient under ``gradients/`` or ``gradients_N/``) to
    ``gnmt/encoder/layer_0/{fw,bw}/step_T``, ``gnmt/{encoder,decoder}/layer_L/step_T``,
    ``gnmt/{encoder,decoder}/embedding/step_T``, ``gnmt/decoder/attention/step_T``,
    ``gnmt/decoder/softmax/step_T`` or ``gnmt/decoder/attention/memory``; other ops
    (variables, the loss, optimizer updates) -> ``None``.
    """
    m = _KEY.match(op_name)
    return m.group(1) if m else None


def num_layers(config: GNMTConfig) -> int:
    """Layers of the expert placement: the LSTM layers (encoder layer L and decoder layer L are layer L)."""
    return config.num_layers


def expert_layer(op_name: str, config: GNMTConfig) -> int:
    """Layer an op belongs to for the expert placement (``tensorflow/nmt``'s multi-GPU GNMT).

    ``tensorflow/nmt`` puts encoder and decoder layer ``i`` on GPU ``i % num_gpus``
    (the bidirectional layer's backward LSTM on GPU 1, ``base_gpu + num_bi_layers``),
    the output (softmax) layer and the loss on GPU ``num_layers - 1`` when there are no
    more GPUs than layers (``num_layers`` otherwise, which a layer index in
    ``[0, num_layers)`` cannot express), and the rest (embeddings below 50k rows, the
    attention, which wraps the bottom decoder layer's cell, optimizer bookkeeping) on
    GPU 0. Here: ``layer_0/bw`` -> 1, other ``layer_L`` ops (cells, weights, Adam slots,
    updates) -> ``L``; softmax and loss -> ``num_layers - 1``; everything else -> 0.

    Returns:
        an int in ``[0, config.num_layers)``.
    """
    m = _LAYER.search(op_name)
    if m:
        layer = 1 if m.group(2) else int(m.group(1))
        return min(layer, config.num_layers - 1)
    if "gnmt/decoder/softmax/" in op_name or "gnmt/loss/" in op_name:
        return config.num_layers - 1
    return 0
