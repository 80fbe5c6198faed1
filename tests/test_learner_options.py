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
    assert warm.Config(scope_travel=0.01).scope_moves == 0.9
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
    ``scope_moves`` 0.25, EAGLE's 0.5, the Hierarchical Planner's 0.9); on Ray that default is left out (each controller's incumbent is its own),
    and the faithful learners never restart unless asked."""
    from placer.configs import WARM_RESTART_AFTER, WARM_SCOPE_MOVES, WARM_SCOPE_MOVES_EAGLE, WARM_SCOPE_MOVES_HIERARCHICAL
    from tasks.search import learner_config

    warm = learner_config("ppo_warm", 100, 0)
    assert warm.restart_after == WARM_RESTART_AFTER == 48 and warm.scope_moves == WARM_SCOPE_MOVES == 0.25
    for eagle in ("eagle_warm", "eagle_ce_warm"):  # EAGLE's warm variants move scopes in half their samples
        assert learner_config(eagle, 100, 0).scope_moves == WARM_SCOPE_MOVES_EAGLE == 0.5
    # the Hierarchical Planner's in nine of ten: its own REINFORCE step, one placement an update, moves slowly
    assert learner_config("hierarchical_warm", 100, 0).scope_moves == WARM_SCOPE_MOVES_HIERARCHICAL == 0.9
    assert learner_config("hierarchical", 100, 0).scope_moves == 0
    assert learner_config("eagle", 100, 0).scope_moves == 0 and learner_config("rl_warm", 100, 0).scope_moves == 0.25
    assert learner_config("ppo_warm", 100, 0, on_ray=True).restart_after is None
    assert learner_config("ppo_warm", 100, 0, {"restart_after": 12}, on_ray=True).restart_after == 12  # Ray refuses it
    assert learner_config("ppo", 100, 0).restart_after is None and learner_config("ppo", 100, 0).scope_moves == 0
    assert not hasattr(learner_config("local_search_warm", 100, 0), "restart_after")
    for field, bad in (("restart_after", 0), ("scope_moves", 2), ("moves_per_sample", -1)):  # the learner's bounds hold
        with pytest.raises(ValueError, match=field):
            learner_config("ppo_warm", 100, 0, {field: bad})


def test_resume_on_ray_reads_the_ray_log_with_the_ray_settings(tmp_path):
    """``--resume`` on Ray compares the search's own log (``-<method>-ray<N>-``), written without the
    warm default's restarts, with the settings it would run now: an in-process log of the same search
    (``restart_after`` 48) is not the one resumed and is not compared."""
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
    on_ray.write_text(json.dumps({"search": {**header, "restart_after": None}}) + "\n")
    assert resume_problem(config, names) is None
    on_ray.write_text(json.dumps({"search": header}) + "\n")
    assert "restart_after: 48 in the log" in (resume_problem(config, names) or "")


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
