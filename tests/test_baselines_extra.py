"""METIS, Baechi's m-TOPO/m-ETF/m-SCT, the lower bound and the exact optimum (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest

from baselines import BASELINES, BaselineContext, metis, metis_group, mincut, mincut_group
from cluster.kernels import op_gpu_ok
from baselines.baechi import m_etf, m_sct, m_topo
from baselines.bounds import lower_bound
from baselines.optimum import enumerate_optimum, milp_optimum
from cluster.simulated import SimulatedEnvironment
from cluster.fast_simulator import FastSimulator
from cluster.op_placement import OpPlacement, measure_placement
from cluster.spec import ClusterSpec
from compgraph.grouping import colocation_grouping, colocation_units
from compgraph.ir import Edge, Op, OpGraph


def _spec(memory_bytes: float = 1e12, pools: tuple = (None, None, None)) -> ClusterSpec:
    """cpu + 2 GPUs, PCIe-like default link, a faster GPU pair link."""
    names, kinds = ("cpu", "gpu0", "gpu1"), ("cpu", "gpu", "gpu")
    return ClusterSpec(
        name="three",
        devices=[dict(name=n, kind=k, peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=memory_bytes, compute_pool=p)
                 for n, k, p in zip(names, kinds, pools)],
        default_link={"bandwidth": 2000.0, "latency_s": 0.2},
        links=[{"between": ["gpu0", "gpu1"], "bandwidth": 8000.0, "latency_s": 0.1}],
    )


def _random_graph(seed: int, n: int = 14, units: int | None = None) -> tuple[OpGraph, np.ndarray]:
    """A random DAG (data edges of 0-4000 bytes, some control edges, ~10% ops without a GPU
    kernel, parameters); with ``units``, ops are joined into that many colocation units."""
    rng = np.random.default_rng(seed)
    unit = rng.integers(0, units, size=n) if units else np.arange(n)
    first: dict[int, str] = {}
    ops = []
    for i in range(n):
        out = int(rng.integers(0, 4000))
        u = int(unit[i])
        ops.append(Op(f"op{i}", "Test", [(max(out // 4, 1),)], [out], alloc_bytes=out,
                      param_bytes=int(rng.integers(0, 3000)) if rng.random() < 0.3 else 0,
                      gpu_kernel=bool(rng.random() > 0.1), colocation=[first[u]] if u in first else []))
        first.setdefault(u, f"op{i}")
    edges = []
    for dst in range(1, n):
        for src in rng.choice(dst, size=min(dst, int(rng.integers(1, 3))), replace=False):
            edges.append(Edge(int(src), dst, ops[src].output_bytes[0]))
        if rng.random() < 0.2:
            edges.append(Edge(int(rng.integers(0, dst)), dst, 0, control=True))
    times = rng.uniform(0.5, 4.0, size=(n, 3))
    return OpGraph(f"g{seed}", ops, edges), times


@pytest.fixture(scope="module")
def ctx(rnnlm_small, k80x2):
    return BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, k80x2, rnnlm_small.benchmark, rnnlm_small.config)


def _unit_gpu_ok(graph) -> np.ndarray:
    """``[num_ops]``: every op of the op's colocation unit has a GPU kernel."""
    labels = np.array(colocation_units(graph).labels())
    ok = op_gpu_ok(graph)
    bad_units = set(labels[~ok].tolist())
    return np.array([lab not in bad_units for lab in labels])


@pytest.mark.parametrize("level", ["op", "group"])
def test_mincut_never_puts_an_op_with_a_gpu_kernel_on_the_cpu(ctx, level):
    """2017 Sec. 4.2: MinCut is Scotch without the CPU. Only an op without a GPU kernel goes to the
    CPU, with the ops TensorFlow must co-locate with it (its colocation unit; the group at group level)."""
    import dataclasses

    # the small RNNLM has a GPU kernel for every op: take the embedding's away (as for a
    # string-keyed lookup), so that the rule has something to do
    graph = dataclasses.replace(ctx.graph, ops=[dataclasses.replace(op, gpu_kernel="embedding" not in op.name)
                                                for op in ctx.graph.ops])
    ctx = BaselineContext(graph, ctx.grouping, ctx.spec, ctx.benchmark, ctx.config)
    if level == "op":
        ops = mincut(ctx).ops
        assert 0 < (~op_gpu_ok(graph)).sum() < graph.num_ops / 4  # the case arises
        assert (ops[_unit_gpu_ok(graph)] != ctx.cpu).all()
        assert (ops[~op_gpu_ok(graph)] == ctx.cpu).all()
        assert (ops != ctx.cpu).sum() > 0.5 * graph.num_ops
    else:
        p = mincut_group(ctx)
        assert (~ctx.group_gpu_ok[p == ctx.cpu]).all()
        assert set(p[ctx.group_gpu_ok].tolist()) <= set(ctx.gpus())


def test_metis_uses_every_gpu(rnnlm_small):
    from cluster.spec import load_cluster

    for name in ("k80x2", "k80x4"):
        spec = load_cluster(name)
        c = BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, spec, rnnlm_small.benchmark, rnnlm_small.config)
        ops = metis(c).ops
        assert set(spec.gpu_indices) <= set(ops.tolist())
        assert (ops[~op_gpu_ok(c.graph)] == c.cpu).all()
        assert (ops[_unit_gpu_ok(c.graph)] != c.cpu).all()
        p = metis_group(c)
        assert set(spec.gpu_indices) <= set(p.tolist())
        assert (p[~c.group_gpu_ok] == c.cpu).all()
        assert (p[c.group_gpu_ok] != c.cpu).all()


def test_baechi_placers_keep_colocation_units_and_measure(ctx):
    from compgraph.grouping import colocation_units

    labels = np.array(colocation_units(ctx.graph).labels())
    env = SimulatedEnvironment(ctx.graph, ctx.grouping, ctx.spec)
    bound = lower_bound(ctx.graph, ctx.spec).value_s
    for name in ("m_topo", "m_etf", "m_sct"):
        result = BASELINES[name](ctx)
        assert isinstance(result, OpPlacement) and result.ops.shape == (ctx.graph.num_ops,)
        for lab in np.unique(labels):  # a colocation unit never split
            assert len(set(result.ops[labels == lab].tolist())) == 1
        no_gpu = np.array([not op.gpu_kernel for op in ctx.graph.ops])
        assert (result.ops[no_gpu] == ctx.cpu).all()
        m = measure_placement(env, result)
        assert m.step_time_s is not None and m.step_time_s >= bound


def test_m_etf_never_exceeds_device_memory():
    """Parameters that cannot share one GPU: m-ETF spreads them, and no device runs out of memory."""
    rng = np.random.default_rng(3)
    for seed in range(4):
        graph, times = _random_graph(seed, n=30)
        for op in graph.ops:  # heavy, identical-ish resident bytes
            op.param_bytes = int(rng.integers(20_000, 30_000)) if op.gpu_kernel else 0
        total = sum(op.param_bytes for op in graph.ops)
        spec = _spec(memory_bytes=0.6 * total)
        place = m_etf(graph, spec, times)
        r = FastSimulator(graph, spec, op_times=times).run_batch(place[None])[0]
        assert not r.oom, (seed, r.peak_memory_bytes, spec.devices[0].memory_bytes)
        assert max(r.peak_memory_bytes) <= spec.devices[0].memory_bytes
        assert len(set(place.tolist())) >= 2


def test_lower_bound_never_above_a_simulated_step_time():
    """Property test: random graphs (with and without compute pools, tight memory), many random
    placements; the memory-aware bound holds for placements that fit, the plain one for all."""
    rng = np.random.default_rng(0)
    checked = 0
    for seed in range(12):
        graph, times = _random_graph(seed, n=int(rng.integers(8, 40)))
        pools = (None, None, None) if seed % 3 else ("host", "host", None)
        total = sum(op.param_bytes for op in graph.ops) + 1
        spec = _spec(memory_bytes=total * (0.5 if seed % 2 else 10.0), pools=pools)
        b = lower_bound(graph, spec, times)
        assert b.value_s >= b.path_s and b.value_s >= b.load_s and b.any_placement_s <= b.value_s
        sim = FastSimulator(graph, spec, op_times=times)
        places = rng.integers(0, 3, size=(200, graph.num_ops))
        places[0] = 1  # all on one GPU
        res = sim.run_arrays(places)
        assert (b.any_placement_s <= res.step_time_s).all()
        fits = ~res.oom
        assert (b.value_s <= res.step_time_s[fits]).all()
        checked += int(fits.sum())
        for fn in (m_topo, m_etf, m_sct):  # list schedules as well
            r = sim.run_batch(fn(graph, spec, times)[None])[0]
            assert b.any_placement_s <= r.step_time_s
            assert r.oom or b.value_s <= r.step_time_s
    assert checked > 500


def test_lower_bound_never_above_the_exact_optimum():
    """The hardest placements for a bound: the enumerated optimum of small graphs (a window
    bound that counted an empty window once passed the random placements above, not this)."""
    for seed in range(20, 30):
        graph, times = _random_graph(seed, n=14, units=7)
        spec = _spec(pools=("host", "host", None) if seed % 2 else (None, None, None))
        exact = enumerate_optimum(graph, colocation_grouping(graph), spec, times)
        assert lower_bound(graph, spec, times).value_s <= exact.step_time_s, seed


def test_optimum_is_never_above_any_baseline_and_the_milp_finds_it():
    """A small graph grouped by colocation units (9 groups on cpu + 2 GPUs: 3^9 placements):
    the enumerated optimum is at most every baseline, at least the bound, and the MILP
    (forced, no candidates) reports the same step time."""
    graph, times = _random_graph(7, n=16, units=9)
    grouping = colocation_grouping(graph)
    assert grouping.num_groups <= 10
    spec = _spec()
    exact = enumerate_optimum(graph, grouping, spec, times)
    assert exact.proven and exact.evaluated == 3**grouping.num_groups
    bound = lower_bound(graph, spec, times)
    assert bound.value_s <= exact.step_time_s
    sim = FastSimulator(graph, spec, op_times=times)
    ctx = BaselineContext(graph, grouping, spec)
    for name, fn in BASELINES.items():
        if name in ("expert", "optimum"):
            continue
        if name in ("m_topo", "m_etf", "m_sct"):  # with the test's op times
            ops = {"m_topo": m_topo, "m_etf": m_etf, "m_sct": m_sct}[name](graph, spec, times)
        else:  # op-level (Scotch, MinCut, METIS) or group placements
            p = fn(ctx)
            ops = p.ops if isinstance(p, OpPlacement) else grouping.expand(p)
        r = sim.run_batch(ops[None])[0]
        if not r.oom:
            assert exact.step_time_s <= r.step_time_s + 1e-12, name
    model = milp_optimum(graph, grouping, spec, times, node_limit=1_000_000)
    assert model.step_time_s == pytest.approx(exact.step_time_s, rel=1e-9)
    assert model.bound_s <= exact.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("seed", [8, 10, 12])
def test_milp_bound_is_below_the_enumerated_optimum(seed):
    """On other small graphs the MILP's proven bound stays below the exact optimum, and its
    reported (simulated) placement is never better than the optimum (it is a real placement)."""
    graph, times = _random_graph(seed, n=16, units=9)
    grouping = colocation_grouping(graph)
    spec = _spec()
    exact = enumerate_optimum(graph, grouping, spec, times)
    model = milp_optimum(graph, grouping, spec, times, node_limit=1_000_000)
    assert model.bound_s <= exact.step_time_s * (1 + 1e-9)
    assert model.step_time_s >= exact.step_time_s * (1 - 1e-12)
    assert model.proven == (model.step_time_s <= model.bound_s * (1 + 1e-9))


@pytest.mark.slow
def test_optimum_gives_the_same_value_twice_under_different_cpu_load():
    """Work limits (nodes, polish placements), not the clock: a quiet and a loaded machine agree."""
    import subprocess
    import sys

    graph, times = _random_graph(3, n=60, units=30)
    grouping = colocation_grouping(graph)
    quiet = milp_optimum(graph, grouping, _spec(), times)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        loaded = milp_optimum(graph, grouping, _spec(), times)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert "node limit" in quiet.milp_status and not quiet.proven  # the limit bites: not a solved-to-optimality case
    assert quiet.deterministic and loaded.deterministic
    assert loaded.step_time_s == quiet.step_time_s and loaded.bound_s == quiet.bound_s
    assert list(loaded.placement) == list(quiet.placement) and loaded.evaluated == quiet.evaluated
    assert quiet.bound_s <= quiet.step_time_s


def test_ratio_columns_only_in_the_environment_the_references_were_computed_in():
    from baselines.report import add_ratio_columns, reference_note, reference_points

    graph, times = _random_graph(4, n=12)
    grouping = colocation_grouping(graph)
    refs = reference_points(graph, grouping, _spec(), op_times=times)
    assert refs["reference_environment"] == "sim" and refs["lower_bound_s"] > 0
    sim_rows = {"a": {"step_time_s": 2 * refs["lower_bound_s"]}}
    flat = add_ratio_columns(sim_rows, refs, "sim")
    assert sim_rows["a"]["x_lower_bound"] == pytest.approx(2.0) and flat == {"a.x_lower_bound": pytest.approx(2.0)}
    assert reference_note("sim") is None
    grappler_rows = {"a": {"step_time_s": 2 * refs["lower_bound_s"]}}
    assert add_ratio_columns(grappler_rows, refs, "grappler") == {}
    assert grappler_rows["a"]["x_lower_bound"] is None and grappler_rows["a"]["x_optimum"] is None
    assert "grappler" in reference_note("grappler") and "simulator" in reference_note("grappler")
