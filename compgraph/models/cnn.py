"""Shared building blocks of the hand-built CNN training steps (Inception-V3, ResNet).

The CNN benchmarks ([`compgraph.models.inception`][compgraph.models.inception], [`compgraph.models.resnet`][compgraph.models.resnet])
are built by hand with ``tf.compat.v1`` ops, not with Keras, so that every op's name
scope says which block, branch and layer it belongs to. This module holds what they
share:

* [`LayerBuilder`][compgraph.models.cnn.LayerBuilder]: 2-D convolution (``Conv2D``) with optional batch norm and ReLU,
  batch norm in training mode (``FusedBatchNormV3`` with ``is_training=True``: batch
  statistics, no ``If``/``Switch``/``Merge``), the moving-average updates of the batch
  statistics as plain ``AssignSubVariableOp`` ops (run every step through a control
  dependency of the layer's own output), L2 weight-decay terms (``L2Loss`` in the layer's
  own scope), a dense layer, and pooling.
* [`finish_training_step`][compgraph.models.cnn.finish_training_step]: ``minimize`` with ``colocate_gradients_with_ops=True``
  and the variables' initializer.

Tensors are NHWC float32: ``[batch, height, width, channels]``.
"""

from __future__ import annotations


class LayerBuilder:
    """Builds conv / batch-norm / pooling layers in the current variable scope.

    Args:
        tf: the ``tensorflow`` module from [`compgraph.tf_env.import_tensorflow`][compgraph.tf_env.import_tensorflow].
        weight_decay: L2 coefficient (dimensionless); ``0`` adds no ``L2Loss`` ops. Each
            conv or dense kernel adds ``weight_decay * L2Loss(kernel)`` (``sum(w**2) / 2``)
            to [`decay_terms`][compgraph.models.cnn.LayerBuilder.decay_terms], built in the layer's own scope.
        bn_decay: moving-average decay of the batch-norm statistics (dimensionless, in
            ``[0, 1)``).
        bn_epsilon: batch-norm variance epsilon.
        moving_averages: if true, every batch norm adds two ``AssignSubVariableOp`` updates
            (``moving -= (moving - batch) * (1 - bn_decay)``) to [`updates`][compgraph.models.cnn.LayerBuilder.updates], and its
            output (an ``Identity`` named ``updated``) carries control edges from them, so
            they run every step and the 2017 single-consumer rule keeps them with their
            layer.

    Attributes:
        updates: the batch-norm moving-average update ops, in creation order.
        decay_terms: the weight-decay loss terms (scalar tensors), in creation order.
    """

    def __init__(self, tf, weight_decay: float, bn_decay: float, bn_epsilon: float, moving_averages: bool) -> None:
        self.tf = tf
        self.v1 = tf.compat.v1
        self.weight_decay = weight_decay
        self.bn_decay = bn_decay
        self.bn_epsilon = bn_epsilon
        self.moving_averages = moving_averages
        self.updates: list = []
        self.decay_terms: list = []

    def _kernel(self, shape: list[int], stddev: float | None):
        v1 = self.v1
        if stddev is None:
            init = v1.initializers.variance_scaling(2.0, "fan_in", "truncated_normal")
        else:
            init = v1.truncated_normal_initializer(stddev=stddev)
        w = v1.get_variable("weights", shape, initializer=init)
        if self.weight_decay > 0:
            with self.tf.name_scope("weight_decay"):
                self.decay_terms.append(self.tf.multiply(self.weight_decay, self.tf.nn.l2_loss(w)))
        return w

    def batch_norm(self, x, scale: bool, name: str = "BatchNorm"):
        """Batch norm in training mode over ``[batch, h, w]`` of an NHWC tensor ``x``.

        ``scale`` adds a learned ``gamma`` (else a constant 1, as TF-slim's Inception).
        Returns a tensor shaped like ``x``.
        """
        tf, v1 = self.tf, self.v1
        channels = int(x.shape[-1])
        with v1.variable_scope(name):
            beta = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
            if scale:
                gamma = v1.get_variable("gamma", [channels], initializer=v1.ones_initializer())
            else:
                gamma = tf.ones([channels], name="gamma")
            y, mean, variance = v1.nn.fused_batch_norm(x, gamma, beta, epsilon=self.bn_epsilon, is_training=True)
            if self.moving_averages:
                moving_mean = v1.get_variable(
                    "moving_mean", [channels], initializer=v1.zeros_initializer(), trainable=False
                )
                moving_var = v1.get_variable(
                    "moving_variance", [channels], initializer=v1.ones_initializer(), trainable=False
                )
                updates = []
                for var, batch, nm in (
                    (moving_mean, mean, "AssignMovingAvg"),
                    (moving_var, variance, "AssignMovingAvg_1"),
                ):
                    with tf.name_scope(nm):
                        delta = (var.read_value() - batch) * (1.0 - self.bn_decay)
                        updates.append(var.assign_sub(delta, read_value=False))
                self.updates.extend(updates)
                # the layer's output waits for its own updates: they run every step, and the
                # 2017 single-consumer rule keeps each with its layer (not all with the train op)
                with tf.control_dependencies(updates):
                    y = tf.identity(y, name="updated")
        return y

    def conv(
        self,
        x,
        filters: int,
        kernel: tuple[int, int],
        name: str,
        stride: int = 1,
        padding: str = "SAME",
        bn: bool = True,
        bn_scale: bool = False,
        relu: bool = True,
        bias: bool = False,
        stddev: float | None = None,
    ):
        """``Conv2D`` (+ batch norm) (+ ReLU) in variable scope ``name``.

        Args:
            x: NHWC input ``[b, h, w, c_in]``.
            filters: output channels ``c_out``.
            kernel: ``(kh, kw)``.
            stride: the same stride along height and width.
            padding: ``"SAME"`` or ``"VALID"``.
            bn: add a training-mode batch norm after the convolution.
            bn_scale: the batch norm learns ``gamma``.
            relu: add a ReLU at the end.
            bias: add a learned bias (``BiasAdd``) after the convolution.
            stddev: truncated-normal init stddev; ``None``: He (variance-scaling) init.
        Returns:
            ``[b, h', w', c_out]`` with ``h' = ceil(h / stride)`` (SAME) or
            ``floor((h - kh) / stride) + 1`` (VALID).
        Raises:
            ValueError: the kernel does not fit a VALID input (TensorFlow's message).
        """
        tf, v1 = self.tf, self.v1
        with v1.variable_scope(name):
            w = self._kernel([kernel[0], kernel[1], int(x.shape[-1]), filters], stddev)
            y = tf.nn.conv2d(x, w, strides=[1, stride, stride, 1], padding=padding)
            if bias:
                b = v1.get_variable("biases", [filters], initializer=v1.zeros_initializer())
                y = tf.nn.bias_add(y, b)
            if bn:
                y = self.batch_norm(y, bn_scale)
            if relu:
                y = tf.nn.relu(y)
        return y

    def dense(self, x, units: int, name: str, stddev: float = 0.01):
        """Fully connected layer ``x @ weights + biases`` in variable scope ``name``: ``[b, k] -> [b, units]``."""
        tf, v1 = self.tf, self.v1
        with v1.variable_scope(name):
            w = self._kernel([int(x.shape[-1]), units], stddev)
            b = v1.get_variable("biases", [units], initializer=v1.zeros_initializer())
            return tf.nn.bias_add(tf.matmul(x, w), b)

    def max_pool(self, x, kernel: int, stride: int, padding: str, name: str):
        """``MaxPool`` with a square ``kernel`` and ``stride`` in name scope ``name``."""
        with self.tf.name_scope(name):
            return self.tf.nn.max_pool2d(x, kernel, stride, padding, name="MaxPool")

    def avg_pool(self, x, kernel: int | tuple[int, int], stride: int, padding: str, name: str):
        """``AvgPool`` with ``kernel`` (square int or ``(kh, kw)``) and ``stride`` in name scope ``name``."""
        with self.tf.name_scope(name):
            return self.tf.nn.avg_pool2d(x, kernel, stride, padding, name="AvgPool")


def finish_training_step(tf, optimizer, loss, train_name: str = "train_step"):
    """Minimize ``loss`` with ``optimizer``; return ``(train_op, loss)``.

    Gradients are colocated with their forward ops (2017 Sec. 3.3 relies on it); the
    batch-norm moving-average updates need no extra wiring (each layer's output carries
    a control dependency on its own updates, see [`LayerBuilder.batch_norm`][compgraph.models.cnn.LayerBuilder.batch_norm]).
    ``tf.compat.v1.global_variables_initializer()`` is added to the graph.
    """
    train_op = optimizer.minimize(loss, colocate_gradients_with_ops=True, name=train_name)
    tf.compat.v1.global_variables_initializer()
    return train_op, loss
