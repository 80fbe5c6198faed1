"""The measurement interface every baseline and search uses, and its simulated implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cluster.simulator import Simulator
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
    """Measures placements of one grouped graph on one cluster."""

    kind: str
    spec: ClusterSpec
    graph: OpGraph
    grouping: Grouping

    def measure(self, group_placement: np.ndarray) -> Measurement:
        """Measure ``group_placement`` (``[num_groups]`` device indices)."""
        ...


class SimulatedEnvironment:
    """The event-driven simulator behind the :class:`Environment` interface."""

    kind = "sim"

    def __init__(self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec) -> None:
        self.graph, self.grouping, self.spec = graph, grouping, spec
        self.simulator = Simulator(graph, spec)

    def measure(self, group_placement: np.ndarray) -> Measurement:
        """Simulate one step of ``group_placement`` (``[num_groups]`` device indices).

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        gp = np.asarray(group_placement, dtype=np.int64)
        if gp.shape != (self.grouping.num_groups,):
            raise ValueError(f"placement: length {gp.shape}, expected ({self.grouping.num_groups},)")
        r = self.simulator.run(self.grouping.expand(gp))
        return Measurement(
            step_time_s=None if r.oom else r.step_time_s,
            oom=r.oom,
            compute_s=r.compute_s,
            transfer_s=r.transfer_s,
            peak_memory_bytes=r.peak_memory_bytes,
            simulated_step_time_s=r.step_time_s,
        )


ENVIRONMENTS = {"sim": SimulatedEnvironment}


def make_environment(kind: str, graph: OpGraph, grouping: Grouping, spec: ClusterSpec) -> Environment:
    """An environment by name (``sim``).

    Raises:
        ValueError: unknown kind (lists the valid ones).
    """
    if kind not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    return ENVIRONMENTS[kind](graph, grouping, spec)
