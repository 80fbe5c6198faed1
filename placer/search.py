"""The one search loop every learner runs through, in-process and on Ray, its placement log and its result.

[`run_search`][placer.search.run_search] runs [`search_loop`][placer.search.search_loop], split as 2017 Sec. 3.4 splits the work: the
*controllers* ([`Controllers`][placer.search.Controllers]) sample placements and update the policy, an *evaluator*
([`Evaluator`][placer.search.Evaluator]) measures them. In-process, one learner is the controller
([`LocalController`][placer.search.LocalController]) and the environment the evaluator ([`EnvironmentEvaluator`][placer.search.EnvironmentEvaluator],
one ``measure_batch`` call where the environment has it); on Ray they are C controller actors
with a parameter server and a pool of worker actors ([`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]).
Either way the loop, each round: asks the controllers for their batches (``min(K, budget
left)`` each), replays the samples the placement log already holds (resume) and has the
evaluator measure the rest, appends each measurement to the placement log (JSON lines, fsynced)
*before* any learner sees it ([`SearchLedger`][placer.search.SearchLedger]), keeps the fastest, hands the batches'
times to the controllers' update, records the learning curve (best-so-far and sample mean
against placements and wall seconds, with each update's diagnostics: loss, entropy, KL,
baseline) and checkpoints a local learner (``torch.save`` of its
[`state_dict`][placer.learner.Learner.state_dict], read back with ``weights_only=True``; the search's
bookkeeping as JSON beside it). Asynchronous controllers (2017's mode on Ray,
[`AsyncControllers`][placer.search.AsyncControllers]) have no rounds: the loop goes batch by batch, each controller on its own.

Resume: with ``resume=True`` an existing log with the same settings is replayed: the learner
runs again from its seed (or from the last checkpoint, whose RNG states make the continuation
identical) and takes the logged measurements instead of measuring, so no placement is measured
twice and the result equals that of an uninterrupted search.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

import numpy as np

from cluster.environment import Environment, Measurement

if TYPE_CHECKING:
    from placer.learner import Learner, Samples


@dataclass
class SearchResult:
    """Outcome of a search.

    Attributes:
        best_placement: ``[num_units]`` device indices of the fastest placement sampled
            (``None`` if every sample ran out of memory); units = the groups of the
            environment the learner placed.
        best_step_time_s: its step time (seconds).
        step_times: ``[budget]`` step time of each sample (seconds), ``None`` for OOM.
        curve: one point per update: ``placements`` sampled so far, ``best_step_time_s``
            so far, ``sample_mean_step_time_s`` of the update's samples that ran.
        updates: one entry per update, aligned with ``curve``: ``placements``, ``wall_s``
            (seconds since the search started, summed over resumed runs) and the learner's
            diagnostics (``loss``, ``entropy``, ``kl``, ``baseline``, ...).
        failing_signal: the learner's OOM signal (reward or step time, learner-specific).
        best_op_placement: ``[num_ops]`` device of each op under ``best_placement``
            (``env.grouping.expand``), comparable across learners that place different
            groupings; ``None`` when there is no best or the grouping cannot expand.
        learner: the learner's name; ``settings``: its settings; ``wall_time_s``: seconds
            the search took (summed over resumed runs); ``measured``: placements measured
            by this run (the rest were replayed from the log); ``cpu_time_s``: CPU-seconds of this
            process in this run's search loop (sampling, measuring, updates, the placement log,
            checkpoints and ``on_update``; not the learner's construction, nor Ray's workers), so
            ``measured / cpu_time_s`` is the search's placements per CPU-second.
        distributed: a search on Ray ([`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]): ``controllers``,
            ``workers``, ``async_updates``, ``worker_retries``, ``controller_restarts``,
            ``server_restarts``; ``None`` in-process.
        start: a warm-started search's start ([`placer.warm`][placer.warm]), placement 0 of the search:
            ``{"step_time_s": seconds or None, "oom": bool}``; ``None`` without a warm start.
    """

    best_placement: np.ndarray | None
    best_step_time_s: float | None
    step_times: list[float | None] = field(default_factory=list)
    curve: list[dict] = field(default_factory=list)
    failing_signal: float = 0.0
    updates: list[dict] = field(default_factory=list)
    best_op_placement: np.ndarray | None = None
    learner: str = ""
    settings: dict = field(default_factory=dict)
    wall_time_s: float = 0.0
    measured: int = 0
    cpu_time_s: float = 0.0
    distributed: dict | None = None
    start: dict | None = None

    def record(self, placement, step_time_s: float | None) -> None:
        """Add one sample: its step time (seconds; ``None`` if it ran out of memory), keeping the fastest."""
        self.step_times.append(step_time_s)
        if step_time_s is not None and (self.best_step_time_s is None or step_time_s < self.best_step_time_s):
            self.best_step_time_s, self.best_placement = step_time_s, np.array(placement, dtype=np.int64)

    def curve_point(self, placements: int, ran_times: list[float]) -> dict:
        """A learning-curve point after ``placements`` samples; ``ran_times``: the update's samples that ran."""
        mean = float(np.mean(ran_times)) if ran_times else None
        return {"placements": placements, "best_step_time_s": self.best_step_time_s, "sample_mean_step_time_s": mean}

    def add_point(self, point: dict, on_update: Callable[[dict], None] | None = None, update: dict | None = None) -> None:
        """Append ``point`` to the curve and pass it to ``on_update``, with the policy update's
        diagnostics (``update``: loss, entropy, ..., ``wall_s``) under ``"update"`` when given
        (the curve itself keeps the point alone)."""
        self.curve.append(point)
        if on_update is not None:
            on_update(point if update is None else {**point, "update": update})

    def placements_to_within(self, fraction: float = 0.05) -> int | None:
        """Placements sampled until the best so far came within ``fraction`` of the final best
        (1-based count; ``None`` if nothing ran)."""
        if self.best_step_time_s is None:
            return None
        limit = self.best_step_time_s * (1 + fraction)
        best = None
        for i, t in enumerate(self.step_times):
            if t is not None and (best is None or t < best):
                best = t
            if best is not None and best <= limit:
                return i + 1
        return None

    def to_json(self) -> dict:
        """A JSON-able view (placements as lists)."""
        best = None if self.best_placement is None else [int(x) for x in self.best_placement]
        return {"learner": self.learner, "best_step_time_s": self.best_step_time_s, "best_placement": best,
                "step_times": self.step_times, "curve": self.curve, "updates": self.updates,
                "failing_signal": self.failing_signal, "wall_time_s": self.wall_time_s, "measured": self.measured,
                "cpu_time_s": self.cpu_time_s, "settings": self.settings, "start": self.start}


class PlacementLog:
    """Append-only JSON-lines log of a search's sampled placements and their measurements.

    The first line is a header with the search settings; each next line is
    ``{"index", "placement", "step_time_s", "oom"}``. Records are flushed and fsynced
    before the search uses them.

    Args:
        path: the log file.
        header: the settings; an existing log must have the same header.
        fresh: start a new log even if one exists (``False``: read and continue it).

    The log is locked (``flock`` on ``<log>.lock``, which holds the owner's pid) from opening to
    [`close`][placer.search.PlacementLog.close], so two runs with the same settings never write one log at their own offsets;
    the lock goes with the process, so a killed run leaves none behind.

    Raises:
        PlacementLogBusy: another process holds the log (names its pid).
        ValueError: an existing log was written with other settings (names the first that differs).
    """

    def __init__(self, path: str | Path, header: dict, fresh: bool = False) -> None:
        self.path = Path(path)
        self.records: list[dict] = []
        header = json.loads(json.dumps(header))  # as it reads back (tuples -> lists)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_log(self.path)
        try:
            self._open(header, fresh)
        except BaseException:
            self._lock.close()
            raise

    def _open(self, header: dict, fresh: bool) -> None:
        if not fresh and self.path.exists() and self.path.stat().st_size > 0:
            raw = self.path.read_bytes()
            lines = raw.split(b"\n")
            old = json.loads(lines[0])
            if old != header:
                diff = settings_difference(old, header)
                raise ValueError(f"placement log {self.path} was written with other settings: {diff}; resume with the "
                                 "log's settings, or run without --resume to start afresh")
            good_end = len(lines[0]) + 1  # bytes up to the end of the last complete record
            for line in lines[1:]:
                if not line.strip():
                    break
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn last line from an interrupted write
                good_end += len(line) + 1
            if good_end < len(raw):
                with self.path.open("r+b") as f:  # drop the torn tail so the next record starts on its own line
                    f.truncate(good_end)
            self._file = self.path.open("a")
        else:
            self._file = self.path.open("w")
            self._write([header])

    def _write(self, objs: list[dict]) -> None:
        self._file.write("".join(json.dumps(o) + "\n" for o in objs))
        self._file.flush()
        os.fsync(self._file.fileno())

    def append(self, record: dict) -> None:
        """Write one record (flushed and fsynced)."""
        self._write([record])

    def extend(self, records: list[dict]) -> None:
        """Write several records with one fsync."""
        if records:
            self._write(records)

    def close(self) -> None:
        """Close the log and release its lock."""
        self._file.close()
        self._lock.close()


class PlacementLogBusy(ValueError):
    """Another process is writing this placement log (one line naming the log and its pid)."""


def _lock_log(path: Path):
    """An open ``<path>.lock`` holding ``flock(LOCK_EX | LOCK_NB)`` and our pid.

    Raises:
        PlacementLogBusy: another process holds it.
    """
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    fh = open(lock_path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        owner = fh.read().strip() or "?"
        fh.close()
        raise PlacementLogBusy(_busy_message(path, owner)) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def _busy_message(path: Path, owner: str) -> str:
    return (f"placement log {path} is in use by another run (pid {owner}); wait for it to end, "
            "or give this run another --seed or --out-dir")


def placement_log_busy(path: str | Path) -> str | None:
    """Before a run starts: [`PlacementLogBusy`][placer.search.PlacementLogBusy]'s line if another process holds the lock of the
    placement log ``path`` now, else ``None``. Tries the lock and releases it at once; creates
    nothing (no lock file: nobody holds it)."""
    import fcntl

    path = Path(path)
    try:
        fh = open(path.with_name(path.name + ".lock"))
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _busy_message(path, fh.read().strip() or "?")
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def settings_difference(old: object, new: object, where: str = "") -> str:
    """The first setting that differs between two placement-log headers, as
    ``search.hidden_size: 256 in the log, 64 now`` (nested dicts walked in key order)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return settings_difference(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return "none"
    return f"{where or 'header'}: {json.dumps(old)[:100]} in the log, {json.dumps(new)[:100]} now"


def serial_time(env: Environment) -> float:
    """``T_serial`` (seconds): every op of ``env``'s graph run back to back on the slowest device.

    Uses the environment's op-time matrix (``env.simulator.op_times``) when it has one,
    else the roofline estimate of [`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix].
    """
    sim = getattr(env, "simulator", None)
    times = getattr(sim, "op_times", None)
    if times is None:
        from cluster.cost_model import op_time_matrix

        times = op_time_matrix(env.graph, env.spec)
    return float(np.asarray(times).sum(axis=0).max())


@dataclass
class Job:
    """One placement to measure: sample ``index`` of the search (0-based, over all controllers),
    ``[num_units]`` device indices, sampled by ``controller`` in ``round``; ``attempts``: workers
    that died measuring it (Ray)."""

    index: int
    placement: list[int]
    controller: int = 0
    round: int = 0
    attempts: int = 0


Arrived = Callable[[list[tuple[Job, Measurement, dict]]], None]
"""What an evaluator calls as measurements come in: ``(job, measurement, extra log fields)``."""


class Evaluator(Protocol):
    """The measuring side of a search: the environment in-process ([`EnvironmentEvaluator`][placer.search.EnvironmentEvaluator]),
    or a pool of Ray workers ([`placer.distributed.RayEvaluator`][placer.distributed.RayEvaluator]).

    Attributes:
        env: what it measures (``kind``, ``graph``, ``grouping``: the units, ``spec``), for the
            log's header and the best placement's ops.
    """

    env: Environment

    def measure(self, jobs: list[Job], arrived: Arrived) -> None:
        """Measure every job, passing each measurement to ``arrived`` as it comes in (in any
        order); returns when all are in.

        Raises:
            The environment's errors; RuntimeError: a placement could not be measured.
        """
        ...


@runtime_checkable
class Controllers(Protocol):
    """The update side of a search: one learner in-process ([`LocalController`][placer.search.LocalController]), or C Ray
    controllers and a parameter server ([`placer.distributed.RayControllers`][placer.distributed.RayControllers]).

    Attributes:
        name, settings: the learner's name and settings (the log header's ``search``).
        budget: placements in all, over every controller.
        start: the warm start, ``[num_units]`` device indices (``None``: none).
        asynchronous: the mode: ``False``, rounds ([`batch_sizes`][placer.search.Controllers.batch_sizes], [`sample`][placer.search.Controllers.sample],
            [`update`][placer.search.Controllers.update]); ``True``, each controller on its own ([`AsyncControllers`][placer.search.AsyncControllers]).
        header: what else the placement log's header holds (Ray: ``distributed``).
    """

    name: str
    settings: dict
    budget: int
    start: np.ndarray | None
    asynchronous: bool
    header: dict

    @property
    def failing_signal(self) -> float | None:
        """The learners' OOM signal (``None``: none)."""
        ...

    def batch_sizes(self, left: int) -> list[int]:
        """The batch of each controller this round, ``left`` placements of the budget left (each >= 1)."""
        ...

    def sample(self, ks: list[int]) -> list[Samples]:
        """One batch per controller, ``ks[c]`` placements each (``Samples.placements`` ``[k, num_units]``)."""
        ...

    def update(self, batches: list[Samples], times: list[np.ndarray], oom: list[np.ndarray]) -> list[dict | None]:
        """Update from the round's batches, ``times[c]`` ``[k]`` seconds (NaN: OOM) and ``oom[c]``
        ``[k]`` bool -> each controller's diagnostics."""
        ...

    def observe_start(self, step_time_s: float | None) -> None:
        """The start's measured step time (``None``: it did not run), before the first batch
        ([`placer.learner.Learner.observe_start`][placer.learner.Learner.observe_start])."""
        ...

    def state_dict(self) -> dict | None:
        """A checkpoint of the controllers, or ``None`` when they are not checkpointed (Ray)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Restore [`state_dict`][placer.search.Controllers.state_dict]."""
        ...

    def summary(self) -> dict | None:
        """The result's ``distributed`` entry (``None`` in-process)."""
        ...


@dataclass
class Event:
    """What asynchronous controllers wait for ([`AsyncControllers.next_event`][placer.search.AsyncControllers.next_event]): ``controller``
    ``"sampled"`` its batch (``samples``), one of its placements was ``"measured"`` (``arrived``:
    as an evaluator passes it on), or it ``"updated"`` (its ``diagnostics``)."""

    kind: Literal["sampled", "measured", "updated"]
    controller: int = 0
    samples: Samples | None = None
    arrived: list[tuple[Job, Measurement, dict]] = field(default_factory=list)
    diagnostics: dict | None = None


class AsyncControllers(Controllers, Protocol):
    """Controllers in the asynchronous mode (2017 Sec. 3.4): each of ``count`` controllers samples
    ``batch_size`` (K), has them measured and updates on its own; the search loop starts their
    steps and reacts to [`next_event`][placer.search.AsyncControllers.next_event] (`_each_on_its_own`)."""

    count: int
    batch_size: int

    def begin_sample(self, c: int, k: int) -> None:
        """Controller ``c`` starts sampling ``k`` placements (answered by a ``sampled`` event)."""
        ...

    def begin_update(self, c: int, times: np.ndarray, oom: np.ndarray) -> None:
        """Controller ``c`` starts its update from its batch's ``times`` ``[k]`` (NaN: OOM) and
        ``oom`` ``[k]`` (answered by an ``updated`` event)."""
        ...

    def next_event(self, evaluator) -> Event:
        """Wait for the next controller step or measurement of ``evaluator`` (which the
        controllers' mode pairs with: its ``submit(jobs)`` queues jobs without waiting)."""
        ...


class LocalController:
    """One learner, in this process: the controller of [`run_search`][placer.search.run_search] (synchronous rounds of
    one batch)."""

    asynchronous = False

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.name, self.settings = learner.name, json.loads(json.dumps(learner.settings()))
        self.budget, self.start = int(learner.config.budget), learner.start
        self.header: dict = {}

    @property
    def failing_signal(self) -> float | None:
        return self.learner.failing_signal

    def batch_sizes(self, left: int) -> list[int]:
        return [min(self.learner.batch_size, left)]

    def sample(self, ks: list[int]) -> list[Samples]:
        return [self.learner.sample(k) for k in ks]

    def update(self, batches, times, oom) -> list[dict | None]:
        return [self.learner.update(b, t, o) for b, t, o in zip(batches, times, oom)]

    def observe_start(self, step_time_s: float | None) -> None:
        self.learner.observe_start(step_time_s)

    def state_dict(self) -> dict | None:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state)

    def summary(self) -> dict | None:
        return None


class EnvironmentEvaluator:
    """The environment, in this process: one ``measure_batch`` call for the jobs where it has
    one (else ``measure`` each), all passed to ``arrived`` together (one log write)."""

    def __init__(self, env: Environment) -> None:
        self.env = env

    def measure(self, jobs: list[Job], arrived: Arrived) -> None:
        batch = np.asarray([j.placement for j in jobs], dtype=np.int64)
        if hasattr(self.env, "measure_batch") and len(jobs) > 1:
            ms = self.env.measure_batch(batch)
        else:
            ms = [self.env.measure(p) for p in batch]
        arrived([(j, m, log_fields(m)) for j, m in zip(jobs, ms)])


def log_fields(m: Measurement) -> dict:
    """What the placement log keeps of a measurement beside its step time and OOM flag: a real
    PyTorch measurement's spread, count, threads and failure ([`cluster.torch_real.TorchMeasurement.log_fields`][cluster.torch_real.TorchMeasurement.log_fields]);
    nothing for the others."""
    fields = getattr(m, "log_fields", None)
    return fields() if callable(fields) else {}


class SearchLedger:
    """The placement log and the result of one search: logged samples replayed by index, each
    arriving measurement logged (once per index) before anything else uses it, batches recorded
    in index order.

    Args:
        log: the placement log (``None``: none); its records with an ``index`` are replayed.
        result: the result the batches are recorded into.
    """

    def __init__(self, log: PlacementLog | None, result: SearchResult) -> None:
        self.log, self.result = log, result
        self.done: dict[int, tuple[list[int], Measurement]] = {}
        self.logged = {int(r["index"]): r for r in log.records} if log is not None else {}

    def replay(self, job: Job) -> bool:
        """Take the logged measurement of ``job``'s index (resume); False if there is none.

        Raises:
            ValueError: the logged placement differs from the one sampled (not the search that wrote the log).
        """
        rec = self.logged.get(job.index)
        if rec is None:
            return False
        if rec["placement"] != job.placement:
            where = self.log.path if self.log is not None else "placement log"
            raise ValueError(f"placement log {where}: sample {job.index} differs from the replayed search")
        self.done[job.index] = (job.placement, Measurement(step_time_s=rec["step_time_s"], oom=rec["oom"]))
        return True

    def arrive(self, items: list[tuple[Job, Measurement, dict]]) -> None:
        """Log measurements as they arrive (one write for the list).

        Raises:
            RuntimeError: a sample measured twice.
        """
        for job, m, _ in items:
            if job.index in self.done:
                raise RuntimeError(f"sample {job.index}: measured twice")
            self.done[job.index] = (job.placement, m)
        if self.log is not None:
            self.log.extend([{"index": job.index, "placement": job.placement, "step_time_s": m.step_time_s,
                              "oom": bool(m.oom), **extra} for job, m, extra in items])

    def record(self, indices) -> tuple[np.ndarray, np.ndarray, dict]:
        """Record a measured batch in index order -> ``(step times [k] (NaN: OOM), oom [k], curve point)``."""
        times, oom, ran = [], [], []
        for i in indices:
            placement, m = self.done[i]
            self.result.record(placement, m.step_time_s)
            times.append(np.nan if m.oom or m.step_time_s is None else float(m.step_time_s))
            oom.append(bool(m.oom))
            if m.step_time_s is not None:
                ran.append(m.step_time_s)
        point = self.result.curve_point(len(self.result.step_times), ran)
        return np.array(times, dtype=np.float64), np.array(oom, dtype=bool), point


def log_header(env: Environment, search: dict) -> dict:
    """The placement log's first line: graph, groups, grouper, cluster, environment and ``search`` settings."""
    return {"graph": env.graph.name, "groups": env.grouping.num_groups, "grouper": env.grouping.grouper,
            "cluster": env.spec.name, "environment": env.kind, "search": search}


def run_name(model: str, size: str, cluster: str, grouper: str, learner: str, seed: int, budget: int) -> str:
    """The file stem of a run's placement log and checkpoint, named by its settings (not the clock);
    each setting reduced to a safe path component ([`compgraph.paths.slug`][compgraph.paths.slug])."""
    from compgraph.paths import slug

    parts = [model, size, cluster, grouper or "none", learner, f"seed{seed}", f"budget{budget}"]
    return "-".join(slug(p) for p in parts)


def _save_checkpoint(path: Path, state: dict, book: dict) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"sampled": book["sampled"], "learner": state}, tmp)
    os.replace(tmp, path)
    jpath = path.with_suffix(".json")
    jtmp = jpath.with_name(jpath.name + ".tmp")
    jtmp.write_text(json.dumps(book))
    os.replace(jtmp, jpath)


def _load_checkpoint(path: Path, settings: dict, logged: int) -> tuple[dict, dict] | None:
    """The checkpoint's ``(learner state, bookkeeping)`` if it is whole, of these settings and
    covered by the log; else ``None`` (the search then replays from the start)."""
    import torch

    jpath = path.with_suffix(".json")
    if not (path.exists() and jpath.exists()):
        return None
    try:
        book = json.loads(jpath.read_text())
        state = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001  a torn or foreign file: replay from the start instead
        return None
    if book.get("settings") != settings or state.get("sampled") != book.get("sampled") or book["sampled"] > logged:
        return None
    return state["learner"], book


def run_search(
    learner: Learner | Controllers,
    env: Environment | Evaluator,
    log_path: str | Path | None = None,
    checkpoint_path: str | Path | None = None,
    resume: bool = False,
    on_update: Callable[[dict], None] | None = None,
    checkpoint_every_s: float = 30.0,
) -> SearchResult:
    """Run a search for its budget of placements ([`search_loop`][placer.search.search_loop]): in this process (a learner
    and its environment, [`LocalController`][placer.search.LocalController] and [`EnvironmentEvaluator`][placer.search.EnvironmentEvaluator]), or on Ray
    (the controllers and evaluator of [`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]).

    Args:
        learner: the learner (built on ``env``; its ``config.budget`` placements), or controllers
            ([`Controllers`][placer.search.Controllers], told apart by their protocol's members).
        env: the learner's measurement environment (its grouping's groups are the learner's
            units), or the controllers' evaluator.
        log_path: the placement log (JSON lines); ``None``: no log.
        checkpoint_path: the checkpoint (``.pt``; the bookkeeping goes to the same name
            with ``.json``); written at most every ``checkpoint_every_s`` seconds and at
            the end; ``None``: no checkpoint (controllers on Ray have none: their log is replayed).
        resume: continue from an existing log (and checkpoint) with the same settings;
            ``False``: start afresh, overwriting them.
        on_update: called with each learning-curve point, the update's diagnostics under ``"update"``.
        checkpoint_every_s: seconds between checkpoints (0: after every update).
    Returns:
        A [`SearchResult`][placer.search.SearchResult]; the same learner settings and seed give the same result,
        interrupted and resumed or not (``wall_s`` and ``wall_time_s`` aside), in-process or on
        Ray with one controller (synchronous). A warm-started learner's (``learner.start``) first
        placement is its start, so the result is never slower than the start.
    Raises:
        PlacementLogBusy: another process writes the log.
        ValueError: the log was written with other settings, its placements differ from
            the learner's (not the same search), or asynchronous controllers were asked to
            resume a log that has records.
    """
    if isinstance(learner, Controllers):  # controllers come with their evaluator (Ray's pair)
        controllers, evaluator = learner, cast(Evaluator, env)
    else:  # a learner with its environment (which may well have an ``env`` of its own: a wrapper)
        controllers, evaluator = LocalController(learner), EnvironmentEvaluator(cast(Environment, env))
    settings = controllers.settings
    header = {**log_header(evaluator.env, settings), **controllers.header}
    log = PlacementLog(log_path, header, fresh=not resume) if log_path is not None else None
    try:
        if log is not None and controllers.asynchronous and log.records:
            raise ValueError(f"placement log {log.path}: an asynchronous search cannot resume a log (its order is "
                             "not reproducible)")
        result = SearchResult(None, None, failing_signal=float(controllers.failing_signal or 0.0),
                              learner=controllers.name, settings=settings)
        cpu = time.process_time()
        search_loop(controllers, evaluator, result, log, checkpoint_path, resume, on_update, checkpoint_every_s)
        result.cpu_time_s = time.process_time() - cpu
        result.distributed = controllers.summary()
        return result
    finally:
        if log is not None:
            log.close()


def search_loop(
    controllers: Controllers,
    evaluator: Evaluator,
    result: SearchResult,
    log: PlacementLog | None = None,
    checkpoint_path: str | Path | None = None,
    resume: bool = False,
    on_update: Callable[[dict], None] | None = None,
    checkpoint_every_s: float = 30.0,
) -> SearchResult:
    """The search loop (module docstring) until ``controllers.budget`` placements are recorded: in
    rounds, or batch by batch for asynchronous controllers (`_each_on_its_own`).

    A warm start (``controllers.start``, [`placer.warm`][placer.warm]; in no paper) is placement 0: measured
    (or replayed) first, written to the log (marked ``"start": true``) and recorded before the
    controllers sample anything, its own learning-curve point; it is the incumbent, so the result
    is never slower than it. It counts in the budget and is not handed to the controllers' update.

    Args:
        controllers: sample and update ([`LocalController`][placer.search.LocalController], or Ray's).
        evaluator: measures ([`EnvironmentEvaluator`][placer.search.EnvironmentEvaluator], or Ray's worker pool); its
            ``env.grouping`` expands the best placement to ops (``best_op_placement``).
        result: the result to fill (its ``settings`` name the checkpoint's search).
        log: the open placement log (the caller closes it); its records are replayed by index.
        checkpoint_path, resume, checkpoint_every_s: as [`run_search`][placer.search.run_search] (only controllers
            whose ``state_dict`` is not ``None`` are checkpointed).
        on_update: called with each learning-curve point (one per controller batch), the
            update's diagnostics under ``"update"``.
    Returns:
        ``result``, filled.
    Raises:
        ValueError: a logged placement differs from the one sampled.
    """
    settings, budget, start = result.settings, controllers.budget, controllers.start
    ledger = SearchLedger(log, result)
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    sampled, wall_before, rnd = 0, 0.0, 0
    if ckpt is not None and not resume:  # a fresh search: an older checkpoint of these settings is stale
        ckpt.unlink(missing_ok=True)
        ckpt.with_suffix(".json").unlink(missing_ok=True)
    if ckpt is not None and resume and log is not None:
        loaded = _load_checkpoint(ckpt, settings, len(log.records))
        if loaded is not None:
            learner_state, book = loaded
            controllers.load_state_dict(learner_state)
            sampled, wall_before = book["sampled"], book["wall_time_s"]
            result.step_times, result.curve, result.updates = book["step_times"], book["curve"], book["updates"]
            result.best_step_time_s = book["best_step_time_s"]
            result.best_placement = None if book["best_placement"] is None else np.asarray(book["best_placement"], dtype=np.int64)
            result.start = book.get("start")
    began = time.perf_counter()
    last_ckpt = began
    if start is not None and sampled == 0:  # the warm start: placement 0, logged and recorded before anything else
        job = Job(0, [int(x) for x in start])
        if not ledger.replay(job):
            evaluator.measure([job], lambda items: ledger.arrive([(j, m, {**extra, "start": True})
                                                                   for j, m, extra in items]))
            result.measured += 1
        times, oom, point = ledger.record([0])
        result.start = {"step_time_s": None if oom[0] or np.isnan(times[0]) else float(times[0]), "oom": bool(oom[0])}
        controllers.observe_start(result.start["step_time_s"])  # the learner may keep it as its incumbent
        sampled = 1
        info = {"placements": 1, "wall_s": wall_before + time.perf_counter() - began, "start": 1.0}
        result.updates.append(info)
        result.add_point(point, on_update, info)
    if controllers.asynchronous:  # no rounds: every placement is recorded when the controllers are done
        _each_on_its_own(cast("AsyncControllers", controllers), evaluator, ledger, sampled, budget, on_update,
                         lambda: wall_before + time.perf_counter() - began)
        sampled = budget
    while sampled < budget:
        ks = controllers.batch_sizes(budget - sampled)
        batches = controllers.sample(ks)
        starts = [sampled + sum(ks[:c]) for c in range(len(ks))]
        jobs = [Job(starts[c] + i, row, c, rnd)  # tolist: the rows as lists of ints, at C speed
                for c, b in enumerate(batches) for i, row in enumerate(np.asarray(b.placements, dtype=np.int64).tolist())]
        todo = [job for job in jobs if not ledger.replay(job)]
        if todo:
            evaluator.measure(todo, ledger.arrive)
        result.measured += len(todo)
        recorded = [ledger.record(range(starts[c], starts[c] + k)) for c, k in enumerate(ks)]
        sampled += sum(ks)
        diagnostics = controllers.update(batches, [r[0] for r in recorded], [r[1] for r in recorded])
        wall = wall_before + time.perf_counter() - began
        for (_, _, point), diag in zip(recorded, diagnostics):
            _add_update(result, point, wall, diag, on_update)
        rnd += 1
        now = time.perf_counter()
        if ckpt is not None and (now - last_ckpt >= checkpoint_every_s or sampled >= budget):
            snapshot = controllers.state_dict()
            if snapshot is not None:
                _save_checkpoint(ckpt, snapshot, _book(result, sampled, wall_before + now - began, settings))
            last_ckpt = now
    result.failing_signal = float(controllers.failing_signal or 0.0)
    result.wall_time_s = wall_before + time.perf_counter() - began
    if result.best_placement is not None:
        result.best_op_placement = evaluator.env.grouping.expand(result.best_placement)
    return result


def _add_update(result: SearchResult, point: dict, wall: float, diag: dict | None, on_update) -> None:
    """Record an update: its curve point and diagnostics (floats, or ``None``), ``wall_s`` seconds in."""
    info = {"placements": point["placements"], "wall_s": wall}
    info.update({k: (None if v is None else float(v)) for k, v in (diag or {}).items()})
    result.updates.append(info)
    result.add_point(point, on_update, info)


def _each_on_its_own(controllers: AsyncControllers, evaluator, ledger: SearchLedger, allocated: int, budget: int,
                     on_update, wall: Callable[[], float]) -> None:
    """The asynchronous mode (2017 Sec. 3.4): each controller samples, has its batch measured and
    updates on its own, then samples again; the budget is allocated in sample-index order as
    controllers ask; each measurement is logged as it arrives, each batch recorded once it is all
    measured (in the order batches complete), each update is a curve point."""
    rounds = [0] * controllers.count
    live: dict[int, dict] = {}  # controller -> its batch in progress: first index, k, placements left to measure

    def begin(c: int) -> None:
        nonlocal allocated
        k = min(controllers.batch_size, budget - allocated)
        if k > 0:
            live[c] = {"start": allocated, "k": k}
            allocated += k
            controllers.begin_sample(c, k)

    def measured(c: int) -> None:
        b = live[c]
        times, oom, b["point"] = ledger.record(range(b["start"], b["start"] + b["k"]))
        controllers.begin_update(c, times, oom)

    for c in range(controllers.count):
        begin(c)
    while live:
        event = controllers.next_event(evaluator)
        c = event.controller
        if event.kind == "sampled":
            assert event.samples is not None
            b = live[c]
            jobs = [Job(b["start"] + i, row, c, rounds[c])
                    for i, row in enumerate(np.asarray(event.samples.placements, dtype=np.int64).tolist())]
            todo = [job for job in jobs if not ledger.replay(job)]
            b["left"] = len(todo)
            evaluator.submit(todo)
            if not todo:
                measured(c)
        elif event.kind == "measured":
            ledger.arrive(event.arrived)
            ledger.result.measured += len(event.arrived)
            for job, _, _ in event.arrived:
                live[job.controller]["left"] -= 1
                if live[job.controller]["left"] == 0:
                    measured(job.controller)
        else:
            _add_update(ledger.result, live.pop(c)["point"], wall(), event.diagnostics, on_update)
            rounds[c] += 1
            begin(c)


def _book(result: SearchResult, sampled: int, wall: float, settings: dict) -> dict:
    best = None if result.best_placement is None else [int(x) for x in result.best_placement]
    return {"settings": settings, "sampled": sampled, "wall_time_s": wall, "step_times": result.step_times,
            "curve": result.curve, "updates": result.updates, "best_step_time_s": result.best_step_time_s,
            "best_placement": best, "start": result.start}
