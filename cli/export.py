"""``placement export``: one method's placement of a finished run, per op, as JSON, a TensorFlow GraphDef
or a placed ``torch.fx`` step. A run is a record, not a program: nothing it names is imported; ``tf`` and
``torch`` take the graph's source from this command line ([`tracking.export`][tracking.export])."""

from __future__ import annotations

import typer

from cli.common import _fail, app, out_dir_or_home
from cli.options import TrackingUri, graph_flags


@app.command("export")
@graph_flags(optional=True)
def export_command(
    run: str = typer.Argument(..., help="a run folder (runs/<stamp>-...) or the experiment's MLflow run id"),
    method: str = typer.Option(..., help="the method whose placement to export (a baseline or a learner of the run)"),
    fmt: str = typer.Option("json", "--format", help="json (op -> device, every method; read from the run's record "
                                                     "only) | tf (the GraphDef with device fields, which TensorFlow "
                                                     "imports and runs) | torch (a Python file: the captured step's "
                                                     "torch.fx code, placed, with the transfers inserted); tf and torch "
                                                     "need the graph's source on this command line"),
    output: str = typer.Option(None, "--output", help="the file to write (default: <method>-placement.json, .pb or .py "
                                                      "in the current folder); its folder must exist, and not be a run "
                                                      "folder nor the out-dir's runs/"),
    force: bool = typer.Option(False, "--force", help="replace --output if it exists"),
    device_map: str = typer.Option(None, help="SPEC_DEVICE=TARGET,...: the target machine's device names, e.g. "
                                              "/gpu:0=/device:GPU:2 (default: /gpu:K -> /device:GPU:K for tf)"),
    source=None,
    out_dir: str = typer.Option(None, callback=out_dir_or_home, help="folder whose SQLite MLflow store is read for a "
                                "run id (an existing one only; default: $PLACEMENT_HOME, else the user data folder); "
                                "--output may not go into its runs/"),
    tracking_uri: TrackingUri = None,
    cache_dir: str = typer.Option(None, help="preprocessed-graph cache of benchmarks (default: <out-dir>/graph-cache)"),
) -> None:
    """Export one method's placement of a finished experiment at op level: the JSON op -> device map
    (group methods expanded to their ops), the step's TensorFlow GraphDef with each node's device
    set, or a PyTorch step's placed torch.fx code with the transfers inserted. The run's record
    (export.json) is read as data; tf and torch prepare the graph from the source given here
    (--model/--size, --graph-def, --saved-model, --keras or --torch), which must be the graph the run
    placed (its recorded hash), and are refused without one."""
    from pathlib import Path

    from cli.common import _check_model
    from tracking import default_tracking_uri
    from tracking.export import FORMATS, ExportError, check_output, export_placement, parse_device_map

    if fmt not in FORMATS:
        _fail(f"--format: unknown {fmt!r}; valid: {', '.join(FORMATS)}")
    if output is None:  # the method's name comes from the run's record (data): one safe component, here
        from compgraph.paths import UnsafePath, inside, slug

        out = f"{slug(method)}-placement.{ {'tf': 'pb', 'torch': 'py'}.get(fmt, 'json')}"
        try:
            inside(Path.cwd(), out)
        except UnsafePath as exc:
            _fail(f"--output: {exc}")
    else:
        out = output
    try:
        check_output(out, force, run, out_dir)  # before any work
        dmap = parse_device_map(device_map)
    except ExportError as exc:
        _fail(str(exc))
    if source is not None and source.kind == "benchmark":
        _check_model(source.model, source.size)
    try:
        done = export_placement(run, method, fmt, out, dmap, tracking_uri or default_tracking_uri(out_dir),
                                cache_dir or str(Path(out_dir) / "graph-cache"), source, force, out_dir)
    except ExportError as exc:
        _fail(str(exc))
    per_device = ", ".join(f"{d} {n}" for d, n in sorted(done["devices"].items()))
    typer.echo(f"{done['path']}: {done['method']}, {done['ops']} ops ({per_device})"
               + (f"; fetches {', '.join(done['fetches'])}" if fmt == "tf" else ""))
