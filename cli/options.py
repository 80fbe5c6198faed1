"""The options several commands share, declared once (name, flag and help), as ``Annotated``
types; each command gives its own default in its signature, e.g. ``model: Model = "rnnlm"``."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import check_json_path, out_dir_or_home
from tracking import placement_home

_SIZES = ("small (demo) | paper (2017 sizes) | a table's settings: rnnlm post (Post Table 1), nmt post2/post4/post8 "
          "(Post Table 1), inception_v3 eagle (EAGLE Table IV), large (rnnlm, nmt), gpt2 and 6.7b (gpt); `placement "
          "models` lists each")

# the graph: a benchmark, or a user's graph (compgraph.frontends)
Model = Annotated[str, typer.Option(help="benchmark name (see `placement models`), or give a user's graph")]
Size = Annotated[str, typer.Option(help=_SIZES)]
GraphDef = Annotated[str, typer.Option("--graph-def", help="a user's training-step GraphDef (.pb or .pbtxt) instead of --model")]
Keras = Annotated[str, typer.Option("--keras", help="MODULE:FUNCTION (imported from the current folder) or "
                                                    "path/to/file.py:FUNCTION returning a Keras 3 "
                                                    "model or (keras model, input specs), instead of --model")]
Torch = Annotated[str, typer.Option("--torch", help="MODULE:FUNCTION (imported from the current folder) or "
                                                    "path/to/file.py:FUNCTION returning (module, "
                                                    "example_args), where module(*example_args) is the scalar training "
                                                    "loss; the step (forward, backward, --torch-optimizer's update) is "
                                                    "captured at the ATen level on meta tensors, instead of --model")]
TorchOptimizer = Annotated[str, typer.Option("--torch-optimizer", help="with --torch: sgd | adam, the update the captured "
                                                                       "step ends with (torch.optim's defaults)")]
SavedModel = Annotated[str, typer.Option("--saved-model", help="a SavedModel folder whose --signature is a tf.function "
                                                               "training step, instead of --model")]
Signature = Annotated[str, typer.Option("--signature", help="the SavedModel signature of the training step (default: its only one)")]
IntBound = Annotated[list[str], typer.Option("--int-bound", help="NAME=N: a user graph's integer input NAME takes ids in [0, N) "
                                                                 "when run for real (repeatable; default: the size of the "
                                                                 "table it indexes)")]
# its groups
Grouper = Annotated[str, typer.Option(help="heuristic | 2017 | metis | fluid (default: 2017 for benchmarks, heuristic for "
                                           "users' graphs)")]
NumGroups = Annotated[int, typer.Option(help="target number of groups of the automatic groupers, metis and fluid (default 256)")]
CacheDir = Annotated[str, typer.Option(help="preprocessed-graph cache, read if it matches, else written (default: "
                                            "<out-dir>/graph-cache)")]
# the machine and the measurement
Cluster = Annotated[str, typer.Option(help="preset name (see `placement clusters`) or a YAML cluster spec")]
Env = Annotated[str, typer.Option(help="measurement environment: sim (simulator) | real (TensorFlow on this machine's "
                                       "devices) | grappler (TensorFlow's cost model)")]
# the learners
LearnerOption = Annotated[list[str], typer.Option("--learner-option", help="METHOD.FIELD=VALUE: a setting of one learner's config "
                                                                           "(repeatable; VALUE as JSON, else a string), e.g. "
                                                                           "rl.hidden_size=64")]
Resume = Annotated[bool, typer.Option("--resume", help="continue an interrupted run with the same settings from its placement "
                                                       "logs and checkpoints (nothing measured twice)")]
# where results go
HOME_HELP = f"default: {placement_home()}, i.e. $PLACEMENT_HOME, else the user data folder"
"""The default of every ``--out-dir`` in words ([`cli.common.out_dir_or_home`][cli.common.out_dir_or_home])."""
OutDir = Annotated[str, typer.Option(callback=out_dir_or_home,
                                     help="folder of the run folders, the MLflow store (without --tracking-uri), the graph "
                                          f"cache and the placement logs ({HOME_HELP})")]
TrackingUri = Annotated[str, typer.Option(help="MLflow tracking URI (default: SQLite file in --out-dir)")]
Json = Annotated[str, typer.Option("--json", callback=check_json_path, help="write the result object to PATH ('-': stdout)")]
