"""``placement detect``: the cluster spec of this machine, as YAML ([`cluster.detect`][cluster.detect])."""

from __future__ import annotations

import typer

from cli.common import _fail, app


@app.command("detect")
def detect_command(
    output: str = typer.Option(None, "--output", help="the YAML file to write (default: print the YAML on standard "
                                                      "output, the summary line on standard error)"),
    name: str = typer.Option(None, "--name", help="the cluster's name in the spec (default: detected-<host name>)"),
    cpuinfo: str = typer.Option(None, "--cpuinfo", help="a /proc/cpuinfo-format file to read instead of this "
                                                        "machine's (lscpu and cpufreq are then not consulted)"),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="detect no GPU (torch is not asked)"),
    allow_unknown: bool = typer.Option(False, "--allow-unknown", help="write a GPU that is not in the datasheet table "
                                                                      "(or a CPU without a readable clock or known ISA) "
                                                                      "with estimated figures, flagged in the YAML; "
                                                                      "default: refuse it"),
    force: bool = typer.Option(False, "--force", help="overwrite --output if it exists"),
    host_terms: str = typer.Option("h200x1", "--host-terms", help="the preset whose host CPU and host<->GPU copy terms "
                                   "the spec carries: h200x1 (fitted on real PyTorch steps on a 16-vCPU Xeon host) or "
                                   "k80x2 (the 2017 K80 fit's CPU terms, TensorFlow's, with PyTorch's named copy terms)"),
) -> None:
    """Detect this machine's CPU (model, cores, clock, ISA -> peak FP32 FLOP/s; RAM), GPUs (torch's device
    properties and a datasheet table) and PCIe/NVLink links, and write its cluster spec: a YAML file that
    --cluster loads, every figure with its source (read, datasheet, assumed, carried) in a comment."""
    from pathlib import Path

    from cluster.detect import HOST_PRESETS, DetectError, detect_machine, detected_yaml, summary
    from cluster.spec import ClusterSpec

    if host_terms not in HOST_PRESETS:
        _fail(f"--host-terms {host_terms!r}: valid: {', '.join(HOST_PRESETS)}")

    path = Path(output) if output else None
    if path is not None:
        if path.is_dir():
            _fail(f"--output {output!r} is a folder; give a file path")
        if path.exists() and not force:
            _fail(f"--output {output!r} exists; pass --force to overwrite it")
    try:
        det = detect_machine(cpuinfo_path=cpuinfo or "/proc/cpuinfo", use_gpu=not no_gpu, allow_unknown=allow_unknown)
        text = detected_yaml(det, name, host_terms)
    except DetectError as exc:
        _fail(str(exc))
    except ValueError as exc:  # a preset the carried terms come from does not load
        _fail(f"cannot build the spec: {exc}")
    if path is None:
        typer.echo(text, nl=False)
        typer.echo(f"detected: {summary(det)}", err=True)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        _fail(f"cannot write --output {output!r}: {exc.strerror or type(exc).__name__}")
    try:
        ClusterSpec.from_yaml(path)  # what --cluster will load
    except ValueError as exc:
        _fail(f"the written spec does not load: {exc}")
    typer.echo(f"{path}: {summary(det)}")
