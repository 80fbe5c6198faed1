"""``placement baselines``: every baseline, the lower bound and the optimum on one graph and cluster.

Prints a rich table (method, step time, OOM, devices used, seconds to compute, x lower
bound, x optimum) and, with ``--json PATH``, writes the same ``methods`` shape as
``placement experiment --json`` plus ``seconds``, ``devices_used``, ``lower_bound_s``,
``optimum_s``, ``optimum_proven``, ``optimum_bound_s``, ``optimum_gap`` (``optimum_s /
optimum_bound_s - 1``, a fraction) and ``optimum_work`` (the optimum's work limits and what it
spent). No Prefect flow, no MLflow run: a quick look.

Progress goes to standard error as the experiment's stage lines ([`tracking.progress`][tracking.progress],
``[   0.4 s] baselines ...``): what runs, then each stage (preprocess, baselines -- a line as each
one is placed --, lower bound, optimum -- a line every 10% of its polish or 15 s --, evaluation).
The optimum's default work limit ([`baselines.optimum`][baselines.optimum]) is a count, so its result is the same on
any machine load. On the nine paper graphs on ``k80x2`` and ``k80x4`` the whole command took 7-49 s
on a 2-core machine (load 2-3.5; rnnlm paper 16 and 24 s), gnmt 88 and 102 s, resnet200 on ``k80x4``
181 s (162 s of them m_sct's), with the first stage line within 1 s.
"""

from __future__ import annotations

import os
import time

import typer

from cli.common import _check_model, _choose_methods, _fail, _prepare_graph, _write_json, app, max_graph_mb_option
from cli.options import CacheDir, Cluster, Grouper, Json, NumGroups, OutDir, graph_flags


@app.command("baselines")
@graph_flags()
def baselines_command(
    source=None,
    cluster: Cluster = "k80x2",
    methods: str = typer.Option(None, help="comma-separated baselines (default: every one that applies, optimum included)"),
    max_graph_mb: int = max_graph_mb_option(),
    grouper: Grouper = None,
    num_groups: NumGroups = None,
    cache_dir: CacheDir = None,
    out_dir: OutDir = None,
    node_limit: int = typer.Option(50, help="the optimum's MILP: branch-and-bound nodes at most (a work limit: the same value on any machine load)"),
    max_milp_ops: int = typer.Option(None, help="the optimum's MILP is built only for graphs of at most this many ops "
                                     "(default 2000: larger MILPs take minutes to hours at 50 nodes; the polish and the lower bound remain)"),
    polish_evaluations: int = typer.Option(None, help="the optimum's local search: simulated placements at most "
                                           "(default: min(20000, 400 million / ops), a work limit)"),
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
    if max_milp_ops is not None and max_milp_ops < 0:
        _fail(f"--max-milp-ops must be at least 0, got {max_milp_ops}")
    if polish_evaluations is not None and polish_evaluations < 0:
        _fail(f"--polish-evaluations must be at least 0, got {polish_evaluations}")
    from baselines.optimum import MAX_MILP_OPS

    from compgraph.frontends import is_user_graph

    user_graph = is_user_graph(source)
    chosen = _choose_methods(methods, list(BASELINES), applicable_baselines(spec, user_graph), spec, user_graph)
    milp_ops = MAX_MILP_OPS if max_milp_ops is None else max_milp_ops
    cache = cache_dir or str(Path(out_dir) / "graph-cache")

    def prepare():
        return _prepare_graph(source, grouper, num_groups, cache, 0)

    def headline(what: str) -> None:
        opt = ""
        if "optimum" in chosen:
            polish = ("min(20000, 400 million / ops)" if polish_evaluations is None else str(polish_evaluations))
            opt = (f"; optimum work limit: MILP up to {milp_ops} ops at {node_limit} nodes, polish {polish} placements"
                   + (f", wall-clock cap {time_limit:g} s" if time_limit is not None else ""))
        say(f"baselines: {what} on {spec.name}, methods {','.join(chosen)}{opt}")

    if user_graph:  # a user's file error is one line, exit 2: checked before any progress line
        start = time.perf_counter()
        prepared = prepare()
        headline("a user graph")
        say(f"preprocess: done in {time.perf_counter() - start:.1f} s: {_graph_line(prepared, spec)}")
    else:
        _check_model(source.model, source.size)
        headline(f"{source.model} ({source.size})")
        with stage("preprocess") as st:
            prepared = prepare()
            st["result"] = _graph_line(prepared, spec)
    start = time.perf_counter()
    result = run_baselines(prepared, spec, chosen, time_limit_s=time_limit, node_limit=node_limit,
                           polish_evaluations=polish_evaluations, max_milp_ops=milp_ops, stage=stage, say=say,
                           on_progress=OptimumProgress(say))
    result = {"model": prepared.name, "size": prepared.size, "cluster": spec.name, "env": "sim",
              "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups, **result,
              "wall_time_s": time.perf_counter() - start}
    print_baselines_table(result, to_stderr=json_path == "-")
    if json_path:
        _write_json(result, json_path)


def say(text: str) -> None:
    """One stage line on standard error ([`tracking.progress.print_line`][tracking.progress.print_line], when the command asked for
    them: [`tracking.progress.STAGE_LINES_ENV`][tracking.progress.STAGE_LINES_ENV]). Not [`tracking.progress.say`][tracking.progress.say]: there is no
    Prefect run here, and its look-up of one imports Prefect (5 s on a loaded 2-core machine)."""
    from tracking.progress import STAGE_LINES_ENV, print_line

    if os.environ.get(STAGE_LINES_ENV) == "1":
        print_line(text)


def stage(name: str):
    """[`tracking.progress.stage`][tracking.progress.stage] with this command's [`say`][cli.baselines.say] (no Prefect run look-up)."""
    from tracking.progress import stage as progress_stage

    return progress_stage(name, say=say)


def _graph_line(prepared, spec) -> str:
    return f"{prepared.name}: {prepared.graph.num_ops} ops, {prepared.grouping.num_groups} groups; {spec.name}"


class OptimumProgress:
    """The optimum's ``on_progress`` ([`baselines.optimum.milp_optimum`][baselines.optimum.milp_optimum]) as progress lines:
    one when the MILP starts, then one for the polish every 10% of its budget or ``every_s`` seconds
    (placements simulated of the limit, the best step time so far and its gap to the proven bound).

    Args:
        say: prints one line ([`tracking.progress.say`][tracking.progress.say]).
        every_s: at most this many seconds between polish lines.
    """

    def __init__(self, say, every_s: float = 15.0):
        self.say = say
        self.every_s = every_s
        self.last = time.monotonic()
        self.next_fraction = 0.0  # the first polish point (its start) is always said

    def __call__(self, point: dict) -> None:
        if point["phase"] == "milp":
            self.say(f"optimum: MILP (HiGHS) over {point.get('ops')} ops, at most {point.get('node_limit')} "
                     f"branch-and-bound nodes, then the polish of at most {point['budget']} placements ...")
            self.last = time.monotonic()
            return
        done, budget, now = int(point["evaluated"]), max(1, int(point["budget"])), time.monotonic()
        if done < self.next_fraction * budget and now - self.last < self.every_s:
            return
        best, bound = point.get("best_step_time_s"), point.get("bound_s")
        gap = f", gap {100 * (best / bound - 1):.1f}% to the proven bound {bound:.5g} s" if best and bound else ""
        self.say(f"optimum: polish {done}/{budget} placements, best {best:.5g} s{gap}")
        self.last = now
        while self.next_fraction * budget <= done:
            self.next_fraction = round(self.next_fraction + 0.1, 10)


def print_baselines_table(result: dict, to_stderr: bool = False) -> None:
    """The rich table of [`baselines.report.run_baselines`][baselines.report.run_baselines]' result."""
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
    if result.get("optimum_method") is not None:
        from baselines.report import optimum_summary

        work = result.get("optimum_work") or {}
        spent = (f"; work: {work['polish_spent']} of {work['polish_evaluations']} polish placements"
                 + (f", MILP {work['milp_nodes']} of {work['node_limit']} nodes" if work.get("milp_built")
                    else f", no MILP ({result['ops']} ops > {work['max_milp_ops']})")) if work else ""
        console.print(f"optimum: {optimum_summary(result['optimum_s'], result['optimum_bound_s'], result.get('optimum_gap'), result['optimum_proven'], result['optimum_method'])}"
                      f"{spent}", soft_wrap=True)
    if result.get("reference_note"):
        console.print(result["reference_note"])
    if result.get("best_baseline"):
        console.print(f"best baseline: {result['best_baseline']}")
