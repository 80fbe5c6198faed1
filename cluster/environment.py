"""The measurement interface every baseline and search uses, and the one factory that builds it.

An :class:`Environment` measures group placements of one grouped graph on one cluster. Three
kinds implement it, each in its own module, and :func:`make_environment` is the only place
that builds one by name:

* ``sim``: the event-driven simulator (:class:`cluster.simulated.SimulatedEnvironment`);
* ``real``: the training step run in TensorFlow (:class:`cluster.real.RealEnvironment`), or a
  PyTorch step run placed on this machine's devices (:class:`cluster.torch_real.TorchRealEnvironment`);
* ``grappler``: TensorFlow's own analytical cost model, grappler's ``VirtualCluster``
  (:class:`cluster.grappler.GrapplerEnvironment`).

This module imports none of them at import time (the factory imports lazily), so the
implementations may import :class:`Measurement` from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph


@dataclass
class Measurement:
    """One placement measured.

    Attributes:
        step_time_s: seconds per training step, ``None`` if the placement ran out of memory.
        oom: True if a device ran out of memory.
        compute_s, transfer_s, peak_memory_bytes: per device (see :class:`cluster.simulator.SimResult`).
        simulated_step_time_s: the step time even when OOM (simulator only), for diagnosis.
    """

    step_time_s: float | None
    oom: bool
    compute_s: list[float] = field(default_factory=list)
    transfer_s: list[float] = field(default_factory=list)
    peak_memory_bytes: list[int] = field(default_factory=list)
    simulated_step_time_s: float | None = None


class Environment(Protocol):
    """Measures placements of one grouped graph on one cluster.

    Attributes:
        kind: ``sim``, ``real`` or ``grappler`` (:data:`ENVIRONMENTS`).
        spec, graph, grouping: the cluster, the op graph and its groups (placements are per group).
    """

    kind: str
    spec: ClusterSpec
    graph: OpGraph
    grouping: Grouping

    def measure(self, group_placement: np.ndarray) -> Measurement:
        """Measure ``group_placement`` (``[num_groups]`` device indices).

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        ...

    def measure_batch(self, group_placements: np.ndarray) -> Sequence[Measurement]:
        """Measure ``K`` placements (``[K, num_groups]`` device indices) -> ``K`` measurements,
        the same as ``[measure(p) for p in group_placements]``.

        Raises:
            ValueError: not a 2-D array of ``num_groups`` columns, or a device index out of range.
        """
        ...


ENVIRONMENTS = ("sim", "real", "grappler")  #: the kinds :func:`make_environment` builds


def measure_rows(env, group_placements: np.ndarray) -> list:
    """``env.measure`` of each row of ``group_placements`` (``[K, num_groups]``), one after another: the
    ``measure_batch`` of an environment that holds real devices (one placement at a time).

    Raises:
        ValueError: not a 2-D array; and whatever ``env.measure`` raises.
    """
    gps = np.asarray(group_placements)
    if gps.ndim != 2:
        raise ValueError(f"placements: shape {gps.shape}, expected (K, {env.grouping.num_groups})")
    return [env.measure(gp) for gp in gps]


class EnvOptions(BaseModel):
    """Options of :func:`make_environment`; each kind reads the ones that concern it and ignores the rest.

    Attributes:
        engine: ``sim``: ``fast`` | ``reference`` | ``contracted`` (:data:`cluster.simulated.ENGINES`).
        execution: ``sim``: ``auto`` (default: ``eager`` for a PyTorch step, which runs in program order
            on one host thread, :mod:`cluster.eager`; ``dataflow`` for a TensorFlow graph), ``dataflow`` or
            ``eager`` (:data:`cluster.simulated.EXECUTIONS`).
        op_times: ``sim``: ``[num_ops, num_devices]`` seconds replacing the roofline cost model.
        cost_table: ``sim``: a :class:`cluster.calibrate.CostTable`; its op times (unless
            ``op_times`` is given) and its fitted link replace the roofline's.
        soft_placement: ``real``: move groups with no kernel on their device to the first CPU
            instead of raising (``sim`` and ``grappler`` always do).
        steps, warmup: ``real``: steps run per measurement and how many are dropped (2017 Sec. 3.4: 10, 1).
            A PyTorch step (:class:`cluster.torch_real.TorchRealEnvironment`) times ``repeats`` steps
            after ``warmup`` (``None``: its defaults, 5 after 1) and reads no ``steps``.
        repeats: ``real``, a PyTorch step: timed steps per measurement (the median is the step time).
        threads: ``real``, a PyTorch step: ``torch.set_num_threads`` while measuring (``None``: as is).
        time_limit_s: ``real``, a PyTorch step: seconds a step may take before the placement fails.
        seed: ``real``: seed of the synthetic inputs (and a PyTorch step's weights).
        int_bounds, devices: ``real``: see :class:`cluster.real.RealEnvironment` (``int_bounds``
            over the prepared graph's own, :attr:`compgraph.prepare.PreparedGraph.int_bounds`);
            for a PyTorch step ``devices`` are torch devices (``cpu``, ``cpu:1``, ``cuda:0``).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    engine: str = "fast"
    execution: str = Field("auto", pattern=r"^(auto|dataflow|eager)$")
    op_times: Any = None
    cost_table: Any = None
    soft_placement: bool = False
    steps: int = 10
    warmup: int | None = None
    repeats: int | None = None
    threads: int | None = None
    time_limit_s: float | None = None
    seed: int = 0
    int_bounds: dict[str, int] | None = None
    devices: list[str] | None = None


def _options(options) -> EnvOptions:
    if options is None:
        return EnvOptions()
    if isinstance(options, EnvOptions):
        return options
    try:
        return EnvOptions(**dict(options))
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(x) for x in err["loc"])
        valid = ", ".join(EnvOptions.model_fields)
        raise ValueError(f"env option {name!r}: {err['msg']} (valid options: {valid})") from None


def make_environment(kind: str, prepared, spec: ClusterSpec, options: EnvOptions | dict | None = None, *,
                     grouping: Grouping | None = None) -> Environment:
    """The environment of ``kind`` for a prepared graph on ``spec``: the one way to build one.

    Args:
        kind: ``sim``, ``real`` or ``grappler`` (:data:`ENVIRONMENTS`).
        prepared: a :class:`compgraph.prepare.PreparedGraph` (``.graph``, ``.grouping``,
            ``.graph_def`` and ``.fetches``; ``real`` and ``grappler`` need the GraphDef).
        spec: the cluster.
        options: an :class:`EnvOptions` or a dict of its fields.
        grouping: the groups placements are made of, instead of ``prepared.grouping`` (e.g.
            :func:`compgraph.grouping.colocation_grouping` for learners that group ops themselves).
    Returns:
        An :class:`Environment`.
    Raises:
        ValueError: unknown ``kind`` (lists the valid ones); an unknown option or a bad value
            (names it); ``real`` or ``grappler`` without a GraphDef; a bad engine or op_times shape.
    """
    if kind not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    opts = _options(options)
    graph = prepared.graph
    groups = prepared.grouping if grouping is None else grouping
    if len(groups.op_group) != graph.num_ops:
        raise ValueError(f"grouping: covers {len(groups.op_group)} ops, the graph has {graph.num_ops}")
    if kind == "sim":
        from cluster.simulated import SimulatedEnvironment

        op_times = opts.op_times
        if opts.cost_table is not None:
            if op_times is None:
                op_times = opts.cost_table.op_times(graph, spec)
            spec = opts.cost_table.apply_link(spec)
        execution = opts.execution
        if execution == "auto":
            from cluster.torch_real import is_torch_step

            execution = "eager" if is_torch_step(prepared) else "dataflow"
        return SimulatedEnvironment(graph, groups, spec, engine=opts.engine, op_times=op_times, execution=execution)
    if kind == "real":
        from cluster.torch_real import TorchRealEnvironment, is_torch_step

        if is_torch_step(prepared):
            return TorchRealEnvironment(prepared, spec, grouping=groups, repeats=opts.repeats, warmup=opts.warmup,
                                        seed=opts.seed, threads=opts.threads, time_limit_s=opts.time_limit_s,
                                        int_bounds={**(getattr(prepared, "int_bounds", None) or {}),
                                                    **(opts.int_bounds or {})},
                                        devices=opts.devices)
    graph_def = getattr(prepared, "graph_def", None)
    if graph_def is None:
        raise ValueError(f"env {kind!r}: needs the TensorFlow GraphDef of the graph (a benchmark or --graph-def)")
    fetches = list(getattr(prepared, "fetches", ()) or ())
    if kind == "real":
        from cluster.real import RealEnvironment

        return RealEnvironment(graph, groups, spec, graph_def, fetches, steps=opts.steps,
                               warmup=1 if opts.warmup is None else opts.warmup,
                               soft_placement=opts.soft_placement, seed=opts.seed,
                               int_bounds={**(getattr(prepared, "int_bounds", None) or {}), **(opts.int_bounds or {})},
                               devices=opts.devices)
    from cluster.grappler import GrapplerEnvironment

    return GrapplerEnvironment(graph, groups, spec, graph_def, fetches)


def __getattr__(name: str):
    """``SimulatedEnvironment`` and ``ENGINES``, imported from :mod:`cluster.simulated` on first use
    (they live there; kept importable from here for existing callers)."""
    if name in ("SimulatedEnvironment", "ENGINES"):
        import cluster.simulated

        return getattr(cluster.simulated, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
