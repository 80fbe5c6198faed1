"""The ``placement`` command line (typer).

Commands: ``experiment`` (the main job: the ``placement-experiment`` Prefect flow),
``graph-stats``, ``models``, ``clusters``. A bad argument prints one line naming the value
and the valid ones, and exits with code 2. ``--json PATH`` takes ``-`` for standard output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import typer

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, help="Device placement experiments.")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _write_json(obj: dict, path: str) -> None:
    text = json.dumps(obj, indent=2, default=float)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(path).write_text(text + "\n")


def _check_model(model: str, size: str) -> None:
    from compgraph.models import BENCHMARKS

    if model not in BENCHMARKS:
        _fail(f"unknown model {model!r}; valid: {', '.join(BENCHMARKS)}")
    if size not in BENCHMARKS[model].sizes:
        _fail(f"unknown size {size!r} for {model}; valid: {', '.join(BENCHMARKS[model].sizes)}")


@app.command()
def models() -> None:
    """List the benchmark models, one line each."""
    from compgraph.models import BENCHMARKS

    for b in BENCHMARKS.values():
        typer.echo(f"{b.name}\t{b.description}")


@app.command()
def clusters() -> None:
    """List the preset clusters, one line each."""
    from cluster.spec import load_cluster, preset_names

    for name in preset_names():
        typer.echo(f"{name}\t{load_cluster(name).description}")


@app.command("graph-stats")
def graph_stats(
    model: str = typer.Option("rnnlm", help="benchmark name (see `placement models`)"),
    size: str = typer.Option("small", help="small | paper"),
    json_path: str = typer.Option(None, "--json", help="write the stats as JSON to PATH ('-': stdout)"),
) -> None:
    """Op and group counts, total FLOPs and parameter bytes of a model's training step."""
    _check_model(model, size)
    from compgraph.prepare import prepare

    stats = prepare(model, size).stats()
    if json_path:
        _write_json(stats, json_path)
    else:
        for k, v in stats.items():
            typer.echo(f"{k}: {v}")


@app.command()
def experiment(
    model: str = typer.Option("rnnlm", help="benchmark name (see `placement models`)"),
    size: str = typer.Option("small", help="small (demo) | paper (2017 sizes)"),
    cluster: str = typer.Option("k80x2", help="preset name (see `placement clusters`) or a YAML cluster spec"),
    methods: str = typer.Option(",".join(("single_cpu", "single_gpu", "expert", "scotch", "mincut", "rl", "post")), help="comma-separated methods"),
    budget: int = typer.Option(1000, help="placements each learner (rl, post) samples"),
    k: int = typer.Option(8, help="placements per policy update (K) of rl; post uses its paper's 12"),
    seed: int = typer.Option(0, help="seed of the search"),
    env: str = typer.Option("sim", help="measurement environment: sim (simulator) | real (TensorFlow on this machine's devices)"),
    out_dir: str = typer.Option("placement-runs", help="folder for the MLflow store, artifacts and placement logs"),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (default: SQLite file in --out-dir)"),
    json_path: str = typer.Option(None, "--json", help="write the result object to PATH ('-': stdout)"),
) -> None:
    """Run the placement-experiment flow: baselines and RL search, measured and logged to MLflow."""
    from baselines import BASELINES
    from cluster.environment import ENVIRONMENTS
    from cluster.evaluation import LEARNERS
    from cluster.spec import load_cluster

    _check_model(model, size)
    try:
        spec = load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))
    valid = [*BASELINES, *LEARNERS]
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    for m in chosen:
        if m not in valid:
            _fail(f"unknown method {m!r}; valid: {', '.join(valid)}")
    if not chosen:
        _fail(f"--methods is empty; valid: {', '.join(valid)}")
    if budget < 1:
        _fail(f"--budget must be at least 1, got {budget}")
    if k < 1:
        _fail(f"--k must be at least 1, got {k}")
    if env not in ENVIRONMENTS:
        _fail(f"unknown environment {env!r}; valid: {', '.join(ENVIRONMENTS)}")
    if not spec.gpu_indices and any(m in ("single_gpu", "expert", "mincut") for m in chosen):
        _fail(f"cluster {spec.name!r} has no GPU; drop single_gpu, expert and mincut from --methods")

    from flows.experiment import placement_experiment

    start = time.perf_counter()
    result = placement_experiment(
        model=model, size=size, cluster=cluster, methods=chosen, budget=budget, k=k, seed=seed, env=env,
        out_dir=out_dir, tracking_uri=tracking_uri,
    )
    result["wall_time_s"] = time.perf_counter() - start
    _print_table(result, to_stderr=json_path == "-")
    if json_path:
        _write_json(result, json_path)


def _print_table(result: dict, to_stderr: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=to_stderr)
    table = Table(title=f"{result['model']} ({result['size']}, {result['ops']} ops, {result['groups']} groups) on {result['cluster']} [{result['env']}]")
    table.add_column("method")
    table.add_column("step time (s)", justify="right")
    table.add_column("devices used", justify="right")
    for method, row in result["methods"].items():
        t = "OOM" if row["oom"] else ("-" if row["step_time_s"] is None else f"{row['step_time_s']:.5f}")
        table.add_row(method, t, str(len(set(row["placement"].values()))))
    console.print(table)

    def pct(x):
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    for learner, sp in result.get("speedups", {}).items():
        console.print(
            f"speedup of {learner} over the best baseline ({result['best_baseline']}): {pct(sp['over_best_baseline'])}; "
            f"over expert: {pct(sp['over_expert'])}"
        )
    console.print(f"wall time: {result['wall_time_s']:.1f} s; Prefect flow run: {result['prefect_flow_run_id']}")
    console.print(f"MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}")
    from tracking import ui_command

    console.print(f"open the MLflow UI: {ui_command(result['mlflow_tracking_uri'])}", soft_wrap=True)


def main() -> None:
    """Entry point of the ``placement`` command."""
    app()


if __name__ == "__main__":
    main()
