"""``placement reproduce``: a paper's table, row by row, beside the paper (:mod:`flows.reproduce`).

Prints per row (model x GPUs) each method's step time under the shipped presets beside the
paper's, the ratio, the held-out prediction (presets fitted without that model), the row's
Kendall tau against the paper's order of methods, and the learners' speedups beside the
paper's Speedup column; then the shares of cells within 1.5x. Bad values print one line
and exit with code 2; ``--json PATH`` takes ``-`` for standard output.
"""

from __future__ import annotations

import typer

from cli.common import _fail, _write_json, app


def _s(v, oom=False) -> str:
    return "OOM" if oom or v is None else f"{v:.2f}"


def _r(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_table(result: dict, console) -> None:
    """The reproduction as rich tables (one per row of the paper's table)."""
    from rich.table import Table

    for row in result["rows"]:
        t = Table(title=f"{row['model']}, {row['gpus']} GPUs: Kendall tau {row['tau']:.2f}"
                        + ("" if row["tau_heldout"] is None else f" (held out {row['tau_heldout']:.2f})"))
        for col in ("method", "paper s", "ours s", "ratio", "held-out s", "held-out ratio"):
            t.add_column(col, justify="left" if col == "method" else "right")
        for meth, c in row["cells"].items():
            t.add_row(meth, _s(c["paper_s"]), _s(c["ours_s"], c["oom"]), _r(c["ratio"]),
                      "-" if c["heldout_oom"] is None else _s(c["heldout_s"], c["heldout_oom"]), _r(c["heldout_ratio"]))
        for lname, lr in row["learners"].items():
            sp = "-" if lr["speedup_pct"] is None else f"{lr['speedup_pct']:.1f}%"
            t.add_row(f"{lname} (speedup {sp}; paper RL {lr['paper_speedup_pct']:.1f}%)", _s(lr["paper_rl_s"]),
                      _s(lr["ours_s"]), _r(None if lr["ours_s"] is None else lr["ours_s"] / lr["paper_rl_s"]), "", "")
        console.print(t)
    sh = result["shipped"]
    console.print(f"shipped presets: {sh['within']}/{sh['cells']} cells within 1.5x of the paper ({100 * sh['share']:.0f}%)")
    if result.get("heldout"):
        h = result["heldout"]
        console.print(f"held out (leave one model out): {h['within']}/{h['cells']} cells within 1.5x ({100 * h['share']:.0f}%)")


@app.command()
def reproduce(
    table: str = typer.Option("2017-table2", help="the paper table: 2017-table2"),
    budget: int = typer.Option(0, help="placements each learner samples per row (0: baselines only)"),
    methods: list[str] = typer.Option(None, help="methods (repeatable); baselines always run; default: all, learners only if budget > 0"),
    models: list[str] = typer.Option(None, help="models (repeatable; default: rnnlm, nmt, inception_v3)"),
    gpus: list[int] = typer.Option(None, help="GPU counts (repeatable; default: 2 and 4)"),
    seed: int = typer.Option(0, help="seed of the searches"),
    out_dir: str = typer.Option("placement-runs", help="output folder (MLflow store, graph cache, logs)"),
    cache_dir: str = typer.Option(None, help="preprocessed-graph cache (default: <out-dir>/graph-cache)"),
    tracking_uri: str = typer.Option(None, help="MLflow tracking URI (default: sqlite:///<out-dir>/mlflow.db)"),
    fit: str = typer.Option(None, help="stored fits for the held-out column (default: cluster/presets/k80_fit.json)"),
    json_path: str = typer.Option(None, "--json", help="write the result as JSON to PATH (- for stdout)"),
) -> None:
    """Reproduce a paper's table of step times: every row, beside the paper, logged to MLflow."""
    from rich.console import Console

    from cluster.reproduce import MODELS
    from flows.reproduce import METHODS, TABLES

    if table not in TABLES:
        _fail(f"unknown --table {table!r}; valid: {', '.join(TABLES)}")
    if budget < 0:
        _fail(f"--budget must be at least 0, got {budget}")
    for m in models or []:
        if m not in MODELS:
            _fail(f"unknown --models {m!r}; valid: {', '.join(MODELS)}")
    for g in gpus or []:
        if g not in (2, 4):
            _fail(f"unknown --gpus {g}; valid: 2, 4")
    for m in methods or []:
        if m not in METHODS:
            _fail(f"unknown --methods {m!r}; valid: {', '.join(METHODS)}")
    from flows.reproduce import placement_reproduce

    result = placement_reproduce(table=table, models=list(models or MODELS), gpus=list(gpus or [2, 4]),
                                 methods=list(methods or METHODS), budget=budget, seed=seed, out_dir=out_dir,
                                 cache_dir=cache_dir, tracking_uri=tracking_uri, fit_path=fit)
    console = Console(stderr=json_path == "-")
    print_table(result, console)
    console.print(f"MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}", soft_wrap=True)
    if json_path:
        _write_json(result, json_path)
