"""MLflow while an experiment runs, and a run folder so that nothing is lost.

[`ExperimentRecorder`][tracking.live.ExperimentRecorder] creates the MLflow parent run and one nested run per method when
the experiment starts (status RUNNING), logs each learner's learning-curve points as the
search goes (metrics ``best_step_time_s`` and ``sample_mean_step_time_s``, step = placements
sampled, timestamp = wall clock), and writes the run folder
``<out_dir>/runs/<stamp>-<model>-<size>-<cluster>-seed<seed>/`` before anything is logged at
the end: ``results.json`` (everything [`tracking.record_experiment`][tracking.record_experiment] needs),
``table.md`` (the 2017 Table 2 shape), ``placements.json`` and ``plots/*.png``. If MLflow is
down at the end, or the user asked to spool, ``placement log-run DIR`` logs the folder later
([`log_run_folder`][tracking.live.log_run_folder]). The flow's failure/crash hooks ([`mark_failed`][tracking.live.mark_failed],
[`mark_killed`][tracking.live.mark_killed]) set the runs FAILED or KILLED.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Callable

from tracking.store import TRACKING_SCHEMES, TrackingUnavailable, check_tracking, check_writable  # noqa: F401 (re-exported)

RESULTS_FILE = "results.json"

_ACTIVE: dict[str, "ExperimentRecorder"] = {}  # Prefect flow run id -> its recorder (for the state hooks)


def run_folder(out_dir: str | Path, stamp: str, model: str, size: str, cluster: str, seed: int) -> Path:
    """``<out_dir>/runs/<stamp>-<model>-<size>-<cluster>-seed<seed>`` (created), each name reduced to a
    safe path component ([`compgraph.paths.slug`][compgraph.paths.slug]: a cluster spec named ``../../x`` cannot lead out).

    Raises:
        compgraph.paths.UnsafePath: the folder would resolve outside ``out_dir`` (a symlink leading out).
    """
    from compgraph.paths import named_path

    path = named_path(out_dir, "runs", stamp, model, size, cluster, f"seed{seed}")
    path.mkdir(parents=True, exist_ok=True)
    return path


OUTAGE_RETRY_S = 60.0
"""Seconds between tries (and warnings) while MLflow writes fail (`ExperimentRecorder._safe`)."""
MAX_PENDING = 200_000
"""Learning-curve metrics kept per run while MLflow is down (the run folder keeps them all)."""

FLUSH_EVERY_S = 5.0
"""Seconds between writes of buffered learning-curve points to MLflow ([`ExperimentRecorder.on_update`][tracking.live.ExperimentRecorder.on_update])."""


class ExperimentRecorder:
    """The MLflow runs of one experiment, created at its start, and its run folder.

    Args:
        tracking_uri: MLflow tracking URI; ignored with ``spool``.
        artifact_location: artifact root of the experiment (used if it is created).
        params: the parent run's parameters known at the start (model, cluster, budget, seed...).
        methods: one nested run is created per method.
        spool: log nothing to MLflow now; the run folder is logged later by ``placement log-run``.
        parent_run_id: an enclosing MLflow run (a sweep) to nest the experiment's run under.
        prefect_flow_run_id: tagged ``prefect.flow_run_id`` on the parent run.
        settings: every setting that names the run (graph source, size, cluster, env, methods,
            budget, seed, grouper, learner options). Its hash is tagged ``placement.settings_hash``
            on every run, with ``placement.host`` and ``placement.pid``; runs of the same settings
            left RUNNING by a process that is gone (SIGKILL, a crash) end KILLED here
            ([`end_stale_runs`][tracking.live.end_stale_runs]), and with ``resume`` those of another host too.
        started: the time stamp in the parent run's name ([`tracking.run_title`][tracking.run_title]; the run
            folder's, [`tracking.STAMP_FORMAT`][tracking.STAMP_FORMAT]); default: now.
    """

    def __init__(self, tracking_uri: str, artifact_location: str, params: dict, methods: list[str], spool: bool = False,
                 parent_run_id: str | None = None, prefect_flow_run_id: str | None = None,
                 settings: dict | None = None, resume: bool = False, started: str | None = None):
        from tracking import STAMP_FORMAT

        self.spool = spool
        self.started = started or time.strftime(STAMP_FORMAT)
        self.client = None
        self.parent_id: str | None = None
        self.child_ids: dict[str, str] = {}
        self.prefect_flow_run_id = prefect_flow_run_id
        self._clock = time.monotonic
        self._down_since: float | None = None  # when MLflow writes began to fail (None: they work)
        self._last_try = self._last_warn = None
        self._skipped = 0
        self._pending: dict[str, list] = {}  # run id -> metrics not yet written (learning-curve points)
        self._last_flush = time.monotonic()
        self._params = dict(params)
        self.stale_ended: list[str] = []
        if prefect_flow_run_id:
            _ACTIVE[prefect_flow_run_id] = self
        if spool:
            return
        from mlflow.entities import Param, RunTag
        from tracking import mlflow_client

        from tracking import EXPERIMENT_NAME, experiment_id, new_run, run_title

        self.client = mlflow_client(tracking_uri)
        exp_id = experiment_id(self.client, EXPERIMENT_NAME, artifact_location)
        tags = {"prefect.flow_run_id": prefect_flow_run_id or "", "placement.kind": "experiment"}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        owner = {}
        if settings is not None:
            import os
            import socket

            owner = {"placement.settings_hash": settings_hash(settings), "placement.host": socket.gethostname(),
                     "placement.pid": str(os.getpid())}
            self.stale_ended = end_stale_runs(self.client, exp_id, owner["placement.settings_hash"], resume)
        tags.update(owner)
        run = new_run(self.client, exp_id, run_title(params, self.started), tags)
        self.parent_id = run.info.run_id
        self.client.log_batch(self.parent_id, params=[Param(k, str(v)) for k, v in params.items()])
        for method in methods:
            child = new_run(self.client, exp_id, method, {"mlflow.parentRunId": self.parent_id, "method": method,
                                                          "placement.kind": "method", **owner})
            self.child_ids[method] = child.info.run_id
            self.client.log_batch(child.info.run_id, params=[Param("method", method)], tags=[RunTag("oom", "pending")])

    @property
    def run_ids(self) -> dict | None:
        """``{"parent": id, "children": {method: id}}``, ``None`` when spooled."""
        return None if self.parent_id is None else {"parent": self.parent_id, "children": dict(self.child_ids)}

    def log_params(self, params: dict) -> None:
        """Parameters learnt after the start (op and group counts); skipped when spooled."""
        if self.client is not None:
            from mlflow.entities import Param, RunTag

            from tracking import run_title

            self._params = {**self._params, **params}
            tags = [RunTag("mlflow.runName", run_title(self._params, self.started))]  # now with model, size and cluster
            self._safe(lambda: self.client.log_batch(self.parent_id, params=[Param(k, str(v)) for k, v in params.items()],
                                                     tags=tags))

    def _safe(self, fn: Callable[[], None], force: bool = False) -> bool:
        """Call ``fn`` (an MLflow write); ``True`` if it went through.

        The search must not die, nor flood the terminal, because the tracking store is down: after a
        failure, writes are skipped for [`OUTAGE_RETRY_S`][tracking.live.OUTAGE_RETRY_S] seconds (``force``: try anyway, as
        the end of a run does) and one warning a minute says how many were skipped; the run folder
        keeps everything, and ``placement log-run`` logs it later."""
        now = self._clock()
        if self._down_since is not None and not force and now - self._last_try < OUTAGE_RETRY_S:
            self._skipped += 1
            return False
        self._last_try = now
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 (any store error is an outage here)
            if self._down_since is None:
                self._down_since = now
            self._skipped += 1
            if self._last_warn is None or now - self._last_warn >= OUTAGE_RETRY_S:
                first = " ".join(str(exc).split())[:200]
                warnings.warn(f"MLflow logging failed ({type(exc).__name__}: {first}); {self._skipped} write(s) "
                              f"skipped so far, next try in {OUTAGE_RETRY_S:.0f} s; the run folder keeps everything",
                              stacklevel=2)
                self._last_warn = now
            return False
        if self._down_since is not None:
            warnings.warn(f"MLflow answers again after {now - self._down_since:.0f} s ({self._skipped} write(s) skipped)",
                          stacklevel=2)
            self._down_since, self._last_warn, self._skipped = None, None, 0
        return True

    def on_update(self, method: str) -> Callable[[dict], None] | None:
        """A callback logging ``method``'s learning-curve points to its nested run as the search
        goes (step = placements sampled, timestamp = when the point was made), with the policy
        update's diagnostics as ``losses/<name>`` (loss, entropy, kl, baseline, ... as the learner
        reports them) and ``charts/placements_per_s`` (placements sampled per wall second of the
        search); ``None`` when spooled.

        Points are buffered and written in one ``log_batch`` per run at most every
        [`FLUSH_EVERY_S`][tracking.live.FLUSH_EVERY_S] seconds (and by [`flush`][tracking.live.ExperimentRecorder.flush]): one SQLite write per update made a
        fast learner (Post: an update per 12 placements) spend most of its time in MLflow.
        Nothing is lost by the buffering: the placement log (fsynced per batch) and the run
        folder hold every point."""
        if self.client is None or method not in self.child_ids:
            return None
        from mlflow.entities import Metric

        run_id = self.child_ids[method]

        def log(point: dict) -> None:
            now, step = int(time.time() * 1000), int(point["placements"])
            batch = self._pending.setdefault(run_id, [])
            batch.extend(Metric(k, float(point[k]), now, step)
                         for k in ("best_step_time_s", "sample_mean_step_time_s") if point.get(k) is not None)
            update = point.get("update") or {}
            for key, value in update.items():  # the policy update's diagnostics, named as CleanRL names them
                if key not in ("placements", "wall_s") and isinstance(value, (int, float)) and math.isfinite(value):
                    batch.append(Metric(f"losses/{key}", float(value), now, step))
            if update.get("wall_s"):
                batch.append(Metric("charts/placements_per_s", step / float(update["wall_s"]), now, step))
            if time.monotonic() - self._last_flush >= FLUSH_EVERY_S:
                self.flush()

        return log

    def flush(self, force: bool = False) -> None:
        """Write the buffered learning-curve points (``log_batch``, at most 1,000 metrics a call); points
        that could not be written stay buffered (at most [`MAX_PENDING`][tracking.live.MAX_PENDING] per run) for the next try.
        ``force``: try even during an outage's quiet period (the end of a run)."""
        pending, self._pending = self._pending, {}
        self._last_flush = time.monotonic()
        if self.client is None:
            return
        for run_id, metrics in pending.items():
            for i in range(0, len(metrics), 1000):
                chunk = metrics[i:i + 1000]
                if not self._safe(lambda run_id=run_id, chunk=chunk: self.client.log_batch(run_id, metrics=chunk),
                                  force=force):
                    kept = self._pending.setdefault(run_id, [])  # kept for the next try (bounded)
                    kept[:0] = metrics[i:][: max(0, MAX_PENDING - len(kept))]
                    break

    def callback(self, method: str, budget: int, logger=None) -> Callable[[dict], None]:
        """``on_update`` for ``method``'s search: MLflow metrics as they come ([`on_update`][tracking.live.ExperimentRecorder.on_update])
        and progress ([`tracking.progress.SearchProgress`][tracking.progress.SearchProgress]: a bar on a terminal, lines in ``logger``)."""
        from tracking.progress import SearchProgress, chain

        return chain(self.on_update(method), SearchProgress(method, budget, logger))

    def finish(self, run_id: str | None) -> None:
        """The experiment was recorded (``run_id``) or its recording failed (``None``: the runs end FAILED)."""
        self.flush(force=True)
        if run_id is None:
            self.terminate("FAILED")
        self.done()

    def terminate(self, status: str) -> None:
        """Set the parent and every unfinished nested run to ``status`` (FAILED or KILLED)."""
        if self.prefect_flow_run_id:
            _ACTIVE.pop(self.prefect_flow_run_id, None)
        if self.client is None:
            return
        self.flush(force=True)
        for run_id in [*self.child_ids.values(), self.parent_id]:
            def end(run_id=run_id):
                if self.client.get_run(run_id).info.status == "RUNNING":
                    self.client.set_terminated(run_id, status=status)

            self._safe(end, force=True)

    def done(self) -> None:
        """Forget this recorder (the experiment was recorded)."""
        if self.prefect_flow_run_id:
            _ACTIVE.pop(self.prefect_flow_run_id, None)


def settings_hash(settings: dict) -> str:
    """16 hex digits of SHA-256 over ``settings`` as sorted JSON: the runs of equal settings share it."""
    import hashlib

    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _alive(pid: str) -> bool:
    import os

    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def end_stale_runs(client, experiment_id: str, settings_hash_: str, resume: bool) -> list[str]:
    """End KILLED the runs tagged ``placement.settings_hash = settings_hash_`` that are still RUNNING
    but whose process is gone: on this host, a ``placement.pid`` that no longer exists; on another
    host, only when ``resume`` (a resumed run takes their place). Returns the ids ended.

    A SIGKILL gives no process a chance to end its MLflow runs; this is where they end."""
    import os
    import socket

    host = socket.gethostname()
    runs = client.search_runs([experiment_id], filter_string=(
        f"tags.`placement.settings_hash` = '{settings_hash_}' and attributes.status = 'RUNNING'"), max_results=1000)
    ended = []
    for run in runs:
        tags = run.data.tags
        pid = tags.get("placement.pid", "")
        if pid == str(os.getpid()) and tags.get("placement.host") == host:
            continue
        gone = not _alive(pid) if tags.get("placement.host") == host else resume
        if gone:
            client.set_terminated(run.info.run_id, status="KILLED")
            ended.append(run.info.run_id)
    return ended


def _hook(status: str):
    def hook(flow, flow_run, state) -> None:
        rec = _ACTIVE.get(str(flow_run.id))
        if rec is not None:
            rec.terminate(status)

    hook.__name__ = f"mlflow_runs_{status.lower()}"
    return hook


mark_failed = _hook("FAILED")
"""Prefect ``on_failure`` hook: the experiment's MLflow runs end FAILED."""
mark_killed = _hook("KILLED")
"""Prefect ``on_crashed`` / ``on_cancellation`` hook: the experiment's MLflow runs end KILLED."""


def save_run_folder(run_dir: str | Path, record: dict, result: dict, prepared=None, spec=None) -> Path:
    """Write the run folder: ``results.json`` (``record``: the keyword arguments of
    [`tracking.record_experiment`][tracking.record_experiment] but the store, plus ``result``: the flow's result object),
    ``table.md``, ``placements.json`` and, given ``prepared`` and ``spec``, ``export.json`` (what
    ``placement export`` reads: [`tracking.export.write_export_record`][tracking.export.write_export_record]) and the pictures in ``plots/``.

    Returns:
        ``run_dir``. Plots that fail to draw are warned about, never fatal.
    """
    from tracking.compare import table2_markdown

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RESULTS_FILE).write_text(json.dumps({"record": record, "result": result}, indent=1, default=float) + "\n")
    (run_dir / "table.md").write_text(table2_markdown([result]) + "\n")
    placements = {m: r["placement"] for m, r in record["results"].items()}
    (run_dir / "placements.json").write_text(json.dumps(placements, indent=1) + "\n")
    if prepared is not None and spec is not None:
        from tracking.export import write_export_record

        try:
            write_export_record(run_dir, prepared, spec, record["results"])
        except Exception as exc:
            warnings.warn(f"export.json not written (placement export will refuse this run): {type(exc).__name__}: {exc}")
        try:
            write_plots(run_dir / "plots", record, prepared, spec)
        except Exception as exc:
            warnings.warn(f"plots not drawn: {type(exc).__name__}: {exc}")
    return run_dir


def write_plots(folder: Path, record: dict, prepared, spec) -> list[Path]:
    """``learning-curves.png``, ``device-bars.png``, and for the best learned and the best
    baseline placement ``placement-<method>.png``, ``timeline-<method>.png`` (a per-device Gantt
    chart of one simulated step) and ``trace-<method>.json`` (the same as a Chrome trace, for
    ``chrome://tracing`` or Perfetto); see [`tracking.plots`][tracking.plots] and [`tracking.timeline`][tracking.timeline]."""
    from tracking import plots
    from tracking.timeline import chrome_trace, simulate_timeline

    folder.mkdir(parents=True, exist_ok=True)
    results, summary = record["results"], record["summary"]
    devices = list(spec.device_names)
    task = f"{record['params'].get('model')} on {record['params'].get('cluster')}"
    out = []
    if record.get("curves"):
        base = {m: r["step_time_s"] for m, r in results.items() if m not in record["curves"]}
        bound = summary.get("lower_bound_s") if record["params"].get("env") == "sim" else None
        out.append(plots.plot_learning_curves(record["curves"], folder / "learning-curves.png", base,
                                              title=f"learning curves: {task}", lower_bound=bound))
    capacity = {d.name: d.tensor_capacity_bytes for d in spec.devices}
    out.append(plots.plot_device_bars(results, devices, folder / "device-bars.png",
                                      title=f"per-device compute, transfer, memory: {task}", capacity_bytes=capacity))
    for method in dict.fromkeys(m for m in (summary.get("best_learned"), summary.get("best_baseline")) if m):
        row = results.get(method) or {}
        if row.get("placement"):
            t = row.get("step_time_s")
            out.append(plots.plot_placement(prepared.graph, prepared.grouping, row["placement"], devices,
                                            folder / f"placement-{method}.png",
                                            title=f"{method} placement of {task}" + ("" if t is None else f": {t:.4g} s/step")))
            sim = simulate_timeline(prepared, spec, row["placement"])
            if sim is not None:
                out.append(plots.plot_timeline(sim, prepared.graph, devices, folder / f"timeline-{method}.png",
                                               title=f"{method} placement of {task}"))
                trace = folder / f"trace-{method}.json"
                trace.write_text(json.dumps(chrome_trace(sim, prepared.graph, spec, f"{method}: {task}")))
                out.append(trace)
    return out


def log_run_folder(run_dir: str | Path, tracking_uri: str | None = None, artifact_location: str | None = None) -> str:
    """Log a run folder written by an experiment (spooled, or MLflow down at the end) to MLflow.

    Args:
        run_dir: the folder with ``results.json``.
        tracking_uri: default: the SQLite store of the folder's out-dir (``<run_dir>/../../mlflow.db``).
        artifact_location: default: ``<out-dir>/mlartifacts``.
    Returns:
        The new parent run id (also written to ``<run_dir>/mlflow_run_id``).
    Raises:
        ValueError: ``run_dir`` has no readable ``results.json``; its record has a field
            ``record_experiment`` does not take, or an ``extra_artifacts`` entry that is not
            ``placement-logs/<method>`` -> a file inside the out-dir (the record is data: it names
            what is uploaded, so it may name nothing else).
    """
    import inspect

    from compgraph.paths import UnsafePath, inside, slug
    from tracking import artifact_root, default_tracking_uri, record_experiment

    run_dir = Path(run_dir)
    try:
        data = json.loads((run_dir / RESULTS_FILE).read_text())
        record = data["record"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{run_dir} is not a run folder: no readable {RESULTS_FILE} ({type(exc).__name__})") from None
    where = run_dir / RESULTS_FILE
    if not isinstance(record, dict):
        raise ValueError(f"{where}: record: {type(record).__name__}, expected an object")
    fields = set(inspect.signature(record_experiment).parameters) - {"tracking_uri", "artifact_location", "run_dir"}
    unknown = sorted(set(record) - fields)
    if unknown:
        raise ValueError(f"{where}: record: unknown field(s) {', '.join(map(repr, unknown))}")
    out_dir = run_dir.resolve().parent.parent
    listed = record.get("extra_artifacts") or {}
    if not isinstance(listed, dict):
        raise ValueError(f"{where}: extra_artifacts: {type(listed).__name__}, expected an object")
    extra = {}
    for name, path in listed.items():
        method = str(name).removeprefix("placement-logs/")
        if name != f"placement-logs/{method}" or method != slug(method):
            raise ValueError(f"{where}: extra_artifacts: name {name!r}, expected placement-logs/<method>")
        try:
            inside(out_dir, path)
        except (UnsafePath, TypeError, OSError):
            raise ValueError(f"{where}: extra_artifacts[{name!r}]: {path!r} is not a file inside {out_dir}") from None
        if Path(path).is_file():  # a log removed since the run: the rest is still logged
            extra[name] = path
    uri = tracking_uri or default_tracking_uri(out_dir)
    check_tracking(uri)
    run_id = record_experiment(tracking_uri=uri, artifact_location=artifact_location or artifact_root(out_dir),
                               run_dir=str(run_dir), **{**record, "extra_artifacts": extra})
    (run_dir / "mlflow_run_id").write_text(run_id + "\n")
    return run_id


def start_sweep(tracking_uri: str, artifact_location: str, params: dict) -> str:
    """Create the sweep's MLflow parent run (tag ``placement.kind=sweep``); the sweep's experiments
    nest under it (``mlflow_parent_run_id``). Returns its run id."""
    from mlflow.entities import Param
    from tracking import mlflow_client

    from tracking import EXPERIMENT_NAME, experiment_id, new_run

    client = mlflow_client(tracking_uri)
    exp_id = experiment_id(client, EXPERIMENT_NAME, artifact_location)
    run = new_run(client, exp_id, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}", tags={"placement.kind": "sweep"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    return run.info.run_id


def finish_sweep(tracking_uri: str, sweep_run_id: str, folder: str | Path, failed: int = 0) -> list[dict]:
    """Read the sweep's experiments back ([`tracking.compare.compare_rows`][tracking.compare.compare_rows]), write
    ``compare.json``, ``compare.md`` and ``compare.png`` to ``folder`` and log them to the sweep run,
    which ends FINISHED (FAILED if ``failed`` experiments failed and none finished). Returns the rows."""
    from mlflow.entities import Metric
    from tracking import mlflow_client

    from tracking.compare import compare_markdown, compare_rows, experiment_runs
    from tracking.plots import plot_comparison

    client = mlflow_client(tracking_uri)
    exp_id = client.get_run(sweep_run_id).info.experiment_id
    runs = experiment_runs(tracking_uri, client.get_experiment(exp_id).name, sweep_run_id)
    rows = compare_rows(runs)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compare.json").write_text(json.dumps(rows, indent=1) + "\n")
    (folder / "compare.md").write_text(compare_markdown(rows) + "\n")
    paths = [folder / "compare.json", folder / "compare.md"]
    if rows:
        paths.append(plot_comparison(rows, folder / "compare.png"))
    for p in paths:
        client.log_artifact(sweep_run_id, str(p))
    now = int(time.time() * 1000)
    finished = len(runs)
    client.log_batch(sweep_run_id, metrics=[Metric("experiments_finished", finished, now, 0),
                                            Metric("experiments_failed", failed, now, 0)])
    client.set_terminated(sweep_run_id, status="FAILED" if failed and not finished else "FINISHED")
    return rows
