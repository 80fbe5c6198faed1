"""Tests for cluster.real: real TensorFlow execution of placements on logical CPU devices.

The small RNNLM (``rnnlm_small``, ~1.6k ops) runs a step in well under a second; tests
use 2-3 steps. This machine has no GPU: the ``cpu4`` preset's GPU-kind devices are
logical CPUs (``tf_device``), and the kernel-availability check is tested before running
(TensorFlow's registry reports GPU kernels even here).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster.real import (
    ColocationError,
    KernelUnavailableError,
    PlacedSession,
    PlacementError,
    RealEnvironment,
    RealMeasurement,
    has_kernel,
    node_devices_of,
    tf_devices,
    trace_devices,
)
from cluster.spec import load_cluster
from compgraph.ir import Grouping
from compgraph.tf_env import import_tensorflow
from compgraph.tf_import import import_graph_def


@pytest.fixture(scope="module")
def cpu4():
    return load_cluster("cpu4")


def _tiny(build):
    """(OpGraph, one-group-per-op Grouping, GraphDef, fetches) of a tiny graph built by ``build(tf)``."""
    tf = import_tensorflow()
    g = tf.Graph()
    with g.as_default():
        fetches = build(tf)
    gd = g.as_graph_def(add_shapes=True)
    graph = import_graph_def(gd, fetches, name="tiny")
    grouping = Grouping(np.arange(graph.num_ops), [op.name for op in graph.ops], grouper="per-op")
    return graph, grouping, gd, fetches


def test_tf_devices_mapping(cpu4, k80x2):
    assert tf_devices(cpu4, num_gpus=0) == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2", "/device:CPU:3"]
    # explicit tf_device wins even where GPUs exist
    assert tf_devices(cpu4, num_gpus=8)[1] == "/device:CPU:1"
    # k80x2 has no tf_device: GPUs map to the GPUs that exist, or to logical CPUs on a CPU-only machine
    import warnings

    from cluster.real import StandInWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # real GPUs: nothing to say
        assert tf_devices(k80x2, num_gpus=2) == ["/device:CPU:0", "/device:GPU:0", "/device:GPU:1"]
    with pytest.warns(StandInWarning, match=r"cluster 'k80x2': no GPU on this machine: .*\(/gpu:0 -> /device:CPU:1, "
                                            r"/gpu:1 -> /device:CPU:2\); real step times there are CPU times"):
        assert tf_devices(k80x2, num_gpus=0) == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    with pytest.raises(ValueError, match="2 GPU devices .* 1 GPU"):
        tf_devices(k80x2, num_gpus=1)


def test_two_device_run_places_every_node_where_placed(rnnlm_small, cpu4):
    env = RealEnvironment.from_prepared(rnnlm_small, cpu4, steps=3, warmup=1)
    ng = rnnlm_small.grouping.num_groups
    gp = np.arange(ng) % 2  # groups alternate between /cpu:0 and /gpu:0 (logical CPU 1)
    want = node_devices_of(rnnlm_small.graph, env.op_placement(gp), env.devices)
    with env.session(gp) as sess:
        sess.run_step()
        r = sess.run_step(trace=True)
    ran = trace_devices(r.run_metadata)
    wrong = {n: (want[n], ran[n]) for n in want if n in ran and ran[n] != want[n]}
    assert wrong == {}
    seen = [n for n in want if n in ran]
    placeholders = [op.name for op in rnnlm_small.graph.ops if op.type == "Placeholder"]
    # fed placeholders do not run; the few others missing are constants the executor skips tracing
    assert len(seen) >= 0.99 * (len(want) - len(placeholders))
    assert {ran[n] for n in seen} == {"/device:CPU:0", "/device:CPU:1"}
    assert math.isfinite(r.loss)

    m = env.measure(gp)
    assert isinstance(m, RealMeasurement) and not m.oom
    assert len(m.step_times_s) == 2 and len(m.warmup_s) == 1
    assert m.step_time_s == pytest.approx(np.mean(m.step_times_s))
    assert m.min_s <= m.step_time_s <= m.max_s and m.std_s >= 0


def test_synthetic_inputs_infer_id_ranges_and_are_seeded(rnnlm_small, cpu4):
    env = RealEnvironment.from_prepared(rnnlm_small, cpu4, steps=2, seed=3)
    vocab = rnnlm_small.config.vocab_size
    with env.session(np.zeros(rnnlm_small.grouping.num_groups, dtype=np.int64)) as sess:
        inputs = sess.inputs
        # ids -> ResourceGather on the [vocab, hidden] embedding; targets -> logits' last dim
        assert inputs.bounds() == {"rnnlm/inputs": vocab, "rnnlm/targets": vocab}
        f0, f0b, f1 = inputs.feed(0), inputs.feed(0), inputs.feed(1)
    for t, v in f0.items():
        assert v.shape == (rnnlm_small.config.batch_size, rnnlm_small.config.num_steps)
        assert v.min() >= 0 and v.max() < vocab
        np.testing.assert_array_equal(v, f0b[t])
    assert any((f0[t] != f1[t]).any() for t in f0)


def test_int_placeholder_without_inferable_range_is_named():
    def build(tf):
        x = tf.compat.v1.placeholder(tf.int32, [4], name="ids")
        return [tf.reduce_sum(tf.cast(x, tf.float32), name="loss").op.name]

    graph, grouping, gd, fetches = _tiny(build)
    env = RealEnvironment(graph, grouping, load_cluster("cpu4"), gd, fetches, steps=2)
    with pytest.raises(ValueError, match="placeholder 'ids'.*int_bounds"):
        env.measure(np.zeros(grouping.num_groups, dtype=np.int64))
    env = RealEnvironment(graph, grouping, load_cluster("cpu4"), gd, fetches, steps=2, int_bounds={"ids": 5})
    assert not env.measure(np.zeros(grouping.num_groups, dtype=np.int64)).oom


@pytest.mark.slow
def test_resource_exhausted_gives_oom():
    """A real ResourceExhaustedError: a 2**60-element float32 fill (4 EiB) cannot be allocated.

    TensorFlow enforces no memory limit on CPU devices, so the OOM path is driven by an
    allocation no machine can satisfy (malloc fails at once; nothing is touched).
    """

    def build(tf):
        w = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
        big = tf.zeros([2**60], name="big")
        loss = tf.add(tf.reduce_sum(w), tf.reduce_sum(big), name="loss")
        tf.compat.v1.global_variables_initializer()
        return [loss.op.name]

    graph, grouping, gd, fetches = _tiny(build)
    env = RealEnvironment(graph, grouping, load_cluster("cpu4"), gd, fetches, steps=2)
    m = env.measure(np.zeros(grouping.num_groups, dtype=np.int64))
    assert m.oom and m.step_time_s is None and m.step_times_s == []


def _string_graph(tf):
    a = tf.constant("a", name="a")
    b = tf.constant("b", name="b")
    return [tf.strings.join([a, b], name="joined").op.name]


def test_op_without_gpu_kernel_on_gpu_device_fails_before_running(cpu4, monkeypatch):
    graph, grouping, gd, fetches = _tiny(_string_graph)
    node = next(n for n in gd.node if n.name == "joined")
    assert node.op == "StringJoin" and has_kernel(node, "CPU") and not has_kernel(node, "GPU")
    tf = import_tensorflow()

    def no_session(*a, **k):
        raise AssertionError("a session was created: the kernel check must come before running")

    env = RealEnvironment(graph, grouping, cpu4, gd, fetches, steps=2)
    gp = np.zeros(grouping.num_groups, dtype=np.int64)
    gp[grouping.op_group[graph.index["joined"]]] = 2  # /gpu:1, a GPU-kind device
    with monkeypatch.context() as mp:
        mp.setattr(tf.compat.v1, "Session", no_session)
        with pytest.raises(KernelUnavailableError, match=r"'joined' \(type StringJoin\) placed on /gpu:1.*no GPU kernel"):
            env.measure(gp)
    # soft placement moves it to the CPU, as the simulator does, and it runs
    soft = RealEnvironment(graph, grouping, cpu4, gd, fetches, steps=2, soft_placement=True)
    assert soft.op_placement(gp)[graph.index["joined"]] == 0
    m = soft.measure(gp)
    assert not m.oom and m.step_time_s > 0


def test_session_refusal_is_a_placement_error_naming_the_op():
    """Bypass the pre-run check: TensorFlow's own InvalidArgumentError becomes a PlacementError.

    ``/device:GPU:0`` does not exist here (and StringJoin has no GPU kernel anywhere).
    """
    graph, grouping, gd, fetches = _tiny(_string_graph)
    with PlacedSession(gd, fetches, {"joined": "/device:GPU:0"}) as sess:
        with pytest.raises(PlacementError, match="joined"):
            sess.run_step()


def test_split_colocation_is_named_before_running(rnnlm_small, cpu4):
    g = rnnlm_small.graph
    per_op = Grouping(np.arange(g.num_ops), [op.name for op in g.ops], grouper="per-op")
    env = RealEnvironment(g, per_op, cpu4, rnnlm_small.graph_def, rnnlm_small.fetches, steps=2)
    p = np.zeros(g.num_ops, dtype=np.int64)
    var = "rnnlm/embedding/embedding"
    assert any(var in op.colocation for op in g.ops)
    p[g.index[var]] = 1
    with pytest.raises(ColocationError, match="rnnlm/embedding/embedding on /gpu:0"):
        env.measure(p)


def test_bad_arguments_are_named(rnnlm_small, cpu4):
    with pytest.raises(ValueError, match="steps: must exceed warmup=1"):
        RealEnvironment.from_prepared(rnnlm_small, cpu4, steps=1)
    with pytest.raises(ValueError, match="devices: 2 given"):
        RealEnvironment.from_prepared(rnnlm_small, cpu4, devices=["/device:CPU:0", "/device:CPU:1"])
    env = RealEnvironment.from_prepared(rnnlm_small, cpu4, steps=2)
    with pytest.raises(ValueError, match="placement: length"):
        env.measure(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        env.measure(np.full(rnnlm_small.grouping.num_groups, 4))
