"""TEMPORARY (i12-distributed, until the learner-contract merge): the 2017 placer and Post as
:class:`placer.learner.Learner` subclasses, so that the distributed search
(:func:`placer.distributed.distributed_search`) runs ``rl`` and ``post`` before the real
registry entries (helper i9-core: ``placer.LEARNERS["rl"]``, ``["post"]``) land.

At the merge: delete this module and ``INTERIM_LEARNERS``'s use in
:func:`placer.distributed.resolve_learner`; the real learners take over by name. What the real
``post`` (and ``eagle_ce``) learner must add for its cross-entropy step to run at the
parameter server is in :mod:`placer.distributed` ("Extension of the learner contract").

These classes are NOT registered in :data:`placer.learner.LEARNERS` (the real ones would
then clash by name). They reproduce the in-process searches exactly: one controller of the
synchronous distributed search gives :func:`placer.reinforce.reinforce_search`'s result
(tests/test_distributed.py checks it); :class:`InterimPost` gives
:func:`placer.post.post_search`'s sampling and updates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from placer.learner import Learner, Samples
from placer.post import PostConfig, _kl
from placer.reinforce import ReinforceConfig, batch_advantage, default_failing_signal, reinforce_loss, serial_time


class InterimReinforce(Learner):
    """The 2017 seq2seq placer with REINFORCE (Mirhoseini et al. 2017, Sec. 3.1, Eq. 3): the
    update of :func:`placer.reinforce.reinforce_search` (``ppo_epochs=0``, no ``grad_clip``),
    as a learner. TEMPORARY (module docstring)."""

    name = "rl"
    Config = ReinforceConfig  # type: ignore[assignment]
    paper = "Mirhoseini et al. 2017, Sec. 3.1"

    def __init__(self, env, config: ReinforceConfig) -> None:
        from placer.features import group_features
        from placer.seq2seq import Seq2SeqPlacer

        if config.ppo_epochs or config.grad_clip is not None:
            raise ValueError(f"ppo_epochs={config.ppo_epochs}, grad_clip={config.grad_clip}: the interim rl learner "
                             "runs the 2017 REINFORCE update only")
        super().__init__(env, config)
        torch.manual_seed(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.policy = Seq2SeqPlacer(group_features(env.graph, env.grouping), len(env.spec.devices),
                                    hidden_size=config.hidden_size)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.failing_signal = (config.failing_signal if config.failing_signal is not None
                               else default_failing_signal(env))
        self.baseline = self.failing_signal
        self.updates = 0

    @property
    def batch_size(self) -> int:
        return self.config.k

    def to(self, device: str) -> InterimReinforce:
        """Move the policy (and its sampling generator) to ``device`` (``cpu`` or ``cuda``)."""
        self.policy.to(device)
        state = self.generator.get_state()
        self.generator = torch.Generator(device=device)
        if device == "cpu":
            self.generator.set_state(state)
        else:
            self.generator.manual_seed(self.config.seed)
        return self

    def sample(self, k: int) -> Samples:
        placements, logp, ent = self.policy(k, generator=self.generator)
        return Samples(placements.cpu().numpy().astype(np.int64), logp.detach().cpu().numpy().astype(np.float64),
                       {"logp": logp, "ent": ent})

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        cfg = self.config
        rewards = [self.failing_signal if o else math.sqrt(float(t)) for t, o in zip(step_times_s, oom)]
        r, mask, adv = batch_advantage(rewards, [not o for o in oom], self.baseline, self.updates,
                                       cfg.valid_only_after, cfg.normalize_advantage)
        loss = float("nan")
        if adv is not None:
            dev = samples.extra["logp"].device
            loss_t = reinforce_loss(adv.to(dev), samples.extra["logp"], samples.extra["ent"], mask.to(dev),
                                    cfg.entropy_coef)
            self.optimizer.zero_grad()
            loss_t.backward()
            self.optimizer.step()
            loss = float(loss_t.detach())
        self.baseline = cfg.baseline_decay * self.baseline + (1 - cfg.baseline_decay) * float(r.mean())
        self.updates += 1
        return {"loss": loss, "baseline": self.baseline}

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "baseline": self.baseline, "updates": self.updates, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline, self.updates = float(state["baseline"]), int(state["updates"])
        self.generator.set_state(state["generator"])


class InterimPost(Learner):
    """Post (Gao et al. 2018, Algorithm 1): softmax distributions per group, PPO every ``k``
    placements (Eq. 11), cross-entropy minimisation every ``n_ce`` placements (Eq. 10); the
    updates of :func:`placer.post.post_search` as a learner. TEMPORARY (module docstring).

    Distributed (:mod:`placer.distributed`): with ``pooled = True`` (set by the search on
    every controller's and the server's learner) :meth:`update` makes the PPO step only, and
    the cross-entropy step runs at the parameter server in :meth:`pooled_update` over the
    placements of all controllers.
    """

    name = "post"
    Config = PostConfig  # type: ignore[assignment]
    paper = "Gao et al. 2018, Sec. 3, Algorithm 1"

    def __init__(self, env, config: PostConfig) -> None:
        super().__init__(env, config)
        self.g, self.d = env.grouping.num_groups, len(env.spec.devices)
        self.rng = np.random.default_rng(config.seed)
        self.failing_signal = (config.failing_time_s if config.failing_time_s is not None
                               else 10.0 * serial_time(env))
        self.u = torch.zeros(self.g, self.d, dtype=torch.float64)
        self.beta = config.beta
        self.baseline: float | None = None
        self.period: list[tuple[float, np.ndarray]] = []
        self.sampled = 0
        self.pooled = False

    @property
    def batch_size(self) -> int:
        return self.config.k

    def sample(self, k: int) -> Samples:
        probs = torch.softmax(self.u, dim=1).numpy()
        draws = self.rng.random((k, self.g))
        cdf = np.cumsum(probs, axis=1)
        placements = np.minimum((draws[:, :, None] > cdf[None, :, :]).sum(axis=2), self.d - 1).astype(np.int64)
        logp = np.log(np.take_along_axis(probs, placements.T, axis=1).clip(1e-300)).sum(axis=0)
        return Samples(placements, logp)

    def _times(self, step_times_s: np.ndarray, oom: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(oom, dtype=bool), self.failing_signal, np.asarray(step_times_s, dtype=np.float64))

    def _cross_entropy(self, sampled: int) -> None:
        """Eq. 10 over ``self.period``: device frequencies among the elites, mixed with uniform (line 12)."""
        cfg = self.config
        self.period.sort(key=lambda x: x[0])
        elites = np.stack([p for _, p in self.period[: max(1, int(round(cfg.rho * len(self.period))))]])
        freq = np.zeros((self.g, self.d))
        for j in range(self.d):
            freq[:, j] = (elites == j).mean(axis=0)
        eps = cfg.epsilon * max(0.0, 1.0 - sampled / cfg.budget)
        self.u = torch.log(torch.from_numpy((1 - eps) * freq + eps / self.d).clamp_min(1e-6))
        self.period = []

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        cfg = self.config
        t_arr = self._times(step_times_s, oom)
        ce_due = False
        for t, row in zip(t_arr, samples.placements):
            self.sampled += 1
            if not self.pooled:
                self.period.append((float(t), row.copy()))
                ce_due = ce_due or self.sampled % cfg.n_ce == 0
        self.baseline = float(t_arr.mean()) if self.baseline is None else self.baseline
        kl = float("nan")
        if ce_due:
            self._cross_entropy(self.sampled)
        else:
            adv_np = self.baseline - t_arr
            if cfg.advantage == "relative":
                adv_np = adv_np / self.baseline
            adv = torch.from_numpy(adv_np)
            p_old = torch.softmax(self.u, dim=1).detach()
            idx = torch.from_numpy(samples.placements)
            old_sel = p_old.gather(1, idx.T)
            u_new = self.u.clone().requires_grad_(True)
            for _ in range(cfg.ppo_steps):
                logp_new = torch.log_softmax(u_new, dim=1)
                ratio = logp_new.gather(1, idx.T).exp() / old_sel
                objective = (ratio * adv.unsqueeze(0)).sum(dim=0).mean() - self.beta * _kl(p_old, logp_new).sum()
                (grad,) = torch.autograd.grad(objective, u_new)
                with torch.no_grad():
                    u_new += cfg.ppo_learning_rate * grad
            kl = float(_kl(p_old, torch.log_softmax(u_new.detach(), dim=1)).mean())
            if kl > 1.5 * cfg.kl_target:
                self.beta *= 2.0
            elif kl < cfg.kl_target / 1.5:
                self.beta /= 2.0
            self.u = u_new.detach()
        self.baseline = cfg.baseline_decay * self.baseline + (1 - cfg.baseline_decay) * float(t_arr.mean())
        return {"kl": kl, "beta": self.beta, "baseline": self.baseline, "cross_entropy": float(ce_due)}

    def pooled_update(self, batches: list[tuple[Samples, np.ndarray, np.ndarray]]) -> dict[str, float] | None:
        """The cross-entropy step at the parameter server (extension of the contract,
        :mod:`placer.distributed`): pool every controller's measured placements; each time the
        pool crosses a multiple of ``n_ce`` placements, replace the distributions by Eq. 10 over
        the period's elites. Returns diagnostics when it stepped, else ``None``."""
        stepped = False
        for samples, times, oom in batches:
            for t, row in zip(self._times(times, oom), samples.placements):
                self.sampled += 1
                self.period.append((float(t), np.asarray(row, dtype=np.int64).copy()))
                if self.sampled % self.config.n_ce == 0:
                    self._cross_entropy(self.sampled)
                    stepped = True
        return {"cross_entropy": 1.0, "pooled_placements": float(self.sampled)} if stepped else None

    def policy_state(self) -> dict[str, np.ndarray]:
        return {"u": self.u.numpy().copy()}

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        self.u = torch.from_numpy(np.array(state["u"], dtype=np.float64))

    def state_dict(self) -> dict[str, Any]:
        return {"u": self.u.clone(), "beta": self.beta, "baseline": self.baseline, "sampled": self.sampled,
                "period_times": [t for t, _ in self.period], "period": [p.tolist() for _, p in self.period],
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.u = state["u"].clone()
        self.beta, self.baseline, self.sampled = float(state["beta"]), state["baseline"], int(state["sampled"])
        self.period = [(float(t), np.asarray(p, dtype=np.int64)) for t, p in zip(state["period_times"], state["period"])]
        self.rng.bit_generator.state = state["rng"]


INTERIM_LEARNERS: dict[str, type[Learner]] = {"rl": InterimReinforce, "post": InterimPost}
"""TEMPORARY: method name -> interim learner, used by :func:`placer.distributed.resolve_learner`
only when :data:`placer.learner.LEARNERS` has no learner of that name."""
