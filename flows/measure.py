"""The measurement flows: ``placement-calibrate``, ``placement-fidelity``, ``placement-train``.

* ``placement-calibrate``: model -> graph -> per-op seconds per device kind from traced
  TensorFlow steps ([`cluster.calibrate.calibrate`][cluster.calibrate.calibrate]) -> a cost-table JSON file.
* ``placement-fidelity``: a set of placements (seeded random ones, every baseline that
  applies, and the best placement each learner finds in the calibrated simulator) run
  both in the simulator (roofline and calibrated) and for real
  ([`cluster.fidelity.fidelity`][cluster.fidelity.fidelity]) -> Kendall tau and MAPE, logged to MLflow.
* ``placement-train``: one method's placement trained for N real steps (or projected from
  the simulated step time) -> per-step time and loss, logged to MLflow.

Each flow only calls tasks ([`tasks`][tasks], [`tasks.measure`][tasks.measure]).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from tasks import stages
import tasks.measure as mt
from cluster.op_placement import is_op_placement
from compgraph.frontends import BenchmarkSource, GraphSource, is_user_graph
from tasks.choices import AgainstName, ClusterName, Count, EnvName, MethodName, ModelName, NonNegative, SizeName, TracedSteps, Unset, unset
from placer import LEARNERS
from tasks.search import learner_grouping
from tracking import artifact_root, default_tracking_uri, placement_home
from compgraph.paths import named_path
from tracking.progress import say

FIDELITY_LEARNERS = ("rl", "post")  #: learners whose best placements the fidelity flow adds (as before the registry)

DEFAULT_OUT_DIR = str(placement_home())
"""The flows' default out-dir: the user-level home when this module was imported ([`tracking.placement_home`][tracking.placement_home])."""


def default_cost_table_path(model: str, size: str, cluster: str, out_dir: str | Path | None = None) -> Path:
    """``<out_dir>/cost-tables/<model>-<size>-<cluster>.json`` (``cluster``: the spec's name; ``out_dir``
    ``None``: the user-level home, [`tracking.placement_home`][tracking.placement_home])."""
    return named_path(out_dir or placement_home(), "cost-tables", model, size, cluster, suffix=".json")


def _flow_run_id() -> str | None:
    return str(flow_run.get_id()) if flow_run.get_id() else None


def _none_if_nan(x):
    return None if isinstance(x, float) and math.isnan(x) else x


@flow(name="placement-calibrate")
def placement_calibrate(model: ModelName = "rnnlm", size: SizeName = "small", cluster: ClusterName = "cpu4",
                        steps: TracedSteps = 5, seed: NonNegative = 0, out: Unset[str] = "") -> dict:
    """Calibrate per-op times of a model on a cluster and save the cost table.

    Args:
        model: benchmark model whose training step is traced (``placement models``).
        size: benchmark size: small (seconds) or paper (the 2017 sizes).
        cluster: preset cluster or the path of a YAML cluster spec; every device kind is traced on this machine
            (cpu4: four logical CPUs).
        steps: traced steps per device kind (the first dropped; >= 2).
        seed: seed of the synthetic inputs.
        out: where the table goes (empty: default_cost_table_path under the user-level home).
    Returns:
        ``{"model", "size", "cluster", "ops", "measured_ops", "coverage", "path", "steps", "devices"}``:
        ``coverage`` the fraction of ops with a measured time (0..1), ``path`` the table's file,
        ``devices`` kind -> TensorFlow device it was measured on.
    """
    out = unset(out)
    prepared = stages.preprocess(BenchmarkSource(model=model, size=size))
    spec = stages.load_cluster_spec(cluster)
    path = Path(out) if out else default_cost_table_path(model, size, spec.name)
    table = mt.calibrate_costs(quote(prepared), spec, steps, seed, path)
    return {
        "model": model,
        "size": size,
        "cluster": spec.name,
        "ops": prepared.graph.num_ops,
        "measured_ops": sum(op.name in table.op_seconds for op in prepared.graph.ops),
        "coverage": table.coverage(prepared.graph),
        "path": str(path),
        "steps": steps,
        "devices": table.devices,
        "prefect_flow_run_id": _flow_run_id(),
    }


@flow(name="placement-fidelity")
def placement_fidelity(
    model: ModelName = "rnnlm",
    size: SizeName = "small",
    cluster: ClusterName = "cpu4",
    random: NonNegative = 8,
    steps: TracedSteps = 10,
    seed: NonNegative = 0,
    cost_table: Unset[str] = "",
    calibrate_steps: TracedSteps = 5,
    budget: Count = 1000,
    out_dir: str = DEFAULT_OUT_DIR,
    tracking_uri: Unset[str] = "",
    against: AgainstName = "real",
) -> dict:
    """Simulated (roofline and calibrated) against real step times on a set of placements, logged to MLflow.

    With ``against="grappler"`` the reference is TensorFlow's cost model
    ([`cluster.grappler.GrapplerEnvironment`][cluster.grappler.GrapplerEnvironment]) instead of real runs: nothing is calibrated
    unless ``cost_table`` is given (the learners then search in the roofline simulator), and
    ``random`` further random placements split the groups among the GPUs only (``gpu_random_k``).

    The placements: ``random`` seeded random ones (``random_k``), every applicable baseline
    ([`tasks.measure.applicable_baselines`][tasks.measure.applicable_baselines]), and the best placement of each learner
    (``rl``, ``post``) after ``budget`` placements searched in the calibrated simulator.

    Args:
        model: benchmark model (``placement models``).
        size: benchmark size: small (seconds) or paper (the 2017 sizes).
        cluster: preset cluster or the path of a YAML cluster spec; placements run for real on this machine.
        random: seeded uniformly random placements besides the baselines and the learners.
        steps: real steps per placement, the first dropped (2017 Sec. 3.4: 10); >= 2.
        seed: seed of the random placements, the searches and the synthetic inputs.
        cost_table: a saved cost table; empty: calibrate first (calibrate_steps steps)
            and save it to default_cost_table_path under out_dir.
        calibrate_steps: traced steps per device kind when calibrating first (>= 2).
        budget: placements each learner (rl, post) samples in the calibrated simulator.
        out_dir: folder of the MLflow store (when tracking_uri is empty), cost tables and placement logs.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        against: the reference: real (TensorFlow on this machine) or grappler (TensorFlow's cost model).
    Returns:
        ``{"model", "size", "cluster", "ops", "groups", "n", "kendall_tau", "mape",
        "kendall_tau_calibrated", "mape_calibrated", "rows", "cost_table", "coverage",
        "mlflow_run_id", "mlflow_tracking_uri", "prefect_flow_run_id"}``; tau in [-1, 1] and MAPE
        a fraction, ``None`` where undefined; each row is a [`cluster.fidelity.fidelity`][cluster.fidelity.fidelity]
        row plus ``kind`` (``random``, ``baseline``, ``learner``).
    """
    cost_table, tracking_uri = unset(cost_table), unset(tracking_uri)
    out = Path(out_dir)
    uri = tracking_uri or default_tracking_uri(out)
    prepared = stages.preprocess(BenchmarkSource(model=model, size=size))
    spec = stages.load_cluster_spec(cluster)
    table = table_path = None
    if cost_table:
        table_path = Path(cost_table)
        table = mt.load_cost_table(table_path)
    elif against == "real":
        table_path = default_cost_table_path(model, size, spec.name, out)
        table = mt.calibrate_costs(quote(prepared), spec, calibrate_steps, seed, table_path)
    placements = dict(mt.random_placement_set(quote(prepared), spec, random, seed))
    kinds = dict.fromkeys(placements, "random")
    if against == "grappler" and spec.gpu_indices:
        gpu_only = mt.random_placement_set(quote(prepared), spec, random, seed + 1, gpu_only=True)
        placements.update(gpu_only)
        kinds.update(dict.fromkeys(gpu_only, "random-gpu"))
    for name in mt.applicable_baselines(prepared, spec, group_level=True):  # fidelity compares group placements
        placements[name] = stages.baseline_placement(name, quote(prepared), spec)
        kinds[name] = "baseline"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    searched = {}
    for learner in FIDELITY_LEARNERS:
        log_path = named_path(out, "placement-logs", stamp, "fidelity", learner, model, size, spec.name, f"seed{seed}",
                              suffix=".jsonl")
        found = mt.simulated_search(quote(prepared), spec, learner, budget, seed, table, log_path)
        searched[learner] = found.best_step_time_s
        if found.best_placement is not None:
            placements[learner] = found.best_placement
            kinds[learner] = "learner"
    result = mt.measure_fidelity(quote(prepared), spec, quote(placements), table, steps, seed, against)
    rows = [{**r, "kind": kinds[r["name"]]} for r in result["rows"]]
    flow_run_id = _flow_run_id()
    params = {"model": model, "size": size, "cluster": spec.name, "random": random, "steps": steps, "seed": seed,
              "budget": budget, "cost_table": str(table_path or ""),
              "calibrated_in_run": cost_table is None and table is not None,
              "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups,
              "grouper": prepared.grouping.grouper,
              "coverage": round(table.coverage(prepared.graph), 4) if table is not None else None,
              "search_env": "sim-calibrated" if table is not None else "sim", "against": against}
    run_id = mt.record_fidelity_run(
        tracking_uri=uri,
        artifact_location=artifact_root(out),
        params=params,
        result={**result, "rows": rows},
        placements={name: mt.named_placement(prepared, spec, gp) for name, gp in placements.items()},
        cost_table_path=str(table_path) if table_path else None,
        prefect_flow_run_id=flow_run_id,
    )
    return {
        "model": model,
        "size": size,
        "cluster": spec.name,
        "ops": prepared.graph.num_ops,
        "groups": prepared.grouping.num_groups,
        "n": result["n"],
        **{k: _none_if_nan(result[k]) for k in ("kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated",
                                                "kendall_tau_gpu_only", "mape_gpu_only")},
        "n_gpu_only": result["n_gpu_only"],
        "against": against,
        "rows": rows,
        "cost_table": str(table_path) if table_path else None,
        "coverage": table.coverage(prepared.graph) if table is not None else None,
        "mlflow_run_id": run_id,
        "mlflow_tracking_uri": uri,
        "prefect_flow_run_id": flow_run_id,
    }


@flow(name="placement-train")
def placement_train(
    source: GraphSource = BenchmarkSource(),
    cluster: ClusterName = "cpu4",
    method: MethodName = "expert",
    steps: Count = 20,
    seed: NonNegative = 0,
    env: EnvName = "real",
    budget: Count = 1000,
    cost_table: Unset[str] = "",
    out_dir: str = DEFAULT_OUT_DIR,
    tracking_uri: Unset[str] = "",
    int_bounds: Unset[dict[str, int]] = {},
) -> dict:
    """Train with one method's placement for ``steps`` steps (``env="real"``) or project the time
    from the simulated step time (``env="sim"``), and log it to MLflow.

    The graph is a benchmark (``model``, ``size``) or, as in ``placement-experiment``, a
    user's GraphDef, SavedModel signature or Keras model (grouped by the heuristic grouper;
    ``expert`` needs a benchmark's layer rules).

    A baseline's placement is built ([`baselines.BASELINES`][baselines.BASELINES]; the op-level placers m_topo,
    m_etf, m_sct place every op); a learner's ([`placer.LEARNERS`][placer.learner.LEARNERS]) is the best of ``budget``
    placements searched in the simulator over its units (the prepared groups, or the colocation
    units of hierarchical and eagle; calibrated with ``cost_table`` if given, else roofline).
    The sim projection uses the same simulator.

    Args:
        source: the graph, as the experiment's (tasks.config.ExperimentConfig.source): a benchmark (kind benchmark:
            model, size) or a user's training step (kind graph_def, saved_model with its signature, or keras).
        cluster: preset cluster or the path of a YAML cluster spec.
        method: the baseline or learner whose placement is trained.
        steps: training steps (>= 1).
        seed: seed of the synthetic inputs and of a learner's search.
        env: real (TensorFlow on this machine), sim (projected from the simulated step time) or grappler
            (projected from TensorFlow's cost model).
        budget: placements a learner samples in the simulator.
        cost_table: a saved cost table: a learner searches, and env sim projects, with calibrated op times.
        out_dir: folder of the MLflow store (when tracking_uri is empty) and placement logs.
        tracking_uri: MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db.
        int_bounds: a user's graph: integer input name -> exclusive bound of the ids fed to it
            (default: the size of the table it indexes).

    Returns:
        [`tasks.measure.train_placement`][tasks.measure.train_placement]'s dict plus ``model``, ``size``, ``cluster``,
        ``method``, ``env``, ``label`` (``real`` or ``simulated``), ``placement``
        (unit -> device name: groups, colocation units or ops), ``units``, ``mlflow_run_id``, ``mlflow_tracking_uri``, ``prefect_flow_run_id``.
    Raises:
        ValueError: a learner whose search found no placement that fits in memory.
    """
    cost_table, tracking_uri, int_bounds = unset(cost_table), unset(tracking_uri), unset(int_bounds)
    out = Path(out_dir)
    uri = tracking_uri or default_tracking_uri(out)
    user_graph = is_user_graph(source)
    prepared = stages.preprocess(source, int_bounds=int_bounds)
    model, size = (prepared.name, "user") if user_graph else (prepared.name, source.size)
    if user_graph:
        if method == "expert":
            raise ValueError("method 'expert' needs a benchmark's layer rules; a user's graph has none")
        if env == "real" and prepared.int_bound_problem():
            raise ValueError(prepared.int_bound_problem())
        if prepared.cost_warning():
            say(prepared.cost_warning())
    spec = stages.load_cluster_spec(cluster)
    table = mt.load_cost_table(Path(cost_table)) if cost_table else None
    grouping = None  # the units of the placement: the prepared groups unless a learner places its own
    if method in LEARNERS:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = named_path(out, "placement-logs", stamp, "train", method, model, size, spec.name, f"seed{seed}",
                              suffix=".jsonl")
        found = mt.simulated_search(quote(prepared), spec, method, budget, seed, table, log_path)
        if found.best_placement is None:
            raise ValueError(f"method {method!r}: every placement the search sampled ran out of memory")
        gp, grouping = found.best_placement, learner_grouping(method, prepared)
    else:
        gp = stages.baseline_placement(method, quote(prepared), spec)
    result = mt.train_placement(quote(prepared), spec, env, gp, steps, seed, cost_table=table, grouping=grouping)
    placement = mt.named_placement(prepared, spec, gp, grouping)
    units = "ops" if is_op_placement(gp) else (grouping or prepared.grouping).grouper
    flow_run_id = _flow_run_id()
    params = {"model": model, "size": size, "cluster": spec.name, "method": method, "steps": steps, "seed": seed,
              "env": env, "budget": budget if method in LEARNERS else None,
              "cost_table": cost_table or "", "ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups,
              "units": units, **prepared.run_params()}
    run_id = mt.record_training_run(tracking_uri=uri, artifact_location=artifact_root(out), params=params,
                                    result=result, placement=placement, prefect_flow_run_id=flow_run_id)
    return {
        "model": model,
        "size": size,
        "cluster": spec.name,
        "method": method,
        "env": env,
        "label": "simulated" if result["simulated"] else "real",
        **result,
        "placement": placement,
        "units": units,
        "mlflow_run_id": run_id,
        "mlflow_tracking_uri": uri,
        "prefect_flow_run_id": flow_run_id,
    }
