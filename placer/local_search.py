"""A local-search reference at equal budget: a seeded hill climber over group and block moves.

None of the papers compares its learner with a simple search given the same number of
measured placements (2017 Sec. 4, Post Sec. 4, EAGLE Sec. IV compare with baselines that
measure one placement each). This method (``local_search``) is that comparison: it runs
through the same search loop ([`placer.search.run_search`][placer.search.run_search]), the same environment and
the same budget counted in placements as the learners, so its curve and theirs are drawn
on one axis.

**Moves.** From the current placement of ``env``'s groups, each candidate is one move,
drawn with the search's own seeded generator:

* with probability ``1 - block_prob``, one group to another device (uniform over devices);
* else a *block*: a run of ``2 .. max_block`` consecutive groups (the groups' topological
  order: the 2017 grouper's groups follow the graph) all to one device.

**Acceptance.** ``k`` candidates are measured per round (one batch); the best of them
replaces the current placement when it is faster (first-improvement hill climbing over
batches; ties keep the current one). A placement that runs out of memory is worse than any
that ran; among those that do not run, the one with the lower static memory load
([`placer.features.static_memory_load`][placer.features.static_memory_load]) is better, so a start that does not fit
(one GPU for NMT) climbs toward placements that do.

**Restarts** (iterated local search, Lourenço, Martin and Stützle, *Iterated Local
Search*, 2003): after ``patience`` rounds without improvement (default: enough rounds to
have tried about every single-group move, ``ceil(G (D - 1) / k)``, at least 4), the search
continues from the best placement so far kicked by ``kick`` random moves; the kicked
placement is measured first and becomes the current one whatever its time.

**Start.** ``start="single_gpu"`` (default): every group on the first GPU (ops without a
GPU kernel fall back to the CPU, as TensorFlow's soft placement does); ``"random"``: a
uniform random placement. With ``init`` ``best_baseline`` or ``placement`` ([`placer.warm`][placer.warm])
it starts from that placement instead. The start is the first placement measured, so the result
is never worse than the start.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from cluster.environment import Environment
from placer.configs import LocalSearchConfig
from placer.learner import Learner, Samples, register
from placer.features import move_scope, scopes_by_depth, static_memory_load


@register
class LocalSearch(Learner):
    """The hill climber of the module docstring as a [`placer.learner.Learner`][placer.learner.Learner] (method ``local_search``).

    State: ``current`` int64 ``[G]`` and its score ``(oom, step time s or static memory load)``,
    and the numpy generator seeded by ``seed``.
    """

    Config = LocalSearchConfig
    config: LocalSearchConfig
    paper = "the project's reference: first-improvement hill climbing over group and block moves (issue 21)"
    units = "groups"

    def __init__(self, env: Environment, config: LocalSearchConfig) -> None:
        super().__init__(env, config)
        self.num_groups, self.num_devices = env.grouping.num_groups, len(env.spec.devices)
        self.rng = np.random.default_rng(config.seed)
        self.load = static_memory_load(env)
        if config.start == "single_gpu":
            first = env.spec.gpu_indices[0] if env.spec.gpu_indices else 0
            self.current = np.full(self.num_groups, first, dtype=np.int64)
        else:
            self.current = self.rng.integers(0, self.num_devices, self.num_groups).astype(np.int64)
        if self.start is not None:  # warm start (placer.warm): climb from the given placement
            self.current = self.start.copy()
        self.score: tuple[int, float] | None = None  # (1 if OOM, seconds or memory load); None: not measured yet
        self.best = self.current.copy()
        self.best_score: tuple[int, float] | None = None
        self.accepted, self.stale, self.restarts = 0, 0, 0
        self.patience = config.patience or max(4, -(-self.num_groups * (self.num_devices - 1) // config.k))
        self.scopes = scopes_by_depth(list(env.grouping.names)) if config.scope_prob > 0 else {}

    @property
    def batch_size(self) -> int:
        return self.config.k

    def _move(self, p: np.ndarray | None = None) -> np.ndarray:
        p = (self.current if p is None else p).copy()
        g, d = self.num_groups, self.num_devices
        if d < 2:
            return p
        if self.scopes and self.rng.random() < self.config.scope_prob:  # named option: a whole name scope
            move_scope(self.rng, p, self.scopes, d, self.config.scope_majority)
            return p
        if g >= 2 and self.rng.random() < self.config.block_prob:
            length = int(self.rng.integers(2, min(self.config.max_block, g) + 1))
            lo = int(self.rng.integers(0, g - length + 1))
            p[lo:lo + length] = int(self.rng.integers(0, d))
        else:
            i = int(self.rng.integers(0, g))
            p[i] = (p[i] + int(self.rng.integers(1, d))) % d
        return p

    def sample(self, k: int) -> Samples:
        """``k`` candidates: the current placement itself first while it is not measured (the
        start, a restart's kicked placement), then moves from it."""
        rows = []
        if self.score is None:
            rows.append(self.current.copy())
        while len(rows) < k:
            rows.append(self._move())
        return Samples(np.stack(rows), np.zeros(k))

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """Accept the best candidate of the batch if it beats the current placement."""
        load = self.load(samples.placements) if oom.any() else np.zeros(len(oom))
        scores = [(1, float(m)) if o else (0, float(t)) for t, o, m in zip(step_times_s.tolist(), oom.tolist(), load.tolist())]
        j = min(range(len(scores)), key=lambda i: scores[i])
        if self.score is None:  # the start or a kicked placement: taken whatever its time, then the batch's best if better
            self.current, self.score = samples.placements[0].copy(), scores[0]
        if scores[j] < self.score:
            self.current, self.score = samples.placements[j].copy(), scores[j]
            self.accepted += 1
        if self.best_score is None or self.score < self.best_score:
            self.best, self.best_score, self.stale = self.current.copy(), self.score, 0
        else:
            self.stale += 1
        if self.stale >= self.patience:  # iterated local search: kick the best and climb from there
            kicked = self.best
            for _ in range(self.config.kick):
                kicked = self._move(kicked)
            self.current, self.score, self.stale = kicked, None, 0
            self.restarts += 1
        current = self.score if self.score is not None else self.best_score
        assert current is not None  # the start is measured in the first batch
        return {"accepted": float(self.accepted), "restarts": float(self.restarts), "current_oom": float(current[0]),
                "current": current[1]}

    # -- distributed (placer.distributed): no policy to share; each controller climbs on its own --

    def policy_state(self) -> dict[str, np.ndarray]:
        """Nothing: a hill climber has no policy parameters. On Ray each controller runs its own
        climber from its own seed (independent multi-start search sharing the workers), and the
        search keeps the best placement any of them measured."""
        return {}

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        """Nothing to load ([`policy_state`][placer.local_search.LocalSearch.policy_state])."""

    def state_dict(self) -> dict[str, Any]:
        return {"current": self.current.copy(), "score": None if self.score is None else list(self.score),
                "best": self.best.copy(), "best_score": None if self.best_score is None else list(self.best_score),
                "accepted": self.accepted, "stale": self.stale, "restarts": self.restarts,
                "rng": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current = np.asarray(state["current"], dtype=np.int64).copy()
        self.score = None if state["score"] is None else (int(state["score"][0]), float(state["score"][1]))
        self.best = np.asarray(state["best"], dtype=np.int64).copy()
        self.best_score = None if state["best_score"] is None else (int(state["best_score"][0]), float(state["best_score"][1]))
        self.accepted, self.stale, self.restarts = int(state["accepted"]), int(state["stale"]), int(state["restarts"])
        self.rng.bit_generator.state = json.loads(state["rng"])
