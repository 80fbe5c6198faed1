"""The one rule for ops without a GPU kernel: they run on the first CPU.

2017 Sec. 4.2: "if an operation lacks GPU implementation, it will be placed on CPU". TensorFlow's
soft placement does the same at run time. Every place that needs the rule calls this module:
the baselines (per group), the calibration placements (per group), the simulators (per op;
the compiled batch kernel of [`cluster.fast_simulator`][cluster.fast_simulator] calls [`fallback_device`][cluster.kernels.fallback_device]), the
real environment (per group, with TensorFlow's own kernel registry deciding what is missing).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph


@njit(inline="always")
def fallback_device(device, gpu_ok, is_gpu, cpu):
    """The device a unit runs on: ``cpu`` if it sits on a GPU (``is_gpu[device]``) without a
    GPU kernel (``not gpu_ok``) and the cluster has a CPU (``cpu >= 0``), else ``device``.

    A numba function (inlined into the compiled simulator kernels), also callable from Python.
    """
    if cpu >= 0 and is_gpu[device] and not gpu_ok:
        return cpu
    return device


def gpu_mask(spec: ClusterSpec) -> np.ndarray:
    """``[num_devices]`` bool: which devices of ``spec`` are GPUs."""
    return np.array([d.kind == "gpu" for d in spec.devices], dtype=bool)


def first_cpu(spec: ClusterSpec) -> int:
    """Index of the CPU the rule sends ops to (the first CPU of ``spec``), ``-1`` if it has none."""
    return spec.cpu_indices[0] if spec.cpu_indices else -1


def op_gpu_ok(graph: OpGraph) -> np.ndarray:
    """``[num_ops]`` bool: the op has a GPU kernel (``Op.gpu_kernel``)."""
    return np.array([bool(op.gpu_kernel) for op in graph.ops], dtype=bool)


def group_gpu_ok(graph: OpGraph, grouping: Grouping) -> np.ndarray:
    """``[num_groups]`` bool: every op of the group has a GPU kernel."""
    ok = np.ones(grouping.num_groups, dtype=bool)
    ok[np.asarray(grouping.op_group)[~op_gpu_ok(graph)]] = False
    return ok


def cpu_fallback(placement: np.ndarray, gpu_ok: np.ndarray, spec: ClusterSpec, require_cpu: bool = False) -> np.ndarray:
    """Apply the rule to every unit (op or group) of ``placement``.

    Args:
        placement: ``[num_units]`` (or ``[K, num_units]``) device indices into ``spec.devices``.
        gpu_ok: ``[num_units]`` bool, the unit may run on a GPU ([`op_gpu_ok`][cluster.kernels.op_gpu_ok] per op,
            [`group_gpu_ok`][cluster.kernels.group_gpu_ok] per group).
        spec: the cluster.
        require_cpu: raise if a unit must move and ``spec`` has no CPU (otherwise it stays).
    Returns:
        A new int64 array of the same shape: units on a GPU with ``gpu_ok`` False moved to the first CPU;
        the same values as [`fallback_device`][cluster.kernels.fallback_device] applied to each unit.
    Raises:
        ValueError: ``placement`` and ``gpu_ok`` differ in shape; ``require_cpu`` and no CPU.
    """
    p = np.asarray(placement, dtype=np.int64).copy()
    ok = np.asarray(gpu_ok, dtype=bool)
    if p.shape[-1:] != ok.shape:
        raise ValueError(f"placement: shape {p.shape}, gpu_ok has {ok.shape}")
    move = gpu_mask(spec)[p] & ~ok
    cpu = first_cpu(spec)
    if move.any():
        if cpu < 0:
            if require_cpu:
                raise ValueError(f"cluster {spec.name!r}: has no CPU device for ops without a GPU kernel")
            return p
        p[move] = cpu
    return p
