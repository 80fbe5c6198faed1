"""``placement baselines``: every baseline, the lower bound and the optimum on one graph and cluster.

Prints a rich table (method, step time, OOM, devices used, seconds to compute, x lower
bound, x optimum) and, with ``--json PATH``, writes the same ``methods`` shape as
``placement experiment --json`` plus ``seconds``, ``devices_used``, ``lower_bound_s``,
``optimum_s`` and ``optimum_proven``. No Prefect flow, no MLflow run: a quick look.
"""

from __future__ import annotations

import time

import typer

from cli.common import _choose_methods, _fail, _prepare_graph, _write_json, app, max_graph_mb_option
from cli.options import CacheDir, Cluster, GraphDef, Grouper, Json, Keras, Model, NumGroups, OutDir, SavedModel, Signature, Size, Torch, TorchOptimizer


@app.command("baselines")
def baselines_command(
    model: Model = "rnnlm",
    size: Size = "small",
    cluster: Cluster = "k80x2",
    methods: str = typer.Option(None, help="comma-separated baselines (default: every one that applies, optimum included)"),
    graph_def: GraphDef = None,
    keras: Keras = None,
    torch: Torch = None,
    torch_optimizer: TorchOptimizer = "adam",
    saved_model: SavedModel = None,
    signature: Signature = None,
    max_graph_mb: int = max_graph_mb_option(),
    grouper: Grouper = None,
    num_groups: NumGroups = None,
    cache_dir: CacheDir = None,
    out_dir: OutDir = "placement-runs",
    node_limit: int = typer.Option(50, help="the optimum's MILP: branch-and-bound nodes at most (a work limit: the same value on any machine load)"),
    time_limit: float = typer.Option(None, help="an optional wall-clock cap on the optimum (seconds); with it the value may depend on machine load"),
    json_path: Json = None,
) -> None:
    """Run every baseline (and the optimum) on one graph and cluster; measure them in the simulator."""
    from pathlib import Path

    from baselines import BASELINES
    from baselines import applicable_baselines
    from baselines.report import run_baselines
    from cluster.spec import load_cluster
    from compgraph.grouping import GROUPERS

    try:
        spec = load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))
    if grouper is not None and grouper not in GROUPERS:
        _fail(f"unknown grouper {grouper!r}; valid: {', '.join(GROUPERS)}")
    if num_groups is not None and num_groups < 1:
        _fail(f"--num-groups must be at least 1, got {num_groups}")
    if time_limit is not None and time_limit <= 0:
        _fail(f"--time-limit must be positive, got {time_limit}")
    if node_limit < 1:
        _fail(f"--node-limit must be at least 1, got {node_limit}")
    user_graph = any(v is not None for v in (graph_def, keras, saved_model, torch))
    chosen = _choose_methods(methods, list(BASELINES), applicable_baselines(spec, user_graph), spec, user_graph)
    cache = cache_dir or str(Path(out_dir) / "graph-cache")
    prepared = _prepare_graph(model, size, graph_def, keras, grouper, num_groups, cache, 0, saved_model, signature,
                              torch=torch, torch_optimizer=torch_optimizer)
    start = time.perf_counter()
    result = run_baselines(prepared, spec, chosen, time_limit_s=time_limit, node_limit=node_limit)
    result = {"model": prepared.name, "size": prepared.size, "cluster": spec.name, "env": "sim",
              "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups, **result,
              "wall_time_s": time.perf_counter() - start}
    print_baselines_table(result, to_stderr=json_path == "-")
    if json_path:
        _write_json(result, json_path)


def print_baselines_table(result: dict, to_stderr: bool = False) -> None:
    """The rich table of :func:`baselines.report.run_baselines`' result."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=to_stderr)
    table = Table(title=f"{result['model']} ({result['size']}, {result['ops']} ops, {result['groups']} groups) "
                        f"on {result['cluster']} [{result['env']}]")
    for col in ("method", "step time (s)", "devices used", "seconds", "x lower bound", "x optimum"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for method, row in result["methods"].items():
        t = "OOM" if row["oom"] else ("-" if row["step_time_s"] is None else f"{row['step_time_s']:.5f}")
        ratios = ["-" if row.get(k) is None else f"{row[k]:.2f}" for k in ("x_lower_bound", "x_optimum")]
        name = method + (" (ops)" if row.get("op_level") else "")
        table.add_row(name, t, str(row["devices_used"]), f"{row['seconds']:.2f}", *ratios)
    console.print(table)
    lb = result.get("lower_bound_s")
    console.print(f"lower bound: {'-' if lb is None else f'{lb:.5f} s'} ({result['lower_bound_seconds']:.2f} s to compute)")
    if result.get("optimum_s") is not None:
        how = "proven" if result["optimum_proven"] else f"not proven; proven bound {result['optimum_bound_s']:.5f} s"
        console.print(f"optimum: {result['optimum_s']:.5f} s ({result['optimum_method']}, {how})")
    if result.get("reference_note"):
        console.print(result["reference_note"])
    if result.get("best_baseline"):
        console.print(f"best baseline: {result['best_baseline']}")
