"""The 2017 distributed search on Ray: a parameter server, controllers and workers.

Mirhoseini et al. 2017, Sec. 3.4 (Fig. 3): one *parameter server* holds the placer's
parameters (:class:`placer.seq2seq.Seq2SeqPlacer`, Sec. 3.2) and its Adam optimizer;
``num_controllers`` *controllers* each pull the current parameters, sample K placements
(K in Eq. 3), send them to their K *workers* (one placement per worker), wait for all the
running times, and push the REINFORCE gradient of Eq. 3 to the parameter server. Each
controller keeps its own moving-average baseline ("it is more stable to let each
controller have its own baseline"). Each worker owns one measurement environment
(:func:`cluster.environment.make_environment`, simulated by default; ``"real"`` runs the
TensorFlow step) built from the prepared graph, which every actor receives by object ref.

The gradient is the one of :func:`placer.reinforce.reinforce_search`: the loss
``1/K * sum_i (R(P_i) - B) * log p(P_i)`` (minus the optional entropy bonus), ``R`` the
square root of the step time (seconds) or the *failing signal* for a placement that ran
out of memory, ``B`` initialised to the failing signal and updated as
``B <- decay * B + (1 - decay) * mean(R)`` after each of the controller's updates; after
``valid_only_after`` updates (counted over all controllers) only placements that ran
enter the loss, and a batch with none of them leaves the parameters unchanged.

**Synchronous rounds (default, reproducible).** A round: every controller samples from
the same parameter version with its own seeded ``torch.Generator`` (controller 0 with
``config.seed``, controller ``c > 0`` with a seed derived from ``(config.seed, c)``:
:func:`controller_seed`); their workers measure; every placement is appended to the
placement log (:class:`placer.reinforce.PlacementLog`) in the order (round, controller,
worker) *before* any gradient is computed; then the parameter server applies the
controllers' gradients one Adam step each, in controller order. The same seed and
settings give the same :class:`placer.reinforce.SearchResult`, and with
``num_controllers=1`` the same result as :func:`placer.reinforce.reinforce_search`
(identical sampling, loss, gradient and Adam steps). A re-run on an existing log with the
same settings replays the logged measurements (resume), as the in-process search does.

**Asynchronous (``asynchronous=True``, the paper's mode, not reproducible).** Each
controller loops on its own: pull whatever parameters the server holds, sample, measure,
push; the server applies each gradient on arrival (to parameters that may have moved
since the controller pulled them). The log is in completion order and the result
depends on timing, so it is not reproducible; ``valid_only_after`` counts the server's
updates at the controller's pull; such a log cannot be resumed.

The budget counts placements over all controllers: a round gives each controller, in
order, ``min(K, placements left)``.

Ray's transport serialises the actors' arguments (the prepared graph, parameters,
gradients) with pickle between this search's own processes; nothing is read from files
by unpickling.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

if TYPE_CHECKING:  # torch and the policy are imported lazily: worker processes never load torch
    from cluster.spec import ClusterSpec
    from compgraph.prepare import PreparedGraph
    from placer.reinforce import ReinforceConfig, SearchResult

#: Environment of a local Ray started by :func:`ray_session` (shared/notes/stack.md): no auth
#: token written to ~/.ray, listening on 127.0.0.1 only, no usage statistics.
LOCAL_RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}
#: Ray keeps unix sockets under its temp dir (``<dir>/ray-XXXXXXXX/session_<date>_<time>_<us>_<pid>/sockets/
#: plasma_store``), whose paths must stay within 107 bytes: longer parents fall back to the system temp folder.
_MAX_TEMP_DIR_CHARS = 30


# ----------------------------------------------------------------------------- Ray session


def check_ray_address(address: str) -> tuple[str, int] | None:
    """Validate ``address`` and return the ``(host, port)`` to probe (``None`` for ``"auto"``).

    Accepted: ``"auto"`` (the cluster this machine's ``ray start`` made, or ``RAY_ADDRESS``),
    ``"ray://host:port"`` (Ray Client, port 10001 by default) and ``"host:port"`` (the GCS
    address of a cluster this machine belongs to).

    Raises:
        ValueError: anything else (names ``ray_address`` and the value).
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"ray_address: {address!r} is not an address; use 'auto', 'ray://host:port' or 'host:port'")
    if address == "auto":
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if parts.scheme not in ("ray", "gcs") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"ray_address: {address!r} is not an address; use 'auto', 'ray://host:port' or 'host:port'")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is None and parts.scheme == "ray":
        port = 10001
    if port is None or not 0 < port < 65536:
        raise ValueError(f"ray_address: {address!r} has no valid port; use 'ray://host:port' or 'host:port'")
    return parts.hostname, port


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Set :data:`LOCAL_RAY_ENV` (inherited by the processes Ray starts meanwhile) and Ray's own
    flag for it: Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when imported, and with it
    off takes 127.0.0.1 as this node's address, so a local Ray's servers listen there only and a
    driver joins a cluster on 127.0.0.1 by that address. Restores both afterwards."""
    from ray._private import ray_constants

    saved = {k: os.environ.get(k) for k in LOCAL_RAY_ENV}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(LOCAL_RAY_ENV)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def ray_session(
    address: str | None = None,
    num_cpus: int | None = None,
    temp_dir: str | Path | None = None,
    runtime_env: dict | None = None,
    connect_timeout_s: float = 5.0,
) -> Iterator[bool]:
    """Run the body with Ray initialised in this process; yields True if this call initialised it
    (started a local Ray or connected to ``address``; it shuts it down or disconnects after).

    * ``address=None`` and Ray already initialised in this process (e.g. by a test
      fixture, or an outer ``ray_session``): the body uses it, nothing is shut down.
    * ``address=None`` otherwise: starts a local Ray with :data:`LOCAL_RAY_ENV` (listening
      on 127.0.0.1 only, no dashboard), ``num_cpus`` CPUs (``None``: all), its files under
      a fresh folder in ``temp_dir`` (``None`` or a path too long for Ray's unix sockets:
      the system temp folder; that folder is deleted afterwards), and shuts it down after.
    * ``address`` given (:func:`check_ray_address`): connects to that cluster and
      disconnects after. Its nodes must be able to import this project (install it there,
      or pass ``runtime_env={"working_dir": ...}``).

    Ray's start takes ~2-5 s and ~1 GB of memory over about a dozen processes on a 2-core machine.

    Raises:
        ValueError: a malformed ``address``.
        ConnectionError: nothing answers at ``address`` within ``connect_timeout_s`` seconds,
            or Ray cannot connect to it (the message names the address).
        RuntimeError: an ``address`` given while Ray is already initialised in this process.
    """
    import ray

    if address is None and ray.is_initialized():
        yield False
        return
    if address is not None:
        target = check_ray_address(address)
        if target is not None:
            host, port = target
            try:
                socket.create_connection((host, port), timeout=connect_timeout_s).close()
            except OSError as e:
                raise ConnectionError(
                    f"ray_address {address!r}: nothing answers at {host}:{port} ({e}); start a cluster "
                    "(`ray start --head`) or pass ray_address=None for a local Ray"
                ) from e
        if ray.is_initialized():
            raise RuntimeError(
                f"ray_address {address!r}: Ray is already initialised in this process; call ray.shutdown() first "
                "or pass ray_address=None to use the running Ray"
            )
        loopback = target is not None and (target[0] == "localhost" or target[0].startswith("127."))
        try:
            with _loopback_only() if loopback else contextlib.nullcontext():
                ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING")
        except Exception as e:  # ConnectionError, RuntimeError, gRPC errors: all mean "cannot connect"
            raise ConnectionError(f"ray_address {address!r}: cannot connect to a Ray cluster: {e}") from e
        try:
            yield True
        finally:
            ray.shutdown()
        return
    parent = Path(temp_dir).resolve() if temp_dir is not None else None
    if parent is None or len(str(parent)) > _MAX_TEMP_DIR_CHARS:
        parent = Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="ray-", dir=parent)
    with _loopback_only():
        ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=folder, runtime_env=runtime_env,
                 logging_level="WARNING")
    try:
        yield True
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def _get(refs):
    """``ray.get`` that re-raises an actor's exception as an instance of its own type (e.g.
    ``ValueError``; Ray's ``as_instanceof_cause``), the remote traceback in its message."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        raise e.as_instanceof_cause() from None


# ----------------------------------------------------------------------------- actors


def controller_seed(seed: int, controller: int) -> int:
    """Seed of controller ``controller``'s sampling generator: ``seed`` for controller 0 (so one
    controller samples as :func:`placer.reinforce.reinforce_search` does), else a 63-bit
    value derived from ``(seed, controller)`` by ``numpy.random.SeedSequence``."""
    if controller == 0:
        return int(seed)
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, controller]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


def _policy(prepared: PreparedGraph, num_devices: int, hidden_size: int):
    from placer.features import group_features
    from placer.seq2seq import Seq2SeqPlacer

    return Seq2SeqPlacer(group_features(prepared.graph, prepared.grouping), num_devices, hidden_size=hidden_size)


class ParameterServer:
    """Holds the placer's parameters and its Adam optimizer (2017 Sec. 3.4); a Ray actor.

    Initialised exactly as :func:`placer.reinforce.reinforce_search` initialises its
    policy (``torch.manual_seed(config.seed)``, then the placer, then Adam), so one
    controller reproduces the in-process search.

    Args:
        prepared: the prepared graph (its grouping fixes the groups).
        num_devices: D.
        config: :meth:`placer.reinforce.ReinforceConfig.model_dump` of the search.
    """

    def __init__(self, prepared: PreparedGraph, num_devices: int, config: dict) -> None:
        import torch

        torch.manual_seed(config["seed"])
        self.policy = _policy(prepared, num_devices, config["hidden_size"])
        self.params = list(self.policy.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=config["learning_rate"])
        self.version = 0

    def get_params(self) -> tuple[int, list[np.ndarray]]:
        """``(version, parameters)``: the number of gradients applied so far and each parameter
        (float32 arrays, in ``policy.parameters()`` order)."""
        return self.version, [p.detach().numpy().copy() for p in self.params]

    def apply(self, *gradients: list[np.ndarray | None] | None) -> int:
        """Apply each gradient, in the order given, as one Adam step; returns the new version.

        A gradient is a list of arrays (``None`` for a parameter without gradient) in
        :meth:`get_params` order; ``None`` instead of a list (a batch with nothing to learn
        from) is skipped, as the in-process search skips its step.

        Raises:
            ValueError: a gradient with the wrong number or shapes of arrays.
        """
        import torch

        for grad in gradients:
            if grad is None:
                continue
            if len(grad) != len(self.params):
                raise ValueError(f"gradient: {len(grad)} arrays, the placer has {len(self.params)} parameters")
            self.optimizer.zero_grad()
            for p, g in zip(self.params, grad):
                if g is not None:
                    if tuple(g.shape) != tuple(p.shape):
                        raise ValueError(f"gradient: shape {tuple(g.shape)} for a parameter of shape {tuple(p.shape)}")
                    p.grad = torch.from_numpy(np.array(g, dtype=np.float32))
            self.optimizer.step()
            self.version += 1
        return self.version


class Worker:
    """Owns one measurement environment and measures the placements its controller sends; a Ray actor.

    Args:
        prepared: the prepared graph (the GraphDef is needed for ``env_kind="real"`` only).
        spec: the cluster.
        env_kind: ``sim`` or ``real`` (:func:`cluster.environment.make_environment`).
        env_options: passed to the environment.

    The environment is built by :meth:`ready` (which raises
    :func:`cluster.environment.make_environment`'s ``ValueError`` for an unknown kind or bad options).
    """

    def __init__(self, prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict) -> None:
        self._args = (prepared, spec, env_kind, env_options)
        self.env = None

    def ready(self) -> bool:
        """Build the environment (here, not in ``__init__``, so that its errors reach the caller
        as their own type rather than as Ray's ``ActorDiedError``); returns True."""
        from cluster.environment import make_environment

        if self.env is None:
            prepared, spec, env_kind, env_options = self._args
            graph_def = prepared.graph_def if env_kind == "real" else None
            self.env = make_environment(env_kind, prepared.graph, prepared.grouping, spec, graph_def,
                                        prepared.fetches, **env_options)
            self._args = None
        return True

    def measure(self, placements: list[list[int]]) -> list[dict]:
        """Measure each ``[num_groups]`` placement in turn -> ``{"step_time_s", "oom"}`` each
        (seconds, ``None`` if out of memory).

        Raises:
            ValueError and the environment's errors (e.g. :class:`cluster.real.PlacementError`).
        """
        self.ready()
        rows = np.asarray(placements, dtype=np.int64)
        if len(rows) > 1 and hasattr(self.env, "measure_batch"):
            ms = self.env.measure_batch(rows)
        else:
            ms = [self.env.measure(row) for row in rows]
        return [{"step_time_s": m.step_time_s, "oom": bool(m.oom)} for m in ms]


class Controller:
    """Samples K placements from the server's parameters, has its workers measure them, and
    computes the REINFORCE gradient (Eq. 3) with its own baseline; a Ray actor.

    Args:
        index: the controller's number (0-based).
        prepared, num_devices: the graph and D, to build the placer.
        config: :meth:`placer.reinforce.ReinforceConfig.model_dump` of the search.
        failing_signal: R of an OOM placement; also the baseline's initial value.
        seed: its sampling generator's seed (:func:`controller_seed`).
        server: the :class:`ParameterServer` actor.
        workers: its :class:`Worker` actors; placement ``i`` of a batch goes to worker ``i % len(workers)``.
    """

    def __init__(self, index: int, prepared: PreparedGraph, num_devices: int, config: dict, failing_signal: float,
                 seed: int, server, workers: list) -> None:
        import torch

        self.index, self.config, self.failing = index, config, float(failing_signal)
        self.baseline = self.failing
        self.generator = torch.Generator().manual_seed(int(seed))
        self.policy = _policy(prepared, num_devices, config["hidden_size"])
        self.params = list(self.policy.parameters())
        self.server, self.workers = server, list(workers)
        self._batch = None
        self.version = 0

    def ready(self) -> bool:
        """True once built."""
        return True

    def sample_and_measure(self, k: int, replay: list[dict | None] | None = None) -> dict:
        """Pull the parameters, sample ``k`` placements, have them measured (or replayed).

        Args:
            k: placements to sample.
            replay: optional ``[k]`` log records (``None`` where not logged): a logged
                placement is not measured again, its logged measurement is used.
        Returns:
            ``{"version", "placements" [k][num_groups], "measurements" [k] {"step_time_s",
            "oom"}, "workers" [k], "replayed" [k] bool}``.
        Raises:
            ValueError: a logged placement differs from the one sampled.
        """
        import torch

        version, values = _get(self.server.get_params.remote())
        with torch.no_grad():
            for p, v in zip(self.params, values):
                p.copy_(torch.tensor(v))  # a copy: Ray's arrays are read-only
        self.version = version
        placements, logp, ent = self.policy(k, generator=self.generator)
        rows = placements.numpy().tolist()
        replay = replay or [None] * k
        workers = [i % len(self.workers) for i in range(k)]
        measurements: list[dict | None] = [None] * k
        for i, rec in enumerate(replay):
            if rec is not None:
                if rec["placement"] != rows[i]:
                    raise ValueError(f"placement log: sample {rec.get('index')} differs from the replayed search")
                measurements[i] = {"step_time_s": rec["step_time_s"], "oom": rec["oom"]}
        todo: dict[int, list[int]] = {}
        for i in range(k):
            if measurements[i] is None:
                todo.setdefault(workers[i], []).append(i)
        refs = {w: self.workers[w].measure.remote([rows[i] for i in idx]) for w, idx in todo.items()}
        for w, got in zip(refs, _get(list(refs.values()))):
            for i, m in zip(todo[w], got):
                measurements[i] = m
        self._batch = (logp, ent, measurements)
        return {"version": version, "placements": rows, "measurements": measurements, "workers": workers,
                "replayed": [rec is not None for rec in replay]}

    def gradient(self, update: int | None = None) -> list[np.ndarray | None] | None:
        """Eq. 3's gradient of the last batch (the loss of :func:`placer.reinforce.reinforce_search`),
        then the baseline update. Call after the batch's placements are logged.

        Args:
            update: the number of updates before this one, over all controllers (decides
                ``valid_only_after``); ``None``: the server's version at the pull.
        Returns:
            Per parameter its gradient array (``None`` if it got none), or ``None`` when the
            batch has nothing to learn from (no placement ran after ``valid_only_after``).
        Raises:
            RuntimeError: no batch sampled since the last call.
        """
        from placer.reinforce import batch_advantage, reinforce_loss

        if self._batch is None:
            raise RuntimeError(f"controller {self.index}: gradient() before sample_and_measure()")
        logp, ent, measurements = self._batch
        self._batch = None
        cfg = self.config
        update = self.version if update is None else update
        rewards = [self.failing if m["oom"] else math.sqrt(m["step_time_s"]) for m in measurements]
        ran = [not m["oom"] for m in measurements]
        r, mask, adv = batch_advantage(rewards, ran, self.baseline, update, cfg["valid_only_after"],
                                       cfg["normalize_advantage"])
        grads = None
        if adv is not None:
            loss = reinforce_loss(adv, logp, ent, mask, cfg["entropy_coef"])
            self.policy.zero_grad(set_to_none=True)
            loss.backward()
            grads = [None if p.grad is None else p.grad.numpy().copy() for p in self.params]
        decay = cfg["baseline_decay"]
        self.baseline = decay * self.baseline + (1 - decay) * float(r.mean())
        return grads


# ----------------------------------------------------------------------------- the search


def _light_prepared(prepared: PreparedGraph, env_kind: str) -> PreparedGraph:
    """A copy for the actors: the GraphDef as protobuf bytes (``real``) or dropped (``sim``),
    so that unpacking it does not import TensorFlow where it is not needed."""
    if env_kind != "real":
        return replace(prepared, graph_def=None)
    value = prepared.__dict__.get("_graph_def")
    if value is not None and not isinstance(value, bytes):
        value = value.SerializeToString()
    return replace(prepared, graph_def=value)


def _failing_signal(prepared: PreparedGraph, spec: ClusterSpec, env_kind: str, env_options: dict) -> float:
    """:func:`placer.reinforce.default_failing_signal` of the environment the workers build."""
    from types import SimpleNamespace

    from cluster.environment import make_environment
    from placer.reinforce import default_failing_signal

    if env_kind == "sim":
        env = make_environment("sim", prepared.graph, prepared.grouping, spec, **env_options)
    else:  # a real environment has no simulator: T_serial from the cost model, as in-process
        env = SimpleNamespace(graph=prepared.graph, spec=spec)
    return default_failing_signal(env)


def distributed_reinforce_search(
    prepared: PreparedGraph,
    spec: ClusterSpec,
    config: ReinforceConfig,
    num_controllers: int = 2,
    workers_per_controller: int | None = None,
    env_kind: str = "sim",
    ray_address: str | None = None,
    log_path: str | Path | None = None,
    *,
    asynchronous: bool = False,
    env_options: dict | None = None,
    num_gpus_per_worker: float = 0,
    num_cpus_per_worker: float = 0,
    num_cpus: int | None = None,
    ray_temp_dir: str | Path | None = None,
    runtime_env: dict | None = None,
    start_timeout_s: float = 300.0,
    on_update: Callable[[dict], None] | None = None,
) -> SearchResult:
    """The 2017 search distributed over Ray actors (Sec. 3.4; module docstring).

    Args:
        prepared: the prepared graph (:func:`compgraph.prepare.prepare`); sent to the actors by object ref.
        spec: the cluster whose devices the placements use.
        config: the search settings (:class:`placer.reinforce.ReinforceConfig`); ``config.k``
            is K, the placements each controller samples per update; ``config.budget`` counts
            placements over all controllers.
        num_controllers: controllers (the paper: up to 20).
        workers_per_controller: worker actors per controller; ``None``: K (one placement
            per worker, the paper); fewer: placement ``i`` goes to worker ``i % W``.
        env_kind: ``sim`` (default) or ``real`` (each worker runs the TensorFlow step).
        ray_address: ``None``: a local Ray (:func:`ray_session`; an already initialised Ray
            in this process is used as is); ``"auto"``, ``"ray://host:port"`` or
            ``"host:port"``: an existing cluster.
        log_path: the placement log (JSON lines); an existing log with the same settings is
            replayed (synchronous mode only). Records carry ``index``, ``placement``,
            ``step_time_s``, ``oom``, ``round``, ``controller``, ``worker``.
        asynchronous: the paper's asynchronous updates (not reproducible).
        env_options: passed to each worker's environment (``engine``/``op_times`` for
            ``sim``; ``steps``, ``warmup``, ``soft_placement``, ``seed``, ``devices`` for ``real``).
        num_gpus_per_worker: GPUs each worker actor requests. Ray makes only those visible
            to the worker (none when 0), so a ``real`` run on GPUs needs as many as the
            spec has GPUs; workers that share a machine's GPUs would distort each other's times.
        num_cpus_per_worker: CPUs each worker requests (0: workers are packed regardless of CPUs).
        num_cpus: CPUs of a local Ray (``None``: all of the machine's).
        ray_temp_dir: where a local Ray keeps its files (a fresh sub-folder, deleted after;
            ``None``: the log's folder; the system temp folder when there is no log or the
            path is too long for Ray's unix sockets, :func:`ray_session`).
        runtime_env: Ray runtime environment (e.g. ``{"working_dir": "."}`` for a remote cluster).
        start_timeout_s: seconds to wait for all actors to start (e.g. for GPUs to be free).
        on_update: called with each learning-curve point, one per controller update.
    Returns:
        A :class:`placer.reinforce.SearchResult`: ``step_times`` in log order (round,
        controller, worker), one ``curve`` point per controller update in the same order.
        Synchronous: the same seed and settings give the same result; with one controller,
        that of :func:`placer.reinforce.reinforce_search`.
    Raises:
        ValueError: ``num_controllers`` < 1, ``workers_per_controller`` < 1 or > K, a
            negative resource request, an unknown ``env_kind``, a bad ``ray_address``, an
            asynchronous search on a non-empty log, a log written with other settings, or a
            logged placement that differs on replay.
        ConnectionError: no Ray cluster at ``ray_address``.
        TimeoutError: the actors did not start within ``start_timeout_s`` (e.g. not enough GPUs).
        Errors of the environments (e.g. :class:`cluster.real.PlacementError`), re-raised as their type.
    """
    if config.ppo_epochs or config.grad_clip is not None:
        raise ValueError(
            f"ppo_epochs={config.ppo_epochs}, grad_clip={config.grad_clip}: the distributed search runs the 2017 "
            "REINFORCE update only; use the in-process search for the PPO option"
        )
    from cluster.environment import ENVIRONMENTS
    from placer.reinforce import PlacementLog, SearchResult

    if num_controllers < 1:
        raise ValueError(f"num_controllers: must be >= 1, got {num_controllers}")
    k_max = config.k
    workers = k_max if workers_per_controller is None else workers_per_controller
    if workers < 1 or workers > k_max:
        raise ValueError(
            f"workers_per_controller: must be 1..k={k_max} (one placement per worker at most), got {workers}")
    if num_gpus_per_worker < 0:
        raise ValueError(f"num_gpus_per_worker: must be >= 0, got {num_gpus_per_worker}")
    if num_cpus_per_worker < 0:
        raise ValueError(f"num_cpus_per_worker: must be >= 0, got {num_cpus_per_worker}")
    if env_kind not in ENVIRONMENTS:
        raise ValueError(f"env_kind: unknown environment {env_kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    if env_kind == "real" and prepared.__dict__.get("_graph_def") is None:  # without parsing it
        raise ValueError("env_kind 'real': needs the TensorFlow GraphDef of the graph (PreparedGraph.graph_def)")
    if ray_address is not None:
        check_ray_address(ray_address)
    env_options = dict(env_options or {})
    failing = config.failing_signal if config.failing_signal is not None else _failing_signal(
        prepared, spec, env_kind, env_options)
    header = {
        "graph": prepared.graph.name,
        "groups": prepared.grouping.num_groups,
        "grouper": prepared.grouping.grouper,
        "cluster": spec.name,
        "environment": env_kind,
        "search": config.model_dump(),
        "distributed": {"num_controllers": num_controllers, "workers_per_controller": workers,
                        "asynchronous": asynchronous},
    }
    log = PlacementLog(log_path, header) if log_path is not None else None
    if log is not None and asynchronous and log.records:
        log.close()
        raise ValueError(
            f"placement log {log.path}: an asynchronous search cannot resume a log (its order is not reproducible)")
    try:
        temp_dir = ray_temp_dir
        if temp_dir is None and log_path is not None:
            temp_dir = Path(log_path).parent
        with ray_session(ray_address, num_cpus=num_cpus, temp_dir=temp_dir, runtime_env=runtime_env):
            actors = _start_actors(prepared, spec, config, failing, num_controllers, workers, env_kind, env_options,
                                   num_gpus_per_worker, num_cpus_per_worker, start_timeout_s)
            try:
                run = _run_async if asynchronous else _run_sync
                return run(actors, config, failing, log, on_update, SearchResult)
            finally:
                import ray

                for a in actors["all"]:
                    ray.kill(a)
    finally:
        if log is not None:
            log.close()


def _start_actors(prepared, spec, config, failing, num_controllers, workers, env_kind, env_options,
                  num_gpus_per_worker, num_cpus_per_worker, start_timeout_s) -> dict:
    """Create the server, the controllers and their workers, and wait until all are up."""
    import ray

    cfg = config.model_dump()
    num_devices = len(spec.devices)
    ref = ray.put(_light_prepared(prepared, env_kind))
    server = ray.remote(ParameterServer).options(num_cpus=0).remote(ref, num_devices, cfg)
    worker_cls = ray.remote(Worker).options(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)
    groups = [[worker_cls.remote(ref, spec, env_kind, env_options) for _ in range(workers)]
              for _ in range(num_controllers)]
    controllers = [
        ray.remote(Controller).options(num_cpus=0).remote(
            c, ref, num_devices, cfg, failing, controller_seed(config.seed, c), server, groups[c])
        for c in range(num_controllers)
    ]
    every = [server, *controllers, *(w for g in groups for w in g)]
    pending = [a.ready.remote() for a in every[1:]]
    pending.append(server.get_params.remote())
    done, waiting = ray.wait(pending, num_returns=len(pending), timeout=start_timeout_s)
    if waiting:
        for a in every:
            ray.kill(a)
        raise TimeoutError(
            f"{len(waiting)} of {len(pending)} actors did not start within start_timeout_s={start_timeout_s}: "
            f"{num_controllers * workers} workers requested num_gpus={num_gpus_per_worker}, "
            f"num_cpus={num_cpus_per_worker} each; the cluster has {ray.cluster_resources()}"
        )
    try:
        try:
            _get(done)  # re-raise an environment's error (e.g. bad env_options) as its own type
        except ray.exceptions.RayActorError as e:  # a constructor failed: Ray keeps only the message
            raise RuntimeError(f"an actor of the distributed search failed to start: {e}") from None
    except BaseException:
        for a in every:
            ray.kill(a)
        raise
    return {"server": server, "controllers": controllers, "all": every}


class _Tally:
    """The search's result and log, filled in log order."""

    def __init__(self, result, log) -> None:
        self.result, self.log, self.sampled = result, log, 0

    def add(self, out: dict, round_: int, controller: int) -> dict:
        """Log (unless replayed) and record one controller batch; returns its curve point."""
        times = []
        for row, m, w, replayed in zip(out["placements"], out["measurements"], out["workers"], out["replayed"]):
            if self.log is not None and not replayed:
                self.log.append({"index": self.sampled, "placement": row, "step_time_s": m["step_time_s"],
                                 "oom": m["oom"], "round": round_, "controller": controller, "worker": w})
            self.result.record(row, m["step_time_s"])
            if m["step_time_s"] is not None:
                times.append(m["step_time_s"])
            self.sampled += 1
        return self.result.curve_point(self.sampled, times)

    def replay(self, start: int, k: int) -> list[dict | None] | None:
        """The logged records of samples ``start .. start + k - 1`` (``None`` where not logged)."""
        if self.log is None or start >= len(self.log.records):
            return None
        recs = self.log.records[start: start + k]
        return recs + [None] * (k - len(recs))


def _run_sync(actors, config, failing, log, on_update, result_cls):
    """Synchronous rounds: sample from one version, measure, log in order, apply in controller order."""
    server, controllers = actors["server"], actors["controllers"]
    tally = _Tally(result_cls(None, None, failing_signal=failing), log)
    updates = round_ = 0
    while tally.sampled < config.budget:
        ks, left = [], config.budget - tally.sampled
        for _ in controllers:
            k = min(config.k, left - sum(ks))
            if k <= 0:
                break
            ks.append(k)
        starts = [tally.sampled + sum(ks[:c]) for c in range(len(ks))]
        replays = [tally.replay(start, k) for start, k in zip(starts, ks)]
        outs = _get([controllers[c].sample_and_measure.remote(k, replays[c]) for c, k in enumerate(ks)])
        points = [tally.add(out, round_, c) for c, out in enumerate(outs)]  # logged before any gradient
        grads = [controllers[c].gradient.remote(updates + c) for c in range(len(ks))]
        _get(server.apply.remote(*grads))
        for point in points:
            tally.result.add_point(point, on_update)
        updates += len(ks)
        round_ += 1
    return tally.result


def _run_async(actors, config, failing, log, on_update, result_cls):
    """The paper's asynchronous updates: each controller samples, is logged, and pushes on its own."""
    import ray

    server, controllers = actors["server"], actors["controllers"]
    tally = _Tally(result_cls(None, None, failing_signal=failing), log)
    allocated = 0
    rounds = [0] * len(controllers)
    pending: dict = {}

    def submit(c: int) -> None:
        nonlocal allocated
        k = min(config.k, config.budget - allocated)
        if k > 0:
            allocated += k
            pending[controllers[c].sample_and_measure.remote(k)] = c

    for c in range(len(controllers)):
        submit(c)
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        c = pending.pop(ref)
        point = tally.add(_get(ref), rounds[c], c)  # logged before the gradient
        _get(server.apply.remote(controllers[c].gradient.remote(None)))
        rounds[c] += 1
        tally.result.add_point(point, on_update)
        submit(c)
    return tally.result
