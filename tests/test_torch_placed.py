"""The placed PyTorch step is exact, and real execution of PyTorch steps (cluster.torch_real) on this CPU.

Exactness: a placed step of a benchmark, split over two devices with the copies kept (``cpu`` and
``cpu:1``: distinct devices to the placed step, the same memory), equals one eager step on the
same weights: loss, parameters, buffers (batch norm's running statistics) and optimizer state.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cluster.factory import make_environment  # noqa: E402
from cluster.spec import load_cluster  # noqa: E402
from cluster.torch_real import (DeviceUnavailableError, TorchRealEnvironment, has_glibc,  # noqa: E402
                                int_input_bounds, load_step, spread, step_tensors, torch_devices)
from compgraph.frontends import BenchmarkSource, TorchSource, prepare_source  # noqa: E402
from compgraph.torch_step import UNMARKED_WRITES, node_writes, placed_module  # noqa: E402


@pytest.fixture(scope="module")
def resnet_small():
    return prepare_source(BenchmarkSource(model="resnet50_torch", size="small"))


@pytest.fixture(scope="module")
def gpt_small():
    return prepare_source(BenchmarkSource(model="gpt", size="small"))


def _run_interpreted(gm, vals):
    """Run ``gm`` node by node; return the ATen ops that changed a tensor argument their
    :func:`node_writes` does not name: ``{(op, argument name)}``."""
    found = set()

    class Probe(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            schema = n.target._schema
            declared = set(node_writes(n))
            before = {}
            for i, a in enumerate(schema.arguments):
                node_arg = n.args[i] if i < len(n.args) else n.kwargs.get(a.name)
                v = args[i] if i < len(args) else kwargs.get(a.name)
                if isinstance(v, torch.Tensor) and node_arg not in declared:
                    before[i] = (a.name, v, v.clone())
            out = super().run_node(n)
            for name, v, old in before.values():
                if not torch.equal(old, v):
                    found.add((n.target.overloadpacket.__name__, name))
            return out

    Probe(gm).run(*vals)
    return found


@pytest.mark.parametrize("model", ["resnet50_torch", "gpt"])
def test_every_op_that_writes_an_input_is_known_to_write_it(model, resnet_small, gpt_small):
    """Run every op of the step on real tensors: no op changes an argument that node_writes does not
    name (batch norm's running statistics, unmarked in its schema, are named)."""
    prepared = resnet_small if model == "resnet50_torch" else gpt_small
    step, build = load_step(prepared)
    module, args, optimizer = build()
    tensors = step_tensors(step, module, args, optimizer, seed=0)
    gm, inputs = placed_module(step, {op.name: "cpu" for op in step.graph.ops})
    assert _run_interpreted(gm, [tensors[name].clone() for name, _ in inputs]) == set()
    if model == "resnet50_torch":
        bn = [n for n in step.gm.graph.nodes if getattr(n.target, "__name__", "").startswith("native_batch_norm.")]
        assert bn and all(len(node_writes(n)) == 2 for n in bn)
        assert "native_batch_norm" in UNMARKED_WRITES


def _eager_step(module, args, optimizer):
    """One eager training step as the capture models it: SGD(lr=1e-3) or Adam(foreach=False) at its defaults."""
    opt = (torch.optim.SGD(module.parameters(), lr=1e-3) if optimizer == "sgd"
           else torch.optim.Adam(module.parameters(), foreach=False))
    opt.zero_grad(set_to_none=True)
    loss = module(*args)
    loss.backward()
    opt.step()
    return float(loss.detach()), opt


@pytest.mark.parametrize("model", ["resnet50_torch", "gpt"])
def test_a_placed_step_split_over_two_devices_equals_an_eager_step(model, resnet_small, gpt_small):
    prepared = resnet_small if model == "resnet50_torch" else gpt_small
    step, build = load_step(prepared)
    module, args, optimizer = build()
    tensors = step_tensors(step, module, args, optimizer, seed=3)
    # the first half of the ops (forward, early layers) on "cpu", the rest on "cpu:1": copies in between
    ops = step.graph.ops
    devices = {op.name: ("cpu" if i < len(ops) // 2 else "cpu:1") for i, op in enumerate(ops)}
    # a co-located op goes where its parameter or buffer goes (the grouping would do the same)
    for op in ops:
        for c in op.colocation:
            devices[op.name] = devices[c]
    gm, inputs = placed_module(step, devices)
    n_copies = sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten._to_copy.default)
    assert n_copies > 0
    placed = {name: tensors[name].clone() for name, _ in inputs}
    loss = gm(*[placed[name] for name, _ in inputs])[0]
    # eager, from the same tensors
    with torch.no_grad():
        for n, p in module.named_parameters():
            p.copy_(tensors[n])
        for n, b in module.named_buffers():
            b.copy_(tensors[n])
    module.train()
    eager_args = [tensors[f"input/{k}"] for k in range(len(args))]
    eager_loss, opt = _eager_step(module, eager_args, optimizer)
    assert float(loss) == pytest.approx(eager_loss, rel=1e-5)
    for n, p in module.named_parameters():
        torch.testing.assert_close(placed[n], p.detach(), rtol=1e-5, atol=1e-6, msg=n)
        if optimizer == "adam":
            torch.testing.assert_close(placed[f"{n}/Adam"], opt.state[p]["exp_avg"], rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(placed[f"{n}/Adam_1"], opt.state[p]["exp_avg_sq"], rtol=1e-5, atol=1e-9)
    buffers = dict(module.named_buffers())
    for n, b in buffers.items():
        torch.testing.assert_close(placed[n], b, rtol=1e-5, atol=1e-6, msg=n)
    if model == "resnet50_torch":  # the running statistics moved: the step updated them where they live
        assert not torch.equal(tensors["bn1.running_mean"], buffers["bn1.running_mean"])


def test_integer_inputs_are_bounded_by_what_they_index(gpt_small, resnet_small):
    step, _ = load_step(gpt_small)
    assert int_input_bounds(step) == {"input/0": 512, "input/1": 512}  # the embedding table, the logits' classes
    step, _ = load_step(resnet_small)
    assert int_input_bounds(step) == {"input/1": 10}  # the classes of the loss


def test_torch_devices_map_the_spec_and_refuse_a_missing_gpu(resnet_small):
    spec = load_cluster("k80x2")  # /cpu:0, /gpu:0, /gpu:1
    assert torch_devices(spec) == ["cpu", "cuda:0", "cuda:1"]
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailableError, match=r"/gpu:0 runs on cuda:0, but this machine has 0 CUDA"):
            make_environment("real", resnet_small, spec)
    with pytest.raises(ValueError, match="devices: 2 given"):
        torch_devices(spec, ["cpu", "cpu:1"])


def test_spread_is_the_median_and_quartiles():
    s = spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_s"] == 3.0 and s["q1_s"] == 2.0 and s["q3_s"] == 4.0 and s["iqr_s"] == 2.0
    assert spread([0.5])["iqr_s"] is None and spread([])["median_s"] is None


def test_real_env_measures_a_pytorch_step_on_two_logical_cpus(resnet_small):
    spec = load_cluster("k80x2")
    env = make_environment("real", resnet_small, spec, {"repeats": 3, "warmup": 1, "threads": 1,
                                                        "devices": ["cpu", "cpu:1", "cpu:2"]})
    assert isinstance(env, TorchRealEnvironment)
    n = env.grouping.num_groups
    gp = np.arange(n) % 2  # alternate units between two devices: many copies
    m = env.measure(gp)
    assert m.step_time_s is not None and m.step_time_s > 0 and not m.oom and m.failure is None
    assert m.steps == 3 and len(m.step_times_s) == 3 and len(m.warmup_s) == 1
    assert m.q1_s <= m.step_time_s <= m.q3_s and m.iqr_s == pytest.approx(m.q3_s - m.q1_s)
    assert m.threads == 1 and m.devices == ["cpu", "cpu:1", "cpu:2"]
    assert all(np.isfinite(m.losses)) and len(m.losses) == 4
    # each measurement starts from the same weights: the first loss repeats
    again = env.measure(np.zeros(n, dtype=np.int64))
    assert again.losses[0] == pytest.approx(m.losses[0], rel=1e-5)
    assert set(m.log_fields()) >= {"step_times_s", "iqr_s", "steps", "threads"}


def test_a_step_over_the_time_limit_is_a_failed_placement(resnet_small):
    env = make_environment("real", resnet_small, load_cluster("k80x2"),
                           {"repeats": 2, "warmup": 0, "time_limit_s": 1e-9, "devices": ["cpu", "cpu", "cpu"]})
    m = env.measure(np.zeros(env.grouping.num_groups, dtype=np.int64))
    assert m.step_time_s is None and not m.oom and "over the time limit" in m.failure and m.steps == 1


OOM_MODULE = '''
import torch
from torch import nn


def step():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 2)

        def forward(self, x, y):
            huge = torch.zeros(1 << 50, device=x.device)  # 4 PiB: no machine allocates it
            return nn.functional.cross_entropy(self.lin(x), y) + huge[:1].sum()
    return Net(), (torch.randn(4, 8), torch.randint(0, 2, (4,)))
'''


def test_an_out_of_memory_step_is_recorded_as_oom(tmp_path, monkeypatch):
    (tmp_path / "oommodel.py").write_text(OOM_MODULE)
    monkeypatch.chdir(tmp_path)
    prepared = prepare_source(TorchSource(spec="oommodel:step"))
    env = make_environment("real", prepared, load_cluster("cpu4"), {"repeats": 1, "warmup": 0})
    m = env.measure(np.zeros(env.grouping.num_groups, dtype=np.int64))
    assert m.oom and m.step_time_s is None and m.failure is None
    json.dumps(m.log_fields())  # the placement log can keep it


def test_gpt_starts_from_gpt2s_initialization(gpt_small):
    """The GPT benchmark's weights, as real execution builds them, follow GPT-2's initialization
    (N(0, 0.02), residual projections scaled by 1/sqrt(2 layers)), not PyTorch's N(0, 1) embedding:
    with the output projection tied to an N(0, 1) table the logits' gradient is partly subnormal and
    the host CPU's matrix products ran 28x slower on the H200's host (compgraph.torch_models.gpt2_init)."""
    from compgraph.torch_models import GPT2_INIT_STD, GPT_SIZES

    step, build = load_step(gpt_small)
    torch.manual_seed(0)
    module, args, optimizer = build()
    t = step_tensors(step, module, args, optimizer, 0)
    layers = GPT_SIZES["small"].layers
    assert float(t["wte.weight"].std()) == pytest.approx(GPT2_INIT_STD, rel=0.1)
    assert float(t["wpe.weight"].std()) == pytest.approx(GPT2_INIT_STD, rel=0.15)
    assert float(t["h.0.attn.c_attn.weight"].std()) == pytest.approx(GPT2_INIT_STD, rel=0.1)
    resid = GPT2_INIT_STD / (2 * layers) ** 0.5
    assert float(t["h.1.attn.c_proj.weight"].std()) == pytest.approx(resid, rel=0.15)
    assert float(t["h.1.mlp.2.weight"].std()) == pytest.approx(resid, rel=0.1)
    assert float(t["h.0.attn.c_attn.bias"].abs().max()) == 0.0
    assert torch.equal(t["ln_f.weight"], torch.ones_like(t["ln_f.weight"]))


BIG_COPY_MODULE = '''
import torch
from torch import nn


def step():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.ones(1024))
            self.b = nn.Parameter(torch.ones(1024))

        def forward(self, x):
            return ((x * self.a) * self.b).square().mean()
    return Net(), (torch.randn(9216, 1024),)  # 36 MiB activations: above glibc's largest mmap threshold
'''


HISTORY_SCRIPT = '''
import json, sys
import numpy as np
from cluster.factory import make_environment
from cluster.spec import load_cluster
from cluster.torch_real import leave_heap_history
from compgraph.frontends import TorchSource, prepare_source

if __name__ == "__main__":
    prepared = prepare_source(TorchSource(spec="bigcopy:step"))
    options = {"repeats": 2, "warmup": 1, "devices": ["cpu", "cpu:1", "cpu:2"]}
    env = make_environment("real", prepared, load_cluster("k80x2"), options)
    gp = np.arange(env.grouping.num_groups) % 2  # the activations copied between cpu and cpu:1
    keep = leave_heap_history(1 << 30)
    here = env.measure(gp)
    isolated = make_environment("real", prepared, load_cluster("k80x2"), {**options, "isolate": True}).measure(gp)
    reused = make_environment("real", prepared, load_cluster("k80x2"),
                              {**options, "repeats": 3, "isolate": True, "host_memory": "reuse"}).measure(gp)
    print(json.dumps({name: m.log_fields() | {"losses": m.losses, "page_faults": m.page_faults}
                      for name, m in (("here", here), ("isolated", isolated), ("reused", reused))}))
'''


@pytest.mark.skipif(not has_glibc(), reason="glibc's heap")
def test_an_isolated_measurement_pays_for_host_pages_whatever_ran_before(tmp_path):
    """In a process whose heap holds freed memory (as after other placements' steps), a step's new
    36 MiB tensors land in pages already faulted in; measured in a process of its own (``isolate``), the
    same placement faults in every page of them, as a training run of it would. The loss is the same.
    The first part runs in a new interpreter: there the main thread allocates from glibc's main arena,
    whose heap keeps freed memory (a thread moved to another arena, as in a long pytest process, gets
    heaps of at most 64 MiB that glibc trims)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "bigcopy.py").write_text(BIG_COPY_MODULE)
    (tmp_path / "history.py").write_text(HISTORY_SCRIPT)
    root = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "history.py"], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    here, isolated = out["here"], out["isolated"]
    pages = 9216 * 1024 * 4 // 4096
    assert not here["isolated"] and isolated["isolated"]
    assert here["page_faults_per_step"] < 0.5 * pages  # the heap's pages reused
    assert isolated["page_faults_per_step"] > 4 * pages  # several new tensors of 36 MiB, every page faulted in
    assert isolated["losses"] == pytest.approx(here["losses"], rel=1e-6)
    # host_memory="reuse" (glibc keeps freed memory, maps nothing anew): after the warm-up the same
    # process-of-its-own measurement reuses most pages; the same losses. Most, not all: 0 faults a step
    # on the development machine, one 36 MiB tensor's 9,216 a step on the CI machine of 2026-11-28
    reused = out["reused"]
    assert reused["isolated"] and reused["host_memory"] == "reuse" and isolated["host_memory"] == "default"
    assert reused["page_faults_per_step"] < 0.25 * isolated["page_faults_per_step"], (reused["page_faults"],
                                                                                     isolated["page_faults"])
    assert reused["losses"][:3] == pytest.approx(here["losses"][:3], rel=1e-6)


def test_host_memory_is_checked_by_name():
    prepared = prepare_source(BenchmarkSource(model="resnet50_torch", size="small"))
    with pytest.raises(ValueError, match="host_memory: 'keep'; valid: default, reuse"):
        TorchRealEnvironment(prepared, load_cluster("cpu4"), host_memory="keep")


@pytest.mark.parametrize("model", ["gpt", "resnet50_torch"])
def test_the_pytorch_benchmarks_prepared_steps_pickle_for_an_isolated_measurement(model):
    """``isolate`` hands the prepared step to a spawned process by pickle: every part of the PyTorch
    benchmarks' prepared steps must pickle (a lambda in GPT's benchmark entry made each isolated GPT
    placement fail on the lent H200 of 2026-11-28)."""
    import pickle

    from compgraph.frontends import BenchmarkSource, prepare_source

    prepared = prepare_source(BenchmarkSource(model=model, size="small"))
    again = pickle.loads(pickle.dumps(prepared))
    cfg = again.config
    assert again.benchmark.num_layers(cfg) == prepared.benchmark.num_layers(prepared.config) > 0
