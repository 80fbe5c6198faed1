"""The learners' failure modes of issue 21, each on a graph built for it: rl whose whole
first batch runs out of memory, and the named options that keep it learning."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_simulator import _dev, _op, _spec  # noqa: E402

from cluster.simulated import SimulatedEnvironment  # noqa: E402
from compgraph.ir import Edge, Grouping, OpGraph  # noqa: E402
from placer.features import static_memory_load  # noqa: E402
from placer.reinforce import ReinforceConfig, ReinforceLearner  # noqa: E402
from placer.search import run_search  # noqa: E402

torch.set_num_threads(1)


def _always_oom_env() -> SimulatedEnvironment:
    """Six ops of 100 resident bytes on three GPUs of 150 bytes: every placement runs out of memory."""
    ops = [_op(f"o{i}", 4, param=100) for i in range(6)]
    edges = [Edge(i, i + 1, 4) for i in range(5)]
    graph = OpGraph("oom6", ops, edges)
    grouping = Grouping(np.arange(6), [o.name for o in ops], "ops")
    spec = _spec(*(_dev(f"/gpu:{i}", memory_bytes=150) for i in range(3)))
    return SimulatedEnvironment(graph, grouping, spec, op_times=np.ones((6, 3)))


def _params(learner) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in learner.policy.parameters()])


def test_static_memory_load_by_hand():
    env = _always_oom_env()
    load = static_memory_load(env)
    # all six on gpu:0: 600 / 150; two per device: 200 / 150
    assert load(np.array([[0] * 6, [0, 0, 1, 1, 2, 2]])) == pytest.approx([4.0, 200 / 150])


def test_rl_faithful_failing_signal_gives_no_gradient_on_an_all_oom_batch():
    """The paper's constant failing signal with B initialised to it: R - B = 0, the policy stays."""
    env = _always_oom_env()
    learner = ReinforceLearner(env, ReinforceConfig(budget=8, k=8, hidden_size=16))
    before = _params(learner)
    result = run_search(learner, env)
    assert all(t is None for t in result.step_times)
    assert torch.equal(_params(learner), before)


def test_rl_whose_whole_first_batch_is_oom_still_changes_its_policy():
    env = _always_oom_env()
    config = ReinforceConfig(budget=8, k=8, hidden_size=16, oom_reward="memory_scaled", baseline_samples="ran")
    learner = ReinforceLearner(env, config)
    before = _params(learner)
    result = run_search(learner, env)
    assert all(t is None for t in result.step_times)
    assert not torch.equal(_params(learner), before)
    assert learner.baseline == pytest.approx(learner.failing_signal)  # no placement ran: B stays


# --- local_search: the reference hill climber -------------------------------------------


def test_local_search_never_returns_a_placement_worse_than_its_start():
    from learner_toy import toy_env

    from placer.local_search import LocalSearch, LocalSearchConfig

    for start in ("single_gpu", "random"):
        for seed in (0, 1, 2):
            env = toy_env()
            learner = LocalSearch(env, LocalSearchConfig(budget=48, k=8, seed=seed, start=start))
            start_placement = learner.current.copy()
            result = run_search(learner, env)
            start_time = env.measure(start_placement).step_time_s
            assert result.step_times[0] == start_time  # the start is the first placement measured
            assert result.best_step_time_s <= start_time
            # the best placement the climber holds is the best measured
            assert learner.best_score == (0, result.best_step_time_s)


def test_local_search_climbs_out_of_an_oom_start_by_memory_load():
    """Every op on one GPU does not fit; the climber reaches a placement that runs."""
    from placer.local_search import LocalSearch, LocalSearchConfig

    ops = [_op(f"o{i}", 4, param=100) for i in range(6)]
    graph = OpGraph("fit6", ops, [Edge(i, i + 1, 4) for i in range(5)])
    grouping = Grouping(np.arange(6), [o.name for o in ops], "ops")
    spec = _spec(*(_dev(f"/gpu:{i}", memory_bytes=250) for i in range(3)))
    env = SimulatedEnvironment(graph, grouping, spec, op_times=np.ones((6, 3)))
    learner = LocalSearch(env, LocalSearchConfig(budget=200, k=8, seed=0))
    result = run_search(learner, env)
    assert result.step_times[0] is None and result.best_step_time_s is not None
    assert np.bincount(result.best_placement, minlength=3).max() <= 2


# --- hierarchical: the grouper keeps exploring at its defaults ---------------------------


def _grouper_entropies(prepared, spec, updates: int, **options) -> list[float]:
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping
    from placer.hierarchical import HierarchicalConfig, HierarchicalPlanner

    env = make_environment("sim", prepared, spec, grouping=colocation_grouping(prepared.graph))
    result = run_search(HierarchicalPlanner(env, HierarchicalConfig(budget=updates, seed=0, **options)), env)
    return [u["grouper_entropy"] for u in result.updates]


def test_hierarchical_at_its_defaults_keeps_grouper_entropy_after_20_updates(rnnlm_small, k80x2):
    entropy = _grouper_entropies(rnnlm_small, k80x2, 21)
    assert entropy[20] > 0.10 * entropy[0], entropy


def test_hierarchical_with_the_grappler_codes_settings_collapses(rnnlm_small, k80x2):
    """The failure the defaults avoid: raw inputs, summed units and Adam at 0.1 (grappler's hparams)."""
    entropy = _grouper_entropies(rnnlm_small, k80x2, 21, learning_rate=0.1, input_scaling="raw", unit_pooling="sum")
    assert entropy[20] < 0.10 * entropy[0], entropy


# --- post and ce learn a 60-group graph whose best placement is known ---------------------


def _balance_env() -> SimulatedEnvironment:
    """60 independent ops, 1 s on either GPU and 4 s on the CPU, no transfers.

    The best step time is 27 s, by hand: with ``x`` ops on the CPU the step takes
    ``max(4 x, ceil((60 - x) / 2))`` s, smallest at ``x = 6`` (24 s on the CPU, 27 ops per GPU).
    A uniform random placement (20 ops per device) takes about 80 s, one GPU 60 s.
    """
    ops = [_op(f"o{i}", 4) for i in range(60)]
    graph = OpGraph("balance60", ops, [])
    grouping = Grouping(np.arange(60), [o.name for o in ops], "ops")
    spec = _spec(_dev("/gpu:0"), _dev("/gpu:1"), _dev("/cpu:0", kind="cpu"))
    return SimulatedEnvironment(graph, grouping, spec, op_times=np.tile([1.0, 1.0, 4.0], (60, 1)))


def test_the_balance_graph_best_is_27_s():
    env = _balance_env()
    assert env.measure(np.array([0] * 27 + [1] * 27 + [2] * 6)).step_time_s == 27.0
    assert env.measure(np.array([0] * 27 + [1] * 28 + [2] * 5)).step_time_s == 28.0
    assert env.measure(np.zeros(60, dtype=np.int64)).step_time_s == 60.0


@pytest.mark.parametrize("name", ["post", "ce"])
def test_post_and_ce_end_within_5_percent_of_the_known_best(name):
    from placer import LEARNERS

    env = _balance_env()
    cls = LEARNERS[name]
    result = run_search(cls(env, cls.Config(seed=0)), env)  # the paper's 2,400 placements and settings
    assert result.step_times[0] > 1.5 * 27.0  # it starts far from the best
    assert result.best_step_time_s <= 1.05 * 27.0


# --- the grouper + placer learners: oom_reward (named option) ----------------------------


@pytest.mark.parametrize("name", ["hierarchical", "eagle"])
def test_grouper_placer_oom_times_scale_with_the_memory_load_under_the_option(name):
    """The code's constant gives every OOM placement ``failing_time_s``; ``memory_scaled`` scales it by
    the static memory load, so the placement that overflows least scores best."""
    from placer import LEARNERS
    from placer.hierarchical import measured_times

    env = _always_oom_env()
    rows = np.array([[0] * 6, [0, 0, 1, 1, 2, 2]])
    oom = np.ones(2, bool)
    cls = LEARNERS[name]
    small = {"hidden_size": 16, "num_groups": 3}
    paper = cls(env, cls.Config(**small))
    assert paper.memory_load is None
    t = measured_times(paper.failing_time_s, paper.memory_load, rows, np.full(2, np.nan), oom)
    assert t.tolist() == [paper.failing_time_s] * 2
    scaled = cls(env, cls.Config(**small, oom_reward="memory_scaled"))
    t = measured_times(scaled.failing_time_s, scaled.memory_load, rows, np.full(2, np.nan), oom)
    assert t == pytest.approx(scaled.failing_time_s * np.array([4.0, 200 / 150]))
    ran = measured_times(scaled.failing_time_s, scaled.memory_load, rows, np.array([0.5, np.nan]), np.zeros(2, bool))
    assert ran.tolist() == [0.5, scaled.failing_time_s]  # a placement that ran keeps its time; no time: the constant


def test_hierarchical_whose_batches_are_all_oom_learns_only_under_memory_scaled():
    """The code's constant with B started at the failing signal: R - B = 0 on an all-OOM batch and
    the policy stays; with ``memory_scaled`` the rewards differ and it moves."""
    from placer.hierarchical import HierarchicalConfig, HierarchicalPlanner

    for option, moves in (("constant", False), ("memory_scaled", True)):
        env = _always_oom_env()
        config = HierarchicalConfig(budget=8, k=4, hidden_size=16, num_groups=3, logits_std_noise=0.0,
                                    oom_reward=option)
        learner = HierarchicalPlanner(env, config)
        before = _params(learner)
        result = run_search(learner, env)
        assert all(t is None for t in result.step_times)
        assert (not torch.equal(_params(learner), before)) == moves, option
