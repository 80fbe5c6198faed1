"""The ``placement-experiment`` flow: model -> graph -> groups -> placements -> measurement -> record."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from tasks import stages
from baselines import BASELINES
from compgraph.frontends import BenchmarkSource, GraphSource
from tasks.choices import ClusterName, Count, EnvName, MethodName, NonNegative, Unset, unset
from tasks.config import ExperimentConfig, GroupingOptions, LearnerOptions, RayOptions, RealOptions, TrackingOptions
from tasks.experiment import experiment_outcome, graph_params, open_recorder, save_and_record
from tasks.measure import train_best
from tasks.publish import search_progress_artifact, tag_flow_run
from tasks.search import evaluate, learner_searches
from tracking import default_tracking_uri
from tracking.live import mark_failed, mark_killed
from tracking.progress import chain, say, stage


def run_name() -> str:
    """The flow run's name, in the MLflow parent run's form ([`tracking.run_title`][tracking.run_title]:
    ``<model>-<size>__<cluster>-<env>__<learners>__budget<N>__seed<S>__<time>``; a user graph:
    its file or Keras spec for the model and ``user`` for the size; a spec file: its stem for the
    cluster; no methods given: the default learners)."""
    from placer import DEFAULT_LEARNERS
    from tracking import STAMP_FORMAT, run_title

    p = flow_run.parameters
    src = p.get("source") or {}
    src = src.model_dump() if hasattr(src, "model_dump") else dict(src)
    kind = src.get("kind", "benchmark")
    source = src.get("model", "rnnlm") if kind == "benchmark" else Path(str(src.get("path") or src.get("spec"))).name
    size = src.get("size", "small") if kind == "benchmark" else "user"
    cluster = str(p.get("cluster", "k80x2"))
    cluster = Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster
    methods = p.get("methods") or list(DEFAULT_LEARNERS)
    return run_title({"model": source, "size": size, "cluster": cluster, "env": p.get("env", "sim"),
                      "methods": ",".join(map(str, methods)), "budget": p.get("budget", 1000), "seed": p.get("seed", 0)},
                     time.strftime(STAMP_FORMAT))


def _flow_run_id() -> str | None:
    return str(flow_run.get_id()) if flow_run.get_id() else None


@flow(name="placement-experiment", flow_run_name=run_name, on_failure=[mark_failed], on_crashed=[mark_killed], on_cancellation=[mark_killed])
def placement_experiment(
    source: GraphSource = BenchmarkSource(),
    cluster: ClusterName = "k80x2",
    env: EnvName = "sim",
    methods: Unset[list[MethodName]] = [],
    budget: Count = 1000,
    seed: NonNegative = 0,
    init_placement: Unset[str] = "",
    train_steps: NonNegative = 100,
    grouping: GroupingOptions = GroupingOptions(),
    learners: LearnerOptions = LearnerOptions(),  # type: ignore[valid-type]
    ray: RayOptions = RayOptions(),
    real: RealOptions = RealOptions(),
    tracking: TrackingOptions = TrackingOptions(),
) -> dict:
    """Run every method on one model and cluster, measure all in one environment, log to MLflow.

    The parameters are the fields of [`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig] (a test keeps them
    equal), validated together by it before anything runs, unless they are a config handed over
    already built ([`tasks.config.ExperimentConfig.flow_parameters`][tasks.config.ExperimentConfig.flow_parameters]: the CLI's, the sweep's),
    which is taken as it is; ``methods`` and ``init_placement`` left empty (the form's plain inputs:
    [`tasks.choices.Unset`][tasks.choices.Unset]) are the config's ``None``.

    Args:
        source: the graph: a benchmark (kind benchmark: model, size: small for a demo in seconds, paper for
            the 2017 sizes), or a user's training step (kind graph_def: a .pb/.pbtxt path; saved_model: a folder
            and its signature; keras: MODULE:FUNCTION returning (keras model, input specs); torch: MODULE:FUNCTION
            returning (torch module, example args)).
        cluster: preset cluster (k80x2: 2 K80 GPUs and a CPU, as in 2017) or the path of a YAML cluster spec.
        env: where placements are measured: sim (simulator), real (TensorFlow on this machine) or grappler
            (TensorFlow's own cost model).
        methods: baselines (baselines.BASELINES: single_cpu, single_gpu, expert, scotch, mincut, metis, m_topo,
            m_etf, m_sct, optimum) and learners (placer.LEARNERS: rl, post, ppo, ce, pg, hierarchical, eagle,
            eagle_ce, local_search, and each one's warm-started variant: rl_warm...); empty: every baseline that
            applies but optimum, then rl and post, then rl_warm and post_warm (started from the best baseline).
        budget: placements each learner samples.
        seed: seed of the searches.
        init_placement: the warm-started learners (rl_warm, post_warm...: placer.warm) start from this op -> device
            JSON file (placement export --format json) instead of the best baseline's placement.
        train_steps: steps of the end-to-end training evaluation of the best placements (0: none).
        grouping: how ops are grouped: the grouper (empty: 2017 for benchmarks, heuristic for users' graphs) and
            the target number of groups of metis and fluid (empty: 256).
        learners: each learner's options, its paper's defaults pre-filled (e.g. rl's k: placements per policy
            update, 2017's K); a field left at its default is no override.
        ray: the distributed search (2017 Sec. 3.4): with controllers above 0 every learner searches on Ray;
            workers (0: K per controller), GPUs per worker, the policy's device (cuda: rl only), asynchronous
            updates (not reproducible), the address of an existing Ray cluster (empty: a local Ray).
        real: with env real: soft placement (ops without a kernel on their device move to the CPU) and a user
            graph's integer input bounds, e.g. {"tokens": 32000}.
        tracking: out_dir (run folders, MLflow store, graph cache, placement logs), the MLflow tracking URI
            (empty: SQLite in out_dir), the graph cache, spool (nothing to MLflow now; `placement log-run DIR`
            later), resume (continue an interrupted run from its logs and checkpoints) and parent_run_id
            (internal, set by the sweep).

    Returns the result object of ``placement experiment --json`` (see the README).
    The MLflow runs are created at the start and the searches logged as they go
    ([`tracking.live.ExperimentRecorder`][tracking.live.ExperimentRecorder]); the results are written to the run folder
    ``<out_dir>/runs/...`` before MLflow.

    Raises:
        pydantic.ValidationError: settings that do not fit together ([`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig]).
    """
    config = ExperimentConfig.from_flow(source=source, cluster=cluster, env=env, methods=unset(methods), budget=budget,
                                        seed=seed, init_placement=unset(init_placement), train_steps=train_steps,
                                        grouping=grouping, learners=learners, ray=ray, real=real, tracking=tracking)
    return run_experiment(config)


def run_experiment(config: ExperimentConfig) -> dict:
    """The body of [`placement_experiment`][flows.experiment.placement_experiment] on a validated config (inside its flow run): the
    config goes down whole (its cluster spec read once: [`tasks.config.ExperimentConfig.spec`][tasks.config.ExperimentConfig.spec])."""
    c, track = config, config.tracking
    methods, flow_run_id = c.resolved_methods, _flow_run_id()
    uri = track.tracking_uri or default_tracking_uri(Path(track.out_dir))
    stamp = time.strftime("%Y%m%d-%H%M%S")  # the run folder's name: when the run started
    recorder = open_recorder(c, uri, flow_run_id, stamp)
    # preprocess
    with stage("preprocess") as st:
        prepared = stages.preprocess(c.source, c.grouping.grouper, c.grouping.num_groups, track.graph_cache, c.seed,
                                     c.real.int_bounds)
        spec = c.spec()
        st["result"] = f"{prepared.name}: {prepared.graph.num_ops} ops, {prepared.grouping.num_groups} groups; {spec.name}"
    if c.env == "real" and prepared.int_bound_problem():
        raise ValueError(prepared.int_bound_problem())
    if prepared.cost_warning():  # a user's graph whose costs miss something: said once, counted in MLflow
        say(prepared.cost_warning())
    tag_flow_run(f"model:{prepared.name}", f"size:{prepared.size}", f"cluster:{spec.name}", f"env:{c.env}")  # UI filters
    recorder.log_params(graph_params(prepared, c))
    if recorder.stale_ended:
        say(f"ended KILLED {len(recorder.stale_ended)} MLflow run(s) of these settings left RUNNING by a killed run")
    # baselines, then the learners' searches (in-process or on Ray)
    with stage("baselines") as st:
        placements = stages.baseline_placements(methods, prepared, spec)
        st["result"] = ", ".join(placements) or "none"
    def on_update(method: str, budget: int):  # MLflow metrics, progress lines and the Prefect progress artifact
        return chain(recorder.callback(method, budget, get_run_logger()), search_progress_artifact(method, budget))

    searches = learner_searches(c, prepared, spec, on_update, baselines=dict(placements))
    placements.update(searches.placements)
    # reference points (baselines.report): the lower bound, and the optimum when asked for (a reference method)
    with stage("lower bound" + "".join(f" and {m}" for m in methods if m in BASELINES and BASELINES[m].reference)):
        refs = stages.reference_points(quote(prepared), spec, quote(placements), list(methods), c.env_options)
    placements.update(refs.pop("placements"))
    # evaluation: every placement in one kind of environment
    with stage(f"evaluation ({c.env})") as st:
        results, summary = evaluate(quote(prepared), spec, c.env, quote(placements), c.env_options,
                                    quote(searches.groupings))
        st["result"] = "; ".join(f"{m} {'OOM' if r['oom'] else format(r['step_time_s'], '.5g') + ' s'}"
                                 for m, r in results.items())
    # end-to-end training of the best learned and best baseline placements (real, or projected with sim)
    with stage("end-to-end training"):
        training = train_best(prepared, spec, c.env, summary, placements, searches.groupings, c.train_steps, c.seed)
    # record: the run folder first (results.json, table.md, placements.json, plots/), then MLflow, then Prefect
    with stage("record"):
        record, result = experiment_outcome(c, prepared, spec, searches, results, summary, refs, training, uri,
                                            flow_run_id)
        return save_and_record(c, stamp, record, result, prepared, spec, uri, recorder)
