"""The eager execution model (cluster.eager): program order on one host thread, as PyTorch runs a placed step."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.eager import EagerExecution
from cluster.factory import make_environment
from cluster.simulated import SimulatedEnvironment
from cluster.spec import ClusterSpec, load_cluster
from compgraph.ir import Edge, Grouping, Op, OpGraph


def _spec() -> ClusterSpec:
    dev = dict(peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12)
    return ClusterSpec(name="t", devices=[dict(name="cpu", kind="cpu", **dev), dict(name="gpu", kind="gpu", **dev)],
                       default_link={"bandwidth": 100.0, "latency_s": 0.0})


def _graph(edges: list[tuple[int, int, int]], n: int) -> OpGraph:
    ops = [Op(f"op{i}", "Test", [(1,)], [4], flops=1.0) for i in range(n)]
    return OpGraph("g", ops, [Edge(a, b, nbytes) for a, b, nbytes in edges])


def _singletons(n: int) -> Grouping:
    return Grouping(op_group=np.arange(n), names=[f"op{i}" for i in range(n)])


def test_a_cpu_op_holds_the_host_so_a_later_gpu_op_starts_after_it():
    """op0 (CPU, 1 s) and op1 (GPU, 1 s) are independent: the dataflow simulator runs them at once
    (1 s), the eager step launches op1 only when op0 returns (2 s)."""
    g = _graph([], 2)
    times = np.array([[1.0, 1.0], [1.0, 1.0]])
    place = np.array([0, 1])
    assert EagerExecution(g, _spec(), op_times=times).step_times(place[None])[0] == pytest.approx(2.0)
    env = SimulatedEnvironment(g, _singletons(2), _spec(), op_times=times)
    assert env.measure(place).step_time_s == pytest.approx(1.0)


def test_a_copy_waits_for_the_stream_and_holds_the_host():
    """op0 (GPU, 3 s) and op1 (GPU, 1 s) are launched in that order; op2 (CPU, 1 s) reads op0's 100
    bytes (1 s over the link). The dataflow simulator copies op0's tensor when op0 ends (3-4 s) and
    runs op2 at 4-5 s while op1 runs: 5 s. The eager step's copy waits for everything launched on the
    stream before it, op1 included (4 s), then holds the host: 4-5 s copy, 5-6 s op2: 6 s."""
    g = _graph([(0, 2, 100)], 3)
    times = np.array([[1.0, 3.0], [1.0, 1.0], [1.0, 1.0]])
    place = np.array([1, 1, 0])
    assert EagerExecution(g, _spec(), op_times=times).step_times(place[None])[0] == pytest.approx(6.0)
    assert SimulatedEnvironment(g, _singletons(3), _spec(), op_times=times).measure(place).step_time_s == pytest.approx(5.0)
    eager_env = SimulatedEnvironment(g, _singletons(3), _spec(), op_times=times, execution="eager")
    assert eager_env.measure(place).step_time_s == pytest.approx(6.0)


def test_one_copy_per_tensor_and_destination():
    """Two CPU readers of one GPU tensor: one copy (1 s), not two."""
    g = _graph([(0, 1, 100), (0, 2, 100)], 3)
    times = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    assert EagerExecution(g, _spec(), op_times=times).step_times(np.array([[1, 0, 0]]))[0] == pytest.approx(4.0)


def test_one_device_steps_equal_the_dataflow_simulators():
    """On one device both models serialize every op: a PyTorch step's single-device time is unchanged."""
    from compgraph.frontends import BenchmarkSource, prepare_source
    from compgraph.grouping import colocation_grouping

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    units = colocation_grouping(prepared.graph)
    spec = load_cluster("h200x1")
    dataflow = make_environment("sim", prepared, spec, {"execution": "dataflow"}, grouping=units)
    eager = make_environment("sim", prepared, spec, grouping=units)  # auto: eager for a PyTorch step
    assert eager.execution == "eager" and dataflow.execution == "dataflow"
    for dev in (0, 1):
        p = np.full(units.num_groups, dev)
        assert eager.measure(p).step_time_s == pytest.approx(dataflow.measure(p).step_time_s, rel=1e-9)
    mixed = np.array([i % 2 for i in range(units.num_groups)])
    batch = eager.measure_batch(np.stack([mixed, 1 - mixed]))
    assert batch[0].step_time_s == pytest.approx(eager.measure(mixed).step_time_s)
    assert batch[0].step_time_s >= dataflow.measure(mixed).step_time_s  # no overlap of host and device work


def test_unknown_execution_is_refused():
    g = _graph([], 1)
    with pytest.raises(ValueError, match="execution: unknown 'lazy'"):
        SimulatedEnvironment(g, _singletons(1), _spec(), execution="lazy")


def test_a_copy_between_gpus_does_not_hold_the_host():
    """gpu0 op0 (2 s) -> copy to gpu1 (1 s) -> op1 (1 s); op2 on the CPU (2 s) comes after in program
    order and runs on the host while the copy and op1 run: 4 s, not 2 + 1 + 2 = 5 s."""
    dev = dict(peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12)
    spec = ClusterSpec(name="t2", devices=[dict(name="cpu", kind="cpu", **dev), dict(name="g0", kind="gpu", **dev),
                                           dict(name="g1", kind="gpu", **dev)],
                       default_link={"bandwidth": 100.0, "latency_s": 0.0})
    g = _graph([(0, 1, 100)], 3)
    times = np.array([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    assert EagerExecution(g, spec, op_times=times).step_times(np.array([[1, 2, 0]]))[0] == pytest.approx(4.0)


def test_the_optimum_measures_placements_as_the_eager_environment_does():
    """The optimum of a PyTorch step is searched in program order (``execution="eager"``), so its step
    time is what the environment measures for its placement. op0 and op1 are independent, 1 s each on
    either device: in the dataflow model ``[cpu, gpu]`` runs both at once (1 s), but in program order
    the CPU op holds the host before op1 is launched (2 s); ``[gpu, cpu]`` launches op0 and runs op1
    beside it (1 s). Before, the optimum reported the dataflow 1 s for ``[cpu, gpu]``, which the eager
    environment measures at 2 s."""
    from baselines.optimum import milp_optimum, optimum

    g = _graph([], 2)
    times = np.array([[1.0, 1.0], [1.0, 1.0]])
    env = SimulatedEnvironment(g, _singletons(2), _spec(), op_times=times, execution="eager")
    dataflow = optimum(g, _singletons(2), _spec(), op_times=times)
    assert list(dataflow.placement) == [0, 1] and dataflow.step_time_s == pytest.approx(1.0)
    assert env.measure(dataflow.placement).step_time_s == pytest.approx(2.0)
    for res in (optimum(g, _singletons(2), _spec(), op_times=times, execution="eager"),
                milp_optimum(g, _singletons(2), _spec(), op_times=times, candidates=[np.array([0, 1])],
                             max_milp_ops=0, execution="eager")):  # enumeration, and the polish of a candidate
        assert list(res.placement) == [1, 0]
        assert res.step_time_s == pytest.approx(env.measure(res.placement).step_time_s) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="execution"):
        optimum(g, _singletons(2), _spec(), op_times=times, execution="lazy")


@pytest.mark.parametrize("nbytes, src, dst, paid", [
    (200, 1, 0, True),    # GPU -> host, at the threshold: fresh pages
    (199, 1, 0, False),   # below it: a reused heap block
    (200, 0, 1, False),   # host -> GPU: the new tensor is device memory
])
def test_a_large_copy_to_the_host_pays_for_fresh_pages(nbytes, src, dst, paid):
    """``transfer.fresh_host_bytes_per_s``: a copy from a GPU into new host memory of at least the
    threshold also pays ``bytes / rate`` (here 200 B at 100 B/s: 2 s on top of the link's 2 s)."""
    spec = _spec().model_copy(update={"transfer": _spec().transfer.model_copy(
        update={"fresh_host_bytes_per_s": 100.0, "fresh_host_threshold_bytes": 200})})
    g = _graph([(0, 1, nbytes)], 2)
    times = np.zeros((2, 2))
    place = np.array([[src, dst]])
    link = nbytes / 100.0
    assert EagerExecution(g, spec, op_times=times).step_times(place)[0] == pytest.approx(link + (nbytes / 100.0 if paid else 0))
    assert EagerExecution(g, _spec(), op_times=times).step_times(place)[0] == pytest.approx(link)
    # TensorFlow's dataflow model has no such term
    assert SimulatedEnvironment(g, _singletons(2), spec, op_times=times).measure(place[0]).step_time_s == pytest.approx(link)
