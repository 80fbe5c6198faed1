"""Op coverage of users' models that no benchmark of ours builds by hand.

Usage: ``python benchmarks/op_coverage.py [--models mobilenet_v2,...] [--batch 2] [--image-size 64]``
from the project root. Each model is a Keras 3 model (``import keras``; random weights:
``weights=None``) returned by a builder function of this module and imported the way a
user imports it, ``prepare_user_graph(keras="benchmarks.coverage:<builder>")`` (a
``tf.function`` training step: forward in training mode, sparse cross-entropy, gradients,
Adam; flattened by :mod:`compgraph.tf2`). Each model runs in a fresh Python process.

Models: the Keras applications MobileNetV2, EfficientNetB0, DenseNet121 and ResNet50
(``--image-size`` square RGB images, 10 classes), a small transformer encoder (2 blocks of
``MultiHeadAttention`` + ``LayerNormalization`` + a GELU feed-forward, mean-pooled into 10
classes) and a GPT-style decoder (token and position embeddings, 2 pre-norm blocks with
causal self-attention, ``use_causal_mask=True``, a next-token head).

Prints one JSON object per model, one per line: ``ops``, ``op_types`` (distinct),
``op_types_without_flops_rule`` (the goal: none), ``fully_known_shapes`` (share of ops
whose every output dimension is known), ``groups_per_grouper`` (heuristic, metis and fluid
to 256 groups; 2017 needs a benchmark's layer rule), ``total_flops`` (FLOP),
``unrolled_loops``/``one_iteration_loops``, ``import_s`` (seconds: build the model, trace,
flatten, import, heuristic grouping) and ``groupers_s``; then a last line ``{"summary": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: set by ``main`` for the child processes
BATCH = int(os.environ.get("COVERAGE_BATCH", "2"))
IMAGE = int(os.environ.get("COVERAGE_IMAGE_SIZE", "64"))
SEQ, VOCAB, DIM, HEADS = 32, 1000, 64, 4


def _app(name: str):
    import keras

    app = getattr(keras.applications, name)
    return app(weights=None, input_shape=(IMAGE, IMAGE, 3), classes=10, classifier_activation=None)


def _with_batch(model):
    """The model and its input specs with the batch size fixed to :data:`BATCH`."""
    import tensorflow as tf

    specs = [tf.TensorSpec((BATCH, *t.shape[1:]), t.dtype) for t in model.inputs]
    out = model.outputs[0].shape
    specs.append(tf.TensorSpec((BATCH, *out[1:-1]), tf.int32))
    return model, specs


def mobilenet_v2():
    return _with_batch(_app("MobileNetV2"))


def efficientnet_b0():
    return _with_batch(_app("EfficientNetB0"))


def densenet121():
    return _with_batch(_app("DenseNet121"))


def resnet50():
    return _with_batch(_app("ResNet50"))


def _block(keras, x, causal: bool, pre_norm: bool):
    layers = keras.layers
    h = layers.LayerNormalization()(x) if pre_norm else x
    a = layers.MultiHeadAttention(num_heads=HEADS, key_dim=DIM // HEADS)(h, h, use_causal_mask=causal)
    x = layers.Add()([x, layers.Dropout(0.1)(a)])
    if not pre_norm:
        x = layers.LayerNormalization()(x)
    h = layers.LayerNormalization()(x) if pre_norm else x
    f = layers.Dense(4 * DIM, activation="gelu")(h)
    f = layers.Dense(DIM)(f)
    x = layers.Add()([x, layers.Dropout(0.1)(f)])
    return x if pre_norm else layers.LayerNormalization()(x)


def transformer_encoder():
    import keras

    tokens = keras.Input((SEQ,), dtype="int32", batch_size=BATCH)
    x = keras.layers.Embedding(VOCAB, DIM)(tokens)
    for _ in range(2):
        x = _block(keras, x, causal=False, pre_norm=False)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(10)(x), name="transformer_encoder")


def gpt_decoder():
    import keras

    class AddPositions(keras.layers.Layer):
        """Learned position embeddings added to the token embeddings."""

        def build(self, input_shape):
            self.pos = self.add_weight(shape=(input_shape[1], input_shape[2]), initializer="random_normal", name="pos")

        def call(self, x):
            return x + self.pos

    tokens = keras.Input((SEQ,), dtype="int32", batch_size=BATCH)
    x = AddPositions()(keras.layers.Embedding(VOCAB, DIM)(tokens))
    for _ in range(2):
        x = _block(keras, x, causal=True, pre_norm=True)
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(VOCAB)(x), name="gpt_decoder")


MODELS = {
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_b0": efficientnet_b0,
    "densenet121": densenet121,
    "resnet50": resnet50,
    "transformer_encoder": transformer_encoder,
    "gpt_decoder": gpt_decoder,
}

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from compgraph.frontends import prepare_user_graph
from compgraph.grouping import grouping_stats
from compgraph.costs import unknown_flop_types
p = prepare_user_graph(keras="benchmarks.coverage:" + sys.argv[1])
t1 = time.perf_counter()
per = grouping_stats(p.graph, None, 256)
t2 = time.perf_counter()
ops = p.graph.ops
known = sum(all(all(d >= 0 for d in s) for s in op.output_shapes) for op in ops)
info = p.import_info
print(json.dumps({
    "model": sys.argv[1], "ops": len(ops), "op_types": len({op.type for op in ops}),
    "op_types_without_flops_rule": unknown_flop_types([op.type for op in ops]),
    "fully_known_shapes": round(known / max(len(ops), 1), 4),
    "groups_per_grouper": {k: per[k] for k in ("heuristic", "metis", "fluid")},
    "colocation_units": per["colocation_units"],
    "total_flops": p.graph.total_flops(), "param_bytes": p.graph.total_param_bytes(),
    "unrolled_loops": info.get("unrolled_loops", 0), "one_iteration_loops": info.get("one_iteration_loops", 0),
    "import_s": round(t1 - t0, 2), "groupers_s": round(t2 - t1, 2),
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from: {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=64)
    args = ap.parse_args()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in names:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; valid: {', '.join(MODELS)}")
    env = {**os.environ, "COVERAGE_BATCH": str(args.batch), "COVERAGE_IMAGE_SIZE": str(args.image_size),
           "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    rows = []
    for m in names:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, m], cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            row = {"model": m, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
        else:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["process_s"] = round(time.perf_counter() - start, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    uncovered = sorted({t for r in rows for t in r.get("op_types_without_flops_rule", [])})
    print(json.dumps({"summary": {"models": len(rows), "failed": [r["model"] for r in rows if "error" in r],
                                  "op_types_without_flops_rule": uncovered, "batch": args.batch,
                                  "image_size": args.image_size, "load": os.getloadavg()[0]}}))


if __name__ == "__main__":
    main()
