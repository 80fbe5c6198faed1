"""The PyTorch benchmarks: ResNet-50 and a GPT-style decoder, each a module whose call returns the loss.

* `ResNet`: ResNet-50 in torchvision's layout (``torchvision.models.resnet50``: He et al.,
  CVPR 2016, Table 1, bottleneck blocks [3, 4, 6, 3] with the stride on the 3x3 convolution,
  "ResNet v1.5"), with the same module names (``conv1``, ``bn1``, ``layer1.0.conv2``, ``fc``) and
  parameter count (25,557,032). torchvision itself is not used: its wheels on the package
  registry are CUDA builds whose kernels do not load beside the CPU build the project pins
  (``torch==2.13.0``, ``scripts/setup.sh``), and the model needs none of its kernels.
* `GPT`: a GPT-2 decoder (Radford et al. 2019: pre-norm blocks, learned positions,
  GELU MLP of width 4d, causal self-attention, the output projection tied to the token
  embedding), attention written as matrix products and a softmax (no fused kernel).
  ``gpt2`` is GPT-2 small (12 layers, d 768, 12 heads, vocab 50,257, context 1,024: 124M
  parameters); ``6.7b`` the 6.7B configuration of GPT-3 (Brown et al. 2020, Table 2.1:
  32 layers, d 4,096, 32 heads, context 2,048), whose fp32 Adam step (weights, gradients and
  two moments: 16 bytes a parameter, 107 GB) fits no 80 GB GPU.

Each builder returns ``(module, example_args)`` with the loss as ``module(*example_args)``;
`build` builds on the ``meta`` device, so nothing of the model's size is allocated.
"""

from __future__ import annotations

import math

from contextvars import ContextVar

from pydantic import BaseModel, ConfigDict

BUILD_DEVICE: ContextVar[str] = ContextVar("BUILD_DEVICE", default="meta")
"""The device the builders ([`resnet50`][compgraph.torch_models.resnet50], [`gpt`][compgraph.torch_models.gpt] and the ``--torch`` specs over them) build
on: ``meta`` (nothing allocated) unless real execution builds the module for its initial weights
([`cluster.torch_real.step_tensors`][cluster.torch_real.step_tensors] sets ``cpu``)."""


class ResNetConfig(BaseModel):
    """ResNet-50 training step: ``batch`` images of ``image`` x ``image`` x 3, ``classes`` labels."""

    model_config = ConfigDict(frozen=True)
    batch: int = 32
    image: int = 224
    classes: int = 1000
    blocks: tuple[int, ...] = (3, 4, 6, 3)


class GPTConfig(BaseModel):
    """GPT decoder training step: ``batch`` sequences of ``seq`` tokens, next-token loss."""

    model_config = ConfigDict(frozen=True)
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    vocab: int = 50257
    seq: int = 1024
    batch: int = 8


RESNET_SIZES = {"small": ResNetConfig(batch=2, image=64, classes=10), "paper": ResNetConfig()}
GPT_SIZES = {"small": GPTConfig(layers=2, d_model=64, heads=4, vocab=512, seq=32, batch=2),
             "gpt2": GPTConfig(), "6.7b": GPTConfig(layers=32, d_model=4096, heads=32, seq=2048, batch=1)}


def _modules():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    class ResNet(nn.Module):
        def __init__(self, cfg: ResNetConfig):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            for i, (planes, n) in enumerate(zip((64, 128, 256, 512), cfg.blocks)):
                setattr(self, f"layer{i + 1}", self._layer(planes, n, 1 if i == 0 else 2))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * 4, cfg.classes)

        def _layer(self, planes: int, blocks: int, stride: int):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x, labels):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            logits = self.fc(torch.flatten(self.avgpool(x), 1))
            return F.cross_entropy(logits, labels)

    class Attention(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.heads = cfg.heads
            self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
            self.register_buffer("mask", torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).tril(), persistent=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            return self.c_proj((att @ v).transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.d_model)
            self.attn = Attention(cfg)
            self.ln_2 = nn.LayerNorm(cfg.d_model)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                     nn.Linear(4 * cfg.d_model, cfg.d_model))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
            self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.d_model)
            gpt2_init(self, cfg.layers)

        def forward(self, tokens, targets):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # the output projection tied to the embedding
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return ResNet, GPT


GPT2_INIT_STD = 0.02
"""The standard deviation of GPT-2's weight initialization (Radford et al. 2019, as its released code and
Hugging Face's ``GPT2PreTrainedModel._init_weights``: ``initializer_range`` 0.02)."""


def gpt2_init(model, layers: int) -> None:
    """Initialize a `GPT`'s parameters as GPT-2 does, in place: every linear layer's and embedding's
    weight ~ N(0, 0.02), biases 0, layer norms 1 and 0, and the residual projections (``attn.c_proj``,
    the MLP's second layer) ~ N(0, 0.02 / sqrt(2 * layers)) (Radford et al. 2019, Sec. 2.3: "we scale
    the weights of residual layers at initialization by a factor of 1/sqrt(N) where N is the number of
    residual layers").

    Why it matters to a measurement: PyTorch's own ``nn.Embedding`` default is N(0, 1). With the output
    projection tied to that table the first step's logits have a standard deviation of about
    sqrt(d_model) (27.7 at d 768), the softmax underflows and 13.7% of the logits' gradient is subnormal
    (measured at GPT-2 small's shapes, tokens [2048]); x86 CPU kernels take a microcode assist on every
    subnormal operand, and the two backward matrix products of the output projection ran 28x slower on
    this machine's CPU (36.1 s against 1.29 s at std 0.02). On one H200 the placement with the last layer
    on the host took 36.5 s real against 3.55 s simulated for that reason alone (GPUs run subnormals at
    full speed, so single-GPU steps hid it).
    """
    import torch
    from torch import nn

    resid = GPT2_INIT_STD / math.sqrt(2 * layers)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = resid if name.endswith(("attn.c_proj", "mlp.2")) else GPT2_INIT_STD
                m.weight.normal_(0.0, std)
                bias = getattr(m, "bias", None)
                if bias is not None:
                    bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()


def resnet50(cfg: ResNetConfig | None = None):
    """``(ResNet-50 module, (images [batch, 3, image, image], labels [batch]))`` on the meta device
    ([`BUILD_DEVICE`][compgraph.torch_models.BUILD_DEVICE])."""
    import torch

    cfg = cfg or RESNET_SIZES["paper"]
    ResNet, _ = _modules()
    with torch.device(BUILD_DEVICE.get()):
        model = ResNet(cfg)
        args = (torch.empty(cfg.batch, 3, cfg.image, cfg.image), torch.empty(cfg.batch, dtype=torch.long))
    return model, args


def gpt(cfg: GPTConfig | None = None):
    """``(GPT module, (tokens [batch, seq], targets [batch, seq]))`` on the meta device
    ([`BUILD_DEVICE`][compgraph.torch_models.BUILD_DEVICE])."""
    import torch

    cfg = cfg or GPT_SIZES["gpt2"]
    _, GPT = _modules()
    with torch.device(BUILD_DEVICE.get()):
        model = GPT(cfg)
        args = (torch.empty(cfg.batch, cfg.seq, dtype=torch.long), torch.empty(cfg.batch, cfg.seq, dtype=torch.long))
    return model, args


def gpt2():
    """GPT-2 small at batch 8 (a ``--torch`` spec: ``compgraph.torch_models:gpt2``)."""
    return gpt(GPT_SIZES["gpt2"])


def gpt_6_7b():
    """The 6.7B decoder at sequence 2,048, batch 1, on meta tensors (``--torch compgraph.torch_models:gpt_6_7b``)."""
    return gpt(GPT_SIZES["6.7b"])


def resnet50_paper():
    """ResNet-50 at batch 32, 224x224, on meta tensors (``--torch compgraph.torch_models:resnet50_paper``)."""
    return resnet50(RESNET_SIZES["paper"])


# --- the benchmark registry's hooks (compgraph.models.BENCHMARKS) -------------------------------

def module_path(op_name: str) -> str:
    """The module an op of a captured step belongs to ([`compgraph.torch_step`][compgraph.torch_step] names):
    ``h.3.attn/addmm`` and ``gradients/h.3.attn/mm`` -> ``h.3.attn``; a parameter, its optimizer
    state and its update (``h.3.attn.c_attn.weight``, ``...weight/Adam``,
    ``update/h.3.attn.c_attn.weight/lerp_``) -> ``h.3.attn.c_attn``; ``""`` for the root module."""
    if op_name.startswith("input/"):
        return ""
    name = op_name
    for prefix in ("gradients/", "update/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    head, _, tail = name.rpartition("/")
    if op_name.startswith("update/") or tail in ("Adam", "Adam_1"):
        return head.rpartition(".")[0]  # the parameter's module
    if not head:  # a parameter, or an op of the root module (fx node names have no dots)
        return name.rpartition(".")[0]
    return head


def module_rule(op_name: str) -> str | None:
    """The 2017 grouper's rule 3 for a captured step: one key per module (its forward, backward,
    parameters, optimizer state and updates); ``None`` for the root module's own ops and the inputs."""
    if op_name.startswith("input/"):
        return None
    return module_path(op_name) or None


def resnet_num_layers(cfg: ResNetConfig) -> int:
    """Expert layers of ResNet-50: its bottleneck blocks."""
    return sum(cfg.blocks)


def resnet_expert_layer(op_name: str, cfg: ResNetConfig) -> int:
    """The bottleneck block of an op (``layer2.1...`` -> 3 + 1 = 4); the stem is block 0 and the head the last."""
    path = module_path(op_name)
    first = path.split(".")
    if first[0].startswith("layer") and first[0][5:].isdigit():
        stage = int(first[0][5:]) - 1
        block = int(first[1]) if len(first) > 1 and first[1].isdigit() else 0
        return sum(cfg.blocks[:stage]) + block
    return 0 if path in ("conv1", "bn1", "relu", "maxpool") or op_name.startswith("input/") else sum(cfg.blocks) - 1


def gpt_num_layers(cfg: GPTConfig) -> int:
    """Expert layers of the GPT decoder: its blocks (a module-level function: a prepared step is pickled to
    the process of an isolated measurement, and a lambda cannot be)."""
    return cfg.layers


def gpt_expert_layer(op_name: str, cfg: GPTConfig) -> int:
    """The decoder block of an op (``h.3...`` -> 3); the embeddings are block 0, the head and the loss the last."""
    path = module_path(op_name)
    parts = path.split(".")
    if parts[0] == "h" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1])
    return 0 if path in ("wte", "wpe") or op_name.startswith("input/") else cfg.layers - 1


def capture_benchmark(name: str, cfg):
    """The captured training step ([`compgraph.torch_step.CapturedStep`][compgraph.torch_step.CapturedStep]) of the PyTorch benchmark
    ``name`` (``resnet50_torch``: SGD; ``gpt``: Adam) at ``cfg``."""
    from compgraph.torch_step import capture_training_step

    if name == "resnet50_torch":
        (model, args), optimizer = resnet50(cfg), "sgd"
    elif name == "gpt":
        (model, args), optimizer = gpt(cfg), "adam"
    else:
        raise ValueError(f"unknown PyTorch benchmark {name!r}; valid: resnet50_torch, gpt")
    return capture_training_step(model, args, optimizer=optimizer, name=name)


def build_resnet(cfg: ResNetConfig):
    """The captured SGD training step of ResNet-50 at ``cfg`` (an [`compgraph.ir.OpGraph`][compgraph.ir.OpGraph])."""
    return capture_benchmark("resnet50_torch", cfg).graph


def build_gpt(cfg: GPTConfig):
    """The captured Adam training step of the GPT decoder at ``cfg`` (an [`compgraph.ir.OpGraph`][compgraph.ir.OpGraph])."""
    return capture_benchmark("gpt", cfg).graph
