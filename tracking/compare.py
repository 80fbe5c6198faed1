"""Tables across experiments: one experiment in the 2017 Table 2 shape, and a sweep's comparison
read back from the MLflow store with MLflow's ``search_runs``.

Ratios across runs point one way, ``t(method) / t(reference)``, below 1 faster: ``x best baseline
= t(method) / t(best baseline)`` and ``x lower bound = t(method) / lower_bound_s`` (at least 1 for a
valid bound), as the experiment table's ``x lower bound`` and ``x optimum``. The single experiment's
Table 2 shape keeps the paper's "speedup over the best baseline" in percent.
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


GROUP_BY = ("model", "size", "cluster", "env", "grouper", "budget", "learner_options")
"""The settings that change a result, and so separate rows of ``placement compare`` (parent-run parameters)."""


def experiment_runs(tracking_uri: str, experiment: str = "placement-experiment", parent_run_id: str | None = None):
    """The finished experiment (parent) runs of MLflow experiment ``experiment``, newest first, as
    the pandas DataFrame of ``mlflow.search_runs`` (columns ``params.*``, ``metrics.*``, ``tags.*``);
    only those nested under ``parent_run_id`` (a sweep) when given.

    Raises:
        ValueError: no such MLflow experiment.
    """
    import mlflow

    from tracking import mlflow_client

    client = mlflow_client(tracking_uri)  # creates/migrates the store under its lock
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"no MLflow experiment {experiment!r} in {tracking_uri}")
    filt = "tags.`placement.kind` = 'experiment' and attributes.status = 'FINISHED'"
    if parent_run_id:
        filt += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    mlflow.set_tracking_uri(tracking_uri)
    return mlflow.search_runs(experiment_ids=[exp.experiment_id], filter_string=filt, max_results=50000,
                              order_by=["attributes.start_time DESC"], output_format="pandas")


def run_parameters(runs) -> list[str]:
    """The run parameters ``placement compare --by`` accepts for ``runs`` ([`experiment_runs`][tracking.compare.experiment_runs]'s
    DataFrame): [`GROUP_BY`][tracking.compare.GROUP_BY] (the default ``--by``, accepted even where older runs did not
    log one: they show ``None``), then every other parameter logged on at least one of these runs, sorted.

    Checked against the runs found, not a fixed list: the experiment's parameters
    ([`tasks.config.ExperimentConfig.mlflow_params`][tasks.config.ExperimentConfig.mlflow_params] and
    [`tasks.experiment.graph_params`][tasks.experiment.graph_params]) vary with the graph (a user's graph adds ``import_*``)
    and across versions of the code, and a parameter no run carries could only give ``None`` rows.
    """
    logged = {c[len("params."):] for c in getattr(runs, "columns", ()) if c.startswith("params.")}
    return [*GROUP_BY, *sorted(logged - set(GROUP_BY))]


def compare_rows(runs, by: tuple[str, ...] | list[str] = GROUP_BY) -> list[dict]:
    """Methods per group of settings over seeds, from experiment runs ([`experiment_runs`][tracking.compare.experiment_runs]'s DataFrame).

    Runs are grouped by the parent-run parameters ``by`` (default [`GROUP_BY`][tracking.compare.GROUP_BY]: every setting
    that changes a result); in a group, each seed counts once (its newest run). Each run contributes
    its metrics ``<method>.step_time_s``, its tags ``placement.best_baseline`` and
    ``placement.learners`` and, if logged, its metric ``lower_bound_s``.

    Both ratios point the same way, ``t(method) / t(reference)`` (below 1 is faster):
    ``x_best_baseline`` against the run's best baseline, ``x_lower_bound`` against its lower bound.

    Returns:
        One row per (group, method): the ``by`` settings (``None`` where a run did not log one),
        ``task`` ([`task_label`][tracking.compare.task_label]: ``model/size on cluster [env]``, the parts grouped by), ``method``, ``learner`` (bool), ``seeds`` (distinct
        seeds), ``median_step_time_s``, ``min_step_time_s``, ``max_step_time_s`` (s),
        ``x_best_baseline_median``, ``_min``, ``_max`` and ``x_lower_bound_median`` (``None``
        without a bound). Groups are sorted by their settings, methods in a group by median step time.

    Raises:
        ValueError: a ``by`` field that is not a run parameter name (letters, digits, ``_``), or, when
            there are runs, one that is not a run parameter ([`run_parameters`][tracking.compare.run_parameters]):
            one line naming ``--by``, the field and the valid ones.
    """
    import math

    for field in by:
        if not field.replace("_", "").isalnum():
            raise ValueError(f"--by: {field!r} is not a parameter name")
    if runs is not None and len(runs) > 0:
        valid = run_parameters(runs)
        for field in by:
            if field not in valid:
                raise ValueError(f"--by: unknown run parameter {field!r}; valid: {', '.join(valid)}")

    def value(row, column):
        v = row.get(column) if column in row.index else None
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    groups: dict[tuple, dict] = {}
    seen: set[tuple] = set()
    records = [] if runs is None or len(runs) == 0 else [r for _, r in runs.iterrows()]
    for row in records:  # newest first: a seed's newest run in each group counts
        key = tuple(value(row, f"params.{f}") for f in by)
        seed = value(row, "params.seed")
        if (key, seed) in seen:
            continue
        seen.add((key, seed))
        times = {c[len("metrics."):-len(".step_time_s")]: float(v) for c, v in row.items()
                 if c.startswith("metrics.") and c.endswith(".step_time_s") and value(row, c) is not None}
        best = value(row, "tags.placement.best_baseline")
        learners = set(filter(None, (value(row, "tags.placement.learners") or "").split(",")))
        bound = value(row, "metrics.lower_bound_s")
        g = groups.setdefault(key, {})
        for method, t in times.items():
            cell = g.setdefault(method, {"t": [], "xb": [], "xl": [], "learner": method in learners, "seeds": set()})
            cell["t"].append(t)
            cell["seeds"].add(seed)
            if best in times and times[best] > 0:
                cell["xb"].append(t / times[best])
            if bound:
                cell["xl"].append(t / bound)
    rows = []
    for key, g in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        settings = dict(zip(by, key))
        task = task_label(settings)
        cells = sorted(g.items(), key=lambda kv: (statistics.median(kv[1]["t"]), kv[0]))
        for method, c in cells:
            t, xb, xl = _spread(c["t"]), _spread(c["xb"]), _spread(c["xl"])
            rows.append({
                **settings, "task": task, "method": method, "learner": c["learner"], "seeds": len(c["seeds"]),
                "median_step_time_s": t["median"], "min_step_time_s": t["min"], "max_step_time_s": t["max"],
                "x_best_baseline_median": xb["median"], "x_best_baseline_min": xb["min"], "x_best_baseline_max": xb["max"],
                "x_lower_bound_median": xl["median"],
            })
    return rows


def task_label(settings: dict) -> str:
    """A group's task from the settings it is grouped by: ``model/size on cluster [env]``, each part only where
    the group has it (``--by model`` gives ``rnnlm``, ``--by cluster`` gives ``on k80x2``); ``all runs`` for none."""
    model, size, cluster, env = (settings.get(k) for k in ("model", "size", "cluster", "env"))
    text = " ".join(filter(None, ("/".join(str(x) for x in (model, size) if x is not None) or None,
                                  None if cluster is None else f"on {cluster}",
                                  f"[{env}]" if env else None)))
    return text or "all runs"


def group_label(row: dict, by: tuple[str, ...] | list[str] = GROUP_BY) -> str:
    """The settings of ``row``'s group beyond its task (model, size, cluster, env), e.g. ``budget=16 grouper=2017``."""
    return " ".join(f"{k}={row.get(k)}" for k in by if k not in ("model", "size", "cluster", "env")
                    and row.get(k) not in (None, "", "{}"))


def compare_markdown(rows: list[dict], by: tuple[str, ...] | list[str] = GROUP_BY) -> str:
    """[`compare_rows`][tracking.compare.compare_rows] (grouped by ``by``) as a markdown table."""
    with_bound = any(r["x_lower_bound_median"] is not None for r in rows)
    head = ["task", "settings", "method", "seeds", "step time (s), median [min, max]", "x best baseline, median [min, max]"]
    if with_bound:
        head.append("x lower bound")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["task"], group_label(r, by), r["method"] + (" (learner)" if r["learner"] else ""), str(r["seeds"]),
                 f"{_fmt(r['median_step_time_s'])} [{_fmt(r['min_step_time_s'])}, {_fmt(r['max_step_time_s'])}]",
                 f"{_fmt(r['x_best_baseline_median'], 3)} [{_fmt(r['x_best_baseline_min'], 3)}, {_fmt(r['x_best_baseline_max'], 3)}]"]
        if with_bound:
            cells.append(_fmt(r["x_lower_bound_median"], 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
