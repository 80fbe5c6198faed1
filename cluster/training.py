"""End-to-end training evaluation: train for real with a placement, or project on a simulated cluster.

A PyTorch step trains as its placed ``torch.fx`` step from its seeded weights
([`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]); a TensorFlow graph as below.

[`train`][cluster.training.train] runs ``steps`` real training steps of the benchmark's graph under a group
placement (over the prepared groups or another grouping, e.g. the colocation units of the
Hierarchical Planner and EAGLE) or an op-level placement ([`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement],
e.g. Baechi's m-TOPO / m-ETF / m-SCT) ([`cluster.real.PlacedSession`][cluster.real.PlacedSession], synthetic inputs from the seed; step ``k``'s
batch depends only on ``(seed, k)``) and returns each step's wall-clock seconds and loss.
[`projected_training`][cluster.training.projected_training] is the simulated counterpart: step time x steps, labelled as
simulated. MLflow logging is the caller's (``tracking/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cluster.spec import ClusterSpec
from compgraph.ir import Grouping


@dataclass
class TrainingResult:
    """A real training run.

    Attributes:
        step_times_s: wall-clock seconds of each step, ``[steps]`` (the first includes warm-up).
        losses: the loss after each step's forward pass, ``[steps]``.
        total_s: sum of ``step_times_s`` (seconds; session set-up and initialisation excluded).
        setup_s: seconds to import the graph, create the session and initialise variables.
        devices: TensorFlow device string of each spec device.
        simulated: always False (see [`ProjectedTraining`][cluster.training.ProjectedTraining]).
    """

    step_times_s: list[float]
    losses: list[float]
    total_s: float
    setup_s: float
    devices: list[str] = field(default_factory=list)
    simulated: bool = False


@dataclass
class ProjectedTraining:
    """Training time projected from a (simulated) step time: ``seconds = step_time_s * steps``."""

    seconds: float
    steps: int
    step_time_s: float
    simulated: bool = True
    label: str = "simulated"


def op_grouping(graph) -> Grouping:
    """One group per op (grouper ``"op"``): the grouping an op-level placement runs over."""
    return Grouping(np.arange(graph.num_ops, dtype=np.int64), [op.name for op in graph.ops], "op")


def train(prepared, spec: ClusterSpec, group_placement, steps: int = 20, seed: int = 0,
          on_step: Callable[[int, float, float], None] | None = None, soft_placement: bool = False,
          devices: list[str] | None = None, grouping: Grouping | None = None,
          torch_options: dict | None = None) -> TrainingResult:
    """Train the prepared model for ``steps`` real steps with ``group_placement``.

    Args:
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] (with ``graph_def``; its fetches
            must include a scalar float loss).
        spec: the cluster (devices mapped by [`cluster.real.tf_devices`][cluster.real.tf_devices] unless ``devices``).
        group_placement: ``[num_groups]`` device indices over ``grouping`` (default
            ``prepared.grouping``), or an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] (``[num_ops]``
            device indices; each op placed on its own device, TensorFlow's colocation checked).
        grouping: the units ``group_placement`` is over (e.g. [`compgraph.grouping.colocation_grouping`][compgraph.grouping.colocation_grouping]);
            ignored for an op placement.
        steps: training steps (>= 1).
        seed: seed of the synthetic inputs and of TensorFlow's graph-level seed.
        on_step: called after each step with ``(step, step_time_s, loss)``, step from 0.
        soft_placement: see [`cluster.real.RealEnvironment`][cluster.real.RealEnvironment] (a TensorFlow graph).
        torch_options: a PyTorch step ([`cluster.torch_real`][cluster.torch_real]): ``threads``, ``time_limit_s`` of
            [`cluster.torch_real.TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment]; its ``devices`` are torch devices.
    Returns:
        [`TrainingResult`][cluster.training.TrainingResult].
    Raises:
        ValueError: ``steps < 1``, a bad placement, or fetches without a scalar float loss;
        cluster.real.ColocationError: an op placement that splits ops TensorFlow must colocate;
        cluster.real.PlacementError: a placement TensorFlow cannot run;
        tensorflow.errors.ResourceExhaustedError: a device ran out of memory (TensorFlow);
        MemoryError: a PyTorch step ran out of memory; TimeoutError: a PyTorch step over its time limit.
    """
    import time

    from cluster.factory import make_environment
    from cluster.real import RealEnvironment
    from cluster.op_placement import is_op_placement

    if steps < 1:
        raise ValueError(f"steps: must be >= 1, got {steps}")
    if is_op_placement(group_placement):  # per-op devices: one unit per op
        grouping, group_placement = op_grouping(prepared.graph), group_placement.ops
    from cluster.torch_real import TorchRealEnvironment, is_torch_step

    if is_torch_step(prepared):  # a PyTorch step: its placed torch.fx step, trained from its seeded weights
        tenv = make_environment("real", prepared, spec, {"seed": seed, "devices": devices, **(torch_options or {})},
                                grouping=grouping)
        assert isinstance(tenv, TorchRealEnvironment)
        t0 = time.perf_counter()
        tenv.op_placement(group_placement)  # a bad placement fails before the capture
        tenv._load()
        setup = time.perf_counter() - t0
        m = tenv.run(group_placement, steps, 0, on_step=on_step)
        if m.oom:
            raise MemoryError(f"{prepared.name}: out of memory after {len(m.step_times_s)} training step(s)")
        if m.failure:
            raise TimeoutError(f"{prepared.name}: {m.failure}")
        return TrainingResult(m.step_times_s, m.losses, float(sum(m.step_times_s)), setup, list(tenv.devices))
    env = make_environment("real", prepared, spec, {"steps": 2, "warmup": 1, "seed": seed,
                                                    "soft_placement": soft_placement, "devices": devices},
                           grouping=grouping)
    assert isinstance(env, RealEnvironment)
    t0 = time.perf_counter()
    times: list[float] = []
    losses: list[float] = []
    with env.session(group_placement) as sess:
        if sess.loss is None:
            raise ValueError(f"fetches {list(prepared.fetches)}: none has a scalar float output to use as the loss")
        setup = time.perf_counter() - t0
        for k in range(steps):
            r = sess.run_step()
            loss = math.nan if r.loss is None else float(r.loss)  # the session has a loss: always set
            times.append(r.seconds)
            losses.append(loss)
            if on_step is not None:
                on_step(k, r.seconds, loss)
    return TrainingResult(times, losses, float(sum(times)), setup, list(env.devices))


def projected_training(step_time_s: float, steps: int) -> ProjectedTraining:
    """Projected seconds of ``steps`` training steps at ``step_time_s`` each (a simulated figure).

    Raises:
        ValueError: a negative or non-finite step time, or ``steps < 0``.
    """
    if not (isinstance(step_time_s, (int, float)) and math.isfinite(step_time_s) and step_time_s >= 0):
        raise ValueError(f"step_time_s: must be a finite number >= 0, got {step_time_s!r}")
    if steps < 0:
        raise ValueError(f"steps: must be >= 0, got {steps}")
    return ProjectedTraining(seconds=float(step_time_s) * int(steps), steps=int(steps), step_time_s=float(step_time_s))
