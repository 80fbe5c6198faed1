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
    :func:`ui_command`'s address. ``None`` if the run cannot be read."""
    from mlflow.tracking import MlflowClient

    try:
        exp = MlflowClient(tracking_uri=tracking_uri).get_run(run_id).info.experiment_id
    except Exception:  # noqa: BLE001 (a link is a convenience)
        return None
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{exp}/runs?workflowType=machine_learning"


def experiment_id(client, name: str, artifact_location: str) -> str:
    """The id of MLflow experiment ``name``, created with ``artifact_location`` if it does not exist.

    For a SQLite store this holds an exclusive lock on ``<db>.lock``: MLflow creates and migrates
    the database on first use, and two processes doing so at once fail (measured: 2 of 3 died with
    alembic ``CommandError``), as do two creating the same experiment.

    The experiment carries ``mlflow.experimentKind = custom_model_development`` (a model-training
    experiment, not a GenAI one). MLflow 3.17's UI still opens on the GenAI overview unless the
    page asks for the "Model training" view: :func:`runs_page` gives that link.
    """
    with _sqlite_lock(client.tracking_uri):
        exp = client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else client.create_experiment(name, artifact_location=artifact_location)
        if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
            client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
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


def run_title(params: dict) -> str:
    """An experiment's parent run name, ``<model>-<size>-<cluster>-<env>-seed<N>`` (a missing field is left out)."""
    parts = [params.get(k) for k in ("model", "size", "cluster", "env")]
    seed = params.get("seed")
    return "-".join([*(str(p) for p in parts if p not in (None, "")), *([f"seed{seed}"] if seed is not None else [])])


def new_run(client, exp_id: str, run_name: str, tags: dict | None = None):
    """``client.create_run`` with :func:`code_version_tags` added to ``tags``."""
    return client.create_run(exp_id, run_name=run_name, tags={**code_version_tags(), **(tags or {})})


def mlflow_client(tracking_uri: str):
    """``MlflowClient(tracking_uri)``, created under the SQLite store's lock (see :func:`experiment_id`):
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
        results: method -> evaluation row (see :func:`cluster.evaluation.evaluate_placements`).
        summary: best baseline and speedups.
        method_params: method -> its own parameters.
        curves: method -> learning-curve points (``placements``, ``best_step_time_s``, ``sample_mean_step_time_s``).
        prefect_flow_run_id: tagged on the parent run.
        extra_artifacts: artifact path -> local file to upload into the parent run.
        run_ids: ``{"parent": id, "children": {method: id}}`` of runs created at the start
            (:class:`tracking.live.ExperimentRecorder`): they are completed instead of new runs
            created, and the curves, already logged as the search went, are not logged again.
        run_dir: the experiment's run folder; its ``table.md``, ``plots/`` and ``export.json`` are logged to
            the parent run.
    """
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow_client(tracking_uri)
    exp_id = experiment_id(client, EXPERIMENT_NAME, artifact_location)
    tags = {"prefect.flow_run_id": prefect_flow_run_id or "", "placement.kind": "experiment"}
    if run_ids:
        pid = run_ids["parent"]
    else:
        parent = new_run(client, exp_id, run_title(params), tags)
        pid = parent.info.run_id
    client.set_tag(pid, "mlflow.runName", run_title(params))  # the model is known only now (a run made at the start)
    now = int(time.time() * 1000)
    client.log_batch(pid, params=[Param(k, str(v)) for k, v in params.items()])
    parent_metrics = [Metric(f"{m}.step_time_s", r["step_time_s"], now, 0) for m, r in results.items() if r["step_time_s"] is not None]
    parent_metrics += [Metric(k, v, now, 0) for k, v in summary.items() if isinstance(v, float)]
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
