"""NMT benchmark: an attentional LSTM encoder-decoder's full training step.

Mirhoseini et al. 2017, Sec. 4.1 and 4.4 (Bahdanau et al. 2015; Wu et al. 2016): a
source embedding lookup per step, ``num_layers`` LSTM layers in the encoder, a target
embedding lookup per step, ``num_layers`` LSTM layers in the decoder (initialised with
the encoder's final states), Bahdanau (additive) attention over the encoder's top-layer
outputs at every target step, a softmax prediction per target step, the mean softmax
cross-entropy loss, gradients and an Adam update (2017 Sec. 4.1 "Metrics").

Sizes. [`PAPER`][compgraph.models.nmt.PAPER] is the 2017 paper's NMT (Sec. 4.1 "Model details"): 2 LSTM layers
x 1024 units in encoder and decoder, source and target length 40, batch 64, and the
32,000 word-piece vocabularies of both languages (Sec. 4.4 "Neural MT"). [`LARGE`][compgraph.models.nmt.LARGE]
is the end of Sec. 4.3: batch 256 and LSTMs of 2,048 units. [`SMALL`][compgraph.models.nmt.SMALL] has the same
structure at a size the tests build in seconds.

Attention, per target step ``t`` (the "standard" attention of TensorFlow's NMT tutorial,
``tensorflow/nmt`` ``attention_model.py``, with Bahdanau scoring): the top decoder
layer's output ``h_t`` is the query; ``score_s = v . tanh(W_m m_s + W_q h_t)`` over the
encoder's top-layer outputs ``m_s`` (the ``W_m m_s`` "keys" are computed once, in
``nmt/decoder/attention/memory``); ``alpha = softmax(score)``; context
``c_t = sum_s alpha_s m_s``; attention vector ``a_t = tanh(W_c [h_t; c_t])``. ``a_t``
feeds the softmax of step ``t`` and, concatenated with the next target embedding, the
bottom decoder layer at step ``t + 1`` (input feeding). The encoder is unidirectional
(the 2017 paper gives 2 layers and no direction; Bahdanau's bidirectional encoder is
not used).

Every step is unrolled statically in Python, so the graph is flat (no ``While``/``If``,
no function library). Name scopes say where every op belongs:
``nmt/encoder/embedding/step_T``, ``nmt/encoder/layer_L/step_T``,
``nmt/decoder/embedding/step_T``, ``nmt/decoder/layer_L/step_T``,
``nmt/decoder/attention/step_T``, ``nmt/decoder/attention/memory``,
``nmt/decoder/softmax/step_T``, ``nmt/loss``. Gradient ops carry the forward scope
under ``gradients/`` and are colocated with their forward op
(``colocate_gradients_with_ops=True``), as 2017 Sec. 3.3 relies on.

The LSTM cell is written by hand (one fused ``MatMul`` on ``concat([x, h])`` plus a
bias, split into the four gates, forget bias 1.0) so that all of a cell's ops sit under
its scope; weights are shared across steps through variable scopes created once,
before the step loop. [`lstm_cell`][compgraph.models.nmt.lstm_cell] and [`additive_attention`][compgraph.models.nmt.additive_attention] are reused by
[`compgraph.models.gnmt`][compgraph.models.gnmt].
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from compgraph.tf_env import import_tensorflow

#: The expert placement puts layer ``L`` on GPU ``L % num_gpus`` (one layer per GPU, as
#: for RNNs), not contiguous chunks of layers.
EXPERT_CONTIGUOUS = False


class NMTConfig(BaseModel):
    """Sizes of the NMT training step. Units: counts of tokens, units and sequences.

    Attributes:
        num_layers: LSTM layers in the encoder and, separately, in the decoder.
        hidden_size: units of every LSTM layer, of the embeddings and of the attention.
        source_length: source tokens per sequence (encoder steps).
        target_length: target tokens per sequence (decoder steps).
        batch_size: sequences per step.
        source_vocab_size: source vocabulary (rows of the encoder embedding).
        target_vocab_size: target vocabulary (rows of the decoder embedding, softmax width).
        learning_rate: Adam's learning rate.
    """

    num_layers: int = Field(2, ge=1)
    hidden_size: int = Field(1024, ge=1)
    source_length: int = Field(40, ge=1)
    target_length: int = Field(40, ge=1)
    batch_size: int = Field(64, ge=1)
    source_vocab_size: int = Field(32000, ge=2)
    target_vocab_size: int = Field(32000, ge=2)
    learning_rate: float = Field(0.001, gt=0)


#: The 2017 paper's NMT (Sec. 4.1: 2 layers x 1024, length 40, batch 64; Sec. 4.4: 32k word pieces).
PAPER = NMTConfig()
#: Post's NMT with 2, 4 and 8 layers (Gao et al. 2018, Table 1 and Sec. 4: WMT16, batch 64); the
#: paper gives nothing else, so the widths and lengths are 2017's (1024 units, length 40, 32k vocab).
POST = {layers: NMTConfig(num_layers=layers) for layers in (2, 4, 8)}
#: The 2017 paper's large NMT (end of Sec. 4.3: batch 256, LSTMs of 2,048 units).
LARGE = NMTConfig(hidden_size=2048, batch_size=256)
#: A small NMT for the demo and the tests (same structure and scopes).
SMALL = NMTConfig(hidden_size=128, source_length=6, target_length=6, batch_size=16,
                  source_vocab_size=2000, target_vocab_size=2000)


def lstm_cell(tf, inputs, state, kernel, bias):
    """One LSTM step (Hochreiter & Schmidhuber 1997; forget-gate bias 1.0, Zaremba et al. 2014).

    Builds ops in the current name scope: ``concat(inputs + [h]) @ kernel + bias`` split
    into input, candidate, forget and output gates.

    Args:
        tf: the ``tensorflow`` module (from [`compgraph.tf_env.import_tensorflow`][compgraph.tf_env.import_tensorflow]).
        inputs: list of ``[batch, d_i]`` float32 tensors, concatenated with ``h``.
        state: ``(h, c)``, each ``[batch, units]``.
        kernel: ``[sum(d_i) + units, 4 * units]`` weights.
        bias: ``[4 * units]`` bias.
    Returns:
        ``(h_new, c_new)``, each ``[batch, units]``.
    """
    h_prev, c_prev = state
    gates = tf.nn.bias_add(tf.matmul(tf.concat(list(inputs) + [h_prev], 1), kernel), bias)
    i, g, f, o = tf.split(gates, 4, axis=1)
    c_new = tf.sigmoid(f + 1.0) * c_prev + tf.sigmoid(i) * tf.tanh(g)
    h_new = tf.sigmoid(o) * tf.tanh(c_new)
    return h_new, c_new


def attention_keys(tf, memory, memory_weights):
    """The memory projection of additive attention, computed once: ``W_m m_s`` for every ``s``.

    Args:
        memory: ``[batch, source_length, memory_units]`` encoder outputs.
        memory_weights: ``[memory_units, attention_units]``.
    Returns:
        keys ``[batch, source_length, attention_units]``.
    """
    b, s, d = memory.shape.as_list()
    a = memory_weights.shape.as_list()[1]
    return tf.reshape(tf.matmul(tf.reshape(memory, [b * s, d]), memory_weights), [b, s, a])


def additive_attention(tf, query, keys, memory, query_weights, score_vector):
    """Bahdanau et al. 2015 (Sec. 3.1, App. A.1.2) additive attention for one decoder step.

    ``score_s = v . tanh(keys_s + W_q query)``, ``alpha = softmax(score)``,
    ``context = sum_s alpha_s memory_s`` (a ``BatchMatMulV2``).

    Args:
        query: ``[batch, query_units]``.
        keys: ``[batch, source_length, attention_units]`` from [`attention_keys`][compgraph.models.nmt.attention_keys].
        memory: ``[batch, source_length, memory_units]``.
        query_weights: ``[query_units, attention_units]``.
        score_vector: ``[attention_units]``.
    Returns:
        context ``[batch, memory_units]``.
    """
    processed = tf.expand_dims(tf.matmul(query, query_weights), 1)
    scores = tf.reduce_sum(score_vector * tf.tanh(keys + processed), axis=2)
    alignments = tf.nn.softmax(scores)
    return tf.squeeze(tf.matmul(tf.expand_dims(alignments, 1), memory), axis=1)


def build_training_graph(config: NMTConfig):
    """Build the NMT training step in a new TF1-style graph.

    Inputs are int32 placeholders ``nmt/source`` ``[batch_size, source_length]``,
    ``nmt/target_inputs`` and ``nmt/targets`` ``[batch_size, target_length]`` (the
    decoder's input tokens and the tokens it must predict).

    Args:
        config: the sizes ([`NMTConfig`][compgraph.models.nmt.NMTConfig]).
    Returns:
        ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every node,
        and the names of the ops one training step runs (the train op and the loss).
    Raises:
        TypeError: if ``config`` is not an [`NMTConfig`][compgraph.models.nmt.NMTConfig].
    """
    if not isinstance(config, NMTConfig):
        raise TypeError(f"config: expected NMTConfig, got {type(config).__name__}")
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config
    h = c.hidden_size
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        init = v1.random_uniform_initializer(-0.1, 0.1)  # tensorflow/nmt init_weight 0.1
        zeros_init = v1.zeros_initializer()
        with v1.variable_scope("nmt", initializer=init):
            source = v1.placeholder(tf.int32, [c.batch_size, c.source_length], name="source")
            target_inputs = v1.placeholder(tf.int32, [c.batch_size, c.target_length], name="target_inputs")
            targets = v1.placeholder(tf.int32, [c.batch_size, c.target_length], name="targets")
            # variables, created once and shared by every step
            with v1.variable_scope("encoder"):
                with v1.variable_scope("embedding"):
                    enc_embedding = v1.get_variable("embedding", [c.source_vocab_size, h])
                enc_kernels, enc_biases = [], []
                for layer in range(c.num_layers):
                    with v1.variable_scope(f"layer_{layer}"):
                        enc_kernels.append(v1.get_variable("kernel", [2 * h, 4 * h]))
                        enc_biases.append(v1.get_variable("bias", [4 * h], initializer=zeros_init))
            with v1.variable_scope("decoder"):
                with v1.variable_scope("embedding"):
                    dec_embedding = v1.get_variable("embedding", [c.target_vocab_size, h])
                dec_kernels, dec_biases = [], []
                for layer in range(c.num_layers):
                    in_units = 2 * h if layer == 0 else h  # layer 0: embedding + attention vector
                    with v1.variable_scope(f"layer_{layer}"):
                        dec_kernels.append(v1.get_variable("kernel", [in_units + h, 4 * h]))
                        dec_biases.append(v1.get_variable("bias", [4 * h], initializer=zeros_init))
                with v1.variable_scope("attention"):
                    memory_w = v1.get_variable("memory_weights", [h, h])
                    query_w = v1.get_variable("query_weights", [h, h])
                    score_v = v1.get_variable("score_vector", [h])
                    output_w = v1.get_variable("output_weights", [2 * h, h])
                with v1.variable_scope("softmax"):
                    softmax_w = v1.get_variable("weights", [h, c.target_vocab_size])
                    softmax_b = v1.get_variable("bias", [c.target_vocab_size], initializer=zeros_init)

            zeros = tf.zeros([c.batch_size, h], name="initial_state")
            # encoder
            state = [(zeros, zeros) for _ in range(c.num_layers)]
            top_outputs = []
            for step in range(c.source_length):
                with tf.name_scope(f"nmt/encoder/embedding/step_{step}/"):
                    x = tf.nn.embedding_lookup(enc_embedding, source[:, step])
                for layer in range(c.num_layers):
                    with tf.name_scope(f"nmt/encoder/layer_{layer}/step_{step}/"):
                        state[layer] = lstm_cell(tf, [x], state[layer], enc_kernels[layer], enc_biases[layer])
                        x = state[layer][0]
                top_outputs.append(x)
            with tf.name_scope("nmt/decoder/attention/memory/"):
                memory = tf.stack(top_outputs, axis=1)  # [batch, source_length, h]
                keys = attention_keys(tf, memory, memory_w)
            # decoder: starts from the encoder's final states (tensorflow/nmt pass_hidden_state)
            attention_vector = tf.zeros([c.batch_size, h], name="initial_attention")
            losses = []
            for step in range(c.target_length):
                with tf.name_scope(f"nmt/decoder/embedding/step_{step}/"):
                    x = tf.nn.embedding_lookup(dec_embedding, target_inputs[:, step])
                inputs = [x, attention_vector]
                for layer in range(c.num_layers):
                    with tf.name_scope(f"nmt/decoder/layer_{layer}/step_{step}/"):
                        state[layer] = lstm_cell(tf, inputs, state[layer], dec_kernels[layer], dec_biases[layer])
                        inputs = [state[layer][0]]
                top = inputs[0]
                with tf.name_scope(f"nmt/decoder/attention/step_{step}/"):
                    context = additive_attention(tf, top, keys, memory, query_w, score_v)
                    attention_vector = tf.tanh(tf.matmul(tf.concat([top, context], 1), output_w))
                with tf.name_scope(f"nmt/decoder/softmax/step_{step}/"):
                    logits = tf.nn.bias_add(tf.matmul(attention_vector, softmax_w), softmax_b)
                    losses.append(
                        tf.reduce_mean(
                            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets[:, step], logits=logits)
                        )
                    )
            with tf.name_scope("nmt/loss/"):
                loss = tf.math.add_n(losses) / float(c.target_length)
        optimizer = v1.train.AdamOptimizer(c.learning_rate)
        train_op = optimizer.minimize(loss, colocate_gradients_with_ops=True, name="train_step")
        v1.global_variables_initializer()
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_KEY = re.compile(
    r"^(?:gradients(?:_\d+)?/)?"
    r"(nmt/encoder/(?:embedding|layer_\d+)/step_\d+"
    r"|nmt/decoder/(?:embedding|layer_\d+|attention|softmax)/step_\d+"
    r"|nmt/decoder/attention/memory)/"
)
_LAYER = re.compile(r"nmt/(?:encoder|decoder)/layer_(\d+)/")


def model_rule(op_name: str) -> str | None:
    """2017 Sec. 4.1 groups for NMT: each LSTM cell, embedding lookup, attention step and softmax step.

    Maps an op (forward, or its gradient under ``gradients/`` or ``gradients_N/``) to
    ``nmt/{encoder,decoder}/layer_L/step_T``, ``nmt/{encoder,decoder}/embedding/step_T``,
    ``nmt/decoder/attention/step_T``, ``nmt/decoder/softmax/step_T``, or
    ``nmt/decoder/attention/memory`` (the attention keys, computed once); other ops
    (variables, the loss, optimizer updates) -> ``None``.
    """
    m = _KEY.match(op_name)
    return m.group(1) if m else None


def num_layers(config: NMTConfig) -> int:
    """Layers of the expert placement: the LSTM layers (encoder layer L and decoder layer L are layer L)."""
    return config.num_layers


def expert_layer(op_name: str, config: NMTConfig) -> int:
    """Layer an op belongs to for the expert placement (2017 Sec. 4.2 "Expert-designed").

    "For RNNLM and NMT, we put each LSTM layer on a device. For NMT, we also put the
    attention mechanism and the softmax layer on the same device with the highest LSTM
    layer, and we put the embedding layer on the same device with the first LSTM layer."
    Encoder layer ``L`` and decoder layer ``L`` (their cells, weights, Adam slots and
    updates) are layer ``L``; both embeddings are layer 0; the attention (steps and
    memory), the softmax, the loss and everything else (optimizer bookkeeping) are layer
    ``num_layers - 1``. Layers go to GPUs one per GPU ([`EXPERT_CONTIGUOUS`][compgraph.models.nmt.EXPERT_CONTIGUOUS] False).

    Returns:
        an int in ``[0, config.num_layers)``.
    """
    m = _LAYER.search(op_name)
    if m:
        return min(int(m.group(1)), config.num_layers - 1)
    if "nmt/encoder/embedding/" in op_name or "nmt/decoder/embedding/" in op_name:
        return 0
    return config.num_layers - 1
