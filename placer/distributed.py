"""Every learner distributed on Ray: a parameter server, controllers and workers (2017 Sec. 3.4).

Mirhoseini et al. 2017, Sec. 3.4 (Fig. 3): a *parameter server* holds the policy's
parameters; each of several *controllers* pulls them, samples K placements, has *workers*
measure them (one placement per worker at a time), updates from the running times with its
own baseline ("it is more stable to let each controller have its own baseline"), and pushes
the result to the parameter server.

Here any :class:`placer.learner.Learner` is distributed through its contract
(:func:`distributed_search`): each controller (a Ray actor) holds a learner instance and
calls its ``sample`` and ``update`` (so it keeps its own baseline, optimizer state and
sampling generator); the server holds only the policy's parameters (:func:`policy_state`);
a pool of worker actors, each with its own measurement environment, measures placements
one at a time; the driver (this process) dispatches placements to free workers, appends
each measurement to the run's placement log (:class:`placer.search.PlacementLog`) the
moment it arrives, and only then gives the batch's times to its controller.

The search is the one loop of :mod:`placer.search` (:func:`placer.search.search_loop`):
:class:`RayControllers` is its update side (the controller actors and the server) and
:class:`RayEvaluator` its measuring side (the worker pool), where the in-process search has
the learner and the environment; so the placement log, replay, curve and per-update
diagnostics are the same code. The asynchronous mode has no rounds and drives the same pieces
itself (:meth:`RayControllers.run_async`).

A controller pushes its learner's new parameters (synchronous) or the change it made to
the parameters it pulled (asynchronous). Controller ``c`` samples with seed
:func:`controller_seed` ``(config.seed, c)``; controller 0 with ``config.seed``.

**Synchronous rounds (default, reproducible).** A round: every controller pulls the same
parameters and samples ``min(K, placements left)``; the workers measure all of them; the
batches are recorded in sample-index order; every controller updates; the server's new
parameters are controller 0's new parameters plus every other controller's change
(``new_c - pulled``) -- with one controller exactly controller 0's, so one controller gives
the in-process search's result for the same seed (for the 2017 learner:
:func:`placer.reinforce.reinforce_search`). The same seed and settings give the same
:class:`placer.search.SearchResult` whatever the timing, and a re-run on an existing
log with the same settings replays the logged measurements by sample index (resume).

**Asynchronous (``async_updates=True``, 2017's mode, not reproducible).** Each controller
loops on its own: pull whatever the server holds, sample, measure, update, push its change,
which the server adds on arrival (the parameters may have moved meanwhile). The budget is
allocated in sample-index order as controllers ask; such a log cannot be resumed.

**The learner contract** (:class:`placer.learner.Learner`, each with a default): the
search distributes every learner, including those that group ops themselves (Hierarchical
Planner, EAGLE: their controllers and workers see an environment over the colocation units,
``grouping``), through

* ``policy_state() -> dict[str, np.ndarray]`` and ``load_policy_state(state)``: the
  policy's parameters only (what the server holds and controllers pull); by default the
  ``state_dict`` of ``self.policy`` (a ``torch.nn.Module``). A learner with none (the hill
  climber ``local_search``) shares nothing: each controller searches on its own.
* ``to(device)`` and ``policy_devices``: where the controllers may run the policy
  (``policy_device``); a device the learner does not list is refused before any actor starts.
* ``pools`` and ``pooled_update(batches)`` (Post's cross-entropy step, which needs every
  controller's placements): the search sets ``pooled = True`` on every controller's and the
  server's learner (``update`` then makes only its own step); ``pooled_update`` runs at the
  server on a learner seeded with ``config.seed`` whose policy holds the server's parameters,
  with ``batches`` a list of ``(Samples, step_times_s [K], oom [K])`` (``Samples.extra``
  empty), each controller's batch once, in the order recorded; it returns diagnostics when it
  changed the policy (the server then takes the learner's ``policy_state``), else ``None``.

**Faults.** Worker, controller and parameter-server actors restart (``max_restarts=-1``).
The driver keeps the server's state after each completed round (synchronous) or push
(asynchronous): parameters, version and the pooled learner's state; a server that dies is
revived, restored to it, and the call it was in is made again, so a synchronous search gives the
same result as without the fault. The parameters a round pulls are put in the object store by
the driver, so controllers never depend on the server's process. A placement whose
worker dies mid-measurement is measured again by another free worker (up to
``max_attempts`` tries); only a measurement that arrives is logged, and the log's sample
``index`` identifies it (never twice). A controller that dies is restarted: its learner
is restored from the state it returned after its last update (held by the driver) and
the parameters it pulled (held by the server's reply), and the step it was in is redone
-- the same placements are sampled again (checked against the logged ones), so a
synchronous search gives the same result as without the fault.

Ray's transport serialises the actors' arguments (the prepared graph, parameters, learner
states) with pickle between this search's own processes; nothing is read from files by
unpickling.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from placer.ray_session import actor_options, check_ray_address, ray_get, ray_session
from placer.search import Job

if TYPE_CHECKING:  # torch and the learners are imported lazily: worker processes never load torch
    from cluster.spec import ClusterSpec
    from compgraph.ir import Grouping
    from compgraph.prepare import PreparedGraph
    from placer.learner import Learner, LearnerConfig, Samples
    from placer.reinforce import ReinforceConfig
    from cluster.environment import Measurement
    from placer.search import SearchLedger, SearchResult

# ----------------------------------------------------------------------------- actors


def controller_seed(seed: int, controller: int) -> int:
    """Seed of controller ``controller``'s sampling generator: ``seed`` for controller 0 (so one
    controller samples as :func:`placer.reinforce.reinforce_search` does), else a 63-bit
    value derived from ``(seed, controller)`` by ``numpy.random.SeedSequence``."""
    if controller == 0:
        return int(seed)
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, controller]).generate_state(1, np.uint64)
    return int(state[0] >> 1)



# ----------------------------------------------------------------------------- the learner extension


def resolve_learner(learner: str | type[Learner]) -> type[Learner]:
    """The learner class of a method name (:data:`placer.learner.LEARNERS`) or the class itself.

    Raises:
        ValueError: an unknown name (lists the valid ones).
    """
    if isinstance(learner, type):
        return learner
    from placer import LEARNERS

    if learner not in LEARNERS:
        raise ValueError(f"learner: unknown learner {learner!r}; valid: {', '.join(sorted(LEARNERS))}")
    return LEARNERS[learner]


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


def policy_state(learner: Learner) -> dict[str, np.ndarray]:
    """``learner.policy_state()`` as numpy arrays (:meth:`placer.learner.Learner.policy_state`)."""
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
    :class:`EnvironmentView` otherwise. The one place this module builds environments."""
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


# ----------------------------------------------------------------------------- actors


class ControllerRestarted(RuntimeError):
    """Raised by a controller actor that Ray restarted and the driver has not restored yet."""


class ServerRestarted(RuntimeError):
    """Raised by a parameter server that Ray restarted and the driver has not restored yet."""


class ParameterServer:
    """Holds the policy's parameters (2017 Sec. 3.4); a Ray actor.

    Args:
        params: the initial parameters (controller 0's learner's, seeded with ``config.seed``).
        learner_cls, config, prepared, spec, env_kind, env_options: a learner with a pooled
            step, built here (on the CPU) for :meth:`pooled`; ``learner_cls=None``: none.
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
        :meth:`~placer.learner.Learner.state_dict`, or ``None``)."""
        self._check()
        return {"params": self.params, "version": self.version,
                "learner": None if self.learner is None else self.learner.state_dict()}

    def restore(self, state: dict | None) -> int:
        """Load a :meth:`state` (``None``: keep the initial one); marks the server usable; returns its pid."""
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
        """A synchronous round: :func:`merge_parameters` of the controllers' new parameters (the
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
        prepared, spec, env_kind, env_options: what the learner sees (:func:`_environment`).
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
        prepared, spec, env_kind, env_options: the environment (:func:`_environment`).
        delay_s: extra seconds per measurement (a stand-in for real execution in benchmarks and tests).

    A worker that asked Ray for no GPU sees none (``CUDA_VISIBLE_DEVICES`` emptied); one that
    asked for ``G`` sees the ``G`` Ray gave it. The environment is built by :meth:`ready`
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
            ValueError and the environment's errors (e.g. :class:`cluster.real.PlacementError`).
        """
        import time

        self.ready()
        if self.delay_s:
            time.sleep(self.delay_s)
        assert self.env is not None
        m = self.env.measure(np.asarray(placement, dtype=np.int64))
        return {"step_time_s": m.step_time_s, "oom": bool(m.oom)}


# ----------------------------------------------------------------------------- the search


class _Pool:
    """The workers: one placement per worker at a time; a placement whose worker died goes,
    first in the queue, to the next free worker (the dead one, restarting, waits last)."""

    def __init__(self, workers: list, max_attempts: int) -> None:
        self.workers, self.max_attempts = workers, max_attempts
        self.free = deque(range(len(workers)))
        self.queue: deque[Job] = deque()
        self.inflight: dict = {}
        self.reviving: dict = {}  # ready() ref of a worker Ray is restarting -> worker
        self.retried = 0

    def submit(self, job: Job) -> None:
        self.queue.append(job)

    def refs(self) -> list:
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


class RayEvaluator:
    """The measuring side on Ray (:class:`placer.search.Evaluator`): the worker pool, each
    measurement passed on the moment it arrives, with its ``round``, ``controller``, ``worker``
    and ``attempt`` for the log."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool

    @staticmethod
    def arrival(job: Job, worker: int, m: dict) -> list[tuple[Job, Measurement, dict]]:
        """A worker's measurement as what :meth:`measure` passes on."""
        from cluster.environment import Measurement

        return [(job, Measurement(step_time_s=m["step_time_s"], oom=bool(m["oom"])),
                 {"round": job.round, "controller": job.controller, "worker": worker, "attempt": job.attempts})]

    def measure(self, jobs: list[Job], arrived) -> None:
        """Measure every job on the workers; blocks until all are in."""
        import ray

        for job in jobs:
            self.pool.submit(job)
        while True:
            refs = self.pool.refs()
            if not refs:
                return
            (ref,), _ = ray.wait(refs, num_returns=1)
            got = self.pool.collect(ref)
            if got is not None:
                arrived(self.arrival(*got))


def _revive(method, *args, what: str, timeout_s: float = 300.0):
    """Call an actor's ``method(*args)`` until the actor, restarting, answers (Ray refuses calls
    with ``ActorUnavailableError`` meanwhile); returns the call's result.

    Raises:
        TimeoutError: it did not answer within ``timeout_s`` seconds.
    """
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray_get(method.remote(*args))
        except ray.exceptions.RayActorError as e:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not restarted within {timeout_s} s: {e}") from None
            time.sleep(0.2)


def _light_prepared(prepared: PreparedGraph, env_kind: str) -> PreparedGraph:
    """A copy for the actors: the GraphDef as protobuf bytes (``real``, ``grappler``) or dropped (``sim``),
    so that unpacking it does not import TensorFlow where it is not needed."""
    if env_kind not in ("real", "grappler"):
        return replace(prepared, graph_def=None)
    value = prepared.__dict__.get("_graph_def")
    if value is not None and not isinstance(value, bytes):
        value = value.SerializeToString()
    return replace(prepared, graph_def=value)


class RayControllers:
    """The update side on Ray (:class:`placer.search.Controllers`): the controller actors and the
    parameter server, driven from this process, with their fault recovery (module docstring).
    Synchronous rounds run through :func:`placer.search.search_loop`; :meth:`run_async` is
    2017's asynchronous mode, which has no rounds.

    Args:
        actors: :func:`_start_actors`' dict.
        max_attempts: tries of a controller step or a server call.
        pooled: the learner's pooled step runs at the server after each round.
    """

    def __init__(self, actors: dict, max_attempts: int, pooled: bool) -> None:
        self.server, self.controllers, self.pool = actors["server"], actors["controllers"], actors["pool"]
        self.k, self.max_attempts, self.pooled = actors["batch_size"], max_attempts, pooled
        self.failing_signal = actors["failing"]
        self.states: list = [None] * len(self.controllers)  # ref of each learner's state after its last update
        self.controller_restarts = 0
        self.server_restarts = 0
        self.server_state = None  # the server's state after the last completed round (None: its initial one)
        self._round: tuple = ()  # (pulled, samples) of the round in progress

    def _server(self, method: str, *args):
        """``server.<method>(*args)``, waited for; if the server died (or Ray restarted it), it is
        revived, restored to :attr:`server_state` (the state after the last completed round or
        push) and asked again. A synchronous search thus gives the same result as without the fault."""
        import ray

        attempts = 0
        while True:
            try:
                return ray_get(getattr(self.server, method).remote(*args))
            except (ray.exceptions.RayActorError, ServerRestarted) as e:
                attempts += 1
                self.server_restarts += 1
                if attempts >= self.max_attempts:
                    raise RuntimeError(f"parameter server: failed {attempts} times; last: {e}") from None
                _revive(self.server.restore, self.server_state, what="parameter server")

    def _pull(self):
        """The server's ``(version, parameters)``, put in the object store by the driver (which owns
        it), so the controllers' calls do not depend on the server's process."""
        import ray

        return ray.put(self._server("get_params"))

    def _snapshot(self) -> None:
        self.server_state = self._server("state")

    def _failed(self, c: int, e: Exception, attempts: int) -> int:
        """Count a controller fault (re-raise anything else), wait for Ray to restart the actor
        and restore its learner's last state; returns the attempts so far."""
        import ray

        if not isinstance(e, (ray.exceptions.RayActorError, ControllerRestarted)):
            raise e
        attempts += 1
        self.controller_restarts += 1
        if attempts >= self.max_attempts:
            raise RuntimeError(f"controller {c}: failed {attempts} times; last: {e}") from None
        _revive(self.controllers[c].restore, self.states[c], what=f"controller {c}")
        return attempts

    def sample_one(self, c: int, k: int, pulled, ref=None) -> dict:
        """The placements controller ``c`` sampled (``ref``: its call, already submitted; ``None``:
        submit it here); after a restart it is restored and asked again."""
        attempts = 0
        ref = self.controllers[c].sample.remote(k, pulled) if ref is None else ref
        while True:
            try:
                return ray_get(ref)
            except Exception as e:  # noqa: BLE001  (re-raised unless a controller fault)
                attempts = self._failed(c, e, attempts)
                ref = self.controllers[c].sample.remote(k, pulled)

    def update_one(self, c: int, k: int, pulled, placements: list, times, oom, as_delta: bool, refs=None):
        """Update controller ``c`` -> ``(diagnostics, new-parameters ref)`` (``refs``: the update
        call's three refs, already submitted; ``None``: submit it here); after a restart: restore
        its last state, sample the same placements again from the same pull, then update."""
        attempts = 0
        if refs is None:
            refs = self.controllers[c].update.options(num_returns=3).remote(times, oom, as_delta)
        while True:
            try:
                diag = ray_get(refs[0])
                self.states[c] = refs[2]
                return diag, refs[1]
            except Exception as e:  # noqa: BLE001
                attempts = self._failed(c, e, attempts)
                ctl = self.controllers[c]
                again = ctl.sample.remote(k, pulled)
                refs = ctl.update.options(num_returns=3).remote(times, oom, as_delta)
                try:
                    same = ray_get(again)["placements"] == placements
                except Exception as e2:  # noqa: BLE001  (died again: the update's get fails too)
                    same = True
                    del e2
                if not same:
                    raise RuntimeError(f"controller {c}: restored learner sampled other placements") from None

    def batch_sizes(self, left: int) -> list[int]:
        """A round: each controller in turn ``min(K, placements left)``, while any are left."""
        ks: list[int] = []
        for _ in self.controllers:
            k = min(self.k, left - sum(ks))
            if k <= 0:
                break
            ks.append(k)
        return ks

    def sample(self, ks: list[int]) -> list[Samples]:
        """Every controller pulls the same parameters and samples its batch."""
        from placer.learner import Samples

        pulled = self._pull()
        refs = [self.controllers[c].sample.remote(k, pulled) for c, k in enumerate(ks)]
        outs = [self.sample_one(c, k, pulled, ref) for c, (k, ref) in enumerate(zip(ks, refs))]
        self._round = (pulled, outs)
        return [Samples(np.asarray(o["placements"], dtype=np.int64), np.asarray(o["log_prob"], dtype=np.float64))
                for o in outs]

    def update(self, batches: list[Samples], times: list[np.ndarray], oom: list[np.ndarray]) -> list[dict | None]:
        """Every controller updates; the server merges (controller 0's parameters plus the
        others' changes), runs the pooled step, and its state is kept for recovery."""
        pulled, outs = self._round
        ts, os_ = [t.tolist() for t in times], [o.tolist() for o in oom]
        refs = [self.controllers[c].update.options(num_returns=3).remote(t, o, False)
                for c, (t, o) in enumerate(zip(ts, os_))]
        done = [self.update_one(c, len(b.placements), pulled, outs[c]["placements"], t, o, False, r)
                for c, (b, t, o, r) in enumerate(zip(batches, ts, os_, refs))]
        self._server("merge", *[new for _, new in done])
        if self.pooled:
            self._server("pooled", *[{"placements": outs[c]["placements"], "log_prob": outs[c]["log_prob"],
                                      "step_times_s": t, "oom": o} for c, (t, o) in enumerate(zip(ts, os_))])
        self._snapshot()
        return [diag for diag, _ in done]

    def state_dict(self) -> dict | None:
        """``None``: a search on Ray is not checkpointed (resume replays its log)."""
        return None

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError("a search on Ray has no checkpoint")

    def run_async(self, ledger: SearchLedger, budget: int, on_update=None) -> None:
        """Each controller on its own: pull, sample, measure, update, push (2017 Sec. 3.4); the
        budget allocated in sample-index order as controllers ask; each measurement logged as it
        arrives (``ledger``), each batch recorded once measured."""
        import time

        import ray

        t0 = time.perf_counter()
        allocated = 0
        rounds = [0] * len(self.controllers)
        batch: dict[int, dict] = {}
        pending: dict = {}  # ref of a sample or update call -> controller

        def start(c: int) -> None:
            nonlocal allocated
            k = min(self.k, budget - allocated)
            if k <= 0:
                return
            pulled = self._pull()
            batch[c] = {"k": k, "start": allocated, "pulled": pulled}
            allocated += k
            batch[c]["sample"] = self.controllers[c].sample.remote(k, pulled)
            pending[batch[c]["sample"]] = c

        def sampled(c: int) -> None:
            b = batch[c]
            out = self.sample_one(c, b["k"], b["pulled"], b.pop("sample"))
            b.update(placements=out["placements"], log_prob=out["log_prob"], left=b["k"])
            for i, row in enumerate(out["placements"]):
                self.pool.submit(Job(b["start"] + i, row, c, rounds[c]))

        def measured(c: int) -> None:  # logged, recorded: the controller may update
            b = batch[c]
            times, oom, b["point"] = ledger.record(range(b["start"], b["start"] + b["k"]))
            b["times"], b["oom"] = times.tolist(), oom.tolist()
            b["update"] = self.controllers[c].update.options(num_returns=3).remote(b["times"], b["oom"], True)
            pending[b["update"][0]] = c

        def updated(c: int) -> None:
            b = batch.pop(c)
            diag, new = self.update_one(c, b["k"], b["pulled"], b["placements"], b["times"], b["oom"], True,
                                        b["update"])
            self._server("add", new)
            if self.pooled:
                self._server("pooled", {"placements": b["placements"], "log_prob": b["log_prob"],
                                        "step_times_s": b["times"], "oom": b["oom"]})
            self._snapshot()
            rounds[c] += 1
            info = {"placements": b["point"]["placements"], "wall_s": time.perf_counter() - t0, **(diag or {})}
            ledger.result.updates.append(info)
            ledger.result.add_point(b["point"], on_update, info)
            start(c)

        for c in range(len(self.controllers)):
            start(c)
        while pending or self.pool.inflight or self.pool.queue:
            (ref,), _ = ray.wait(list(pending) + self.pool.refs(), num_returns=1)
            if ref in pending:
                c = pending.pop(ref)
                sampled(c) if "sample" in batch[c] else updated(c)
                continue
            got = self.pool.collect(ref)
            if got is not None:
                ledger.arrive(RayEvaluator.arrival(*got))
                ledger.result.measured += 1
                c = got[0].controller
                batch[c]["left"] -= 1
                if batch[c]["left"] == 0:
                    measured(c)
        ledger.result.wall_time_s = time.perf_counter() - t0


def distributed_search(
    learner: str | type[Learner],
    config: LearnerConfig | ReinforceConfig,
    prepared: PreparedGraph,
    spec: ClusterSpec,
    env_kind: str = "sim",
    *,
    controllers: int = 2,
    workers: int | None = None,
    gpus_per_worker: float = 0,
    cpus_per_worker: float = 0,
    policy_device: Literal["cpu", "cuda"] = "cpu",
    gpus_per_controller: float | None = None,
    async_updates: bool = False,
    ray_address: str | None = None,
    log_path: str | Path | None = None,
    env_options: dict | None = None,
    measure_delay_s: float = 0.0,
    max_attempts: int = 3,
    num_cpus: int | None = None,
    ray_temp_dir: str | Path | None = None,
    runtime_env: dict | None = None,
    start_timeout_s: float = 300.0,
    on_update: Callable[[dict], None] | None = None,
    on_start: Callable[[dict], None] | None = None,
    grouping: Grouping | None = None,
) -> SearchResult:
    """Search placements with any learner on Ray actors (2017 Sec. 3.4; module docstring).

    Args:
        learner: a method name (``rl``, ``post``, ...: :func:`resolve_learner`) or a
            :class:`placer.learner.Learner` subclass.
        config: an instance of the learner's ``Config``; ``config.budget`` counts placements
            over all controllers; ``config.seed`` seeds controller 0 and the server.
        prepared: the prepared graph (:func:`compgraph.prepare.prepare`); sent by object ref.
        spec: the cluster whose devices the placements use.
        env_kind: the workers' environment (``sim`` or ``real``).
        controllers: controller actors (the paper: up to 20).
        workers: worker actors, shared by the controllers, each measuring one placement at a
            time; ``None``: K per controller (the paper).
        gpus_per_worker: GPUs each worker asks Ray for (it sees only those; none when 0).
            ``env_kind="real"`` on a cluster with GPUs needs as many as the spec has GPUs.
        cpus_per_worker: CPUs each worker asks Ray for (0: packed regardless of CPUs).
        policy_device: where the controllers run the policy (``cuda`` needs the learner's
            ``to(device)`` and a GPU for each controller).
        gpus_per_controller: GPUs each controller asks for; ``None``: 1 with ``cuda``, else 0.
        async_updates: 2017's asynchronous updates (not reproducible); default: synchronous rounds.
        ray_address: ``None``: a local Ray on 127.0.0.1 (:func:`placer.ray_session.ray_session`; a Ray already
            initialised in this process is used as is); ``"auto"``, ``"ray://host:port"`` or
            ``"host:port"``: a running cluster (``ray start --head``).
        log_path: the placement log (JSON lines), each measurement appended as it arrives:
            ``index`` (the sample), ``placement``, ``step_time_s``, ``oom``, ``round``,
            ``controller``, ``worker``, ``attempt``; an existing log with the same settings is
            replayed by index (synchronous only).
        env_options: the environment's options (``engine``/``op_times`` for ``sim``; ``steps``,
            ``warmup``, ``soft_placement``, ``seed``, ``devices`` for ``real``).
        measure_delay_s: seconds each worker sleeps per measurement (a stand-in for real
            execution, for benchmarks and tests).
        max_attempts: tries of a placement whose workers die, and of a controller step.
        num_cpus, ray_temp_dir, runtime_env: of a local Ray / the Ray job (:func:`placer.ray_session.ray_session`;
            ``ray_temp_dir=None``: the log's folder).
        start_timeout_s: seconds to wait for all actors to start (e.g. for GPUs to be free).
        on_update: called with each learning-curve point, one per controller update.
        on_start: called once all actors are up with ``{"server", "controllers", "workers"}``
            (their Ray handles), e.g. to watch them.
        grouping: the units the learner places (``None``: ``prepared.grouping``); a learner that
            groups ops itself places the colocation units
            (:func:`compgraph.grouping.colocation_grouping`), as in-process.
    Returns:
        A :class:`placer.search.SearchResult`: ``step_times`` batch by batch in the order
        recorded (synchronous: sample-index order), one ``curve`` point per controller
        update; ``failing_signal`` the learner's (``failing_signal`` attribute; 0 if none);
        an extra attribute ``distributed``: ``{"controllers", "workers", "async_updates",
        "worker_retries" (placements measured again after a worker died), "controller_restarts"}``.
    Raises:
        ValueError: ``controllers`` or ``workers`` < 1, ``max_attempts`` < 1, a negative resource
            request, an unknown learner, ``env_kind`` or ``policy_device``, a ``policy_device``
            the learner cannot run on (its ``policy_devices``), a bad ``ray_address``,
            GPUs asked of a Ray cluster that has fewer, ``env_kind="real"`` on GPUs without
            ``gpus_per_worker``, an asynchronous search on a non-empty log or with a warm start
            (its start is placement 0 of synchronous rounds), a warm start without its ``init_ops``,
            a log written with other settings, or a logged placement that differs on replay.
        TypeError: a learner without a policy module that does not override ``policy_state``.
        ConnectionError: no Ray cluster at ``ray_address``.
        TimeoutError: the actors did not start within ``start_timeout_s``.
        RuntimeError: a placement or a controller step failed ``max_attempts`` times.
        Errors of the environments and learners, re-raised as their type.
    """
    from cluster.environment import ENVIRONMENTS
    from placer.search import PlacementLog, SearchLedger, SearchResult, search_loop

    learner_cls = resolve_learner(learner)
    if controllers < 1:
        raise ValueError(f"controllers: must be >= 1, got {controllers}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts: must be >= 1, got {max_attempts}")
    for name, value in (("gpus_per_worker", gpus_per_worker), ("cpus_per_worker", cpus_per_worker),
                        ("measure_delay_s", measure_delay_s)):
        if value < 0:
            raise ValueError(f"{name}: must be >= 0, got {value}")
    if policy_device not in ("cpu", "cuda"):
        raise ValueError(f"policy_device: {policy_device!r}; valid: cpu, cuda")
    problem = learner_cls.policy_device_problem(policy_device)
    if problem:
        raise ValueError(problem)
    if gpus_per_controller is None:
        gpus_per_controller = 1.0 if policy_device == "cuda" else 0.0
    if env_kind not in ENVIRONMENTS:
        raise ValueError(f"env_kind: unknown environment {env_kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    if env_kind == "real":
        from cluster.torch_real import is_torch_step

        # a PyTorch step runs its placed torch.fx code (cluster.torch_real), a TensorFlow graph its GraphDef
        if not is_torch_step(prepared) and prepared.__dict__.get("_graph_def") is None:  # without parsing it
            raise ValueError("env_kind 'real': needs the TensorFlow GraphDef of the graph (PreparedGraph.graph_def)")
        from cluster.torch_real import torch_devices

        # the spec's devices that run on a real GPU (cpu4's stand-in GPUs run on logical CPUs: tf_device)
        real_gpus = sum(1 for d in torch_devices(spec, (env_options or {}).get("devices")) if d.startswith("cuda"))
        if real_gpus and gpus_per_worker < real_gpus:
            raise ValueError(f"gpus_per_worker: {gpus_per_worker}, but env 'real' on cluster {spec.name!r} runs each "
                             f"placement on its {real_gpus} GPUs; ask for {real_gpus}")
    if ray_address is not None:
        check_ray_address(ray_address)
    env_options = dict(env_options or {})
    if grouping is not None:  # the learner's units: what controllers, server and workers see
        prepared = replace(prepared, grouping=grouping)
    pooled = learner_cls.pools
    from placer.warm import start_units

    # a warm start (placer.warm): placement 0, measured before any controller samples (search_loop)
    start = start_units(config, prepared.grouping, len(spec.devices), learner_cls.name)
    if start is not None and async_updates:
        init = getattr(config, "init", "?")
        raise ValueError(f"learner {learner_cls.name!r}: a warm start (init {init!r}) needs synchronous rounds (its "
                         "start is measured first); leave async_updates off")
    header = {
        "graph": prepared.graph.name,
        "groups": prepared.grouping.num_groups,
        "grouper": prepared.grouping.grouper,
        "cluster": spec.name,
        "environment": env_kind,
        "search": (search_settings := {"learner": learner_cls.name, **config.model_dump()}),
        "distributed": {"controllers": controllers, "workers": workers, "async_updates": async_updates},
    }
    log = PlacementLog(log_path, header) if log_path is not None else None
    if log is not None and async_updates and log.records:
        log.close()
        raise ValueError(
            f"placement log {log.path}: an asynchronous search cannot resume a log (its order is not reproducible)")
    try:
        temp_dir = ray_temp_dir
        if temp_dir is None and log_path is not None:
            temp_dir = Path(log_path).parent
        with ray_session(ray_address, num_cpus=num_cpus, temp_dir=temp_dir, runtime_env=runtime_env):
            import ray

            have = ray.cluster_resources().get("GPU", 0)
            for name, want in (("gpus_per_worker", gpus_per_worker), ("gpus_per_controller", gpus_per_controller)):
                if want > have:
                    raise ValueError(f"{name}: {want} GPUs asked, the Ray cluster has {have:g}"
                                     + (" (policy_device='cuda')" if name == "gpus_per_controller" else ""))
            actors = _start_actors(learner_cls, config, prepared, spec, env_kind, env_options, controllers, workers,
                                   gpus_per_worker, cpus_per_worker, policy_device, gpus_per_controller, pooled,
                                   measure_delay_s, max_attempts, start_timeout_s)
            try:
                if on_start is not None:
                    on_start({"server": actors["server"], "controllers": actors["controllers"],
                              "workers": actors["pool"].workers})
                result = SearchResult(None, None, failing_signal=float(actors["failing"] or 0.0),
                                      learner=learner_cls.name, settings=search_settings)
                ctl = RayControllers(actors, max_attempts, pooled)
                if async_updates:
                    ctl.run_async(SearchLedger(log, result), config.budget, on_update)
                else:
                    search_loop(ctl, RayEvaluator(actors["pool"]), config.budget, result, log, on_update=on_update,
                                grouping=prepared.grouping, start=start)
                result.distributed = {"controllers": controllers, "workers": len(actors["pool"].workers),
                                      "async_updates": async_updates, "worker_retries": actors["pool"].retried,
                                      "controller_restarts": ctl.controller_restarts,
                                      "server_restarts": ctl.server_restarts}
                return result
            finally:
                for a in actors["all"]:
                    ray.kill(a)
    finally:
        if log is not None:
            log.close()


def _start_actors(learner_cls, config, prepared, spec, env_kind, env_options, controllers, workers,
                  gpus_per_worker, cpus_per_worker, policy_device, gpus_per_controller, pooled,
                  measure_delay_s, max_attempts, start_timeout_s) -> dict:
    """Create the controllers, the server (from controller 0's initial parameters) and the
    workers, and wait until all are up."""
    import ray

    ref = ray.put(_light_prepared(prepared, env_kind))
    ctl_cls: Any = ray.remote(Controller).options(**actor_options("controller", gpus=gpus_per_controller))
    ctls = [ctl_cls.remote(learner_cls, config.model_copy(update={"seed": controller_seed(config.seed, c)}), ref,
                           spec, env_kind, env_options, policy_device, pooled) for c in range(controllers)]
    every: list[Any] = list(ctls)
    try:
        infos = _wait(ray, [c.info.remote() for c in ctls], start_timeout_s, "controllers", every)
        k = infos[0]["batch_size"]
        n_workers = workers if workers is not None else k * controllers
        srv_pooled = (learner_cls, config, ref, spec, env_kind, env_options) if pooled else ()
        server: Any = ray.remote(ParameterServer).options(**actor_options("server")).remote(infos[0]["params"], *srv_pooled)
        every.append(server)
        w_cls: Any = ray.remote(Worker).options(**actor_options("worker", gpus=gpus_per_worker, cpus=cpus_per_worker))
        ws = [w_cls.remote(ref, spec, env_kind, env_options, measure_delay_s) for _ in range(n_workers)]
        every += ws
        _wait(ray, [server.restore.remote(None), *(w.ready.remote() for w in ws), *(c.restore.remote(None) for c in ctls)],
              start_timeout_s, f"{n_workers} workers (num_gpus={gpus_per_worker}, num_cpus={cpus_per_worker} each)",
              every)
    except BaseException:
        for a in every:
            ray.kill(a)
        raise
    # "prepared" keeps the graph's object alive: restarting actors read their constructor arguments again
    return {"server": server, "controllers": ctls, "pool": _Pool(ws, max_attempts), "all": every,
            "failing": infos[0]["failing_signal"], "batch_size": k, "prepared": ref}


def _wait(ray, refs: list, timeout_s: float, what: str, every: list) -> list:
    done, waiting = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if waiting:
        raise TimeoutError(f"{len(waiting)} of {len(refs)} actor calls did not finish within start_timeout_s="
                           f"{timeout_s} ({what}); the cluster has {ray.cluster_resources()}")
    try:
        return ray_get(refs)
    except ray.exceptions.RayActorError as e:  # a constructor failed: Ray keeps only the message
        raise RuntimeError(f"an actor of the distributed search failed to start: {e}") from None
