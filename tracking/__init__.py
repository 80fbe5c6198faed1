"""MLflow tracking: where runs go by default, and how an experiment is recorded.

By default the store is a SQLite file ``<out_dir>/mlflow.db`` and artifacts go to
``<out_dir>/mlartifacts`` beside it (never a stray ``./mlruns``). One parent run per
experiment (its parameters, the Prefect flow run id as tag ``prefect.flow_run_id``, the
results table); one nested run per method (its parameters, ``step_time_s``, the placement
as ``placement.json`` and, for a search, its learning curve as metrics
``best_step_time_s`` and ``sample_mean_step_time_s`` against placements sampled; for the
best learned and the best baseline placement, the end-to-end training evaluation:
``train_seconds`` and, trained for real, ``train_step_time_s`` and ``train_loss`` per step,
tagged ``train_simulated``).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# A tracking server that is down: MLflow's defaults (7 retries, backoff factor 2, 120 s timeout) block
# one write for minutes; 3 retries (about 14 s) still ride out a blink. Set them to override.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

EXPERIMENT_NAME = "placement-experiment"

HOME_ENV = "PLACEMENT_HOME"
"""The environment variable naming the user-level folder of every run ([`placement_home`][tracking.placement_home])."""
APP_NAME = "device-placement"
"""The application's name in the platform's user data folder ([`placement_home`][tracking.placement_home])."""


def placement_home() -> Path:
    """The folder every command writes to when no ``--out-dir`` is given, so that runs started
    from any folder land in one MLflow store (``<home>/mlflow.db``) that ``placement compare``
    and the printed MLflow UI command read: ``$PLACEMENT_HOME`` (``~`` expanded, made absolute)
    when set and not empty, else the user data folder of [`APP_NAME`][tracking.APP_NAME] by the platform's
    conventions (``platformdirs.user_data_path``: ``$XDG_DATA_HOME/device-placement`` or
    ``~/.local/share/device-placement`` on Linux, ``~/Library/Application Support/device-placement``
    on macOS, ``%LOCALAPPDATA%\\device-placement`` on Windows). Nothing is created here."""
    given = os.environ.get(HOME_ENV, "").strip()
    if given:
        return Path(given).expanduser().absolute()
    from platformdirs import user_data_path

    return user_data_path(APP_NAME, appauthor=False)


def default_tracking_uri(out_dir: str | Path) -> str:
    """``sqlite:///<abs out_dir>/mlflow.db``."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def artifact_root(out_dir: str | Path) -> str:
    """``file://<abs out_dir>/mlartifacts``."""
    return (Path(out_dir).resolve() / "mlartifacts").as_uri()


def ui_command(tracking_uri: str) -> str:
    """The command that opens the MLflow UI on ``tracking_uri`` (bound to 127.0.0.1)."""
    return f"mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1 --port 5000"


def runs_page(tracking_uri: str, run_id: str) -> str | None:
    """The MLflow UI page of the runs table of ``run_id``'s experiment, in the "Model training"
    view (``workflowType=machine_learning``: MLflow 3.17's UI otherwise opens the GenAI overview,
    whatever the experiment's kind tag); on the tracking server for ``http(s)`` URIs, else on
    [`ui_command`][tracking.ui_command]'s address. ``None`` if the run cannot be read."""
    from mlflow.tracking import MlflowClient

    try:
        exp = MlflowClient(tracking_uri=tracking_uri).get_run(run_id).info.experiment_id
    except Exception:  # noqa: BLE001 (a link is a convenience)
        return None
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{exp}/runs?workflowType=machine_learning&viewStateShareKey={RUNS_VIEW}"


RUNS_VIEW = "placement-key-metrics"
"""The id of the runs-table view every experiment carries ([`runs_view_tag`][tracking.runs_view_tag]) and [`runs_page`][tracking.runs_page] opens."""
KEY_METRICS = ("best_step_time_s", "step_time_s", "x_best_baseline", "speedup_over_best_baseline")
"""The metrics shown as columns of the runs table ([`runs_view_tag`][tracking.runs_view_tag]): on an experiment's parent run the
step time of its best placement, that over the best baseline's and the best learner's speedup; on a method's
nested run its own step time, that over the best baseline's and (a learner) its best step time."""
KEY_TAGS = ("placement.recommended",)
"""The tags shown as columns of the runs table: the method whose placement the run recommends."""


def runs_view_tag() -> tuple[str, str]:
    """``(key, value)`` of the experiment tag that gives MLflow's runs table its columns.

    MLflow 3.17's experiment page shows no metric column until one is picked; a view shared with
    its "Share" button is an experiment tag ``mlflow.sharedViewState.<id>`` whose value is the
    page's state, opened by the URL parameter ``viewStateShareKey=<id>`` (read from the UI's
    bundle: ``mlflow/server/js``, ``viewStateShareKey`` and ``mlflow.sharedViewState.``; a saved
    view's envelope ``{name, createdAt, updatedAt, state}``). This one selects [`KEY_METRICS`][tracking.KEY_METRICS]
    and [`KEY_TAGS`][tracking.KEY_TAGS] (canonical keys ``metrics.`name``` and ``tags.`name```), so the link of
    [`runs_page`][tracking.runs_page] opens the runs table with them as columns."""
    import json

    columns = [*(f"metrics.`{m}`" for m in KEY_METRICS), *(f"tags.`{t}`" for t in KEY_TAGS)]
    state = json.dumps({"selectedColumns": columns}, separators=(",", ":"))
    now = int(time.time() * 1000)
    envelope = {"name": "placement: key metrics", "createdAt": now, "updatedAt": now, "state": state}
    return f"mlflow.sharedViewState.{RUNS_VIEW}", json.dumps(envelope, separators=(",", ":"))


def _same_view(current: str | None, wanted: str) -> bool:
    import json

    try:
        return current is not None and json.loads(current)["state"] == json.loads(wanted)["state"]
    except (ValueError, KeyError, TypeError):
        return False


def experiment_id(client, name: str, artifact_location: str) -> str:
    """The id of MLflow experiment ``name``, created with ``artifact_location`` if it does not exist.

    For a SQLite store this holds an exclusive lock on ``<db>.lock``: MLflow creates and migrates
    the database on first use, and two processes doing so at once fail (measured: 2 of 3 died with
    alembic ``CommandError``), as do two creating the same experiment.

    The experiment carries ``mlflow.experimentKind = custom_model_development`` (a model-training
    experiment, not a GenAI one). MLflow 3.17's UI still opens on the GenAI overview unless the
    page asks for the "Model training" view: [`runs_page`][tracking.runs_page] gives that link. It also carries
    the runs-table view of the key metrics ([`runs_view_tag`][tracking.runs_view_tag]), which that link opens.
    """
    with _sqlite_lock(client.tracking_uri):
        exp = client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else client.create_experiment(name, artifact_location=artifact_location)
        if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
            client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        view_key, view = runs_view_tag()
        if exp is None or not _same_view(exp.tags.get(view_key), view):
            client.set_experiment_tag(exp_id, view_key, view)
        return exp_id


EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"

_PACKAGES = ("tensorflow", "torch", "prefect", "mlflow", "ray", "numpy", "networkx", "pydantic")


def code_version_tags() -> dict[str, str]:
    """Tags saying which code made a run: ``mlflow.source.git.commit`` (the repository's HEAD),
    ``mlflow.source.name`` and ``mlflow.source.type`` (as ``mlflow.start_run`` would set them),
    ``placement.git_dirty`` (``true`` if tracked files differ from HEAD), ``placement.version``
    (the project's version) and ``version.<package>`` for the libraries results depend on.
    A commit that cannot be read (no git, not a clone) is left out; the rest is always there."""
    global _CODE_TAGS
    if _CODE_TAGS is None:
        import subprocess
        from importlib import metadata

        root = Path(__file__).resolve().parent.parent
        tags = {"mlflow.source.name": "placement", "mlflow.source.type": "LOCAL"}
        try:
            version = metadata.version("device-placement")
        except metadata.PackageNotFoundError:
            version = "unknown"
        tags["placement.version"] = version
        for pkg in _PACKAGES:
            try:
                tags[f"version.{pkg}"] = metadata.version(pkg)
            except metadata.PackageNotFoundError:
                pass
        try:
            def git(*args):
                return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                                      check=True).stdout.strip()

            tags["mlflow.source.git.commit"] = git("rev-parse", "HEAD")
            tags["placement.git_dirty"] = "true" if git("status", "--porcelain", "--untracked-files=no") else "false"
        except (OSError, subprocess.SubprocessError):
            pass
        _CODE_TAGS = tags
    return dict(_CODE_TAGS)


_CODE_TAGS: dict[str, str] | None = None


STAMP_FORMAT = "%Y%m%d-%H%M%S"
"""The time stamp of run names and run folders (local time, to the second)."""


def run_title(params: dict, started: str | None = None) -> str:
    """An experiment's parent run name: what tells runs apart, in CleanRL's
    ``{env}__{exp}__{seed}__{time}`` spirit, ``__`` between the parts::

        <model>-<size>__<cluster>-<env>__<learners>__budget<N>__seed<S>__<started>
        rnnlm-small__k80x2-sim__rl,post__budget200__seed0__20261126-101500

    ``learners``: the methods of ``params["methods"]`` (comma-separated) that are not baselines
    ([`baselines.BASELINES`][baselines.BASELINES]), else all of them; a user's graph named by a path keeps its
    last component (``nets/my_cnn.py:cnn`` -> ``my_cnn.py:cnn``); ``started``: the run's start,
    [`STAMP_FORMAT`][tracking.STAMP_FORMAT]. A part whose fields are all missing is left out.
    """
    def given(key):
        value = params.get(key)
        return None if value in (None, "") else str(value)

    model = given("model")
    methods = [m for m in (given("methods") or "").split(",") if m]
    if methods:
        from baselines import BASELINES

        methods = [m for m in methods if m not in BASELINES] or methods
    parts = ["-".join(p for p in (model and model.rstrip("/").rsplit("/", 1)[-1], given("size")) if p),
             "-".join(p for p in (given("cluster"), given("env")) if p),
             ",".join(methods),
             f"budget{params['budget']}" if given("budget") else "",
             f"seed{params['seed']}" if given("seed") else "",
             started or ""]
    return "__".join(p for p in parts if p)


def run_stamp(run_dir: str | Path | None = None, start_time_ms: int | None = None) -> str | None:
    """A run's [`STAMP_FORMAT`][tracking.STAMP_FORMAT] time stamp: the one that opens its run folder's name
    (``<stamp>-<model>-...``, [`tracking.live.run_folder`][tracking.live.run_folder]), else its MLflow ``start_time``
    (milliseconds); ``None`` when neither is known."""
    import re

    if run_dir is not None:
        m = re.match(r"(\d{8}-\d{6})(?:-|$)", Path(run_dir).name)
        if m:
            return m.group(1)
    if start_time_ms is not None:
        return time.strftime(STAMP_FORMAT, time.localtime(start_time_ms / 1000))
    return None


def new_run(client, exp_id: str, run_name: str, tags: dict | None = None):
    """``client.create_run`` with [`code_version_tags`][tracking.code_version_tags] added to ``tags``."""
    return client.create_run(exp_id, run_name=run_name, tags={**code_version_tags(), **(tags or {})})


def mlflow_client(tracking_uri: str):
    """``MlflowClient(tracking_uri)``, created under the SQLite store's lock (see [`experiment_id`][tracking.experiment_id]):
    the constructor creates and migrates a new database."""
    from mlflow.tracking import MlflowClient

    with _sqlite_lock(tracking_uri):
        return MlflowClient(tracking_uri=tracking_uri)


@contextlib.contextmanager
def _sqlite_lock(uri: str):
    if not str(uri).startswith("sqlite:///"):
        yield
        return
    from tracking.locks import exclusive_lock

    with exclusive_lock(str(uri)[len("sqlite:///"):] + ".lock"):
        yield


def record_experiment(
    tracking_uri: str,
    artifact_location: str,
    params: dict,
    results: dict[str, dict],
    summary: dict,
    method_params: dict[str, dict],
    curves: dict[str, list[dict]],
    prefect_flow_run_id: str | None,
    extra_artifacts: dict[str, str] | None = None,
    run_ids: dict | None = None,
    run_dir: str | None = None,
) -> str:
    """Write one experiment to MLflow; returns the parent run id.

    Args:
        tracking_uri: MLflow tracking URI (SQLite file or server).
        artifact_location: where the experiment's artifacts go (used when the experiment is created).
        params: the experiment's parameters (model, cluster, budget, seed...).
        results: method -> evaluation row (see [`cluster.evaluation.evaluate_placements`][cluster.evaluation.evaluate_placements]).
        summary: best baseline and speedups.
        method_params: method -> its own parameters.
        curves: method -> learning-curve points (``placements``, ``best_step_time_s``, ``sample_mean_step_time_s``).
        prefect_flow_run_id: tagged on the parent run.
        extra_artifacts: artifact path -> local file to upload into the parent run.
        run_ids: ``{"parent": id, "children": {method: id}}`` of runs created at the start
            ([`tracking.live.ExperimentRecorder`][tracking.live.ExperimentRecorder]): they are completed instead of new runs
            created, and the curves, already logged as the search went, are not logged again.
        run_dir: the experiment's run folder; its ``table.md``, ``plots/`` and ``export.json`` are logged to
            the parent run.
    """
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow_client(tracking_uri)
    exp_id = experiment_id(client, EXPERIMENT_NAME, artifact_location)
    tags = {"prefect.flow_run_id": prefect_flow_run_id or "", "placement.kind": "experiment"}
    started = run_stamp(run_dir)
    if run_ids:
        pid = run_ids["parent"]
        started = started or run_stamp(start_time_ms=client.get_run(pid).info.start_time)
    else:
        started = started or time.strftime(STAMP_FORMAT)
        parent = new_run(client, exp_id, run_title(params, started), tags)
        pid = parent.info.run_id
    # the model is known only now (a run made at the start)
    client.set_tag(pid, "mlflow.runName", run_title(params, started))
    now = int(time.time() * 1000)
    client.log_batch(pid, params=[Param(k, str(v)) for k, v in params.items()])
    parent_metrics = [Metric(f"{m}.step_time_s", r["step_time_s"], now, 0) for m, r in results.items() if r["step_time_s"] is not None]
    parent_metrics += [Metric(k, v, now, 0) for k, v in summary.items() if isinstance(v, float)]
    from tracking.advice import best_placement

    best_run = best_placement(results, summary.get("best_baseline"))
    if best_run is not None:  # columns of the runs table (KEY_METRICS): the run's best placement
        parent_metrics.append(Metric("best_step_time_s", best_run["step_time_s"], now, 0))
        if best_run.get("x_best_baseline") is not None:
            parent_metrics.append(Metric("x_best_baseline", best_run["x_best_baseline"], now, 0))
        client.set_tag(pid, "placement.recommended", best_run["method"])
    if parent_metrics:
        client.log_batch(pid, metrics=parent_metrics)
    client.log_dict(pid, {"results": results, "summary": summary}, "results.json")
    client.set_tag(pid, "placement.kind", "experiment")  # read back by tracking.compare
    client.set_tag(pid, "placement.best_baseline", str(summary.get("best_baseline") or ""))
    client.set_tag(pid, "placement.learners", ",".join(summary.get("speedups") or {}))
    for name, path in (extra_artifacts or {}).items():
        client.log_artifact(pid, path, artifact_path=name)
    if run_dir is not None:
        for name in ("table.md", "plots"):
            path = Path(run_dir) / name
            if path.is_dir():
                client.log_artifacts(pid, str(path), artifact_path=name)
            elif path.exists():
                client.log_artifact(pid, str(path))
                client.set_tag(pid, "mlflow.note.content", path.read_text()[:50_000])  # the run's description
        if (Path(run_dir) / "export.json").is_file():  # what `placement export` reads (tracking.export)
            client.log_artifact(pid, str(Path(run_dir) / "export.json"))
    children = (run_ids or {}).get("children", {})
    best = results.get(summary.get("best_baseline") or "", {})
    best_s = best.get("step_time_s") if not best.get("oom") else None
    for method, row in results.items():
        if method in children:
            cid = children[method]
        else:
            child = new_run(client, exp_id, method, {"mlflow.parentRunId": pid, "method": method})
            cid = child.info.run_id
        mparams = {"method": method, **method_params.get(method, {})}
        client.log_batch(cid, params=[Param(k, str(v)) for k, v in mparams.items()], tags=[RunTag("oom", str(row["oom"]))])
        metrics = []
        if row["step_time_s"] is not None:
            metrics.append(Metric("step_time_s", row["step_time_s"], now, 0))
            if best_s:  # one name on every method's run, so MLflow's chart view compares methods
                metrics.append(Metric("x_best_baseline", row["step_time_s"] / best_s, now, 0))
        for point in ([] if method in children else curves.get(method, [])):
            for key in ("best_step_time_s", "sample_mean_step_time_s"):
                if point.get(key) is not None:
                    metrics.append(Metric(key, point[key], now, point["placements"]))
        train = (summary.get("training") or {}).get(method)
        if train:
            # End-to-end training evaluation: projected seconds (simulated) or per-step time and loss (real).
            metrics.append(Metric("train_seconds", float(train["seconds"]), now, int(train["steps"])))
            for step, (t, loss) in enumerate(zip(train.get("step_times_s") or [], train.get("losses") or [])):
                metrics.append(Metric("train_step_time_s", float(t), now, step))
                metrics.append(Metric("train_loss", float(loss), now, step))
            client.set_tag(cid, "train_simulated", str(bool(train["simulated"])).lower())
        for i in range(0, len(metrics), 1000):
            client.log_batch(cid, metrics=metrics[i : i + 1000])
        client.log_dict(cid, row["placement"], "placement.json")
        client.set_terminated(cid)
    client.set_terminated(pid)
    return pid
