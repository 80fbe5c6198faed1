"""Tests for cluster.fast_simulator.FastSimulator: the same results as the reference, exactly.

Every comparison is ``==`` on floats (step time, per-device compute and transfer seconds),
on ints (peak memory bytes), on OOM flags and device names, and on the critical path,
over random placements of: the tiny hand-built graphs of tests/test_simulator.py's kind,
random DAGs (several outputs per op, control edges, ops without a GPU kernel, integer op
times that make many events tie), and the small RNNLM training step; with and without
compute pools (devices sharing one executor, ``Device.compute_pool``).
"""

from __future__ import annotations

import numpy as np
import pytest

from cluster.simulated import SimulatedEnvironment
from cluster.fast_simulator import FastSimulator
from cluster.simulator import Simulator
from cluster.spec import ClusterSpec
from compgraph.ir import Edge, Grouping, Op, OpGraph


def _dev(name: str, kind: str = "gpu", memory_bytes: float = 1e12, compute_pool: str | None = None) -> dict:
    return dict(name=name, kind=kind, peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=memory_bytes,
                compute_pool=compute_pool)


def _op(name: str, out_bytes: int = 0, alloc: int = 0, param: int = 0, gpu_kernel: bool = True, n_out: int = 1) -> Op:
    return Op(name, "Test", [(max(out_bytes // 4, 1),)] * n_out, [out_bytes] * n_out,
              alloc_bytes=alloc, param_bytes=param, gpu_kernel=gpu_kernel)


def _same(a, b, path: bool = True) -> None:
    assert a.step_time_s == b.step_time_s
    assert a.compute_s == b.compute_s
    assert a.transfer_s == b.transfer_s
    assert a.peak_memory_bytes == b.peak_memory_bytes
    assert a.oom == b.oom and a.oom_devices == b.oom_devices
    if path:
        assert a.critical_path == b.critical_path


def _check_random_placements(graph: OpGraph, spec: ClusterSpec, op_times, placements: np.ndarray) -> None:
    """Reference vs fast, one by one (with critical paths) and as one batch."""
    ref = Simulator(graph, spec, op_times=op_times)
    fast = FastSimulator(graph, spec, op_times=op_times)
    expected = [ref.run(p) for p in placements]
    for p, e in zip(placements, expected):
        _same(e, fast.run(p))
    batch = fast.run_batch(placements)
    assert len(batch) == len(expected)
    for e, b in zip(expected, batch):
        _same(e, b, path=False)
        assert b.critical_path is None
    for e, b in zip(expected, fast.run_batch(placements[:3], critical_path=True)):
        _same(e, b)


def _random_dag(seed: int, n: int = 120) -> tuple[OpGraph, np.ndarray]:
    """A random DAG: ops with 1-3 outputs of 0-4000 bytes, data edges to later ops from any
    output (some ops read one tensor twice), control edges, 10% ops without a GPU kernel,
    parameters and allocations; integer op times (1-4 s) so that events tie often."""
    rng = np.random.default_rng(seed)
    ops = []
    for i in range(n):
        k = int(rng.integers(1, 4))
        out = [int(rng.integers(0, 4000)) for _ in range(k)]
        ops.append(Op(f"op{i}", "Test", [(max(b // 4, 1),) for b in out], out,
                      alloc_bytes=int(sum(out)) if rng.random() < 0.8 else 0,
                      param_bytes=int(rng.integers(0, 3000)) if rng.random() < 0.3 else 0,
                      gpu_kernel=bool(rng.random() > 0.1)))
    edges = []
    for dst in range(1, n):
        for src in rng.choice(dst, size=min(dst, int(rng.integers(1, 4))), replace=False):
            o = int(rng.integers(0, len(ops[src].output_bytes)))
            edges.append(Edge(int(src), dst, ops[src].output_bytes[o], src_output=o))
            if rng.random() < 0.05:  # the same tensor read twice
                edges.append(Edge(int(src), dst, ops[src].output_bytes[o], src_output=o))
        if rng.random() < 0.2:
            edges.append(Edge(int(rng.integers(0, dst)), dst, 0, control=True))
    rng.shuffle(edges)
    times = rng.integers(1, 5, size=(n, 4)).astype(np.float64)
    return OpGraph(f"dag{seed}", ops, list(edges)), times


def _spec4(memory_bytes: float = 1e12, pools: tuple = (None,) * 4) -> ClusterSpec:
    """cpu + 3 GPUs; ``pools[i]`` is device i's ``compute_pool``."""
    return ClusterSpec(
        name="four",
        devices=[_dev(name, kind, memory_bytes, pool)
                 for name, kind, pool in zip(("cpu", "gpu0", "gpu1", "gpu2"), ("cpu", "gpu", "gpu", "gpu"), pools)],
        default_link={"bandwidth": 1000.0, "latency_s": 0.5},
        links=[{"between": ["gpu0", "gpu1"], "bandwidth": 4000.0, "latency_s": 0.25}],
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_dag_matches_reference_exactly(seed):
    """Random DAGs on cpu + 3 GPUs (one listed GPU link), 12 random placements each."""
    graph, times = _random_dag(seed)
    rng = np.random.default_rng(100 + seed)
    placements = rng.integers(0, 4, size=(12, graph.num_ops))
    placements[0] = 1  # all on one GPU (soft placement moves the no-kernel ops to the CPU)
    _check_random_placements(graph, _spec4(), times, placements)


# pools: all four devices; two interleaved pools; a pool without device 0 and two devices alone
POOLS = [("h", "h", "h", "h"), ("a", "b", "a", "b"), (None, "x", None, "x"), ("x", "x", None, None)]


@pytest.mark.parametrize("pools", POOLS)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_dag_with_compute_pools_matches_reference_exactly(seed, pools):
    """Random DAGs on cpu + 3 GPUs with compute pools (pool indices not equal to device
    indices), 10 random placements each plus all on one GPU; run, run_batch and run_arrays."""
    graph, times = _random_dag(seed, n=100)
    spec = _spec4(pools=pools)
    rng = np.random.default_rng(200 + seed)
    placements = rng.integers(0, 4, size=(11, graph.num_ops))
    placements[0] = 1
    _check_random_placements(graph, spec, times, placements)
    ref = Simulator(graph, spec, op_times=times)
    b = FastSimulator(graph, spec, op_times=times).run_arrays(placements)
    for k, p in enumerate(placements):
        e = ref.run(p)
        assert e.step_time_s == b.step_time_s[k] and e.compute_s == b.compute_s[k].tolist()
    # the pool changes the result: with all four devices in one pool, ops never overlap
    if pools == POOLS[0]:
        assert all(b.step_time_s[k] >= b.compute_s[k].sum() for k in range(len(placements)))
        free = FastSimulator(graph, _spec4(), op_times=times).run_arrays(placements)
        assert (free.step_time_s[1:] < b.step_time_s[1:]).all()


def test_random_dag_oom_flags_match_reference():
    """Capacity set to the median (over 16 random placements) of the largest device peak:
    some placements run out of memory and some do not; the OOM flags and device names match
    the reference's."""
    graph, times = _random_dag(5, n=60)
    rng = np.random.default_rng(7)
    placements = rng.integers(0, 4, size=(16, graph.num_ops))
    peaks = [max(Simulator(graph, _spec4(), op_times=times).run(p).peak_memory_bytes) for p in placements]
    cap = float(np.median(peaks))
    ooms = [Simulator(graph, _spec4(cap), op_times=times).run(p).oom for p in placements]
    assert any(ooms) and not all(ooms)
    _check_random_placements(graph, _spec4(cap), times, placements)


def test_random_dag_with_roofline_times():
    """The roofline op-time matrix (no op_times given): flops and bytes make non-integer times."""
    graph, _ = _random_dag(9, n=80)
    rng = np.random.default_rng(9)
    for op in graph.ops:
        op.flops, op.bytes_accessed = float(rng.integers(0, 10**9)), float(rng.integers(0, 10**7))
    _check_random_placements(graph, _spec4(), None, rng.integers(0, 4, size=(8, graph.num_ops)))


def test_tiny_graphs_match_reference_on_every_placement():
    """Every placement of three tiny graphs (fan-out to one device, two outputs over one link,
    a diamond with memory) on 2 or 3 devices, 0.5-s link latency, without and with compute
    pools (all devices in one; two of three, with and without device 0)."""
    two_out = Op("src", "Test", [(250,), (750,)], [1000, 3000], alloc_bytes=4000)
    graphs = [
        OpGraph("fanout", [_op("src", 1000, alloc=1000), _op("y1", alloc=3), _op("y2")],
                [Edge(0, 1, 1000), Edge(0, 2, 1000), Edge(1, 2, 0, control=True)]),
        OpGraph("two_out", [two_out, _op("y1"), _op("y2")],
                [Edge(0, 1, 1000, src_output=0), Edge(0, 2, 3000, src_output=1)]),
        OpGraph("diamond", [_op("a", 8, alloc=100, param=5), _op("b", 8, alloc=10), _op("c", 8, alloc=20, gpu_kernel=False),
                            _op("d", 8, alloc=5)],
                [Edge(0, 1, 8), Edge(0, 2, 8), Edge(1, 3, 8), Edge(2, 3, 8)]),
    ]
    # compute pools of each device (None: no pool); the length is the number of devices
    pool_sets = [(None, None), ("p", "p"), (None, None, None), ("p", "p", "p"), (None, "p", "p"), ("p", None, "p")]
    for pools in pool_sets:
        ndev = len(pools)
        spec = ClusterSpec(name="t", devices=[_dev("cpu", "cpu", 150, pools[0])]
                           + [_dev(f"g{i}", compute_pool=pools[i + 1]) for i in range(ndev - 1)],
                           default_link={"bandwidth": 1000.0, "latency_s": 0.5})
        for g in graphs:
            grid = np.stack(np.meshgrid(*[np.arange(ndev)] * g.num_ops, indexing="ij"), -1).reshape(-1, g.num_ops)
            times = np.arange(1, g.num_ops * ndev + 1, dtype=np.float64).reshape(g.num_ops, ndev) / 4
            _check_random_placements(g, spec, times, grid)


def test_rnnlm_small_matches_reference(rnnlm_small, k80x2):
    """rnnlm small on k80x2 (roofline times): 4 random op placements, 4 random group placements."""
    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    rng = np.random.default_rng(11)
    placements = np.concatenate([
        rng.integers(0, 3, size=(4, graph.num_ops)),
        grouping.expand(rng.integers(0, 3, size=(4, grouping.num_groups)).T).T,
    ])
    _check_random_placements(graph, k80x2, None, placements)


def _same_batch(a, b) -> None:
    """Two BatchResults equal element for element (== on floats)."""
    for field in ("step_time_s", "oom", "compute_s", "transfer_s", "peak_memory_bytes", "oom_devices"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def test_run_group_arrays_matches_reference_with_soft_placement_and_oom():
    """run_group_arrays([K, G], op_group) equals the reference on the expanded placements
    (op_group[i] -> group device, then soft placement: the random DAG has ops without a GPU
    kernel) and equals run_arrays of the expansion; capacity at the median peak so that some
    placements run out of memory; a placement with every group on one GPU is included."""
    graph, times = _random_dag(6, n=90)
    og = np.random.default_rng(3).integers(0, 7, graph.num_ops)
    rng = np.random.default_rng(4)
    gp = rng.integers(0, 4, size=(10, 7))
    gp[0] = 2
    ref = Simulator(graph, _spec4(), op_times=times)
    cap = float(np.median([max(ref.run(p).peak_memory_bytes) for p in gp[:, og]]))
    spec = _spec4(cap)
    ref = Simulator(graph, spec, op_times=times)
    fast = FastSimulator(graph, spec, op_times=times)
    b = fast.run_group_arrays(gp, og)
    expected = [ref.run(p) for p in gp[:, og]]
    assert any(e.oom for e in expected) and not all(e.oom for e in expected)
    for k, e in enumerate(expected):
        assert e.step_time_s == b.step_time_s[k] and e.oom == b.oom[k]
        assert e.compute_s == b.compute_s[k].tolist() and e.transfer_s == b.transfer_s[k].tolist()
        assert e.peak_memory_bytes == b.peak_memory_bytes[k].tolist()
        assert e.oom_devices == [spec.device_names[i] for i in np.flatnonzero(b.oom_devices[k])]
    _same_batch(b, fast.run_arrays(gp[:, og]))
    assert fast.run_group_arrays(gp[:0], og).step_time_s.shape == (0,)


@pytest.mark.parametrize("pools", POOLS[1:3])
def test_run_group_arrays_with_compute_pools_matches_reference(pools):
    """run_group_arrays on a spec with compute pools (soft placement moves no-kernel ops to the
    CPU, possibly into another pool) equals the reference on the expanded placements."""
    graph, times = _random_dag(8, n=90)
    og = np.random.default_rng(5).integers(0, 7, graph.num_ops)
    gp = np.random.default_rng(6).integers(0, 4, size=(8, 7))
    spec = _spec4(pools=pools)
    ref = Simulator(graph, spec, op_times=times)
    b = FastSimulator(graph, spec, op_times=times).run_group_arrays(gp, og)
    for k, p in enumerate(gp[:, og]):
        e = ref.run(p)
        assert e.step_time_s == b.step_time_s[k] and e.peak_memory_bytes == b.peak_memory_bytes[k].tolist()
        assert e.compute_s == b.compute_s[k].tolist() and e.transfer_s == b.transfer_s[k].tolist()


def test_cpu4_rnnlm_small_matches_reference(rnnlm_small):
    """rnnlm small on the cpu4 preset (its 4 logical CPUs in one compute pool, roofline times):
    3 random group placements, with critical paths, and run_group_arrays, equal the reference."""
    from cluster.spec import load_cluster

    spec = load_cluster("cpu4")
    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    gp = np.random.default_rng(13).integers(0, 4, size=(3, grouping.num_groups))
    placements = gp[:, grouping.op_group]
    _check_random_placements(graph, spec, None, placements)
    b = FastSimulator(graph, spec).run_group_arrays(gp, grouping.op_group)
    ref = Simulator(graph, spec)
    for k, p in enumerate(placements):
        e = ref.run(p)
        assert e.step_time_s == b.step_time_s[k] and e.compute_s == b.compute_s[k].tolist()


def test_run_group_arrays_rnnlm_small(rnnlm_small, k80x2):
    """rnnlm small (real TF graph, 2017 groups) on k80x2: 3 random group placements equal the
    reference on the expanded op placements."""
    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    gp = np.random.default_rng(12).integers(0, 3, size=(3, grouping.num_groups))
    b = FastSimulator(graph, k80x2).run_group_arrays(gp, grouping.op_group)
    ref = Simulator(graph, k80x2)
    for k, p in enumerate(gp[:, grouping.op_group]):
        e = ref.run(p)
        assert e.step_time_s == b.step_time_s[k] and e.peak_memory_bytes == b.peak_memory_bytes[k].tolist()
        assert e.compute_s == b.compute_s[k].tolist() and e.transfer_s == b.transfer_s[k].tolist()


def test_load_kernel_loads_the_batch_kernel_a_real_graph_runs(rnnlm_small, k80x2):
    """``load_kernel`` compiles (or loads) the very specialization a real graph's group placements use:
    after it, simulating rnnlm small adds no signature to the kernel (a tiny graph of other argument
    types would leave the first search paying the load, or a compilation)."""
    from cluster.fast_simulator import _simulate, load_kernel

    load_kernel(k80x2)
    loaded = set(_simulate.signatures)
    assert loaded
    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    FastSimulator(graph, k80x2).run_group_arrays(np.zeros((2, grouping.num_groups), np.int64), grouping.op_group)
    assert set(_simulate.signatures) == loaded
    # one batch specialization (no critical-path trace) in the process, whatever ran before: a second
    # would mean the two-op graph's argument types differ from a real graph's
    assert len([sig for sig in _simulate.signatures if str(sig[-1]) == "none"]) == 1


def test_run_group_arrays_errors():
    """op_group of the wrong length, dtype or range, group placements of the wrong rank or
    with a device index out of range are refused with the field named."""
    graph, times = _random_dag(3, n=30)
    fast = FastSimulator(graph, _spec4(), op_times=times)
    og = np.arange(30) % 5
    with pytest.raises(ValueError, match="op_group"):
        fast.run_group_arrays(np.zeros((2, 5), int), og[:29])
    with pytest.raises(ValueError, match="op_group"):
        fast.run_group_arrays(np.zeros((2, 5), int), og.astype(float))
    with pytest.raises(ValueError, match="op_group: group index 4"):
        fast.run_group_arrays(np.zeros((2, 4), int), og)
    with pytest.raises(ValueError, match="group_placements"):
        fast.run_group_arrays(np.zeros(5, int), og)
    with pytest.raises(ValueError, match="out of range"):
        fast.run_group_arrays(np.full((2, 5), 4), og)


def test_run_arrays_shapes_and_errors():
    """run_arrays gives [K] and [K, num_devices] arrays; bad shapes and indices are refused."""
    graph, times = _random_dag(3, n=30)
    fast = FastSimulator(graph, _spec4(), op_times=times)
    b = fast.run_arrays(np.zeros((5, 30), dtype=int))
    assert b.step_time_s.shape == (5,) and b.compute_s.shape == (5, 4) and b.peak_memory_bytes.shape == (5, 4)
    assert b.oom.dtype == bool and not b.oom.any()
    with pytest.raises(ValueError, match="length"):
        fast.run_arrays(np.zeros((5, 29), dtype=int))
    with pytest.raises(ValueError, match="out of range"):
        fast.run_batch(np.full((2, 30), 4))
    with pytest.raises(ValueError, match="length"):
        fast.run(np.zeros(31, dtype=int))
    with pytest.raises(ValueError, match="op_times"):
        FastSimulator(graph, _spec4(), op_times=np.ones((30, 3)))


# ---------------------------------------------------------------------------- environment


def _env_graph():
    graph, times = _random_dag(4, n=40)
    for i, op in enumerate(graph.ops):
        op.flops = float(times[i, 0]) * 1e12
    grouping = Grouping(op_group=np.arange(40) // 5, names=[f"g{i}" for i in range(8)])
    return graph, grouping


def test_environment_engines_agree_and_measure_batch():
    """The default engine is the fast one; reference and fast give equal measurements, and
    measure_batch([K, G]) equals K calls of measure. Capacity: the median largest peak of the
    10 placements, so that some run out of memory and some do not."""
    graph, grouping = _env_graph()
    rng = np.random.default_rng(0)
    gp = rng.integers(0, 4, size=(10, grouping.num_groups))
    big = SimulatedEnvironment(graph, grouping, _spec4())
    cap = float(np.median([max(m.peak_memory_bytes) for m in big.measure_batch(gp)]))
    fast = SimulatedEnvironment(graph, grouping, _spec4(cap))
    ref = SimulatedEnvironment(graph, grouping, _spec4(cap), engine="reference")
    assert isinstance(fast.simulator, FastSimulator) and isinstance(ref.simulator, Simulator)
    one = [ref.measure(p) for p in gp]
    assert one == [fast.measure(p) for p in gp]
    assert one == fast.measure_batch(gp)
    assert one == ref.measure_batch(gp)
    assert any(m.oom for m in one) and not all(m.oom for m in one)
    assert all((m.step_time_s is None) == m.oom for m in one)


def test_environment_errors():
    """Unknown engine; measure_batch needs [K, num_groups] with indices in 0..3."""
    graph, grouping = _env_graph()
    with pytest.raises(ValueError, match="engine"):
        SimulatedEnvironment(graph, grouping, _spec4(), engine="turbo")
    env = SimulatedEnvironment(graph, grouping, _spec4())
    with pytest.raises(ValueError, match="length"):
        env.measure_batch(np.zeros(8, dtype=int))
    with pytest.raises(ValueError, match="length"):
        env.measure_batch(np.zeros((2, 7), dtype=int))
    with pytest.raises(ValueError, match="out of range"):
        env.measure_batch(np.full((2, 8), 4))
    with pytest.raises(ValueError, match="length"):
        env.measure(np.zeros((1, 8), dtype=int))


# ---------------------------------------------------------------------------- contracted graph


def test_contract_groups_splits_cyclic_groups_by_level():
    """Groups A = {a1, a2}, B = {b}, a1 -> b -> a2 (A -> B -> A: the group graph has a cycle).
    Levels: a1 0; b 1 (its input is in another group); a2 2. Clusters (A,0), (B,1), (A,2) in
    topological order: op_cluster [0, 2, 1], cluster_group [A, B, A] = [0, 1, 0], edges
    0 -> 1 -> 2 carrying the 100-byte and 200-byte tensors; times are the members' sums."""
    from cluster.contracted import contract_groups

    g = OpGraph("cyc", [_op("a1", 100), _op("a2", 5), _op("b", 200)], [Edge(0, 2, 100), Edge(2, 1, 200)])
    grouping = Grouping(op_group=np.array([0, 0, 1]), names=["A", "B"])
    times = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    cg = contract_groups(g, grouping, times)
    assert cg.op_cluster.tolist() == [0, 2, 1]
    assert cg.cluster_group.tolist() == [0, 1, 0]
    assert [(e.src, e.dst, e.bytes) for e in cg.graph.edges] == [(0, 1, 100), (1, 2, 200)]
    assert cg.op_times.tolist() == [[1.0, 2.0], [5.0, 6.0], [3.0, 4.0]]


def test_contracted_cluster_sends_outputs_only_when_whole_cluster_is_done():
    """Group G = {p, q} on d0 (p -> q), group H = {r} on d1 with p -> r (1000 B, 1000 B/s, latency 0).
    Times p = 1, q = 2, r = 1 s. Op graph: p 0..1, transfer 1..2, r 2..3 (q 1..3) -> step 3.
    Contracted: {p, q} is one cluster (same group, level 0) running 0..3; its output leaves at
    3: transfer 3..4, r 4..5 -> step 5 (the documented approximation)."""
    ops = [_op("p", 1000), _op("q", 8), _op("r")]
    g = OpGraph("late", ops, [Edge(0, 1, 1000), Edge(0, 2, 1000)])
    grouping = Grouping(op_group=np.array([0, 0, 1]), names=["G", "H"])
    spec = ClusterSpec(name="t", devices=[_dev("d0"), _dev("d1")], default_link={"bandwidth": 1000.0})
    for op, t in zip(g.ops, (1e12, 2e12, 1e12)):
        op.flops = t  # 1e12 FLOP/s devices: 1, 2, 1 s
    exact = SimulatedEnvironment(g, grouping, spec).measure(np.array([0, 1]))
    approx = SimulatedEnvironment(g, grouping, spec, engine="contracted").measure(np.array([0, 1]))
    assert exact.step_time_s == pytest.approx(3.0)
    assert approx.step_time_s == pytest.approx(5.0)
    assert approx.compute_s == pytest.approx([3.0, 1.0])


def test_contracted_rnnlm_small(rnnlm_small, k80x2):
    """rnnlm small: the cluster graph is a DAG (OpGraph checks) with fewer units than ops, each
    cluster inside one group; all groups on /gpu:0 gives the sum of the GPU times (no overlap
    possible on one device), like the op graph; measure_batch equals measure."""
    graph, grouping = rnnlm_small.graph, rnnlm_small.grouping
    env = SimulatedEnvironment(graph, grouping, k80x2, engine="contracted")
    cg = env.contracted
    assert grouping.num_groups < cg.graph.num_ops < graph.num_ops
    assert (cg.cluster_group[cg.op_cluster] == grouping.op_group).all()
    exact = SimulatedEnvironment(graph, grouping, k80x2)
    all_gpu0 = np.full(grouping.num_groups, 1)
    assert env.measure(all_gpu0).step_time_s == pytest.approx(exact.measure(all_gpu0).step_time_s, rel=1e-9)
    gp = np.random.default_rng(1).integers(0, 3, size=(5, grouping.num_groups))
    assert env.measure_batch(gp) == [env.measure(p) for p in gp]


def test_environment_op_times_replace_the_roofline():
    """op_times given to the environment are used by every engine: 3 ops in 3 groups, a -> b -> c,
    all on d1 with times 1, 2, 4 s there -> step 7 s; a wrong shape is refused."""
    g = OpGraph("chain", [_op("a", 8), _op("b", 8), _op("c")], [Edge(0, 1, 8), Edge(1, 2, 8)])
    grouping = Grouping(op_group=np.array([0, 1, 2]), names=["a", "b", "c"])
    spec = ClusterSpec(name="t", devices=[_dev("d0"), _dev("d1")], default_link={"bandwidth": 1000.0})
    times = np.array([[9.0, 1.0], [9.0, 2.0], [9.0, 4.0]])
    for engine in ("fast", "reference", "contracted"):
        env = SimulatedEnvironment(g, grouping, spec, engine=engine, op_times=times)
        assert env.measure(np.array([1, 1, 1])).step_time_s == pytest.approx(7.0)
        with pytest.raises(ValueError, match="op_times"):
            SimulatedEnvironment(g, grouping, spec, engine=engine, op_times=times[:2])
