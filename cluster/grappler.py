"""TensorFlow's own cost model as an environment: grappler's ``VirtualCluster``.

[`GrapplerEnvironment`][cluster.grappler.GrapplerEnvironment] measures a placement by handing the placed ``GraphDef`` (each
node's ``device`` set from the op placement) to grappler's virtual cluster
(``tensorflow.python.grappler.cluster.Cluster`` built from ``DeviceProperties``), whose
``MeasureCosts`` runs the ``AnalyticalCostEstimator``: the ``VirtualScheduler`` walks the
graph device by device (one op at a time per device, devices in parallel, ``_Send``/``_Recv``
pairs inserted on cross-device edges) and the ``OpLevelCostEstimator`` prices each op from its
static shapes (FLOPs at the device's peak plus bytes at its memory bandwidth; TensorFlow
source: ``tensorflow/core/grappler/costs/op_level_cost_estimator.cc``, ``virtual_scheduler.cc``).
It is an independent reference beside our simulator, built by TensorFlow's authors.

Devices are described so that grappler's throughput equals the cluster spec's. Grappler
derives a device's peak from ``DeviceProperties`` as (``OpLevelCostEstimator::GetDeviceInfo``)

* CPU: ``num_cores * frequency_MHz * 1e-3`` GFLOP/s (one FLOP per cycle per core);
* GPU: ``num_cores * frequency_MHz * 1e-3 * cores_per_SM * 2`` GFLOP/s, ``cores_per_SM``
  from ``environment["architecture"]`` (64 from compute capability 6 on);
* memory: ``bandwidth`` in KB/s.

so each device gets ``num_cores = 1``, the frequency that reproduces ``peak_flops`` (MHz,
rounded to an integer: error below 1e-4 for any device over 10 GFLOP/s), ``bandwidth =
memory_bandwidth / 1e3`` and ``memory_size = memory_bytes``. Described instead as TensorFlow
describes a local Haswell (18 cores x 2300 MHz, one FLOP per cycle), the CPU would be 32x slower
than its datasheet peak; that is a property of grappler's model, not of the hardware, and is
not used here. What grappler leaves out (links, per-op overheads) is listed in the README.
"""

from __future__ import annotations

import numpy as np

from cluster.environment import Measurement
from cluster.kernels import cpu_fallback, op_gpu_ok
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph
from compgraph.tf_env import import_tensorflow

_GPU_ARCH = "7.0"  # compute capability >= 6: 64 cores per SM in grappler's GetDeviceInfo
_GPU_FLOP_PER_CYCLE = 64 * 2  # cores per SM x 2 FLOP per multiply-add


def device_names(spec: ClusterSpec) -> list[str]:
    """Grappler's full device name of each spec device: ``/job:localhost/replica:0/task:0/device:GPU:k``
    (``k`` counts devices of the same kind in spec order)."""
    count = {"cpu": 0, "gpu": 0}
    out = []
    for d in spec.devices:
        out.append(f"/job:localhost/replica:0/task:0/device:{d.kind.upper()}:{count[d.kind]}")
        count[d.kind] += 1
    return out


def device_properties(spec: ClusterSpec) -> list:
    """``[num_devices]`` ``NamedDevice`` protos whose grappler peak FLOP/s, memory bandwidth and size
    are the spec's (see the module docstring for the formula they invert)."""
    import_tensorflow()
    from tensorflow.core.protobuf import device_properties_pb2

    out = []
    for name, d in zip(device_names(spec), spec.devices):
        per_cycle = _GPU_FLOP_PER_CYCLE if d.kind == "gpu" else 1
        props = device_properties_pb2.DeviceProperties(
            type=d.kind.upper(),
            num_cores=1,
            frequency=max(int(round(d.peak_flops / per_cycle / 1e6)), 1),
            bandwidth=max(int(round(d.memory_bandwidth / 1e3)), 1),
            memory_size=int(d.memory_bytes),
            model=d.model,
        )
        if d.kind == "gpu":
            props.environment["architecture"] = _GPU_ARCH
        out.append(device_properties_pb2.NamedDevice(name=name, properties=props))
    return out


class GrapplerEnvironment:
    """Grappler's ``VirtualCluster`` behind the [`cluster.environment.Environment`][cluster.environment.Environment] interface.

    Args:
        graph, grouping, spec: the op graph, its groups (placements are per group) and the cluster.
        graph_def: the TensorFlow ``GraphDef`` ``graph`` was imported from (with ``_output_shapes``).
        fetches: op names one training step runs (grappler prunes the graph to what they need).

    Ops with no GPU kernel placed on a GPU move to the first CPU ([`cluster.kernels`][cluster.kernels], per op,
    as the simulator does); GraphDef nodes outside ``graph`` go to the first device. Grappler
    reports no out-of-memory, so ``oom`` is always False.

    Raises:
        ValueError: ``graph_def`` is None or ``fetches`` is empty.
    """

    kind = "grappler"

    def __init__(self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, graph_def, fetches) -> None:
        if graph_def is None:
            raise ValueError("graph_def: None; grappler needs the TensorFlow GraphDef (PreparedGraph.graph_def)")
        if not fetches:
            raise ValueError("fetches: empty; grappler needs the op names of one step")
        tf = import_tensorflow()
        from tensorflow.python.grappler import cluster as gcluster

        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.graph_def, self.fetches = graph_def, list(fetches)
        self.names = device_names(spec)
        self._gpu_ok = op_gpu_ok(graph)
        self._cluster = gcluster.Cluster(devices=device_properties(spec), disable_detailed_stats=False,
                                         disable_timeline=False)
        index = graph.index
        self._node_op = [index.get(n.name, -1) for n in graph_def.node]  # GraphDef node -> op index (-1: none)
        self._template = tf.compat.v1.GraphDef()
        self._template.CopyFrom(graph_def)

    def _check(self, gp: np.ndarray) -> np.ndarray:
        gp = np.asarray(gp)
        if gp.shape != (self.grouping.num_groups,):
            raise ValueError(f"placement: length {gp.shape}, expected ({self.grouping.num_groups},)")
        if gp.dtype.kind not in "iu" and gp.size and not np.all(np.mod(gp, 1) == 0):
            raise ValueError(f"placement: device indices must be integers, got dtype {gp.dtype}")
        gp = gp.astype(np.int64)
        nd = len(self.spec.devices)
        if gp.size and (gp.min() < 0 or gp.max() >= nd):
            bad = int(gp.min()) if gp.min() < 0 else int(gp.max())
            raise ValueError(f"placement: device index {bad} out of range 0..{nd - 1}")
        return gp

    def placed_graph_def(self, group_placement: np.ndarray):
        """The ``GraphDef`` with each node's ``device`` set from ``group_placement`` ``[num_groups]``
        (after the CPU-fallback rule).

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        op_p = cpu_fallback(self.grouping.expand(self._check(group_placement)), self._gpu_ok, self.spec)
        from compgraph.tf_import import placed_graph_def

        first = self.names[0]
        return placed_graph_def(self._template, [self.names[int(op_p[i])] if i >= 0 else first for i in self._node_op])

    def measure(self, group_placement: np.ndarray) -> Measurement:
        """Grappler's estimate of one step of ``group_placement`` (``[num_groups]`` device indices).

        Returns:
            ``step_time_s``: grappler's predicted step (seconds); ``compute_s`` per device: the
            summed op times grappler scheduled there (seconds); ``transfer_s``: zeros (grappler
            prices ``_Send``/``_Recv`` as identities).
        Raises:
            ValueError: wrong length or a device index out of range.
        """
        from tensorflow.core.protobuf import meta_graph_pb2
        from tensorflow.python.grappler import item as gitem

        mg = meta_graph_pb2.MetaGraphDef(graph_def=self.placed_graph_def(group_placement))
        mg.collection_def["train_op"].node_list.value.extend(self.fetches)
        item = gitem.Item(mg, ignore_colocation=True, ignore_user_placement=False)
        _, run_time, step_stats = self._cluster.MeasureCosts(item)
        compute = dict.fromkeys(self.names, 0.0)
        for dev in step_stats.dev_stats:
            if dev.device in compute:
                compute[dev.device] += sum(ns.op_end_rel_micros for ns in dev.node_stats) * 1e-6
        t = float(run_time)
        return Measurement(step_time_s=t, oom=False, compute_s=[compute[n] for n in self.names],
                           transfer_s=[0.0] * len(self.names), simulated_step_time_s=t)

    def measure_batch(self, group_placements: np.ndarray) -> list[Measurement]:
        """[`measure`][cluster.grappler.GrapplerEnvironment.measure] each row of ``group_placements`` (``[K, num_groups]``).

        Raises:
            ValueError: not a 2-D array of ``num_groups`` columns, or a device index out of range.
        """
        gps = np.asarray(group_placements)
        if gps.ndim != 2 or gps.shape[1] != self.grouping.num_groups:
            raise ValueError(f"placements: shape {gps.shape}, expected (K, {self.grouping.num_groups})")
        return [self.measure(gp) for gp in gps]
