"""Tables across experiments: one experiment in the 2017 Table 2 shape, and a sweep's comparison
read back from the MLflow store with MLflow's ``search_runs``.

Speedup convention (2017 Table 2, last column): ``x best baseline = t(best baseline) / t(method)``,
above 1 is faster than the best baseline. ``x lower bound = t(method) / lower_bound_s``, at least 1
for a valid bound (how far the method is from the bound), shown when the run logged ``lower_bound_s``.
"""

from __future__ import annotations

import statistics


def _fmt(x, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def table2_markdown(results: list[dict]) -> str:
    """Markdown table, one row per experiment result (the object the experiment flow returns):
    task, devices, each method's step time (s; OOM), the best learner's speedup over the best
    baseline, and the lower bound (s) when any result has ``lower_bound_s``.

    Args:
        results: experiment result objects (``model``, ``size``, ``cluster``, ``methods``:
            method -> ``{"step_time_s", "oom"}``, ``best_learned``, ``best_baseline``,
            ``speedup_over_best_baseline``, optionally ``lower_bound_s``).
    """
    methods = list(dict.fromkeys(m for r in results for m in r.get("methods", {})))
    with_bound = any(r.get("lower_bound_s") is not None for r in results)
    head = ["task", "cluster", *[f"{m} (s)" for m in methods], "best learned", "speedup over best baseline"]
    if with_bound:
        head.append("lower bound (s)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [f"{r.get('model')} ({r.get('size')})", str(r.get("cluster"))]
        for m in methods:
            row = r.get("methods", {}).get(m)
            cells.append("" if row is None else ("OOM" if row.get("oom") else _fmt(row.get("step_time_s"))))
        sp = r.get("speedup_over_best_baseline")
        cells += [str(r.get("best_learned") or "-"),
                  "-" if sp is None else f"{100 * sp:+.1f}% vs {r.get('best_baseline')}"]
        if with_bound:
            cells.append(_fmt(r.get("lower_bound_s")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _spread(values: list[float]) -> dict:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def experiment_runs(tracking_uri: str, experiment: str = "placement-experiment", parent_run_id: str | None = None) -> list:
    """The finished experiment (parent) runs of MLflow experiment ``experiment``, via ``search_runs``;
    only those nested under ``parent_run_id`` (a sweep) when given.

    Raises:
        ValueError: no such MLflow experiment.
    """
    from tracking import mlflow_client

    client = mlflow_client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"no MLflow experiment {experiment!r} in {tracking_uri}")
    filt = "tags.`placement.kind` = 'experiment' and attributes.status = 'FINISHED'"
    if parent_run_id:
        filt += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    return client.search_runs([exp.experiment_id], filter_string=filt, max_results=50000)


def compare_rows(runs: list) -> list[dict]:
    """Methods x models x clusters over seeds, from experiment runs (see :func:`experiment_runs`).

    Each run contributes its metrics ``<method>.step_time_s``, its tags ``placement.best_baseline``
    and ``placement.learners`` and, if logged, its metric ``lower_bound_s``.

    Returns:
        One row per (task, method), sorted: ``task`` (``model/size on cluster``), ``model``,
        ``size``, ``cluster``, ``method``, ``learner`` (bool), ``seeds`` (count), ``step_time_s_median``,
        ``_min``, ``_max`` (s), ``x_best_baseline_median``, ``_min``, ``_max``, and
        ``x_lower_bound_median`` (``None`` without a bound).
    """
    groups: dict[tuple, dict] = {}
    for run in runs:
        p, m, t = run.data.params, run.data.metrics, run.data.tags
        key = (p.get("model"), p.get("size"), p.get("cluster"))
        times = {k[: -len(".step_time_s")]: v for k, v in m.items() if k.endswith(".step_time_s")}
        best = t.get("placement.best_baseline")
        learners = set(filter(None, t.get("placement.learners", "").split(",")))
        bound = m.get("lower_bound_s")
        g = groups.setdefault(key, {})
        for method, value in times.items():
            cell = g.setdefault(method, {"t": [], "xb": [], "xl": [], "learner": method in learners, "seeds": set()})
            cell["t"].append(value)
            cell["seeds"].add(p.get("seed"))
            if best in times and value > 0:
                cell["xb"].append(times[best] / value)
            if bound:
                cell["xl"].append(value / bound)
    rows = []
    for (model, size, cluster), g in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        for method, c in sorted(g.items(), key=lambda kv: (kv[1]["learner"], kv[0])):
            t, xb, xl = _spread(c["t"]), _spread(c["xb"]), _spread(c["xl"])
            rows.append({
                "task": f"{model}/{size} on {cluster}", "model": model, "size": size, "cluster": cluster,
                "method": method, "learner": c["learner"], "seeds": len(c["t"]),
                "step_time_s_median": t["median"], "step_time_s_min": t["min"], "step_time_s_max": t["max"],
                "x_best_baseline_median": xb["median"], "x_best_baseline_min": xb["min"], "x_best_baseline_max": xb["max"],
                "x_lower_bound_median": xl["median"],
            })
    return rows


def compare_markdown(rows: list[dict]) -> str:
    """:func:`compare_rows` as a markdown table."""
    with_bound = any(r["x_lower_bound_median"] is not None for r in rows)
    head = ["task", "method", "seeds", "step time (s), median [min, max]", "x best baseline, median [min, max]"]
    if with_bound:
        head.append("x lower bound")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["task"], r["method"] + (" (learner)" if r["learner"] else ""), str(r["seeds"]),
                 f"{_fmt(r['step_time_s_median'])} [{_fmt(r['step_time_s_min'])}, {_fmt(r['step_time_s_max'])}]",
                 f"{_fmt(r['x_best_baseline_median'], 3)} [{_fmt(r['x_best_baseline_min'], 3)}, {_fmt(r['x_best_baseline_max'], 3)}]"]
        if with_bound:
            cells.append(_fmt(r["x_lower_bound_median"], 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
