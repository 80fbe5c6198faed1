"""Post: softmax placement distributions trained by cross-entropy minimisation and PPO.

Gao, Chen, Li, *Post: Device Placement with Cross-Entropy Minimization and Proximal
Policy Optimization*, NeurIPS 2018:

* **Policy** (Sec. 3.2, Eq. 2–3): one softmax distribution per co-location group,
  ``f(d_m = j | u_m) = exp(u_mj) / sum_i exp(u_mi)``, the groups independent;
  ``u`` is ``[num_groups, num_devices]``, initialised to zeros (Algorithm 1, line 1).
* **PPO** (Sec. 3.3, Eq. 11): after every ``k`` placements (12 in Sec. 4 "Setup"), several
  (``ppo_steps``, 10) gradient-ascent steps with learning rate ``ppo_learning_rate`` (1) on
  ``1/K sum_n sum_m r_m(n) A_n - beta sum_m KL(f(.|u_m old) || f(.|u_m new))`` where
  ``r_m(n)`` is the ratio of new to old probability of sample ``n``'s device for group
  ``m`` and ``A_n = b - T(d_n)`` with ``b`` a moving average of the step times. ``beta``
  starts at 1 and is adapted after each iteration to a target KL of 0.03 (Schulman et al.
  2017's rule: doubled when the KL exceeds 1.5x the target, halved below target / 1.5).
* **Cross-entropy minimisation** (Eq. 10): after every ``n_ce`` placements (60: five
  iterations of 12), the new distribution of each group is the frequency of each device
  among the best ``rho * n_ce`` placements of that period (``rho`` 0.1: 6 of 60), mixed
  with the uniform distribution with weight ``epsilon`` (0.1, reduced linearly to 0 over
  the search; Algorithm 1, line 12).
* **OOM** (Sec. 4 "Setup"): a placement that runs out of memory gets a large step time
  (the paper: 100 s for steps of seconds); here ``failing_time_s``, by default
  ``10 * T_serial`` (every op back to back on the slowest device).

Units: Eq. 11's advantage ``b - T`` is in seconds (``advantage="seconds"``, the default,
as the paper). The paper's steps took seconds; simulated steps of the small benchmarks
take milliseconds, so with learning rate 1 the PPO steps then move the distributions very
little and the cross-entropy updates do most of the work. ``advantage="relative"`` (a
named option, not in the paper) uses ``(b - T) / b`` instead; measured on the default run
(small rnnlm, k80x2, 1,000 placements, seed 0) it found 0.01103 s against 0.00946 s for
the paper's seconds.

The learner [`PostLearner`][placer.post.PostLearner] (method ``post``) runs through the one search loop
([`placer.search.run_search`][placer.search.run_search]: placement log, resume, curve, checkpoints). Its update
rules are switches of [`PostConfig`][placer.configs.PostConfig] (``cross_entropy``, ``policy_update``), so Post's
ablations (Sec. 4, Fig. 2: PPO alone, CE alone, policy gradient) are the same code with
other defaults ([`placer.post_ablations`][placer.post_ablations]: ``ppo``, ``ce``, ``pg``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from cluster.environment import Environment
from placer.configs import PostConfig
from placer.features import Restarts, ScopeMoves, oom_values, static_memory_load
from placer.learner import Learner, Samples, register
from placer.search import serial_time
from placer.warm import exploration_rate, start_log_probs


def rank_advantage(step_times_s: np.ndarray) -> np.ndarray:
    """Centred ranks of a batch's step times ``[K]`` (seconds) as advantages ``[K]`` in ``[-0.5, 0.5]``:
    the fastest ``+0.5``, the slowest ``-0.5``, ties their mean rank (one placement: 0).

    The fitness shaping of natural evolution strategies (Wierstra, Schaul, Glasmachers, Sun, Peters,
    Schmidhuber, *Natural Evolution Strategies*, JMLR 2014, Sec. 3.1; Salimans et al. 2017, Sec. 2.2):
    the update sees only the order of the batch, so one out-of-memory placement at the failing time
    (tens to hundreds of seconds against steps of seconds) cannot make one step of learning rate 1
    drive every distribution to a single device.
    """
    from scipy.stats import rankdata

    t = np.asarray(step_times_s, dtype=np.float64)
    if t.size < 2:
        return np.zeros_like(t)
    return 0.5 - (rankdata(t) - 1.0) / (t.size - 1)


def _kl(p_old: np.ndarray, logp_new: np.ndarray, log_p_old: np.ndarray | None = None) -> np.ndarray:
    """Per-group KL(old || new), ``[G]`` (``p_old`` and ``logp_new`` ``[G, D]``; ``log_p_old``:
    ``log(max(p_old, 1e-12))`` when the caller has it, else computed here)."""
    if log_p_old is None:
        log_p_old = np.log(np.maximum(p_old, 1e-12))
    return (p_old * (log_p_old - logp_new)).sum(axis=1)


def _log_softmax(u: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of ``[G, D]`` logits."""
    z = u - u.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def policy_batch_constants(p_old: np.ndarray, idx: np.ndarray, logp_old: np.ndarray | None = None,
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What [`policy_objective_grad`][placer.post.policy_objective_grad] needs of one batch that no step of an update
    changes: ``(flat, logp_old_sel, log_p_old)``, the ``[G * K]`` positions of the sampled devices in the
    flattened ``[G, D]``, their old log-probabilities ``[G, K]`` and ``log(max(p_old, 1e-12))`` ``[G, D]``
    (``p_old`` ``[G, D]``, ``idx`` ``[G, K]`` int64). Computed once per update, not at each of the
    ``ppo_steps`` steps.

    ``logp_old``: the old ``log_softmax`` of the logits ``[G, D]``, when the caller has it: then a device
    whose probability underflows to 0 in float64 keeps a finite log-probability, and the ratio of
    Eq. 11, ``exp(log p - log p_old)``, is finite (``None``: ``log(p_old)``, ``-inf`` there)."""
    g, d = p_old.shape
    flat = (np.arange(g)[:, None] * d + idx).ravel()
    if logp_old is None:
        with np.errstate(divide="ignore"):
            logp_old_sel = np.log(p_old.ravel()[flat])
    else:
        logp_old_sel = logp_old.ravel()[flat]
    return flat, logp_old_sel.reshape(g, idx.shape[1]), np.log(np.maximum(p_old, 1e-12))


def policy_objective_grad(u: np.ndarray, p_old: np.ndarray, idx: np.ndarray, adv: np.ndarray, beta: float,
                          rule: str, constants: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                          clip: float | None = None) -> tuple[float, np.ndarray]:
    """Post's policy objective at logits ``u`` and its gradient in closed form (Sec. 3.3, Eq. 11).

    ``rule="ppo"``: ``J = 1/K sum_n sum_m r_m(n) A_n - beta sum_m KL(f(.|u_m old) || f(.|u_m))``,
    ``r_m(n) = f(d_nm | u_m) / f(d_nm | u_m old)``; ``rule="pg"``: ``J = 1/K sum_n A_n sum_m log f(d_nm | u_m)``.
    With ``l = log_softmax(u)``: ``dJ/dl_mj = 1/K sum_{n: d_nm = j} A_n r_m(n) + beta p_old_mj`` (PPO; ``A_n / K``
    for PG; with ``clip``, the terms whose clipped value is the smaller contribute 0), and
    ``dJ/du_mj = dJ/dl_mj - f(j | u_m) sum_i dJ/dl_mi``: the same gradient as autograd
    through ``torch.log_softmax`` (``tests/test_post.py`` checks it against autograd), without
    building and walking autograd's graph at each of the ``ppo_steps`` steps (on nmt, ``[502, 5]``
    logits, ``K`` 12: ppo's search from 372 to 433 placements per CPU-second, the same placements).

    Args:
        u: ``[G, D]`` float64 logits.
        p_old: ``[G, D]`` the distributions the batch was sampled from.
        idx: ``[G, K]`` int64, the device of group ``m`` in sample ``n``.
        adv: ``[K]`` float64 advantages.
        beta: the KL coefficient (PPO only).
        rule: ``"ppo"`` or ``"pg"``.
        constants: [`policy_batch_constants`][placer.post.policy_batch_constants] of ``(p_old, idx, logp_old)``, when
            the caller keeps them over an update's steps (``None``: computed here from ``p_old`` alone, whose
            log is ``-inf`` where it underflowed, so the ratio there is ``inf``; pass the old log-softmax
            through ``policy_batch_constants`` to keep it finite, as ``_policy_step`` does).
        clip: ``eps`` of PPO's clipped surrogate (Schulman et al. 2017, Eq. 7; ``rule="ppo"`` only):
            each term ``r_m(n) A_n`` becomes ``min(r A, clip(r, 1 - eps, 1 + eps) A)``, whose gradient is
            0 where the clip is the minimum; ``None``: Eq. 11 as Post has it, unclipped.
    Returns:
        ``(J, dJ/du)``: a float and ``[G, D]`` float64.
    Raises:
        ValueError: ``rule`` not ``"ppo"`` or ``"pg"``.
    """
    if rule not in ("ppo", "pg"):
        raise ValueError(f"rule: {rule!r}, expected 'ppo' or 'pg'")
    logp = _log_softmax(u)
    (g, d), k = u.shape, idx.shape[1]
    flat, logp_old_sel, log_p_old = constants if constants is not None else policy_batch_constants(p_old, idx)
    sel = logp.ravel()[flat].reshape(g, k)  # [G, K]
    if rule == "ppo":
        ratio = np.exp(sel - logp_old_sel)
        weight = ratio * adv[None, :]
        if clip is not None:  # the clipped surrogate: no gradient where the clipped term is the smaller
            clipped = np.clip(ratio, 1.0 - clip, 1.0 + clip) * adv[None, :]
            surrogate = np.minimum(weight, clipped)
            weight = np.where(weight <= clipped, weight, 0.0)
        else:
            surrogate = weight
        objective = float(surrogate.sum(axis=0).mean() - beta * _kl(p_old, logp, log_p_old).sum())
    else:
        weight = np.broadcast_to(adv[None, :], idx.shape)
        objective = float((sel.sum(axis=0) * adv).mean())
    dlogp = (np.bincount(flat, weights=weight.ravel(), minlength=g * d) / k).reshape(g, d)
    if rule == "ppo":
        dlogp += beta * p_old
    return objective, dlogp - np.exp(logp) * dlogp.sum(axis=1, keepdims=True)


@register
class PostLearner(Learner):
    """Post (Algorithm 1) as a [`placer.learner.Learner`][placer.learner.Learner] (method ``post``; module docstring).

    A warm start (``init`` ``best_baseline`` or ``placement``; in no paper, [`placer.warm`][placer.warm])
    sets ``u`` to the log of ``init_prob`` on each group's start device, the rest uniform
    (``1 - moves_per_sample / G`` with that named option: [`PostConfig`][placer.configs.PostConfig]).

    State: the logits ``u`` float64 ``[G, D]``, the KL coefficient ``beta``, the
    step-time baseline ``b`` (seconds), the current cross-entropy period's samples and
    the numpy generator seeded by ``seed`` (inverse-CDF sampling, one uniform per group).
    """

    Config = PostConfig
    config: PostConfig
    failing_signal: float
    paper = "Gao, Chen, Li, Post, NeurIPS 2018, Sec. 3.2-3.3, Eq. 2-3, 10-11, Algorithm 1"
    units = "groups"
    pools = True  # the CE step pools every controller's placements (pooled_update)

    def __init__(self, env: Environment, config: PostConfig) -> None:
        super().__init__(env, config)
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.num_groups, self.num_devices = env.grouping.num_groups, len(env.spec.devices)
        self.rng = np.random.default_rng(config.seed)
        self.failing_signal = config.failing_time_s if config.failing_time_s is not None else 10.0 * serial_time(env)
        self.epsilon = config.epsilon
        if config.moves_per_sample is not None:  # named option: about m groups moved per sample, on any graph
            self.epsilon = exploration_rate(config.moves_per_sample, self.num_groups, self.num_devices, config.epsilon)
        self.u = torch.zeros(self.num_groups, self.num_devices, dtype=torch.float64)
        if self.start is not None:  # warm start or device prior (placer.warm, in no paper): init_prob on each start device
            self.u = torch.from_numpy(start_log_probs(self.start, self.num_devices, self.init_prob))
        self.beta = config.beta
        self.baseline: float | None = None
        self.sampled = 0
        self.nonfinite_steps = 0  # policy steps stopped at non-finite logits ([`_policy_step`])
        self.period_times: list[float] = []  # step times (seconds) since the last CE update
        self.period_placements: list[np.ndarray] = []
        self.kept_times: list[float] = []  # the best placements so far (``elites_kept``), fastest first
        self.kept_placements: list[np.ndarray] = []
        self.memory_load = static_memory_load(env) if config.oom_reward == "memory_scaled" else None
        #: ``scope_moves`` (named option): the name scopes, drawn with the learner's generator, and the incumbent
        self.scope = ScopeMoves.of_learner(env, config, self.rng, owns_rng=False)
        #: ``restart_after`` (named option): restarts from the incumbent when the search stalls
        self.restarts = Restarts(config.restart_after)

    @property
    def batch_size(self) -> int:
        return self.config.k

    def sample(self, k: int) -> Samples:
        """``k`` placements, inverse-CDF per group: one uniform draw per (sample, group)."""
        probs = torch.softmax(self.u, dim=1).numpy()
        draws = self.rng.random((k, self.num_groups))
        cdf = np.cumsum(probs, axis=1)
        placements = np.minimum((draws[:, :, None] > cdf[None, :, :]).sum(axis=2), self.num_devices - 1).astype(np.int64)
        for i in self.scope.rows(k):  # named option scope_moves: move one name scope whole, of the incumbent (or walk)
            placements[i] = self.scope.moved(placements[i] if self.scope.incumbent is None else None)
        logp = np.log(np.take_along_axis(probs, placements.T, axis=1).clip(1e-300)).sum(axis=0)
        return Samples(placements, logp)

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """One iteration of Algorithm 1: CE (Eq. 10) when a period of ``n_ce`` placements
        ended during this batch, else the policy update (PPO Eq. 11, or the ``pg`` step)."""
        config = self.config
        t_arr = self._times(samples.placements, step_times_s, oom)
        before = self.scope.incumbent_time
        self.scope.keep(samples.placements, t_arr)
        ce_due = False
        for t, row in zip(t_arr.tolist(), samples.placements):
            self.sampled += 1
            self.period_times.append(t)
            self.period_placements.append(row.copy())
            if self.sampled % config.n_ce == 0:
                ce_due = True
        if self.baseline is None:
            self.baseline = float(t_arr.mean())
        diagnostics: dict[str, float] = {"baseline": self.baseline}
        if ce_due and config.cross_entropy and not self.pooled:
            self._cross_entropy()
        elif config.policy_update != "none":
            adv_np = self.baseline - t_arr
            if config.advantage == "relative":
                adv_np = adv_np / self.baseline
            elif config.advantage == "rank":
                adv_np = rank_advantage(t_arr)
            diagnostics.update(self._policy_step(np.asarray(adv_np, dtype=np.float64), np.asarray(samples.placements)))
        if ce_due:
            self.period_times, self.period_placements = [], []
        self.baseline = config.baseline_decay * self.baseline + (1 - config.baseline_decay) * float(t_arr.mean())
        centre = self.restarts.due(self.scope, before, len(t_arr))
        if centre is not None:  # named option restart_after: the start's distribution, on the incumbent
            self._restart(centre)
        diagnostics.update(self.restarts.diagnostics())
        p = torch.softmax(self.u, dim=1)
        diagnostics["entropy"] = float(-(p * torch.log(p.clamp_min(1e-300))).sum(dim=1).mean())
        return diagnostics

    def _restart(self, centre: np.ndarray) -> None:
        """``restart_after``: the tables become the start's distribution on ``centre`` (``[G]`` devices),
        ``init_prob`` on each group's device; ``beta``, the baseline and the cross-entropy period start
        afresh (the next CE step's elites are drawn from the restarted tables; the kept elites stay)."""
        self.u = torch.from_numpy(start_log_probs(centre, self.num_devices, self.init_prob))
        self.beta, self.baseline = self.config.beta, None
        self.period_times, self.period_placements = [], []

    def _times(self, placements: np.ndarray, step_times_s: np.ndarray, oom: np.ndarray) -> np.ndarray:
        """Step times ``[K]`` (seconds) with OOM placements at the failing time (times their
        static memory load with ``oom_reward="memory_scaled"``)."""
        failing = oom_values(self.failing_signal, self.memory_load, placements, oom)
        return np.where(oom, failing, step_times_s).astype(np.float64)

    def _cross_entropy(self) -> None:
        """Eq. 10: device frequencies among the period's elites, mixed with uniform (Algorithm 1, line 12)."""
        config, d = self.config, self.num_devices
        order = sorted(range(len(self.period_times)), key=lambda i: self.period_times[i])  # stable, as list.sort
        n_elite = max(1, int(round(config.rho * len(order))))
        chosen = [self.period_placements[i] for i in order[:n_elite]]
        if config.elites_kept:  # elitism (named option): the best so far join the elites
            chosen += self.kept_placements
            pool = sorted(zip([*self.kept_times, *self.period_times], [*self.kept_placements, *self.period_placements]),
                          key=lambda tp: tp[0])[: config.elites_kept]
            self.kept_times, self.kept_placements = [t for t, _ in pool], [p.copy() for _, p in pool]
        elites = np.stack(chosen)
        freq = np.zeros((self.num_groups, d))
        for j in range(d):
            freq[:, j] = (elites == j).mean(axis=0)
        eps = self.epsilon * max(0.0, 1.0 - self.sampled / config.budget)
        mixed = (1 - eps) * freq + eps / d
        if config.smoothing < 1:  # smoothed updating (named option)
            mixed = config.smoothing * mixed + (1 - config.smoothing) * torch.softmax(self.u, dim=1).numpy()
        self.u = torch.log(torch.from_numpy(mixed).clamp_min(1e-6))

    def _policy_step(self, adv: np.ndarray, placements: np.ndarray) -> dict[str, float]:
        """PPO with the adaptive KL penalty (Eq. 11, ``ppo_steps`` steps; clipped with ``ppo_clip``) or one ``pg``
        step; advantage ``[K]``, placements ``[K, G]``; the gradient in closed form
        ([`policy_objective_grad`][placer.post.policy_objective_grad]), the ratios from the old log-softmax (finite where
        ``p_old`` underflows to 0 in float64). A step that would leave a logit non-finite (the unclipped ratio
        of a sample the policy gave a tiny probability grows step by step until it overflows) is not taken:
        the update keeps the last finite logits and ``nonfinite_steps`` counts it."""
        config = self.config
        rule = "ppo" if config.policy_update == "ppo" else "pg"
        u_old = self.u.numpy()
        logp_old = _log_softmax(u_old)
        p_old = np.exp(logp_old)
        idx = np.ascontiguousarray(placements.T)  # [G, K]
        u_new = u_old.copy()
        objective = 0.0
        constants = policy_batch_constants(p_old, idx, logp_old)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # checked below
            for _ in range(config.ppo_steps if rule == "ppo" else 1):
                value, grad = policy_objective_grad(u_new, p_old, idx, adv, self.beta, rule, constants, config.ppo_clip)
                step = u_new + config.ppo_learning_rate * grad
                if not np.isfinite(step).all():  # a ratio over an underflowed p_old: keep the last finite logits
                    self.nonfinite_steps += 1
                    break
                u_new, objective = step, value
        kl = float(_kl(p_old, _log_softmax(u_new)).mean())
        if rule == "ppo":
            if kl > 1.5 * config.kl_target:
                self.beta *= 2.0
            elif kl < config.kl_target / 1.5:
                self.beta /= 2.0
        self.u = torch.from_numpy(u_new)
        return {"loss": -objective, "kl": kl, "beta": self.beta, "nonfinite_steps": float(self.nonfinite_steps)}

    # -- distribution (placer.distributed): the policy's parameters and the pooled CE step --

    def policy_state(self) -> dict[str, np.ndarray]:
        """The parameters the parameter server holds: the logits ``u`` ``[G, D]``."""
        return {"u": self.u.numpy().copy()}

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        self.u = torch.from_numpy(np.array(state["u"], dtype=np.float64))

    def pooled_update(self, batches: list[tuple[Samples, np.ndarray, np.ndarray]]) -> dict[str, float] | None:
        """The cross-entropy step (Eq. 10) at the parameter server over every controller's
        measured placements: each time the pool crosses a multiple of ``n_ce`` placements, the
        distributions become the period's elite frequencies. Returns diagnostics when it
        stepped, else ``None``."""
        if not self.config.cross_entropy:
            return None
        stepped = False
        for samples, times, oom in batches:
            t_arr = self._times(np.asarray(samples.placements), times, np.asarray(oom))
            self.scope.keep(np.asarray(samples.placements), t_arr)
            for t, row in zip(t_arr.tolist(), samples.placements):
                self.sampled += 1
                self.period_times.append(t)
                self.period_placements.append(np.asarray(row, dtype=np.int64).copy())
                if self.sampled % self.config.n_ce == 0:
                    self._cross_entropy()
                    self.period_times, self.period_placements = [], []
                    stepped = True
        return {"cross_entropy": 1.0, "pooled_placements": float(self.sampled)} if stepped else None

    def observe_start(self, step_time_s: float | None) -> None:
        """The start (warm start or device prior) is the first incumbent when it ran (``scope_moves``
        move scopes of it until a sample is faster)."""
        self.scope.observe_start(self.start, step_time_s)

    def state_dict(self) -> dict[str, Any]:
        k = len(self.period_times)
        return {
            "u": self.u.clone(),
            "beta": self.beta,
            "baseline": self.baseline,
            "sampled": self.sampled,
            "failing_signal": self.failing_signal,
            "nonfinite_steps": self.nonfinite_steps,
            "period_times": torch.tensor(self.period_times, dtype=torch.float64),
            "period_placements": torch.from_numpy(np.stack(self.period_placements) if k else np.zeros((0, self.num_groups), dtype=np.int64)),
            "kept_times": torch.tensor(self.kept_times, dtype=torch.float64),
            "kept_placements": torch.from_numpy(np.stack(self.kept_placements) if self.kept_placements
                                                else np.zeros((0, self.num_groups), dtype=np.int64)),
            "rng": json.dumps(self.rng.bit_generator.state),
            **self.scope.state_dict(),
            **self.restarts.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.u = state["u"].clone()
        self.beta, self.baseline = float(state["beta"]), state["baseline"]
        self.sampled, self.failing_signal = int(state["sampled"]), float(state["failing_signal"])
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))
        self.period_times = state["period_times"].tolist()
        self.period_placements = [row for row in state["period_placements"].numpy()]
        self.kept_times = state["kept_times"].tolist() if "kept_times" in state else []
        self.kept_placements = [row.copy() for row in state["kept_placements"].numpy()] if "kept_placements" in state else []
        self.rng.bit_generator.state = json.loads(state["rng"])
        self.scope.load_state_dict(state)
        self.restarts.load_state_dict(state)
