"""Import TensorFlow in the flat, TF1-style graph mode the importers need.

TensorFlow 2 hides loops and conditionals in a function library (``While``/``If``) and
turns variables into resource placeholders, so its ``tf.function`` graphs cannot be
placed op by op. The TF1-style path gives a flat, runnable training-step graph
(see ``shared/notes/stack.md``): legacy Keras, control flow v1, graphs built inside
an explicit :class:`tf.Graph`.
"""

from __future__ import annotations

import os


def import_tensorflow():
    """Return the ``tensorflow`` module configured for flat graph-mode building.

    Sets ``TF_USE_LEGACY_KERAS=1`` and quiets TensorFlow's C++ log before the first import,
    then disables control flow v2 so that loops are unrolled into the graph.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.compat.v1.disable_control_flow_v2()
    return tf
