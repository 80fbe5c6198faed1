"""Real execution: run a placed training step in TensorFlow and time it.

The measurement protocol is the papers': run ``steps`` training steps and drop the first
``warmup`` (Mirhoseini et al. 2017, Sec. 3.4: "we run each placement for 10 steps and
discard the first"; EAGLE drops 5 of 15), and report the mean of the others as the step
time, with their spread ([`RealMeasurement`][cluster.real.RealMeasurement]).

How a placement runs ([`PlacedSession`][cluster.real.PlacedSession]):

* The benchmark's ``GraphDef`` is copied and every node of the op graph gets the
  TensorFlow device of its placed spec device ([`tf_devices`][cluster.real.tf_devices]); nodes outside the op
  graph (the ``init`` op, variable initialisers) get no device and follow their colocation
  constraints (TensorFlow's placer puts an initialiser with its variable).
* The copy is imported into a fresh ``tf.Graph`` and run in a v1 ``Session`` with
  ``ConfigProto(device_count={"CPU": n, "GPU": g})`` (the v1 session ignores
  ``tf.config.set_logical_device_configuration``) and the grappler meta-optimizer
  disabled, so the placement is run as given (measured: with both, every node ran where it
  was placed; on a CPU-only machine the logical CPUs share its cores, so their timings are
  not those of distinct devices).
* Variables are initialised with the graph's ``init`` op (the benchmarks build it with
  ``global_variables_initializer``), then each step is fed synthetic inputs drawn from
  the seed ([`SyntheticInputs`][cluster.real.SyntheticInputs]).

Errors are raised before anything runs where they can be: a placement that splits ops
TensorFlow must colocate ([`ColocationError`][cluster.real.ColocationError]), an op on a device whose type has no
kernel for it in TensorFlow's kernel registry ([`KernelUnavailableError`][cluster.real.KernelUnavailableError]; with
``soft_placement=True`` such groups move to the first CPU instead, as the simulator does,
and the session gets ``allow_soft_placement``). ``ResourceExhaustedError`` while running
gives ``oom=True``. On CPU devices TensorFlow enforces no memory limit, so the OOM path
is only taken on GPUs or when an allocation cannot be satisfied at all.
"""

from __future__ import annotations

from typing import Any

import re
import statistics
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from cluster.environment import Measurement, measure_rows
from cluster.kernels import cpu_fallback
from cluster.spec import ClusterSpec
from compgraph.inputs import ancestors as _ancestors
from compgraph.inputs import infer_int_bound as _infer_int_bound
from compgraph.ir import Grouping, OpGraph
from compgraph.tf_env import import_tensorflow

_DEVICE_RE = re.compile(r"^/(?:device:)?(CPU|GPU|cpu|gpu):(\d+)$")


def _device_parts(name: str) -> tuple[str, int]:
    """``("CPU" | "GPU", index)`` of a TensorFlow device name (``/device:GPU:0``, ``/cpu:0``).

    Raises:
        ValueError: not such a name.
    """
    m = _DEVICE_RE.match(name)
    if m is None:
        raise ValueError(f"device {name!r}: expected /device:CPU:N or /device:GPU:N")
    return m.group(1).upper(), int(m.group(2))


class PlacementError(ValueError):
    """A placement that TensorFlow cannot run as given."""


class ColocationError(PlacementError):
    """Ops that TensorFlow must colocate were placed on different devices."""


class KernelUnavailableError(PlacementError):
    """An op was placed on a device type for which TensorFlow registers no kernel for it."""


@dataclass
class RealMeasurement(Measurement):
    """A placement measured in TensorFlow.

    Attributes (besides [`Measurement`][cluster.environment.Measurement]'s):
        step_times_s: wall-clock seconds of each measured step (after the warm-up), ``[steps - warmup]``;
            on OOM, the steps that finished before it.
        std_s: sample standard deviation of ``step_times_s`` (seconds; 0 for one step, ``None`` if none).
        min_s, max_s: fastest and slowest measured step (seconds; ``None`` if none).
        warmup_s: seconds of each dropped warm-up step.
        devices: TensorFlow device string of each spec device as run.
    """

    step_times_s: list[float] = field(default_factory=list)
    std_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    warmup_s: list[float] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- devices


def num_physical_gpus() -> int:
    """Number of GPUs TensorFlow sees on this machine."""
    tf = import_tensorflow()
    return len(tf.config.list_physical_devices("GPU"))


class StandInWarning(UserWarning):
    """A spec's GPU devices run on logical CPUs of this machine, which has no GPU ([`tf_devices`][cluster.real.tf_devices])."""


def tf_devices(spec: ClusterSpec, num_gpus: int | None = None) -> list[str]:
    """The TensorFlow device string each spec device runs on, ``[num_devices]``.

    A device's ``tf_device`` is used when set. Otherwise CPUs map to ``/device:CPU:k`` (k-th CPU
    of the spec); GPUs map to ``/device:GPU:j`` when this machine has at least as many GPUs
    as the spec, and, on a machine with no GPU, to logical CPUs after the spec's CPUs
    (``/device:CPU:{num_cpus + j}``), standing in for the GPUs.

    Args:
        spec: the cluster.
        num_gpus: GPUs on this machine; ``None`` asks TensorFlow.
    Raises:
        ValueError: the machine has some GPUs but fewer than the spec's unmapped GPU devices
            (names the spec and both counts).
    Warns:
        StandInWarning: GPUs stand in as logical CPUs (one line naming each pair; Python shows it once
            per spec and process).
    """
    if num_gpus is None:
        num_gpus = num_physical_gpus()
    cpus = [i for i, d in enumerate(spec.devices) if d.kind == "cpu" and d.tf_device is None]
    gpus = [i for i, d in enumerate(spec.devices) if d.kind == "gpu" and d.tf_device is None]
    out: list[str] = [""] * len(spec.devices)
    for i, d in enumerate(spec.devices):
        if d.tf_device is not None:
            kind, index = _device_parts(d.tf_device)
            out[i] = f"/device:{kind}:{index}"
    for k, i in enumerate(cpus):
        out[i] = f"/device:CPU:{k}"
    if gpus:
        if num_gpus >= len(gpus):
            for j, i in enumerate(gpus):
                out[i] = f"/device:GPU:{j}"
        elif num_gpus == 0:
            for j, i in enumerate(gpus):
                out[i] = f"/device:CPU:{len(cpus) + j}"
            pairs = ", ".join(f"{spec.devices[i].name} -> {out[i]}" for i in gpus)
            warnings.warn(StandInWarning(f"cluster {spec.name!r}: no GPU on this machine: logical CPUs stand in for its "
                                         f"GPUs ({pairs}); real step times there are CPU times"), stacklevel=2)
        else:
            raise ValueError(
                f"cluster {spec.name!r}: {len(gpus)} GPU devices without tf_device but this machine has "
                f"{num_gpus} GPU(s); set tf_device on the spec's devices"
            )
    return out


def _device_counts(devices: list[str]) -> dict[str, int]:
    counts = {"CPU": 1, "GPU": 0}
    for d in devices:
        kind, index = _device_parts(d)
        counts[kind] = max(counts[kind], index + 1)
    return counts


# ----------------------------------------------------------------------------- kernels


@lru_cache(maxsize=None)
def _kernel_defs(op_type: str) -> tuple:
    import_tensorflow()
    from tensorflow.python.framework import kernels

    return tuple(kernels.get_registered_kernels_for_op(op_type).kernel)


def has_kernel(node_def, device_type: str) -> bool:
    """True if TensorFlow's kernel registry holds a kernel for ``node_def`` on ``device_type``.

    A kernel registered for ``DEFAULT`` runs on every device type. A kernel's type
    constraints (e.g. ``T in {float, half}``) are matched against the node's ``type`` attrs.

    Args:
        node_def: a ``NodeDef`` (op type and attrs).
        device_type: ``"CPU"`` or ``"GPU"``.
    """
    for k in _kernel_defs(node_def.op):
        if k.device_type not in (device_type, "DEFAULT"):
            continue
        ok = True
        for c in k.constraint:
            allowed = list(c.allowed_values.list.type)
            attr = node_def.attr.get(c.name) if c.name in node_def.attr else None
            if allowed and attr is not None and attr.WhichOneof("value") == "type" and attr.type not in allowed:
                ok = False
                break
        if ok:
            return True
    return False


def check_colocation(graph: OpGraph, op_placement: np.ndarray, spec: ClusterSpec) -> None:
    """Check that ops TensorFlow must colocate (``Op.colocation``) share a device.

    Raises:
        ColocationError: names up to 5 offending op pairs and their devices.
    """
    bad = []
    idx = graph.index
    for i, op in enumerate(graph.ops):
        for other in op.colocation:
            j = idx.get(other)
            if j is not None and op_placement[i] != op_placement[j]:
                bad.append(
                    f"{op.name} on {spec.devices[op_placement[i]].name} vs {other} on {spec.devices[op_placement[j]].name}"
                )
    if bad:
        raise ColocationError(f"{len(bad)} colocated op pair(s) split across devices: " + "; ".join(bad[:5]))


def missing_kernels(
    graph: OpGraph, graph_def, op_placement: np.ndarray, spec: ClusterSpec, devices: list[str]
) -> list[tuple[int, str]]:
    """Ops placed where TensorFlow has no kernel for them: ``[(op index, device type)]``.

    An op on a spec device needs a kernel for the device's kind (``gpu`` -> ``GPU``) and for
    the type of the TensorFlow device it actually runs on (a CPU stand-in runs CPU kernels).
    """
    nodes = {n.name: n for n in graph_def.node}
    out = []
    for i, op in enumerate(graph.ops):
        d = int(op_placement[i])
        need = {"GPU" if spec.devices[d].kind == "gpu" else "CPU", _device_parts(devices[d])[0]}
        node = nodes.get(op.name)
        if node is None:
            continue
        for t in sorted(need):
            if not has_kernel(node, t):
                out.append((i, t))
                break
    return out


# ----------------------------------------------------------------------------- inputs


class SyntheticInputs:
    """Synthetic feeds for a graph's placeholders, drawn from a seed.

    Float placeholders get uniform values in [0, 1) (images); int placeholders get uniform
    ids in ``[0, bound)``, where ``bound`` is ``int_bounds[name]`` if given, else inferred
    from the consumers: following the value through slicing/reshaping ops
    (``StridedSlice``, ``Reshape``, ``Identity``, ...) and the value branches of a ``Select``
    (``where``: Keras 3's ``take`` wraps negative ids so) to a ``GatherV2``/``ResourceGather``
    (the params' first dimension; a variable's shape attr for a resource), a
    ``SparseSoftmaxCrossEntropyWithLogits`` (the logits' last dimension) or a ``OneHot``
    (its depth); the smallest such bound wins. Bool placeholders get ``True`` (training
    phase). Step ``k``'s feed depends only on ``(seed, k)``.

    Args:
        tf_graph: the imported ``tf.Graph``.
        fetches: op names one step runs; only placeholders they depend on are fed.
        seed: the seed.
        int_bounds: optional placeholder name -> exclusive upper bound of its ids.
        default_dim: size used for an unknown placeholder dimension (e.g. the batch).
    Raises:
        ValueError: an int placeholder whose range cannot be inferred and is not in ``int_bounds``
            (names it), or a placeholder of an unsupported dtype.
    """

    def __init__(self, tf_graph, fetches, seed: int = 0, int_bounds: dict[str, int] | None = None,
                 default_dim: int = 1) -> None:
        self.seed = int(seed)
        needed = _ancestors(tf_graph, fetches)
        self.placeholders = [
            op for op in tf_graph.get_operations() if op.type in ("Placeholder", "PlaceholderV2") and op.name in needed
        ]
        self.specs: list[tuple[Any, tuple[int, ...], str, int | None]] = []  # (tensor, shape, kind, bound)
        int_bounds = int_bounds or {}
        for op in self.placeholders:
            t = op.outputs[0]
            shape = tuple(default_dim if d is None else int(d) for d in (t.shape.as_list() if t.shape.rank is not None else []))
            dt = t.dtype
            if dt.is_floating:
                self.specs.append((t, shape, "float", None))
            elif dt.is_integer:
                bound = int_bounds.get(op.name)
                if bound is None:
                    bound = _infer_int_bound(t)
                if bound is None:
                    raise ValueError(
                        f"placeholder {op.name!r} ({dt.name}): cannot infer its id range from its consumers; "
                        f"give its bound: --int-bound {op.name}=N (int_bounds={{{op.name!r}: N}})"
                    )
                self.specs.append((t, shape, "int", int(bound)))
            elif dt.is_bool:
                self.specs.append((t, shape, "bool", None))
            else:
                raise ValueError(f"placeholder {op.name!r}: unsupported dtype {dt.name} for synthetic inputs")

    def bounds(self) -> dict[str, int]:
        """Placeholder name -> exclusive upper bound of the ids fed to it (int placeholders)."""
        return {t.op.name: b for t, _, kind, b in self.specs if kind == "int" and b is not None}

    def feed(self, step: int) -> dict:
        """The feed dict of step ``step`` (a tensor -> numpy array mapping)."""
        rng = np.random.default_rng([self.seed, int(step)])
        out = {}
        for t, shape, kind, bound in self.specs:
            if kind == "float":
                out[t] = rng.random(shape, dtype=np.float32).astype(t.dtype.as_numpy_dtype)
            elif kind == "int":
                out[t] = rng.integers(0, bound, size=shape).astype(t.dtype.as_numpy_dtype)
            else:
                out[t] = np.ones(shape, dtype=bool)
        return out


# ----------------------------------------------------------------------------- sessions


@dataclass
class StepResult:
    """One step run: wall-clock seconds, the loss (``None`` if the fetches have none) and the trace."""

    seconds: float
    loss: float | None
    run_metadata: object = None


class PlacedSession:
    """A TensorFlow session running a ``GraphDef`` with a given device per node.

    Args:
        graph_def: the training step's ``GraphDef`` (it is copied, not changed).
        fetches: op names one step runs (e.g. the train op and the loss op).
        node_devices: node name -> TensorFlow device string; other nodes get no device.
        seed: seed of the synthetic inputs (and of TensorFlow's graph-level random seed).
        soft_placement: ``allow_soft_placement`` for the session.
        int_bounds: see [`SyntheticInputs`][cluster.real.SyntheticInputs].
        inter_op_threads: ``inter_op_parallelism_threads`` (``1`` runs ops one at a time, as
            for calibration); ``None`` keeps TensorFlow's default.
        init_op: name of the variable-initialisation op run once at creation (skipped if absent).
    Raises:
        PlacementError: the session refused the placement (``InvalidArgumentError``: no kernel
            or unsatisfiable colocation); the message names the op TensorFlow reported.
        ValueError: a fetch is not in the graph.
    The loss is the first fetch whose first output is a float scalar.
    """

    def __init__(self, graph_def, fetches, node_devices: dict[str, str], seed: int = 0,
                 soft_placement: bool = False, int_bounds: dict[str, int] | None = None,
                 inter_op_threads: int | None = None, init_op: str = "init") -> None:
        tf = import_tensorflow()
        self.tf = tf
        from compgraph.tf_import import placed_graph_def

        gd = placed_graph_def(graph_def, node_devices)
        names = {n.name for n in gd.node}
        for f in fetches:
            if f not in names:
                raise ValueError(f"fetches: no op {f!r} in the GraphDef")
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.set_random_seed(seed)
            tf.graph_util.import_graph_def(gd, name="")
        self.devices = sorted(set(node_devices.values()))
        counts = _device_counts(self.devices) if self.devices else {"CPU": 1, "GPU": 0}
        config = tf.compat.v1.ConfigProto(
            device_count={"CPU": counts["CPU"], "GPU": counts["GPU"]},
            allow_soft_placement=soft_placement,
        )
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        # the classic graph optimizer too: constant folding and CSE would rewrite placed nodes
        opts = config.graph_options.optimizer_options
        opts.opt_level = tf.compat.v1.OptimizerOptions.L0
        opts.do_constant_folding = False
        opts.do_common_subexpression_elimination = False
        if inter_op_threads is not None:
            config.inter_op_parallelism_threads = int(inter_op_threads)
        self.fetch_ops = [self.graph.get_operation_by_name(f) for f in fetches]
        self.loss = None
        for op in self.fetch_ops:
            if op.outputs and op.outputs[0].dtype.is_floating and op.outputs[0].shape.rank == 0:
                self.loss = op.outputs[0]
                break
        self.inputs = SyntheticInputs(self.graph, fetches, seed, int_bounds)
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)
        self.steps_run = 0
        try:
            if init_op in names:
                self._call(self.graph.get_operation_by_name(init_op), None)
        except BaseException:
            self.close()
            raise

    def _call(self, fetch, feed, options=None, run_metadata=None):
        tf = self.tf
        try:
            return self.session.run(fetch, feed_dict=feed, options=options, run_metadata=run_metadata)
        except tf.errors.InvalidArgumentError as exc:
            msg = exc.message if hasattr(exc, "message") else str(exc)
            if "device" in msg.lower() or "kernel" in msg.lower() or "colocat" in msg.lower():
                m = re.search(r"operation '?([^\s':]+)'?", msg) or re.search(r"node '?([^\s':]+)'?", msg)
                name = m.group(1) if m else (exc.op.name if getattr(exc, "op", None) is not None else "?")
                raise PlacementError(f"TensorFlow refused the placement at op {name!r}: {msg.splitlines()[0]}") from exc
            raise

    def run_step(self, trace: bool = False) -> StepResult:
        """Run one training step on the next synthetic batch.

        Args:
            trace: run with ``RunOptions(trace_level=FULL_TRACE)`` and return the ``RunMetadata``.
        Returns:
            The step's wall-clock seconds (``time.perf_counter``), loss and trace.
        Raises:
            tensorflow.errors.ResourceExhaustedError: a device ran out of memory.
            PlacementError: see the class.
        """
        tf = self.tf
        feed = self.inputs.feed(self.steps_run)
        fetch = [self.fetch_ops, self.loss] if self.loss is not None else [self.fetch_ops]
        options = md = None
        if trace:
            options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            md = tf.compat.v1.RunMetadata()
        t0 = time.perf_counter()
        out = self._call(fetch, feed, options, md)
        dt = time.perf_counter() - t0
        self.steps_run += 1
        loss = float(out[1]) if self.loss is not None else None
        return StepResult(dt, loss, md)

    def close(self) -> None:
        """Close the session (idempotent)."""
        if getattr(self, "session", None) is not None:
            self.session.close()
            self.session = None

    def __enter__(self) -> "PlacedSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def node_devices_of(graph: OpGraph, op_placement: np.ndarray, devices: list[str]) -> dict[str, str]:
    """Op name -> TensorFlow device string for an op placement ``[num_ops]`` of spec device indices."""
    return {op.name: devices[int(d)] for op, d in zip(graph.ops, op_placement)}


def trace_devices(run_metadata) -> dict[str, str]:
    """Node name -> short device (``/device:CPU:1``) it ran on, from a traced step's ``step_stats``.

    GPU stream entries (``.../stream:all``) are skipped.
    """
    out = {}
    for dev in run_metadata.step_stats.dev_stats:
        if "/stream:" in dev.device or "/memcpy" in dev.device:
            continue
        m = re.search(r"device:(CPU|GPU):(\d+)", dev.device)
        if not m:
            continue
        short = f"/device:{m.group(1)}:{m.group(2)}"
        for ns in dev.node_stats:
            out[ns.node_name] = short
    return out


# ----------------------------------------------------------------------------- environment


class RealEnvironment:
    """Measures placements by running the training step in TensorFlow (`Environment`).

    Args:
        graph: the op graph (pruned to one step) of ``graph_def``.
        grouping: its co-location groups; placements are per group.
        spec: the cluster; device ``i`` runs on ``tf_devices(spec)[i]`` (or ``devices[i]``).
        graph_def: the TensorFlow ``GraphDef`` the graph was imported from (with an ``init`` op).
        fetches: op names one training step runs.
        steps: steps run per measurement, warm-up included (2017 Sec. 3.4: 10).
        warmup: first steps dropped from the mean (2017: 1; EAGLE: 5 of 15).
        soft_placement: move groups with an op that has no kernel on its device's kind to the
            first CPU (as the simulator does) and let TensorFlow soft-place, instead of raising.
        seed: seed of the synthetic inputs.
        int_bounds: see [`SyntheticInputs`][cluster.real.SyntheticInputs].
        devices: optional TensorFlow device string per spec device, overriding [`tf_devices`][cluster.real.tf_devices].
    Raises:
        ValueError: ``steps <= warmup``, ``warmup < 0``, or a ``devices`` list of the wrong length.
    """

    kind = "real"

    def __init__(self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, graph_def, fetches,
                 steps: int = 10, warmup: int = 1, soft_placement: bool = False, seed: int = 0,
                 int_bounds: dict[str, int] | None = None, devices: list[str] | None = None) -> None:
        if warmup < 0:
            raise ValueError(f"warmup: must be >= 0, got {warmup}")
        if steps <= warmup:
            raise ValueError(f"steps: must exceed warmup={warmup} so that a step is measured, got {steps}")
        if graph_def is None:
            raise ValueError("graph_def: None; real execution needs the TensorFlow GraphDef (PreparedGraph.graph_def)")
        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.graph_def, self.fetches = graph_def, list(fetches)
        self.steps, self.warmup, self.soft_placement, self.seed = int(steps), int(warmup), soft_placement, int(seed)
        self.int_bounds = int_bounds
        if devices is not None:
            if len(devices) != len(spec.devices):
                raise ValueError(f"devices: {len(devices)} given, cluster {spec.name!r} has {len(spec.devices)}")
            for d in devices:
                if not _DEVICE_RE.match(d):
                    raise ValueError(f"devices: {d!r} is not a TensorFlow device string like /device:CPU:1")
            self.devices = list(devices)
        else:
            self.devices = tf_devices(spec)

    @classmethod
    def from_prepared(cls, prepared, spec: ClusterSpec, **kwargs) -> "RealEnvironment":
        """Build from a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] (its graph, grouping, GraphDef, fetches)."""
        return cls(prepared.graph, prepared.grouping, spec, prepared.graph_def, prepared.fetches, **kwargs)

    def op_placement(self, group_placement: np.ndarray) -> np.ndarray:
        """The op placement ``[num_ops]`` that will run for ``group_placement`` ``[num_groups]``.

        Checks colocation and kernels before anything runs; with ``soft_placement``, groups
        holding an op with no kernel on their device move to the first CPU of the spec.

        Raises:
            ValueError: wrong length or a device index out of range.
            ColocationError, KernelUnavailableError: see the module docstring (the message
                names the op, its type and the device).
        """
        gp = np.asarray(group_placement, dtype=np.int64)
        if gp.shape != (self.grouping.num_groups,):
            raise ValueError(f"placement: length {gp.shape}, expected ({self.grouping.num_groups},)")
        nd = len(self.spec.devices)
        if gp.size and (gp.min() < 0 or gp.max() >= nd):
            raise ValueError(f"placement: device index out of range 0..{nd - 1} (got {gp.min()}..{gp.max()})")
        p = self.grouping.expand(gp)
        check_colocation(self.graph, p, self.spec)
        missing = missing_kernels(self.graph, self.graph_def, p, self.spec, self.devices)
        if missing and self.soft_placement and self.spec.cpu_indices:
            ok = np.ones(self.grouping.num_groups, dtype=bool)  # no op of the group lacks a kernel where it is
            ok[[self.grouping.op_group[i] for i, _ in missing]] = False
            gp = cpu_fallback(gp, ok, self.spec)
            p = self.grouping.expand(gp)
            missing = missing_kernels(self.graph, self.graph_def, p, self.spec, self.devices)
        if missing:
            i, t = missing[0]
            op, d = self.graph.ops[i], self.spec.devices[int(p[i])]
            raise KernelUnavailableError(
                f"op {op.name!r} (type {op.type}) placed on {d.name} ({d.kind}, runs on {self.devices[int(p[i])]}): "
                f"TensorFlow registers no {t} kernel for {op.type}"
                + (f"; {len(missing) - 1} more op(s) likewise" if len(missing) > 1 else "")
                + "; place it on a CPU or use soft_placement=True"
            )
        return p

    def session(self, group_placement: np.ndarray, **kwargs) -> PlacedSession:
        """A [`PlacedSession`][cluster.real.PlacedSession] for ``group_placement`` (checked as [`op_placement`][cluster.real.RealEnvironment.op_placement])."""
        p = self.op_placement(group_placement)
        return PlacedSession(
            self.graph_def, self.fetches, node_devices_of(self.graph, p, self.devices), seed=self.seed,
            soft_placement=self.soft_placement, int_bounds=self.int_bounds, **kwargs,
        )

    def measure(self, group_placement: np.ndarray) -> RealMeasurement:
        """Run ``steps`` steps of ``group_placement`` (``[num_groups]`` device indices) and time them.

        Returns:
            ``step_time_s`` = mean seconds of the steps after the first ``warmup``; on
            ``ResourceExhaustedError``, ``oom=True`` and ``step_time_s=None``.
        Raises:
            ValueError, ColocationError, KernelUnavailableError, PlacementError: see [`op_placement`][cluster.real.RealEnvironment.op_placement]
            and [`PlacedSession`][cluster.real.PlacedSession].
        """
        tf = import_tensorflow()
        times: list[float] = []
        try:
            with self.session(group_placement) as sess:
                for _ in range(self.steps):
                    times.append(sess.run_step().seconds)
        except tf.errors.ResourceExhaustedError:
            kept = times[self.warmup:]
            return RealMeasurement(step_time_s=None, oom=True, step_times_s=kept, warmup_s=times[: self.warmup],
                                   devices=list(self.devices))
        kept = times[self.warmup:]
        return RealMeasurement(
            step_time_s=float(np.mean(kept)),
            oom=False,
            step_times_s=kept,
            std_s=float(statistics.stdev(kept)) if len(kept) > 1 else 0.0,
            min_s=float(min(kept)),
            max_s=float(max(kept)),
            warmup_s=times[: self.warmup],
            devices=list(self.devices),
        )

    def measure_batch(self, group_placements: np.ndarray) -> list[RealMeasurement]:
        """[`measure`][cluster.real.RealEnvironment.measure] each row of ``group_placements`` (``[K, num_groups]``), one after another
        ([`cluster.environment.measure_rows`][cluster.environment.measure_rows]: one placement holds the devices at a time).

        Raises:
            ValueError: not a 2-D array; and whatever [`measure`][cluster.real.RealEnvironment.measure] raises.
        """
        return measure_rows(self, group_placements)
