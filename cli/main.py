"""The ``placement`` command line (typer).

Commands: ``experiment`` (the main job: the ``placement-experiment`` Prefect flow),
``graph-stats``, ``models``, ``clusters``, ([`cli.measure`][cli.measure]) ``calibrate``,
``fidelity``, ``train``, and ([`cli.compare`][cli.compare]) ``compare``, ``log-run``; shared helpers in [`cli.common`][cli.common]. A bad argument prints one line naming the value
and the valid ones, and exits with code 2. ``--json PATH`` takes ``-`` for standard output.
"""

from __future__ import annotations

import time

import typer

from cli.common import _check_model, _choose_methods, _fail, _prepare_graph, _write_json, app, build_config, check_json_path, max_graph_mb_option, parse_int_bounds  # noqa: F401  (shared helpers, in cli.common)
from cli.options import CacheDir, Cluster, Env, Grouper, IntBound, Json, LearnerOption, NumGroups, OutDir, Resume, TrackingUri, graph_flags, source_flag_paths
from cli.runtime import preflight, run_flow


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
@graph_flags()
def graph_stats(
    source=None,
    max_graph_mb: int = max_graph_mb_option(),
    grouper: Grouper = None,
    num_groups: NumGroups = 256,
    cache_dir: CacheDir = None,
    json_path: Json = None,
) -> None:
    """Op count, groups per grouper, total FLOPs, parameter bytes and op types without a FLOPs rule."""
    from compgraph.grouping import GROUPERS, grouping_stats

    if num_groups < 1:
        _fail(f"--num-groups must be at least 1, got {num_groups}")
    automatic = grouper in GROUPERS and GROUPERS[grouper].automatic
    prepared = _prepare_graph(source, grouper, num_groups if automatic else None, cache_dir, 0)
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


EXPERIMENT_FLAGS = {
    **source_flag_paths(),  # every front end's: --model, --size, --graph-def, ... (compgraph.frontends.SourceFlag)
    "--cluster": "cluster", "--env": "env", "--methods": "methods", "--budget": "budget", "--seed": "seed",
    "--train-steps": "train_steps", "--init-placement": "init_placement",
    "--grouper": "grouping.grouper", "--num-groups": "grouping.num_groups",
    "--k": "learners.rl.k", "--learner-option": "learners.*",
    "--controllers": "ray.controllers", "--workers": "ray.workers", "--gpus-per-worker": "ray.gpus_per_worker",
    "--policy-device": "ray.policy_device", "--async": "ray.async_updates", "--ray-address": "ray.address",
    "--soft-placement": "real.soft_placement", "--int-bound": "real.int_bounds", "--repeats": "real.repeats",
    "--warmup": "real.warmup", "--threads": "real.threads", "--time-limit": "real.time_limit_s",
    "--isolate": "real.isolate", "--host-memory": "real.host_memory",
    "--out-dir": "tracking.out_dir", "--tracking-uri": "tracking.tracking_uri", "--cache-dir": "tracking.cache_dir",
    "--spool": "tracking.spool", "--resume": "tracking.resume",
}
"""``placement experiment``'s flags -> the [`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig] field each sets
([`tasks.config.experiment_fields`][tasks.config.experiment_fields]' paths; ``learners.*``: any learner's field,
``METHOD.FIELD=VALUE``). ``tests/test_config.py`` checks that they and [`NOT_EXPERIMENT_FLAGS`][cli.main.NOT_EXPERIMENT_FLAGS]
cover the config, and that the flow's form and the sweep are built from it too."""

NOT_EXPERIMENT_FLAGS = {
    "tracking.parent_run_id": "internal: set by the sweep",
}
"""Config fields without a flag of their own, and why."""


@app.command()
@graph_flags()
def experiment(
    source=None,
    cluster: Cluster = "k80x2",
    methods: str = typer.Option(None, help="comma-separated methods: baselines (single_cpu, single_gpu, expert, scotch, mincut, metis, m_topo, m_etf, m_sct, optimum) and learners (rl, post, ppo, ce, pg, hierarchical, eagle, eagle_ce, local_search, and each one started from the best baseline: rl_warm, post_warm, ...); default: every baseline that applies but optimum, rl, post, rl_warm and post_warm"),
    max_graph_mb: int = max_graph_mb_option(),
    int_bound: IntBound = None,
    grouper: Grouper = None,
    num_groups: NumGroups = None,
    cache_dir: CacheDir = None,
    soft_placement: bool = typer.Option(False, "--soft-placement", help="with --env real: move ops that have no kernel on their device to the CPU instead of failing"),
    repeats: int = typer.Option(None, help="with --env real, a PyTorch step: timed steps per placement after the warm-up; the median is its step time (default 5)"),
    warmup: int = typer.Option(None, help="with --env real: steps run and dropped before the timed ones (default 1)"),
    threads: int = typer.Option(None, help="with --env real, a PyTorch step: torch.set_num_threads while measuring (default: torch's), recorded"),
    time_limit: float = typer.Option(None, "--time-limit", help="with --env real, a PyTorch step: seconds a step may take before the placement fails (default 300)"),
    isolate: bool = typer.Option(False, "--isolate", help="with --env real, a PyTorch step: measure each placement in a process of its own (what ran before cannot change it; seconds a placement)"),
    host_memory: str = typer.Option("default", "--host-memory", help="with --env real, a PyTorch step: default | reuse (glibc keeps freed host memory, so copies to the host stop paying for new pages)"),
    controllers: int = typer.Option(0, help="every learner on Ray: this many controllers, workers and a parameter server (2017 Sec. 3.4); 0: in-process"),
    workers: int = typer.Option(0, help="with --controllers: measuring worker actors, one placement each at a time (0: K per controller)"),
    gpus_per_worker: float = typer.Option(0, help="with --controllers: GPUs each worker asks Ray for and sees (--env real on GPUs: the cluster's GPU count)"),
    policy_device: str = typer.Option("cpu", help="with --controllers: cpu | cuda, where controllers run the policy (cuda: rl only, one GPU each)"),
    async_updates: bool = typer.Option(False, "--async", help="with --controllers: 2017's asynchronous updates (not reproducible); default: synchronous rounds"),
    ray_address: str = typer.Option(None, help="an existing Ray cluster (auto, host:port or ray://host:port); default: a local Ray on 127.0.0.1"),
    train_steps: int = typer.Option(100, help="training steps of the end-to-end evaluation of the best learned and best baseline placements (projected from the step time when --env sim)"),
    budget: int = typer.Option(1000, help="placements each learner samples"),
    init_placement: str = typer.Option(None, "--init-placement", help="FILE: the warm-started learners (rl_warm, post_warm, ...) start from this op -> device JSON (`placement export --format json`) instead of the best baseline's placement"),
    k: int = typer.Option(None, help="placements per policy update (K) of rl (default: 2017's 8); the same as --learner-option rl.k=N"),
    seed: int = typer.Option(0, help="seed of the search"),
    env: Env = "sim",
    out_dir: OutDir = None,
    tracking_uri: TrackingUri = None,
    json_path: Json = None,
    learner_option: LearnerOption = None,
    resume: Resume = False,
    spool: bool = typer.Option(False, "--spool", help="log nothing to MLflow now: keep the results in the run folder, log them later with `placement log-run DIR`"),
) -> None:
    """Run the placement-experiment flow: baselines and learners' searches, measured and logged to MLflow.

    The flags build one [`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig] ([`EXPERIMENT_FLAGS`][cli.main.EXPERIMENT_FLAGS]), which
    checks them all; its first error is one line naming the flag and the value (exit 2)."""
    from cli.learners import learner_option_items

    method_list = None if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    learner_settings = learner_option_items(learner_option, _fail)
    if k is not None:  # rl's K (2017 Eq. 3)
        if method_list is not None and "rl" not in method_list:
            _fail(f"--k {k}: sets rl's K, and rl is not in --methods ({','.join(method_list)})")
        given = learner_settings.get("rl", {}).get("k")
        if given is not None and str(given) != str(k):
            _fail(f"--k {k} and --learner-option rl.k={given} disagree: give one")
        learner_settings.setdefault("rl", {})["k"] = k
    settings = {
        "source": source, "cluster": cluster, "env": env, "budget": budget, "seed": seed, "train_steps": train_steps,
        "methods": method_list, "init_placement": init_placement,
        "grouping": {"grouper": grouper, "num_groups": num_groups}, "learners": learner_settings,
        "ray": {"controllers": controllers, "workers": workers, "gpus_per_worker": gpus_per_worker,
                "policy_device": policy_device, "async_updates": async_updates, "address": ray_address},
        "real": {"soft_placement": soft_placement, "int_bounds": parse_int_bounds(int_bound), "repeats": repeats,
                 "warmup": warmup, "threads": threads, "time_limit_s": time_limit, "isolate": isolate,
                 "host_memory": host_memory},
        "tracking": {"out_dir": out_dir, "tracking_uri": tracking_uri, "cache_dir": cache_dir, "spool": spool,
                     "resume": resume},
    }
    config = build_config(settings, EXPERIMENT_FLAGS)
    chosen = config.resolved_methods
    if resume and not config.user_graph:  # the logs are named by the settings; the learner's own settings must match too
        from tasks.search import log_names, resume_problem

        problem = resume_problem(config, log_names(config))
        if problem:
            _fail(problem)
    from cli.distributed import check_policy_device, probe_ray_address

    for problem in (check_policy_device(policy_device, ray_address), probe_ray_address(ray_address)):
        if problem:
            _fail(problem)
    preflight(out_dir, tracking_uri, spool, _fail)  # writable out-dir, MLflow answering: before any work
    # Validate the graph before the flow starts (a user's file error is one line, exit 2).
    from tasks.search import busy_problem, log_names

    prepared = None
    if config.user_graph:
        prepared = _prepare_graph(config.source, grouper, num_groups, None, seed, config.real.int_bounds, env,
                                  keep=True)  # the flow takes it
    try:  # the same settings running now hold their placement logs: refused here, before Prefect and MLflow
        problem = busy_problem(config, log_names(config, prepared))
    except ValueError as exc:  # a log path leading out of --out-dir (compgraph.paths.UnsafePath)
        problem = str(exc)
    if problem:
        _fail(problem)

    from tracking.progress import say

    say(f"experiment: {'a user graph' if config.user_graph else f'{config.source.model} ({config.source.size})'} on {config.spec().name}, env {env}, "
        f"methods {','.join(chosen)}, budget {budget}, seed {seed}; out-dir {out_dir}")
    from flows.experiment import placement_experiment

    start = time.perf_counter()
    result = run_flow(placement_experiment, _fail, **config.flow_parameters())  # the flow takes this config back whole
    result["wall_time_s"] = time.perf_counter() - start
    _print_table(result, to_stderr=json_path == "-")
    if json_path:
        _write_json(result, json_path)


def _print_table(result: dict, to_stderr: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from rich.markup import escape

    labels = result.get("labels") or {}  # the warm-started learners: "rl (warm: expert)" (placer.warm)
    console = Console(stderr=to_stderr)
    table = Table(title=f"{result['model']} ({result['size']}, {result['ops']} ops, {result['groups']} groups) on {result['cluster']} [{result['env']}]")
    table.add_column("method")
    table.add_column("step time (s)", justify="right")
    table.add_column("devices used", justify="right")
    table.add_column("x lower bound", justify="right")
    table.add_column("x optimum", justify="right")
    for method, row in result["methods"].items():
        t = "OOM" if row["oom"] else ("-" if row["step_time_s"] is None else f"{row['step_time_s']:.5f}")
        ratios = ["-" if row.get(k) is None else f"{row[k]:.2f}" for k in ("x_lower_bound", "x_optimum")]
        table.add_row(escape(labels.get(method, method)), t, str(len(set(row["placement"].values()))), *ratios)
    console.print(table)
    if result.get("lower_bound_s") is not None:
        proven = {True: " (proven)", False: " (not proven)"}.get(result.get("optimum_proven"), "")
        opt = "" if result.get("optimum_s") is None else f"; optimum {result['optimum_s']:.5f} s{proven}"
        where = f" (computed in {result['reference_environment']})" if result.get("reference_environment") else ""
        console.print(f"lower bound {result['lower_bound_s']:.5f} s{opt}{where}")
    if result.get("reference_note"):
        console.print(result["reference_note"])

    def pct(x):
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    for method, tr in (result.get("training") or {}).items():
        kind = "simulated: projected from the simulated step time" if tr["simulated"] else "trained for real"
        console.print(f"end-to-end training, {method}: {tr['steps']} steps in {tr['seconds']:.2f} s ({kind})")
    for learner, sp in result.get("speedups", {}).items():
        console.print(
            f"speedup of {escape(labels.get(learner, learner))} over the best baseline ({result['best_baseline']}): {pct(sp['over_best_baseline'])}; "
            f"over expert: {pct(sp['over_expert'])}"
        )
    from tracking.advice import next_steps

    for line in next_steps(result.get("recommendation")):  # what to do next (tracking.advice)
        console.print(line, soft_wrap=True, markup=False)
    console.print(f"wall time: {result['wall_time_s']:.1f} s; Prefect flow run: {result['prefect_flow_run_id']}")
    console.print(f"run folder: {result.get('run_dir')}", soft_wrap=True)
    if result["mlflow_run_id"] is None:
        console.print(f"not in MLflow yet: log it with `placement log-run {result.get('run_dir')}`", soft_wrap=True)
        return
    console.print(f"MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}")
    from tracking import runs_page, ui_command

    console.print(f"open the MLflow UI: {ui_command(result['mlflow_tracking_uri'])}", soft_wrap=True)
    page = runs_page(result["mlflow_tracking_uri"], result["mlflow_run_id"])
    if page:
        console.print(f"the runs table: {page}", soft_wrap=True)


def main() -> None:
    """Entry point of the ``placement`` command."""
    app()


from cli import measure  # noqa: E402,F401  (registers calibrate, fidelity, train)
from cli import learners  # noqa: E402,F401  (registers compare-learners)
from cli import reproduce  # noqa: E402,F401  (registers reproduce)
from cli import baselines  # noqa: E402,F401  (registers baselines)
from cli import compare  # noqa: E402,F401  (registers compare, log-run)
from cli import export  # noqa: E402,F401  (registers export)
from cli import detect  # noqa: E402,F401  (registers detect)
from cli import evaluate  # noqa: E402,F401  (registers evaluate)
from cli import server  # noqa: E402,F401  (registers server start|stop|status)

if __name__ == "__main__":  # `python -m cli.main`: run the module whose app the sub-modules registered on
    from cli.main import main as _main

    _main()
