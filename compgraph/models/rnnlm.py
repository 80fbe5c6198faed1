"""RNNLM benchmark: a multi-layer LSTM language model's full training step.

Mirhoseini et al. 2017, Sec. 4.1 (Zaremba et al. 2014; Jozefowicz et al. 2016): an
embedding lookup per step, ``num_layers`` LSTM layers statically unrolled over
``num_steps`` steps, a softmax prediction per step, the mean softmax cross-entropy loss,
gradients and an Adam update. The paper's size is 2 layers x 2048 units, 40 steps,
batch 64 ([`PAPER`][compgraph.models.rnnlm.PAPER]).

The graph is built by hand in TF1 graph mode so that name scopes say where every op
belongs (``rnnlm/embedding/step_T``, ``rnnlm/layer_L/step_T``, ``rnnlm/softmax/step_T``,
``rnnlm/loss``); gradient ops carry the forward scope under ``gradients/`` and are
colocated with their forward op (``colocate_gradients_with_ops=True``), as 2017 Sec. 3.3
relies on.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from compgraph.models.nmt import lstm_cell
from compgraph.tf_env import import_tensorflow


class RNNLMConfig(BaseModel):
    """Sizes of the RNNLM training step. Units: counts of tokens, units and sequences."""

    num_layers: int = Field(2, ge=1)
    hidden_size: int = Field(2048, ge=1)
    num_steps: int = Field(40, ge=1)
    batch_size: int = Field(64, ge=1)
    vocab_size: int = Field(10000, ge=2)
    learning_rate: float = 0.001


#: The 2017 paper's RNNLM (Sec. 4.1). The vocabulary is not given there; 10k is PTB's.
PAPER = RNNLMConfig()
#: Post's RNNLM (Gao et al. 2018, Sec. 4: "a 4-layer RNN trained with a batch size of 64"); the
#: paper gives nothing else, so the widths are 2017's (2048 units, 40 steps, 10k words).
POST = RNNLMConfig(num_layers=4)
#: The larger RNNLM at the end of 2017 Sec. 4.3: batch 256, LSTMs of 4,096.
LARGE = RNNLMConfig(hidden_size=4096, batch_size=256)
#: A small RNNLM for the demo and the tests (same structure, about 1.5k ops).
SMALL = RNNLMConfig(num_layers=2, hidden_size=512, num_steps=8, batch_size=64, vocab_size=4000)


def build_training_graph(config: RNNLMConfig):
    """Build the RNNLM training step in a new TF1-style graph.

    Returns ``(graph_def, fetches)``: a ``GraphDef`` with ``_output_shapes`` on every
    node and the names of the ops one training step runs (the train op and the loss).
    Inputs are int32 placeholders ``rnnlm/inputs`` and ``rnnlm/targets`` of shape
    ``[batch_size, num_steps]``.
    """
    tf = import_tensorflow()
    v1 = tf.compat.v1
    c = config
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        init = v1.random_uniform_initializer(-0.05, 0.05)
        with v1.variable_scope("rnnlm", initializer=init):
            inputs = v1.placeholder(tf.int32, [c.batch_size, c.num_steps], name="inputs")
            targets = v1.placeholder(tf.int32, [c.batch_size, c.num_steps], name="targets")
            with v1.variable_scope("embedding"):
                embedding = v1.get_variable("embedding", [c.vocab_size, c.hidden_size])
            kernels, biases = [], []
            for layer in range(c.num_layers):
                with v1.variable_scope(f"layer_{layer}"):
                    kernels.append(v1.get_variable("kernel", [2 * c.hidden_size, 4 * c.hidden_size]))
                    biases.append(v1.get_variable("bias", [4 * c.hidden_size], initializer=v1.zeros_initializer()))
            with v1.variable_scope("softmax"):
                softmax_w = v1.get_variable("weights", [c.hidden_size, c.vocab_size])
                softmax_b = v1.get_variable("bias", [c.vocab_size], initializer=v1.zeros_initializer())

            zeros = tf.zeros([c.batch_size, c.hidden_size], name="initial_state")
            state = [(zeros, zeros) for _ in range(c.num_layers)]
            losses = []
            for step in range(c.num_steps):
                with tf.name_scope(f"rnnlm/embedding/step_{step}/"):
                    x = tf.nn.embedding_lookup(embedding, inputs[:, step])
                for layer in range(c.num_layers):
                    with tf.name_scope(f"rnnlm/layer_{layer}/step_{step}/"):
                        state[layer] = lstm_cell(tf, [x], state[layer], kernels[layer], biases[layer])
                        x = state[layer][0]
                with tf.name_scope(f"rnnlm/softmax/step_{step}/"):
                    logits = tf.nn.bias_add(tf.matmul(x, softmax_w), softmax_b)
                    losses.append(
                        tf.reduce_mean(
                            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets[:, step], logits=logits)
                        )
                    )
            with tf.name_scope("rnnlm/loss/"):
                loss = tf.math.add_n(losses) / float(c.num_steps)
        optimizer = v1.train.AdamOptimizer(c.learning_rate)
        train_op = optimizer.minimize(loss, colocate_gradients_with_ops=True, name="train_step")
        v1.global_variables_initializer()
    return graph.as_graph_def(add_shapes=True), [train_op.name, loss.op.name]


_CELL = re.compile(r"^(?:gradients(?:_\d+)?/)?(rnnlm/(?:embedding|layer_\d+|softmax)/step_\d+)/")
_LAYER = re.compile(r"rnnlm/layer_(\d+)/")


def model_rule(op_name: str) -> str | None:
    """2017 Sec. 4.1 groups for RNN models: each LSTM cell, embedding lookup and softmax step.

    Maps an op (forward or its gradient) to ``rnnlm/layer_L/step_T``,
    ``rnnlm/embedding/step_T`` or ``rnnlm/softmax/step_T``; other ops -> ``None``.
    """
    m = _CELL.match(op_name)
    return m.group(1) if m else None


def expert_layer(op_name: str, num_layers: int) -> int:
    """Layer an op belongs to for the expert placement (2017 Sec. 4.2).

    Each LSTM layer is its own; the embedding goes with the first layer; the softmax,
    the loss and everything else (optimizer bookkeeping) with the last layer.
    """
    m = _LAYER.search(op_name)
    if m:
        return int(m.group(1))
    if "rnnlm/embedding/" in op_name:
        return 0
    return num_layers - 1
