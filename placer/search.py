"""The one search loop every learner runs through, its placement log and its result.

:func:`run_search` asks a :class:`placer.learner.Learner` for ``min(K, budget left)``
placements, measures each through the :class:`cluster.environment.Environment` (one
``measure_batch`` call where the environment has it), appends each measurement to the
placement log (JSON lines, fsynced) *before* the learner sees it, keeps the fastest,
records the learning curve (best-so-far and sample mean against placements and wall
seconds, with the learner's per-update diagnostics: loss, entropy, KL, baseline) and
checkpoints the learner (``torch.save`` of its :meth:`~placer.learner.Learner.state_dict`,
read back with ``weights_only=True``; the search's bookkeeping as JSON beside it).

Resume: with ``resume=True`` an existing log with the same settings is replayed: the
learner runs again from its seed (or from the last checkpoint, whose RNG states make the
continuation identical) and takes the logged measurements instead of measuring, so no
placement is measured twice and the result equals that of an uninterrupted search.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cluster.environment import Environment, Measurement

if TYPE_CHECKING:
    from placer.learner import Learner


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
            by this run (the rest were replayed from the log).
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

    def record(self, placement, step_time_s: float | None) -> None:
        """Add one sample: its step time (seconds; ``None`` if it ran out of memory), keeping the fastest."""
        self.step_times.append(step_time_s)
        if step_time_s is not None and (self.best_step_time_s is None or step_time_s < self.best_step_time_s):
            self.best_step_time_s, self.best_placement = step_time_s, np.array(placement, dtype=np.int64)

    def curve_point(self, placements: int, ran_times: list[float]) -> dict:
        """A learning-curve point after ``placements`` samples; ``ran_times``: the update's samples that ran."""
        return {
            "placements": placements,
            "best_step_time_s": self.best_step_time_s,
            "sample_mean_step_time_s": float(np.mean(ran_times)) if ran_times else None,
        }

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
        return {
            "learner": self.learner,
            "best_step_time_s": self.best_step_time_s,
            "best_placement": None if self.best_placement is None else [int(x) for x in self.best_placement],
            "step_times": self.step_times,
            "curve": self.curve,
            "updates": self.updates,
            "failing_signal": self.failing_signal,
            "wall_time_s": self.wall_time_s,
            "measured": self.measured,
            "settings": self.settings,
        }


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
    :meth:`close`, so two runs with the same settings never write one log at their own offsets;
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
        raise PlacementLogBusy(f"placement log {path} is in use by another run (pid {owner}); wait for it to end, "
                               "or give this run another --seed or --out-dir") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


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
    else the roofline estimate of :func:`cluster.cost_model.op_time_matrix`.
    """
    sim = getattr(env, "simulator", None)
    times = getattr(sim, "op_times", None)
    if times is None:
        from cluster.cost_model import op_time_matrix

        times = op_time_matrix(env.graph, env.spec)
    return float(np.asarray(times).sum(axis=0).max())


def measure_or_replay(env: Environment, placements: np.ndarray, start: int, log: PlacementLog | None) -> list[Measurement]:
    """Measurements of ``placements`` (``[K, num_units]``), samples ``start .. start + K - 1`` of a search.

    Samples already in ``log`` are replayed (the logged placement must equal the sampled
    one); the others are measured (one ``env.measure_batch`` call where the environment
    has it) and appended to the log before this returns.

    Raises:
        ValueError: a logged placement differs from the one sampled (the search is not the
            one that wrote the log).
    """
    rows = [[int(x) for x in p] for p in placements]
    out: list[Measurement | None] = [None] * len(rows)
    todo = []
    for j, row in enumerate(rows):
        i = start + j
        if log is not None and i < len(log.records):
            rec = log.records[i]
            if rec["placement"] != row:
                raise ValueError(f"placement log {log.path}: sample {i} differs from the replayed search")
            out[j] = Measurement(step_time_s=rec["step_time_s"], oom=rec["oom"])
        else:
            todo.append(j)
    if todo:
        batch = np.asarray([rows[j] for j in todo], dtype=np.int64)
        if hasattr(env, "measure_batch") and len(todo) > 1:
            ms = env.measure_batch(batch)
        else:
            ms = [env.measure(p) for p in batch]
        for j, m in zip(todo, ms):
            out[j] = m
        if log is not None:
            log.extend([{"index": start + j, "placement": rows[j], "step_time_s": m.step_time_s, "oom": m.oom}
                        for j, m in zip(todo, ms)])
    return out  # type: ignore[return-value]


def log_header(env: Environment, search: dict) -> dict:
    """The placement log's first line: graph, groups, grouper, cluster, environment and ``search`` settings."""
    return {
        "graph": env.graph.name,
        "groups": env.grouping.num_groups,
        "grouper": env.grouping.grouper,
        "cluster": env.spec.name,
        "environment": env.kind,
        "search": search,
    }


def run_name(model: str, size: str, cluster: str, grouper: str, learner: str, seed: int, budget: int) -> str:
    """The file stem of a run's placement log and checkpoint, named by its settings (not the clock);
    each setting reduced to a safe path component (:func:`compgraph.paths.slug`)."""
    from compgraph.paths import slug

    parts = [model, size, cluster, grouper or "none", learner, f"seed{seed}", f"budget{budget}"]
    return "-".join(slug(p) for p in parts)


def _save_checkpoint(path: Path, learner: Learner, book: dict) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"sampled": book["sampled"], "learner": learner.state_dict()}, tmp)
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
    learner: Learner,
    env: Environment,
    log_path: str | Path | None = None,
    checkpoint_path: str | Path | None = None,
    resume: bool = False,
    on_update: Callable[[dict], None] | None = None,
    checkpoint_every_s: float = 30.0,
) -> SearchResult:
    """Run ``learner``'s search in ``env`` for ``learner.config.budget`` placements (module docstring).

    Args:
        learner: the learner (built on ``env``).
        env: the measurement environment; its grouping's groups are the learner's units.
        log_path: the placement log (JSON lines); ``None``: no log.
        checkpoint_path: the checkpoint (``.pt``; the bookkeeping goes to the same name
            with ``.json``); written at most every ``checkpoint_every_s`` seconds and at
            the end; ``None``: no checkpoint.
        resume: continue from an existing log (and checkpoint) with the same settings;
            ``False``: start afresh, overwriting them.
        on_update: called with each learning-curve point, the update's diagnostics under ``"update"``.
        checkpoint_every_s: seconds between checkpoints (0: after every update).
    Returns:
        A :class:`SearchResult`; the same learner settings and seed give the same result,
        interrupted and resumed or not (``wall_s`` and ``wall_time_s`` aside).
    Raises:
        ValueError: the log was written with other settings, or its placements differ from
            the learner's (not the same search).
    """
    settings = json.loads(json.dumps(learner.settings()))
    budget = int(learner.config.budget)
    log = PlacementLog(log_path, log_header(env, settings), fresh=not resume) if log_path is not None else None
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    result = SearchResult(None, None, failing_signal=float(learner.failing_signal or 0.0),
                          learner=learner.name, settings=settings)
    sampled, wall_before = 0, 0.0
    if ckpt is not None and not resume:  # a fresh search: an older checkpoint of these settings is stale
        ckpt.unlink(missing_ok=True)
        ckpt.with_suffix(".json").unlink(missing_ok=True)
    if ckpt is not None and resume and log is not None:
        loaded = _load_checkpoint(ckpt, settings, len(log.records))
        if loaded is not None:
            state, book = loaded
            learner.load_state_dict(state)
            sampled, wall_before = book["sampled"], book["wall_time_s"]
            result.step_times = book["step_times"]
            result.curve = book["curve"]
            result.updates = book["updates"]
            result.best_step_time_s = book["best_step_time_s"]
            result.best_placement = None if book["best_placement"] is None else np.asarray(book["best_placement"], dtype=np.int64)
    start = time.perf_counter()
    last_ckpt = start
    try:
        while sampled < budget:
            k = min(learner.batch_size, budget - sampled)
            samples = learner.sample(k)
            ms = measure_or_replay(env, samples.placements, sampled, log)
            result.measured += k - (max(0, min(k, len(log.records) - sampled)) if log is not None else 0)
            times = np.array([np.nan if m.oom or m.step_time_s is None else m.step_time_s for m in ms], dtype=np.float64)
            oom = np.array([bool(m.oom) for m in ms])
            ran = []
            for row, m in zip(samples.placements, ms):
                result.record(row, m.step_time_s)
                if m.step_time_s is not None:
                    ran.append(m.step_time_s)
            sampled += k
            diagnostics = learner.update(samples, times, oom)
            info = {"placements": sampled, "wall_s": wall_before + time.perf_counter() - start}
            info.update({k_: (None if v is None else float(v)) for k_, v in (diagnostics or {}).items()})
            result.updates.append(info)
            result.add_point(result.curve_point(sampled, ran), on_update, info)
            now = time.perf_counter()
            if ckpt is not None and (now - last_ckpt >= checkpoint_every_s or sampled >= budget):
                _save_checkpoint(ckpt, learner, _book(result, sampled, wall_before + now - start, settings))
                last_ckpt = now
    finally:
        if log is not None:
            log.close()
    result.failing_signal = float(learner.failing_signal or 0.0)
    result.wall_time_s = wall_before + time.perf_counter() - start
    if result.best_placement is not None:
        result.best_op_placement = env.grouping.expand(result.best_placement)
    return result


def _book(result: SearchResult, sampled: int, wall: float, settings: dict) -> dict:
    return {
        "settings": settings,
        "sampled": sampled,
        "wall_time_s": wall,
        "step_times": result.step_times,
        "curve": result.curve,
        "updates": result.updates,
        "best_step_time_s": result.best_step_time_s,
        "best_placement": None if result.best_placement is None else [int(x) for x in result.best_placement],
    }
