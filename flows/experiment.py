"""The ``placement-experiment`` flow: model -> graph -> groups -> placements -> measurement -> record."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

import tasks
from baselines import BASELINES
from flows.choices import ClusterName, Count, EnvName, GrouperName, MethodName, ModelName, NonNegative, NonNegativeFloat, SizeName
from placer import DEFAULT_LEARNERS, policy_device_problem
from tasks.experiment import experiment_outcome, graph_params, save_and_record, start_params
from tasks.measure import train_best
from tasks.publish import search_progress_artifact, tag_flow_run
from tasks.search import RaySettings, evaluate, learner_searches
from tracking import artifact_root, default_tracking_uri
from tracking.live import ExperimentRecorder, mark_failed, mark_killed
from tracking.progress import chain, say, stage

METHODS = (*(n for n, b in BASELINES.items() if b.default), *DEFAULT_LEARNERS)  # the default run's methods


def run_name() -> str:
    """The flow run's name, as the MLflow parent run's: ``<model>-<size>-<cluster>-<env>-seed<N>``
    (a user graph: its file or Keras spec for the model and ``user`` for the size; a spec file: its
    stem for the cluster)."""
    p = flow_run.parameters
    source = next((Path(str(p[k])).name for k in ("graph_def", "saved_model", "keras") if p.get(k)), p.get("model"))
    cluster = str(p.get("cluster", ""))
    cluster = Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster
    size = "user" if any(p.get(k) for k in ("graph_def", "saved_model", "keras")) else p.get("size")
    return f"{source}-{size}-{cluster}-{p.get('env')}-seed{p.get('seed')}"


def _flow_run_id() -> str | None:
    return str(flow_run.get_id()) if flow_run.get_id() else None


@flow(name="placement-experiment", flow_run_name=run_name, on_failure=[mark_failed], on_crashed=[mark_killed], on_cancellation=[mark_killed])
def placement_experiment(
    model: ModelName = "rnnlm",
    size: SizeName = "small",
    cluster: ClusterName = "k80x2",
    methods: list[MethodName] = list(METHODS),
    budget: Count = 1000,
    seed: NonNegative = 0,
    env: EnvName = "sim",
    out_dir: str = "placement-runs",
    tracking_uri: str | None = None,
    graph_def: str | None = None,
    keras: str | None = None,
    grouper: GrouperName | None = None,
    num_groups: Count | None = None,
    cache_dir: str | None = None,
    train_steps: NonNegative = 100,
    controllers: NonNegative = 0,
    ray_address: str | None = None,
    soft_placement: bool = False,
    learner_options: dict[str, dict] | None = None,
    resume: bool = False,
    saved_model: str | None = None,
    signature: str | None = None,
    spool: bool = False,
    mlflow_parent_run_id: str | None = None,
    workers: NonNegative = 0,
    gpus_per_worker: NonNegativeFloat = 0,
    policy_device: str = "cpu",
    async_updates: bool = False,
    int_bounds: dict[str, int] | None = None,
) -> dict:
    """Run every method on one model and cluster, measure all in one environment, log to MLflow.

    Args:
        model: benchmark model (2017 Table 2: rnnlm, nmt, inception_v3); ignored with graph_def or keras.
        size: benchmark size: small (a demo in seconds) or paper (the 2017 sizes).
        cluster: preset cluster (k80x2: 2 K80 GPUs and a CPU, as in 2017) or the path of a YAML cluster spec.
        methods: baselines (baselines.BASELINES: single_cpu, single_gpu, expert, scotch, mincut, metis, m_topo,
            m_etf, m_sct, optimum) and learners (placer.LEARNERS: rl, post, ppo, ce, pg, hierarchical, eagle, eagle_ce).
        budget: placements each learner samples.
        seed: seed of the searches.
        env: where placements are measured: sim (simulator), real (TensorFlow on this machine) or grappler
            (TensorFlow's own cost model).
        out_dir: folder of the run folders, the MLflow store (when tracking_uri is empty) and the graph cache.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        graph_def: path of a user's training-step GraphDef (.pb/.pbtxt) instead of a benchmark.
        keras: MODULE:FUNCTION returning (keras model, input specs) instead of a benchmark.
        grouper: how ops are grouped (empty: 2017 for benchmarks, heuristic for users' graphs).
        num_groups: target number of groups of metis and fluid (empty: 256).
        cache_dir: preprocessed-graph cache (empty: out_dir/graph-cache).
        train_steps: steps of the end-to-end training evaluation of the best placements (0: none).
        ray_address: an existing Ray cluster; empty: a local Ray.
        soft_placement: with env real, move ops without a kernel on their device to the CPU.
        learner_options: per learner, fields of its config overriding the paper defaults (placer.LEARNERS),
            e.g. {"rl": {"k": 8, "hidden_size": 64}} (rl's k: placements per policy update, 2017's K).
        resume: continue an interrupted run with the same settings from its placement logs and
            checkpoints (named by the settings; nothing measured twice).
        saved_model: a user's SavedModel folder instead of a benchmark.
        signature: the SavedModel signature holding the training step.
        spool: log nothing to MLflow; the run folder is logged later with `placement log-run DIR`.
        mlflow_parent_run_id: internal, set by the sweep to nest this run under its own; leave empty.
        controllers: with more than 0, every learner searches on Ray (over its own units).
        workers: measuring workers on Ray (0: K per controller, 2017 Sec. 3.4).
        gpus_per_worker: GPUs each Ray worker asks for (real execution on GPU nodes).
        policy_device: where controllers run the policy: cpu or cuda (rl only; refused for the others).
        async_updates: 2017's asynchronous updates instead of synchronous rounds (not reproducible).
        int_bounds: a user's graph: integer input name -> exclusive bound of the ids real execution
            feeds it (default: the size of the table it indexes), e.g. {"tokens": 32000}.

    Returns the result object of ``placement experiment --json`` (see the README).
    The MLflow runs are created at the start and the searches logged as they go
    (:class:`tracking.live.ExperimentRecorder`); the results are written to the run folder
    ``<out_dir>/runs/...`` before MLflow; ``spool``: nothing goes to MLflow (``placement log-run``
    logs the folder later). ``mlflow_parent_run_id``: nest the experiment's run under it (a sweep).
    """
    out, uri, flow_run_id = Path(out_dir), tracking_uri or default_tracking_uri(Path(out_dir)), _flow_run_id()
    stamp = time.strftime("%Y%m%d-%H%M%S")  # the run folder's name: when the run started
    # real execution: an op placed where it has no kernel is an error unless soft placement is asked for
    env_options = {"soft_placement": True} if env == "real" and soft_placement else {}
    ray = RaySettings(controllers, ray_address, workers, gpus_per_worker, policy_device, async_updates)
    if controllers and (problem := policy_device_problem(methods, policy_device)):  # before anything runs
        raise ValueError(problem)
    settings = {"model": model, "size": size, "cluster": cluster, "methods": list(methods), "budget": budget, "seed": seed,
                "env": env, "graph_def": graph_def, "keras": keras, "saved_model": saved_model, "signature": signature,
                "grouper": grouper, "num_groups": num_groups, "learner_options": learner_options,
                **({"int_bounds": int_bounds} if int_bounds else {})}
    recorder = ExperimentRecorder(uri, artifact_root(out), start_params(methods, budget, seed, env, learner_options),
                                  methods, spool, mlflow_parent_run_id, flow_run_id, settings, resume)
    # preprocess
    with stage("preprocess") as st:
        prepared = tasks.preprocess(model, size, grouper, num_groups, cache_dir or str(out / "graph-cache"), seed,
                                    graph_def, keras, saved_model, signature, int_bounds)
        spec = tasks.load_cluster_spec(cluster)
        st["result"] = f"{prepared.name}: {prepared.graph.num_ops} ops, {prepared.grouping.num_groups} groups; {spec.name}"
    size = prepared.size  # "user" for a user's graph (its size parameter means nothing)
    if env == "real" and prepared.int_bound_problem():
        raise ValueError(prepared.int_bound_problem())
    if prepared.cost_warning():  # a user's graph whose costs miss something: said once, counted in MLflow
        say(prepared.cost_warning())
    tag_flow_run(f"model:{prepared.name}", f"size:{size}", f"cluster:{spec.name}", f"env:{env}")  # filters in the UI
    recorder.log_params(graph_params(prepared, size, spec, num_groups))
    if recorder.stale_ended:
        say(f"ended KILLED {len(recorder.stale_ended)} MLflow run(s) of these settings left RUNNING by a killed run")
    # baselines, then the learners' searches (in-process or on Ray)
    with stage("baselines") as st:
        placements = tasks.baseline_placements(methods, prepared, spec)
        st["result"] = ", ".join(placements) or "none"
    def on_update(method: str, budget: int):  # MLflow metrics, progress lines and the Prefect progress artifact
        return chain(recorder.callback(method, budget, get_run_logger()), search_progress_artifact(method, budget))

    searches = learner_searches(methods, prepared, size, spec, env, out, budget, seed, learner_options, resume,
                                env_options, on_update, ray)
    placements.update(searches.placements)
    # reference points (baselines.report): the lower bound, and the optimum when asked for (a reference method)
    with stage("lower bound" + "".join(f" and {m}" for m in methods if m in BASELINES and BASELINES[m].reference)):
        refs = tasks.reference_points(quote(prepared), spec, quote(placements), list(methods))
    placements.update(refs.pop("placements"))
    # evaluation: every placement in one kind of environment
    with stage(f"evaluation ({env})") as st:
        results, summary = evaluate(quote(prepared), spec, env, quote(placements), env_options,
                                    quote(searches.groupings))
        st["result"] = "; ".join(f"{m} {'OOM' if r['oom'] else format(r['step_time_s'], '.5g') + ' s'}"
                                 for m, r in results.items())
    # end-to-end training of the best learned and best baseline placements (real, or projected with sim)
    with stage("end-to-end training"):
        training = train_best(prepared, spec, env, summary, placements, searches.groupings, train_steps, seed)
    # record: the run folder first (results.json, table.md, placements.json, plots/), then MLflow, then Prefect
    with stage("record"):
        record, result = experiment_outcome(prepared, size, spec, env, methods, budget, seed, learner_options,
                                            searches, results, summary, refs, training, uri, flow_run_id)
        return save_and_record(out, stamp, record, result, prepared, spec, uri, recorder, spool)
