"""``placement evaluate``: the step time of one given placement (an op -> device JSON file, or every
op on one device), measured in the simulator, for real or in grappler ([`tracking.evaluate`][tracking.evaluate])."""

from __future__ import annotations

import typer

from cli.common import _fail, _prepare_graph, _write_json, app, max_graph_mb_option, parse_int_bounds
from cli.options import CacheDir, Cluster, Env, IntBound, Json, OutDir, graph_flags


REAL_FLAGS = {"repeats": "--repeats", "warmup": "--warmup", "seed": "--seed", "threads": "--threads",
              "time_limit_s": "--time-limit", "soft_placement": "--soft-placement", "isolate": "--isolate",
              "host_memory": "--host-memory"}
"""The [`cluster.environment.EnvOptions`][cluster.environment.EnvOptions] field each ``--env real`` flag sets."""

TF_ONLY = ("soft_placement",)
"""Real options only TensorFlow's real environment reads ([`cluster.real.RealEnvironment`][cluster.real.RealEnvironment])."""

TORCH_ONLY = ("threads", "time_limit_s", "isolate", "host_memory")
"""Real options only a PyTorch step's real environment reads (TensorFlow's would ignore them)."""


def is_torch_step(prepared) -> bool:
    """True for a prepared PyTorch step ([`cluster.torch_real.is_torch_step`][cluster.torch_real.is_torch_step]; without that module, a
    graph with no TensorFlow GraphDef)."""
    try:
        from cluster.torch_real import is_torch_step as torch_step
    except ImportError:
        return getattr(prepared, "graph_def", None) is None
    return bool(torch_step(prepared))


def real_options(given: dict, torch_step: bool) -> dict:
    """The [`cluster.environment.EnvOptions`][cluster.environment.EnvOptions] dict of the ``--env real`` flags the user gave
    (``given``: field -> value, ``None`` when not given): only those. For a TensorFlow graph, whose real
    environment runs ``steps`` steps and drops the first ``warmup``, ``repeats`` (timed steps) becomes
    ``steps`` = warm-up + repeats, with the warm-up made explicit (given, else
    [`cluster.real.RealEnvironment`][cluster.real.RealEnvironment]'s default).

    Raises:
        ValueError: a flag the graph's real environment would ignore (names the flag).
    """
    opts = {k: v for k, v in given.items() if v is not None}
    kind, ignored = ("a PyTorch step", TF_ONLY) if torch_step else ("a TensorFlow graph", TORCH_ONLY)
    extra = [REAL_FLAGS[k] for k in ignored if k in opts]
    if extra:
        raise ValueError(f"{', '.join(extra)}: not for {kind} (its real environment does not read it)")
    if not torch_step and "repeats" in opts:
        import inspect

        from cluster.real import RealEnvironment

        warmup = opts.get("warmup", inspect.signature(RealEnvironment).parameters["warmup"].default)
        opts["warmup"], opts["steps"] = warmup, warmup + opts.pop("repeats")
    return opts


@app.command("evaluate")
@graph_flags()
def evaluate_command(
    placement: str = typer.Option(..., "--placement", help="FILE: the op -> device JSON of `placement export --format "
                                                           "json` ({\"devices\": {op: device}}, every op of the graph); "
                                                           "or single:DEVICE, every op on DEVICE (e.g. single:/gpu:0)"),
    cluster: Cluster = ...,
    env: Env = "sim",
    source=None,
    max_graph_mb: int = max_graph_mb_option(),
    int_bound: IntBound = None,
    repeats: int = typer.Option(None, help="with --env real: steps measured after the warm-up (default: the "
                                           "environment's)"),
    warmup: int = typer.Option(None, help="with --env real: steps run first and not measured (default: the environment's)"),
    seed: int = typer.Option(None, help="with --env real: seed of the synthetic inputs (default 0)"),
    threads: int = typer.Option(None, help="with --env real, a PyTorch step: torch threads while measuring (default: as set)"),
    time_limit: float = typer.Option(None, help="with --env real, a PyTorch step: seconds a step may take before the placement fails"),
    soft_placement: bool = typer.Option(False, "--soft-placement", help="with --env real, a TensorFlow graph: move ops that "
                                                                       "have no kernel on their device to the CPU instead of failing"),
    isolate: bool = typer.Option(False, "--isolate", help="with --env real, a PyTorch step: measure in a process of its own"),
    host_memory: str = typer.Option(None, "--host-memory", help="with --env real, a PyTorch step: default | reuse "
                                                                "(glibc keeps freed host memory)"),
    cache_dir: CacheDir = None,
    out_dir: OutDir = None,
    json_path: Json = None,
) -> None:
    """Measure one given placement's step time (seconds), OOM and peak memory per device. Ops are placed
    as TensorFlow colocation units: a placement that splits one is refused."""
    from pathlib import Path

    from cluster.environment import ENVIRONMENTS
    from cluster.spec import load_cluster
    from tracking.evaluate import EvaluateError, check_device, evaluate_placement, origin_note, read_placement, summary_line

    if env not in ENVIRONMENTS:
        _fail(f"unknown --env value {env!r}; valid: {', '.join(ENVIRONMENTS)}")
    try:
        spec = load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))
    given = {"repeats": repeats, "warmup": warmup, "seed": seed, "threads": threads, "time_limit_s": time_limit,
             "soft_placement": True if soft_placement else None, "isolate": True if isolate else None,
             "host_memory": host_memory}
    if env != "real":
        extra = [REAL_FLAGS[k] for k, v in given.items() if v is not None]
        if extra:
            _fail(f"{', '.join(extra)}: only with --env real (--env {env} measures no steps)")
    for name, value, least in (("--repeats", repeats, 1), ("--warmup", warmup, 0), ("--threads", threads, 1)):
        if value is not None and value < least:
            _fail(f"{name} must be at least {least}, got {value}")
    if time_limit is not None and not time_limit > 0:
        _fail(f"--time-limit must be positive, got {time_limit}")
    from cluster.torch_real import HOST_MEMORY

    if host_memory is not None and host_memory not in HOST_MEMORY:
        _fail(f"unknown --host-memory value {host_memory!r}; valid: {' or '.join(map(repr, HOST_MEMORY))}")
    try:
        placed, origin = read_placement(placement)
        if isinstance(placed, str):
            check_device(placed, spec.device_names, repr(spec.name))
    except EvaluateError as exc:
        _fail(str(exc))
    from compgraph.frontends import environment_problem, is_user_graph

    problem = environment_problem(source, env)
    if problem:
        _fail(f"--{problem}")
    prepared = _prepare_graph(source, None, None, cache_dir or str(Path(out_dir) / "graph-cache"), 0,
                              parse_int_bounds(int_bound, is_user_graph(source)), env)
    note = origin_note(placement, origin, prepared.name, spec.name)
    if note:
        typer.echo(note, err=True)
    try:
        options = real_options(given, is_torch_step(prepared)) if env == "real" else {}
        result = evaluate_placement(prepared, spec, env, placed, options or None)
    except ValueError as exc:  # EvaluateError, an environment's option or placement error (PlacementError...)
        _fail(str(exc))
    result = {"model": prepared.name, "size": prepared.size, "cluster": spec.name, "env": env, "placement": placement,
              "options": options, **result}
    line = summary_line(result)
    typer.echo(line, err=json_path == "-")
    if json_path:
        _write_json(result, json_path)
