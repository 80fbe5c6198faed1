"""Prefect artifacts of an experiment and of a sweep: the results as a table, the plots as images,
the Table 2 markdown and a link to the MLflow run."""

from __future__ import annotations

import re

from prefect import task
from prefect.artifacts import create_image_artifact, create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from tracking import ui_command
from tracking.compare import compare_markdown, table2_markdown


def _key(text: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and dashes."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")[:100]


def tag_flow_run(*tags: str) -> None:
    """Add ``tags`` (e.g. ``model:rnnlm``) to the current Prefect flow run, so the UI filters runs
    by them; outside a flow run, or when the API refuses, nothing happens."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id:
        return
    try:
        with get_client(sync_client=True) as client:
            current = list(client.read_flow_run(run_id).tags or [])
            client.update_flow_run(run_id, tags=[*current, *[t for t in tags if t not in current]])
    except Exception:  # noqa: BLE001 (tags are a convenience: never a failure)
        pass


def mlflow_run_link(tracking_uri: str, experiment_id: str | None, run_id: str) -> str:
    """The MLflow UI address of a run: on the tracking server itself for ``http(s)`` URIs,
    else on ``mlflow ui``'s default ``http://127.0.0.1:5000`` (see [`tracking.ui_command`][tracking.ui_command])."""
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{experiment_id or 0}/runs/{run_id}?workflowType=machine_learning"


def search_progress_artifact(method: str, budget: int, every_s: float = 5.0):
    """An ``on_update`` callback keeping a Prefect progress artifact (``search-<method>``, percent
    of ``budget`` placements sampled, the best step time so far in its description) up to date
    while a search runs: created on the first update, then updated at most every ``every_s``
    seconds and at the end. Outside a flow run, or when the API refuses, it does nothing."""
    import time

    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    state: dict = {"id": None, "last": 0.0, "broken": False}

    def on_update(point: dict) -> None:
        if state["broken"]:
            return
        done = int(point.get("placements", 0))
        now = time.monotonic()
        if state["id"] is not None and done < budget and now - state["last"] < every_s:
            return
        best = point.get("best_step_time_s")
        text = f"{method}: {done}/{budget} placements" + ("" if best is None else f", best {best:.5g} s")
        progress = min(100.0, 100.0 * done / max(1, budget))
        try:
            if state["id"] is None:
                state["id"] = create_progress_artifact(progress, key=_key(f"search-{method}"), description=text)
            else:
                update_progress_artifact(state["id"], progress, description=text)
        except Exception:  # noqa: BLE001 (no flow run context, or the API is away: progress is not worth a failure)
            state["broken"] = True
        state["last"] = now

    return on_update


MAX_INLINE_IMAGE_BYTES = 400_000
"""A plot of a run not logged to MLflow is put in an image artifact as a ``data:`` URL up to this size."""


def plot_urls(result: dict, tracking_uri: str, run_id: str | None) -> dict[str, str]:
    """Plot name -> an image URL for each PNG in the run folder's ``plots/``: a link to the MLflow
    artifact (``/get-artifact?path=plots/<name>&run_uuid=<run>``) on the tracking server for an
    ``http(s)`` URI, else on the address of the printed ``mlflow ui`` command
    ([`tracking.ui_command`][tracking.ui_command], 127.0.0.1:5000: the image shows while that UI runs); only a run not
    logged to MLflow gets ``data:image/png;base64`` URLs (files over [`MAX_INLINE_IMAGE_BYTES`][tasks.publish.MAX_INLINE_IMAGE_BYTES] are
    left out)."""
    import base64
    from pathlib import Path
    from urllib.parse import quote as urlquote

    folder = Path(result.get("run_dir") or "") / "plots"
    out: dict[str, str] = {}
    if not result.get("run_dir") or not folder.is_dir():
        return out
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    for png in sorted(folder.glob("*.png")):
        if run_id:
            out[png.stem] = f"{base}/get-artifact?path={urlquote(f'plots/{png.name}')}&run_uuid={run_id}"
        elif png.stat().st_size <= MAX_INLINE_IMAGE_BYTES:
            out[png.stem] = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    return out


def _figure(x: float | None, digits: int = 4) -> float | None:
    """``x`` to ``digits`` significant digits (``None`` stays ``None``)."""
    return None if x is None else float(f"{x:.{digits}g}")


def results_table_rows(result: dict) -> list[dict]:
    """The rows of the results table artifact: one per method, fastest first, with its step time
    (s), OOM, devices used and the ratios to the lower bound and the optimum, each figure to 4
    significant digits (3 for the ratios; not Python's 17)."""
    return [{"method": m, "step_time_s": _figure(r.get("step_time_s")), "oom": r.get("oom"),
             "devices_used": len(set((r.get("placement") or {}).values())),
             "x_lower_bound": _figure(r.get("x_lower_bound"), 3), "x_optimum": _figure(r.get("x_optimum"), 3)}
            for m, r in sorted(result["methods"].items(), key=lambda kv: (kv[1].get("step_time_s") is None,
                                                                           kv[1].get("step_time_s") or 0.0))]


@task(name="publish-artifacts", cache_policy=NONE)
def publish_experiment(result: dict) -> None:
    """Artifacts of the experiment: a table artifact (one row per method, fastest first), an image
    artifact per plot ([`plot_urls`][tasks.publish.plot_urls]), a markdown artifact with the 2017 Table 2 shape (with the
    lower bound when the result has one) and a link artifact to its MLflow parent run."""
    key = _key(f"placement-{result['model']}-{result['size']}-{result['cluster']}")
    uri, run_id = result.get("mlflow_tracking_uri") or "", result.get("mlflow_run_id")
    where = f"MLflow run `{run_id}` in `{uri}`" if run_id else f"not logged to MLflow yet: `placement log-run {result.get('run_dir')}`"
    from tracking.advice import next_steps

    advice = "".join(f"- {line}\n" for line in next_steps(result["recommendation"])) if "recommendation" in result else ""
    create_markdown_artifact(
        key=key,
        markdown=f"# {result['model']} ({result['size']}) on {result['cluster']} [{result['env']}]\n\n"
                 f"{table2_markdown([result])}\n\nStep times in seconds. {where}. Run folder: `{result.get('run_dir')}`.\n"
                 + (f"\n## Next steps\n\n{advice}" if advice else ""),
        description="placement results (2017 Table 2 shape)",
    )
    create_table_artifact(key=f"{key}-table", table=results_table_rows(result),
                          description=f"{result['model']} ({result['size']}) on {result['cluster']} "
                                      f"[{result['env']}]: step time (s) per method, fastest first")
    for name, url in plot_urls(result, uri, run_id).items():
        create_image_artifact(image_url=url, key=_key(f"{key}-{name}"), description=f"{name} ({result['model']})")
    if run_id:
        experiment_id = None
        try:
            from tracking import mlflow_client

            experiment_id = mlflow_client(uri).get_run(run_id).info.experiment_id
        except Exception:
            pass
        create_link_artifact(key=f"{key}-mlflow", link=mlflow_run_link(uri, experiment_id, run_id),
                             link_text=f"MLflow run {run_id}",
                             description=("" if uri.startswith("http") else f"start the UI first: `{ui_command(uri)}`"))


@task(name="publish-sweep-table", cache_policy=NONE)
def publish_sweep(rows: list[dict], tracking_uri: str, sweep_run_id: str | None) -> None:
    """A markdown artifact with the sweep's comparison table ([`tracking.compare.compare_markdown`][tracking.compare.compare_markdown])."""
    create_markdown_artifact(
        key="placement-sweep",
        markdown=f"# Sweep comparison\n\n{compare_markdown(rows)}\n\nMLflow sweep run `{sweep_run_id}` in `{tracking_uri}`.\n",
        description="methods x models x clusters, median and spread over seeds",
    )
