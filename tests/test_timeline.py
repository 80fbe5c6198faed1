"""The per-device timeline of a simulated step (hand-computed), its Chrome trace and Gantt chart,
and both in an experiment's run folder and MLflow run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cluster.simulator import Simulator
from cluster.spec import ClusterSpec
from compgraph.ir import Edge, Grouping, Op, OpGraph
from tracking.plots import plot_timeline
from tracking.timeline import chrome_trace, op_devices


def _branches():
    """src(d0) -> x(d0), src -> y(d1), x -> sink(d0), y -> sink(d0); latency 0.5 s, 1000 B/s;
    times src 1, x 3, y 2, sink 1 (tests/test_simulator.py's two-branch case):
      src 0..1 on d0; x 1..4 on d0; src:0 -> d1 1..3.5 (0.5 + 2000/1000); y 3.5..5.5 on d1;
      y:0 -> d0 5.5..6.5 (0.5 + 500/1000); sink 6.5..7.5 on d0."""
    def op(name, nbytes):
        return Op(name=name, type="Test", output_shapes=[(nbytes // 4,)], output_bytes=[nbytes])

    g = OpGraph("branches", [op("src", 2000), op("x", 1000), op("y", 500), op("sink", 0)],
                [Edge(0, 1, 2000), Edge(0, 2, 2000), Edge(1, 3, 1000), Edge(2, 3, 500)])
    dev = dict(kind="gpu", peak_flops=1e12, memory_bandwidth=1e12, memory_bytes=1e12, op_overhead_s=0.0)
    spec = ClusterSpec(name="test", devices=[{"name": "d0", **dev}, {"name": "d1", **dev}],
                       default_link={"bandwidth": 1000.0, "latency_s": 0.5})
    times = np.array([[1, 99], [3, 99], [99, 2], [1, 99]], dtype=np.float64)
    return g, spec, times


def test_timeline_lists_every_op_and_transfer_by_hand():
    g, spec, times = _branches()
    r = Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0]), timeline=True)
    got = [(s.kind, s.name, s.src_device, s.dst_device, s.start_s, s.end_s) for s in r.timeline]
    assert got == [("op", "src", 0, 0, 0.0, 1.0), ("op", "x", 0, 0, 1.0, 4.0), ("transfer", "src:0->d1", 0, 1, 1.0, 3.5),
                   ("op", "y", 1, 1, 3.5, 5.5), ("transfer", "y:0->d0", 1, 0, 5.5, 6.5), ("op", "sink", 0, 0, 6.5, 7.5)]
    assert Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0])).timeline is None  # only when asked


def test_chrome_trace_and_gantt_chart(tmp_path):
    g, spec, times = _branches()
    r = Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0]), timeline=True)
    trace = json.loads(json.dumps(chrome_trace(r, g, spec, "branches")))  # JSON-able
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in complete] == [
        ("src", 1, 0, 0.0, 1e6), ("x", 1, 0, 1e6, 3e6), ("src:0->d1", 2, 0, 1e6, 2.5e6),
        ("y", 1, 1, 3.5e6, 2e6), ("y:0->d0", 2, 1, 5.5e6, 1e6), ("sink", 1, 0, 6.5e6, 1e6)]
    assert [e["args"]["bytes"] for e in complete if e["cat"] == "transfer"] == [2000, 500]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names[(1, 0)] == "d0" and names[(2, 0)] == "d0 -> d1" and names[(2, 1)] == "d1 -> d0"
    assert trace["otherData"]["step_time_s"] == pytest.approx(7.5)
    png = plot_timeline(r, g, ["d0", "d1"], tmp_path / "timeline.png", title="branches")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="timeline=True"):
        chrome_trace(Simulator(g, spec, op_times=times).run(np.array([0, 0, 1, 0])), g, spec)


def test_op_devices_reads_group_unit_and_op_names():
    g, spec, _ = _branches()

    class Prepared:
        graph = g
        grouping = Grouping(np.array([0, 0, 1, 0]), ["a", "b"], "test")

    devices = ["d0", "d1"]
    assert op_devices(Prepared, {"a": "d1", "b": "d0"}, devices).tolist() == [1, 1, 0, 1]
    assert op_devices(Prepared, {"src": "d0", "x": "d1", "y": "d1", "sink": "d0"}, devices).tolist() == [0, 1, 1, 0]
    assert op_devices(Prepared, {"a": "d1"}, devices) is None  # a group missing
    assert op_devices(Prepared, {"a": "d1", "b": "gpu:9"}, devices) is None  # a device not in the cluster
