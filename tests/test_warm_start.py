"""Warm starts (placer.warm, issue 36): every learner started from a given placement measures it
first, logs it first, never returns anything slower, starts with its policy concentrated on it and
improves on it; the experiment starts them from its best baseline (or a placement file), labels
them, runs two by default; bad settings and bad files are refused in one line naming the field."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_toy import TOY_START, make_learner, optimum  # noqa: E402

from placer import LEARNERS  # noqa: E402
from placer.search import run_search  # noqa: E402
from placer.warm import WARM_SUFFIX  # noqa: E402

torch.set_num_threads(1)

FAITHFUL = [n for n in LEARNERS if not n.endswith(WARM_SUFFIX) and LEARNERS[n].__module__.startswith("placer.")]
WARM = [n + WARM_SUFFIX for n in FAITHFUL]

@pytest.fixture(scope="module")
def best():
    return optimum()


def test_every_learner_has_a_warm_started_variant():
    assert FAITHFUL and set(WARM) <= set(LEARNERS)
    for name in WARM:
        cls = LEARNERS[name]
        assert cls.Config().init == "best_baseline" and "no paper" in cls.paper
        assert "init" in LEARNERS[name.removesuffix(WARM_SUFFIX)].Config.model_fields  # the named option of every learner
        assert LEARNERS[name.removesuffix(WARM_SUFFIX)].Config().init == "uniform"  # the faithful start stays the default


@pytest.mark.parametrize("name", WARM)
def test_a_warm_started_learner_measures_its_start_first_and_never_returns_worse(name, best, tmp_path):
    """Started from the toy's optimum, nothing the learner samples can beat it: the search must
    return the start itself. With init_prob 0.34 (about uniform over 3 devices) the policy hardly
    samples it again in 30 of 2,187 placements, so a learner that forgot its start returns something
    slower. The start is placement 0: measured first and the first record of the placement log,
    marked as the start."""
    t_opt, p_opt = best
    learner, env = make_learner(name, 0, budget=30, init_ops=[int(x) for x in p_opt], init_prob=0.34)
    assert list(learner.start) == list(p_opt)
    log = tmp_path / "warm.jsonl"
    r = run_search(learner, env, log_path=log)
    first = json.loads(log.read_text().splitlines()[1])
    assert first["index"] == 0 and first["start"] is True and first["placement"] == [int(x) for x in p_opt]
    assert r.step_times[0] == first["step_time_s"] == pytest.approx(t_opt)
    assert r.start == {"step_time_s": pytest.approx(t_opt), "oom": False}
    assert r.curve[0]["placements"] == 1 and r.curve[0]["best_step_time_s"] == pytest.approx(t_opt)
    assert len(r.step_times) == 30  # the start counts in the budget
    assert r.best_step_time_s == pytest.approx(t_opt) and list(r.best_placement) == list(p_opt)


@pytest.mark.parametrize("name", WARM)
def test_a_warm_started_learner_improves_on_a_poor_start(name):
    """From every op on device 0 (19.6 s) every learner finds something faster within 60 placements,
    and never records a best slower than the start."""
    learner, env = make_learner(name, 0, budget=60)
    t_start = env.measure(np.asarray(TOY_START)).step_time_s
    r = run_search(learner, env)
    assert r.start["step_time_s"] == pytest.approx(t_start)
    assert all(p["best_step_time_s"] <= t_start for p in r.curve)
    assert r.best_step_time_s < t_start


@pytest.mark.parametrize("name", [n for n in WARM if n != "local_search_warm"])
def test_a_warm_started_policy_is_concentrated_on_its_start(name, best):
    """With init_prob 0.9 most units of the first placements sampled are on their start device; the
    faithful learner (init uniform) puts them there about a third of the time (3 devices)."""
    start = [int(x) for x in best[1]]
    warm, _ = make_learner(name, 0, budget=30, init_ops=start)
    faithful, _ = make_learner(name.removesuffix(WARM_SUFFIX), 0, budget=30)
    agree_warm = float((warm.sample(64).placements == np.asarray(start)).mean())
    agree_faithful = float((faithful.sample(64).placements == np.asarray(start)).mean())
    assert agree_warm >= 0.75 > 0.6 >= agree_faithful, (agree_warm, agree_faithful)


@pytest.mark.parametrize("name", ["rl", "hierarchical"])
def test_a_warm_start_starts_the_reinforce_baseline_at_its_first_rewards(name):
    """The 2017 placer and the Hierarchical Planner start B at the failing signal (exploration); warm-started,
    at the first batch's mean reward (sqrt of seconds), so the first advantages are centred, not all negative."""
    faithful, _ = make_learner(name, 0, budget=30)
    assert faithful.baseline == pytest.approx(faithful.failing_signal)
    warm, env = make_learner(name + WARM_SUFFIX, 0, budget=30, init_ops=TOY_START)
    assert warm.baseline is None
    samples = warm.sample(warm.batch_size)
    times = np.array([m.step_time_s for m in env.measure_batch(samples.placements)])
    warm.update(samples, times, np.zeros(len(times), dtype=bool))
    assert warm.baseline == pytest.approx(float(np.sqrt(times).mean()))  # started at the mean, moved towards it


def test_post_starts_with_init_prob_on_each_start_device():
    learner, _ = make_learner("post_warm", 0, init_ops=TOY_START, init_prob=0.8)
    p = torch.softmax(learner.u, dim=1).numpy()
    assert np.allclose(p[:, 0], 0.8) and np.allclose(p[:, 1:], 0.1)


def test_a_warm_start_on_ray_is_refused_with_async_updates():
    pytest.importorskip("ray")
    from learner_toy import toy_graph

    from compgraph.prepare import PreparedGraph
    from placer.distributed import RaySettings, ray_controllers
    from placer.configs import CONFIGS

    graph, grouping, spec, _ = toy_graph()
    prepared = PreparedGraph(graph=graph, grouping=grouping, benchmark=None, size="user", config=None)
    config = CONFIGS["post_warm"](budget=8, init_ops=TOY_START)
    with pytest.raises(ValueError, match="warm start .* needs synchronous rounds"):
        with ray_controllers("post_warm", config, prepared, spec, "sim", RaySettings(controllers=2, async_updates=True)):
            pass


# -- bad settings: one line naming the field and the value --


@pytest.mark.parametrize("settings, message", [
    ({"init": "placement"}, "init 'placement' needs init_placement"),
    ({"init_placement": "x.json"}, "init_placement 'x.json': given with init 'uniform'"),
    ({"init": "warm"}, "init"),
    ({"init_prob": 1.0}, "init_prob"),
])
def test_bad_warm_settings_are_refused(settings, message):
    from placer.configs import ReinforceConfig

    with pytest.raises(ValueError, match=message):
        ReinforceConfig(**settings)


@pytest.mark.parametrize("init_ops, message", [
    (None, r"learner 'rl_warm': init 'best_baseline' needs its start placement \(init_ops"),
    ([0, 0, 0], r"init_ops: shape \[3\], expected \[7\]"),
    ([0, 0, 0, 0, 0, 0, 5], "init_ops: device index 5 is not one of the 3 devices"),
])
def test_a_warm_learner_without_a_usable_start_is_refused(init_ops, message):
    with pytest.raises(ValueError, match=message):
        make_learner("rl_warm", 0, init_ops=init_ops)


def test_units_of_ops_takes_each_units_majority_device():
    from compgraph.ir import Grouping
    from placer.warm import fits_units, units_of_ops

    grouping = Grouping(np.array([0, 0, 0, 1, 1, 2]), ["a", "b", "c"], "test")
    ops = np.array([2, 1, 2, 0, 1, 1])
    assert list(units_of_ops(ops, grouping, 3)) == [2, 0, 1]  # a: 2 of 3 on device 2; b: a tie, the lower index
    assert not fits_units(ops, grouping) and fits_units(grouping.expand([2, 0, 1]), grouping)


# -- the experiment: the best baseline, a placement file, labels, the default methods --


def _file(tmp_path, devices: dict) -> str:
    path = tmp_path / "start.json"
    path.write_text(json.dumps({"devices": devices}))
    return str(path)


@pytest.fixture(scope="module")
def expert_devices(rnnlm_small, k80x2):
    from baselines import BASELINES, BaselineContext

    ctx = BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, k80x2, rnnlm_small.benchmark, rnnlm_small.config)
    ops = rnnlm_small.grouping.expand(BASELINES["expert"](ctx))
    names = k80x2.device_names
    return {op.name: names[int(d)] for op, d in zip(rnnlm_small.graph.ops, ops)}


def test_a_placement_file_is_a_warm_start(rnnlm_small, k80x2, expert_devices, tmp_path):
    from tasks.search import file_start

    start = file_start(_file(tmp_path, expert_devices), rnnlm_small, k80x2, "sim")
    assert start.step_time_s == pytest.approx(0.079286, rel=1e-3) and start.label("rl_warm") == "rl (warm: start.json)"
    assert start.note is None
    path = tmp_path / "start.json"
    path.write_text(json.dumps({"model": "rnnlm", "cluster": "k80x4", "devices": expert_devices}))
    other = file_start(str(path), rnnlm_small, k80x2, "sim")  # exported for another cluster: started from, with a note
    assert other.step_time_s == start.step_time_s and other.note == (
        f"note: {path} was exported for cluster 'k80x4'; evaluated here on model 'rnnlm', cluster 'k80x2'")


@pytest.mark.parametrize("change, message", [
    ("missing", "init_placement: '.*nope.json': no such file"),
    ("unknown op", "init_placement: '.*start.json': op 'no/such/op' is not in the graph"),
    ("unknown device", "init_placement: '.*start.json': op .* is on '/tpu:0', not a device of 'k80x2'"),
    ("op left out", "init_placement: '.*start.json': op .* of the graph has no device"),
    ("not json", "init_placement: '.*start.json': not JSON"),
])
def test_a_bad_placement_file_is_refused_naming_the_field(change, message, rnnlm_small, k80x2, expert_devices, tmp_path):
    from tasks.search import file_start

    devices = dict(expert_devices)
    path = _file(tmp_path, devices)
    if change == "missing":
        path = str(tmp_path / "nope.json")
    elif change == "unknown op":
        path = _file(tmp_path, {**devices, "no/such/op": "/gpu:0"})
    elif change == "unknown device":
        path = _file(tmp_path, {**devices, next(iter(devices)): "/tpu:0"})
    elif change == "op left out":
        devices.pop(next(iter(devices)))
        path = _file(tmp_path, devices)
    elif change == "not json":
        Path(path).write_text("{not json")
    with pytest.raises(ValueError, match=message):
        file_start(path, rnnlm_small, k80x2, "sim")


def test_the_default_experiment_runs_warm_started_learners_beside_the_faithful_ones():
    from tasks.config import ExperimentConfig

    config = ExperimentConfig()
    methods = config.resolved_methods
    assert methods[-4:] == ["rl", "post", "rl_warm", "post_warm"]
    assert config.warm_methods == ["rl_warm", "post_warm"]
    assert config.learner_options == {}  # the faithful learners keep their papers' settings


def test_the_experiments_init_placement_is_the_warm_learners_start(tmp_path):
    from tasks.config import ExperimentConfig

    path = _file(tmp_path, {"a": "/gpu:0"})
    config = ExperimentConfig(init_placement=path, methods=["expert", "rl", "rl_warm"])
    assert config.learner_options == {"rl_warm": {"init": "placement", "init_placement": path}}  # rl stays faithful
    with pytest.raises(ValueError, match="init_placement: no warm-started learner in methods"):
        ExperimentConfig(init_placement=path, methods=["expert", "rl"])
    with pytest.raises(ValueError, match="init_placement: no such file"):
        ExperimentConfig(init_placement=str(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"init_placement: '.*bad.json': expected \{\"devices\""):
        ExperimentConfig(init_placement=str(tmp_path / "bad.json"))


def test_the_cli_refuses_a_missing_init_placement_in_one_line(tmp_path):
    from typer.testing import CliRunner

    import cli.main

    r = CliRunner().invoke(cli.main.app, ["experiment", "--init-placement", str(tmp_path / "nope.json"),
                                          "--out-dir", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "--init-placement: no such file" in r.output and "nope.json" in r.output


def _searches(monkeypatch, methods, baselines, prepared, spec, tmp_path, budget):
    """:func:`tasks.search.learner_searches` with its Prefect task run as a plain function."""
    from prefect.utilities.annotations import quote

    import tasks.search as ts

    search = ts.learner_search.fn

    def plain(*args, **kwargs):
        args = [a.unquote() if isinstance(a, quote) else a for a in args]
        return search(*args, **kwargs)

    monkeypatch.setattr(ts, "learner_search", plain)
    from tasks.config import ExperimentConfig

    config = ExperimentConfig(methods=methods, budget=budget, tracking={"out_dir": str(tmp_path)})
    return ts.learner_searches(config, prepared, spec, baselines=baselines)


def test_the_experiment_starts_warm_learners_from_its_best_baseline(monkeypatch, rnnlm_small, k80x2, tmp_path):
    from baselines import BASELINES, BaselineContext
    from tasks.search import evaluate

    ctx = BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, k80x2, rnnlm_small.benchmark, rnnlm_small.config)
    baselines = {m: BASELINES[m](ctx) for m in ("single_gpu", "expert")}
    found = _searches(monkeypatch, ["rl", "post_warm"], baselines, rnnlm_small, k80x2, tmp_path, 24)
    assert found.labels == {"post_warm": "post (warm: expert)"}  # the faithful rl is not labelled
    params = found.method_params["post_warm"]
    assert params["init"] == "best_baseline" and params["init_source"] == "expert" and params["kept_start"] is False
    results, _ = evaluate.fn(rnnlm_small, k80x2, "sim", {**baselines, **found.placements}, None, found.groupings)
    assert params["start_step_time_s"] == pytest.approx(results["expert"]["step_time_s"])
    assert results["post_warm"]["step_time_s"] <= results["expert"]["step_time_s"]


def test_an_op_level_start_the_learner_cannot_place_is_kept_as_its_placement(monkeypatch, rnnlm_small, k80x2, tmp_path):
    """MinCut places ops: on the 2017 groups its majority devices take 0.239 s against its own 0.174 s. A
    warm learner with one placement (its start, as groups) reports MinCut's op placement, not the slower one."""
    from baselines import BASELINES, BaselineContext
    from cluster.op_placement import is_op_placement
    from tasks.search import evaluate

    ctx = BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, k80x2, rnnlm_small.benchmark, rnnlm_small.config)
    baselines = {"mincut": BASELINES["mincut"](ctx)}
    found = _searches(monkeypatch, ["post_warm"], baselines, rnnlm_small, k80x2, tmp_path, 1)
    params = found.method_params["post_warm"]
    assert params["start_fits_units"] is False and params["kept_start"] is True
    assert is_op_placement(found.placements["post_warm"])
    assert list(found.placements["post_warm"].ops) == list(baselines["mincut"].ops)
    results, _ = evaluate.fn(rnnlm_small, k80x2, "sim", {**baselines, **found.placements}, None, found.groupings)
    assert results["post_warm"]["step_time_s"] == pytest.approx(results["mincut"]["step_time_s"])


def test_the_warm_start_and_the_report_break_ties_alike():
    """On one GPU, single_gpu and expert tie: the warm start takes the baseline the report calls best
    (alphabetically first among the fastest), so 'rl (warm: ...)' names the best baseline of the table."""
    from baselines.report import run_baselines
    from cluster.spec import load_cluster
    from compgraph.frontends import BenchmarkSource, prepare_source
    from tasks.search import best_baseline_start

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    spec = load_cluster("h200x1")
    report = run_baselines(prepared, spec, methods=["single_gpu", "expert"])
    start = best_baseline_start(prepared, spec, "sim")
    assert report["best_baseline"] == start.source == "expert"


@pytest.mark.parametrize("name", [n for n in WARM if n != "local_search_warm"])
def test_a_warm_start_is_scaled_to_the_graph(name, rnnlm_small, k80x2):
    """The warm variants start with ``moves_per_sample`` 4: on small rnnlm's 61 groups (more than
    4 / 0.1) each unit's start device gets ``1 - 4 / U``, not the fixed 0.9 that moves a tenth of
    the units per sample (on nmt's 502 groups, 50 at once: no softmax learner then improved on the
    expert in 2,400 placements). With ``moves_per_sample=None`` the 0.9 stands."""
    from cluster.factory import make_environment
    from placer.configs import WARM_MOVES_PER_SAMPLE

    cls = LEARNERS[name]
    ops = [k80x2.gpu_indices[0]] * rnnlm_small.graph.num_ops
    grouping = None
    if cls.units == "colocation":
        from compgraph.grouping import colocation_grouping

        grouping = colocation_grouping(rnnlm_small.graph)
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    learner = cls(env, cls.Config(budget=30, init_ops=ops, scope_moves=0.0))  # the start's own moves only
    units = len(learner.start)
    assert units > WARM_MOVES_PER_SAMPLE / 0.1
    assert learner.config.moves_per_sample == WARM_MOVES_PER_SAMPLE
    assert learner.init_prob == pytest.approx(1 - WARM_MOVES_PER_SAMPLE / units)
    assert cls(env, cls.Config(budget=30, init_ops=ops, moves_per_sample=None)).init_prob == 0.9
    if cls.units == "groups":  # a sample moves about 4 of the 61 groups off the start
        moved = (learner.sample(64).placements != np.asarray(learner.start)).sum(axis=1).mean()
        assert 3.0 <= moved <= 5.0, moved  # with 0.9: about 6.1


@pytest.mark.parametrize("name", ["post_warm", "ce_warm", "rl_warm"])
def test_the_start_is_the_first_incumbent_of_scope_moves(name, best):
    """The search loop measures the start itself; it tells the learner (``observe_start``), so the
    learners that move scopes of their incumbent (``scope_moves``) start from the start, not from the
    best of their first samples: from the toy's optimum nothing beats it, and it stays the incumbent."""
    t_opt, p_opt = best
    learner, env = make_learner(name, 0, budget=30, init_ops=[int(x) for x in p_opt], init_prob=0.34, scope_moves=0.5)
    run_search(learner, env)
    assert learner.scope.incumbent_time == pytest.approx(t_opt)
    assert list(learner.scope.incumbent) == [int(x) for x in p_opt]
