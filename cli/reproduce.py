"""``placement reproduce``: a paper's table, row by row, beside the paper ([`flows.reproduce`][flows.reproduce]).

Prints per row (model x GPUs) each method's step time under the shipped presets beside the
paper's, the ratio, the held-out prediction (presets fitted without that model), the row's
Kendall tau against the paper's order of methods, and the learners' speedups beside the
paper's Speedup column; then the shares of cells within 1.5x. Bad values print one line
and exit with code 2; ``--json PATH`` takes ``-`` for standard output.
"""

from __future__ import annotations

import typer

from cli.common import _fail, _write_json, app
from cli.options import CacheDir, Json, OutDir, TrackingUri


def _s(v, oom=False) -> str:
    return "OOM" if oom or v is None else f"{v:.2f}"


def _r(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_table(result: dict, console) -> None:
    """The reproduction as rich tables: one per row of the papers' tables, then per table the shares
    of cells within 1.5x, the rows whose fastest baseline is the paper's, and the fitted parameters."""
    from rich.table import Table

    for row in result["rows"]:
        held = row["tau_heldout"] is not None
        title = (f"{row['table']}: {row['label'] or row['model']} ({row['model']} {row['size']}) on {row['cluster']}: "
                 f"fastest {row['winner']} (paper {row['paper_winner']}), Kendall tau {row['tau']:.2f}"
                 + (f" (held out {row['tau_heldout']:.2f})" if held else ""))
        t = Table(title=title)
        for col in ("method", "paper s", "ours s", "ratio", *(("held-out s", "held-out ratio") if held else ())):
            t.add_column(col, justify="left" if col == "method" else "right")
        for meth, c in row["cells"].items():
            cols = [meth + ("" if c["counted"] else " (2-GPU line)"), _s(c["paper_s"]), _s(c["ours_s"], c["oom"]),
                    _r(c["ratio"])]
            if held:
                cols += ["-" if c["held_out_oom"] is None else _s(c["held_out_s"], c["held_out_oom"]), _r(c["held_out_ratio"])]
            t.add_row(*cols)
        for lname, lr in row["learners"].items():
            sp = "-" if lr["speedup_pct"] is None else f"{lr['speedup_pct']:.1f}%"
            psp = "-" if lr["paper_speedup_pct"] is None else f"{lr['paper_speedup_pct']:.1f}%"
            t.add_row(f"{lname} (learner; ours {sp}, paper {psp} over the best baseline)", _s(lr["paper_s"]),
                      _s(lr["ours_s"]), _r(None if lr["ours_s"] is None or not lr["paper_s"] else lr["ours_s"] / lr["paper_s"]),
                      *(("", "") if held else ()))
        console.print(t)
    for table, sm in result["summary"].items():
        sh, w, o = sm["shipped"], sm["winners"], sm["oom"]
        line = (f"{table}: {sh['within']}/{sh['cells']} cells within 1.5x of the paper ({100 * (sh['share'] or 0):.0f}%), "
                f"fastest baseline as the paper's in {w['matched']}/{w['rows']} rows, OOM right in {o['right']}/{o['cells']}")
        bs = sm.get("beyond_serial")
        if bs and bs["of"]:
            line += (f"; {bs['cells']}/{bs['of']} split cells more than 1.5x slower in the paper than ours with "
                     "every transfer in series")
        if sm.get("heldout"):
            h, wh = sm["heldout"], sm["winners_heldout"]
            line += (f"; held out: {h['within']}/{h['cells']} cells ({100 * (h['share'] or 0):.0f}%), "
                     f"fastest baseline in {wh['matched']}/{wh['rows']} rows")
        console.print(line)
    pt = Table(title="fitted parameters (shipped presets) and their physical bounds")
    for col in ("parameter", "value", "lower", "upper", "on a bound"):
        pt.add_column(col, justify="left" if col == "parameter" else "right")
    for p in result["parameters"]:
        pt.add_row(p["name"], f"{p['value']:.4g}", f"{p['lower']:.4g}", f"{p['upper']:.4g}", result["on_bound"].get(p["name"], ""))
    console.print(pt)


@app.command()
def reproduce(
    table: str = typer.Option("2017-table2", help="the paper table: 2017-table2 | post-table1 | eagle-table4 | all"),
    budget: int = typer.Option(0, help="placements each learner samples per row (0: baselines only)"),
    methods: list[str] = typer.Option(None, help="learners searched on each row when --budget > 0 (repeatable; default: the table's learner columns)"),
    models: list[str] = typer.Option(None, help="only these models' rows (repeatable; default: every row)"),
    gpus: list[int] = typer.Option(None, help="only rows with these GPU counts (repeatable; default: every row)"),
    seed: int = typer.Option(0, help="seed of the searches"),
    size: str = typer.Option(None, help="a benchmark size for every row instead of the table's (e.g. small: a quick check, not comparable)"),
    out_dir: OutDir = None,
    cache_dir: CacheDir = None,
    tracking_uri: TrackingUri = None,
    fit: str = typer.Option(None, help="stored fits for 2017's held-out column (default: cluster/presets/k80_fit.json)"),
    json_path: Json = None,
) -> None:
    """Reproduce the papers' tables of step times (2017 Table 2, Post Table 1, EAGLE Table IV): every
    row's baselines at the table's settings on its machine, beside the paper, logged to MLflow."""
    from rich.console import Console

    from tasks.choices import TABLE_MODELS
    from flows.reproduce import METHODS, TABLES

    if table not in TABLES:
        _fail(f"unknown --table {table!r}; valid: {', '.join(TABLES)}")
    if budget < 0:
        _fail(f"--budget must be at least 0, got {budget}")
    for m in models or []:
        if m not in TABLE_MODELS:
            _fail(f"unknown --models {m!r}; valid: {', '.join(TABLE_MODELS)}")
    for g in gpus or []:
        if g not in (2, 4, 8):
            _fail(f"unknown --gpus {g}; valid: 2, 4, 8")
    for m in methods or []:
        if m not in METHODS:
            _fail(f"unknown --methods {m!r}; valid: {', '.join(METHODS)}")
    if methods and budget == 0:
        _fail(f"--methods {','.join(methods)}: learners search only with --budget > 0 (--budget 0: baselines only)")
    if size is not None:
        from compgraph.models import BENCHMARKS

        sizes = sorted({s for b in BENCHMARKS.values() for s in b.sizes})
        if size not in sizes:
            _fail(f"unknown --size {size!r}; valid: {', '.join(sizes)}")
    if fit is not None:
        from cluster.reproduce import load_fit

        try:
            load_fit(fit, required=True)
        except ValueError as exc:
            _fail(str(exc))
    from cli.runtime import preflight

    preflight(out_dir, tracking_uri, False, _fail)  # writable out-dir, MLflow answering: before any work
    from flows.reproduce import placement_reproduce, select_rows

    try:
        select_rows(table, list(models or []), list(gpus or []))
    except ValueError as exc:
        _fail(str(exc))
    result = placement_reproduce(table=table, models=list(models or []), gpus=list(gpus or []),
                                 methods=list(methods or []), budget=budget, seed=seed, out_dir=out_dir,
                                 cache_dir=cache_dir, tracking_uri=tracking_uri, fit_path=fit, size=size)
    console = Console(stderr=json_path == "-")
    print_table(result, console)
    console.print(f"MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}", soft_wrap=True)
    if json_path:
        _write_json(result, json_path)
