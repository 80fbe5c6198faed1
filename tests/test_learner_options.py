"""Named options of the learners from issue 36 item 1 (in no paper; the faithful settings stay the
defaults): every learner's device prior ``init="single_gpu"``, and the cross-entropy step's
``smoothing``, ``elites_kept`` and ``oom_reward="memory_scaled"`` (Post, CE). Each test fails on
the code before the option: the prior was Post's alone, and its CE step forgot the incumbent,
replaced the old distribution outright and ranked every OOM placement alike."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_toy import make_learner, toy_env  # noqa: E402

from placer import LEARNERS  # noqa: E402
from placer.learner import Samples  # noqa: E402
from placer.post import PostLearner  # noqa: E402
from placer.post_ablations import CELearner  # noqa: E402
from placer.search import run_search  # noqa: E402
from placer.warm import WARM_SUFFIX  # noqa: E402

torch.set_num_threads(1)

FAITHFUL = [n for n in LEARNERS if not n.endswith(WARM_SUFFIX) and LEARNERS[n].__module__.startswith("placer.")]


@pytest.mark.parametrize("name", FAITHFUL)
def test_every_learner_has_the_device_prior_and_measures_the_single_gpu_placement_first(name):
    """``init="single_gpu"``: the start is every unit on the first GPU, measured as placement 0, and
    the search never returns anything slower; the faithful start stays the default."""
    assert LEARNERS[name].Config().init == "uniform"
    learner, env = make_learner(name, 0, budget=24, init="single_gpu")
    first_gpu = env.spec.gpu_indices[0]
    assert learner.start is not None and set(learner.start.tolist()) == {first_gpu}
    t_start = env.measure(np.full(env.grouping.num_groups, first_gpu)).step_time_s
    r = run_search(learner, env)
    assert r.start == {"step_time_s": pytest.approx(t_start), "oom": False}
    assert r.step_times[0] == pytest.approx(t_start)
    assert r.best_step_time_s <= t_start


def test_the_device_prior_keeps_the_cpu_out(rnnlm_small, k80x2):
    """On a cluster with a CPU the prior's first placements put most groups on the first GPU; the
    paper's uniform start puts about a third of them on the CPU."""
    from cluster.factory import make_environment

    env = make_environment("sim", rnnlm_small, k80x2)
    cpu = k80x2.cpu_indices[0]
    uniform = PostLearner(env, PostLearner.Config(seed=0)).sample(12).placements
    prior = PostLearner(env, PostLearner.Config(seed=0, init="single_gpu")).sample(12).placements
    assert (uniform == cpu).mean() > 0.25
    assert (prior == cpu).mean() < 0.1 and (prior == k80x2.gpu_indices[0]).mean() > 0.8


def _ce(**options) -> CELearner:
    env = toy_env()
    return CELearner(env, CELearner.Config(n_ce=4, rho=0.25, epsilon=0.0, k=4, **options))


def _period(learner: CELearner, rows: list[list[int]], times: list[float]) -> None:
    learner.update(Samples(np.array(rows, dtype=np.int64), np.zeros(len(rows))), np.array(times), np.zeros(len(rows), bool))


def _probs(learner: CELearner) -> np.ndarray:
    return torch.softmax(learner.u, dim=1).numpy()


BEST = [0, 1, 2, 0, 1, 2, 0]
WORSE = [[1, 2, 0, 1, 2, 0, 1], [2, 0, 1, 2, 0, 1, 2], [1, 2, 0, 1, 2, 0, 1], [2, 0, 1, 2, 0, 1, 2]]


def test_elites_kept_keep_the_incumbent_in_every_cross_entropy_step():
    """Period 1's best placement (1 s) is the elite; period 2's placements are all slower and differ
    from it in every group. Eq. 10 alone then forgets it (its devices at the clamp, 1e-6); with
    ``elites_kept=1`` it stays an elite beside period 2's best (probability 0.5 on each of its devices)."""
    for kept, expected in ((0, 0.0), (1, 0.5)):
        learner = _ce(elites_kept=kept)
        _period(learner, [BEST, *WORSE[:3]], [1.0, 9.0, 9.0, 9.0])
        assert _probs(learner)[np.arange(7), BEST] == pytest.approx(np.ones(7), abs=1e-4)
        _period(learner, WORSE, [5.0, 6.0, 7.0, 8.0])
        assert _probs(learner)[np.arange(7), BEST] == pytest.approx(np.full(7, expected), abs=1e-4)


def test_smoothing_mixes_the_old_distribution_into_the_cross_entropy_step():
    """``smoothing=alpha``: new = alpha * elite frequencies + (1 - alpha) * old (de Boer et al. 2005,
    Sec. 3.2); from the uniform start, alpha 0.5 puts 0.5 + 0.5/3 on each elite device."""
    learner = _ce(smoothing=0.5)
    _period(learner, [BEST, *WORSE[:3]], [1.0, 9.0, 9.0, 9.0])
    p = _probs(learner)
    assert p[np.arange(7), BEST] == pytest.approx(np.full(7, 0.5 + 0.5 / 3), abs=1e-4)
    assert p.sum(axis=1) == pytest.approx(np.ones(7))


def test_memory_scaled_oom_times_rank_the_placements_that_overflow_least_first(rnnlm_small, k80x2):
    """With the paper's constant every OOM placement gets the same time; ``memory_scaled`` scales it by
    the static memory load, so the one that overflows least ranks first (and none below the constant)."""
    from cluster.factory import make_environment
    from placer.features import static_memory_load

    env = make_environment("sim", rnnlm_small, k80x2)
    rows = np.stack([np.full(env.grouping.num_groups, d) for d in range(len(k80x2.devices))])
    oom = np.ones(len(rows), bool)
    paper = CELearner(env, CELearner.Config())
    assert set(paper._times(rows, np.zeros(len(rows)), oom).tolist()) == {paper.failing_signal}
    scaled = CELearner(env, CELearner.Config(oom_reward="memory_scaled"))
    t = scaled._times(rows, np.zeros(len(rows)), oom)
    load = np.maximum(1.0, static_memory_load(env)(rows))
    assert t == pytest.approx(scaled.failing_signal * load) and (t >= scaled.failing_signal).all()
    ran = scaled._times(rows, np.full(len(rows), 0.5), np.zeros(len(rows), bool))
    assert ran == pytest.approx(np.full(len(rows), 0.5))


def test_the_cross_entropy_options_survive_a_checkpoint():
    """The kept elites are learner state: a learner loaded from another's state dict keeps them."""
    learner = _ce(elites_kept=2)
    _period(learner, [BEST, *WORSE[:3]], [1.0, 9.0, 9.0, 9.0])
    other = _ce(elites_kept=2)
    other.load_state_dict(learner.state_dict())
    assert other.kept_times == learner.kept_times == [1.0, 9.0]
    assert [p.tolist() for p in other.kept_placements] == [BEST, WORSE[0]]


def test_moves_per_sample_moves_about_that_many_groups_on_any_graph(rnnlm_small, k80x2):
    """``moves_per_sample=m``: the prior's samples differ from the single-GPU start in about ``m``
    groups, whatever the number of groups; the paper's ``init_prob`` 0.9 moves a tenth of them
    (here about 5x as many), and the CE step mixes ``m / G`` uniform instead of ``epsilon``."""
    from cluster.factory import make_environment

    env = make_environment("sim", rnnlm_small, k80x2)
    g, gpu = env.grouping.num_groups, k80x2.gpu_indices[0]
    paper = CELearner(env, CELearner.Config(seed=0, init="single_gpu")).sample(200).placements
    scaled = CELearner(env, CELearner.Config(seed=0, init="single_gpu", moves_per_sample=2)).sample(200).placements
    moved_paper, moved = (paper != gpu).sum(axis=1).mean(), (scaled != gpu).sum(axis=1).mean()
    assert moved_paper == pytest.approx(0.1 * g, rel=0.25)
    assert moved == pytest.approx(2.0, rel=0.25)
    learner = CELearner(env, CELearner.Config(seed=0, moves_per_sample=2))
    assert learner.epsilon == pytest.approx(2 / g)
    assert CELearner(env, CELearner.Config(seed=0)).epsilon == 0.1  # the paper's, by default
    with pytest.raises(ValueError, match="moves_per_sample"):
        CELearner.Config(moves_per_sample=0)


def test_moves_per_sample_never_explores_more_than_the_paper():
    """On a graph of fewer than ``m / 0.1`` groups the paper's rates stand: ``epsilon`` 0.1 and
    ``init_prob`` 0.9 (before, ``m`` = 50 made the distributions uniform on this toy graph)."""
    env = toy_env()
    learner = CELearner(env, CELearner.Config(seed=0, init="single_gpu", moves_per_sample=50))
    assert learner.epsilon == pytest.approx(0.1)
    assert learner.init_prob == pytest.approx(0.9)
    assert np.allclose(_probs(learner).max(axis=1), 0.9)


@pytest.mark.parametrize("name", ["post", "ppo", "ce", "pg", "rl", "hierarchical", "eagle", "eagle_ce"])
def test_scope_moves_move_one_name_scope_of_the_incumbent(name, rnnlm_small, k80x2):
    """``scope_moves=1``: once a placement is measured, every sample is the fastest placement so far
    with one name scope (a layer, a time step) moved whole to one device; the incumbent survives
    ``state_dict``."""
    from cluster.factory import make_environment
    from compgraph.grouping import name_scopes

    from compgraph.grouping import colocation_grouping

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle", "eagle_ce") else {}
    learner = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, scope_moves=1.0, **small))
    first = learner.sample(4)  # nothing measured yet: the distributions' samples, one scope moved
    times = np.array([m.step_time_s for m in env.measure_batch(first.placements)])
    learner.update(first, times, np.zeros(4, dtype=bool))
    best = first.placements[int(np.argmin(times))]
    assert np.array_equal(learner.scope.incumbent, best)
    scopes = [set(groups.tolist()) for _, groups in name_scopes(list(env.grouping.names))]
    samples = learner.sample(64).placements
    for row in samples:
        moved = set(np.flatnonzero(row != best).tolist())
        assert any(moved <= s and len(set(row[sorted(s)].tolist())) == 1 for s in scopes), moved
    assert (samples != best).any(axis=1).mean() > 0.3  # most moves change something
    other = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, scope_moves=1.0, **small))
    other.load_state_dict(learner.state_dict())
    assert np.array_equal(other.scope.incumbent, best) and other.scope.incumbent_time == learner.scope.incumbent_time
    moved = learner.sample(4)  # the update learns from them as from its own samples
    learner.update(moved, np.array([m.step_time_s or np.nan for m in env.measure_batch(moved.placements)]),
                   np.array([m.oom for m in env.measure_batch(moved.placements)]))
    assert np.isfinite(moved.log_prob).all()


def test_scope_travel_walks_on_from_a_scope_move_a_little_slower_than_the_incumbent():
    """``scope_travel``: a scope move within ``1 + travel`` of the incumbent's time becomes the walk's
    placement and the next moves start there (record-to-record travel); a slower one, or a sample
    that was not a scope move, does not; a new incumbent puts the walk back on it; the walk survives
    ``state_dict``. Without ``travel`` every move starts from the incumbent."""
    from placer.features import ScopeMoves, move_scope

    names = [f"net/layer_{i // 4}/op_{i % 4}" for i in range(16)]
    start = np.zeros(16, dtype=np.int64)

    def moves(travel):
        s = ScopeMoves(names, 1.0, 3, np.random.default_rng(0), travel=travel)
        s.observe_start(start, 1.0)
        first = s.moved()
        while np.array_equal(first, start):  # a move that changes something (a no-op move is never measured here)
            first = s.moved()
        other = start.copy()
        other[0] = 1  # not a scope move: the walk does not take it
        s.keep(np.stack([first, other]), np.array([1.004, 1.001]))
        return s, first

    off, first = moves(None)
    assert off.current is None and off.walked == 0  # without travel there is no walk
    s, first = moves(0.01)
    assert np.array_equal(s.current, first) and s.current_time == 1.004 and s.walked == 1
    assert np.array_equal(s.incumbent, start)
    state = s.state_dict()
    copy = ScopeMoves(names, 1.0, 3, np.random.default_rng(0), travel=0.01)
    copy.load_state_dict(state)
    assert np.array_equal(copy.current, first) and copy.walked == 1
    rng = np.random.default_rng()
    rng.bit_generator.state = s.rng.bit_generator.state
    expected = first.copy()
    move_scope(rng, expected, s.scopes, 3)
    second = s.moved()  # from the walk, not from the incumbent
    assert np.array_equal(second, expected)
    s.keep(second[None], np.array([1.02]))  # beyond the 1% bar: the walk stays
    assert np.array_equal(s.current, first)
    third = s.moved()
    s.keep(third[None], np.array([0.9]))  # a new incumbent: the walk goes back on it
    assert np.array_equal(s.incumbent, third) and np.array_equal(s.current, third) and s.walked == 1
    fourth = s.moved()
    s.keep(np.stack([third, fourth]), np.array([0.9, 0.9 if np.array_equal(fourth, third) else 0.905]))
    assert s.walked == 2 - np.array_equal(fourth, third)  # a move that leaves the walk where it was is no step


def test_scope_travel_needs_scope_moves():
    """``scope_travel`` without scope moves would do nothing: refused, naming both values."""
    cls = LEARNERS["post"]
    with pytest.raises(ValueError, match="scope_travel 0.01.*scope_moves"):
        cls.Config(scope_travel=0.01)
    for bad in (0, 1, -0.1):
        with pytest.raises(ValueError, match="scope_travel"):
            cls.Config(scope_moves=0.5, scope_travel=bad)
    assert cls.Config(scope_moves=0.5, scope_travel=0.01).scope_travel == 0.01
    warm = LEARNERS["hierarchical_warm"]  # a warm variant's own scope moves carry it; set to 0 they do not
    assert warm.Config(scope_travel=0.01).scope_moves == 0.1
    with pytest.raises(ValueError, match="scope_travel 0.01.*scope_moves"):
        warm.Config(scope_moves=0, scope_travel=0.01)


@pytest.mark.parametrize("name", ["post", "rl", "hierarchical", "eagle"])
def test_every_learner_walks_its_scope_moves_with_scope_travel(name, rnnlm_small, k80x2):
    """Each learner hands its scope moves to the walk: with ``scope_moves=1`` and a wide
    ``scope_travel``, the walk steps off the incumbent, a checkpoint keeps it, and the next samples
    move a scope of the walk (a learner that moved its incumbent instead fails the last check)."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping, name_scopes

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle") else {}
    config = cls.Config(seed=0, init="single_gpu", moves_per_sample=4, scope_moves=1.0, scope_travel=0.5, **small)
    learner = cls(env, config)
    scope = learner.scope
    for _ in range(12):  # until the walk stands off the incumbent
        batch = learner.sample(4)
        measured = env.measure_batch(batch.placements)
        learner.update(batch, np.array([m.step_time_s or np.nan for m in measured]), np.array([m.oom for m in measured]))
        if scope.walked and not np.array_equal(scope.current, scope.incumbent):
            break
    assert scope.walked > 0 and not np.array_equal(scope.current, scope.incumbent)
    other = cls(env, config)
    other.load_state_dict(learner.state_dict())
    assert np.array_equal(other.scope.current, scope.current) and other.scope.walked == scope.walked
    scopes = [set(groups.tolist()) for _, groups in name_scopes(list(env.grouping.names))]
    for row in learner.sample(8).placements:  # every sample now moves one scope of the walk, not of the incumbent
        moved = set(np.flatnonzero(row != scope.current).tolist())
        assert any(moved <= g and len(set(row[sorted(g)].tolist())) == 1 for g in scopes), moved


def test_scope_majority_moves_a_scope_and_keeps_its_exceptions():
    """``scope_majority``: a majority move changes only the chosen scope's groups on its most common
    device, all to one device, and leaves the scope's other groups where they were; at 0 the move is
    whole and draws from the generator exactly as before (three draws, no fourth)."""
    from placer.features import move_scope, scopes_by_depth

    names = [f"net/layer_{i // 4}/op_{i % 4}" for i in range(16)]
    scopes = scopes_by_depth(names)
    base = np.ones(16, dtype=np.int64)
    base[[0, 5, 6]] = 2  # layer_0: one exception; layer_1: a tie (2 on each), the lowest device its majority
    kept_somewhere = 0
    for seed in range(40):
        p = base.copy()
        move_scope(np.random.default_rng(seed), p, scopes, 3, majority=1.0)
        moved = set(np.flatnonzero(p != base).tolist())
        fits = []
        for groups in (g for gs in scopes.values() for g in gs):
            on = base[groups]
            majority = set(groups[on == np.bincount(on, minlength=3).argmax()].tolist())
            if moved <= majority and len(set(p[sorted(majority)].tolist())) == 1:
                fits.append(set(groups.tolist()) - majority)
        assert fits, (seed, moved)
        kept_somewhere += any(ex and moved and all(p[i] == base[i] for i in ex) for ex in fits)
    assert kept_somewhere >= 5  # exceptions kept where a whole move would have taken them along
    for seed in range(10):  # at 0: the whole move, and the generator where three draws leave it
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        p, q = base.copy(), base.copy()
        move_scope(a, p, scopes, 3, majority=0.0)
        depths = sorted(scopes)
        at = scopes[depths[int(b.integers(len(depths)))]]
        q[at[int(b.integers(len(at)))]] = int(b.integers(3))  # the code before: the device drawn first (the right side)
        assert np.array_equal(p, q) and a.bit_generator.state == b.bit_generator.state


def test_scope_majority_needs_scope_moves():
    """``scope_majority`` without scope moves would do nothing: refused, naming both values; bounds 0-1."""
    with pytest.raises(ValueError, match="scope_majority 0.5.*scope_moves"):
        LEARNERS["post"].Config(scope_majority=0.5)
    with pytest.raises(ValueError, match="scope_majority 0.5.*scope_prob"):
        LEARNERS["local_search"].Config(scope_majority=0.5)
    with pytest.raises(ValueError, match="scope_majority"):
        LEARNERS["post"].Config(scope_moves=0.5, scope_majority=1.5)
    assert LEARNERS["local_search"].Config(scope_prob=0.5, scope_majority=0.5).scope_majority == 0.5
    assert LEARNERS["ce_warm"].Config(scope_majority=0.5).scope_majority == 0.5  # the warm variants' own scope moves


@pytest.mark.parametrize("name", ["post", "rl", "hierarchical", "eagle", "local_search"])
def test_every_learner_keeps_a_scopes_exceptions_with_scope_majority(name, rnnlm_small, k80x2):
    """Each learner hands ``scope_majority`` to its scope moves: from a placement whose every scope has
    an exception, each sample moves only the majority of one scope (a learner that moved scopes whole
    fails: its moves take the exceptions along)."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping, name_scopes

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle") else {}
    moves = {"scope_prob": 1.0} if name == "local_search" else {"scope_moves": 1.0, "moves_per_sample": 4}
    learner = cls(env, cls.Config(seed=0, init="single_gpu", scope_majority=1.0, **moves, **small))
    scope_list = [groups for _, groups in name_scopes(list(env.grouping.names))]
    base = np.ones(env.grouping.num_groups, dtype=np.int64)
    for groups in scope_list:
        base[groups[0]] = 2  # every scope's first group elsewhere
    if name == "local_search":
        learner.current = base.copy()
        rows = learner.sample(24).placements[1:]
    else:
        learner.scope.incumbent, learner.scope.incumbent_time = base.copy(), 1.0
        rows = learner.sample(8).placements
    whole_would_differ = 0
    for row in rows:
        moved = np.flatnonzero(row != base)
        ok = []
        for groups in scope_list:
            on = base[groups]
            majority = groups[on == np.bincount(on, minlength=3).argmax()]
            if set(moved.tolist()) <= set(majority.tolist()) and len(set(row[majority].tolist())) == 1:
                ok.append(groups)
        assert ok, moved.tolist()
        whole_would_differ += bool(len(moved)) and all(row[g[0]] == 2 and row[g[1]] != 2 for g in ok if len(g) > 1)
    assert whole_would_differ > 0


def test_the_local_search_reference_can_make_the_same_scope_moves(rnnlm_small, k80x2):
    """``local_search`` ``scope_prob=1``: every candidate is the current placement with one name
    scope moved whole (the learners' ``scope_moves``, so the reference can search the same moves)."""
    from cluster.factory import make_environment
    from compgraph.grouping import name_scopes

    env = make_environment("sim", rnnlm_small, k80x2)
    cls = LEARNERS["local_search"]
    learner = cls(env, cls.Config(seed=0, scope_prob=1.0))
    current = learner.current.copy()
    scopes = [set(groups.tolist()) for _, groups in name_scopes(list(env.grouping.names))]
    rows = learner.sample(32).placements[1:]  # the start first, then moves from it
    for row in rows:
        moved = set(np.flatnonzero(row != current).tolist())
        assert any(moved <= s and len(set(row[sorted(s)].tolist())) == 1 for s in scopes), moved
    assert (rows != current).any(axis=1).mean() > 0.3


def test_rl_scores_its_scope_moves_teacher_forced(rnnlm_small, k80x2):
    """The 2017 placer's replaced samples carry their own log-probabilities under the policy (what
    Eq. 3 needs), not those of the samples they replaced."""
    from cluster.factory import make_environment

    env = make_environment("sim", rnnlm_small, k80x2)
    cls = LEARNERS["rl"]
    learner = cls(env, cls.Config(seed=0, init="single_gpu", scope_moves=1.0, hidden_size=16))
    first = learner.sample(4)
    learner.update(first, np.array([m.step_time_s for m in env.measure_batch(first.placements)]), np.zeros(4, dtype=bool))
    samples = learner.sample(8)
    with torch.no_grad():
        _, logp, _ = learner.policy(8, actions=torch.from_numpy(samples.placements))
    assert np.allclose(samples.log_prob, logp.numpy(), atol=1e-4)
    assert samples.extra["logp"].requires_grad


@pytest.mark.parametrize("name", ["post", "ppo", "ce", "pg", "rl", "hierarchical", "eagle", "eagle_ce"])
def test_restart_after_restarts_the_policy_on_the_incumbent(name, rnnlm_small, k80x2):
    """``restart_after=8``: after 8 placements without a faster one the policy starts again as a warm
    start on the fastest placement so far (not on the search's start): its samples keep about
    ``1 - 4 / U`` of their units there; the restart and its incumbent survive ``state_dict``
    (the seq2seq and grouper + placer priors, not parameters, are rebuilt from it)."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle", "eagle_ce") else {}
    options = dict(seed=0, init="single_gpu", moves_per_sample=4, restart_after=8, **small)
    learner = cls(env, cls.Config(**options))
    first = learner.sample(8)
    moved = [i for i, row in enumerate(first.placements) if not np.array_equal(row, learner.start)]
    assert moved  # about 4 units a sample off the start
    times = np.full(8, 5.0)
    times[moved[0]] = 1.0  # the incumbent: a sample that is not the start
    learner.update(first, times, np.zeros(8, dtype=bool))
    best = first.placements[moved[0]]
    for _ in range(2):  # 4, then 8 placements slower than the incumbent
        assert learner.restarts.count == 0
        batch = learner.sample(4)
        diag = learner.update(batch, np.full(4, 9.0), np.zeros(4, dtype=bool))
    assert learner.restarts.count == 1 and diag["restarts"] == 1.0
    assert np.array_equal(learner.restarts.centre, best)
    if getattr(learner, "_initial", None):  # the sequence learners: back to their initial parameters, a fresh Adam
        now = learner.policy.state_dict()
        assert all(torch.equal(now[k], v) for k, v in learner._initial.items())
        assert not learner.optimizer.state
    off = best != learner.start  # the units the incumbent moved off the start

    def centred_on_best(placements: np.ndarray) -> bool:  # where they differ, the samples follow the incumbent
        return (placements == best).mean() > 0.8 and (placements[:, off] == best[off]).mean() > 0.8

    assert centred_on_best(learner.sample(64).placements)
    other = cls(env, cls.Config(**options))
    other.load_state_dict(learner.state_dict())
    assert other.restarts.count == 1 and np.array_equal(other.restarts.centre, best)
    assert centred_on_best(other.sample(64).placements)
    plain = cls(env, cls.Config(**{**options, "restart_after": None}))
    plain.load_state_dict(learner.state_dict())  # without the option: nothing restarts
    for _ in range(3):
        batch = plain.sample(4)
        assert "restarts" not in plain.update(batch, np.full(4, 9.0), np.zeros(4, dtype=bool))
    assert plain.restarts.count == 1  # loaded, never incremented


def test_a_search_with_restarts_improves_and_is_refused_on_ray(rnnlm_small, k80x2):
    """A search with restarts improves on its start, restarts when it stalls and logs its restarts in
    the learning curve; Ray refuses the option before any actor starts (each controller would
    restart on its own incumbent)."""
    from cluster.factory import make_environment
    from placer.distributed import RaySettings, ray_controllers

    env = make_environment("sim", rnnlm_small, k80x2)
    cls = LEARNERS["ppo"]
    config = cls.Config(seed=0, init="single_gpu", moves_per_sample=4, restart_after=24, budget=240)
    learner = cls(env, config)
    result = run_search(learner, env)
    start = env.measure_batch([learner.start])[0].step_time_s
    assert result.best_step_time_s < start  # it improves on the start (placement 0, so never worse)
    assert learner.restarts.count >= 1 and result.updates[-1]["restarts"] == learner.restarts.count
    with pytest.raises(ValueError, match=r"restart_after: 24 \(ppo\)"):
        with ray_controllers("ppo", config, rnnlm_small, k80x2, settings=RaySettings(controllers=2)):
            pass


def test_a_warm_variant_restarts_by_default_but_not_on_ray():
    """The warm-started variants restart from the incumbent by default (``restart_after`` 48, with
    ``scope_moves`` 0.25, the grouper + placer learners' 0.1); on Ray that default is left out (each controller's incumbent is its own),
    and the faithful learners never restart unless asked."""
    from placer.configs import WARM_RESTART_AFTER, WARM_SCOPE_MOVES, WARM_SCOPE_MOVES_GROUPER
    from tasks.search import learner_config

    warm = learner_config("ppo_warm", 100, 0)
    assert warm.restart_after == WARM_RESTART_AFTER == 48 and warm.scope_moves == WARM_SCOPE_MOVES == 0.25
    for grouper in ("eagle_warm", "eagle_ce_warm", "hierarchical_warm"):  # a tenth, beside one-group moves
        assert learner_config(grouper, 100, 0).scope_moves == WARM_SCOPE_MOVES_GROUPER == 0.1
    assert learner_config("hierarchical", 100, 0).scope_moves == 0
    assert learner_config("eagle", 100, 0).scope_moves == 0 and learner_config("rl_warm", 100, 0).scope_moves == 0.25
    assert learner_config("ppo_warm", 100, 0, on_ray=True).restart_after is None
    assert learner_config("ppo_warm", 100, 0, {"restart_after": 12}, on_ray=True).restart_after == 12  # Ray refuses it
    assert learner_config("ppo", 100, 0).restart_after is None and learner_config("ppo", 100, 0).scope_moves == 0
    assert not hasattr(learner_config("local_search_warm", 100, 0), "restart_after")
    for field, bad in (("restart_after", 0), ("scope_moves", 2), ("moves_per_sample", -1)):  # the learner's bounds hold
        with pytest.raises(ValueError, match=field):
            learner_config("ppo_warm", 100, 0, {field: bad})


def test_every_warm_learner_descends_over_layers_first_by_default_but_not_on_ray():
    """``layer_descent`` 0.125 is the default of ``post_warm``, ``ppo_warm``, ``ce_warm``, ``pg_warm`` and
    ``rl_warm`` (measured faster on nmt, even elsewhere), 0.25 of ``eagle_warm``, ``eagle_ce_warm`` and
    ``hierarchical_warm`` (the grouper + placer learners: at 0.125 EAGLE's slow runs on nmt left the
    descent at the expert's basin), not of any faithful learner; on Ray the default is left out; its bounds hold."""
    from placer.configs import WARM_LAYER_DESCENT, WARM_LAYER_DESCENT_GROUPER
    from tasks.search import learner_config

    for name in ("post_warm", "ppo_warm", "ce_warm", "pg_warm", "rl_warm", "eagle_warm", "eagle_ce_warm", "hierarchical_warm"):
        grouper = name.startswith(("eagle", "hierarchical"))
        assert learner_config(name, 2400, 0).layer_descent == (WARM_LAYER_DESCENT_GROUPER if grouper else WARM_LAYER_DESCENT)
        assert learner_config(name, 2400, 0, on_ray=True).layer_descent == 0
    assert (WARM_LAYER_DESCENT, WARM_LAYER_DESCENT_GROUPER) == (0.125, 0.25)
    for name in ("post", "rl", "hierarchical", "eagle", "ce"):
        assert learner_config(name, 2400, 0).layer_descent == 0
    assert not hasattr(learner_config("local_search_warm", 100, 0), "layer_descent")
    with pytest.raises(ValueError, match="layer_descent"):
        learner_config("post_warm", 100, 0, {"layer_descent": 1.5})


def test_resume_on_ray_reads_the_ray_log_with_the_ray_settings(tmp_path):
    """``--resume`` on Ray compares the search's own log (``-<method>-ray<N>-``), written without the
    warm default's restarts and layer descent, with the settings it would run now: an in-process log of
    the same search (``restart_after`` 48, ``layer_descent`` 0.125) is not the one resumed and is not compared."""
    import json

    from tasks.config import ExperimentConfig
    from tasks.search import learner_config, log_names, resume_problem, run_paths, searched_log

    config = ExperimentConfig(methods=["ppo_warm"], budget=24, ray={"controllers": 2},
                              tracking={"out_dir": str(tmp_path), "resume": True})
    names = log_names(config)
    local = run_paths(tmp_path, *names, "ppo_warm", 0, 24)[0]
    on_ray = searched_log(local, "ppo_warm", config.ray)
    assert on_ray != local and "-ppo_warm-ray2-" in on_ray.name
    local.parent.mkdir(parents=True)
    header = {"learner": "ppo_warm", **learner_config("ppo_warm", 24, 0).model_dump()}
    local.write_text(json.dumps({"search": header}) + "\n")  # restart_after 48: in-process
    assert resume_problem(config, names) is None  # no Ray log yet: the Ray search starts afresh
    on_ray.write_text(json.dumps({"search": {**header, "restart_after": None, "layer_descent": 0.0}}) + "\n")
    assert resume_problem(config, names) is None
    on_ray.write_text(json.dumps({"search": {**header, "layer_descent": 0.0}}) + "\n")
    assert "restart_after: 48 in the log" in (resume_problem(config, names) or "")
    on_ray.write_text(json.dumps({"search": {**header, "restart_after": None}}) + "\n")
    assert "layer_descent: 0.125 in the log" in (resume_problem(config, names) or "")


def test_the_experiment_refuses_restart_after_on_ray_before_any_search():
    """``restart_after`` given for a learner that runs on Ray is refused when the experiment is
    configured, naming the learner and the value (not when its search starts, after the others
    ran); a warm variant's default is no refusal (it runs without restarts there)."""
    from tasks.config import ExperimentConfig

    with pytest.raises(ValueError, match=r"learners\.ppo\.restart_after: 12 restarts one search"):
        ExperimentConfig(methods=["rl", "ppo"], ray={"controllers": 2}, learners={"ppo": {"restart_after": 12}})
    assert ExperimentConfig(methods=["ppo_warm"], ray={"controllers": 2}).learner_options == {}
    assert ExperimentConfig(methods=["ppo"], learners={"ppo": {"restart_after": 12}}).learner_options == {
        "ppo": {"restart_after": 12}}  # in one process: taken


def test_layer_descent_measures_every_layer_move_then_takes_the_fastest_or_kicks():
    """The descent measures all of its point's neighbours (each layer whole on each other device)
    before it moves, moves to the *fastest* of them (not the first faster one), kicks from a point
    none beats (the kick measured first, then its own neighbours), and resumes from its state."""
    from placer.features import DESCENT_KICK, LayerDescent

    layers = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    start = np.ones(6, dtype=np.int64)

    def new() -> LayerDescent:
        return LayerDescent(layers, [1, 2], budget=40, rng=np.random.default_rng(0))

    def batch(d: LayerDescent, point: np.ndarray, k: int) -> np.ndarray:
        n = d.rows(k, point, 1.0)
        return np.stack([d.next() for _ in range(n)]) if n else np.zeros((0, 6), dtype=np.int64)

    d = new()
    layer_time = {(0, 1): 0.9, (2, 3): 0.5, (4, 5): 0.8}  # each neighbour's time, by the layer it moves

    def times(rows: np.ndarray, point: np.ndarray) -> np.ndarray:
        return np.array([layer_time[tuple(np.flatnonzero(r != point))] for r in rows])

    first = batch(d, start, 2)
    assert len(first) == 2  # two of the point's three neighbours
    d.keep(first, times(first, start))
    assert np.array_equal(d.point, start) and d.point_time == 1.0  # not moved before every neighbour is measured
    rest = batch(d, start, 8)
    assert len(rest) == 1  # the batch is cut at the third: the point has no more to measure
    rows = np.concatenate([first, rest])
    assert sorted(tuple(np.flatnonzero(r != start)) for r in rows) == sorted(layer_time)
    assert (rows[rows != start] == 2).all()
    d.keep(rest, times(rest, start))
    fastest = start.copy()
    fastest[[2, 3]] = 2
    assert np.array_equal(d.point, fastest) and d.point_time == 0.5  # the fastest, whatever the order
    second = batch(d, fastest, 8)
    assert len(second) == 3 and all(len(np.flatnonzero(r != fastest)) == 2 for r in second)
    d.keep(second, np.full(3, 0.7))  # none beats 0.5: a kick
    assert d.kicks == 1
    state = d.state_dict()  # as a checkpoint saves it, after the batch
    kicked = batch(d, fastest, 1)[0]
    changed = {i for i, g in enumerate(layers) if not np.array_equal(kicked[g], fastest[g])}
    assert len(changed) <= DESCENT_KICK and all(len(set(kicked[layers[i]].tolist())) == 1 for i in changed)
    assert np.isnan(d.point_time) and np.array_equal(d.point, kicked)
    d.keep(kicked[None, :], np.array([3.0]))  # the kick is taken whatever its time
    assert d.point_time == 3.0 and np.array_equal(d.point, kicked)
    again = new()
    again.load_state_dict(state)
    assert again.kicks == 1 and again.used == d.used - 1 and np.isnan(again.point_time)
    assert np.array_equal(batch(again, fastest, 1)[0], kicked)  # the same kick from the saved state
    while d.left():
        rows = batch(d, fastest, 8)
        d.keep(rows, np.full(len(rows), 5.0))
    assert d.ended and d.used == 40


@pytest.mark.parametrize("name", ["post", "ppo", "ce", "pg", "rl", "hierarchical", "eagle", "eagle_ce"])
def test_every_learner_descends_over_whole_layers_then_restarts_on_the_incumbent(name, rnnlm_small, k80x2):
    """``layer_descent=N / budget``: after the start, the first rows of each batch, N in all, are the start
    with whole layers ([`compgraph.grouping.layer_scopes`]) moved to GPUs, the first ones every
    single-layer move (the rest of a batch that ends a neighbourhood are the policy's); then its policy
    restarts on the fastest placement so far, and its samples are the policy's again."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping, layer_scopes

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle", "eagle_ce") else {}
    layers = [np.asarray(g) for _, g in layer_scopes(list(env.grouping.names))]
    start = cls(env, cls.Config(seed=0, init="single_gpu", **small)).start
    neighbours = set()  # the start's: each layer whole on each GPU it is not wholly on
    for g in layers:
        for d in k80x2.gpu_indices:
            if not (start[g] == d).all():
                p = start.copy()
                p[g] = d
                neighbours.add(p.tobytes())
    n = len(neighbours) + 30  # and then a kick and some of its neighbours
    learner = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, layer_descent=n / 400, budget=400,
                                  **small))
    assert np.array_equal(learner.start, start)
    learner.observe_start(1.0)
    descent = learner.scope.descent
    assert descent is not None
    rows: list[np.ndarray] = []
    faster = None
    while descent.left() > 0:
        before = descent.used
        batch = learner.sample(learner.batch_size)
        got = np.asarray(batch.placements)[: descent.used - before]  # the descent takes a batch's first rows
        assert len(got)
        rows.extend(got)
        times = np.full(len(batch.placements), 5.0)
        if faster is None and before >= len(neighbours):  # after the first neighbourhood (a kick): faster
            faster = got[0].copy()
            times[0] = 0.5
        learner.update(batch, times, np.zeros(len(times), dtype=bool))

    def whole_layers(row: np.ndarray) -> bool:  # every unit off the start is in a layer wholly on one device
        off = set(np.flatnonzero(row != start).tolist())
        hit = [g for g in layers if off & set(g.tolist())]
        in_layers = set().union(*[set(g.tolist()) for g in hit]) if hit else set()
        return off <= in_layers and all(len(set(row[g].tolist())) == 1 for g in hit)

    assert {r.tobytes() for r in rows[: len(neighbours)]} == neighbours
    assert len(rows) == n and all(whole_layers(r) for r in rows)
    assert faster is not None and np.array_equal(learner.scope.incumbent, faster)
    assert np.array_equal(learner.restarts.centre, faster)  # restarted on the incumbent
    after = np.asarray(learner.sample(64).placements)
    assert (after == faster).mean() > 0.8  # the policy's own samples again, centred on the incumbent
    assert not all(whole_layers(r) for r in after)


def test_layer_descent_is_refused_at_the_budget_and_on_ray(rnnlm_small, k80x2):
    """``layer_descent`` is a share of the budget below 1 (at 1 the policy would never sample); Ray
    refuses it before any actor starts, and so does the experiment's config; a warm variant's default
    is left out on Ray."""
    from placer.distributed import RaySettings, ray_controllers
    from tasks.config import ExperimentConfig
    from tasks.search import learner_config

    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="layer_descent"):
            LEARNERS["post"].Config(layer_descent=bad)
    config = LEARNERS["ppo"].Config(seed=0, init="single_gpu", layer_descent=0.1, budget=240)
    with pytest.raises(ValueError, match=r"layer_descent: 0.1 \(ppo\)"):
        with ray_controllers("ppo", config, rnnlm_small, k80x2, settings=RaySettings(controllers=2)):
            pass
    with pytest.raises(ValueError, match=r"learners\.ppo\.layer_descent: 0.1"):
        ExperimentConfig(methods=["ppo"], ray={"controllers": 2}, learners={"ppo": {"layer_descent": 0.1}})
    assert ExperimentConfig(methods=["ppo"], learners={"ppo": {"layer_descent": 0.1}}).learner_options == {
        "ppo": {"layer_descent": 0.1}}
    assert learner_config("ppo", 240, 0, {"layer_descent": 0.1}, on_ray=True).layer_descent == 0.1  # Ray refuses it
    assert learner_config("ppo_warm", 240, 0, on_ray=True).layer_descent == 0


def _interrupted_and_resumed(make, stop: int, tmp_path: Path):
    """The search of a fresh ``make()`` (``(learner, env)``) interrupted after ``stop`` placements with its log and
    a checkpoint after every batch, then resumed from them by another fresh ``make()``: the resumed result."""
    from test_learners import Interrupt, StopAfter

    log, ckpt = tmp_path / "s.jsonl", tmp_path / "s.pt"
    learner, env = make()
    with pytest.raises(Interrupt):
        run_search(learner, StopAfter(env, stop), log_path=log, checkpoint_path=ckpt, checkpoint_every_s=0.0)
    learner, env = make()
    return run_search(learner, env, log_path=log, checkpoint_path=ckpt, resume=True, checkpoint_every_s=0.0)


@pytest.mark.parametrize("stop", [20, 30])
def test_a_search_with_a_layer_descent_resumes_to_the_same_result(stop, rnnlm_small, k80x2, tmp_path):
    """Interrupted inside the descent and resumed from its log and checkpoint, a search with
    ``layer_descent`` gives the same placements as the uninterrupted one, and is never slower than
    its start: checkpointed in the middle of a neighbourhood (after 1 + 12 placements, 12 of the 17
    measured) and at its end (1 + 24)."""
    from cluster.factory import make_environment

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_learners import _strip

    def make():
        env = make_environment("sim", rnnlm_small, k80x2)
        cls = LEARNERS["post"]
        return cls(env, cls.Config(seed=3, init="single_gpu", moves_per_sample=4, layer_descent=40 / 96, budget=96)), env

    learner, env = make()
    whole = run_search(learner, env)
    assert whole.best_step_time_s <= whole.step_times[0]
    assert learner.scope.descent.used == 40
    assert _strip(_interrupted_and_resumed(make, stop, tmp_path)) == _strip(whole)


def test_no_layer_descent_on_one_gpu_and_the_other_options_still_work(rnnlm_small):
    """On a cluster with one GPU no layer has anywhere to go: the learner builds no descent, and its scope
    moves and restarts run as without the option (a descent with no neighbour would have held them
    off for the whole search); a descent whose point has no neighbour ends."""
    from cluster.factory import make_environment
    from cluster.spec import load_cluster
    from placer.features import LayerDescent

    spec = load_cluster("h100x1")
    env = make_environment("sim", rnnlm_small, spec)
    cls = LEARNERS["post"]
    learner = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, scope_moves=0.5, restart_after=12,
                                  layer_descent=0.125, budget=400))
    assert learner.scope.descent is None
    learner.observe_start(1.0)
    assert not learner.scope.descending() and any(len(learner.scope.rows(12)) for _ in range(5))  # scope moves
    for _ in range(6):
        batch = learner.sample(12)
        learner.update(batch, np.full(12, 5.0), np.zeros(12, dtype=bool))
    assert learner.restarts.count >= 5  # one each 12 placements without a faster one
    d = LayerDescent([np.array([0, 1])], [1], budget=10, rng=np.random.default_rng(0))
    assert d.rows(4, np.ones(2, dtype=np.int64), 1.0) == 0 and d.left() == 0 and not d.ended


@pytest.mark.parametrize("name", ["post", "ce", "rl", "hierarchical", "eagle"])
def test_unit_moves_move_one_unit_of_the_incumbent(name, rnnlm_small, k80x2):
    """``unit_moves=1``: once a placement is measured, every sample is the fastest placement so far
    with exactly one unit moved to another device; with scope moves beside them each sample is one
    or the other, in about their shares."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping, name_scopes

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle") else {}
    learner = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, unit_moves=1.0, **small))
    first = learner.sample(4)
    times = np.array([m.step_time_s for m in env.measure_batch(first.placements)])
    learner.update(first, times, np.zeros(4, dtype=bool))
    best = first.placements[int(np.argmin(times))]
    samples = learner.sample(32).placements
    assert ((samples != best).sum(axis=1) == 1).all()  # one unit each, to a device it was not on
    mixed = cls(env, cls.Config(seed=0, init="single_gpu", moves_per_sample=4, unit_moves=0.5, scope_moves=0.5,
                                **small))
    first = mixed.sample(4)  # its own first batch (the update reads what its sampling kept)
    times = np.array([m.step_time_s for m in env.measure_batch(first.placements)])
    mixed.update(first, times, np.zeros(4, dtype=bool))
    best = first.placements[int(np.argmin(times))]
    scopes = [set(groups.tolist()) for _, groups in name_scopes(list(env.grouping.names))]
    rows = mixed.sample(64).placements
    one = (rows != best).sum(axis=1) == 1
    for row in rows[~one]:  # the rest: one scope moved whole (or nothing, a scope already on its device)
        moved = set(np.flatnonzero(row != best).tolist())
        assert not moved or any(moved <= s and len(set(row[sorted(s)].tolist())) == 1 for s in scopes), moved
    assert 10 <= one.sum() <= 54  # both kinds, about half each


def test_unit_moves_off_draw_as_before_and_a_share_above_every_sample_is_refused():
    """At ``unit_moves=0`` the scope moves draw from the generator exactly as without the option (the
    runs before it reproduce); ``scope_moves + unit_moves`` above 1 is refused naming both values."""
    from placer.features import ScopeMoves, move_scope, scopes_by_depth

    names = [f"net/layer_{i // 4}/op_{i % 4}" for i in range(16)]
    base = np.ones(16, dtype=np.int64)
    for seed in range(10):
        moves = ScopeMoves(names, 0.5, 3, np.random.default_rng(seed))
        moves.keep(base[None], np.array([1.0]))
        rows, p = moves.rows(8), moves.moved()
        ref = np.random.default_rng(seed)
        want = np.flatnonzero(ref.random(8) < 0.5)
        q = base.copy()
        move_scope(ref, q, scopes_by_depth(names), 3)
        assert np.array_equal(rows, want) and np.array_equal(p, q)
        assert moves.rng.bit_generator.state == ref.bit_generator.state
    only = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=0.5)  # no scope moves: every move a unit's
    only.keep(base[None], np.array([1.0]))
    assert len(only.rows(100)) > 20 and all((only.moved() != base).sum() == 1 for _ in range(20))
    assert not len(ScopeMoves(names, 0.0, 1, np.random.default_rng(0), units=0.5).rows(8))  # one device: none
    with pytest.raises(ValueError, match="unit_moves 0.6.*scope_moves 0.5"):
        LEARNERS["post"].Config(scope_moves=0.5, unit_moves=0.6)
    with pytest.raises(ValueError, match="unit_moves"):
        LEARNERS["rl"].Config(unit_moves=1.5)


def test_every_warm_learner_moves_single_units_by_default_and_no_faithful_one():
    """``unit_moves``: 0.5 in ``post_warm``, ``ppo_warm``, ``ce_warm``, ``pg_warm`` and ``rl_warm``
    (``placer.configs.WARM_UNIT_MOVES``), in shares that follow what pays; 0.8 in ``eagle_warm``,
    ``eagle_ce_warm`` and ``hierarchical_warm`` (``WARM_UNIT_MOVES_GROUPER``) over the co-location groups, in
    fixed shares; both with don't-look bits and kicks; 0 in the faithful learners; a warm
    variant's scope moves above 0.5 are refused until ``unit_moves`` is lowered, naming both."""
    from placer.configs import CONFIGS, WARM_UNIT_KICK, WARM_UNIT_MOVES, WARM_UNIT_MOVES_GROUPER

    assert WARM_UNIT_MOVES == 0.5 and WARM_UNIT_KICK == 2 and WARM_UNIT_MOVES_GROUPER == 0.8
    warm = {"post_warm", "ppo_warm", "ce_warm", "pg_warm", "rl_warm"}
    grouper = {"eagle_warm", "eagle_ce_warm", "hierarchical_warm"}
    for name, config in CONFIGS.items():
        if "unit_moves" in config.model_fields:
            assert config().unit_moves == (WARM_UNIT_MOVES if name in warm else
                                           WARM_UNIT_MOVES_GROUPER if name in grouper else 0.0), name
            if "moves_over" in config.model_fields:
                assert config().moves_over == ("groups" if name in grouper else "units"), name
    assert warm | grouper <= {n for n, c in CONFIGS.items() if "unit_moves" in c.model_fields}
    for name, config in CONFIGS.items():  # and draw them among those not tried (the softmax learners in shares that follow what pays)
        if "adaptive_shares" in config.model_fields:
            assert config().adaptive_shares == (name in warm), name
            assert config().unit_dont_look == (name in warm | grouper), name
            assert config().unit_kick == (WARM_UNIT_KICK if name in warm | grouper else 0), name  # and kick at a local optimum
    assert CONFIGS["post_warm"](unit_moves=0).unit_dont_look  # the default with unit moves off: inert, not refused
    assert CONFIGS["post_warm"](unit_dont_look=False).unit_kick == WARM_UNIT_KICK  # inert too (no bits: no kick)
    assert CONFIGS["eagle_warm"](unit_moves=0).moves_over == "groups"  # inert too
    with pytest.raises(ValueError, match=r"unit_moves 0.8: with scope_moves 0.5 .*lower one.*eagle_warm, eagle_ce_warm and hierarchical_warm to 0.8"):
        CONFIGS["eagle_warm"](scope_moves=0.5)  # the old default share needs unit_moves lowered, naming both
    with pytest.raises(ValueError, match=r"unit_moves 0.8: with scope_moves 0.9 .*lower one"):
        CONFIGS["hierarchical_warm"](scope_moves=0.9)  # the Hierarchical Planner's old default share too
    with pytest.raises(ValueError, match=r"unit_moves 0.5: with scope_moves 0.6 .*lower one"):
        CONFIGS["rl_warm"](scope_moves=0.6)
    assert CONFIGS["rl_warm"](scope_moves=0.6, unit_moves=0.4).scope_moves == 0.6


def test_a_unit_move_lands_on_every_other_device_and_never_outside_them():
    """Unit moves of one unit over many draws: every device but the unit's own, and none other."""
    from placer.features import ScopeMoves

    names = [f"net/op_{i}" for i in range(3)]
    base = np.array([0, 3, 1], dtype=np.int64)
    moves = ScopeMoves(names, 0.0, 4, np.random.default_rng(0), units=1.0)
    moves.keep(base[None], np.array([1.0]))
    seen: dict[int, set[int]] = {u: set() for u in range(3)}
    for _ in range(400):
        p = moves.moved()
        (u,) = np.flatnonzero(p != base)
        seen[int(u)].add(int(p[u]))
    assert all(seen[u] == set(range(4)) - {int(base[u])} for u in range(3)), seen


def _chain(n: int) -> list[np.ndarray]:
    """The neighbours of a chain of ``n`` units: unit ``i`` exchanges tensors with ``i - 1`` and ``i + 1``."""
    return [np.array([j for j in (i - 1, i + 1) if 0 <= j < n], dtype=np.int64) for i in range(n)]


def test_unit_dont_look_draws_each_untried_move_once_until_a_neighbour_moves():
    """``unit_dont_look``: from one base every (unit, device) move is drawn once before any again; a
    move faster than the incumbent stays drawable; a new incumbent makes the moves of the units that
    moved and of their neighbours drawable again, and no other."""
    from placer.features import ScopeMoves

    names = [f"net/op_{i}" for i in range(6)]
    base = np.zeros(6, dtype=np.int64)
    moves = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=1.0, neighbours=_chain(6))
    moves.keep(base[None], np.array([1.0]))
    drawn = []
    for _ in range(4):  # four batches of three, every one slower than the incumbent
        batch = np.stack([moves.moved() for _ in range(3)])
        drawn += [(int(u), int(p[u])) for p in batch for u in np.flatnonzero(p != base)]
        moves.keep(batch, np.full(3, 2.0))
    assert sorted(drawn) == [(u, d) for u in range(6) for d in (1, 2)]  # all 12, none twice
    again = moves.moved()  # every move tried: all drawable again
    assert (again != base).sum() == 1
    moves.keep(again[None], np.array([2.0]))

    fresh = ScopeMoves(names, 0.0, 3, np.random.default_rng(1), units=1.0, neighbours=_chain(6))
    fresh.keep(base[None], np.array([1.0]))
    tried = [fresh.moved() for _ in range(12)]
    fast = tried[0]
    fresh.keep(np.stack(tried), np.array([0.9] + [2.0] * 11))  # the first faster: the new incumbent
    (unit,) = np.flatnonzero(fast != base)
    near = {int(unit), *(int(j) for j in _chain(6)[unit])}
    units = set()
    for _ in range(2 * len(near)):  # drawable now: the two moves of each unit near the moved one, no other
        p = fresh.moved()
        (u,) = np.flatnonzero(p != fast)
        units.add(int(u))
    assert units == near, (units, near)

    kept = ScopeMoves(names, 0.0, 3, np.random.default_rng(2), units=1.0, neighbours=_chain(6))
    kept.keep(base[None], np.array([1.0]))
    batch = np.stack([kept.moved() for _ in range(2)])
    kept.keep(batch, np.array([0.8, 0.9]))  # the second was faster too but not taken: drawable again
    second = (int(np.flatnonzero(batch[1] != base)[0]), int(batch[1][batch[1] != base][0]))
    assert kept._untried is not None and kept._untried[second]
    with pytest.raises(ValueError, match="unit_dont_look true: only with unit_moves"):
        LEARNERS["post"].Config(unit_dont_look=True)


def test_unit_neighbours_are_the_units_an_edge_joins_on_a_real_graph(rnnlm_small, k80x2):
    """``unit_neighbours`` of the small RNNLM: symmetric, never the unit itself, and every edge between
    two groups makes them neighbours."""
    from cluster.factory import make_environment
    from placer.features import unit_neighbours

    env = make_environment("sim", rnnlm_small, k80x2)
    nbrs = unit_neighbours(env)
    group = env.grouping.op_group
    assert len(nbrs) == env.grouping.num_groups
    pairs = {(int(group[e.src]), int(group[e.dst])) for e in env.graph.edges if group[e.src] != group[e.dst]}
    assert pairs and all(b in nbrs[a] and a in nbrs[b] for a, b in pairs)
    assert all(u not in n for u, n in enumerate(nbrs))
    assert sum(len(n) for n in nbrs) == len(pairs | {(b, a) for a, b in pairs})


def test_adaptive_shares_follow_the_kind_of_sample_that_is_faster():
    """``adaptive_shares``: the shares start as given and hold until a sample is faster; then the kind
    whose samples are faster gets most of them, each other kind on keeps the floor, and a kind at 0
    stays 0. Off, the shares never change."""
    from placer.features import ScopeMoves

    names = [f"net/layer_{i // 4}/op_{i % 4}" for i in range(16)]
    base = np.ones(16, dtype=np.int64)
    moves = ScopeMoves(names, 0.25, 3, np.random.default_rng(0), units=0.5, adaptive=True)
    moves.keep(base[None], np.array([10.0]))
    assert np.allclose(moves.shares, [0.25, 0.25, 0.5])
    t = 10.0
    for _ in range(60):
        rows = moves.rows(12)
        batch = np.repeat(moves.incumbent[None], 12, axis=0)  # the policy's samples: the incumbent again
        kinds = np.zeros(12, dtype=int)
        for r in rows:
            batch[r] = moves.moved()
            kinds[r] = moves._kinds[batch[r].tobytes()]  # 1: a scope move, 2: a unit move, as handed out
        times = np.full(12, t + 1.0)
        unit_rows = np.flatnonzero(kinds == 2)
        if len(unit_rows):  # only the unit moves are ever faster
            t -= 0.01
            times[unit_rows[0]] = t
        moves.keep(batch, times)
    floor = ScopeMoves.ADAPTIVE_FLOOR
    assert moves.shares[2] > 0.8 and np.allclose(moves.shares[:2], floor) and np.isclose(moves.shares.sum(), 1.0)

    no_scope = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=0.5, adaptive=True)
    no_scope.keep(base[None], np.array([10.0]))
    no_scope.rows(12)
    policy = base.copy()
    policy[0] = 2  # a policy sample (not handed out by moved) that is faster
    no_scope.keep(np.stack([policy, no_scope.moved()]), np.array([9.0, 11.0]))
    assert no_scope.shares[1] == 0.0 and no_scope.shares[0] > no_scope.shares[2] >= floor

    no_policy = ScopeMoves(names, 0.5, 3, np.random.default_rng(0), units=0.5, adaptive=True)  # the policy at 0
    no_policy.keep(base[None], np.array([10.0]))
    no_policy.rows(12)
    no_policy.keep(np.stack([no_policy.moved(), no_policy.moved()]), np.array([9.0, 11.0]))
    assert no_policy.shares[0] == 0.0 and np.isclose(no_policy.shares.sum(), 1.0) and min(no_policy.shares[1:]) >= floor

    blind = ScopeMoves(names, 0.25, 3, np.random.default_rng(0), units=0.5, adaptive=True)
    blind.rows(12)  # no incumbent yet (an OOM start, or Ray): every sample is "faster" than inf, none counts
    blind.keep(np.stack([base, base + 1]), np.array([9.0, 8.0]))
    assert np.allclose(blind.shares, [0.25, 0.25, 0.5]) and not blind._tried.any()
    blind.rows(12)
    blind.keep(np.zeros((0, 16), dtype=np.int64), np.zeros(0))  # an empty batch: nothing counted, no error
    assert np.allclose(blind.shares, [0.25, 0.25, 0.5])

    fixed = ScopeMoves(names, 0.25, 3, np.random.default_rng(0), units=0.5)
    fixed.keep(base[None], np.array([10.0]))
    fixed.rows(12)
    fixed.keep(np.stack([fixed.moved()]), np.array([1.0]))
    assert np.allclose(fixed.shares, [0.25, 0.25, 0.5])
    with pytest.raises(ValueError, match="adaptive_shares true: only with scope_moves or unit_moves"):
        LEARNERS["rl"].Config(adaptive_shares=True)


@pytest.mark.parametrize("name", ["post", "rl", "hierarchical", "eagle"])
def test_every_learner_adapts_its_shares_and_skips_tried_unit_moves(name, rnnlm_small, k80x2):
    """``adaptive_shares`` and ``unit_dont_look`` in every learner with scope moves: a search of 96
    placements ends no slower than its start, its shares moved off the configured ones once a
    sample was faster, and no unit move was handed out twice from one base while untried ones were
    left."""
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping

    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else None
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    small = {"hidden_size": 16} if name in ("rl", "hierarchical", "eagle") else {}
    learner = cls(env, cls.Config(seed=0, budget=96, init="single_gpu", moves_per_sample=4, scope_moves=0.25,
                                  unit_moves=0.5, adaptive_shares=True, unit_dont_look=True, **small))
    scope = learner.scope
    drawn: list[tuple[bytes, int, int]] = []
    draw = scope._untried_move

    def recorded(base):
        unit, device = draw(base)
        drawn.append((base.tobytes(), unit, device))
        return unit, device

    scope._untried_move = recorded
    r = run_search(learner, env)
    assert r.best_step_time_s < r.step_times[0]  # it improved on the single-GPU start
    assert len(drawn) > 10 and len(set(drawn)) == len(drawn)  # no move drawn twice from one base
    assert scope.adaptive and scope.neighbours is not None
    assert not np.allclose(scope.shares, [0.25, 0.25, 0.5]) and np.isclose(scope.shares.sum(), 1.0)
    assert scope._untried is not None and not scope._untried.all()


@pytest.mark.parametrize("name", ["post", "rl"])
def test_a_search_with_adaptive_shares_and_dont_look_resumes_to_the_same_result(name, rnnlm_small, k80x2, tmp_path):
    """Interrupted and resumed from its log and checkpoint, a search with ``adaptive_shares`` and
    ``unit_dont_look`` gives the same placements as the uninterrupted one: Post (the moves draw from
    its own generator) and the 2017 placer (the moves' own generator, saved as ``scope_rng``)."""
    from cluster.factory import make_environment

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_learners import _strip

    def make():
        env = make_environment("sim", rnnlm_small, k80x2)
        cls = LEARNERS[name]
        small = {"hidden_size": 16} if name == "rl" else {}
        return cls(env, cls.Config(seed=3, init="single_gpu", moves_per_sample=4, scope_moves=0.25, unit_moves=0.5,
                                   adaptive_shares=True, unit_dont_look=True, budget=96, **small)), env

    learner, env = make()
    whole = run_search(learner, env)
    assert _strip(_interrupted_and_resumed(make, 49, tmp_path)) == _strip(whole)


def test_coarse_of_gives_each_colocation_unit_the_prepared_group_that_holds_it(rnnlm_small):
    """``coarse_of``: every colocation unit of the small RNNLM lies in one 2017 group, and its
    ``coarse_group`` is that group; a coarse grouping that splits units (one group per op) gives none.
    ``learner_grouping`` gives the Hierarchical Planner's and EAGLE's units their groups, the others the groups."""
    from compgraph.grouping import coarse_of, colocation_grouping
    from compgraph.ir import Grouping
    from tasks.search import learner_grouping

    units = colocation_grouping(rnnlm_small.graph)
    out = coarse_of(units, rnnlm_small.grouping)
    assert out.coarse_group is not None and len(out.coarse_group) == units.num_groups
    assert np.array_equal(out.coarse_group[units.op_group], rnnlm_small.grouping.op_group)
    assert len(set(out.coarse_group.tolist())) == rnnlm_small.grouping.num_groups < units.num_groups
    per_op = Grouping(np.arange(rnnlm_small.graph.num_ops), [op.name for op in rnnlm_small.graph.ops], "per-op")
    assert coarse_of(units, per_op).coarse_group is None
    with pytest.raises(ValueError, match="coarse grouping: covers 2 ops"):
        coarse_of(units, Grouping(np.zeros(2, dtype=np.int64), ["g"]))
    for name in ("hierarchical", "eagle"):
        g = learner_grouping(name, rnnlm_small)
        assert g.coarse_group is not None and np.array_equal(g.coarse_group, out.coarse_group)
    assert learner_grouping("post", rnnlm_small) is rnnlm_small.grouping
    assert learner_grouping("eagle", rnnlm_small, LEARNERS["eagle"].Config(units="groups")) is rnnlm_small.grouping


def test_moves_over_groups_move_a_whole_block_to_a_device_not_all_of_it_is_on():
    """``blocks`` (the named option ``moves_over="groups"``): a unit move puts every unit of one
    block on one device, never one all of the block is on already; with ``unit_dont_look`` each (block,
    device) pair is drawn once from a base, and a new incumbent makes the pairs of the moved block and
    of its neighbour blocks drawable again."""
    from placer.features import ScopeMoves

    names = [f"net/op_{i}" for i in range(8)]
    blocks = np.array([0, 0, 1, 1, 1, 2, 3, 3], dtype=np.int64)
    base = np.array([0, 1, 2, 2, 2, 0, 1, 1], dtype=np.int64)  # block 0 split over two devices
    moves = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=1.0, blocks=blocks)
    moves.keep(base[None], np.array([1.0]))
    seen: dict[int, set[int]] = {b: set() for b in range(4)}
    for _ in range(400):
        p = moves.moved()
        changed = np.flatnonzero(p != base)
        (b,) = set(blocks[changed].tolist())
        members = np.flatnonzero(blocks == b)
        assert len(set(p[members].tolist())) == 1  # the whole block on one device
        seen[b].add(int(p[members[0]]))
    assert seen == {0: {0, 1, 2}, 1: {0, 1}, 2: {1, 2}, 3: {0, 2}}, seen  # block 0 may join either of its devices

    look = ScopeMoves(names, 0.0, 3, np.random.default_rng(1), units=1.0, blocks=blocks, neighbours=_chain(4))
    look.keep(base[None], np.array([1.0]))
    tried = [look.moved() for _ in range(9)]  # 3 + 2 + 2 + 2 pairs that move something
    pairs = {(int(blocks[np.flatnonzero(p != base)[0]]), int(p[np.flatnonzero(p != base)[0]])) for p in tried}
    assert len(pairs) == 9 and look._untried is not None and look._untried.shape == (4, 3)
    fast = next(p for p in tried if set(blocks[p != base].tolist()) == {3})  # block 3 moved: new incumbent
    look.keep(np.stack(tried), np.where([np.array_equal(p, fast) for p in tried], 0.5, 2.0))
    now = int(fast[blocks == 3][0])
    drawn = set()
    for _ in range(4):  # drawable now: block 3's two other devices and block 2's two (its neighbour), no other
        p = look.moved()
        (u,) = np.flatnonzero(p != fast)[:1]
        drawn.add((int(blocks[u]), int(p[u])))
    assert drawn == {(3, d) for d in range(3) if d != now} | {(2, 1), (2, 2)}, drawn
    with pytest.raises(ValueError, match="moves_over 'groups': only with scope_moves, unit_moves or layer_descent"):
        LEARNERS["hierarchical"].Config(moves_over="groups")
    assert LEARNERS["eagle"].Config(moves_over="groups", scope_moves=0.5).moves_over == "groups"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hierarchical", "eagle"])
def test_hierarchical_and_eagle_move_whole_prepared_groups_with_moves_over_groups(name, rnnlm_small, k80x2):
    """The Hierarchical Planner and EAGLE over colocation units, with ``moves_over="groups"``: their
    units go by their 2017 groups' names, so every name scope and every layer of the descent is a union
    of whole groups; every unit move of a search puts one whole group on one device (several units at
    once for some); the search improves on its start. With ``"units"`` a unit goes by its own name."""
    from cluster.factory import make_environment
    from compgraph.grouping import layer_scopes
    from placer.features import ScopeMoves
    from tasks.search import learner_grouping

    cls = LEARNERS[name]
    config = cls.Config(seed=0, budget=36, init="single_gpu", moves_per_sample=4, unit_moves=1.0,
                        unit_dont_look=True, moves_over="groups", hidden_size=16)
    grouping = learner_grouping(name, rnnlm_small, config)
    env = make_environment("sim", rnnlm_small, k80x2, grouping=grouping)
    coarse = grouping.coarse_group
    assert coarse is not None

    def whole(units) -> bool:  # the units are every unit of the groups they touch
        units = np.asarray(units)
        return np.isin(np.flatnonzero(np.isin(coarse, coarse[units])), units).all()

    scoped = ScopeMoves.of_learner(env, config.model_copy(update={"scope_moves": 0.5, "unit_moves": 0.5}),
                                   np.random.default_rng(0))
    scopes = [g for gs in scoped.scopes.values() for g in gs]
    names = [grouping.coarse_names[g] for g in coarse]
    assert scopes and all(whole(g) for g in scopes) and all(whole(g) for _, g in layer_scopes(names))
    by_unit = ScopeMoves.of_learner(env, config.model_copy(update={"scope_moves": 0.5, "moves_over": "units"}),
                                    np.random.default_rng(0))
    assert by_unit.block_of is None and not all(whole(g) for gs in by_unit.scopes.values() for g in gs)

    learner = cls(env, config)
    scope, handed = learner.scope, []
    moved = scope.moved

    def recorded(base=None):
        before = (scope.current if scope.current is not None else scope.incumbent).copy()
        p = moved(base)
        handed.append((before, p))
        return p

    scope.moved = recorded
    r = run_search(learner, env)
    assert r.best_step_time_s < r.step_times[0] and len(handed) > 20
    assert np.array_equal(scope.block_of, coarse)
    for before, p in handed:
        changed = np.flatnonzero(p != before)
        (g,) = set(coarse[changed].tolist())
        assert len(set(p[coarse == g].tolist())) == 1  # the whole group on one device
    assert max(len(np.flatnonzero(p != b)) for b, p in handed) > 1  # some group has several units



def test_blocks_that_do_not_cover_the_units_are_refused():
    """``ScopeMoves`` ``blocks``: one index per unit, every block ``0..B-1`` used; anything else is refused,
    with the counts."""
    from placer.features import ScopeMoves

    names = [f"net/op_{i}" for i in range(4)]
    for bad in ([0, 0, 1], [0, 0, 2, 2], [-1, 0, 0, 1]):
        with pytest.raises(ValueError, match="blocks: expected one block index per unit"):
            ScopeMoves(names, 0.0, 2, np.random.default_rng(0), units=0.5, blocks=np.array(bad))
    assert ScopeMoves(names, 0.0, 2, np.random.default_rng(0), units=0.5, blocks=np.array([1, 1, 0, 0])).movable == 2


def test_unit_kick_kicks_the_incumbent_at_a_local_optimum_and_walks_from_there():
    """``unit_kick``: once every (unit, device) move from the moves' base is tried and none is faster, the
    next move is a kick: the incumbent (not the walk) with two neighbouring units moved to one device. The
    draws before it are those without the option; the moves then start from the kick; the walk takes the
    fastest of a batch's moves since the kick when faster than itself (not the incumbent, nor a move handed
    out before the kick); a move from the walk faster than it but not taken stays drawable; a new incumbent
    puts the walk on it; and from the first kick on no placement is handed out twice. Without the option,
    every move is drawable again (the 13th move is one of the 12 tried)."""
    from placer.features import ScopeMoves

    def connected_kick(p, ref):  # two neighbours on the chain, both now on one device
        units = np.flatnonzero(p != ref)
        return len(units) == 2 and units[1] - units[0] == 1 and p[units[0]] == p[units[1]]

    names = [f"net/op_{i}" for i in range(6)]
    base = np.zeros(6, dtype=np.int64)
    moves = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=1.0, neighbours=_chain(6), kick=2)
    plain = ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=1.0, neighbours=_chain(6))
    assert ScopeMoves(names, 0.0, 3, np.random.default_rng(0), units=1.0, neighbours=_chain(6), kick=2,
                      travel=0.1).kick == 0  # a walk of its own: no kicks
    handed: list[bytes] = []
    for m in (moves, plain):
        m.keep(base[None], np.array([1.0]))
        for _ in range(3):  # nine of the 12 moves from the incumbent, all slower
            batch = np.stack([m.moved() for _ in range(3)])
            m.keep(batch, np.full(3, 2.0))
            handed += [p.tobytes() for p in batch] if m is moves else []
    last = [plain.moved() for _ in range(3)]
    again = plain.moved()
    assert again.tobytes() in set(handed) | {p.tobytes() for p in last}  # without a kick, a move tried before
    batch = np.stack([moves.moved() for _ in range(6)])  # the last 3 moves, the kick, two moves from it
    assert all(np.array_equal(a, b) for a, b in zip(batch[:3], last))  # the same draws as without the option
    kick = batch[3]
    assert connected_kick(kick, base) and moves.kicks == 1 and all((p != kick).sum() == 1 for p in batch[4:])
    handed += [p.tobytes() for p in batch]
    moves.keep(batch, np.array([1.2, 2.0, 2.0, 1.5, 1.4, 1.3]))
    assert np.array_equal(moves.current, batch[5]) and moves.current_time == 1.3  # not 1.2: before the kick
    assert moves.incumbent_time == 1.0 and np.array_equal(moves.incumbent, base)
    (u4,) = np.flatnonzero(batch[4] != kick)
    assert moves._untried is not None and moves._untried[u4, batch[4][u4]]  # faster than the kick: drawable
    walk = moves.current.copy()
    while moves.kicks == 1:  # every move from the walk, all slower: the next kick, from the incumbent
        p = moves.moved()
        handed.append(p.tobytes())
        moves.keep(p[None], np.array([5.0]))
    assert connected_kick(p, base) and not np.array_equal(walk, base)
    batch = np.stack([moves.moved() for _ in range(2)])
    handed += [p.tobytes() for p in batch]
    moves.keep(batch, np.array([0.9, 1.2]))  # a new incumbent: the walk goes there
    assert moves.incumbent_time == 0.9 and np.array_equal(moves.current, batch[0]) and moves.current_time == 0.9
    for _ in range(4):  # on to the next local optima and kicks
        batch = np.stack([moves.moved() for _ in range(3)])
        handed += [p.tobytes() for p in batch]
        moves.keep(batch, np.full(3, 5.0))
    after = handed[9 + 3:]  # from the first kick on: nothing handed out twice, nor anything seen before
    assert moves.kicks >= 3 and len(set(after)) == len(after) and not set(after) & set(handed[:12])


def test_unit_kick_draws_as_without_it_until_its_first_kick():
    """Until the first kick, ``unit_kick`` draws the same moves as without it, a placement seen before
    included (here the old incumbent, one move back from the new one): the memo of placements seen only
    skips moves from the first kick on, so a run that never reaches a local optimum ends as before."""
    from placer.features import ScopeMoves

    names = [f"net/op_{i}" for i in range(6)]
    base = np.zeros(6, dtype=np.int64)
    kicker = ScopeMoves(names, 0.0, 3, np.random.default_rng(5), units=1.0, neighbours=_chain(6), kick=2)
    plain = ScopeMoves(names, 0.0, 3, np.random.default_rng(5), units=1.0, neighbours=_chain(6))
    drawn = []
    for m in (kicker, plain):
        m.keep(base[None], np.array([1.0]))
    times = np.array([0.9, 2.0, 2.0])  # a new incumbent, then every move slower
    while kicker.kicks == 0:
        a, b = np.stack([kicker.moved() for _ in range(3)]), np.stack([plain.moved() for _ in range(3)])
        if kicker.kicks == 0:
            assert np.array_equal(a, b)
            drawn += [p.tobytes() for p in a]
        kicker.keep(a, times)
        plain.keep(b, times)
        times = np.full(3, 2.0)
    assert base.tobytes() in drawn  # the old incumbent was drawn again, as without the option


def test_unit_kick_needs_the_dont_look_bits_and_no_travel():
    """``unit_kick`` asked for without ``unit_dont_look`` (which say when to kick), or with ``scope_travel``
    (a walk of its own), is refused, naming the fields."""
    with pytest.raises(ValueError, match="unit_kick 2: only with unit_dont_look true and unit_moves > 0 .got unit_dont_look False"):
        LEARNERS["post"].Config(unit_kick=2, unit_moves=0.5)
    with pytest.raises(ValueError, match="unit_kick 2: not with scope_travel 0.1"):
        LEARNERS["rl"].Config(unit_kick=2, unit_moves=0.5, unit_dont_look=True, scope_moves=0.25, scope_travel=0.1)
    with pytest.raises(ValueError, match="unit_kick 1: a kick of one unit is a unit move"):
        LEARNERS["post"].Config(unit_kick=1, unit_moves=0.5, unit_dont_look=True)
    ok = LEARNERS["eagle"].Config(unit_kick=2, unit_moves=0.5, unit_dont_look=True)
    assert ok.unit_kick == 2


@pytest.mark.parametrize("name", ["post", "rl"])
def test_a_search_with_unit_kicks_kicks_and_resumes_to_the_same_result(name, rnnlm_small, k80x2, tmp_path):
    """A search with ``unit_kick`` on the small RNNLM (two GPUs and a CPU: few moves, so local optima
    come soon) kicks, hands out no placement seen before from its first kick on, and, interrupted and resumed from its log and
    checkpoint (which keep the walk and the memo of placements seen), gives the same placements."""
    from cluster.factory import make_environment

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_learners import _strip

    def make():
        env = make_environment("sim", rnnlm_small, k80x2)
        cls = LEARNERS[name]
        small = {"hidden_size": 16} if name == "rl" else {}
        return cls(env, cls.Config(seed=3, init="single_gpu", unit_moves=0.9, unit_dont_look=True, unit_kick=2,
                                   budget=480, **small)), env

    learner, env = make()
    handed: list[tuple[int, bytes]] = []  # (kicks so far, the placement) of each move handed out
    moved = learner.scope.moved

    def recorded(base=None):
        p = moved(base)
        handed.append((learner.scope.kicks, p.tobytes()))
        return p

    learner.scope.moved = recorded
    whole = run_search(learner, env)
    first = next(i for i, (kicks, _) in enumerate(handed) if kicks)  # the first kick
    after = [p for _, p in handed[first:]]
    assert learner.scope.kicks > 1 and len(after) > 50 and len(set(after)) == len(after)
    assert not set(after) & {p for _, p in handed[:first]}  # from the first kick on, nothing seen is drawn
    assert _strip(_interrupted_and_resumed(make, 299, tmp_path)) == _strip(whole)
