"""The PyTorch front end (compgraph/torch_step.py) and the PyTorch benchmarks (compgraph/torch_models.py):
a captured training step has the forward, the backward and the update, costed and named by module; each
update is co-located with its state; FLOPs and parameter counts match the published figures."""

from __future__ import annotations

import resource
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from compgraph.frontends import TorchSource, graph_source, prepare_source, tensorflow_source  # noqa: E402
from compgraph.torch_models import GPT_SIZES, gpt, module_rule, resnet50  # noqa: E402
from compgraph.torch_step import TorchStepError, capture_training_step  # noqa: E402
from compgraph.user_graph import UserGraphError  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)


def _mlp_step(optimizer="adam"):
    return capture_training_step(Mlp(), (torch.randn(32, 8), torch.randint(0, 4, (32,))), optimizer, "mlp")


def test_a_step_has_forward_backward_and_update_named_by_module():
    step = _mlp_step()
    g = step.graph
    names = [op.name for op in g.ops]
    # parameters, their two Adam moments and the inputs are the placeholders
    for p in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        assert p in names and f"{p}/Adam" in names and f"{p}/Adam_1" in names
    assert "input/0" in names and "input/1" in names
    assert any(n.startswith("fc1/") and "addmm" in n for n in names)  # forward
    assert any(n.startswith("gradients/fc2/") and n.endswith(("mm", "mm_1")) for n in names)  # backward, by module
    assert any(n.startswith("update/fc1.weight/") for n in names)  # update
    # resident: weights plus two moments (fp32): 3 * 4 bytes per parameter
    params = 8 * 16 + 16 + 16 * 4 + 4
    assert step.info["parameters"] == params and g.total_param_bytes() == 3 * 4 * params
    assert step.info["ops_without_flops_rule"] == 0
    # the forward matrix product of fc1 is [32, 8] x [8, 16]: 2 * 32 * 8 * 16 FLOP (flop_counter counts addmm's mm)
    # every edge names an output its producer has (tuple elements and views folded into their op)
    assert all(e.control or e.src_output < len(g.ops[e.src].output_shapes) for e in g.edges)
    fc1 = next(op for op in g.ops if op.name.startswith("fc1/") and op.type == "aten.addmm")
    assert fc1.flops == 2 * 32 * 8 * 16 and fc1.output_shapes == [(32, 16)] and fc1.output_bytes == [32 * 16 * 4]
    assert fc1.alloc_bytes == 32 * 16 * 4 and fc1.bytes_accessed > 0


def test_every_update_is_colocated_with_the_state_it_writes_and_comes_after_its_readers():
    g = _mlp_step().graph
    index = g.index
    writes = [op for op in g.ops if op.name.startswith("update/")]
    colocated = {c for op in writes for c in op.colocation}
    assert colocated == {f"{p}{s}" for p in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
                         for s in ("", "/Adam", "/Adam_1")}
    # views (the forward's transposes of a weight) and tuple elements are folded into the op holding their memory:
    # the backward's mm reads fc2.weight itself, so the weight's memory lives until its last reader through a view
    assert not {"aten.t", "aten.view", "aten.detach", "getitem"} & {op.type for op in g.ops}
    # the write of fc2.weight comes after every op that reads fc2.weight (the backward's mm through its transpose)
    p = index["fc2.weight"]
    write = next(index[op.name] for op in writes if op.name.startswith("update/fc2.weight/") and "fc2.weight" in op.colocation)
    g_nx = g.to_networkx()
    import networkx as nx

    readers = [v for _, v in g_nx.out_edges(p) if v != write]
    assert readers and all(nx.has_path(g_nx, r, write) for r in readers)


def test_sgd_step_has_no_optimizer_state():
    step = _mlp_step("sgd")
    assert not any("/Adam" in op.name for op in step.graph.ops)
    assert step.graph.total_param_bytes() == 4 * step.info["parameters"]


def test_capture_errors_name_what_is_wrong():
    with pytest.raises(TorchStepError, match="scalar training loss"):
        capture_training_step(torch.nn.Linear(3, 4), (torch.randn(2, 3),))
    with pytest.raises(TorchStepError, match="optimizer: unknown 'lamb'"):
        capture_training_step(Mlp(), (torch.randn(2, 8), torch.randint(0, 4, (2,))), "lamb")
    with pytest.raises(TorchStepError, match="expected a torch.nn.Module"):
        capture_training_step(lambda x: x, (torch.randn(2),))
    with pytest.raises(TorchStepError, match="capture failed: RuntimeError"):
        capture_training_step(Mlp(), (torch.randn(2, 5), torch.randint(0, 4, (2,))))  # 5 features, fc1 wants 8


@pytest.mark.slow  # over 5 s here
def test_resnet50_matches_torchvision_and_the_published_flops():
    model, args = resnet50()
    step = capture_training_step(model, args, "sgd", "resnet50")
    g = step.graph
    assert step.info["parameters"] == 25_557_032  # torchvision.models.resnet50
    forward = sum(op.flops for op in g.ops if not op.name.startswith(("gradients/", "update/")))
    # about 4.1 G multiply-adds per 224x224 image forward (He et al. 2016 Table 1: 3.8e9 "FLOPs"; torchvision 4.09
    # GFLOPS, both multiply-adds), counted as 2 FLOP each
    per_image = forward / 32 / 2
    assert 4.0e9 <= per_image <= 4.2e9
    assert 2.8 <= g.total_flops() / forward <= 3.1  # training is about 3x the forward


@pytest.mark.slow  # over 5 s here
def test_gpt2_small_has_124m_parameters_and_trains_at_about_6_flop_per_parameter_token():
    cfg = GPT_SIZES["gpt2"]
    step = capture_training_step(*gpt(cfg), "adam", "gpt2")
    n, tokens = step.info["parameters"], cfg.batch * cfg.seq
    assert n == 124_439_808
    # 6 N T (Kaplan et al. 2020) plus attention's 6 * 2 * layers * seq * d_model per token
    attention = 6 * 2 * cfg.layers * cfg.seq * cfg.d_model * tokens
    assert 0.98 <= step.graph.total_flops() / (6 * n * tokens + attention) <= 1.02


@pytest.mark.slow  # about 25 s here
def test_a_6_7b_step_is_captured_on_meta_tensors_without_allocating_it():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    step = capture_training_step(*gpt(GPT_SIZES["6.7b"]), "adam", "gpt")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert 6.6e9 <= step.info["parameters"] <= 6.7e9
    assert grown < 2e9  # the weights alone would be 26.6 GB
    # weights and two Adam moments are 12 bytes a parameter: 80 GB before gradients and activations
    gradients = sum(op.alloc_bytes for op in step.graph.ops if op.name.startswith("gradients/"))
    assert step.graph.total_param_bytes() + gradients > 80e9 * 1.3


def test_the_module_path_is_kept_for_forward_backward_and_update():
    from compgraph.grouping import group

    model, args = gpt(GPT_SIZES["small"])
    g = capture_training_step(model, args, "adam", "gpt").graph
    names = [op.name for op in g.ops]
    fwd = next(n for n in names if n.startswith("h.0.attn.c_attn/"))
    bwd = next(n for n in names if n.startswith("gradients/h.0.attn.c_attn/"))
    upd = next(n for n in names if n.startswith("update/h.0.attn.c_attn.weight/"))
    keys = {module_rule(n) for n in (fwd, bwd, upd, "h.0.attn.c_attn.weight", "h.0.attn.c_attn.weight/Adam")}
    assert keys == {"h.0.attn.c_attn"} and module_rule("input/0") is None
    # the 2017 grouper with the module rule (rule 3) groups coarser than rules 1 and 2 alone, and keeps a
    # parameter, its moments and its updates in one group
    by_module = group(g, "2017", module_rule, None, 0)
    assert by_module.num_groups < group(g, "heuristic", None, None, 0).num_groups
    of = dict(zip(names, by_module.op_group.tolist()))
    for op in g.ops:
        assert all(of[op.name] == of[c] for c in op.colocation)


@pytest.mark.slow  # over 5 s here
def test_the_benchmarks_run_through_the_registry_and_the_simulator():
    from cluster.simulator import Simulator
    from cluster.spec import load_cluster
    from compgraph.frontends import BenchmarkSource

    spec = load_cluster("k80x2")
    for model in ("gpt", "resnet50_torch"):
        source = BenchmarkSource(model=model, size="small")
        assert not tensorflow_source(source)
        prepared = prepare_source(source)
        assert prepared.graph_def is None and prepared.grouping.grouper == "2017"
        g = prepared.graph  # convolution_backward's (None, dw) tuple and split's views: outputs that exist
        assert all(e.control or e.src_output < len(g.ops[e.src].output_shapes) for e in g.edges)
        from placer.features import op_features

        assert op_features(g).num_ops == g.num_ops  # the 2017 op embedding reads every edge's output shape
        gpu = [i for i, d in enumerate(spec.devices) if d.kind == "gpu"][0]
        result = Simulator(prepared.graph, spec).run(np.full(prepared.graph.num_ops, gpu))
        assert result.step_time_s > 0 and not result.oom


TORCH_MODULE = textwrap.dedent(
    """
    import torch
    from torch import nn


    def step():
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

            def forward(self, x, y):
                return nn.functional.cross_entropy(self.body(x), y)

        return Net(), (torch.randn(16, 32), torch.randint(0, 10, (16,)))


    def not_a_pair():
        return nn.Linear(2, 2)


    def raises():
        raise RuntimeError("no data here")
    """
)


@pytest.fixture()
def torch_module(tmp_path, monkeypatch):
    (tmp_path / "user_torch_models.py").write_text(TORCH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_torch_models"
    sys.modules.pop("user_torch_models", None)


def test_a_users_torch_step_through_its_front_end(torch_module):
    source = graph_source(torch=f"{torch_module}:step", torch_optimizer="sgd")
    assert source == TorchSource(spec=f"{torch_module}:step", optimizer="sgd") and not tensorflow_source(source)
    prepared = prepare_source(source)
    assert prepared.size == "user" and prepared.graph_def is None and prepared.grouping.grouper == "heuristic"
    assert prepared.import_info["format"] == "torch" and prepared.import_info["parameters"] == 32 * 64 + 64 + 64 * 10 + 10
    # no group splits an update from its parameter
    group_of = dict(zip([op.name for op in prepared.graph.ops], prepared.grouping.op_group.tolist()))
    for op in prepared.graph.ops:
        for other in op.colocation:
            assert group_of[op.name] == group_of[other]


@pytest.mark.parametrize("func, match", [
    ("not_a_pair", r"must return \(module, example_args\); got Linear"),
    ("raises", r"raises\(\) failed: RuntimeError: no data here"),
    ("missing", "has no function 'missing'"),
])
def test_a_users_torch_step_errors(torch_module, func, match):
    with pytest.raises(UserGraphError, match=match):
        prepare_source(TorchSource(spec=f"{torch_module}:{func}"))


def test_a_torch_step_runs_for_real_on_the_devices_it_has_and_never_in_grappler():
    from pydantic import ValidationError

    from tasks.config import ExperimentConfig

    config = ExperimentConfig(source={"kind": "torch", "spec": "m:f"}, env="real", cluster="cpu4",
                              methods=["single_gpu"], real={"repeats": 3, "threads": 1})
    assert config.real.env_options() == {"repeats": 3, "threads": 1}
    isolated = ExperimentConfig(source={"kind": "torch", "spec": "m:f"}, env="real", cluster="cpu4",
                                methods=["single_gpu"], real={"isolate": True, "host_memory": "reuse"})
    assert isolated.real.env_options() == {"isolate": True, "host_memory": "reuse"}
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        with pytest.raises(ValidationError, match=r"/gpu:0 runs on cuda:0, but this machine has 0 CUDA"):
            ExperimentConfig(source={"kind": "torch", "spec": "m:f"}, env="real", methods=["single_gpu"])
    with pytest.raises(ValidationError, match="'grappler' is TensorFlow's cost model"):
        ExperimentConfig(source={"kind": "benchmark", "model": "gpt", "size": "small"}, env="grappler",
                         methods=["single_gpu"])
    with pytest.raises(ValidationError, match="real.threads: for a PyTorch step"):
        ExperimentConfig(env="real", cluster="cpu4", methods=["single_cpu"], real={"threads": 2})
    with pytest.raises(ValidationError, match="real.isolate: for a PyTorch step"):
        ExperimentConfig(env="real", cluster="cpu4", methods=["single_cpu"], real={"isolate": True})
    with pytest.raises(ValidationError, match="real.host_memory: for a PyTorch step"):
        ExperimentConfig(env="real", cluster="cpu4", methods=["single_cpu"], real={"host_memory": "reuse"})


def test_backward_ops_are_named_without_autograds_own_mark(monkeypatch):
    """The capture's ``phase: backward`` annotation names backward ops by their module even where
    PyTorch leaves ``autograd_backward`` out of the traced nodes (2.11, the lent GPU machines'
    build): the same op names with and without that mark."""
    from compgraph import torch_step
    from compgraph.torch_models import GPT_SIZES, gpt

    want = [op.name for op in torch_step.capture_training_step(*gpt(GPT_SIZES["small"]), name="gpt").graph.ops]
    real = torch_step._to_op_graph

    def without_mark(gm, *args):
        for n in gm.graph.nodes:
            n.meta.pop("autograd_backward", None)
        return real(gm, *args)

    monkeypatch.setattr(torch_step, "_to_op_graph", without_mark)
    got = [op.name for op in torch_step.capture_training_step(*gpt(GPT_SIZES["small"]), name="gpt").graph.ops]
    assert got == want
    assert sum(n.startswith("gradients/h.") for n in got) > 40
