"""The ``placement`` command line (typer).

Commands: ``experiment`` (the main job: the ``placement-experiment`` Prefect flow),
``graph-stats``, ``models``, ``clusters``, and (:mod:`cli.measure`) ``calibrate``,
``fidelity``, ``train``. A bad argument prints one line naming the value
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


def _prepare_graph(
    model: str | None,
    size: str,
    graph_def: str | None,
    keras: str | None,
    grouper: str | None,
    num_groups: int | None,
    cache_dir: str | None,
    seed: int,
):
    """The prepared graph of a benchmark or of a user's GraphDef / Keras model; bad input -> one line, exit 2."""
    from compgraph.prepare import prepare, prepare_user_graph
    from compgraph.user_graph import UserGraphError

    if graph_def is not None and keras is not None:
        _fail("give one of --graph-def and --keras, not both")
    try:
        if graph_def is not None or keras is not None:
            return prepare_user_graph(graph_def_path=graph_def, keras=keras, grouper=grouper or "heuristic",
                                      num_groups=num_groups, seed=seed)
        _check_model(model, size)
        return prepare(model, size, grouper=grouper or "2017", num_groups=num_groups, cache_dir=cache_dir, seed=seed)
    except UserGraphError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(str(exc))


@app.command("graph-stats")
def graph_stats(
    model: str = typer.Option("rnnlm", help="benchmark name (see `placement models`)"),
    size: str = typer.Option("small", help="small | paper (| large for rnnlm, nmt)"),
    graph_def: str = typer.Option(None, "--graph-def", help="a user's training-step GraphDef (.pb or .pbtxt) instead of a benchmark"),
    keras: str = typer.Option(None, "--keras", help="MODULE:FUNCTION returning (keras model, input specs) instead of a benchmark"),
    grouper: str = typer.Option(None, help="grouper of the reported grouping: heuristic | 2017 | metis | fluid (default: 2017 for benchmarks, heuristic for users' graphs)"),
    num_groups: int = typer.Option(256, help="target number of groups of the automatic groupers (metis, fluid)"),
    cache_dir: str = typer.Option(None, help="folder of the preprocessed-graph cache (read if it matches, else written)"),
    json_path: str = typer.Option(None, "--json", help="write the stats as JSON to PATH ('-': stdout)"),
) -> None:
    """Op count, groups per grouper, total FLOPs, parameter bytes and op types without a FLOPs rule."""
    from compgraph.grouping import GROUPERS, grouping_stats

    if num_groups < 1:
        _fail(f"--num-groups must be at least 1, got {num_groups}")
    automatic = grouper in GROUPERS and GROUPERS[grouper].automatic
    prepared = _prepare_graph(model, size, graph_def, keras, grouper, num_groups if automatic else None, cache_dir, 0)
    stats = prepared.stats()
    rule = prepared.benchmark.model_rule if prepared.benchmark is not None else None
    per = grouping_stats(prepared.graph, rule, num_groups)
    stats["colocation_units"] = per.pop("colocation_units")
    stats["groups_per_grouper"] = {k: v for k, v in per.items() if k in GROUPERS}
    stats["num_groups_target"] = per["num_groups_target"]
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
    methods: str = typer.Option(None, help="comma-separated methods (default: every baseline that applies, rl and post)"),
    graph_def: str = typer.Option(None, "--graph-def", help="a user's training-step GraphDef (.pb or .pbtxt) instead of --model"),
    keras: str = typer.Option(None, "--keras", help="MODULE:FUNCTION returning (keras model, input specs) instead of --model"),
    grouper: str = typer.Option(None, help="heuristic | 2017 | metis | fluid (default: 2017 for benchmarks, heuristic for users' graphs)"),
    num_groups: int = typer.Option(None, help="target number of groups for metis and fluid (default 256)"),
    cache_dir: str = typer.Option(None, help="preprocessed-graph cache (default: <out-dir>/graph-cache)"),
    soft_placement: bool = typer.Option(False, "--soft-placement", help="with --env real: move ops that have no kernel on their device to the CPU instead of failing"),
    controllers: int = typer.Option(0, help="rl and post on Ray: this many controllers, workers and a parameter server (2017 Sec. 3.4); 0: in-process"),
    workers: int = typer.Option(0, help="with --controllers: measuring worker actors, one placement each at a time (0: K per controller)"),
    gpus_per_worker: float = typer.Option(0, help="with --controllers: GPUs each worker asks Ray for and sees (--env real on GPUs: the cluster's GPU count)"),
    policy_device: str = typer.Option("cpu", help="with --controllers: cpu | cuda, where controllers run the policy (cuda: one GPU each)"),
    async_updates: bool = typer.Option(False, "--async", help="with --controllers: 2017's asynchronous updates (not reproducible); default: synchronous rounds"),
    ray_address: str = typer.Option(None, help="an existing Ray cluster (auto, host:port or ray://host:port); default: a local Ray on 127.0.0.1"),
    train_steps: int = typer.Option(100, help="training steps of the end-to-end evaluation of the best learned and best baseline placements (projected from the step time when --env sim)"),
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

    user_graph = graph_def is not None or keras is not None
    if graph_def is not None and keras is not None:
        _fail("give one of --graph-def and --keras, not both")
    if not user_graph:
        _check_model(model, size)
    try:
        spec = load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))
    valid = [*BASELINES, *LEARNERS]
    if methods is None:
        chosen = [m for m in valid if not (user_graph and m == "expert")]
        if not spec.gpu_indices:
            chosen = [m for m in chosen if m not in ("single_gpu", "expert", "mincut")]
    else:
        chosen = [m.strip() for m in methods.split(",") if m.strip()]
    for m in chosen:
        if m not in valid:
            _fail(f"unknown method {m!r}; valid: {', '.join(valid)}")
    if not chosen:
        _fail(f"--methods is empty; valid: {', '.join(valid)}")
    if user_graph and "expert" in chosen:
        _fail("method 'expert' needs a benchmark's layer rules; drop it from --methods for --graph-def/--keras")
    if budget < 1:
        _fail(f"--budget must be at least 1, got {budget}")
    if k < 1:
        _fail(f"--k must be at least 1, got {k}")
    if controllers < 0:
        _fail(f"--controllers must be at least 0, got {controllers}")
    if ray_address is not None and controllers == 0:
        _fail("--ray-address needs --controllers 1 or more (the distributed rl search)")
    from cli.distributed import check_distributed_options

    problem = check_distributed_options(controllers, workers, gpus_per_worker, policy_device, async_updates)
    if problem:
        _fail(problem)
    if train_steps < 0:
        _fail(f"--train-steps must be at least 0, got {train_steps}")
    if env not in ENVIRONMENTS:
        _fail(f"unknown environment {env!r}; valid: {', '.join(ENVIRONMENTS)}")
    if not spec.gpu_indices and any(m in ("single_gpu", "expert", "mincut") for m in chosen):
        _fail(f"cluster {spec.name!r} has no GPU; drop single_gpu, expert and mincut from --methods")
    from compgraph.grouping import GROUPERS

    if grouper is not None and grouper not in GROUPERS:
        _fail(f"unknown grouper {grouper!r}; valid: {', '.join(GROUPERS)}")
    if num_groups is not None and num_groups < 1:
        _fail(f"--num-groups must be at least 1, got {num_groups}")
    # Validate the graph before the flow starts (a user's file error is one line, exit 2).
    if user_graph:
        _prepare_graph(model, size, graph_def, keras, grouper, num_groups, None, seed)

    from flows.experiment import placement_experiment

    start = time.perf_counter()
    result = placement_experiment(
        model=model, size=size, cluster=cluster, methods=chosen, budget=budget, k=k, seed=seed, env=env,
        out_dir=out_dir, tracking_uri=tracking_uri, graph_def=graph_def, keras=keras, grouper=grouper,
        num_groups=num_groups, cache_dir=cache_dir, train_steps=train_steps, controllers=controllers,
        ray_address=ray_address, soft_placement=soft_placement, workers=workers, gpus_per_worker=gpus_per_worker,
        policy_device=policy_device, async_updates=async_updates,
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

    for method, tr in (result.get("training") or {}).items():
        kind = "simulated: projected from the simulated step time" if tr["simulated"] else "trained for real"
        console.print(f"end-to-end training, {method}: {tr['steps']} steps in {tr['seconds']:.2f} s ({kind})")
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


from cli import measure  # noqa: E402,F401  (registers calibrate, fidelity, train)

if __name__ == "__main__":
    main()
