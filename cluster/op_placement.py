"""Op-level placements beside group placements, and how an environment measures them.

Convention: a placement is either a group placement, an int array ``[num_groups]`` of
device indices into ``spec.devices`` (what the baselines of 2017 Sec. 4.2 and the group
learners produce), or an [`OpPlacement`][cluster.op_placement.OpPlacement] wrapping an int array ``[num_ops]`` (what
op-level placers produce, e.g. Baechi's m-TOPO / m-ETF / m-SCT, which place the op graph
and generally split the groups of ``prepared.grouping``). [`measure_placement`][cluster.op_placement.measure_placement]
measures either in an environment built for the group placements.
"""

from __future__ import annotations

from typing import TypeGuard

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OpPlacement:
    """A per-op placement: ``ops[i]`` is the device index of op ``i`` (int64 ``[num_ops]``)."""

    ops: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", np.asarray(self.ops, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ops)

    def group_placement(self, op_group: np.ndarray, num_groups: int) -> np.ndarray | None:
        """The same placement as ``[num_groups]`` device indices if every group's ops share one device, else ``None``."""
        og = np.asarray(op_group)
        out = np.full(num_groups, -1, dtype=np.int64)
        out[og] = self.ops
        if (out < 0).any() or not np.array_equal(out[og], self.ops):
            return None
        return out


def is_op_placement(placement) -> TypeGuard[OpPlacement]:
    """True for an [`OpPlacement`][cluster.op_placement.OpPlacement] (a per-op placement), False for a group placement array."""
    return isinstance(placement, OpPlacement)


def measure_placement(env, placement):
    """Measure a group placement (``[num_groups]``) or an [`OpPlacement`][cluster.op_placement.OpPlacement] in ``env``.

    An op placement that keeps every group on one device is measured as that group
    placement (any environment); otherwise the environment must simulate the op graph:
    an environment with a ``measure_ops(op_placement)`` method
    ([`cluster.simulated.SimulatedEnvironment.measure_ops`][cluster.simulated.SimulatedEnvironment.measure_ops]).

    Returns:
        a [`cluster.environment.Measurement`][cluster.environment.Measurement].
    Raises:
        ValueError: an op placement that splits groups in an environment that cannot
            measure per-op placements (real execution; the simulator's contracted engine); wrong length.
    """
    if not is_op_placement(placement):
        return env.measure(placement)
    ops = placement.ops
    if len(ops) != env.graph.num_ops:
        raise ValueError(f"op placement: length {len(ops)}, expected {env.graph.num_ops} ops")
    grouped = placement.group_placement(env.grouping.op_group, env.grouping.num_groups)
    if grouped is not None:
        return env.measure(grouped)
    if hasattr(env, "measure_ops"):  # e.g. cluster.simulated.SimulatedEnvironment
        return env.measure_ops(ops)
    raise ValueError(f"environment {getattr(env, 'kind', '?')!r} cannot measure an op placement that splits groups; "
                     "use --env sim")
