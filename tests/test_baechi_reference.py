"""Our m-ETF / m-SCT equal Baechi's own code (github.com/beomyeol/baechi at afe7278) on small graphs.

The expected placements were computed by the authors' ``placer/m_etf.py`` and ``placer/m_sct.py``
through ``benchmarks/baechi_reference.py`` (``run_theirs(..., op_times=times)``, threshold 0.1):
they are pinned here, so the test needs neither the checkout nor the network. Before the fixes
of issue 36 (Baechi's ``topo_order`` for ties, one channel per device shared by sends and
receives, the favorite-child LP in Baechi's edge order and units, a device that ran an op
without a favorite child is free) our placements differed from theirs on each of these graphs.
"""

from __future__ import annotations

import numpy as np
import pytest

from baselines.baechi import baechi_topo_order, favorite_children, m_etf, m_sct, _Problem
from cluster.spec import ClusterSpec
from compgraph.ir import Edge, Op, OpGraph


def _graph(seed: int, n: int = 40, units: int = 30) -> tuple[OpGraph, ClusterSpec, np.ndarray]:
    """A random DAG on a CPU and 4 identical GPUs (Baechi's model: one time per op, one cost
    per transfer), every op with a GPU kernel, some ops joined in colocation units; transfers
    (0.05 s + bytes / 8000 B/s) cost about as much as ops (0.5-4 s)."""
    rng = np.random.default_rng(seed)
    unit = rng.integers(0, units, size=n)
    first: dict[int, str] = {}
    ops = []
    for i in range(n):
        out = int(rng.integers(0, 8000))
        u = int(unit[i])
        ops.append(Op(f"op{i}", "Test", [(max(out // 4, 1),)], [out], alloc_bytes=out,
                      param_bytes=int(rng.integers(0, 3000)) if rng.random() < 0.3 else 0,
                      colocation=[first[u]] if u in first else []))
        first.setdefault(u, f"op{i}")
    edges = []
    for dst in range(1, n):
        for src in rng.choice(dst, size=min(dst, int(rng.integers(1, 4))), replace=False):
            edges.append(Edge(int(src), dst, ops[src].output_bytes[0]))
        if rng.random() < 0.2:
            src = int(rng.integers(0, dst))
            if all(e.src != src or e.dst != dst for e in edges):
                edges.append(Edge(src, dst, 0, control=True))
    spec = ClusterSpec(
        name="gpu4",
        devices=[dict(name="cpu", kind="cpu", peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12)]
        + [dict(name=f"gpu{k}", kind="gpu", peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12) for k in range(4)],
        default_link={"bandwidth": 8000.0, "latency_s": 0.05},
    )
    t = rng.uniform(0.5, 4.0, size=n)
    times = np.repeat(t[:, None], 5, axis=1)
    return OpGraph(f"g{seed}", ops, edges), spec, times


# Baechi's placements (device indices of our spec: 1-4 are the GPUs), from the authors' code.
THEIRS: dict[tuple[int, str], list[int]] = {
    (0, "m_etf"): [1, 1, 1, 3, 3, 2, 1, 2, 3, 3, 1, 4, 1, 2, 2, 4, 2, 3, 3, 1, 3, 3, 3, 2, 2, 1, 3, 2, 3, 4, 1, 3, 1, 1, 2, 3, 1, 3, 3, 4],
    (0, "m_sct"): [1, 1, 2, 2, 3, 4, 1, 2, 3, 3, 1, 3, 2, 2, 4, 4, 2, 2, 2, 2, 2, 3, 3, 2, 3, 1, 2, 4, 4, 4, 1, 3, 1, 1, 2, 2, 1, 2, 3, 3],
    (1, "m_etf"): [1, 1, 2, 2, 1, 2, 1, 2, 1, 4, 4, 1, 4, 1, 1, 1, 3, 4, 4, 2, 4, 2, 4, 4, 1, 4, 2, 3, 3, 4, 3, 2, 3, 2, 3, 1, 1, 2, 1, 1],
    (1, "m_sct"): [1, 2, 1, 1, 2, 1, 2, 1, 2, 4, 4, 2, 4, 2, 2, 2, 3, 4, 4, 1, 4, 1, 4, 4, 2, 4, 1, 3, 3, 4, 3, 1, 3, 1, 3, 2, 2, 1, 2, 2],
    (2, "m_etf"): [1, 1, 1, 1, 2, 3, 2, 3, 1, 3, 3, 2, 3, 1, 3, 3, 3, 1, 4, 1, 1, 3, 1, 2, 4, 2, 4, 4, 1, 2, 4, 3, 1, 3, 3, 4, 1, 1, 3, 1],
    (2, "m_sct"): [1, 1, 1, 1, 2, 3, 3, 2, 1, 3, 3, 2, 3, 2, 3, 1, 3, 1, 4, 1, 1, 3, 1, 3, 3, 2, 4, 4, 2, 2, 4, 3, 2, 3, 3, 4, 2, 2, 1, 2],
    (3, "m_etf"): [1, 1, 2, 2, 2, 1, 1, 1, 3, 1, 4, 3, 3, 4, 2, 2, 4, 2, 1, 1, 2, 2, 1, 1, 3, 3, 4, 1, 2, 2, 2, 2, 2, 3, 4, 4, 4, 4, 1, 3],
    (3, "m_sct"): [1, 1, 1, 1, 1, 1, 2, 2, 3, 1, 4, 3, 3, 3, 1, 4, 2, 1, 4, 2, 1, 2, 2, 4, 3, 3, 3, 2, 1, 1, 1, 1, 1, 2, 4, 3, 3, 2, 2, 2],
    (4, "m_etf"): [1, 1, 1, 2, 1, 4, 4, 1, 2, 3, 2, 4, 3, 3, 2, 1, 4, 1, 4, 3, 2, 2, 3, 2, 1, 3, 4, 2, 1, 4, 2, 4, 1, 4, 2, 2, 2, 1, 2, 3],
    (4, "m_sct"): [1, 2, 2, 1, 2, 4, 4, 2, 1, 2, 1, 4, 2, 3, 1, 3, 4, 2, 4, 3, 1, 1, 3, 3, 2, 3, 1, 1, 2, 4, 1, 4, 1, 4, 1, 1, 1, 3, 1, 2],
    (5, "m_etf"): [1, 1, 1, 1, 1, 2, 4, 2, 4, 3, 2, 2, 3, 2, 1, 3, 1, 3, 3, 4, 3, 4, 1, 2, 2, 3, 2, 4, 3, 3, 2, 2, 1, 2, 4, 1, 4, 1, 4, 3],
    (5, "m_sct"): [1, 1, 1, 1, 1, 2, 4, 3, 4, 2, 3, 4, 2, 4, 1, 2, 1, 2, 3, 4, 2, 4, 1, 3, 3, 2, 3, 4, 2, 2, 1, 1, 1, 4, 4, 1, 4, 1, 4, 2],
    (6, "m_etf"): [1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 2, 2, 4, 3, 4, 3, 3, 3, 1, 4, 2, 2, 3, 2, 2, 3, 2, 2, 3, 4, 3, 3, 2, 2, 1, 2, 1, 2, 4, 4],
    (6, "m_sct"): [1, 1, 1, 1, 2, 1, 3, 1, 1, 2, 2, 2, 4, 2, 4, 1, 2, 2, 1, 4, 2, 3, 3, 1, 1, 3, 2, 2, 4, 1, 3, 3, 2, 3, 3, 2, 1, 1, 4, 4],
    (7, "m_etf"): [1, 1, 2, 2, 1, 4, 2, 3, 2, 2, 1, 2, 4, 3, 1, 3, 3, 4, 3, 1, 3, 2, 4, 1, 3, 4, 4, 1, 1, 3, 1, 1, 3, 4, 3, 4, 3, 1, 4, 4],
    (7, "m_sct"): [1, 1, 2, 2, 1, 3, 2, 1, 2, 2, 4, 2, 1, 3, 4, 3, 1, 3, 1, 4, 3, 2, 3, 4, 1, 4, 1, 4, 4, 3, 1, 2, 3, 1, 3, 3, 1, 1, 3, 1],
}


@pytest.mark.parametrize("seed,alg", sorted(THEIRS))
def test_placement_equals_baechis_own(seed, alg):
    graph, spec, times = _graph(seed)
    fn = {"m_etf": m_etf, "m_sct": m_sct}[alg]
    assert fn(graph, spec, times).tolist() == THEIRS[(seed, alg)]


def test_ties_follow_baechis_topo_order():
    """Baechi's assign_topo_order is Kahn's algorithm with a FIFO queue: 0 -> 3 and 1 -> 2 give
    0, 1, 3, 2 (the lexicographic order would be 0, 1, 2, 3)."""
    ops = [Op(f"op{i}", "Test", [(1,)], [4]) for i in range(4)]
    graph = OpGraph("g", ops, [Edge(0, 3, 4), Edge(1, 2, 4)])
    assert baechi_topo_order(graph).tolist() == [0, 1, 3, 2]
    assert graph.topological_order.tolist() == [0, 1, 2, 3]


def test_one_channel_per_device_serialises_receives():
    """Two GPUs' outputs consumed on a third: on Baechi's links (one channel per device, shared by
    sends and receives) the second transfer waits for the first on the receiver's channel; on
    the simulator's (a channel per ordered pair) they overlap."""
    ops = [Op(f"op{i}", "Test", [(1,)], [8000], alloc_bytes=8000) for i in range(3)]
    graph = OpGraph("g", ops, [Edge(0, 2, 8000), Edge(1, 2, 8000)])
    spec = ClusterSpec(
        name="gpu3",
        devices=[dict(name=f"gpu{k}", kind="gpu", peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12)
                 for k in range(3)],
        default_link={"bandwidth": 8000.0, "latency_s": 0.0},
    )
    from baselines.baechi import _ListScheduler

    p = _Problem(graph, spec, np.ones((3, 3)))
    for channels, arrival in (("device", 3.0), ("pair", 2.0)):
        s = _ListScheduler(p, None, channels)
        s.place[:2] = [0, 1]
        s.end[:2] = 1e6  # both producers end at t = 1 s (the clock runs in microseconds)
        assert s.data_ready(2, 2, commit=True) == pytest.approx(arrival * 1e6), channels


def test_favorite_children_round_as_baechi():
    """A chain is all favorites at Baechi's threshold 0.1 (x_e = 0 on each edge of a chain)."""
    ops = [Op(f"op{i}", "Test", [(1,)], [4000], alloc_bytes=4000) for i in range(4)]
    graph = OpGraph("g", ops, [Edge(0, 1, 4000), Edge(1, 2, 4000), Edge(2, 3, 4000)])
    spec = _graph(0)[1]
    fav = favorite_children(_Problem(graph, spec, np.ones((4, 5))))
    assert fav.tolist() == [1, 2, 3, -1]
