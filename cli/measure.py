"""The measurement commands of ``placement``: ``calibrate``, ``fidelity``, ``train``.

Each runs a Prefect flow of [`flows.measure`][flows.measure]; ``fidelity`` and ``train`` log one MLflow
run (experiments ``placement-fidelity`` and ``placement-training``). Bad values print one
line naming the value and the valid ones and exit with code 2, as the other commands do.
``--json PATH`` takes ``-`` for standard output (the human-readable lines then go to stderr).
"""

from __future__ import annotations

import time

import typer

from cli.common import _check_model, _fail, _prepare_graph, _write_json, app, max_graph_mb_option, parse_int_bounds
from cli.options import IntBound, Json, OutDir, Size, TrackingUri, graph_flags
from cli.runtime import preflight, run_flow


def _load_spec(cluster: str):
    from cluster.spec import load_cluster

    try:
        return load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))


def _check_at_least(option: str, value: int, least: int, why: str = "") -> None:
    if value < least:
        _fail(f"{option} must be at least {least}{why}, got {value}")


def _check_cost_table(path: str, model: str, size: str, spec) -> None:
    """Fail (exit 2) if ``path`` is not a cost table, or one measured for another model, size or cluster."""
    from cluster.calibrate import CostTable

    try:
        table = CostTable.load(path)
    except ValueError as exc:
        _fail(f"--cost-table: {exc}")
    for field, want in (("model", model), ("size", size), ("cluster", spec.name)):
        got = getattr(table, field)
        if got and got != want:
            _fail(f"--cost-table {path}: measured for {field} {got!r}, not {want!r}; calibrate with "
                  f"`placement calibrate --model {model} --size {size} --cluster {spec.name}`")


def _console(json_path: str | None):
    from rich.console import Console

    return Console(stderr=json_path == "-")


def _mlflow_lines(console, result: dict) -> None:
    from tracking import runs_page, ui_command

    console.print(f"MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}", soft_wrap=True)
    console.print(f"open the MLflow UI: {ui_command(result['mlflow_tracking_uri'])}", soft_wrap=True)
    page = runs_page(result["mlflow_tracking_uri"], result["mlflow_run_id"])
    if page:
        console.print(f"the runs table: {page}", soft_wrap=True)


def _check_tensorflow_benchmark(model: str, command: str) -> None:
    """Refuse a PyTorch benchmark for a command that runs TensorFlow (one line, exit 2)."""
    from compgraph.frontends import BenchmarkSource, framework_of

    if framework_of(BenchmarkSource(model=model)) != "tf":
        _fail(f"--model {model!r}: a PyTorch step, which has no TensorFlow GraphDef; `placement {command}` runs "
              "TensorFlow (real or grappler), so it takes a TensorFlow benchmark")


def _calibrate_torch(from_profile: str | None, cluster: str, output: str | None, holdout: str | None,
                    json_path: str | None, copies_from: str | None = None, profile_dir: str | None = None) -> None:
    """``calibrate --torch``: fit ``cluster``'s cost-model terms to PyTorch profiles ([`cluster.torch_calibrate`][cluster.torch_calibrate])
    and write the fitted preset YAML with its provenance. Without ``from_profile`` the profiles are taken here
    first ([`cluster.torch_profile.collect`][cluster.torch_profile.collect], about a minute on one GPU) into ``profile_dir``."""
    if not output:
        _fail("--torch: give --output PRESET.yaml (the fitted preset is written there)")
    if from_profile and profile_dir:
        _fail("--profile-dir is where a live profile is written; with --from-profile nothing is profiled")
    from pathlib import Path

    from cluster import torch_calibrate as tc
    from cluster.spec import PRESET_DIR, preset_names

    name = Path(output).stem  # the fitted spec is named by its file: a run on it is not labelled as the base preset's
    own = Path(output).resolve() == (PRESET_DIR / f"{name}.yaml").resolve() and cluster == name  # refitting a preset
    if name in preset_names() and not own:
        _fail(f"--output {output}: the fitted spec takes its file's name, and {name!r} is a preset's; give the "
              "file a name of its own")

    if holdout is not None and holdout not in tc.PROFILE_MODELS:
        _fail(f"--holdout {holdout!r}: valid: {', '.join(tc.PROFILE_MODELS)}")
    base = _load_spec(cluster)
    if not from_profile:
        from_profile = _profile_live(profile_dir, output, json_path)
    try:
        prof = tc.load_profile(from_profile, copies_from)
        spec, report = tc.fit_from_profile(from_profile, base, holdout=holdout, copies_from=copies_from)
    except ValueError as exc:
        _fail(f"--copies-from: {exc}" if copies_from and "copies_from" in str(exc) else f"--from-profile: {exc}")
    spec = spec.model_copy(update={"name": name})
    Path(output).write_text(tc.calibrated_yaml(spec, report, prof.env, str(from_profile)))
    from cluster.spec import ClusterSpec

    ClusterSpec.from_yaml(output)  # what was written loads
    rows = tc.fidelity_rows(from_profile, spec, report["fit_models"], copies=False)
    console = _console(json_path)
    for r in rows:
        console.print(f"{r['figure']}: simulated {r['simulated']:.4g} {r['unit']}, measured {r['measured']:.4g} "
                      f"{r['unit']} ({r['set']})", soft_wrap=True)
    console.print(f"fitted preset written to {output}", soft_wrap=True)
    if json_path:
        _write_json({"path": str(output), "values": report["values"], "fit_models": report["fit_models"],
                     "holdout": holdout, "rows": rows}, json_path)


def _profile_live(profile_dir: str | None, output: str, json_path: str | None) -> str:
    """Profile this machine's GPU and host ([`cluster.torch_profile.collect`][cluster.torch_profile.collect]) into ``profile_dir``
    (default: ``<output without .yaml>-profile`` beside the preset); returns the folder."""
    from pathlib import Path

    import torch

    if not torch.cuda.is_available():
        _fail("--torch: no CUDA device here to profile; give --from-profile DIR (profiles taken on the GPU machine "
              "with `python -m cluster.torch_profile DIR`, or the shared format)")
    out = Path(profile_dir) if profile_dir else Path(output).with_name(Path(output).stem + "-profile")
    if out.exists() and any(out.iterdir()):
        _fail(f"--profile-dir {str(out)!r} exists and is not empty; give an empty or new folder")
    from cluster.torch_profile import collect

    console = _console(json_path)
    console.print(f"profiling this machine into {out} (GPT-2 small and ResNet-50 steps, copies; about a minute)",
                  soft_wrap=True)
    try:
        collect(out)
    except RuntimeError as exc:
        _fail(f"--torch: {exc}")
    return str(out)


@app.command()
def calibrate(
    model: str = typer.Option(None, help="benchmark name (see `placement models`); not with --torch"),
    size: Size = "small",
    cluster: str = typer.Option(..., help="preset name (see `placement clusters`) or a YAML cluster spec; with --torch "
                                "the base spec whose terms are fitted"),
    steps: int = typer.Option(5, help="traced steps per device kind; the first is dropped (>= 2)"),
    seed: int = typer.Option(0, help="seed of the synthetic inputs"),
    out: str = typer.Option(None, help="cost-table file (default <home>/cost-tables/<model>-<size>-<cluster>.json; <home>: "
                                              "$PLACEMENT_HOME, else the user data folder)"),
    json_path: Json = None,
    torch_profile: bool = typer.Option(False, "--torch", help="fit the cluster's cost-model terms to PyTorch profiles "
                                       "(--from-profile, else profiled here on the GPU) and write a preset (--output) "
                                       "instead of a cost table"),
    from_profile: str = typer.Option(None, "--from-profile", help="with --torch: a folder of PyTorch profiles "
                                     "(shared format: steps.json, prof_<model>_shapes.json, cpuprof_<model>.json, copies.json)"),
    output: str = typer.Option(None, "--output", help="with --torch: the fitted preset YAML to write; the spec is named by the file (fitted.yaml: fitted), not a preset's name"),
    profile_dir: str = typer.Option(None, "--profile-dir", help="with --torch and no --from-profile: where this "
                                    "machine's live profile is written (default: <output>-profile beside the preset)"),
    holdout: str = typer.Option(None, "--holdout", help="with --torch: a profiled model left out of the fit (gpt2 | resnet50)"),
    copies_from: str = typer.Option(None, "--copies-from", help="with --torch: a copies.json (the profile format) to fit "
                                    "the host<->GPU copy terms on instead of the profile's own; its to_cuda_new and "
                                    "to_cpu_new rows, the copies a placed step makes, are used where present"),
) -> None:
    """Profile each op's real time per device kind from TensorFlow step stats (FULL_TRACE) and save the cost table;
    with --torch, fit a cluster preset to PyTorch profiles instead."""
    if torch_profile:
        if model is not None or out is not None:
            _fail(f"--{'model' if model is not None else 'out'} {model if model is not None else out}: for a TensorFlow "
                  "cost table, not with --torch (it fits its own calibration models' profiles and writes --output)")
        _calibrate_torch(from_profile, cluster, output, holdout, json_path, copies_from, profile_dir)
        return
    if from_profile or output or holdout or copies_from or profile_dir:
        _fail("--from-profile, --output, --holdout, --copies-from and --profile-dir are for --torch")
    if model is None:
        _fail("give --model (a TensorFlow benchmark), or --torch --from-profile DIR for PyTorch profiles")
    _check_model(model, size)
    _check_tensorflow_benchmark(model, "calibrate")
    _load_spec(cluster)
    _check_at_least("--steps", steps, 2, " (the first traced step is dropped)")
    from flows.measure import placement_calibrate

    start = time.perf_counter()
    result = run_flow(placement_calibrate, _fail, model=model, size=size, cluster=cluster, steps=steps, seed=seed, out=out)
    result["wall_time_s"] = time.perf_counter() - start
    console = _console(json_path)
    devices = ", ".join(f"{k} on {v}" for k, v in result["devices"].items())
    console.print(f"coverage: {100 * result['coverage']:.1f}% ({result['measured_ops']} of {result['ops']} ops measured; {devices})")
    console.print(f"cost table saved to {result['path']}", soft_wrap=True)
    console.print(f"wall time: {result['wall_time_s']:.1f} s")
    if json_path:
        _write_json(result, json_path)


def _fmt(x, digits: int = 5) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _print_fidelity(result: dict, json_path: str | None) -> None:
    from rich.table import Table

    console = _console(json_path)
    table = Table(title=f"fidelity: {result['model']} ({result['size']}, {result['ops']} ops, {result['groups']} groups) on {result['cluster']}")
    table.add_column("placement", no_wrap=True)
    table.add_column("kind")
    table.add_column("devs", justify="right")
    table.add_column("sim (s)", justify="right")
    table.add_column("calib. (s)", justify="right")
    ref = result.get("against", "real")
    table.add_column(f"{ref} (s)", justify="right")
    table.add_column(f"{ref} std", justify="right")
    for r in result["rows"]:  # sim: roofline simulator; calib.: calibrated; real std: seconds
        real = "OOM" if r["real_oom"] else _fmt(r["real_s"])
        table.add_row(r["name"], r["kind"], str(r["devices_used"]), _fmt(r["sim_s"]), _fmt(r["sim_calibrated_s"]),
                      real, _fmt(r["real_std_s"]))
    console.print(table)

    def tau(x):
        return "n/a" if x is None else f"{x:+.3f}"

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    vs = f" against {ref}" if ref != "real" else ""
    console.print(f"roofline simulator{vs}:   Kendall tau {tau(result['kendall_tau'])}, MAPE {pct(result['mape'])}")
    if result.get("n_gpu_only"):
        console.print(f"  GPU-only placements ({result['n_gpu_only']}): Kendall tau {tau(result['kendall_tau_gpu_only'])}, "
                      f"MAPE {pct(result['mape_gpu_only'])}")
    if result["cost_table"]:
        console.print(f"calibrated simulator{vs}: Kendall tau {tau(result['kendall_tau_calibrated'])}, "
                      f"MAPE {pct(result['mape_calibrated'])}")
        console.print(f"{result['n']} placements compared; cost table {result['cost_table']} "
                      f"(coverage {100 * result['coverage']:.1f}%)", soft_wrap=True)
    else:
        console.print(f"{result['n']} placements compared; no cost table (roofline only)")
    console.print(f"wall time: {result['wall_time_s']:.1f} s; Prefect flow run: {result['prefect_flow_run_id']}")
    _mlflow_lines(console, result)


@app.command()
def fidelity(
    model: str = typer.Option(..., help="benchmark name (see `placement models`)"),
    size: Size = "small",
    cluster: str = typer.Option(..., help="preset name or YAML spec; placements run for real on this machine's devices"),
    random: int = typer.Option(8, help="random placements (seeded) besides the baselines and learners"),
    steps: int = typer.Option(10, help="real steps per placement; the first is dropped (2017 Sec. 3.4; >= 2)"),
    seed: int = typer.Option(0, help="seed of the random placements, searches and synthetic inputs"),
    cost_table: str = typer.Option(None, help="a saved cost table (`placement calibrate`); default: calibrate first"),
    calibrate_steps: int = typer.Option(5, help="traced steps per device kind when calibrating first (>= 2)"),
    budget: int = typer.Option(1000, help="placements each learner (rl, post) samples in the calibrated simulator"),
    json_path: Json = None,
    out_dir: OutDir = None,
    tracking_uri: TrackingUri = None,
    against: str = typer.Option("real", help="reference: real (TensorFlow on this machine) | grappler (TensorFlow's "
                                "cost model, VirtualCluster; adds GPU-only random placements, calibrates nothing)"),
) -> None:
    """Simulated (roofline, calibrated) vs real (or grappler) step times on random, baseline and learned placements; Kendall tau and MAPE."""
    _check_model(model, size)
    _check_tensorflow_benchmark(model, "fidelity")
    spec = _load_spec(cluster)
    _check_at_least("--random", random, 0)
    _check_at_least("--steps", steps, 2, " (the first real step is dropped)")
    _check_at_least("--calibrate-steps", calibrate_steps, 2, " (the first traced step is dropped)")
    _check_at_least("--budget", budget, 1)
    from cluster.fidelity import AGAINST

    if against not in AGAINST:
        _fail(f"unknown --against {against!r}; valid: {', '.join(AGAINST)}")
    if cost_table:
        _check_cost_table(cost_table, model, size, spec)
    preflight(out_dir, tracking_uri, False, _fail)  # writable out-dir, MLflow answering: before any work
    from flows.measure import placement_fidelity

    start = time.perf_counter()
    result = run_flow(placement_fidelity, _fail, model=model, size=size, cluster=cluster, random=random, steps=steps, seed=seed,
                                cost_table=cost_table, calibrate_steps=calibrate_steps, budget=budget,
                                out_dir=out_dir, tracking_uri=tracking_uri, against=against)
    result["wall_time_s"] = time.perf_counter() - start
    _print_fidelity(result, json_path)
    if json_path:
        _write_json(result, json_path)


@app.command()
@graph_flags(optional=True)
def train(
    source=None,
    cluster: str = typer.Option(..., help="preset name or YAML spec"),
    method: str = typer.Option(..., help="a baseline (single_cpu | single_gpu | expert | scotch | mincut | metis | m_topo | m_etf | m_sct | optimum) or a learner (rl | post | ppo | ce | pg | hierarchical | eagle | eagle_ce)"),
    steps: int = typer.Option(20, help="training steps (>= 1)"),
    seed: int = typer.Option(0, help="seed of the synthetic inputs and of a learner's search"),
    env: str = typer.Option("real", help="real (the step on this machine's devices: TensorFlow, or a PyTorch step's placed torch.fx code) | sim (projected from the simulated step time) | grappler (projected from TensorFlow's cost model)"),
    budget: int = typer.Option(1000, help="placements a learner samples in the simulator"),
    cost_table: str = typer.Option(None, help="a saved cost table: a learner searches, and --env sim projects, with calibrated op times"),
    json_path: Json = None,
    out_dir: OutDir = None,
    tracking_uri: TrackingUri = None,
    max_graph_mb: int = max_graph_mb_option(),
    int_bound: IntBound = None,
) -> None:
    """Train N steps with one method's placement on synthetic inputs, logging step time and loss to MLflow."""
    from baselines import BASELINES
    from cluster.environment import ENVIRONMENTS
    from placer import LEARNER_NAMES as LEARNERS

    from compgraph.frontends import environment_problem, is_user_graph

    if source is None:
        _fail("give --model (a benchmark: see `placement models`) or a user's graph (--graph-def, --saved-model, --keras, --torch)")
    user_graph = is_user_graph(source)
    problem = environment_problem(source, env) if env in ENVIRONMENTS else None
    if problem:
        _fail(f"--{problem}")
    int_bounds = parse_int_bounds(int_bound, user_graph)
    if not user_graph:
        _check_model(source.model, source.size)
    spec = _load_spec(cluster)
    # any placement trains: over the prepared groups, a learner's own units or every op (m_topo, m_etf, m_sct)
    valid = [*BASELINES, *LEARNERS]
    if method not in valid:
        _fail(f"unknown method {method!r}; valid: {', '.join(valid)}")
    problem = BASELINES[method].problem(spec, user_graph) if method in BASELINES else None
    if problem:
        _fail(problem)
    if env not in ENVIRONMENTS:
        _fail(f"unknown environment {env!r}; valid: {', '.join(ENVIRONMENTS)}")
    _check_at_least("--steps", steps, 1)
    _check_at_least("--budget", budget, 1)
    if cost_table:
        if user_graph:
            _fail("--cost-table is calibrated on a benchmark; a user's graph is costed by the roofline model")
        _check_cost_table(cost_table, source.model, source.size, spec)
    preflight(out_dir, tracking_uri, False, _fail)  # writable out-dir, MLflow answering: before any work
    if user_graph:  # the user's graph checked before the flow starts (one line, exit 2), prepared as the flow does
        _prepare_graph(source, None, None, None, 0, int_bounds, env, keep=True)  # the flow takes it
    from flows.measure import placement_train

    start = time.perf_counter()
    result = run_flow(placement_train, _fail, source=source, cluster=cluster, method=method, steps=steps, seed=seed,
                      env=env, budget=budget, cost_table=cost_table, out_dir=out_dir, tracking_uri=tracking_uri,
                      int_bounds=int_bounds)
    result["wall_time_s"] = time.perf_counter() - start
    console = _console(json_path)
    what = f"{result['model']} ({result['size']}) with {result['method']}'s placement on {result['cluster']}"
    if result["simulated"]:
        oom = " (the simulator reports OOM for this placement)" if result["oom"] else ""
        console.print(f"SIMULATED (not measured): {steps} steps of {what}: projected {result['seconds']:.3f} s "
                      f"= {steps} x {result['step_time_s']:.5f} s simulated step time{oom}")
    else:
        losses = result["losses"]
        iqr = f", median {result['median_s']:.5f} s, IQR {result['iqr_s']:.5f} s" if result.get("iqr_s") is not None else ""
        console.print(f"real training: {steps} steps of {what} in {result['seconds']:.3f} s "
                      f"(mean step {result['step_time_s']:.5f} s{iqr}, set-up {result['setup_s']:.1f} s); "
                      f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    console.print(f"wall time: {result['wall_time_s']:.1f} s; Prefect flow run: {result['prefect_flow_run_id']}")
    _mlflow_lines(console, result)
    if json_path:
        _write_json(result, json_path)
