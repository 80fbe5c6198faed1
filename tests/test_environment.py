"""The environment seam: the one factory (:func:`cluster.factory.make_environment`) for each
kind, its errors, the CPU-fallback rule written once (:mod:`cluster.kernels`), and the grappler
environment (TensorFlow's VirtualCluster) on a tiny real TensorFlow training step."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from cluster.environment import ENVIRONMENTS, EnvOptions
from cluster.factory import make_environment
from cluster.kernels import cpu_fallback, fallback_device, group_gpu_ok, op_gpu_ok
from cluster.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Modules imported at the top level of ``path`` (not inside functions)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _spec(cpu_flops=1e12, gpu_flops=4e12, cpu_bw=1e11, gpu_bw=4e11) -> ClusterSpec:
    dev = lambda name, kind, f, bw: {"name": name, "kind": kind, "peak_flops": f, "memory_bandwidth": bw,  # noqa: E731
                                     "memory_bytes": 8e9}
    return ClusterSpec(name="t3", devices=[dev("/cpu:0", "cpu", cpu_flops, cpu_bw), dev("/gpu:0", "gpu", gpu_flops, gpu_bw),
                                           dev("/gpu:1", "gpu", gpu_flops, gpu_bw)],
                       default_link={"bandwidth": 1e10, "latency_s": 1e-5})


# ----------------------------------------------------------------------------- factory


def test_factory_builds_each_kind_with_the_protocol(rnnlm_small, k80x2):
    from cluster.grappler import GrapplerEnvironment
    from cluster.real import RealEnvironment
    from cluster.simulated import SimulatedEnvironment

    assert ENVIRONMENTS == ("sim", "real", "grappler")
    want = {"sim": SimulatedEnvironment, "real": RealEnvironment, "grappler": GrapplerEnvironment}
    for kind in ENVIRONMENTS:
        env = make_environment(kind, rnnlm_small, k80x2, {"steps": 2})
        assert isinstance(env, want[kind]) and env.kind == kind
        assert env.graph is rnnlm_small.graph and env.grouping is rnnlm_small.grouping and env.spec is k80x2
        assert callable(env.measure) and callable(env.measure_batch)


def test_factory_errors_name_the_kind_and_the_option(rnnlm_small, k80x2):
    with pytest.raises(ValueError, match=r"unknown environment 'turbo'; valid: sim, real, grappler"):
        make_environment("turbo", rnnlm_small, k80x2)
    with pytest.raises(ValueError, match=r"env option 'stepz'.*valid options: engine"):
        make_environment("sim", rnnlm_small, k80x2, {"stepz": 3})
    with pytest.raises(ValueError, match=r"env option 'steps'"):
        make_environment("real", rnnlm_small, k80x2, {"steps": "many"})
    with pytest.raises(ValueError, match=r"engine: unknown engine 'warp'"):
        make_environment("sim", rnnlm_small, k80x2, EnvOptions(engine="warp"))

    class NoGraphDef:
        graph, grouping, graph_def, fetches = rnnlm_small.graph, rnnlm_small.grouping, None, ()

    for kind in ("real", "grappler"):
        with pytest.raises(ValueError, match=rf"env '{kind}': needs the TensorFlow GraphDef"):
            make_environment(kind, NoGraphDef(), k80x2)


def test_factory_grouping_override_and_cost_table(rnnlm_small, k80x2):
    from cluster.calibrate import CostTable
    from compgraph.grouping import colocation_grouping
    from compgraph.ir import Grouping

    units = colocation_grouping(rnnlm_small.graph)
    env = make_environment("sim", rnnlm_small, k80x2, grouping=units)
    assert env.grouping is units and units.num_groups != rnnlm_small.grouping.num_groups
    m = env.measure(np.ones(units.num_groups, dtype=np.int64))
    same = make_environment("sim", rnnlm_small, k80x2).measure(np.ones(rnnlm_small.grouping.num_groups, dtype=np.int64))
    assert m.step_time_s == same.step_time_s  # everything on /gpu:0 either way
    with pytest.raises(ValueError, match="grouping: covers 2 ops"):
        make_environment("sim", rnnlm_small, k80x2, grouping=Grouping(np.zeros(2, dtype=np.int64), ["g"]))
    # a calibration table: every op 1 ms on every kind -> one device runs num_ops ms plus overheads
    ops = rnnlm_small.graph.ops
    table = CostTable(model="rnnlm", size="small", cluster="k80x2", steps=2,
                      devices={"cpu": "/device:CPU:0", "gpu": "/device:CPU:1"},
                      op_seconds={op.name: {"cpu": 1e-3, "gpu": 1e-3} for op in ops})
    env = make_environment("sim", rnnlm_small, k80x2, {"cost_table": table})
    m = env.measure(np.zeros(rnnlm_small.grouping.num_groups, dtype=np.int64))
    assert m.compute_s[0] == pytest.approx(len(ops) * 1e-3, rel=1e-9)


def test_environment_and_real_do_not_import_each_other():
    assert "cluster.real" not in _imports(ROOT / "cluster/environment.py")
    assert "cluster.simulated" not in _imports(ROOT / "cluster/environment.py")
    assert "cluster.environment" not in {m for m in _imports(ROOT / "cluster/environment.py")}
    for path in (ROOT / "cluster").glob("*.py"):
        assert not any(m == "baselines" or m.startswith("baselines.") for m in _imports(path)), path


# ----------------------------------------------------------------------------- the CPU-fallback rule


def test_cpu_fallback_rule_by_hand():
    spec = _spec()  # 0 = CPU, 1 and 2 = GPUs
    p = np.array([0, 1, 2, 1, 2])
    ok = np.array([False, False, False, True, True])
    assert cpu_fallback(p, ok, spec).tolist() == [0, 0, 0, 1, 2]
    assert p.tolist() == [0, 1, 2, 1, 2]  # not modified in place
    assert cpu_fallback(np.stack([p, p[::-1]]), ok, spec).tolist() == [[0, 0, 0, 1, 2], [0, 0, 0, 1, 0]]
    is_gpu = np.array([False, True, True])
    assert [fallback_device(int(d), bool(o), is_gpu, 0) for d, o in zip(p, ok)] == [0, 0, 0, 1, 2]
    assert fallback_device(1, False, is_gpu, -1) == 1  # no CPU: stays
    gpu_only = ClusterSpec(name="g", devices=[spec.devices[1]], default_link=spec.default_link)
    assert cpu_fallback(np.array([0]), np.array([False]), gpu_only).tolist() == [0]
    with pytest.raises(ValueError, match="has no CPU device"):
        cpu_fallback(np.array([0]), np.array([False]), gpu_only, require_cpu=True)
    with pytest.raises(ValueError, match="gpu_ok has"):
        cpu_fallback(p, ok[:2], spec)


def test_one_rule_serves_baselines_calibration_and_simulators(rnnlm_small, k80x2):
    """Op 0 loses its GPU kernel: the baselines and the calibration move its group, the simulators
    the op alone, all through :func:`cluster.kernels.cpu_fallback`."""
    import dataclasses

    from baselines import BaselineContext
    from cluster.calibrate import kind_placements
    from cluster.fast_simulator import FastSimulator
    from cluster.simulator import Simulator
    from compgraph.ir import OpGraph

    g0 = rnnlm_small.graph
    ops = [dataclasses.replace(op, gpu_kernel=(i != 5)) for i, op in enumerate(g0.ops)]
    graph = OpGraph(g0.name, ops, g0.edges)
    grouping = rnnlm_small.grouping
    G = grouping.num_groups
    gok = group_gpu_ok(graph, grouping)
    assert (~gok).sum() == 1 and not gok[grouping.op_group[5]]
    ctx = BaselineContext(graph, grouping, k80x2)
    onto_gpu = np.full(G, 2, dtype=np.int64)
    assert ctx.cpu_fallback(onto_gpu).tolist() == cpu_fallback(onto_gpu, gok, k80x2).tolist()
    prepared = dataclasses.replace(rnnlm_small, graph=graph)
    assert kind_placements(prepared, k80x2)["gpu"].tolist() == cpu_fallback(np.ones(G, int), gok, k80x2).tolist()
    op_p = np.full(graph.num_ops, 1, dtype=np.int64)
    want = cpu_fallback(op_p, op_gpu_ok(graph), k80x2)
    assert want[5] == 0 and (np.delete(want, 5) == 1).all()
    assert Simulator(graph, k80x2).effective_placement(op_p).tolist() == want.tolist()
    fast = FastSimulator(graph, k80x2)
    assert fast.effective_placement(op_p).tolist() == want.tolist()
    # the compiled kernel (fallback_device inlined) agrees with the reference on the moved op
    assert fast.run_batch(op_p[None, :])[0].step_time_s == Simulator(graph, k80x2).run(op_p).step_time_s


# ----------------------------------------------------------------------------- grappler


@pytest.fixture(scope="module")
def tiny():
    """A real TF training step: x[256,1024] @ w1 -> relu -> @ w2 -> loss, plain SGD; one group per op."""
    from compgraph.ir import Grouping
    from compgraph.prepare import PreparedGraph
    from compgraph.tf_env import import_tensorflow
    from compgraph.tf_import import import_graph_def

    tf = import_tensorflow()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [256, 1024], name="x")
        w1 = tf.compat.v1.get_variable("w1", [1024, 1024])
        w2 = tf.compat.v1.get_variable("w2", [1024, 1024])
        h = tf.nn.relu(tf.matmul(x, w1, name="mm1"), name="h")
        loss = tf.reduce_mean(tf.matmul(h, w2, name="mm2"), name="loss")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf.compat.v1.global_variables_initializer()
    gd = g.as_graph_def(add_shapes=True)
    fetches = ["train", "loss"]
    graph = import_graph_def(gd, fetches, name="tiny")
    grouping = Grouping(np.arange(graph.num_ops, dtype=np.int64), [op.name for op in graph.ops], grouper="per-op")
    return PreparedGraph(None, "user", None, graph, grouping, gd, tuple(fetches))


def test_grappler_measures_placements_of_a_real_graph(tiny):
    spec = _spec()  # GPUs exactly 4x the CPU in FLOP/s and bandwidth
    env = make_environment("grappler", tiny, spec)
    n = tiny.grouping.num_groups
    cpu = env.measure(np.zeros(n, dtype=np.int64))
    gpu0 = env.measure(np.ones(n, dtype=np.int64))
    gpu1 = env.measure(np.full(n, 2, dtype=np.int64))
    assert cpu.step_time_s > 0 and not cpu.oom
    assert gpu0.step_time_s == gpu1.step_time_s  # identical GPUs
    # grappler prices an op as FLOPs / peak + bytes / bandwidth: all 4x faster on a GPU
    assert cpu.step_time_s / gpu0.step_time_s == pytest.approx(4.0, rel=0.05)
    assert cpu.compute_s[0] == pytest.approx(cpu.step_time_s, rel=0.01) and cpu.compute_s[1:] == [0.0, 0.0]
    # GPU-only split: the matmuls of the forward pass on the other GPU
    split = np.ones(n, dtype=np.int64)
    names = [op.name for op in tiny.graph.ops]
    split[names.index("mm2")] = 2
    split[names.index("mm1")] = 2
    m = env.measure(split)
    assert m.step_time_s > 0 and m.compute_s[0] == 0.0 and m.compute_s[1] > 0 and m.compute_s[2] > 0
    assert m.step_time_s != gpu0.step_time_s
    # the placement reaches the GraphDef grappler sees
    placed = {nd.name: nd.device for nd in env.placed_graph_def(split).node}
    assert placed["mm1"].endswith("device:GPU:1") and placed["h"].endswith("device:GPU:0")
    batch = env.measure_batch(np.stack([np.zeros(n, dtype=np.int64), split]))
    assert [b.step_time_s for b in batch] == [cpu.step_time_s, m.step_time_s]
    with pytest.raises(ValueError, match="out of range"):
        env.measure(np.full(n, 3))
    with pytest.raises(ValueError, match="expected"):
        env.measure(np.zeros(n + 1, dtype=np.int64))


def test_grappler_device_properties_reproduce_the_spec_peaks():
    from cluster.grappler import device_names, device_properties

    spec = _spec(cpu_flops=1.3248e12, gpu_flops=4.365e12, cpu_bw=68e9, gpu_bw=240e9)
    props = device_properties(spec)
    assert [p.name for p in props] == device_names(spec) == [
        "/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:GPU:0",
        "/job:localhost/replica:0/task:0/device:GPU:1"]
    cpu, gpu = props[0].properties, props[1].properties
    # OpLevelCostEstimator::GetDeviceInfo: CPU cores x MHz x 1e-3 GFLOP/s; GPU x 64 cores/SM x 2
    assert cpu.num_cores * cpu.frequency * 1e6 == pytest.approx(1.3248e12, rel=1e-4)
    assert gpu.num_cores * gpu.frequency * 1e6 * 128 == pytest.approx(4.365e12, rel=1e-4)
    assert gpu.environment["architecture"] == "7.0" and cpu.bandwidth == 68_000_000 and gpu.memory_size == 8_000_000_000
