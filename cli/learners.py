"""``placement compare-learners`` and the parsing of ``--learner-option`` (shared with ``experiment``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import typer

from cli.common import _check_model, _fail, _write_json, app
from cli.options import Cluster, Env, Grouper, Json, LearnerOption, OutDir, Resume, Size, TrackingUri


def learner_option_items(items: list[str] | None, fail: Callable[[str], None]) -> dict[str, dict]:
    """``METHOD.FIELD=VALUE`` strings -> ``{method: {field: value}}`` (VALUE parsed as JSON, else
    kept as a string); a malformed item, or a field given twice -> ``fail(one line)``. The values are checked by whoever
    takes them ([`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig], [`parse_learner_options`][cli.learners.parse_learner_options])."""
    out: dict[str, dict] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        method, dot, name = key.partition(".")
        if not sep or not dot or not name:
            fail(f"--learner-option {item!r}: expected METHOD.FIELD=VALUE, e.g. rl.hidden_size=64")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        given = out.setdefault(method, {})
        if name in given:
            fail(f"--learner-option {key}: given twice ({key}={json.dumps(given[name])} and {item}); give it once")
        given[name] = value
    return out


def parse_learner_options(items: list[str] | None, methods: list[str], budget: int, seed: int,
                          fail: Callable[[str], None]) -> dict[str, dict]:
    """[`learner_option_items`][cli.learners.learner_option_items], each checked as the ``compare-learners`` flow takes it, for the
    commands without an experiment config (``compare-learners``, the benchmarks): a learner not among
    ``methods`` (their ``--learners``), a field the learner's options lack (``budget`` and ``seed`` are
    the command's, a warm start's ``init_ops`` and ``init_source`` its run's: the fields of
    [`tasks.config.LEARNER_OPTIONS`][tasks.config.LEARNER_OPTIONS]), or a value the learner's config (with ``budget`` and ``seed``)
    refuses -> ``fail(one line)`` in ``experiment``'s words ([`cli.common.config_error`][cli.common.config_error])."""
    from placer import LEARNER_NAMES as LEARNERS  # names only

    out = learner_option_items(items, fail)
    for method in out:
        if method not in LEARNERS:
            fail(f"--learner-option {method}: unknown learner {method!r}; valid: {', '.join(LEARNERS)}")
        if method not in methods:
            fail(f"--learner-option {method}: options for learner {method!r}, which is not in --learners "
                 f"({','.join(methods)})")
    if not out:
        return out
    from pydantic import ValidationError

    from cli.common import config_error
    from placer.configs import CONFIGS  # each learner's Config, without torch
    from tasks.config import LearnerOptions

    flags = {"--learner-option": "learners.*"}
    try:  # what the flow's learner_options parameter takes
        LearnerOptions.model_validate(out)
    except ValidationError as exc:
        fail(config_error(_Under(exc, ("learners",)), flags))
    for method, options in out.items():
        try:  # the config the flow builds of them (tasks.search.learner_config, without importing the tasks)
            CONFIGS[method](**{"budget": budget, "seed": seed, **options})
        except ValidationError as exc:
            fail(config_error(_Under(exc, ("learners", method)), flags))
        except ValueError as exc:
            fail(f"--learner-option {method}: {exc}")
    return out


class _Under:
    """A pydantic ``ValidationError`` whose errors' locations start with ``prefix`` (the place of the model
    validated in an [`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig]), for [`cli.common.config_error`][cli.common.config_error]."""

    def __init__(self, exc, prefix: tuple[str, ...]):
        self.exc, self.prefix = exc, prefix

    def errors(self) -> list[dict]:
        """The errors of the wrapped exception, each ``loc`` under ``prefix``."""
        return [{**e, "loc": (*self.prefix, *e["loc"])} for e in self.exc.errors()]


def parse_seeds(seeds: str, fail: Callable[[str], None]) -> list[int]:
    """``--seeds``: comma-separated integers, each at least 0 and given once (a seed twice would run
    the same search twice and weigh it twice in the median); an empty item, a non-integer, a negative
    or repeated seed -> ``fail(one line)`` naming the value."""
    if not seeds.strip():
        fail("--seeds is empty; give comma-separated integers, e.g. 0,1,2")
    out: list[int] = []
    for item in seeds.split(","):
        if not item.strip():
            fail(f"--seeds {seeds!r}: an empty item; give comma-separated integers, e.g. 0,1,2")
        try:
            seed = int(item)
        except ValueError:
            fail(f"--seeds {seeds!r}: {item.strip()!r} is not an integer; give comma-separated integers, e.g. 0,1,2")
            continue
        if seed < 0:
            fail(f"--seeds must be at least 0, got {seed}")
        if seed in out:
            fail(f"--seeds {seeds!r}: seed {seed} is given twice; each learner runs once per seed")
        out.append(seed)
    return out


@app.command("compare-learners")
def compare_learners(
    model: str = typer.Option("rnnlm", help="benchmark name (see `placement models`)"),
    size: Size = "small",
    cluster: Cluster = "k80x2",
    learners: str = typer.Option(None, help="comma-separated learners (default: every learner of placer.LEARNERS)"),
    seeds: str = typer.Option("0,1,2", help="comma-separated seeds; every learner runs once per seed"),
    budget: int = typer.Option(1000, help="placements per learner and seed"),
    env: Env = "sim",
    grouper: Grouper = None,
    learner_option: LearnerOption = None,
    resume: Resume = False,
    out_dir: OutDir = None,
    tracking_uri: TrackingUri = None,
    json_path: Json = None,
) -> None:
    """Every learner on the same graph, cluster, environment and budget over several seeds:
    best step time (median, spread), placements to within 5% of its own best, wall time;
    curves and one plot of all of them in MLflow (the ``compare-learners`` Prefect flow)."""
    from cluster.environment import ENVIRONMENTS
    from cluster.spec import load_cluster
    from compgraph.grouping import GROUPERS
    from placer import LEARNER_NAMES as LEARNERS

    _check_model(model, size)
    try:
        load_cluster(cluster)
    except ValueError as exc:
        _fail(str(exc))
    chosen = list(LEARNERS) if learners is None else [m.strip() for m in learners.split(",") if m.strip()]
    if not chosen:
        _fail(f"--learners is empty; valid: {', '.join(LEARNERS)}")
    for i, m in enumerate(chosen):
        if m not in LEARNERS:
            _fail(f"unknown --learners value {m!r}; valid: {', '.join(LEARNERS)}")
        if m in chosen[:i]:
            _fail(f"--learners {learners!r}: learner {m!r} is given twice; each runs once per seed")
    seed_list = parse_seeds(seeds, _fail)
    if budget < 1:
        _fail(f"--budget must be at least 1, got {budget}")
    if env not in ENVIRONMENTS:  # the flow's EnvName
        _fail(f"unknown --env value {env!r}; valid: {', '.join(ENVIRONMENTS)}")
    if grouper is not None and grouper not in GROUPERS:
        _fail(f"unknown --grouper value {grouper!r}; valid: {', '.join(GROUPERS)}")
    options = parse_learner_options(learner_option, chosen, budget, seed_list[0], _fail)

    from cli.runtime import preflight

    preflight(out_dir, tracking_uri, False, _fail)  # writable out-dir, MLflow answering: before any work
    from flows.compare import compare_learners as flow

    start = time.perf_counter()
    from compgraph.frontends import BenchmarkSource

    result = flow(source=BenchmarkSource(model=model, size=size), cluster=cluster, learners=chosen, seeds=seed_list,
                  budget=budget, env=env, grouper=grouper, learner_options=options, resume=resume, out_dir=out_dir,
                  tracking_uri=tracking_uri)
    result["wall_time_s"] = time.perf_counter() - start
    _print(result, to_stderr=json_path == "-")
    if json_path:
        _write_json(result, json_path)


def _print(result: dict, to_stderr: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=to_stderr)
    table = Table(title=f"{result['model']} ({result['size']}, {result['groups']} groups) on {result['cluster']} "
                        f"[{result['env']}], {result['budget']} placements, seeds {result['seeds']}")
    for col in ("learner", "best step (s), median", "min..max", "placements to 5%, median", "wall (s), median"):
        table.add_column(col, justify="left" if col == "learner" else "right")

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for name, row in result["learners"].items():
        table.add_row(name, f(row["best_step_time_s"]["median"], ".5f"),
                      f"{f(row['best_step_time_s']['min'], '.5f')}..{f(row['best_step_time_s']['max'], '.5f')}",
                      f(row["placements_to_within_5pct"]["median"], ".0f"), f(row["wall_time_s"]["median"], ".1f"))
    console.print(table)
    console.print(f"plot: {result.get('plot')}; MLflow run {result['mlflow_run_id']} in {result['mlflow_tracking_uri']}")
