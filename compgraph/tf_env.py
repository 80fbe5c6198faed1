"""Import TensorFlow in the flat, TF1-style graph mode the importers need.

TensorFlow 2 hides loops and conditionals in a function library (``While``/``If``) and
turns variables into resource placeholders, so its ``tf.function`` graphs cannot be
placed op by op. The TF1-style path gives a flat, runnable training-step graph:
legacy Keras (``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported, for Keras 2's graph
mode), control flow v1 (``tf.compat.v1.disable_control_flow_v2()``), graphs built inside
an explicit `tf.Graph` on placeholders. TF2 graphs that users bring are made flat by
[`compgraph.tf2`][compgraph.tf2].
"""

from __future__ import annotations

import os
import sys
import tempfile


def _import_quietly():
    """Import TensorFlow with file descriptor 2 sent to a temporary file.

    TensorFlow 2.21 prints informational lines (oneDNN, "Could not find cuda drivers") from
    C++ before its log level applies, which would break "one line per error" on the
    command line. What it wrote is replayed to stderr if the import fails, and always when
    ``PLACEMENT_TF_VERBOSE=1``.
    """
    if sys.modules.get("tensorflow") is not None:
        import tensorflow as tf

        return tf
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            import tensorflow as tf

            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if failed or os.environ.get("PLACEMENT_TF_VERBOSE") == "1":
                captured.seek(0)
                sys.stderr.write(captured.read().decode(errors="replace"))
    return tf


def import_tensorflow():
    """Return the ``tensorflow`` module configured for flat graph-mode building.

    Sets ``TF_USE_LEGACY_KERAS=1`` (``tf.keras`` is then the legacy Keras 2; ``import keras``
    still gives Keras 3, whose backend is set to ``tensorflow`` unless ``KERAS_BACKEND`` is
    set) and quiets TensorFlow's C++ log before the first import
    (`_import_quietly`), then disables control flow v2 so that loops are unrolled
    into the graph.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # users' Keras 3 models are traced as tf.functions
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf = _import_quietly()

    tf.compat.v1.disable_control_flow_v2()
    return tf
