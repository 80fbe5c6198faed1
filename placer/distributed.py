"""Every learner distributed on Ray: a parameter server, controllers and workers (2017 Sec. 3.4).

Mirhoseini et al. 2017, Sec. 3.4 (Fig. 3): a *parameter server* holds the policy's
parameters; each of several *controllers* pulls them, samples K placements, has *workers*
measure them (one placement per worker at a time), updates from the running times with its
own baseline ("it is more stable to let each controller have its own baseline"), and pushes
the result to the parameter server.

Here any [`placer.learner.Learner`][placer.learner.Learner] is distributed through its contract: each
controller (a Ray actor, [`placer.actors`][placer.actors]) holds a learner instance and calls its
``sample`` and ``update`` (so it keeps its own baseline, optimizer state and sampling
generator); the server holds only the policy's parameters ([`placer.actors.policy_state`][placer.actors.policy_state]);
a pool of worker actors, each with its own measurement environment, measures placements one at
a time; the driver (this process) dispatches placements to free workers, appends each
measurement to the run's placement log ([`placer.search.PlacementLog`][placer.search.PlacementLog]) the moment it
arrives, and only then gives the batch's times to its controller.

The search is the one search of [`placer.search`][placer.search]: [`ray_controllers`][placer.distributed.ray_controllers] starts the actors
and yields [`RayControllers`][placer.distributed.RayControllers] (the update side: the controller actors and the server) and
[`RayEvaluator`][placer.distributed.RayEvaluator] (the measuring side: the worker pool), which
[`placer.search.run_search`][placer.search.run_search] drives where the in-process search has the learner and the
environment; so the placement log, replay, curve and per-update diagnostics are the same code.
The experiment's one search task ([`tasks.search.learner_search`][tasks.search.learner_search]) does exactly that::

    with ray_controllers("rl", config, prepared, spec, "sim", RaySettings(controllers=2)) as (ctl, ev):
        result = run_search(ctl, ev, log_path, resume=True)

A controller pushes its learner's new parameters (synchronous) or the change it made to
the parameters it pulled (asynchronous). Controller ``c`` samples with seed
[`controller_seed`][placer.distributed.controller_seed] ``(config.seed, c)``; controller 0 with ``config.seed``.

**Synchronous rounds (default, reproducible).** A round: every controller pulls the same
parameters and samples ``min(K, placements left)``; the workers measure all of them; the
batches are recorded in sample-index order; every controller updates; the server's new
parameters are controller 0's new parameters plus every other controller's change
(``new_c - pulled``) -- with one controller exactly controller 0's, so one controller gives
the in-process search's result for the same seed (``run_search(learner, env)``). The same seed
and settings give the same [`placer.search.SearchResult`][placer.search.SearchResult] whatever the timing, and a
re-run on an existing log with the same settings replays the logged measurements by sample
index (resume).

**Asynchronous (``async_updates=True``, 2017's mode, not reproducible).** A mode of the
controllers (``RayControllers.asynchronous``) that the same search loop drives batch by batch
([`placer.search.search_loop`][placer.search.search_loop]): each controller goes on on its own -- pull whatever the
server holds, sample, measure, update, push its change, which the server adds on arrival (the
parameters may have moved meanwhile). The budget is allocated in sample-index order as
controllers ask; such a log cannot be resumed.

**The learner contract** ([`placer.learner.Learner`][placer.learner.Learner], each with a default): the
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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from placer.actors import (
    Controller,
    ControllerRestarted,
    EnvironmentView,
    ParameterServer,
    ServerRestarted,
    Worker,
    WorkerPool,
)
from placer.ray_session import actor_options, check_ray_address, ray_get, ray_session
from placer.search import Event, Job

if TYPE_CHECKING:  # torch and the learners are imported lazily: worker processes never load torch
    from cluster.environment import Measurement
    from cluster.spec import ClusterSpec
    from compgraph.ir import Grouping
    from compgraph.prepare import PreparedGraph
    from placer.learner import Learner, LearnerConfig, Samples


def controller_seed(seed: int, controller: int) -> int:
    """Seed of controller ``controller``'s sampling generator: ``seed`` for controller 0 (so one
    controller samples as the in-process search does), else a 63-bit value derived from
    ``(seed, controller)`` by ``numpy.random.SeedSequence``."""
    if controller == 0:
        return int(seed)
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, controller]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


def resolve_learner(learner: str | type[Learner]) -> type[Learner]:
    """The learner class of a method name ([`placer.learner.LEARNERS`][placer.learner.LEARNERS]) or the class itself.

    Raises:
        ValueError: an unknown name (lists the valid ones).
    """
    if isinstance(learner, type):
        return learner
    from placer import LEARNERS

    if learner not in LEARNERS:
        raise ValueError(f"learner: unknown learner {learner!r}; valid: {', '.join(sorted(LEARNERS))}")
    return LEARNERS[learner]


@dataclass(frozen=True)
class RaySettings:
    """How a search runs on Ray ([`ray_controllers`][placer.distributed.ray_controllers]); the experiment's ``ray`` section
    ([`tasks.config.RayOptions`][tasks.config.RayOptions]) gives the first seven.

    Attributes:
        controllers: controller actors (the paper: up to 20; >= 1).
        workers: worker actors, shared by the controllers, each measuring one placement at a
            time; ``None``: K per controller (the paper).
        gpus_per_worker: GPUs each worker asks Ray for (it sees only those; none when 0).
            ``env_kind="real"`` on a cluster with GPUs needs as many as the spec has GPUs.
        policy_device: where the controllers run the policy (``cuda`` needs the learner's
            ``to(device)`` and a GPU for each controller).
        async_updates: 2017's asynchronous updates (not reproducible); default: synchronous rounds.
        address: ``None``: a local Ray on 127.0.0.1 ([`placer.ray_session.ray_session`][placer.ray_session.ray_session]; a Ray
            already initialised in this process is used as is); ``"auto"``, ``"ray://host:port"`` or
            ``"host:port"``: a running cluster (``ray start --head``).
        temp_dir: a local Ray's files go under it (``None``: the system temp folder).
        cpus_per_worker: CPUs each worker asks Ray for (0: packed regardless of CPUs).
        gpus_per_controller: GPUs each controller asks for; ``None``: 1 with ``cuda``, else 0.
        measure_delay_s: seconds each worker sleeps per measurement (a stand-in for real
            execution, for benchmarks and tests).
        max_attempts: tries of a placement whose workers die, of a controller step and of a server call.
        num_cpus, runtime_env: of a local Ray / the Ray job ([`placer.ray_session.ray_session`][placer.ray_session.ray_session]).
        start_timeout_s: seconds to wait for all actors to start (e.g. for GPUs to be free).
        on_start: called once all actors are up with ``{"server", "controllers", "workers"}``
            (their Ray handles), e.g. to watch them.
    """

    controllers: int = 2
    workers: int | None = None
    gpus_per_worker: float = 0
    policy_device: Literal["cpu", "cuda"] = "cpu"
    async_updates: bool = False
    address: str | None = None
    temp_dir: str | Path | None = None
    cpus_per_worker: float = 0
    gpus_per_controller: float | None = None
    measure_delay_s: float = 0.0
    max_attempts: int = 3
    num_cpus: int | None = None
    runtime_env: dict | None = None
    start_timeout_s: float = 300.0
    on_start: Callable[[dict], None] | None = None

    def controller_gpus(self) -> float:
        """GPUs each controller asks for: ``gpus_per_controller``, else 1 with ``cuda``, else 0."""
        if self.gpus_per_controller is not None:
            return self.gpus_per_controller
        return 1.0 if self.policy_device == "cuda" else 0.0

    def log_header(self) -> dict:
        """What the placement log's header says of the search on Ray ([`placer.search.log_header`][placer.search.log_header])."""
        return {"distributed": {"controllers": self.controllers, "workers": self.workers,
                                "async_updates": self.async_updates}}


def _check(learner_cls: type[Learner], settings: RaySettings, prepared: PreparedGraph, spec: ClusterSpec,
           env_kind: str, env_options: dict) -> None:
    """Refuse bad settings before Ray starts ([`ray_controllers`][placer.distributed.ray_controllers]' ``ValueError`` list)."""
    from cluster.environment import ENVIRONMENTS

    if settings.controllers < 1:
        raise ValueError(f"controllers: must be >= 1, got {settings.controllers}")
    if settings.workers is not None and settings.workers < 1:
        raise ValueError(f"workers: must be >= 1, got {settings.workers}")
    if settings.max_attempts < 1:
        raise ValueError(f"max_attempts: must be >= 1, got {settings.max_attempts}")
    for name in ("gpus_per_worker", "cpus_per_worker", "measure_delay_s"):
        if getattr(settings, name) < 0:
            raise ValueError(f"{name}: must be >= 0, got {getattr(settings, name)}")
    if settings.policy_device not in ("cpu", "cuda"):
        raise ValueError(f"policy_device: {settings.policy_device!r}; valid: cpu, cuda")
    problem = learner_cls.policy_device_problem(settings.policy_device)
    if problem:
        raise ValueError(problem)
    if env_kind not in ENVIRONMENTS:
        raise ValueError(f"env_kind: unknown environment {env_kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    if env_kind == "real":
        from cluster.torch_real import is_torch_step, torch_devices

        # a PyTorch step runs its placed torch.fx code (cluster.torch_real), a TensorFlow graph its GraphDef
        if not is_torch_step(prepared) and prepared.__dict__.get("_graph_def") is None:  # without parsing it
            raise ValueError("env_kind 'real': needs the TensorFlow GraphDef of the graph (PreparedGraph.graph_def)")
        # the spec's devices that run on a real GPU (cpu4's stand-in GPUs run on logical CPUs: tf_device)
        real_gpus = sum(1 for d in torch_devices(spec, env_options.get("devices")) if d.startswith("cuda"))
        if real_gpus and settings.gpus_per_worker < real_gpus:
            raise ValueError(f"gpus_per_worker: {settings.gpus_per_worker}, but env 'real' on cluster {spec.name!r} "
                             f"runs each placement on its {real_gpus} GPUs; ask for {real_gpus}")
    if settings.address is not None:
        check_ray_address(settings.address)


@contextmanager
def ray_controllers(
    learner: str | type[Learner],
    config: LearnerConfig,
    prepared: PreparedGraph,
    spec: ClusterSpec,
    env_kind: str = "sim",
    settings: RaySettings | None = None,
    *,
    env_options: dict | None = None,
    grouping: Grouping | None = None,
) -> Iterator[tuple[RayControllers, RayEvaluator]]:
    """Start a search's actors on Ray (module docstring) and yield ``(controllers, evaluator)`` for
    [`placer.search.run_search`][placer.search.run_search]; the actors are killed when the body ends (a local Ray this
    call started is shut down).

    Args:
        learner: a method name (``rl``, ``post``, ...: [`resolve_learner`][placer.distributed.resolve_learner]) or a
            [`placer.learner.Learner`][placer.learner.Learner] subclass.
        config: an instance of the learner's ``Config``; ``config.budget`` counts placements
            over all controllers; ``config.seed`` seeds controller 0 and the server.
        prepared: the prepared graph ([`compgraph.prepare.prepare`][compgraph.prepare.prepare]); sent by object ref.
        spec: the cluster whose devices the placements use.
        env_kind: the workers' environment (``sim``, ``real`` or ``grappler``).
        settings: controllers, workers, resources, mode, Ray address ([`RaySettings`][placer.distributed.RaySettings];
            ``None``: its defaults).
        env_options: the environment's options (``engine``/``op_times`` for ``sim``; ``steps``,
            ``warmup``, ``soft_placement``, ``seed``, ``devices`` for ``real``).
        grouping: the units the learner places (``None``: ``prepared.grouping``); a learner that
            groups ops itself places the colocation units
            ([`compgraph.grouping.colocation_grouping`][compgraph.grouping.colocation_grouping]), as in-process.
    Yields:
        [`RayControllers`][placer.distributed.RayControllers] and [`RayEvaluator`][placer.distributed.RayEvaluator]. ``run_search`` with them logs each
        measurement as it arrives with ``round``, ``controller``, ``worker`` and ``attempt``
        beside ``index``, ``placement``, ``step_time_s``, ``oom``, under a header with a
        ``distributed`` entry; its result's ``distributed`` holds ``controllers``, ``workers``,
        ``async_updates``, ``worker_retries`` (placements measured again after a worker died),
        ``controller_restarts`` and ``server_restarts``.
    Raises:
        ValueError: ``controllers`` or ``workers`` < 1, ``max_attempts`` < 1, a negative resource
            request, an unknown learner, ``env_kind`` or ``policy_device``, a ``policy_device``
            the learner cannot run on (its ``policy_devices``), a bad ``address``,
            GPUs asked of a Ray cluster that has fewer, ``env_kind="real"`` on GPUs without
            ``gpus_per_worker``, an asynchronous search with a warm start (its start is placement
            0 of synchronous rounds), a warm start without its ``init_ops``, the named option
            ``restart_after`` given (its restarts are a single search's; a warm variant's default
            ``restart_after`` is left out on Ray: [`tasks.search.learner_config`][tasks.search.learner_config]), or
            ``layer_descent`` above 0 given (its descent and restart are a single search's; a warm
            variant's default is left out on Ray as ``restart_after``'s).
        TypeError: a learner without a policy module that does not override ``policy_state``.
        ConnectionError: no Ray cluster at ``address``.
        TimeoutError: the actors did not start within ``start_timeout_s``.
        RuntimeError: an actor failed to start.
        Errors of the environments and learners, re-raised as their type.
    """
    from placer.warm import start_units

    settings = settings or RaySettings()
    learner_cls = resolve_learner(learner)
    env_options = dict(env_options or {})
    _check(learner_cls, settings, prepared, spec, env_kind, env_options)
    if getattr(config, "restart_after", None) is not None:
        if "restart_after" in config.model_fields_set:
            raise ValueError(f"restart_after: {config.restart_after} ({learner_cls.name}) restarts a policy on the "  # type: ignore[attr-defined]
                             "incumbent of its own search; on Ray each controller has its own incumbent and the "
                             "server merges their policies; leave restart_after unset, or run the search without Ray")
        config = config.model_copy(update={"restart_after": None})  # a warm variant's default: no restarts on Ray
    if getattr(config, "layer_descent", 0):
        if "layer_descent" not in config.model_fields_set:  # a warm variant's default: no descent on Ray
            config = config.model_copy(update={"layer_descent": 0.0})
        else:
            raise ValueError(f"layer_descent: {config.layer_descent:g} ({learner_cls.name}) descends from the incumbent of "  # type: ignore[attr-defined]
                             "its own search and restarts the policy there; on Ray each controller has its own "
                             "incumbent and the server merges their policies; leave layer_descent at 0, or run the "
                             "search without Ray")
    if grouping is not None:  # the learner's units: what controllers, server and workers see
        prepared = replace(prepared, grouping=grouping)
    # a warm start (placer.warm): placement 0, measured before any controller samples (search_loop)
    start = start_units(config, prepared.grouping, len(spec.devices), learner_cls.name)
    if start is not None and settings.async_updates:
        init = getattr(config, "init", "?")
        raise ValueError(f"learner {learner_cls.name!r}: a warm start (init {init!r}) needs synchronous rounds (its "
                         "start is measured first); leave async_updates off")
    with ray_session(settings.address, num_cpus=settings.num_cpus, temp_dir=settings.temp_dir,
                     runtime_env=settings.runtime_env):
        import ray

        have = ray.cluster_resources().get("GPU", 0)
        for name, want in (("gpus_per_worker", settings.gpus_per_worker),
                           ("gpus_per_controller", settings.controller_gpus())):
            if want > have:
                raise ValueError(f"{name}: {want} GPUs asked, the Ray cluster has {have:g}"
                                 + (" (policy_device='cuda')" if name == "gpus_per_controller" else ""))
        actors = _start_actors(learner_cls, config, prepared, spec, env_kind, env_options, settings)
        try:
            if settings.on_start is not None:
                settings.on_start({"server": actors["server"], "controllers": actors["controllers"],
                                   "workers": actors["pool"].workers})
            controllers = RayControllers(actors, learner_cls, config, settings, start)
            yield controllers, RayEvaluator(actors["pool"], EnvironmentView(env_kind, prepared.graph,
                                                                            prepared.grouping, spec))
        finally:
            for a in actors["all"]:
                ray.kill(a)


class RayEvaluator:
    """The measuring side on Ray ([`placer.search.Evaluator`][placer.search.Evaluator]): the worker pool, each
    measurement passed on the moment it arrives, with its ``round``, ``controller``, ``worker``
    and ``attempt`` for the log.

    Args:
        pool: the workers.
        env: what they measure (kind, graph, units, cluster), for the log's header.
    """

    def __init__(self, pool: WorkerPool, env: EnvironmentView) -> None:
        self.pool, self.env = pool, env

    @staticmethod
    def arrival(job: Job, worker: int, m: dict) -> list[tuple[Job, Measurement, dict]]:
        """A worker's measurement as what [`measure`][placer.distributed.RayEvaluator.measure] passes on."""
        from cluster.environment import Measurement

        return [(job, Measurement(step_time_s=m["step_time_s"], oom=bool(m["oom"])),
                 {"round": job.round, "controller": job.controller, "worker": worker, "attempt": job.attempts})]

    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` for the workers without waiting (the asynchronous mode: their
        measurements come back through [`RayControllers.next_event`][placer.distributed.RayControllers.next_event])."""
        for job in jobs:
            self.pool.submit(job)

    def measure(self, jobs: list[Job], arrived) -> None:
        """Measure every job on the workers; blocks until all are in."""
        import ray

        self.submit(jobs)
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
    """The update side on Ray ([`placer.search.Controllers`][placer.search.Controllers]): the controller actors and the
    parameter server, driven from this process by [`placer.search.search_loop`][placer.search.search_loop], with their
    fault recovery (module docstring). Two modes (``asynchronous``): synchronous rounds
    ([`batch_sizes`][placer.distributed.RayControllers.batch_sizes], [`sample`][placer.distributed.RayControllers.sample], [`update`][placer.distributed.RayControllers.update]), or 2017's asynchronous updates, one
    controller at a time ([`placer.search.AsyncControllers`][placer.search.AsyncControllers]: [`begin_sample`][placer.distributed.RayControllers.begin_sample],
    [`begin_update`][placer.distributed.RayControllers.begin_update], [`next_event`][placer.distributed.RayControllers.next_event]).

    Args:
        actors: `_start_actors`' dict.
        learner_cls, config: the learner and its settings (the log's ``search``, the budget).
        settings: the Ray settings (``async_updates``: the mode; ``max_attempts``: tries of a
            controller step or a server call).
        start: the warm start, ``[num_units]`` device indices (``None``: none).

    Attributes:
        controller_restarts, server_restarts: faults recovered from so far.
    """

    def __init__(self, actors: dict, learner_cls: type[Learner], config: LearnerConfig, settings: RaySettings,
                 start: np.ndarray | None = None) -> None:
        self.server, self.controllers, self.pool = actors["server"], actors["controllers"], actors["pool"]
        self.k, self.max_attempts, self.pooled = actors["batch_size"], settings.max_attempts, learner_cls.pools
        self.failing_signal = actors["failing"]
        self.name, self.settings = learner_cls.name, {"learner": learner_cls.name, **config.model_dump()}
        self.budget, self.start, self.asynchronous = int(config.budget), start, settings.async_updates
        self.header = settings.log_header()
        self.states: list = [None] * len(self.controllers)  # ref of each learner's state after its last update
        self.controller_restarts = 0
        self.server_restarts = 0
        self.server_state = None  # the server's state after the last completed round (None: its initial one)
        self._round: tuple = ()  # (pulled, samples) of the round in progress
        self._batches: dict[int, dict] = {}  # asynchronous: controller -> its batch in progress
        self._pending: dict = {}  # asynchronous: ref of a sample or update call -> controller

    @property
    def count(self) -> int:
        """The controllers."""
        return len(self.controllers)

    @property
    def batch_size(self) -> int:
        """K: each controller's batch."""
        return self.k

    def summary(self) -> dict:
        """The result's ``distributed``: the settings, the workers started, the faults recovered from."""
        return {"controllers": self.count, "workers": len(self.pool.workers), "async_updates": self.asynchronous,
                "worker_retries": self.pool.retried, "controller_restarts": self.controller_restarts,
                "server_restarts": self.server_restarts}

    def _server(self, method: str, *args):
        """``server.<method>(*args)``, waited for; if the server died (or Ray restarted it), it is
        revived, restored to [`server_state`][placer.distributed.RayControllers.server_state] (the state after the last completed round or
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

    def observe_start(self, step_time_s: float | None) -> None:
        """Not forwarded to the controller actors: on Ray a learner's incumbent (``scope_moves``)
        starts at its first measured batch, not at the start."""

    def state_dict(self) -> dict | None:
        """``None``: a search on Ray is not checkpointed (resume replays its log)."""
        return None

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError("a search on Ray has no checkpoint")

    # -- the asynchronous mode: one controller at a time (placer.search.search_loop drives it) --

    def begin_sample(self, c: int, k: int) -> None:
        """Controller ``c`` pulls whatever the server holds and starts sampling ``k`` placements."""
        pulled = self._pull()
        self._batches[c] = {"k": k, "pulled": pulled}
        self._pending[self.controllers[c].sample.remote(k, pulled)] = c

    def begin_update(self, c: int, times: np.ndarray, oom: np.ndarray) -> None:
        """Controller ``c`` starts its update from its batch's measured times (it pushes a change)."""
        b = self._batches[c]
        b["times"], b["oom"] = times.tolist(), oom.tolist()
        b["update"] = self.controllers[c].update.options(num_returns=3).remote(b["times"], b["oom"], True)
        self._pending[b["update"][0]] = c

    def next_event(self, evaluator: RayEvaluator) -> Event:
        """Wait for the next sample, measurement or update (whichever comes first). An update is
        pushed to the server (added, then the pooled step) before it is passed on.

        Raises:
            RuntimeError: a controller step, server call or placement failed ``max_attempts`` times.
        """
        import ray

        from placer.learner import Samples

        while True:
            (ref,), _ = ray.wait(list(self._pending) + evaluator.pool.refs(), num_returns=1)
            if ref in self._pending:
                c = self._pending.pop(ref)
                b = self._batches[c]
                if "update" not in b:
                    out = self.sample_one(c, b["k"], b["pulled"], ref)
                    b.update(placements=out["placements"], log_prob=out["log_prob"])
                    return Event("sampled", c, samples=Samples(np.asarray(out["placements"], dtype=np.int64),
                                                               np.asarray(out["log_prob"], dtype=np.float64)))
                del self._batches[c]
                diag, new = self.update_one(c, b["k"], b["pulled"], b["placements"], b["times"], b["oom"], True,
                                            b["update"])
                self._server("add", new)
                if self.pooled:
                    self._server("pooled", {"placements": b["placements"], "log_prob": b["log_prob"],
                                            "step_times_s": b["times"], "oom": b["oom"]})
                self._snapshot()
                return Event("updated", c, diagnostics=diag)
            got = evaluator.pool.collect(ref)
            if got is not None:
                return Event("measured", got[0].controller, arrived=RayEvaluator.arrival(*got))


def _start_actors(learner_cls, config, prepared, spec, env_kind, env_options, settings: RaySettings) -> dict:
    """Create the controllers, the server (from controller 0's initial parameters) and the
    workers, and wait until all are up."""
    import ray

    controllers, pooled, start_timeout_s = settings.controllers, learner_cls.pools, settings.start_timeout_s
    gpus_per_worker, cpus_per_worker = settings.gpus_per_worker, settings.cpus_per_worker

    ref = ray.put(_light_prepared(prepared, env_kind))
    ctl_cls: Any = ray.remote(Controller).options(**actor_options("controller", gpus=settings.controller_gpus()))
    ctls = [ctl_cls.remote(learner_cls, config.model_copy(update={"seed": controller_seed(config.seed, c)}), ref,
                           spec, env_kind, env_options, settings.policy_device, pooled) for c in range(controllers)]
    every: list[Any] = list(ctls)
    try:
        infos = _wait(ray, [c.info.remote() for c in ctls], start_timeout_s, "controllers", every)
        k = infos[0]["batch_size"]
        n_workers = settings.workers if settings.workers is not None else k * controllers
        srv_pooled = (learner_cls, config, ref, spec, env_kind, env_options) if pooled else ()
        server: Any = ray.remote(ParameterServer).options(**actor_options("server")).remote(infos[0]["params"], *srv_pooled)
        every.append(server)
        w_cls: Any = ray.remote(Worker).options(**actor_options("worker", gpus=gpus_per_worker, cpus=cpus_per_worker))
        ws = [w_cls.remote(ref, spec, env_kind, env_options, settings.measure_delay_s) for _ in range(n_workers)]
        every += ws
        _wait(ray, [server.restore.remote(None), *(w.ready.remote() for w in ws), *(c.restore.remote(None) for c in ctls)],
              start_timeout_s, f"{n_workers} workers (num_gpus={gpus_per_worker}, num_cpus={cpus_per_worker} each)",
              every)
    except BaseException:
        for a in every:
            ray.kill(a)
        raise
    # "prepared" keeps the graph's object alive: restarting actors read their constructor arguments again
    return {"server": server, "controllers": ctls, "pool": WorkerPool(ws, settings.max_attempts), "all": every,
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
