"""The simulated environment: the event-driven simulator behind [`cluster.environment.Environment`][cluster.environment.Environment]."""

from __future__ import annotations

from typing import Any

import numpy as np

from cluster.cost_model import op_time_matrix
from cluster.eager import EagerExecution
from cluster.environment import Measurement
from cluster.contracted import contract_groups
from cluster.fast_simulator import FastSimulator
from cluster.simulator import SimResult, Simulator
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph


ENGINES = ("fast", "reference", "contracted")  #: simulator engines of [`SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment]
EXECUTIONS = ("dataflow", "eager")
"""How a step executes ([`SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment]'s ``execution``): ``dataflow`` as TensorFlow's executor
runs a graph (every device runs its ready ops at once, [`cluster.simulator`][cluster.simulator]), ``eager`` in program order
on one host thread as PyTorch runs a placed step ([`cluster.eager`][cluster.eager])."""


class SimulatedEnvironment:
    """The event-driven simulator behind the `Environment` interface.

    Args:
        graph, grouping, spec: the op graph, its co-location groups and the cluster.
        engine: ``"fast"`` (default, [`cluster.fast_simulator.FastSimulator`][cluster.fast_simulator.FastSimulator]) or
            ``"reference"`` ([`cluster.simulator.Simulator`][cluster.simulator.Simulator]): both simulate the op
            graph and give the same results; ``"contracted"``: the fast simulator on the
            acyclic cluster graph of [`cluster.contracted.contract_groups`][cluster.contracted.contract_groups], several
            times faster, an approximation (its docstring lists what differs). Measured error
            (``benchmarks/simulator.py``, random group placements on k80x2, roofline, 2026-11-23):
            step-time ratio to the exact op-level simulation 0.93-1.01 (median 0.969, Pearson r
            0.91) on gnmt paper (39,432 ops, 5,539 clusters); 0.87-1.06 on rnnlm paper, 0.87-1.03
            on nmt paper, 0.98-1.00 on inception_v3 paper: mostly below the exact step (median
            0.96-1.00). Not exact: use it to screen placements and the exact engines to report them.
        op_times: optional ``[num_ops, num_devices]`` seconds (e.g. calibrated), replacing
            the roofline of [`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix].
        execution: ``dataflow`` (default) or ``eager`` ([`EXECUTIONS`][cluster.simulated.EXECUTIONS]). With ``eager`` the step
            time is [`cluster.eager.EagerExecution`][cluster.eager.EagerExecution]'s (program order, on the op graph whatever the
            engine); peak memory, OOM and per-device busy seconds stay the engine's.

    Raises:
        ValueError: unknown ``engine`` or ``execution`` (lists the valid ones); ``op_times`` of the
            wrong shape.
    """

    kind = "sim"

    def __init__(self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, engine: str = "fast",
                 op_times: np.ndarray | None = None, execution: str = "dataflow") -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine: unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
        if execution not in EXECUTIONS:
            raise ValueError(f"execution: unknown {execution!r}; valid: {', '.join(EXECUTIONS)}")
        self.execution = execution
        self.eager = EagerExecution(graph, spec, op_times=op_times) if execution == "eager" else None
        self.graph, self.grouping, self.spec, self.engine = graph, grouping, spec, engine
        self._unit_group = grouping.op_group  # group of each simulated unit (op or cluster)
        # the fast engines' run_batch or the reference's run (critical path), chosen by engine below
        self.simulator: Any
        if engine == "fast":
            self.simulator = FastSimulator(graph, spec, op_times=op_times)
        elif engine == "reference":
            self.simulator = Simulator(graph, spec, op_times=op_times)
        else:
            times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
            if times.shape != (graph.num_ops, len(spec.devices)):
                raise ValueError(f"op_times: shape {times.shape}, expected {(graph.num_ops, len(spec.devices))}")
            self.contracted = contract_groups(graph, grouping, times)
            self.simulator = FastSimulator(self.contracted.graph, spec, op_times=self.contracted.op_times)
            self._unit_group = self.contracted.cluster_group

    def _check(self, group_placements: np.ndarray, batch: bool) -> np.ndarray:
        gp = np.asarray(group_placements)
        g, d = self.grouping.num_groups, len(self.spec.devices)
        want = (gp.ndim == 2) if batch else (gp.ndim == 1)
        if not want or gp.shape[-1] != g:
            expected = f"(K, {g})" if batch else f"({g},)"
            raise ValueError(f"placement: length {gp.shape}, expected {expected}")
        if gp.dtype.kind not in "iu":
            if gp.size and not np.all(np.mod(gp, 1) == 0):
                raise ValueError(f"placement: device indices must be integers, got dtype {gp.dtype}")
        gp = gp.astype(np.int64)
        if gp.size and (gp.min() < 0 or gp.max() >= d):
            bad = int(gp.min()) if gp.min() < 0 else int(gp.max())
            raise ValueError(f"placement: device index {bad} out of range 0..{d - 1}")
        return gp

    @staticmethod
    def _measurement(r: SimResult, step_s: float | None = None) -> Measurement:
        step = r.step_time_s if step_s is None else float(step_s)
        return Measurement(
            step_time_s=None if r.oom else step,
            oom=r.oom,
            compute_s=r.compute_s,
            transfer_s=r.transfer_s,
            peak_memory_bytes=r.peak_memory_bytes,
            simulated_step_time_s=step,
        )

    def _results(self, op_placements: np.ndarray, results: list[SimResult]) -> list[Measurement]:
        """Measurements of the engine's ``results``, with the eager step times where ``execution`` is eager."""
        if self.eager is None:
            return [self._measurement(r) for r in results]
        steps = self.eager.step_times(op_placements)
        return [self._measurement(r, s) for r, s in zip(results, steps)]

    def measure(self, group_placement: np.ndarray) -> Measurement:
        """Simulate one step of ``group_placement`` (``[num_groups]`` device indices).

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        gp = self._check(group_placement, batch=False)
        if self.engine != "reference":  # without the critical path, which measurements do not carry
            return self.measure_batch(gp[None, :])[0]
        result = self.simulator.run(gp[self._unit_group])
        return self._results(gp[None, self.grouping.op_group], [result])[0]

    def measure_ops(self, op_placement: np.ndarray) -> Measurement:
        """Simulate one step of a per-op placement (``[num_ops]`` device indices), which may
        split groups (op-level placers, [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement]).

        Raises:
            ValueError: the ``contracted`` engine (it simulates whole groups only).
        """
        if self.engine == "contracted":
            raise ValueError("engine 'contracted': cannot measure an op placement that splits groups; "
                             "use the fast or reference engine")
        ops = np.asarray(op_placement, dtype=np.int64)
        if self.engine == "fast":
            result = self.simulator.run_batch(ops[None, :])[0]
        else:
            result = self.simulator.run(ops)
        return self._results(ops[None, :], [result])[0]

    def measure_batch(self, group_placements: np.ndarray) -> list[Measurement]:
        """Simulate ``K`` placements (``[K, num_groups]`` device indices) -> ``K`` measurements.

        Same results as ``[measure(p) for p in group_placements]``, in one compiled call
        with the fast engine.

        Raises:
            ValueError: not a 2-D array of ``num_groups`` columns, or a device index out of range.
        """
        gp = self._check(group_placements, batch=True)
        if self.engine == "reference":
            results = [self.simulator.run(row) for row in gp[:, self._unit_group]]
            return self._results(gp[:, self.grouping.op_group], results)
        # the fast engines expand the group placements inside the kernel (run_group_arrays: the same
        # results as run_batch on gp[:, unit_group]), and the measurements come from its arrays
        b = self.simulator.run_group_arrays(gp, self._unit_group)
        steps = b.step_time_s.tolist() if self.eager is None else self.eager.step_times(gp[:, self.grouping.op_group])
        ooms, compute, xfer, peak = b.oom.tolist(), b.compute_s.tolist(), b.transfer_s.tolist(), b.peak_memory_bytes.tolist()
        return [Measurement(step_time_s=None if oom else float(step), oom=oom, compute_s=c, transfer_s=x,
                            peak_memory_bytes=pk, simulated_step_time_s=float(step))
                for step, oom, c, x, pk in zip(steps, ooms, compute, xfer, peak)]
