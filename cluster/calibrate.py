"""Calibration: per-op execution times measured from TensorFlow traces, for the simulator.

[`calibrate`][cluster.calibrate.calibrate] runs the training step under placements that put every op on each
device kind of the cluster (by default: everything on the first device of each kind;
groups holding an op with no kernel for that kind go to the first CPU), traces each step
with ``RunOptions(trace_level=FULL_TRACE)`` and reads
``RunMetadata.step_stats.dev_stats[*].node_stats``. An op's time in one step is
``all_end_rel_nanos`` (or ``all_end_rel_micros`` where the nanosecond fields are 0): from
the executor starting the node to its outputs being ready, kernel and dispatch included.
On a GPU, when the trace also has ``.../stream:*`` entries (CUPTI kernel times), the op
time is the larger of the host-side time and the summed kernel time. The table keeps the
per-op median over the steps after the first (dropped as warm-up, 2017 Sec. 3.4).

By default the calibration session runs ops one at a time (``inter_op_parallelism_threads
= 1``), so each op's time is not inflated by ops running beside it on the same cores, as
the simulator's devices run one op at a time.

[`calibrate_link`][cluster.calibrate.calibrate_link] optionally fits a transfer cost ``latency_s + bytes / bandwidth``
between two devices from a micro-benchmark (see its docstring).

The result is a [`CostTable`][cluster.calibrate.CostTable], saved and loaded as JSON; [`CostTable.op_times`][cluster.calibrate.CostTable.op_times]
gives the ``[num_ops, num_devices]`` seconds matrix for ``Simulator(op_times=...)``; ops
the trace did not show (fed placeholders, pruned or folded nodes) keep their roofline
time ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix]).
"""

from __future__ import annotations

import contextlib

import json
import statistics
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cluster.cost_model import op_time_matrix
from cluster.kernels import cpu_fallback, group_gpu_ok
from cluster.spec import ClusterSpec, LinkSpec
from compgraph.ir import OpGraph
from compgraph.tf_env import import_tensorflow


class CostTable(BaseModel):
    """Measured per-op seconds per device kind.

    Attributes:
        model, size: the benchmark (``rnnlm``, ``small``).
        cluster: the spec's name it was measured on.
        tf_version: TensorFlow's version.
        op_seconds: op name -> device kind (``cpu``/``gpu``) -> median seconds per execution.
        devices: device kind -> TensorFlow device it was measured on (e.g. ``/device:CPU:1``).
        steps: traced steps per placement (the first dropped).
        link: optional fitted transfer cost ([`calibrate_link`][cluster.calibrate.calibrate_link]).
        notes: free text (how it was measured).
    """

    model_config = ConfigDict(extra="forbid")

    model: str = ""
    size: str = ""
    cluster: str = ""
    tf_version: str = ""
    op_seconds: dict[str, dict[str, float]] = Field(default_factory=dict)
    devices: dict[str, str] = Field(default_factory=dict)
    steps: int = 0
    link: LinkSpec | None = None
    notes: str = ""

    def save(self, path: str | Path) -> Path:
        """Write the table as JSON to ``path``; returns the path."""
        path = Path(path)
        path.write_text(self.model_dump_json(indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        """Read a table written by [`save`][cluster.calibrate.CostTable.save].

        Raises:
            ValueError: the file is missing, not JSON, or not a cost table: a field it does not have,
                or no op times (names the file and field).
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"cost table {path}: no such file") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cost table {path}: {exc}") from exc
        try:
            table = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"cost table {path}: {loc}: {err['msg']}") from exc
        if not table.op_seconds:
            raise ValueError(f"cost table {path}: op_seconds: no op times (not a cost table from `placement calibrate`)")
        return table

    def op_times(self, graph: OpGraph, spec: ClusterSpec) -> np.ndarray:
        """Seconds of each op on each device, float64 ``[num_ops, num_devices]``.

        Measured seconds for ops and device kinds in the table; the roofline time
        ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix]) elsewhere.
        """
        times = op_time_matrix(graph, spec)
        kinds = [d.kind for d in spec.devices]
        for i, op in enumerate(graph.ops):
            row = self.op_seconds.get(op.name)
            if not row:
                continue
            for d, kind in enumerate(kinds):
                if kind in row:
                    times[i, d] = row[kind]
        return times

    def coverage(self, graph: OpGraph) -> float:
        """Fraction of the graph's ops that have a measured time (0..1)."""
        if not graph.num_ops:
            return 0.0
        return sum(op.name in self.op_seconds for op in graph.ops) / graph.num_ops

    def apply_link(self, spec: ClusterSpec) -> ClusterSpec:
        """A copy of ``spec`` whose links all cost the fitted [`link`][cluster.calibrate.CostTable.link] (``spec`` itself if none)."""
        if self.link is None:
            return spec
        data = spec.model_dump()
        data["links"] = []
        data["default_link"] = self.link.model_dump()
        return ClusterSpec.model_validate(data)


def _node_seconds(ns) -> float:
    if ns.all_end_rel_nanos:
        return ns.all_end_rel_nanos * 1e-9
    if ns.all_end_rel_micros:
        return ns.all_end_rel_micros * 1e-6
    return max(ns.op_end_rel_micros, 0) * 1e-6


def step_op_seconds(run_metadata) -> dict[str, float]:
    """Node name -> seconds in one traced step (see the module docstring).

    Host-side entries give ``all_end_rel`` per node; GPU stream entries (``.../stream:*``, names
    ``node:Type`` or ``node``) are summed per node and the larger of the two is kept.
    """
    host: dict[str, float] = {}
    kern: dict[str, float] = {}
    for dev in run_metadata.step_stats.dev_stats:
        stream = "/stream:" in dev.device
        if stream and not dev.device.endswith("stream:all"):
            continue  # stream:all already holds every stream's kernels
        if "/memcpy" in dev.device:
            continue
        for ns in dev.node_stats:
            if stream:
                name = ns.node_name.split(":")[0]
                kern[name] = kern.get(name, 0.0) + _node_seconds(ns)
            else:
                host[ns.node_name] = host.get(ns.node_name, 0.0) + _node_seconds(ns)
    for name, s in kern.items():
        if name in host:
            host[name] = max(host[name], s)
    return host


def kind_placements(prepared, spec: ClusterSpec) -> dict[str, np.ndarray]:
    """One group placement per device kind: every group on the first device of that kind.

    Groups with an op lacking a kernel for that kind stay on the first CPU (they are
    measured there only). Returns kind -> ``[num_groups]`` device indices.
    """
    ok = group_gpu_ok(prepared.graph, prepared.grouping)
    out: dict[str, np.ndarray] = {}
    for kind in dict.fromkeys(d.kind for d in spec.devices):
        first = next(i for i, d in enumerate(spec.devices) if d.kind == kind)
        gp = np.full(prepared.grouping.num_groups, first, dtype=np.int64)
        out[kind] = cpu_fallback(gp, ok, spec) if kind == "gpu" and spec.cpu_indices else gp
    return out


def calibrate(prepared, spec: ClusterSpec, placements: dict[str, np.ndarray] | None = None, steps: int = 5,
              seed: int = 0, sequential: bool = True, devices: list[str] | None = None,
              fit_link: bool = False) -> CostTable:
    """Measure every op's time on each device kind from traced TensorFlow steps.

    Args:
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] (with ``graph_def`` and ``fetches``).
        spec: the cluster; its device kinds are the table's columns.
        placements: group placements ``[num_groups]`` to trace (name -> placement); default
            [`kind_placements`][cluster.calibrate.kind_placements]. An op's time is recorded for the kind of the device it ran on;
            an op seen on one kind in several placements keeps the median over all its samples.
        steps: traced steps per placement; the first is dropped (needs ``steps >= 2``).
        seed: seed of the synthetic inputs.
        sequential: run ops one at a time (``inter_op_parallelism_threads=1``).
        devices: TensorFlow device per spec device (default [`cluster.real.tf_devices`][cluster.real.tf_devices]).
        fit_link: also fit one transfer cost between devices 0 and 1 ([`calibrate_link`][cluster.calibrate.calibrate_link])
            and store it as [`CostTable.link`][cluster.calibrate.CostTable.link] (used for every link by [`CostTable.apply_link`][cluster.calibrate.CostTable.apply_link]).
    Returns:
        The [`CostTable`][cluster.calibrate.CostTable].
    Raises:
        ValueError: ``steps < 2`` or a placement of the wrong length;
        cluster.real.PlacementError: a placement TensorFlow cannot run.
    """
    from cluster.factory import make_environment
    from cluster.real import RealEnvironment
    from cluster.real import trace_devices

    if steps < 2:
        raise ValueError(f"steps: need at least 2 (the first is dropped), got {steps}")
    tf = import_tensorflow()
    env = make_environment("real", prepared, spec, {"steps": steps, "warmup": 1, "soft_placement": True,
                                                    "seed": seed, "devices": devices})
    assert isinstance(env, RealEnvironment)
    placements = kind_placements(prepared, spec) if placements is None else placements
    short_to_kind: dict[str, str] = {}
    for i, d in enumerate(spec.devices):
        short_to_kind.setdefault(env.devices[i], d.kind)
    samples: dict[str, dict[str, list[float]]] = {}
    used: dict[str, str] = {}
    # All placements' sessions are open together and stepped in turn (step k of every placement,
    # then step k + 1), so that drift in the machine's speed over the calibration (other load,
    # clock changes) spreads over every device kind instead of biasing the kind measured last.
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(env.session(gp, inter_op_threads=1 if sequential else None))
                    for gp in placements.values()]
        for k in range(steps):
            for sess in sessions:
                r = sess.run_step(trace=True)
                if k == 0:
                    continue
                secs = step_op_seconds(r.run_metadata)
                where = trace_devices(r.run_metadata)
                for name, s in secs.items():
                    kind = short_to_kind.get(where.get(name, ""))
                    if kind is None:
                        continue
                    used.setdefault(kind, where[name])
                    samples.setdefault(name, {}).setdefault(kind, []).append(s)
    table = {
        name: {kind: float(statistics.median(v)) for kind, v in per.items()}
        for name, per in samples.items()
        if name in prepared.graph.index
    }
    link = calibrate_link(spec, 0, 1, devices=devices) if fit_link and len(spec.devices) > 1 else None
    return CostTable(
        model=getattr(prepared.benchmark, "name", ""),
        size=prepared.size,
        cluster=spec.name,
        tf_version=tf.__version__,
        op_seconds=table,
        devices=used,
        steps=steps,
        link=link,
        notes=(
            f"per-op median of all_end_rel over {steps - 1} traced steps after 1 warm-up, "
            f"{'inter_op_parallelism_threads=1' if sequential else 'default inter-op threads'}; "
            f"placements: {', '.join(placements)}; measured {time.strftime('%Y-%m-%dT%H:%M:%S')}"
        ),
    )


def calibrate_link(spec: ClusterSpec, src: int = 0, dst: int = 1, sizes_bytes=(4096, 262144, 4194304, 16777216),
                   repeats: int = 7, devices: list[str] | None = None) -> LinkSpec:
    """Fit ``latency_s + bytes / bandwidth`` for a tensor moved from device ``src`` to ``dst``.

    For each size, a graph holds a float32 variable of that size on ``src`` and reduces it
    with ``reduce_max`` on ``dst`` (a transfer) or on ``src`` (none); the transfer time is the
    median over ``repeats`` runs of the difference, and a least-squares line through
    (bytes, seconds) gives the latency (intercept) and bandwidth (1 / slope). Negative
    intercepts are clamped to 0; a non-positive slope (copies too cheap to see, e.g. CPU
    devices of one process sharing memory) gives a bandwidth of 1e15 bytes/s.

    Raises:
        ValueError: ``src == dst`` or an index out of range.
    """
    from cluster.real import _device_counts, tf_devices

    n = len(spec.devices)
    if not (0 <= src < n and 0 <= dst < n) or src == dst:
        raise ValueError(f"calibrate_link: src={src}, dst={dst}: need two distinct device indices in 0..{n - 1}")
    tf = import_tensorflow()
    devs = tf_devices(spec) if devices is None else devices
    counts = _device_counts([devs[src], devs[dst]])
    config = tf.compat.v1.ConfigProto(device_count={"CPU": counts["CPU"], "GPU": counts["GPU"]})
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    xs, ys = [], []
    for size in sizes_bytes:
        g = tf.Graph()
        with g.as_default():
            with tf.device(devs[src]):
                v = tf.compat.v1.Variable(tf.zeros([max(int(size) // 4, 1)]), use_resource=True)
                # a fresh tensor each run, so no transfer is cached between runs
                x = v.read_value() + tf.random.uniform([])
                local = tf.reduce_max(x)
            with tf.device(devs[dst]):
                remote = tf.reduce_max(x)
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=g, config=config) as s:
            s.run(init)
            s.run([local, remote])
            diffs = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                s.run(local)
                t1 = time.perf_counter()
                s.run(remote)
                t2 = time.perf_counter()
                diffs.append((t2 - t1) - (t1 - t0))
        xs.append(float(size))
        ys.append(float(statistics.median(diffs)))
    slope, intercept = np.polyfit(np.array(xs), np.array(ys), 1)
    bandwidth = 1.0 / slope if slope > 0 else 1e15
    return LinkSpec(bandwidth=float(bandwidth), latency_s=float(max(intercept, 0.0)))
