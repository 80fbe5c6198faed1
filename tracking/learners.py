"""MLflow record and plot of a learner comparison (``placement compare-learners``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from placer.compare import best_so_far
from placer.search import SearchResult
from tracking import experiment_id, new_run

EXPERIMENT_NAME = "learner-comparison"


def plot_learner_curves(runs: dict[str, list[SearchResult]], path: str | Path, title: str) -> Path:
    """One PNG, 2x2 panels: best-so-far and batch-mean step time (ms) against placements
    (top) and against wall seconds (bottom); one colour per learner, the median over seeds
    as a line and the seeds' range shaded (best-so-far; against wall time each seed is a line).

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9), constrained_layout=True)
    colours = plt.get_cmap("tab10")
    for i, (name, results) in enumerate(runs.items()):
        c = colours(i % 10)
        curves = np.stack([best_so_far(r) for r in results]) * 1e3
        x = np.arange(1, curves.shape[1] + 1)
        with np.errstate(all="ignore"):
            med = np.nanmedian(curves, axis=0)
            axes[0, 0].fill_between(x, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=c, alpha=0.15)
        axes[0, 0].plot(x, med, color=c, label=f"{name} (median of {len(results)} seeds)")
        for j, r in enumerate(results):
            px = [p["placements"] for p in r.curve]
            mean = [np.nan if p["sample_mean_step_time_s"] is None else 1e3 * p["sample_mean_step_time_s"] for p in r.curve]
            axes[0, 1].plot(px, mean, color=c, alpha=0.6, lw=0.8, label=name if j == 0 else None)
            wall = [u["wall_s"] for u in r.updates]
            best = [np.nan if p["best_step_time_s"] is None else 1e3 * p["best_step_time_s"] for p in r.curve]
            axes[1, 0].plot(wall, best, color=c, alpha=0.8, lw=1, label=name if j == 0 else None)
            axes[1, 1].plot(wall, mean, color=c, alpha=0.6, lw=0.8, label=name if j == 0 else None)
    labels = [("placements", "best step time so far (ms)"), ("placements", "batch mean step time (ms)"),
              ("wall time (s)", "best step time so far (ms)"), ("wall time (s)", "batch mean step time (ms)")]
    for ax, (xl, yl) in zip(axes.flat, labels):
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1, 0].set_xscale("symlog", linthresh=1.0)
    axes[1, 1].set_xscale("symlog", linthresh=1.0)
    fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def record_comparison(tracking_uri: str, artifact_location: str, params: dict, summary: dict,
                      runs: dict[str, list[SearchResult]], plot_path: str | Path, seeds: list[int],
                      prefect_flow_run_id: str | None) -> str:
    """Log a comparison to MLflow: a parent run (parameters, the summary as ``summary.json``, the
    plot as ``learner-curves.png``) and one child run per learner and seed with its curves as
    metrics: ``best_step_time_s`` and ``sample_mean_step_time_s`` at step = placements, and
    ``best_step_time_s_vs_wall_ms`` / ``sample_mean_step_time_s_vs_wall_ms`` at step = wall
    milliseconds (MLflow steps are integers). Returns the parent run id."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = experiment_id(client, EXPERIMENT_NAME, artifact_location)
    parent = new_run(client, exp_id, run_name=f"{params.get('model')}-{params.get('cluster')}-compare",
                               tags={"prefect.flow_run_id": prefect_flow_run_id or ""})
    pid = parent.info.run_id
    now = int(time.time() * 1000)
    client.log_batch(pid, params=[Param(k, str(v)) for k, v in params.items()])
    metrics = [Metric(f"{name}.best_step_time_s.median", row["best_step_time_s"]["median"], now, 0)
               for name, row in summary.items() if row["best_step_time_s"]["median"] is not None]
    if metrics:
        client.log_batch(pid, metrics=metrics)
    client.log_dict(pid, json.loads(json.dumps(summary)), "summary.json")
    client.log_artifact(pid, str(plot_path))
    for name, results in runs.items():
        for seed, r in zip(seeds, results):
            child = new_run(client, exp_id, run_name=f"{name}-seed{seed}",
                                      tags={"mlflow.parentRunId": pid, "learner": name, "seed": str(seed)})
            cid = child.info.run_id
            client.log_batch(cid, params=[Param(k, str(v)) for k, v in {**r.settings, "learner": name}.items()])
            ms = []
            for p, u in zip(r.curve, r.updates):
                for key in ("best_step_time_s", "sample_mean_step_time_s"):
                    if p.get(key) is not None:
                        ms.append(Metric(key, p[key], now, p["placements"]))
                        ms.append(Metric(f"{key}_vs_wall_ms", p[key], now, int(1000 * u["wall_s"])))
                for key in ("loss", "entropy", "kl", "baseline"):
                    if u.get(key) is not None and np.isfinite(u[key]):
                        ms.append(Metric(key, u[key], now, p["placements"]))
            for i in range(0, len(ms), 1000):
                client.log_batch(cid, metrics=ms[i : i + 1000])
            client.set_terminated(cid)
    client.set_terminated(pid)
    return pid
