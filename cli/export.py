"""``placement export``: one method's placement of a finished run, per op, as JSON, a TensorFlow GraphDef
or a placed ``torch.fx`` step."""

from __future__ import annotations

import typer

from cli.common import _fail, app
from cli.options import TrackingUri


@app.command("export")
def export_command(
    run: str = typer.Argument(..., help="a run folder (runs/<stamp>-...) or the experiment's MLflow run id"),
    method: str = typer.Option(..., help="the method whose placement to export (a baseline or a learner of the run)"),
    fmt: str = typer.Option("json", "--format", help="json (op -> device, every method) | tf (the GraphDef with "
                                                     "device fields, which TensorFlow imports and runs) | torch (a "
                                                     "Python file: the captured step's torch.fx code, placed, with "
                                                     "the transfers inserted)"),
    output: str = typer.Option(None, "--output", help="the file to write (default: <method>-placement.json or .pb "
                                                      "in the current folder)"),
    device_map: str = typer.Option(None, help="SPEC_DEVICE=TARGET,...: the target machine's device names, e.g. "
                                              "/gpu:0=/device:GPU:2 (default: /gpu:K -> /device:GPU:K for tf)"),
    out_dir: str = typer.Option("placement-runs", help="folder whose SQLite MLflow store is read for a run id"),
    tracking_uri: TrackingUri = None,
    cache_dir: str = typer.Option(None, help="preprocessed-graph cache of benchmarks (default: <out-dir>/graph-cache)"),
) -> None:
    """Export one method's placement of a finished experiment at op level: the JSON op -> device map
    (group methods expanded to their ops), the step's TensorFlow GraphDef with each node's device
    set, or a PyTorch step's placed torch.fx code with the transfers inserted."""
    from pathlib import Path

    from tracking import default_tracking_uri
    from tracking.export import ExportError, export_placement, parse_device_map

    out = output or f"{method}-placement.{ {'tf': 'pb', 'torch': 'py'}.get(fmt, 'json')}"
    try:
        done = export_placement(run, method, fmt, out, parse_device_map(device_map),
                                tracking_uri or default_tracking_uri(out_dir),
                                cache_dir or str(Path(out_dir) / "graph-cache"))
    except ExportError as exc:
        _fail(str(exc))
    per_device = ", ".join(f"{d} {n}" for d, n in sorted(done["devices"].items()))
    typer.echo(f"{done['path']}: {done['method']}, {done['ops']} ops ({per_device})"
               + (f"; fetches {', '.join(done['fetches'])}" if fmt == "tf" else ""))
