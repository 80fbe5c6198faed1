"""The benchmark registry: each model's training-step builder, sizes and model rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from dataclasses import dataclass

from pydantic import BaseModel

from compgraph import torch_models
from compgraph.models import bert, gnmt, inception, nmt, resnet, rnnlm


@dataclass(frozen=True)
class Benchmark:
    """A benchmark model.

    Attributes:
        name: the name users select it by (``--model``).
        description: one line for ``placement models``.
        sizes: size name (``small``, ``paper``) -> config.
        build: config -> ``(GraphDef, fetch op names)`` of one training step.
        model_rule: op name -> co-location key or ``None`` (2017 Sec. 4.1).
        expert_layer: ``(op name, config) -> layer index`` for the expert placement.
        num_layers: config -> number of expert layers.
        expert_contiguous: the expert maps layers to GPUs in contiguous chunks
            (``layer * num_gpus // num_layers``: CNNs and BERT) instead of one layer per GPU
            (``layer % num_gpus``: the RNN models, 2017 Sec. 4.2).
        framework: ``tf`` (``build`` gives a TensorFlow ``GraphDef``) or ``torch`` (``build``
            gives the captured step's [`compgraph.ir.OpGraph`][compgraph.ir.OpGraph] itself:
            [`compgraph.torch_step`][compgraph.torch_step]; no GraphDef, so no real or grappler measurement).
    """

    name: str
    description: str
    sizes: dict[str, BaseModel]
    build: Callable
    model_rule: Callable[[str], "str | None"]
    expert_layer: Callable[[str, Any], int]  # (op name, the benchmark's own config) -> layer
    num_layers: Callable[[Any], int]
    expert_contiguous: bool = False
    framework: str = "tf"


BENCHMARKS: dict[str, Benchmark] = {
    "rnnlm": Benchmark(
        name="rnnlm",
        description="LSTM language model, 2 layers, statically unrolled, Adam (2017 Sec. 4.1); "
        "paper: 2x2048, 40 steps, batch 64; large: 2x4096, batch 256 (2017 Sec. 4.3); post: 4x2048, batch 64 (Post Table 1)",
        sizes={"small": rnnlm.SMALL, "paper": rnnlm.PAPER, "large": rnnlm.LARGE, "post": rnnlm.POST},
        build=rnnlm.build_training_graph,
        model_rule=rnnlm.model_rule,
        expert_layer=lambda name, cfg: rnnlm.expert_layer(name, cfg.num_layers),
        num_layers=lambda cfg: cfg.num_layers,
    ),
    "nmt": Benchmark(
        name="nmt",
        description="attentional LSTM encoder-decoder, Bahdanau attention, statically unrolled, Adam "
        "(2017 Sec. 4.1); paper: 2x1024 enc+dec, length 40, batch 64, 32k vocab; large: 2x2048, batch 256; "
        "post2, post4, post8: 2, 4 or 8 layers of 1024, batch 64 (Post Table 1)",
        sizes={"small": nmt.SMALL, "paper": nmt.PAPER, "large": nmt.LARGE,
               **{f"post{k}": cfg for k, cfg in nmt.POST.items()}},
        build=nmt.build_training_graph,
        model_rule=nmt.model_rule,
        expert_layer=nmt.expert_layer,
        num_layers=nmt.num_layers,
        expert_contiguous=nmt.EXPERT_CONTIGUOUS,
    ),
    "gnmt": Benchmark(
        name="gnmt",
        description="GNMT: 4x256 LSTMs (bidirectional first encoder layer, residual from layer 3), attention "
        "from the bottom decoder layer, Adam (EAGLE Sec. IV-A); paper: batch 256, length 50",
        sizes={"small": gnmt.SMALL, "paper": gnmt.PAPER},
        build=gnmt.build_training_graph,
        model_rule=gnmt.model_rule,
        expert_layer=gnmt.expert_layer,
        num_layers=gnmt.num_layers,
        expert_contiguous=gnmt.EXPERT_CONTIGUOUS,
    ),
    "inception_v3": Benchmark(
        name="inception_v3",
        description="Inception-V3 (TF-slim layout, aux head), RMSProp (2017 Sec. 4.1); paper: batch 32, 299x299x3; "
        "eagle: batch 1 (EAGLE Sec. IV-A)",
        sizes={"small": inception.SMALL, "paper": inception.PAPER, "eagle": inception.EAGLE},
        build=inception.build_training_graph,
        model_rule=inception.model_rule,
        expert_layer=inception.expert_layer,
        num_layers=inception.num_layers,
        expert_contiguous=inception.EXPERT_CONTIGUOUS,
    ),
    "resnet50": Benchmark(
        name="resnet50",
        description="ResNet-50 v1, SGD momentum (Post Table 1); paper: batch 32, 224x224x3",
        sizes={"small": resnet.SMALL[50], "paper": resnet.PAPER[50]},
        build=resnet.build_training_graph,
        model_rule=resnet.model_rule,
        expert_layer=resnet.expert_layer,
        num_layers=resnet.num_layers,
        expert_contiguous=resnet.EXPERT_CONTIGUOUS,
    ),
    "resnet101": Benchmark(
        name="resnet101",
        description="ResNet-101 v1, SGD momentum (Post Table 1); paper: batch 32, 224x224x3",
        sizes={"small": resnet.SMALL[101], "paper": resnet.PAPER[101]},
        build=resnet.build_training_graph,
        model_rule=resnet.model_rule,
        expert_layer=resnet.expert_layer,
        num_layers=resnet.num_layers,
        expert_contiguous=resnet.EXPERT_CONTIGUOUS,
    ),
    "resnet200": Benchmark(
        name="resnet200",
        description="ResNet-200 v2 (pre-activation), SGD momentum (Post Table 1); paper: batch 32, 224x224x3",
        sizes={"small": resnet.SMALL[200], "paper": resnet.PAPER[200]},
        build=resnet.build_training_graph,
        model_rule=resnet.model_rule,
        expert_layer=resnet.expert_layer,
        num_layers=resnet.num_layers,
        expert_contiguous=resnet.EXPERT_CONTIGUOUS,
    ),
    "bert_base": Benchmark(
        name="bert_base",
        description="BERT-Base SQuAD fine-tuning step, 12 transformer layers, Adam (EAGLE Sec. IV-A); "
        "paper: 12x768, 12 heads, seq 384, batch 24",
        sizes={"small": bert.SMALL, "paper": bert.PAPER},
        build=bert.build_training_graph,
        model_rule=bert.model_rule,
        expert_layer=bert.expert_layer,
        num_layers=bert.num_layers,
        expert_contiguous=bert.EXPERT_CONTIGUOUS,
    ),
    "resnet50_torch": Benchmark(
        name="resnet50_torch",
        description="PyTorch ResNet-50 (torchvision's layout, 25.6M parameters), SGD, captured at the ATen level "
        "on meta tensors; paper: batch 32, 224x224x3; small: batch 2, 64x64x3, 10 classes",
        sizes=dict(torch_models.RESNET_SIZES),
        build=torch_models.build_resnet,
        model_rule=torch_models.module_rule,
        expert_layer=torch_models.resnet_expert_layer,
        num_layers=torch_models.resnet_num_layers,
        expert_contiguous=True,
        framework="torch",
    ),
    "gpt": Benchmark(
        name="gpt",
        description="PyTorch GPT-2-style decoder, Adam, captured at the ATen level on meta tensors; gpt2: GPT-2 small "
        "(124M parameters, 12x768, sequence 1024, batch 8); 6.7b: 32x4096, sequence 2048, batch 1 (does not fit "
        "one 80 GB GPU); small: 2x64, sequence 32, batch 2",
        sizes=dict(torch_models.GPT_SIZES),
        build=torch_models.build_gpt,
        model_rule=torch_models.module_rule,
        expert_layer=torch_models.gpt_expert_layer,
        num_layers=torch_models.gpt_num_layers,
        expert_contiguous=True,
        framework="torch",
    ),
}
SIZES = ("small", "paper")  #: sizes every benchmark has; some add ``large``
