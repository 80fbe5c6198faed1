"""The 2017 placement search: REINFORCE on the seq2seq placer.

Mirhoseini et al. 2017, Sec. 3.1: minimise ``J(theta) = E_P[R(P)]`` with
``R(P) = sqrt(step time)`` by the REINFORCE estimate with a baseline (Eq. 3)::

    grad J ~= 1/K * sum_i (R(P_i) - B) * grad log p(P_i | G; theta)

over K sampled placements per update, optimised with Adam. ``B`` is a moving average
of the rewards, initialised to the *failing signal* (the reward given to a placement that
runs out of memory), which "results in more exploration". After
``valid_only_after`` updates (5,000 in the paper), an update uses only the placements
that ran.

The learner [`ReinforceLearner`][placer.reinforce.ReinforceLearner] (method ``rl``) runs through the one search loop
([`placer.search.run_search`][placer.search.run_search]): every sampled placement and its measurement is
appended to the search's log *before* the policy uses it, so an interrupted search
resumes where it stopped (same seed and settings: same result).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from cluster.environment import Environment
from placer.configs import ReinforceConfig
from placer.features import Restarts, ScopeMoves, group_features, initial_state, oom_values, static_memory_load
from placer.learner import Learner, Samples, register
from placer.search import serial_time
from placer.seq2seq import Seq2SeqPlacer
from placer.warm import start_log_probs


def batch_advantage(
    rewards: list[float], ran: list[bool], baseline: float, updates: int, valid_only_after: int, normalize_advantage: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Rewards, mask and advantage of one batch of K placements (2017 Sec. 3.1, Eq. 3).

    Args:
        rewards: ``R`` of each placement (sqrt of seconds; the failing signal for OOM).
        ran: whether each placement ran (did not run out of memory).
        baseline: the moving-average baseline ``B``.
        updates: policy updates made so far (after ``valid_only_after`` of them, only
            placements that ran count).
        normalize_advantage: the named option: ``(R - mean(R)) / std(R)`` instead of ``R - B``.
    Returns:
        ``(R [K], mask [K], advantage [K])``; the advantage is ``None`` when the mask is empty.
    """
    k = len(rewards)
    r = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(k) if updates < valid_only_after else torch.tensor(ran, dtype=torch.float32)
    if not mask.sum() > 0:
        return r, mask, None
    adv = r - baseline
    if normalize_advantage and k > 1:
        adv = (r - r.mean()) / (r.std() + 1e-8)
    return r, mask, adv


def reinforce_loss(
    adv: torch.Tensor, logp: torch.Tensor, ent: torch.Tensor, mask: torch.Tensor, entropy_coef: float
) -> torch.Tensor:
    """Eq. 3's loss over K placements, ``1/K sum (R - B) log p``, minus the optional entropy bonus."""
    k = len(mask)
    return (adv * logp * mask).sum() / k - entropy_coef * (ent * mask).sum() / k


FAILING_FACTOR = 10.0


def default_failing_signal(env: Environment) -> float:
    """``sqrt(10 * T_serial)`` ([`serial_time`][placer.search.serial_time]): the reward of a placement that ran out of memory."""
    return float(math.sqrt(FAILING_FACTOR * serial_time(env)))


@register
class ReinforceLearner(Learner):
    """The 2017 placer as a [`placer.learner.Learner`][placer.learner.Learner] (method ``rl``; module docstring).

    Policy: [`placer.seq2seq.Seq2SeqPlacer`][placer.seq2seq.Seq2SeqPlacer] over ``env``'s groups, initialised from
    ``torch.manual_seed(seed)``, sampling with its own generator seeded by ``seed``. Update:
    Eq. 3 with the moving-average baseline (or the named PPO option), Adam. With a warm start
    (``init`` ``best_baseline`` or ``placement``; in no paper, [`placer.warm`][placer.warm]) the decoder's
    logits get a constant prior that makes the start about ``init_prob`` likely per group.
    """

    Config = ReinforceConfig
    config: ReinforceConfig
    failing_signal: float
    paper = "Mirhoseini et al., Device Placement Optimization with Reinforcement Learning, ICML 2017, Sec. 3.1-3.2, Eq. 3"
    units = "groups"
    policy_devices = ("cpu", "cuda")

    def __init__(self, env: Environment, config: ReinforceConfig) -> None:
        super().__init__(env, config)
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        torch.manual_seed(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.policy = Seq2SeqPlacer(group_features(env.graph, env.grouping), len(env.spec.devices),
                                    hidden_size=config.hidden_size, attention_size=config.attention_size)
        if self.start is not None:  # warm start (placer.warm, in no paper): a constant prior on the decoder's logits
            self.policy.set_prior(start_log_probs(self.start, len(env.spec.devices), self.init_prob))
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.failing_signal = config.failing_signal if config.failing_signal is not None else default_failing_signal(env)
        # the paper starts B at the failing signal ("more exploration"); a warm start starts it at its first batch's
        # mean reward (update): exploring away from the start would undo it (placer.warm)
        self.baseline: float | None = self.failing_signal if self.start is None else None
        self.updates = 0
        self.memory_load = static_memory_load(env) if config.oom_reward == "memory_scaled" else None
        #: ``scope_moves`` (named option): the name scopes, their own generator and the incumbent
        self.scope = ScopeMoves.of_learner(env, config, np.random.default_rng(config.seed))
        #: ``restart_after`` (named option): restarts from the incumbent, from the initial parameters
        self.restarts = Restarts(config.restart_after)
        self._initial = initial_state(self.policy) if config.restart_after is not None or config.layer_descent else {}

    @property
    def batch_size(self) -> int:
        return self.config.k

    def to(self, device: str) -> ReinforceLearner:
        """Move the policy (and its sampling generator, reseeded with ``seed`` off the CPU) to
        ``device`` (``cpu`` or ``cuda``; the distributed search's ``policy_device``)."""
        self.policy.to(device)
        state = self.generator.get_state()
        self.generator = torch.Generator(device=device)
        if device == "cpu":
            self.generator.set_state(state)
        else:
            self.generator.manual_seed(self.config.seed)
        return self

    def sample(self, k: int) -> Samples:
        """``k`` placements from the seq2seq policy, scored in the same pass (kept for the update)."""
        placements, logp, ent = self.policy(k, generator=self.generator)
        rows = self.scope.incumbent_rows(k)
        if len(rows):  # scope_moves: some samples move a scope of the incumbent (scope_travel: of the walk)
            moved = placements.cpu().numpy().copy()
            for i in rows:
                moved[i] = self.scope.moved()
            placements = torch.from_numpy(moved).to(placements.device)
            _, logp, ent = self.policy(k, actions=placements)  # teacher-forced: their own log-probabilities
        return Samples(placements.cpu().numpy(), logp.detach().cpu().numpy().astype(np.float64),
                       extra={"actions": placements, "logp": logp, "entropy": ent})

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """Eq. 3 (or the PPO option) on the batch; rewards ``sqrt(step time)``, the failing signal for OOM."""
        config = self.config
        k = len(step_times_s)
        oom_r = oom_values(self.failing_signal, self.memory_load, samples.placements, oom)
        before = self.scope.incumbent_time
        self.scope.keep(samples.placements, np.where(oom, np.inf, step_times_s))  # the fastest placement so far
        rewards = [float(f) if o else math.sqrt(t) for t, o, f in zip(step_times_s.tolist(), oom.tolist(), oom_r.tolist())]
        ran = [not o for o in oom.tolist()]
        logp, ent = samples.extra["logp"], samples.extra["entropy"]
        if self.baseline is None:  # a warm start: B starts at the first batch's mean reward (of those that ran)
            self.baseline = float(np.mean([x for x, ok in zip(rewards, ran) if ok] or rewards))
        r, mask, adv = batch_advantage(rewards, ran, self.baseline, self.updates, config.valid_only_after,
                                       config.normalize_advantage)
        mask = mask.to(logp.device)
        adv = adv.to(logp.device) if adv is not None else None
        diagnostics = {"baseline": self.baseline, "entropy": float(ent.detach().mean())}
        if adv is not None:
            if config.ppo_epochs == 0:
                loss = reinforce_loss(adv, logp, ent, mask, config.entropy_coef)
                self._step(loss)
                diagnostics["loss"] = float(loss.detach())
            else:
                old_logp = logp.detach()
                gain = -adv.detach()  # advantage of a placement: how much faster than the baseline
                for epoch in range(config.ppo_epochs):
                    if epoch > 0:
                        _, logp, ent = self.policy(k, actions=samples.extra["actions"])
                    ratio = torch.exp(logp - old_logp)
                    clipped = torch.clamp(ratio, 1 - config.ppo_clip, 1 + config.ppo_clip)
                    surrogate = torch.minimum(ratio * gain, clipped * gain)
                    loss = -(surrogate * mask).sum() / k - config.entropy_coef * (ent * mask).sum() / k
                    self._step(loss)
                diagnostics["loss"] = float(loss.detach())
                diagnostics["kl"] = float((old_logp - logp.detach()).mean())
        if config.baseline_samples == "all":
            self.baseline = config.baseline_decay * self.baseline + (1 - config.baseline_decay) * float(r.mean())
        elif any(ran):
            ran_mean = float(r[torch.tensor(ran)].mean())
            self.baseline = config.baseline_decay * self.baseline + (1 - config.baseline_decay) * ran_mean
        self.updates += 1
        centre = self.restarts.due(self.scope, before, k)
        if centre is not None:  # named option restart_after
            self._restart(centre)
        diagnostics.update(self.restarts.diagnostics())
        return diagnostics

    def _restart(self, centre: np.ndarray) -> None:
        """``restart_after``: the decoder's initial parameters, a fresh Adam, the prior on ``centre``
        (``[G]`` devices, ``init_prob`` each) and the baseline at the next batch's mean reward."""
        self.policy.load_state_dict(self._initial)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.config.learning_rate)
        self.policy.set_prior(start_log_probs(centre, self.policy.num_devices, self.init_prob))
        self.baseline = None

    def _step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        loss.backward()
        if self.config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.grad_clip)
        self.optimizer.step()

    def observe_start(self, step_time_s: float | None) -> None:
        """The start (warm start or device prior) is the first incumbent when it ran (``scope_moves``
        move scopes of it until a sample is faster)."""
        self.scope.observe_start(self.start, step_time_s)

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "baseline": self.baseline,
            "updates": self.updates,
            "failing_signal": self.failing_signal,
            **self.scope.state_dict(),
            **self.restarts.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.updates = int(state["updates"])
        self.failing_signal = float(state["failing_signal"])
        self.scope.load_state_dict(state)
        self.restarts.load_state_dict(state)
        if self.restarts.centre is not None:  # the prior is not a parameter: rebuilt on the latest restart's incumbent
            self.policy.set_prior(start_log_probs(self.restarts.centre, self.policy.num_devices, self.init_prob))
