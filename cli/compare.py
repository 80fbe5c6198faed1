"""``placement compare`` (the table across runs, from the MLflow store) and ``placement log-run``
(log a run folder, spooled or written while MLflow was down, to MLflow)."""

from __future__ import annotations

import typer

from cli.common import _fail, _write_json, app, check_json_path, check_output_path, out_dir_or_home


def check_markdown_path(path: str | None) -> str | None:
    """Typer callback of ``compare --markdown``: [`check_output_path`][cli.common.check_output_path], as ``--json`` is checked, but
    no ``-`` (the table goes to the terminal already)."""
    return check_output_path(path)


@app.command()
def compare(
    experiment: str = typer.Option("placement-experiment", help="MLflow experiment to read"),
    out_dir: str = typer.Option(None, callback=out_dir_or_home, help="folder whose SQLite MLflow store is read (when "
                                "--tracking-uri is not given; default: $PLACEMENT_HOME, else the user data folder)"),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (default: SQLite file in --out-dir)"),
    sweep: str = typer.Option(None, help="only the experiments of this sweep (its MLflow run id)"),
    by: str = typer.Option(",".join(("model", "size", "cluster", "env", "grouper", "budget", "learner_options")),
                           help="comma-separated run parameters that separate rows (default: every setting that changes a result)"),
    json_path: str = typer.Option(None, "--json", callback=check_json_path, help="write the rows as a JSON list to PATH ('-': stdout): the --by settings, method, seeds, median/min/max_step_time_s, x_best_baseline_*"),
    markdown: str = typer.Option(None, "--markdown", callback=check_markdown_path,
                                 help="write the table as markdown to PATH (its folder is created)"),
) -> None:
    """Methods per group of settings over every finished experiment run: median and spread over
    distinct seeds, step time over the best baseline's (x, below 1 is faster) and over the lower
    bound when logged; in a group, methods from fastest to slowest.

    Bad input is one line, exit 2, before the table: ``--json``/``--markdown`` a folder or a path whose
    folder cannot be created (a missing one is created), a ``--by`` field that is not a parameter of the
    runs found ([`tracking.compare.run_parameters`][tracking.compare.run_parameters]: checked against the runs, not a fixed list;
    the default settings always pass), a ``--sweep`` that no finished run belongs to."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from tracking import default_tracking_uri
    from tracking.compare import compare_markdown, compare_rows, experiment_runs, group_label
    from tracking.live import TrackingUnavailable, check_tracking

    uri = tracking_uri or default_tracking_uri(out_dir)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        _fail(f"no MLflow store at {uri}; run `placement experiment` first or pass --out-dir/--tracking-uri")
    try:
        check_tracking(uri)
        group_by = [f.strip() for f in by.split(",") if f.strip()]
        if not group_by:
            raise ValueError("--by is empty; give run parameters such as model,cluster")
        runs = experiment_runs(uri, experiment, sweep)
        if sweep and len(runs) == 0:
            finished = len(experiment_runs(uri, experiment))
            if finished:
                raise ValueError(f"--sweep: no finished experiment run belongs to sweep {sweep!r} ({finished} finished "
                                 f"experiment run(s) in MLflow experiment {experiment!r} of {uri}, none nested under that run)")
        rows = compare_rows(runs, group_by)
    except (TrackingUnavailable, ValueError) as exc:
        _fail(str(exc))
    if not rows:
        _fail(f"no finished experiment runs in MLflow experiment {experiment!r} of {uri}")
    console = Console(stderr=json_path == "-")
    if not console.is_terminal:
        console = Console(stderr=json_path == "-", width=160)  # a file or pipe: no wrapped cells
    table = Table(title=f"{experiment}: {len({r['task'] for r in rows})} tasks ({uri})")
    with_bound = any(r["x_lower_bound_median"] is not None for r in rows)
    for col in ("task", "settings", "method", "seeds", "step time (s): median [min, max]", "x best baseline: median [min, max]"):
        table.add_column(col, justify="left" if col in ("task", "settings", "method") else "right")
    if with_bound:
        table.add_column("x lower bound", justify="right")

    def f(x, d=4):
        return "-" if x is None else f"{x:.{d}g}"

    for r in rows:
        cells = [r["task"], group_label(r, group_by), r["method"] + (" *" if r["learner"] else ""), str(r["seeds"]),
                 f"{f(r['median_step_time_s'])} [{f(r['min_step_time_s'])}, {f(r['max_step_time_s'])}]",
                 f"{f(r['x_best_baseline_median'], 3)} [{f(r['x_best_baseline_min'], 3)}, {f(r['x_best_baseline_max'], 3)}]"]
        if with_bound:
            cells.append(f(r["x_lower_bound_median"], 3))
        table.add_row(*cells)
    console.print(table)
    console.print("* learner; x best baseline = t(method) / t(best baseline), below 1 is faster; seeds: distinct seeds")
    if json_path:
        _write_json(rows, json_path)
    if markdown:
        Path(markdown).write_text(compare_markdown(rows, group_by) + "\n")


@app.command("log-run")
def log_run(
    run_dir: str = typer.Argument(..., help="a run folder (<out-dir>/runs/...) with results.json"),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (default: the SQLite store of the run's out-dir)"),
) -> None:
    """Log a finished run folder (written with --spool, or while MLflow was down) to MLflow."""
    from tracking.live import TrackingUnavailable, log_run_folder

    try:
        run_id = log_run_folder(run_dir, tracking_uri)
    except (TrackingUnavailable, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"MLflow run {run_id} logged from {run_dir}")
