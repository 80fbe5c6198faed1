"""Post: softmax placement distributions trained by cross-entropy minimisation and PPO.

Gao, Chen, Li, *Post: Device Placement with Cross-Entropy Minimization and Proximal
Policy Optimization*, NeurIPS 2018 (``../shared/papers/003_…txt``):

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

Every sampled placement is written to the search's placement log before it is used
(:class:`placer.reinforce.PlacementLog`), so an interrupted search resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, Field

from cluster.environment import Environment
from placer.reinforce import PlacementLog, SearchResult, _measure_or_replay, serial_time


class PostConfig(BaseModel):
    """Post's settings; defaults are the paper's (Sec. 4 "Setup").

    Attributes:
        budget: placements sampled (and measured) in all (the paper: 2,400).
        k: placements per PPO iteration (12 workers).
        n_ce: placements between cross-entropy updates (60: five iterations).
        rho: fraction of a CE period's placements kept as elites (0.1).
        epsilon: initial weight of the uniform distribution mixed in after CE (0.1, to 0 linearly).
        ppo_steps: gradient-ascent steps per PPO iteration (10).
        ppo_learning_rate: their step size (1).
        kl_target: target KL divergence per group for the adaptive penalty (0.03).
        beta: initial KL penalty coefficient (1).
        baseline_decay: ``b <- decay * b + (1 - decay) * mean(T)`` after each iteration.
        failing_time_s: step time given to an OOM placement; ``None``: ``10 * T_serial``.
        advantage: ``seconds`` (``b - T``, Eq. 11) or ``relative`` (``(b - T) / b``, an option).
        seed: seeds sampling.
    """

    budget: int = Field(2400, ge=1)
    k: int = Field(12, ge=1)
    n_ce: int = Field(60, ge=1)
    rho: float = Field(0.1, gt=0, le=1)
    epsilon: float = Field(0.1, ge=0, le=1)
    ppo_steps: int = Field(10, ge=0)
    ppo_learning_rate: float = Field(1.0, gt=0)
    kl_target: float = Field(0.03, gt=0)
    beta: float = Field(1.0, ge=0)
    baseline_decay: float = Field(0.9, ge=0, lt=1)
    failing_time_s: float | None = Field(None, gt=0)
    advantage: Literal["seconds", "relative"] = "seconds"
    seed: int = 0


def _kl(p_old: torch.Tensor, logp_new: torch.Tensor) -> torch.Tensor:
    """Per-group KL(old || new), ``[G]``."""
    return (p_old * (torch.log(p_old.clamp_min(1e-12)) - logp_new)).sum(dim=1)


def post_search(
    env: Environment,
    config: PostConfig,
    log_path: str | Path | None = None,
    on_update: Callable[[dict], None] | None = None,
) -> SearchResult:
    """Search placements of ``env``'s groups with Post (Algorithm 1; module docstring).

    Args:
        env: the measurement environment (its grouping fixes the groups).
        config: the settings.
        log_path: the placement log (JSON lines); an existing log with the same settings is replayed.
        on_update: called with each learning-curve point (one per PPO or CE iteration).
    Returns:
        A :class:`placer.reinforce.SearchResult` (``failing_signal`` holds the OOM step
        time in seconds); the same seed and settings give the same result.
    """
    g, d = env.grouping.num_groups, len(env.spec.devices)
    rng = np.random.default_rng(config.seed)
    failing = config.failing_time_s if config.failing_time_s is not None else 10.0 * serial_time(env)
    u = torch.zeros(g, d, dtype=torch.float64)
    beta = config.beta
    header = {
        "graph": env.graph.name,
        "groups": g,
        "grouper": env.grouping.grouper,
        "cluster": env.spec.name,
        "environment": env.kind,
        "search": {"method": "post", **config.model_dump()},
    }
    log = PlacementLog(log_path, header) if log_path is not None else None
    result = SearchResult(None, None, failing_signal=failing)
    period: list[tuple[float, np.ndarray]] = []  # (step time, placement) since the last CE update
    baseline: float | None = None
    sampled = 0
    try:
        while sampled < config.budget:
            batch = min(config.k, config.budget - sampled)
            probs = torch.softmax(u, dim=1).numpy()
            # Inverse-CDF sampling per group: one uniform draw per (sample, group).
            draws = rng.random((batch, g))
            cdf = np.cumsum(probs, axis=1)
            placements = np.minimum((draws[:, :, None] > cdf[None, :, :]).sum(axis=2), d - 1).astype(np.int64)
            times, ran_times = [], []
            ce_due = False
            for row in placements:
                m = _measure_or_replay(env, row, sampled, log)
                sampled += 1
                result.record(row, m.step_time_s)
                t = failing if m.oom else float(m.step_time_s)
                times.append(t)
                period.append((t, row.copy()))
                if not m.oom:
                    ran_times.append(t)
                if sampled % config.n_ce == 0:
                    ce_due = True
            t_arr = np.asarray(times)
            baseline = float(t_arr.mean()) if baseline is None else baseline
            if ce_due:
                # Eq. 10: device frequencies among the elites, then mix with uniform (line 12).
                period.sort(key=lambda x: x[0])
                elites = np.stack([p for _, p in period[: max(1, int(round(config.rho * len(period))))]])
                freq = np.zeros((g, d))
                for j in range(d):
                    freq[:, j] = (elites == j).mean(axis=0)
                eps = config.epsilon * max(0.0, 1.0 - sampled / config.budget)
                mixed = (1 - eps) * freq + eps / d
                u = torch.log(torch.from_numpy(mixed).clamp_min(1e-6))
                period = []
            else:
                adv_np = baseline - t_arr
                if config.advantage == "relative":
                    adv_np = adv_np / baseline
                adv = torch.from_numpy(adv_np)
                p_old = torch.softmax(u, dim=1).detach()
                idx = torch.from_numpy(placements)
                old_sel = p_old.gather(1, idx.T)  # [G, K]
                u_new = u.clone().requires_grad_(True)
                for _ in range(config.ppo_steps):
                    logp_new = torch.log_softmax(u_new, dim=1)
                    ratio = logp_new.gather(1, idx.T).exp() / old_sel  # [G, K]
                    objective = (ratio * adv.unsqueeze(0)).sum(dim=0).mean() - beta * _kl(p_old, logp_new).sum()
                    (grad,) = torch.autograd.grad(objective, u_new)
                    with torch.no_grad():
                        u_new += config.ppo_learning_rate * grad
                kl = float(_kl(p_old, torch.log_softmax(u_new.detach(), dim=1)).mean())
                if kl > 1.5 * config.kl_target:
                    beta *= 2.0
                elif kl < config.kl_target / 1.5:
                    beta /= 2.0
                u = u_new.detach()
            baseline = config.baseline_decay * baseline + (1 - config.baseline_decay) * float(t_arr.mean())
            result.add_point(result.curve_point(sampled, ran_times), on_update)
    finally:
        if log is not None:
            log.close()
    return result
