"""The Ray actors of the distributed search (2017 Sec. 3.4) and what they share with the driver.

* [`ParameterServer`][placer.actors.ParameterServer] holds the policy's parameters ([`policy_state`][placer.actors.policy_state]): a synchronous
  round's [`merge_parameters`][placer.actors.merge_parameters], an asynchronous push's change, the pooled step of a learner
  that has one (Post's cross-entropy).
* [`Controller`][placer.actors.Controller] holds one learner: it samples from the parameters it pulled and updates
  from the measured step times, returning its new parameters (or their change) and its state.
* [`Worker`][placer.actors.Worker] owns one measurement environment and measures one placement at a time;
  [`WorkerPool`][placer.actors.WorkerPool] is the driver's view of the workers (one placement per worker at a time,
  a placement whose worker died measured again elsewhere).

A restarted controller or server refuses calls ([`ControllerRestarted`][placer.actors.ControllerRestarted],
[`ServerRestarted`][placer.actors.ServerRestarted]) until the driver restores it ([`placer.distributed`][placer.distributed], which
creates the actors and drives them). The learners and torch are imported lazily: a worker
process never loads torch for the simulator.
"""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from placer.ray_session import ray_get

if TYPE_CHECKING:
    from cluster.spec import ClusterSpec
    from compgraph.prepare import PreparedGraph
    from placer.learner import Learner, Samples
    from placer.search import Job


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


def policy_state(learner: Learner) -> dict[str, np.ndarray]:
    """``learner.policy_state()`` as numpy arrays ([`placer.learner.Learner.policy_state`][placer.learner.Learner.policy_state])."""
    return {k: _numpy(v) for k, v in learner.policy_state().items()}


def merge_parameters(pulled: dict[str, np.ndarray], news: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """A synchronous round's new parameters: ``news[0] + sum_{c>0} (news[c] - pulled)`` for
    floating-point arrays (``news[0]`` itself with one controller, bit for bit), ``news[0]``'s
    value for the others."""
    if len(news) == 1:
        return dict(news[0])
    out = {}
    for key, base in pulled.items():
        first = np.asarray(news[0][key])
        if np.issubdtype(first.dtype, np.floating):
            total = first.copy()
            for new in news[1:]:
                total += np.asarray(new[key]) - base
            out[key] = total
        else:
            out[key] = first
    return out



class EnvironmentView:
    """What a learner may read of an environment (``kind``, ``graph``, ``grouping``, ``spec``),
    for controllers and the server of a search whose workers measure for real; ``measure``
    raises (the contract: learners never measure)."""

    def __init__(self, kind: str, graph, grouping, spec) -> None:
        self.kind, self.graph, self.grouping, self.spec = kind, graph, grouping, spec

    def measure(self, group_placement):
        raise RuntimeError("a learner must not measure (placer.learner.Learner); workers do")


def _environment(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict, measuring: bool):
    """The workers' environment (``measuring``), or what a learner sees: the same simulated
    environment for ``sim`` (so a learner's failing signal is the in-process one), an
    [`EnvironmentView`][placer.actors.EnvironmentView] otherwise. The one place this module builds environments."""
    from cluster.factory import make_environment

    if measuring or env_kind == "sim":
        return make_environment(env_kind, prepared, spec, env_options)
    return EnvironmentView(env_kind, prepared.graph, prepared.grouping, spec)


def _make_learner(learner_cls, config, prepared, spec, env_kind, env_options, device: str, pooled: bool):
    learner = learner_cls(_environment(prepared, spec, env_kind, env_options, False), config)
    if device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"policy_device: {device!r} but CUDA is not available on this Ray node "
                               f"(torch.cuda.is_available() is False); use policy_device='cpu'")
        learner = learner.to(device)
    learner.pooled = pooled
    return learner



class ControllerRestarted(RuntimeError):
    """Raised by a controller actor that Ray restarted and the driver has not restored yet."""


class ServerRestarted(RuntimeError):
    """Raised by a parameter server that Ray restarted and the driver has not restored yet."""


class ParameterServer:
    """Holds the policy's parameters (2017 Sec. 3.4); a Ray actor.

    Args:
        params: the initial parameters (controller 0's learner's, seeded with ``config.seed``).
        learner_cls, config, prepared, spec, env_kind, env_options: a learner with a pooled
            step, built here (on the CPU) for [`pooled`][placer.actors.ParameterServer.pooled]; ``learner_cls=None``: none.
    """

    def __init__(self, params: dict[str, np.ndarray], learner_cls=None, config=None, prepared=None, spec=None,
                 env_kind: str = "sim", env_options: dict | None = None) -> None:
        self.params = {k: np.array(v) for k, v in params.items()}
        self.version = 0
        self.learner: Learner | None = None
        self.restored = False  # set by restore(): a server Ray restarted serves nothing until the driver restores it
        if learner_cls is not None:
            self.learner = _make_learner(learner_cls, config, prepared, spec, env_kind, env_options or {}, "cpu", True)

    def _check(self) -> None:
        if not self.restored:
            raise ServerRestarted(f"parameter server pid {os.getpid()}: restarted, not restored")

    def state(self) -> dict:
        """``{"params", "version", "learner"}``: everything to continue from (the pooled learner's
        [`state_dict`][placer.learner.Learner.state_dict], or ``None``)."""
        self._check()
        return {"params": self.params, "version": self.version,
                "learner": None if self.learner is None else self.learner.state_dict()}

    def restore(self, state: dict | None) -> int:
        """Load a [`state`][placer.actors.ParameterServer.state] (``None``: keep the initial one); marks the server usable; returns its pid."""
        if state is not None:
            self.params = {k: np.array(v) for k, v in state["params"].items()}
            self.version = int(state["version"])
            if self.learner is not None and state["learner"] is not None:
                self.learner.load_state_dict(state["learner"])
        self.restored = True
        return os.getpid()

    def get_params(self) -> tuple[int, dict[str, np.ndarray]]:
        """``(version, parameters)``: the number of changes applied so far, and the parameters."""
        self._check()
        return self.version, self.params

    def merge(self, *news: dict[str, np.ndarray]) -> int:
        """A synchronous round: [`merge_parameters`][placer.actors.merge_parameters] of the controllers' new parameters (the
        server's parameters are those the round pulled)."""
        self._check()
        self.params = merge_parameters(self.params, list(news))
        self.version += 1
        return self.version

    def add(self, delta: dict[str, np.ndarray]) -> int:
        """An asynchronous push: add a controller's change (floating-point arrays; the others replaced)."""
        self._check()
        for k, v in delta.items():
            if np.issubdtype(self.params[k].dtype, np.floating):
                self.params[k] = self.params[k] + v
            else:
                self.params[k] = np.array(v)
        self.version += 1
        return self.version

    def pooled(self, *batches: dict) -> dict[str, float] | None:
        """The learner's pooled step (e.g. Post's cross-entropy) over every controller's batch,
        each ``{"placements" [K][U], "log_prob" [K], "step_times_s" [K], "oom" [K]}``."""
        from placer.learner import Samples

        self._check()
        if self.learner is None:
            raise RuntimeError("parameter server: no pooled learner (the learner has no pooled step)")
        self.learner.load_policy_state(self.params)
        got = self.learner.pooled_update([
            (Samples(np.asarray(b["placements"], dtype=np.int64), np.asarray(b["log_prob"], dtype=np.float64)),
             np.asarray(b["step_times_s"], dtype=np.float64), np.asarray(b["oom"], dtype=bool)) for b in batches])
        if got is not None:
            self.params = policy_state(self.learner)
            self.version += 1
        return got


class Controller:
    """Holds one learner; samples from pulled parameters and updates from measured times; a Ray actor.

    Args:
        learner_cls, config: the learner and its settings (``config.seed`` is this controller's seed).
        prepared, spec, env_kind, env_options: what the learner sees (`_environment`).
        device: ``cpu`` or ``cuda`` (the learner's ``to``).
        pooled: the learner's pooled step runs at the server.
    """

    def __init__(self, learner_cls, config, prepared, spec, env_kind, env_options, device: str, pooled: bool) -> None:
        self._args = (learner_cls, config, prepared, spec, env_kind, env_options, device, pooled)
        self._learner: Learner | None = None
        self.samples: Samples | None = None
        self.pulled: dict | None = None
        self.restored = False

    @property
    def learner(self) -> Learner:
        """The learner, built on first use (not in ``__init__``, so that its errors reach the
        caller as their own type rather than as Ray's ``ActorDiedError``)."""
        if self._learner is None:
            self._learner = _make_learner(*self._args)
        return self._learner

    def info(self) -> dict:
        """``{"params", "failing_signal", "batch_size", "pid"}`` of the freshly built learner."""
        return {"params": policy_state(self.learner), "failing_signal": self.learner.failing_signal,
                "batch_size": int(self.learner.batch_size), "pid": os.getpid()}

    def restore(self, state: dict | None) -> int:
        """Load a learner state (``None``: keep the fresh one); marks the actor usable; returns its pid."""
        if state is not None:
            self.learner.load_state_dict(state)
        self.samples, self.restored = None, True
        return os.getpid()

    def _check(self) -> None:
        if not self.restored:
            raise ControllerRestarted(f"controller pid {os.getpid()}: restarted, not restored")

    def sample(self, k: int, pulled: tuple[int, dict]) -> dict:
        """Load the pulled ``(version, parameters)`` and sample ``k`` placements ->
        ``{"placements" [k][U], "log_prob" [k]}``."""
        self._check()
        self.pulled = pulled[1]
        self.learner.load_policy_state(self.pulled)
        self.samples = self.learner.sample(k)
        return {"placements": np.asarray(self.samples.placements, dtype=np.int64).tolist(),
                "log_prob": np.asarray(self.samples.log_prob, dtype=np.float64).tolist()}

    def update(self, step_times_s: list[float], oom: list[bool], as_delta: bool) -> tuple:
        """``learner.update`` on the last batch -> ``(diagnostics, parameters or their change since
        the pull, learner state)`` (three Ray returns).

        Raises:
            ControllerRestarted: restarted since the batch was sampled.
        """
        self._check()
        if self.samples is None:
            raise ControllerRestarted("controller: update() without a sampled batch")
        diag = self.learner.update(self.samples, np.asarray(step_times_s, dtype=np.float64),
                                   np.asarray(oom, dtype=bool))
        self.samples = None
        new = policy_state(self.learner)
        if as_delta:
            pulled = self.pulled or {}
            new = {k: (v - pulled[k]) if np.issubdtype(v.dtype, np.floating) else v for k, v in new.items()}
        return {k: float(v) for k, v in (diag or {}).items()}, new, self.learner.state_dict()


class Worker:
    """Owns one measurement environment and measures one placement at a time; a Ray actor.

    Args:
        prepared, spec, env_kind, env_options: the environment (`_environment`).
        delay_s: extra seconds per measurement (a stand-in for real execution in benchmarks and tests).

    A worker that asked Ray for no GPU sees none (``CUDA_VISIBLE_DEVICES`` emptied); one that
    asked for ``G`` sees the ``G`` Ray gave it. The environment is built by [`ready`][placer.actors.Worker.ready]
    (so its errors reach the caller as their own type, not as Ray's ``ActorDiedError``).
    """

    def __init__(self, prepared, spec, env_kind: str, env_options: dict, delay_s: float = 0.0) -> None:
        import ray

        if not ray.get_gpu_ids():
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        self._args: tuple | None = (prepared, spec, env_kind, env_options)
        self.delay_s = float(delay_s)
        self.env = None

    def ready(self) -> int:
        """Build the environment; returns the worker's pid."""
        if self.env is None:
            assert self._args is not None
            prepared, spec, env_kind, env_options = self._args
            self.env = _environment(prepared, spec, env_kind, env_options, True)
            self._args = None
        return os.getpid()

    def visible_gpus(self) -> str:
        """The worker's ``CUDA_VISIBLE_DEVICES``."""
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def measure(self, placement: list[int]) -> dict:
        """Measure one ``[U]`` placement -> ``{"step_time_s" (seconds, None if OOM), "oom"}``.

        Raises:
            ValueError and the environment's errors (e.g. [`cluster.real.PlacementError`][cluster.real.PlacementError]).
        """
        import time

        self.ready()
        if self.delay_s:
            time.sleep(self.delay_s)
        assert self.env is not None
        m = self.env.measure(np.asarray(placement, dtype=np.int64))
        return {"step_time_s": m.step_time_s, "oom": bool(m.oom)}



class WorkerPool:
    """The workers, driven from the search's process: one placement per worker at a time; a
    placement whose worker died goes, first in the queue, to the next free worker (the dead one,
    restarting, waits last).

    Args:
        workers: the [`Worker`][placer.actors.Worker] actors' handles.
        max_attempts: tries of a placement whose workers die (>= 1).

    Attributes:
        retried: placements measured again after their worker died.
    """

    def __init__(self, workers: list, max_attempts: int) -> None:
        self.workers, self.max_attempts = workers, max_attempts
        self.free = deque(range(len(workers)))
        self.queue: deque[Job] = deque()
        self.inflight: dict = {}
        self.reviving: dict = {}  # ready() ref of a worker Ray is restarting -> worker
        self.retried = 0

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the next free worker."""
        self.queue.append(job)

    def refs(self) -> list:
        """Start queued jobs on free workers -> every call to wait for (measurements in flight, then
        restarting workers' ``ready``)."""
        while self.free and self.queue:
            w, job = self.free.popleft(), self.queue.popleft()
            self.inflight[self.workers[w].measure.remote(job.placement)] = (w, job)
        return list(self.inflight) + list(self.reviving)

    def collect(self, ref) -> tuple[Job, int, dict] | None:
        """The finished measurement of ``ref`` -> ``(job, worker, measurement)``; ``None`` when
        its worker died (the job is queued again).

        Raises:
            RuntimeError: a placement failed ``max_attempts`` times; the environment's errors.
        """
        import time

        import ray

        if ref in self.reviving:  # a restarting worker's ready(): back to work, or ask again
            w = self.reviving.pop(ref)
            try:
                ray_get(ref)
                self.free.append(w)
            except ray.exceptions.RayActorError:
                time.sleep(0.2)
                self.reviving[self.workers[w].ready.remote()] = w
            return None
        w, job = self.inflight.pop(ref)
        try:
            m = ray_get(ref)
        except ray.exceptions.RayActorError as e:
            # it died (Ray: "restarted", "may or may not have been executed"): measured again elsewhere
            job.attempts += 1
            self.retried += 1
            if job.attempts >= self.max_attempts:
                raise RuntimeError(f"sample {job.index}: {job.attempts} workers died measuring it; last: {e}") from None
            self.queue.appendleft(job)
            self.reviving[self.workers[w].ready.remote()] = w
            return None
        self.free.append(w)
        return job, w, m


