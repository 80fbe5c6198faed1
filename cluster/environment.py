"""The measurement interface every baseline and search uses (the factory that builds one: [`cluster.factory`][cluster.factory]).

An [`Environment`][cluster.environment.Environment] measures group placements of one grouped graph on one cluster. Three
kinds implement it, each in its own module, and [`cluster.factory.make_environment`][cluster.factory.make_environment] is the only place
that builds one by name:

* ``sim``: the event-driven simulator ([`cluster.simulated.SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment]);
* ``real``: the training step run in TensorFlow ([`cluster.real.RealEnvironment`][cluster.real.RealEnvironment]), or a
  PyTorch step run placed on this machine's devices ([`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]);
* ``grappler``: TensorFlow's own analytical cost model, grappler's ``VirtualCluster``
  ([`cluster.grappler.GrapplerEnvironment`][cluster.grappler.GrapplerEnvironment]).

This module imports none of them at import time (the factory imports lazily), so the
implementations may import [`Measurement`][cluster.environment.Measurement] from here.
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
        compute_s, transfer_s, peak_memory_bytes: per device (see [`cluster.simulator.SimResult`][cluster.simulator.SimResult]).
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
        kind: ``sim``, ``real`` or ``grappler`` ([`ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]).
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


ENVIRONMENTS = ("sim", "real", "grappler")  #: the kinds [`cluster.factory.make_environment`][cluster.factory.make_environment] builds


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
    """Options of [`cluster.factory.make_environment`][cluster.factory.make_environment]; each kind reads the ones that concern it and ignores the rest.

    Attributes:
        engine: ``sim``: ``fast`` | ``reference`` | ``contracted`` ([`cluster.simulated.ENGINES`][cluster.simulated.ENGINES]).
        execution: ``sim``: ``auto`` (default: ``eager`` for a PyTorch step, which runs in program order
            on one host thread, [`cluster.eager`][cluster.eager]; ``dataflow`` for a TensorFlow graph), ``dataflow`` or
            ``eager`` ([`cluster.simulated.EXECUTIONS`][cluster.simulated.EXECUTIONS]).
        op_times: ``sim``: ``[num_ops, num_devices]`` seconds replacing the roofline cost model.
        cost_table: ``sim``: a [`cluster.calibrate.CostTable`][cluster.calibrate.CostTable]; its op times (unless
            ``op_times`` is given) and its fitted link replace the roofline's.
        soft_placement: ``real``: move groups with no kernel on their device to the first CPU
            instead of raising (``sim`` and ``grappler`` always do).
        steps, warmup: ``real``: steps run per measurement and how many are dropped (2017 Sec. 3.4: 10, 1).
            A PyTorch step ([`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]) times ``repeats`` steps
            after ``warmup`` (``None``: its defaults, 5 after 1) and reads no ``steps``.
        repeats: ``real``, a PyTorch step: timed steps per measurement (the median is the step time).
        threads: ``real``, a PyTorch step: ``torch.set_num_threads`` while measuring (``None``: as is).
        time_limit_s: ``real``, a PyTorch step: seconds a step may take before the placement fails.
        isolate: ``real``, a PyTorch step: measure each placement in a process of its own
            ([`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]).
        host_memory: ``real``, a PyTorch step: ``default`` or ``reuse`` (glibc keeps freed host memory:
            [`cluster.torch_real.reuse_host_memory`][cluster.torch_real.reuse_host_memory]).
        seed: ``real``: seed of the synthetic inputs (and a PyTorch step's weights).
        int_bounds, devices: ``real``: see [`cluster.real.RealEnvironment`][cluster.real.RealEnvironment] (``int_bounds``
            over the prepared graph's own, [`compgraph.prepare.PreparedGraph.int_bounds`][compgraph.prepare.PreparedGraph.int_bounds]);
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
    isolate: bool = False
    host_memory: str = "default"
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
