"""The cost model "as TensorFlow executed it" (cluster/cost_model.py) by hand-computed cases:
per-op-type and size efficiencies, compute + memory, executor overhead, Send/Recv overhead,
host staging between GPUs without peer access, and the allocator overhead's OOM rule, each
checked through both simulators."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.cost_model import effective_link, op_time_matrix, transfer_time
from cluster.fast_simulator import FastSimulator
from cluster.simulator import Simulator
from cluster.spec import ClusterSpec
from compgraph.ir import Edge, Op, OpGraph


def _op(name, typ, flops=0.0, nbytes=0.0, alloc=0, out=0):
    return Op(name=name, type=typ, output_shapes=[(1,)], output_bytes=[out], flops=flops, bytes_accessed=nbytes,
              alloc_bytes=alloc)


def _spec(overlap=True, transfer=None, gpu_extra=None, cpu_extra=None, memory=1e12):
    gpu = dict(kind="gpu", peak_flops=1e12, memory_bandwidth=1e11, memory_bytes=memory, op_overhead_s=1e-5,
               **(gpu_extra or {}))
    return ClusterSpec(
        name="t",
        devices=[dict(name="/cpu:0", kind="cpu", peak_flops=1e11, memory_bandwidth=1e10, memory_bytes=1e12, **(cpu_extra or {})),
                 dict(name="/gpu:0", **gpu), dict(name="/gpu:1", **gpu)],
        default_link=dict(bandwidth=1e10, latency_s=1e-5),
        transfer=transfer or {},
        compute_memory_overlap=overlap,
    )


def test_defaults_are_the_roofline_plus_overhead():
    """MatMul 2e9 FLOP, 1e8 bytes on the GPU: max(2e9/1e12, 1e8/1e11) + 1e-5 = 2e-3 + 1e-5."""
    g = OpGraph("g", [_op("a", "MatMul", 2e9, 1e8)], [])
    t = op_time_matrix(g, _spec())
    assert t[0, 1] == pytest.approx(2.01e-3)
    assert t[0, 0] == pytest.approx(max(2e9 / 1e11, 1e8 / 1e10))  # CPU: 0.02 s, no overhead


def test_type_and_size_efficiency_and_compute_plus_memory():
    """GPU: dense_efficiency 0.5, half_efficiency_flops 1e9, memory_efficiency 0.5, sum (grappler default).

    MatMul 1e9 FLOP, 1e8 bytes: eff = 0.5 * 1e9 / (1e9 + 1e9) = 0.25; compute 1e9 / 2.5e11 = 4e-3;
    memory 1e8 / 5e10 = 2e-3; t = 4e-3 + 2e-3 + 1e-5 = 6.01e-3.
    Conv2D 1e9 FLOP, 0 bytes, conv_efficiency 0.1: eff 0.05, t = 1e9 / 5e10 + 1e-5 = 0.02001.
    Add 1e9 FLOP, 0 bytes, other_efficiency 0.2 (no size term): t = 1e9 / 2e11 + 1e-5 = 5.01e-3.
    """
    g = OpGraph("g", [_op("a", "MatMul", 1e9, 1e8), _op("b", "Conv2D", 1e9), _op("c", "AddV2", 1e9)], [])
    spec = _spec(overlap=False, gpu_extra=dict(dense_efficiency=0.5, conv_efficiency=0.1, other_efficiency=0.2,
                                               half_efficiency_flops=1e9, memory_efficiency=0.5))
    t = op_time_matrix(g, spec)
    assert t[:, 1] == pytest.approx([6.01e-3, 0.02001, 5.01e-3])
    assert t[:, 2] == pytest.approx(t[:, 1])
    assert t[0, 0] == pytest.approx(1e9 / 1e11 + 1e8 / 1e10)  # the CPU keeps efficiency 1: 0.01 + 0.01


def test_send_recv_overhead_and_host_staging():
    """Link 10 GB/s, 10 us; Send/Recv 1 ms; bandwidth_efficiency 0.5; no GPU peer access.

    CPU -> GPU, 1e8 bytes: 1e-3 + 1e-5 + 1e8 / 5e9 = 0.02101 s.
    GPU -> GPU staged through the CPU: 1e-3 + 2 * 1e-5 + 2 * 1e8 / 5e9 = 0.04102 s.
    With peer access GPU -> GPU costs as CPU -> GPU."""
    staged = _spec(transfer=dict(send_recv_overhead_s=1e-3, bandwidth_efficiency=0.5, gpu_peer_access=False))
    for a, b, want in ((0, 1, 0.02101), (1, 0, 0.02101), (1, 2, 0.04102)):
        link = staged.link(a, b)
        assert transfer_time(1e8, link.bandwidth, link.latency_s) == pytest.approx(want)
    peer = _spec(transfer=dict(send_recv_overhead_s=1e-3, bandwidth_efficiency=0.5, gpu_peer_access=True))
    link = effective_link(peer, 1, 2)
    assert transfer_time(1e8, link.bandwidth, link.latency_s) == pytest.approx(0.02101)
    assert _spec().link(1, 2).latency_s == pytest.approx(1e-5)  # the default transfer leaves the link as it is


def test_a_copy_to_the_gpu_can_have_its_own_efficiency():
    """Link 10 GB/s, 10 us; bandwidth_efficiency 0.5, host_to_device_efficiency 0.25, 1e8 bytes:
    CPU -> GPU 1e-5 + 1e8 / 2.5e9 = 0.04001 s; GPU -> CPU 1e-5 + 1e8 / 5e9 = 0.02001 s; GPU -> GPU
    (peer) 0.02001 s; staged through the CPU: 2e-5 + 1e8 / 5e9 + 1e8 / 2.5e9 = 0.06002 s."""
    tr = dict(bandwidth_efficiency=0.5, host_to_device_efficiency=0.25)
    for peer, a, b, want in ((True, 0, 1, 0.04001), (True, 1, 0, 0.02001), (True, 1, 2, 0.02001),
                             (False, 1, 2, 0.06002)):
        link = _spec(transfer={**tr, "gpu_peer_access": peer}).link(a, b)
        assert transfer_time(1e8, link.bandwidth, link.latency_s) == pytest.approx(want), (peer, a, b)
    with pytest.raises(ValueError, match="host_to_device_efficiency"):
        _spec(transfer={"host_to_device_efficiency": 1.5})


@pytest.mark.parametrize("engine", [Simulator, FastSimulator])
def test_simulators_use_the_staged_transfer(engine):
    """a (gpu0) -> 1e8 bytes -> b (gpu1). Ops: Add 1e9 FLOP at other_efficiency 1, 0 bytes: 1e-3 + 1e-5 each.
    Step = 1.01e-3 + 0.04102 (staged transfer) + 1.01e-3 = 0.04304 s."""
    spec = _spec(transfer=dict(send_recv_overhead_s=1e-3, bandwidth_efficiency=0.5, gpu_peer_access=False))
    g = OpGraph("g", [_op("a", "AddV2", 1e9, out=int(1e8), alloc=int(1e8)), _op("b", "AddV2", 1e9)],
                [Edge(0, 1, int(1e8))])
    r = engine(g, spec).run(np.array([1, 2]))
    assert r.step_time_s == pytest.approx(0.04304)


@pytest.mark.parametrize("engine", [Simulator, FastSimulator])
def test_allocator_overhead_decides_oom(engine):
    """One op allocating 600 bytes on a 1000-byte GPU: fits with allocator_overhead 1.0 (600 <= 1000),
    OOM with 2.0 (2 x 600 > 1000); the reported peak stays the tensors' 600 bytes."""
    g = OpGraph("g", [_op("a", "AddV2", 1.0, alloc=600, out=600)], [])
    for overhead, oom in ((1.0, False), (2.0, True)):
        spec = _spec(memory=1000, gpu_extra=dict(allocator_overhead=overhead))
        r = engine(g, spec).run(np.array([1]))
        assert r.oom is oom and r.peak_memory_bytes[1] == 600


def test_peaks_by_precision_on_tensor_cores():
    """GPU: FP32 1e12, tensor cores TF32 8e12, BF16 16e12, FP16 16e12; TF32 for convolutions only
    (PyTorch's defaults). 1e9 FLOP, 0 bytes, efficiency 1, overhead 1e-5:
    aten.mm bf16 -> 1e9 / 16e12 = 6.25e-5; aten.mm fp32 (no TF32 for products) -> 1e-3;
    aten.convolution fp32 (TF32) -> 1.25e-4; aten.mul bf16 (not a matrix op) -> 1e-3; fp16 mm -> 6.25e-5.
    The CPU has no tensor cores: every op at its 1e11."""
    ops = [Op("a", "aten.mm", [(1,)], [0], 1e9, dtype="bfloat16"), Op("b", "aten.mm", [(1,)], [0], 1e9),
           Op("c", "aten.convolution", [(1,)], [0], 1e9), Op("d", "aten.mul", [(1,)], [0], 1e9, dtype="bfloat16"),
           Op("e", "aten.mm", [(1,)], [0], 1e9, dtype="float16")]
    spec = _spec(gpu_extra=dict(tensor_peak_flops={"tf32": 8e12, "bfloat16": 16e12, "float16": 16e12},
                                tf32_conv=True))
    t = op_time_matrix(OpGraph("g", ops, []), spec)
    assert t[:, 1] == pytest.approx(np.array([6.25e-5, 1e-3, 1.25e-4, 1e-3, 6.25e-5]) + 1e-5)
    assert t[:, 0] == pytest.approx([1e9 / 1e11] * 5)
    # without tensor-core figures (every GPU before Volta) the precision changes nothing
    assert op_time_matrix(OpGraph("g", ops, []), _spec())[:, 1] == pytest.approx([1e-3 + 1e-5] * 5)


def test_per_class_memory_efficiency_prices_only_its_class():
    """A CPU's ``conv_memory_efficiency`` / ``dense_memory_efficiency`` replace ``memory_efficiency`` in
    the memory term of convolutions / dense ops alone (compute + memory, no overlap): 1e8 bytes over
    1e10 B/s at 0.5 = 0.02 s, at 0.1 = 0.1 s; an element-wise op keeps 0.5; ``None`` changes nothing."""
    g = OpGraph("g", [_op("c", "Conv2D", 0.0, 1e8), _op("m", "MatMul", 0.0, 1e8), _op("a", "Add", 0.0, 1e8)], [])
    plain = op_time_matrix(g, _spec(overlap=False, cpu_extra=dict(memory_efficiency=0.5)))[:, 0]
    assert plain == pytest.approx([0.02, 0.02, 0.02])
    split = op_time_matrix(g, _spec(overlap=False, cpu_extra=dict(memory_efficiency=0.5, conv_memory_efficiency=0.1,
                                                                   dense_memory_efficiency=0.25)))[:, 0]
    assert split == pytest.approx([0.1, 0.04, 0.02])
