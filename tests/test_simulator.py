"""Tests for cluster.simulator.Simulator and cluster.simulated.SimulatedEnvironment.

Every expected value is computed by hand in the test's docstring. The graphs are tiny
hand-built OpGraphs; op times are given with ``op_times=`` (rows: ops, columns: devices)
so the arithmetic stays in round numbers, and links use round bandwidths and latencies.
"""

from __future__ import annotations

import numpy as np
import pytest

from cluster.simulated import SimulatedEnvironment
from cluster.simulator import Simulator
from cluster.spec import ClusterSpec, load_cluster
from compgraph.ir import Edge, Grouping, Op, OpGraph

# ---------------------------------------------------------------------------- helpers


def _dev(name: str, kind: str = "gpu", memory_bytes: float = 1e12, **kw) -> dict:
    return dict(
        name=name,
        kind=kind,
        peak_flops=kw.pop("peak_flops", 1e12),
        memory_bandwidth=kw.pop("memory_bandwidth", 1e12),
        memory_bytes=memory_bytes,
        op_overhead_s=kw.pop("op_overhead_s", 0.0),
        compute_pool=kw.pop("compute_pool", None),
    )


def _spec(*devices: dict, bandwidth: float = 1000.0, latency_s: float = 0.0) -> ClusterSpec:
    """Devices with a default link of ``bandwidth`` bytes/s and ``latency_s`` seconds."""
    return ClusterSpec(
        name="test",
        devices=list(devices),
        default_link={"bandwidth": bandwidth, "latency_s": latency_s},
    )


def _op(name: str, out_bytes: int = 0, alloc: int = 0, param: int = 0, gpu_kernel: bool = True,
        n_out: int = 1, flops: float = 0.0) -> Op:
    return Op(
        name=name,
        type="Test",
        output_shapes=[(out_bytes // 4,)] * n_out,
        output_bytes=[out_bytes] * n_out,
        flops=flops,
        alloc_bytes=alloc,
        param_bytes=param,
        gpu_kernel=gpu_kernel,
    )


def _times(*rows) -> np.ndarray:
    return np.array(rows, dtype=np.float64)


# ---------------------------------------------------------------------------- 1. chain


def test_chain_on_one_device_is_sum_of_op_times():
    """a -> b -> c, all on dev0 (dev1 idle); times on dev0: a=1, b=2, c=4.

    One device runs one op at a time, no transfers:
        step = 1 + 2 + 4 = 7;  compute_s = [7, 0];  transfer_s = [0, 0].
    The dev1 column (10, 20, 40) must not be used.
    """
    g = OpGraph("chain", [_op("a", 100), _op("b", 100), _op("c", 100)],
                [Edge(0, 1, 100), Edge(1, 2, 100)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1.0, latency_s=1.0)
    sim = Simulator(g, spec, op_times=_times([1, 10], [2, 20], [4, 40]))
    r = sim.run(np.array([0, 0, 0]))
    assert r.step_time_s == pytest.approx(7.0)
    assert r.compute_s == pytest.approx([7.0, 0.0])
    assert r.transfer_s == pytest.approx([0.0, 0.0])
    assert not r.oom and r.oom_devices == []


def test_chain_on_other_device_uses_that_column():
    """The same chain all on dev1: step = 10 + 20 + 40 = 70; compute_s = [0, 70]."""
    g = OpGraph("chain", [_op("a", 100), _op("b", 100), _op("c", 100)],
                [Edge(0, 1, 100), Edge(1, 2, 100)])
    spec = _spec(_dev("d0"), _dev("d1"))
    r = Simulator(g, spec, op_times=_times([1, 10], [2, 20], [4, 40])).run(np.array([1, 1, 1]))
    assert r.step_time_s == pytest.approx(70.0)
    assert r.compute_s == pytest.approx([0.0, 70.0])
    assert r.transfer_s == pytest.approx([0.0, 0.0])


def test_op_times_wrong_shape_raises():
    """op_times must be [num_ops, num_devices] = (2, 2); (2, 3) is refused."""
    g = OpGraph("g", [_op("a"), _op("b")], [Edge(0, 1, 0)])
    with pytest.raises(ValueError, match="op_times"):
        Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=np.zeros((2, 3)))


# ---------------------------------------------------------------------------- 2. two branches


def test_two_branches_two_devices_transfers_and_makespan():
    """src(d0) -> x(d0), src -> y(d1), x -> sink(d0), y -> sink(d0).

    Link: latency 0.5 s, 1000 B/s. Times: src=1, x=3, y=2 (on d1), sink=1 (all on their device;
    the other column is 99 so using the wrong one would show).
      t=0..1   src on d0
      t=1..4   x on d0 (local input, no transfer)
      t=1..3.5 send src->y: 0.5 + 2000/1000 = 2.5 s
      t=3.5..5.5 y on d1
      t=5.5..6.5 send y->sink: 0.5 + 500/1000 = 1.0 s
      t=6.5..7.5 sink on d0 (x's output has been ready since 4)
    step = 7.5; compute_s = [1+3+1, 2] = [5, 2];
    transfer_s = [2.5 + 1.0, 2.5 + 1.0] = [3.5, 3.5] (each transfer counts at both ends).
    """
    ops = [_op("src", 2000), _op("x", 1000), _op("y", 500), _op("sink", 0)]
    edges = [Edge(0, 1, 2000), Edge(0, 2, 2000), Edge(1, 3, 1000), Edge(2, 3, 500)]
    g = OpGraph("branches", ops, edges)
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=0.5)
    times = _times([1, 99], [3, 99], [99, 2], [1, 99])
    r = Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0]))
    assert r.step_time_s == pytest.approx(7.5)
    assert r.compute_s == pytest.approx([5.0, 2.0])
    assert r.transfer_s == pytest.approx([3.5, 3.5])


def test_transfer_time_counts_at_both_ends_only():
    """Three devices; a(d0) -> b(d1), 3000 bytes at 1000 B/s, latency 1: one transfer of 4 s.

    step = 1 (a) + 4 (send) + 1 (b) = 6; transfer_s = [4, 4, 0] (d2 is not on the path).
    """
    g = OpGraph("g", [_op("a", 3000), _op("b")], [Edge(0, 1, 3000)])
    spec = _spec(_dev("d0"), _dev("d1"), _dev("d2"), bandwidth=1000.0, latency_s=1.0)
    r = Simulator(g, spec, op_times=np.ones((2, 3))).run(np.array([0, 1]))
    assert r.step_time_s == pytest.approx(6.0)
    assert r.transfer_s == pytest.approx([4.0, 4.0, 0.0])
    assert r.compute_s == pytest.approx([1.0, 1.0, 0.0])


def test_control_edge_across_devices_is_zero_byte_transfer():
    """a(d0) -control-> b(d1); link latency 2 s, 1000 B/s. A control edge moves 0 bytes:
    transfer = 2 + 0/1000 = 2 s; step = 1 + 2 + 1 = 4; transfer_s = [2, 2]."""
    g = OpGraph("g", [_op("a", 5000), _op("b")], [Edge(0, 1, 0, control=True)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=2.0)
    r = Simulator(g, spec, op_times=np.ones((2, 2))).run(np.array([0, 1]))
    assert r.step_time_s == pytest.approx(4.0)
    assert r.transfer_s == pytest.approx([2.0, 2.0])


# ---------------------------------------------------------------------------- 3. send once


def test_tensor_sent_once_per_destination_device():
    """src(d0) feeds y1 and y2, both on d1: the 1000-byte tensor crosses the link once.

    Link 1000 B/s, latency 0: one transfer of 1 s.
      src 0..1; send 1..2; y1 2..3; y2 3..4 -> step = 4
    transfer_s = [1, 1] (sent twice it would be [2, 2]);
    d1 holds one received copy of 1000 bytes (alloc of y1, y2 = 0): peak d1 = 1000
    (two copies would be 2000).
    """
    ops = [_op("src", 1000, alloc=1000), _op("y1"), _op("y2")]
    g = OpGraph("fanout", ops, [Edge(0, 1, 1000), Edge(0, 2, 1000)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0)
    r = Simulator(g, spec, op_times=np.ones((3, 2))).run(np.array([0, 1, 1]))
    assert r.step_time_s == pytest.approx(4.0)
    assert r.transfer_s == pytest.approx([1.0, 1.0])
    assert r.peak_memory_bytes == [1000, 1000]


def test_tensor_sent_once_to_each_of_two_devices():
    """src(d0) feeds y1 on d1 and y2 on d2: two transfers over two different links (1 s each,
    in parallel). transfer_s = [1+1, 1, 1] = [2, 1, 1]; step = 1 + 1 + 1 = 3."""
    ops = [_op("src", 1000), _op("y1"), _op("y2")]
    g = OpGraph("fanout2", ops, [Edge(0, 1, 1000), Edge(0, 2, 1000)])
    spec = _spec(_dev("d0"), _dev("d1"), _dev("d2"), bandwidth=1000.0)
    r = Simulator(g, spec, op_times=np.ones((3, 3))).run(np.array([0, 1, 2]))
    assert r.step_time_s == pytest.approx(3.0)
    assert r.transfer_s == pytest.approx([2.0, 1.0, 1.0])


# ---------------------------------------------------------------------------- 4. link queue


def test_one_transfer_at_a_time_per_link_direction():
    """src(d0) has two outputs: output 0 (1000 B) -> y1(d1), output 1 (3000 B) -> y2(d1).

    Both are sent when src finishes at t=1, over the same link d0->d1 (1000 B/s, latency 0.5):
      output 0: t=1 .. 1 + 0.5 + 1 = 2.5
      output 1 waits for it: t=2.5 .. 2.5 + 0.5 + 3 = 6.0
      y1 2.5..3.5; y2 6..7 -> step = 7   (in parallel it would be 1 + 3.5 + 1 = 5.5)
    transfer_s = [1.5 + 3.5, same] = [5, 5].
    """
    src = Op("src", "Test", [(250,), (750,)], [1000, 3000])
    g = OpGraph("two_out", [src, _op("y1"), _op("y2")],
                [Edge(0, 1, 1000, src_output=0), Edge(0, 2, 3000, src_output=1)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=0.5)
    r = Simulator(g, spec, op_times=np.ones((3, 2))).run(np.array([0, 1, 1]))
    assert r.step_time_s == pytest.approx(7.0)
    assert r.transfer_s == pytest.approx([5.0, 5.0])


def test_two_link_directions_run_concurrently():
    """a(d0) -> a2(d1) and b(d1) -> b2(d0), 1000 B each over 1000 B/s, latency 0.

    a and b run 0..1 on their devices; both sends start at t=1 in opposite directions, each
    with its own queue: both arrive at t=2; a2, b2 run 2..3 -> step = 3 (one shared queue
    would give 4). transfer_s = [1+1, 1+1] = [2, 2].
    """
    ops = [_op("a", 1000), _op("b", 1000), _op("a2"), _op("b2")]
    g = OpGraph("cross", ops, [Edge(0, 2, 1000), Edge(1, 3, 1000)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0)
    r = Simulator(g, spec, op_times=np.ones((4, 2))).run(np.array([0, 1, 1, 0]))
    assert r.step_time_s == pytest.approx(3.0)
    assert r.transfer_s == pytest.approx([2.0, 2.0])


# ---------------------------------------------------------------------------- 5. FIFO order


def _fifo_graph() -> tuple[OpGraph, np.ndarray]:
    """0:a(d0, 4 s)   1:p(d1, 1)   2:q(d1, 1)   3:w(d0, 1)   4:z(d0, 1)   5:tail(d1, 10).
    Edges (0 bytes, link latency 0 -> transfers take 0 s): p->q, q->w, p->z, w->tail."""
    ops = [_op(n) for n in ("a", "p", "q", "w", "z", "tail")]
    edges = [Edge(1, 2, 0), Edge(2, 3, 0), Edge(1, 4, 0), Edge(3, 5, 0)]
    times = _times([4, 4], [1, 1], [1, 1], [1, 1], [1, 1], [10, 10])
    return OpGraph("fifo", ops, edges), times


def test_device_runs_ready_ops_in_fifo_order():
    """See _fifo_graph. d0 is busy with a over 0..4.
      p 0..1 on d1 -> z (index 4) ready on d0 at t=1
      q 1..2 on d1 -> w (index 3) ready on d0 at t=2
    FIFO: at t=4 d0 runs z 4..5 then w 5..6; tail on d1 6..16 -> step = 16.
    (Lowest index first would run w 4..5, tail 5..15 -> 15.)
    compute_s = [4+1+1, 1+1+10] = [6, 12].
    """
    g, times = _fifo_graph()
    r = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=times).run(np.array([0, 1, 1, 0, 0, 1]))
    assert r.step_time_s == pytest.approx(16.0)
    assert r.compute_s == pytest.approx([6.0, 12.0])


def test_initially_ready_ops_run_in_index_order():
    """Three sources on d0: s0 (1 s), s1 (1 s), s2 (1 s); s0 -> t(d1, 10 s), link 0 s.
    Index order at t=0: s0 0..1, t 1..11 -> step = 11. Were s0 run last: 3 + 10 = 13."""
    ops = [_op("s0"), _op("s1"), _op("s2"), _op("t")]
    g = OpGraph("src3", ops, [Edge(0, 3, 0)])
    times = _times([1, 1], [1, 1], [1, 1], [10, 10])
    r = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=times).run(np.array([0, 0, 0, 1]))
    assert r.step_time_s == pytest.approx(11.0)


def test_same_event_ties_broken_by_op_index_even_with_unsorted_edges():
    """src(0, d0) -> b(1, d0), src -> c(2, d0), b -> t(3, d1); edges listed c first.

    b and c become ready in the same event (src finishes at t=1): by op index b runs first.
      src 0..1; b 1..2; c 2..3; t (d1, 10 s, 0-s transfer) 2..12 -> step = 12.
    Queued in edge order (c first): c 1..2, b 2..3, t 3..13 -> 13.
    """
    ops = [_op("src"), _op("b"), _op("c"), _op("t")]
    edges = [Edge(0, 2, 0), Edge(0, 1, 0), Edge(1, 3, 0)]
    g = OpGraph("tie", ops, edges)
    times = _times([1, 1], [1, 1], [1, 1], [10, 10])
    r = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=times).run(np.array([0, 0, 0, 1]))
    assert r.step_time_s == pytest.approx(12.0)


# ---------------------------------------------------------------------------- 6. memory


def _mem_chain() -> OpGraph:
    """a -> b -> c; alloc a=100, b=200, c=400; a holds 1000 param bytes."""
    ops = [_op("a", 100, alloc=100, param=1000), _op("b", 200, alloc=200), _op("c", 400, alloc=400)]
    return OpGraph("memchain", ops, [Edge(0, 1, 100), Edge(1, 2, 200)])


def test_memory_peak_of_chain_by_hand():
    """_mem_chain on one device, 1 s per op:
      t=0 a starts: live 100
      t=1 a ends (b reads it); b starts: live 100 + 200 = 300
      t=2 b ends: a's last reader done -> free 100 -> 200; c starts: 200 + 400 = 600
      t=3 c ends: free b (200), c has no reader (400) -> 0
    peak = resident 1000 + live peak 600 = 1600.
    """
    spec = _spec(_dev("d0", memory_bytes=1e6))
    r = Simulator(_mem_chain(), spec, op_times=np.ones((3, 1))).run(np.array([0, 0, 0]))
    assert r.peak_memory_bytes == [1600]
    assert r.oom is False and r.oom_devices == []


def test_memory_oom_on_small_device_not_on_big_one():
    """_mem_chain's peak is 1600 bytes (see above). On d0 with 1500 bytes: OOM naming d0;
    the step time is still reported (3 s). All on d1 with 2000 bytes: no OOM."""
    spec = _spec(_dev("small", memory_bytes=1500), _dev("big", memory_bytes=2000))
    sim = Simulator(_mem_chain(), spec, op_times=np.ones((3, 2)))
    r = sim.run(np.array([0, 0, 0]))
    assert r.oom is True
    assert r.oom_devices == ["small"]
    assert r.peak_memory_bytes == [1600, 0]
    assert r.step_time_s == pytest.approx(3.0)
    r2 = sim.run(np.array([1, 1, 1]))
    assert r2.oom is False and r2.oom_devices == []
    assert r2.peak_memory_bytes == [0, 1600]


def test_memory_freed_only_after_last_consumer():
    """Diamond a -> b, a -> c, b -> d, c -> d on one device; alloc a=100, b=10, c=20, d=5.
      a 0..1: live 100
      b 1..2: live 110; at end a still has reader c; b has reader d
      c 2..3: live 130 (peak); at end a is freed -> 30
      d 3..4: live 35; at end b, c, d freed -> 0
    peak = 130 (freeing a after its first reader would give 110).
    """
    ops = [_op("a", alloc=100), _op("b", alloc=10), _op("c", alloc=20), _op("d", alloc=5)]
    g = OpGraph("diamond", ops, [Edge(0, 1, 4), Edge(0, 2, 4), Edge(1, 3, 4), Edge(2, 3, 4)])
    r = Simulator(g, _spec(_dev("d0")), op_times=np.ones((4, 1))).run(np.zeros(4, dtype=int))
    assert r.peak_memory_bytes == [130]


def test_memory_across_devices_received_copy_and_sender_buffer():
    """a(d0, alloc 100, output 100 B) -> b(d1, alloc 50); params: a 1000 on d0, b 7 on d1.

    d0: a's buffer 100 is live from a's start until its transfer arrives -> peak 1000 + 100.
    d1: received copy (a's output_bytes = 100) on arrival, then b's 50 -> peak 7 + 150 = 157.
    """
    ops = [_op("a", 100, alloc=100, param=1000), _op("b", 50, alloc=50, param=7)]
    g = OpGraph("xmem", ops, [Edge(0, 1, 100)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=100.0)
    r = Simulator(g, spec, op_times=np.ones((2, 2))).run(np.array([0, 1]))
    assert r.peak_memory_bytes == [1100, 157]
    assert r.step_time_s == pytest.approx(3.0)  # 1 + 100/100 + 1


# ---------------------------------------------------------------------------- 7. soft placement


def test_op_without_gpu_kernel_runs_on_cpu():
    """d0 = CPU, d1 = GPU. a (GPU kernel, 1 s on the GPU) -> k (no GPU kernel: 5 s on the CPU,
    1 s on the GPU); both placed on the GPU. k moves to the CPU (soft placement):
      a 0..1 on GPU; send 1000 B at 1000 B/s: 1..2; k on CPU 2..7 -> step = 7
    compute_s = [5, 1]; transfer_s = [1, 1]; the CPU holds k's 300 param bytes plus the
    1000-byte received copy of a's output: peak [300 + 1000, 0] = [1300, 0].
    (Run on the GPU it would be 1 + 1 = 2 with no transfer.)
    """
    ops = [_op("a", 1000), _op("k", param=300, gpu_kernel=False)]
    g = OpGraph("soft", ops, [Edge(0, 1, 1000)])
    spec = _spec(_dev("cpu0", kind="cpu"), _dev("gpu0", kind="gpu"), bandwidth=1000.0)
    sim = Simulator(g, spec, op_times=_times([3, 1], [5, 1]))
    assert sim.effective_placement(np.array([1, 1])).tolist() == [1, 0]
    r = sim.run(np.array([1, 1]))
    assert r.step_time_s == pytest.approx(7.0)
    assert r.compute_s == pytest.approx([5.0, 1.0])
    assert r.transfer_s == pytest.approx([1.0, 1.0])
    assert r.peak_memory_bytes == [1300, 0]


def test_soft_placement_uses_first_cpu():
    """Devices gpu0, cpu0, cpu1: a no-kernel op on the GPU goes to cpu0 (index 1), taking
    its time there (2 s, not cpu1's 3 s)."""
    g = OpGraph("one", [_op("k", gpu_kernel=False)], [])
    spec = _spec(_dev("gpu0", kind="gpu"), _dev("cpu0", kind="cpu"), _dev("cpu1", kind="cpu"))
    sim = Simulator(g, spec, op_times=_times([1, 2, 3]))
    r = sim.run(np.array([0]))
    assert r.step_time_s == pytest.approx(2.0)
    assert r.compute_s == pytest.approx([0.0, 2.0, 0.0])
    # explicitly placed on cpu1 it stays there
    assert sim.run(np.array([2])).step_time_s == pytest.approx(3.0)


def test_placement_errors():
    """Placement length must be num_ops (2); device indices in 0..1."""
    g = OpGraph("g", [_op("a"), _op("b")], [Edge(0, 1, 0)])
    sim = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=np.ones((2, 2)))
    with pytest.raises(ValueError, match="length"):
        sim.run(np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="out of range"):
        sim.run(np.array([0, 2]))
    with pytest.raises(ValueError, match="out of range"):
        sim.run(np.array([-1, 0]))


# ---------------------------------------------------------------------------- 8. environment


def _env_setup():
    """Two ops in two groups; roofline times with peak 1e9 FLOP/s, overhead 0:
    a: 2e9 FLOP -> 2 s, b: 3e9 FLOP -> 3 s; a -> b, 0 bytes. a holds 1500 param bytes.
    Devices: small (1000 bytes), big (1e6 bytes), link latency 0."""
    ops = [_op("a", flops=2e9, param=1500), _op("b", flops=3e9)]
    g = OpGraph("env", ops, [Edge(0, 1, 0)])
    grouping = Grouping(op_group=np.array([0, 1]), names=["ga", "gb"])
    spec = _spec(_dev("small", memory_bytes=1000, peak_flops=1e9),
                 _dev("big", memory_bytes=1e6, peak_flops=1e9))
    return SimulatedEnvironment(g, grouping, spec)


def test_environment_measure_ok_and_oom():
    """All on big: step = 2 + 3 = 5 s, no OOM. Group ga (with 1500 param bytes) on small
    (1000 bytes): OOM -> step_time_s None, simulated_step_time_s still 5 (0-s transfer)."""
    env = _env_setup()
    m = env.measure(np.array([1, 1]))
    assert m.oom is False
    assert m.step_time_s == pytest.approx(5.0)
    assert m.simulated_step_time_s == pytest.approx(5.0)
    assert m.compute_s == pytest.approx([0.0, 5.0])
    m2 = env.measure(np.array([0, 1]))
    assert m2.oom is True
    assert m2.step_time_s is None
    assert m2.simulated_step_time_s == pytest.approx(5.0)
    assert m2.peak_memory_bytes == [1500, 0]


def test_environment_measure_bad_placements():
    """2 groups, 2 devices: wrong length (1 or 3) and indices 2 / -1 raise ValueError."""
    env = _env_setup()
    for bad in ([0], [0, 0, 0]):
        with pytest.raises(ValueError, match="length"):
            env.measure(np.array(bad))
    for bad in ([0, 2], [-1, 0]):
        with pytest.raises(ValueError, match="out of range"):
            env.measure(np.array(bad))


# ---------------------------------------------------------------------------- 9. real graph


def test_rnnlm_small_all_on_gpu0_is_sum_of_gpu_times(rnnlm_small, k80x2):
    """rnnlm small on k80x2, every group on /gpu:0 (device index 1). The graph has no op
    without a GPU kernel, so it stays on one device: step = sum of the roofline times of
    all ops on /gpu:0 (op_time_matrix column 1), no transfers, only /gpu:0 busy."""
    from cluster.cost_model import op_time_matrix

    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    assert all(op.gpu_kernel for op in graph.ops)
    gpu0 = k80x2.device_names.index("/gpu:0")
    expected = float(op_time_matrix(graph, k80x2)[:, gpu0].sum())
    assert expected > 0
    env = SimulatedEnvironment(graph, grouping, k80x2)
    m = env.measure(np.full(grouping.num_groups, gpu0))
    assert m.oom is False
    assert m.step_time_s == pytest.approx(expected, rel=1e-9)
    assert m.compute_s[gpu0] == pytest.approx(expected, rel=1e-9)
    assert m.transfer_s == pytest.approx([0.0] * len(k80x2.devices))
    assert [c for i, c in enumerate(m.compute_s) if i != gpu0] == [0.0, 0.0]
    assert m.peak_memory_bytes[gpu0] >= graph.total_param_bytes()


# ---------------------------------------------------------------------------- 10. more rules


def test_control_edges_to_one_device_are_one_zero_byte_transfer():
    """a(d0) -control-> b(d1) and a -control-> c(d1); link latency 2 s, 1000 B/s.

    One control transfer per (producer, destination device): 2 + 0/1000 = 2 s, once:
      a 0..1; transfer 1..3; b 3..4; c 4..5 -> step = 5; transfer_s = [2, 2]
    (one transfer per edge would queue a second one 3..5 on the same link: [4, 4]).
    """
    g = OpGraph("ctrl2", [_op("a"), _op("b"), _op("c")],
                [Edge(0, 1, 0, control=True), Edge(0, 2, 0, control=True)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=2.0)
    r = Simulator(g, spec, op_times=np.ones((3, 2))).run(np.array([0, 1, 1]))
    assert r.step_time_s == pytest.approx(5.0)
    assert r.transfer_s == pytest.approx([2.0, 2.0])


def test_received_copy_freed_after_last_consumer_on_destination():
    """a(d0, output 1000 B) -> b1(d1, alloc 10), a -> b2(d1, alloc 20); b1, b2 -> c(d1, alloc 5);
    c -> e(d1, alloc 1010). Link 1000 B/s, latency 0; 1 s per op.
      a 0..1; transfer 1..2: copy of 1000 B on d1 at 2
      b1 2..3: live 1010; the copy still has reader b2
      b2 3..4: live 1030 (peak); b2 was its last consumer -> copy freed -> 30
      c 4..5: 35; b1, b2 freed -> 5;  e 5..6: 1015
    peak d1 = 1030. Never freeing the copy: e would reach 1000 + 5 + 1010 = 2015;
    freeing it after its first consumer: max(1010, 30, 1015) = 1015.
    d0: a's alloc is 0 here, so its peak is 0.
    """
    ops = [_op("a", 1000), _op("b1", alloc=10), _op("b2", alloc=20), _op("c", alloc=5), _op("e", alloc=1010)]
    edges = [Edge(0, 1, 1000), Edge(0, 2, 1000), Edge(1, 3, 4), Edge(2, 3, 4), Edge(3, 4, 4)]
    g = OpGraph("recv", ops, edges)
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0)
    r = Simulator(g, spec, op_times=np.ones((5, 2))).run(np.array([0, 1, 1, 1, 1]))
    assert r.peak_memory_bytes == [0, 1030]
    assert r.step_time_s == pytest.approx(6.0)


def test_listed_link_overrides_default_in_both_directions():
    """cpu, gpu0, gpu1; default link (PCIe-like) 1000 B/s; a listed gpu0<->gpu1 link 4000 B/s,
    latency 0.5 s. 2000-byte tensors, 1 s per op:
      a(gpu0) -> b(gpu1): 0.5 + 2000/4000 = 1 s  -> step 1 + 1 + 1 = 3
      a(gpu1) -> b(gpu0): the same link the other way -> 3
      a(cpu)  -> b(gpu1): default link, 0 + 2000/1000 = 2 s -> step 4
    """
    g = OpGraph("route", [_op("a", 2000), _op("b")], [Edge(0, 1, 2000)])
    spec = ClusterSpec(
        name="route",
        devices=[_dev("cpu", kind="cpu"), _dev("gpu0"), _dev("gpu1")],
        default_link={"bandwidth": 1000.0, "latency_s": 0.0},
        links=[{"between": ["gpu0", "gpu1"], "bandwidth": 4000.0, "latency_s": 0.5}],
    )
    sim = Simulator(g, spec, op_times=np.ones((2, 3)))
    assert sim.run(np.array([1, 2])).step_time_s == pytest.approx(3.0)
    assert sim.run(np.array([2, 1])).step_time_s == pytest.approx(3.0)
    r = sim.run(np.array([0, 2]))
    assert r.step_time_s == pytest.approx(4.0)
    assert r.transfer_s == pytest.approx([2.0, 0.0, 2.0])


def test_different_device_pairs_transfer_concurrently():
    """src(d0) sends 1000 B to y1(d1) and 1000 B to y2(d2); a(d1) sends 1000 B to y3(d2).
    Links 1000 B/s, latency 0; 1 s per op. d0->d2 and d1->d2 are different channels:
      src 0..1 on d0, a 0..1 on d1; transfers src->d1, src->d2 and a->d2 all 1..2
      y1 on d1 2..3; y2, y3 on d2 2..3, 3..4 -> step = 4
    (if transfers into d2 shared one queue, y3 or y2 would wait: step 5).
    """
    ops = [_op("src", 1000), _op("a", 1000), _op("y1"), _op("y2"), _op("y3")]
    edges = [Edge(0, 2, 1000), Edge(0, 3, 1000), Edge(1, 4, 1000)]
    g = OpGraph("pairs", ops, edges)
    spec = _spec(_dev("d0"), _dev("d1"), _dev("d2"), bandwidth=1000.0)
    r = Simulator(g, spec, op_times=np.ones((5, 3))).run(np.array([0, 1, 1, 2, 2]))
    assert r.step_time_s == pytest.approx(4.0)
    assert r.transfer_s == pytest.approx([2.0, 2.0, 2.0])


# ---------------------------------------------------------------------------- 11. critical path


def _steps(r) -> list[tuple]:
    return [(s.kind, s.name, s.start_s, s.end_s) for s in r.critical_path]


def test_critical_path_includes_device_queueing_waits():
    """_fifo_graph (see above), step 16. tail (d1) is the last to finish; it started as soon as
    w's 0-s transfer arrived at 6; w waited in d0's queue behind z (ready at 2, ran 5..6);
    z waited behind a (ready at 1, ran 4..5); a started at 0 with no input:
        a 0..4 -> z 4..5 -> w 5..6 -> transfer w:0 -> d1 6..6 -> tail 6..16
    (z is on the path although w does not read it: it delayed w on d0).
    """
    g, times = _fifo_graph()
    r = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=times).run(np.array([0, 1, 1, 0, 0, 1]))
    assert _steps(r) == [
        ("op", "a", 0.0, 4.0),
        ("op", "z", 4.0, 5.0),
        ("op", "w", 5.0, 6.0),
        ("transfer", "w:0->d1", 6.0, 6.0),
        ("op", "tail", 6.0, 16.0),
    ]
    assert r.critical_path[3].src_device == 0 and r.critical_path[3].dst_device == 1
    assert r.critical_path[-1].end_s == r.step_time_s


def test_critical_path_includes_link_queueing_waits():
    """The two-output graph of test_one_transfer_at_a_time_per_link_direction (step 7):
    y2 ran as soon as output 1 arrived; output 1 waited on link d0->d1 behind output 0:
        src 0..1 -> src:0 -> d1 1..2.5 -> src:1 -> d1 2.5..6 -> y2 6..7
    """
    src = Op("src", "Test", [(250,), (750,)], [1000, 3000])
    g = OpGraph("two_out", [src, _op("y1"), _op("y2")],
                [Edge(0, 1, 1000, src_output=0), Edge(0, 2, 3000, src_output=1)])
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=0.5)
    r = Simulator(g, spec, op_times=np.ones((3, 2))).run(np.array([0, 1, 1]))
    assert _steps(r) == [
        ("op", "src", 0.0, 1.0),
        ("transfer", "src:0->d1", 1.0, 2.5),
        ("transfer", "src:1->d1", 2.5, 6.0),
        ("op", "y2", 6.0, 7.0),
    ]
    assert [s.output for s in r.critical_path] == [-1, 0, 1, -1]


def test_critical_path_follows_last_input_to_arrive():
    """test_two_branches_two_devices_transfers_and_makespan (step 7.5): sink's inputs are x
    (local, ready at 4) and y's transfer (arrives 6.5), so the path goes through y:
        src 0..1 -> src:0 -> d1 1..3.5 -> y 3.5..5.5 -> y:0 -> d0 5.5..6.5 -> sink 6.5..7.5
    """
    ops = [_op("src", 2000), _op("x", 1000), _op("y", 500), _op("sink", 0)]
    edges = [Edge(0, 1, 2000), Edge(0, 2, 2000), Edge(1, 3, 1000), Edge(2, 3, 500)]
    g = OpGraph("branches", ops, edges)
    spec = _spec(_dev("d0"), _dev("d1"), bandwidth=1000.0, latency_s=0.5)
    times = _times([1, 99], [3, 99], [99, 2], [1, 99])
    r = Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0]))
    assert _steps(r) == [
        ("op", "src", 0.0, 1.0),
        ("transfer", "src:0->d1", 1.0, 3.5),
        ("op", "y", 3.5, 5.5),
        ("transfer", "y:0->d0", 5.5, 6.5),
        ("op", "sink", 6.5, 7.5),
    ]


def test_critical_path_of_rnnlm_is_contiguous(rnnlm_small, k80x2):
    """On a real graph under a random group placement, the path starts at 0, each step starts
    when the previous one ends, and it ends at the step time; its op steps are ops that ran."""
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2, engine="reference")
    rng = np.random.default_rng(3)
    placement = rnnlm_small.grouping.expand(rng.integers(0, 3, rnnlm_small.grouping.num_groups))
    r = env.simulator.run(placement)
    path = r.critical_path
    assert path[0].start_s == 0.0
    assert path[-1].end_s == r.step_time_s
    assert all(a.end_s == b.start_s for a, b in zip(path, path[1:]))
    assert any(s.kind == "transfer" for s in path)
    for s in path:
        if s.kind == "op":
            assert s.src_device == placement[s.op]
            assert s.name == rnnlm_small.graph.ops[s.op].name


# ---------------------------------------------------------------------------- 12. compute pools


def test_pool_runs_independent_ops_one_after_the_other():
    """a (d0, 2 s) and b (d1, 3 s), no edges. d0 and d1 in pool "host": the pool runs one op
    at a time, a first (op-index order at t=0): a 0..2, b 2..5 -> step = 2 + 3 = 5, not
    max(2, 3) = 3 as without the pool. Compute seconds stay per device: [2, 3]. Critical
    path: b waited in the pool's queue behind a (on the other device): a 0..2 -> b 2..5."""
    g = OpGraph("indep", [_op("a"), _op("b")], [])
    times = _times([2, 99], [99, 3])
    pooled = _spec(_dev("d0", compute_pool="host"), _dev("d1", compute_pool="host"))
    r = Simulator(g, pooled, op_times=times).run(np.array([0, 1]))
    assert r.step_time_s == pytest.approx(5.0)
    assert r.compute_s == pytest.approx([2.0, 3.0])
    assert _steps(r) == [("op", "a", 0.0, 2.0), ("op", "b", 2.0, 5.0)]
    free = Simulator(g, _spec(_dev("d0"), _dev("d1")), op_times=times).run(np.array([0, 1]))
    assert free.step_time_s == pytest.approx(3.0)


def test_pool_initially_ready_ops_in_op_index_order_whatever_the_device():
    """s0 (d1), s1 (d0), 1 s each, both sources; s0 -> t (d2, 10 s, 0-s link); d0, d1 in one
    pool, d2 outside it. At t=0 the pool queue holds s0, s1 (op index, not device index):
    s0 0..1, t 1..11 on d2 while s1 runs 1..2 -> step = 11 (s1 first would give 1+1+10 = 12).
    compute_s = [1, 1, 10]."""
    g = OpGraph("src2", [_op("s0"), _op("s1"), _op("t")], [Edge(0, 2, 0)])
    spec = _spec(_dev("d0", compute_pool="p"), _dev("d1", compute_pool="p"), _dev("d2"))
    times = _times([1, 1, 1], [1, 1, 1], [10, 10, 10])
    r = Simulator(g, spec, op_times=times).run(np.array([1, 0, 2]))
    assert r.step_time_s == pytest.approx(11.0)
    assert r.compute_s == pytest.approx([1.0, 1.0, 10.0])


def _pool_fifo_graph() -> tuple[OpGraph, np.ndarray, np.ndarray]:
    """_fifo_graph's ops and edges on 3 devices: a (d0, 4 s), p, q, tail on d2 (outside the
    pool), z (index 4) on d0, w (index 3) on d1; d0 and d1 share a pool. 0-byte transfers, 0 s."""
    g, times = _fifo_graph()
    return g, np.concatenate([times, times[:, :1]], axis=1), np.array([0, 2, 2, 1, 0, 2])


def test_pool_runs_ready_ops_in_fifo_order_across_its_devices():
    """See _pool_fifo_graph. The pool (d0 + d1) is busy with a over 0..4; d2 runs p, q:
      p 0..1 on d2 -> z (d0) ready at t=1 (0-s transfer)
      q 1..2 on d2 -> w (d1) ready at t=2
    FIFO across the pool: z 4..5 on d0, then w 5..6 on d1 (though w is on the other device
    and has the lower index); tail on d2 6..16 -> step = 16. Lowest index first would run
    w 4..5, tail 5..15 -> 15; with no pool w runs 2..3 on d1 and tail 3..13 -> 13.
    compute_s = [4 + 1, 1, 1 + 1 + 10] = [5, 1, 12]. Critical path: w waited in the pool
    queue behind z (on d0), z behind a:
        a 0..4 -> z 4..5 -> w 5..6 -> transfer w:0 -> d2 6..6 -> tail 6..16
    """
    g, times, place = _pool_fifo_graph()
    spec = _spec(_dev("d0", compute_pool="host"), _dev("d1", compute_pool="host"), _dev("d2"))
    r = Simulator(g, spec, op_times=times).run(place)
    assert r.step_time_s == pytest.approx(16.0)
    assert r.compute_s == pytest.approx([5.0, 1.0, 12.0])
    assert _steps(r) == [
        ("op", "a", 0.0, 4.0),
        ("op", "z", 4.0, 5.0),
        ("op", "w", 5.0, 6.0),
        ("transfer", "w:0->d2", 6.0, 6.0),
        ("op", "tail", 6.0, 16.0),
    ]
    assert [s.src_device for s in r.critical_path] == [0, 0, 1, 1, 2]
    free = Simulator(g, _spec(_dev("d0"), _dev("d1"), _dev("d2")), op_times=times).run(place)
    assert free.step_time_s == pytest.approx(13.0)


def test_device_outside_the_pool_runs_in_parallel():
    """a (d0, 2 s), b (d1, 3 s), c (d2, 4 s), independent. Pool {d1, d2}, d0 alone:
    d0 runs a 0..2 while the pool runs b 0..3 then c 3..7 -> step = 7 (max(2, 3 + 4)).
    Pool {d0, d1}, d2 alone: a 0..2, b 2..5 on the pool, c 0..4 on d2 -> step = 5."""
    g = OpGraph("three", [_op("a"), _op("b"), _op("c")], [])
    times = _times([2, 9, 9], [9, 3, 9], [9, 9, 4])
    place = np.array([0, 1, 2])
    spec = _spec(_dev("d0"), _dev("d1", compute_pool="x"), _dev("d2", compute_pool="x"))
    r = Simulator(g, spec, op_times=times).run(place)
    assert r.step_time_s == pytest.approx(7.0)
    assert r.compute_s == pytest.approx([2.0, 3.0, 4.0])
    spec = _spec(_dev("d0", compute_pool="x"), _dev("d1", compute_pool="x"), _dev("d2"))
    assert Simulator(g, spec, op_times=times).run(place).step_time_s == pytest.approx(5.0)


def test_transfers_inside_a_pool_still_use_the_link_and_overlap_compute():
    """a (d0, 1 s) -> b (d1, 1 s), 1000 bytes; c (d0, 1 s) independent; link 1000 B/s, 0.5 s;
    d0 and d1 in one pool. The transfer is not a pool op: a 0..1; the pool runs c 1..2 while
    a's output travels 1..2.5 (0.5 + 1000/1000); b 2.5..3.5 -> step = 3.5;
    transfer_s = [1.5, 1.5]; compute_s = [2, 1]."""
    g = OpGraph("xfer", [_op("a", 1000), _op("b"), _op("c")], [Edge(0, 1, 1000)])
    spec = _spec(_dev("d0", compute_pool="h"), _dev("d1", compute_pool="h"), bandwidth=1000.0, latency_s=0.5)
    r = Simulator(g, spec, op_times=np.ones((3, 2))).run(np.array([0, 1, 0]))
    assert r.step_time_s == pytest.approx(3.5)
    assert r.transfer_s == pytest.approx([1.5, 1.5])
    assert r.compute_s == pytest.approx([2.0, 1.0])


def test_pool_indices_and_bad_pool_names():
    """Pools are numbered by first appearance, a device with no pool is its own; an empty
    pool name or one with whitespace is refused, naming the field and the value."""
    spec = _spec(_dev("d0"), _dev("d1", compute_pool="b"), _dev("d2"), _dev("d3", compute_pool="b"),
                 _dev("d4", compute_pool="a"))
    assert spec.pool_indices == [0, 1, 2, 1, 3]
    assert _spec(_dev("d0"), _dev("d1")).pool_indices == [0, 1]
    for bad in ("", "two words"):
        with pytest.raises(ValueError, match=r"devices\.1\.compute_pool[\s\S]*" + repr(bad)):
            _spec(_dev("d0"), _dev("d1", compute_pool=bad))


def test_pool_name_checked_in_yaml(tmp_path):
    """from_yaml names the file, the field path and the bad value."""
    path = tmp_path / "bad.yaml"
    path.write_text("name: t\ndefault_link: {bandwidth: 1.0}\ndevices:\n"
                    "  - {name: a, kind: cpu, peak_flops: 1, memory_bandwidth: 1, memory_bytes: 1, compute_pool: 'x y'}\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: devices\.0\.compute_pool: .*'x y'"):
        ClusterSpec.from_yaml(path)


def test_cpu4_pool_serialises_rnnlm_small(rnnlm_small):
    """cpu4 puts its 4 logical CPUs in one pool: under any placement of the real rnnlm graph
    at most one op runs at a time, so the step time is at least the total compute seconds
    (equal with everything on /cpu:0: no transfers, no idle time). A random group placement
    over the 4 devices: step >= its total compute; the same spec without the pool lets the
    devices overlap, step < total compute (what made spreading look faster than it is)."""
    spec = load_cluster("cpu4")
    assert spec.pool_indices == [0, 0, 0, 0]
    sim = Simulator(rnnlm_small.graph, spec)
    one = sim.run(np.zeros(rnnlm_small.graph.num_ops, dtype=np.int64))
    assert one.step_time_s == pytest.approx(sum(one.compute_s), rel=1e-9)
    rng = np.random.default_rng(5)
    placement = rnnlm_small.grouping.expand(rng.integers(0, 4, rnnlm_small.grouping.num_groups))
    spread = sim.run(placement)
    assert sum(c > 0 for c in spread.compute_s) >= 3
    assert spread.step_time_s >= sum(spread.compute_s) * (1 - 1e-12)
    free = spec.model_copy(update={"devices": [d.model_copy(update={"compute_pool": None}) for d in spec.devices]})
    assert Simulator(rnnlm_small.graph, free).run(placement).step_time_s < sum(spread.compute_s)
