"""Post (Gao et al. 2018): determinism, the cross-entropy update, OOM handling, log replay."""

from types import SimpleNamespace

import numpy as np
import pytest

from cluster.environment import Measurement
from cluster.simulated import SimulatedEnvironment
from compgraph.ir import Grouping
from placer.post import PostConfig, PostLearner
from placer.search import run_search


def run_post(env, config, log_path=None):
    """Post's search of ``env``'s groups (:func:`placer.search.run_search`), an existing log replayed."""
    return run_search(PostLearner(env, config), env, log_path=log_path, resume=True)


class CountingEnv:
    """A hand-made environment: step time = 1 ms per group not on device 2; OOM if group 0 is on device 0."""

    kind = "toy"

    def __init__(self, groups: int = 10, devices: int = 3) -> None:
        self.graph = SimpleNamespace(name="toy")
        self.grouping = Grouping(op_group=np.arange(groups), names=[f"g{i}" for i in range(groups)], grouper="none")
        self.spec = SimpleNamespace(name="toy", devices=[object()] * devices)
        self.calls = 0

    def measure(self, placement):
        self.calls += 1
        p = np.asarray(placement)
        if p[0] == 0:
            return Measurement(step_time_s=None, oom=True)
        return Measurement(step_time_s=1e-3 * float((p != 2).sum()) + 1e-3, oom=False)


def test_post_finds_the_optimum_of_a_separable_problem():
    env = CountingEnv()
    r = run_post(env, PostConfig(budget=600, seed=0, failing_time_s=1.0))
    assert r.best_step_time_s == pytest.approx(1e-3)  # every group on device 2
    assert list(r.best_placement) == [2] * 10
    # the cross-entropy updates concentrate the samples: the last batch is mostly optimal
    assert r.curve[-1]["sample_mean_step_time_s"] < 2.5e-3
    assert len(r.step_times) == 600 and env.calls == 600
    assert 0 < r.cpu_time_s and r.to_json()["cpu_time_s"] == r.cpu_time_s  # the search loop's CPU-seconds


def test_post_oom_samples_never_become_the_best_and_are_logged_as_none():
    env = CountingEnv()
    r = run_post(env, PostConfig(budget=60, seed=1, failing_time_s=1.0))
    assert any(t is None for t in r.step_times)  # group 0 on device 0 happens early
    assert r.best_placement[0] != 0
    assert r.failing_signal == 1.0


def test_post_is_deterministic_by_seed_on_the_simulator(rnnlm_small, k80x2):
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)
    a = run_post(env, PostConfig(budget=120, seed=3))
    b = run_post(env, PostConfig(budget=120, seed=3))
    c = run_post(env, PostConfig(budget=120, seed=4))
    assert a.step_times == b.step_times and list(a.best_placement) == list(b.best_placement)
    assert a.step_times != c.step_times
    # the default failing time is 10 x T_serial of the slowest device
    assert a.failing_signal == pytest.approx(10 * np.asarray(env.simulator.op_times).sum(axis=0).max())


def test_post_replays_its_placement_log(tmp_path):
    log = tmp_path / "post.jsonl"
    env = CountingEnv()
    first = run_post(env, PostConfig(budget=72, seed=0, failing_time_s=1.0), log_path=log)
    assert len(log.read_text().splitlines()) == 73  # header + 72 placements
    again = CountingEnv()
    second = run_post(again, PostConfig(budget=72, seed=0, failing_time_s=1.0), log_path=log)
    assert again.calls == 0 and second.step_times == first.step_times
    with pytest.raises(ValueError, match="other settings"):
        run_post(CountingEnv(), PostConfig(budget=72, seed=1, failing_time_s=1.0), log_path=log)


def test_rank_advantages_are_centred_ranks_in_half_units():
    from placer.post import rank_advantage

    a = rank_advantage(np.array([3.0, 1.0, 200.0, 2.0, 2.0]))  # an OOM placement at 200 s
    assert a.tolist() == pytest.approx([-0.25, 0.5, -0.5, 0.125, 0.125])
    assert rank_advantage(np.array([5.0])).tolist() == [0.0]


@pytest.mark.parametrize("advantage, bounded", [("seconds", False), ("rank", True)])
def test_one_oom_placement_moves_pgs_tables_by_its_seconds_unless_ranked(advantage, bounded):
    """``pg`` with the paper's advantage in seconds takes one step of learning rate 1 on ``b - T``: an OOM
    placement at the failing time (100 s here) moves the tables by tens and the distributions collapse;
    with ``advantage="rank"`` every step is at most ``lr * 0.5`` per decision."""
    from placer.configs import PGConfig
    from placer.post_ablations import PGLearner

    env = CountingEnv()
    learner = PGLearner(env, PGConfig(budget=24, seed=0, failing_time_s=100.0, advantage=advantage))
    samples = learner.sample(12)
    times = np.full(12, 5e-3)
    oom = np.zeros(12, dtype=bool)
    oom[3] = True
    before = learner.u.clone()
    learner.update(samples, times, oom)
    moved = float((learner.u - before).abs().max())
    assert (moved <= 0.5) if bounded else (moved > 5.0)


def test_rank_advantages_are_refused_with_ppo():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="advantage 'rank': only with policy_update 'pg'"):
        PostConfig(advantage="rank")


def _random_policy_batch(seed: int, g: int, d: int, k: int, spread: float):
    """Random old logits ``[g, d]``, new ones ``spread`` away, ``k`` sampled devices per group and advantages:
    ``(u, idx, adv, p_old, u_t, logp)``, the last three torch (``u_t`` requiring grad, ``logp`` its log-softmax)."""
    import torch

    rng = np.random.default_rng(seed)
    u_old = rng.normal(size=(g, d))
    u = u_old + spread * rng.normal(size=(g, d))
    idx = rng.integers(0, d, size=(g, k))
    adv = rng.normal(size=k)
    p_old = torch.softmax(torch.from_numpy(u_old), dim=1)
    u_t = torch.from_numpy(u.copy()).requires_grad_(True)
    return u, idx, adv, p_old, u_t, torch.log_softmax(u_t, dim=1)


@pytest.mark.parametrize("rule", ["ppo", "pg"])
def test_closed_form_policy_gradient_equals_autograd_of_eq_11(rule):
    """The closed-form objective and gradient of ``_policy_step`` equal torch autograd through
    ``log_softmax`` of Eq. 11 (PPO with the KL penalty) and of the REINFORCE step, at random logits."""
    import torch

    from placer.post import policy_batch_constants, policy_objective_grad

    beta = 0.7
    u, idx, adv, p_old, u_t, logp = _random_policy_batch(3, 7, 4, 5, 0.3)
    sel = logp.gather(1, torch.from_numpy(idx))
    a = torch.from_numpy(adv)
    if rule == "ppo":
        ratio = sel.exp() / p_old.gather(1, torch.from_numpy(idx))
        kl = (p_old * (torch.log(p_old) - logp)).sum(dim=1)
        objective = (ratio * a.unsqueeze(0)).sum(dim=0).mean() - beta * kl.sum()
    else:
        objective = (sel.sum(dim=0) * a).mean()
    (grad,) = torch.autograd.grad(objective, u_t)
    j, dj = policy_objective_grad(u, p_old.numpy(), idx, adv, beta, rule)
    assert j == pytest.approx(float(objective.detach()), rel=1e-12)
    np.testing.assert_allclose(dj, grad.numpy(), rtol=1e-10, atol=1e-14)
    assert np.abs(dj).max() > 1e-3  # not a vanishing gradient that would pass anyway
    # the batch's constants kept over an update's steps (as _policy_step does): the same to the bit
    j2, dj2 = policy_objective_grad(u, p_old.numpy(), idx, adv, beta, rule, policy_batch_constants(p_old.numpy(), idx))
    assert j2 == j and np.array_equal(dj2, dj)
    with pytest.raises(ValueError, match="rule: 'ce'"):
        policy_objective_grad(u, p_old.numpy(), idx, adv, beta, "ce")


def test_clipped_surrogate_gradient_equals_autograd():
    """``clip``: the closed form of PPO's clipped surrogate (Schulman et al. 2017, Eq. 7) with Post's KL
    penalty equals autograd through ``min(r A, clamp(r) A)``, at logits far enough from the old ones
    that some ratios leave ``[1 - eps, 1 + eps]`` on both sides of the advantage's sign."""
    import torch

    from placer.post import policy_objective_grad

    beta, eps = 0.5, 0.2
    u, idx, adv, p_old, u_t, logp = _random_policy_batch(4, 9, 4, 6, 0.8)
    ratio = logp.gather(1, torch.from_numpy(idx)).exp() / p_old.gather(1, torch.from_numpy(idx))
    a = torch.from_numpy(adv).unsqueeze(0)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
    kl = (p_old * (torch.log(p_old) - logp)).sum(dim=1)
    objective = surrogate.sum(dim=0).mean() - beta * kl.sum()
    (grad,) = torch.autograd.grad(objective, u_t)
    r = ratio.detach().numpy()
    clipped = (r * adv > np.clip(r, 1 - eps, 1 + eps) * adv)
    assert clipped.sum() >= 3  # the clip is the minimum somewhere, so the two objectives differ
    j, dj = policy_objective_grad(u, p_old.numpy(), idx, adv, beta, "ppo", clip=eps)
    assert j == pytest.approx(float(objective.detach()), rel=1e-12)
    np.testing.assert_allclose(dj, grad.numpy(), rtol=1e-10, atol=1e-14)
    j0, dj0 = policy_objective_grad(u, p_old.numpy(), idx, adv, beta, "ppo")
    assert j0 > j and not np.allclose(dj0, dj)


@pytest.mark.parametrize("ppo_clip", [None, 0.2])
def test_a_ppo_step_never_leaves_the_policy_non_finite(ppo_clip):
    """A warm start's distributions saturate (a logit hundreds above the others: ``p_old`` underflows to
    0 in float64 on the other devices), and a sample there (a scope move, not drawn from the policy)
    had ratio ``p / p_old = 0 / 0``: the tables became NaN and every later sample put every group on
    device 0. The ratio is now ``exp(log p - log p_old)`` of the finite old log-probability (1 at the
    first step). Unclipped, the log-ratio of that off-policy sample still grows step by step (0.3, 0.8,
    1.5, 3.1, then 10.4 at the sixth step, which saturates the group's table on the sampled device, and
    about 1900 at the seventh, which overflows): that step is not taken, the update keeps the last
    finite logits and counts it (``nonfinite_steps``); with ``ppo_clip`` its term stops at ``(1 + eps) A``."""
    from placer.post import _log_softmax, policy_batch_constants, policy_objective_grad
    import torch

    from placer.configs import PPOConfig
    from placer.post_ablations import PPOLearner

    env = CountingEnv()
    learner = PPOLearner(env, PPOConfig(budget=48, seed=0, failing_time_s=1.0, ppo_clip=ppo_clip))
    u = torch.full((10, 3), -400.0, dtype=torch.float64)
    u[:, 1] = 1500.0
    learner.u = u
    placements = np.ones((12, 10), dtype=np.int64)
    placements[0, 4] = 2  # p_old = exp(-1900): 0 in float64
    adv = np.full(12, -0.1)
    adv[0] = 2.0
    logp_old = _log_softmax(u.numpy())
    idx = np.ascontiguousarray(placements.T)
    first, _ = policy_objective_grad(u.numpy(), np.exp(logp_old), idx, adv, 1.0, "ppo",
                                     policy_batch_constants(np.exp(logp_old), idx, logp_old), ppo_clip)
    assert first == pytest.approx(adv.sum() / 12 * 10)  # every ratio 1 at the old logits, the 0 / 0 one too
    diagnostics = learner._policy_step(adv, placements)
    assert torch.isfinite(learner.u).all()
    assert float(learner.u[4, 2]) > -400.0  # the steps raised the sampled device's logit
    stopped = int(ppo_clip is None)
    assert learner.nonfinite_steps == stopped and diagnostics["nonfinite_steps"] == stopped
    assert np.isfinite(diagnostics["loss"]) and np.isfinite(diagnostics["kl"])
    samples = learner.sample(12).placements
    assert (np.delete(samples, 4, axis=1) == 1).all() and (samples[:, 4] != 0).all()  # not device 0 of NaN tables
    assert learner.state_dict()["nonfinite_steps"] == stopped


def test_ppo_clip_is_bounded():
    from pydantic import ValidationError

    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValidationError, match="ppo_clip"):
            PostConfig(ppo_clip=bad)
    from placer.configs import CEConfig, PGConfig

    for config in (PGConfig, CEConfig):  # no PPO step: nothing to clip, so refused rather than ignored
        with pytest.raises(ValidationError, match="ppo_clip 0.2: only with policy_update 'ppo'"):
            config(ppo_clip=0.2)
