"""The 2017 placement search: REINFORCE on the seq2seq placer.

Mirhoseini et al. 2017, Sec. 3.1: minimise ``J(theta) = E_P[R(P)]`` with
``R(P) = sqrt(step time)`` by the REINFORCE estimate with a baseline (Eq. 3)::

    grad J ~= 1/K * sum_i (R(P_i) - B) * grad log p(P_i | G; theta)

over K sampled placements per update, optimised with Adam. ``B`` is a moving average
of the rewards, initialised to the *failing signal* (the reward given to a placement that
runs out of memory), which "results in more exploration". After
``valid_only_after`` updates (5,000 in the paper), an update uses only the placements
that ran.

Every sampled placement and its measurement is appended to the search's log (JSON
lines) *before* the policy uses it; with the same seed and settings, a search re-run on
the same log replays the logged measurements instead of measuring again, so an
interrupted search resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, Field

from cluster.environment import Environment, Measurement
from placer.features import group_features
from placer.seq2seq import Seq2SeqPlacer


class ReinforceConfig(BaseModel):
    """Search settings; defaults follow 2017 Sec. 3.1 where the paper gives them.

    Attributes:
        budget: placements sampled (and measured) in all.
        k: placements per policy update (K in Eq. 3; the paper's workers per controller: 4 or 8).
        seed: seeds the policy's initialisation and sampling.
        learning_rate: Adam's step size (not given in the paper).
        baseline_decay: ``B <- decay * B + (1 - decay) * mean(R)`` after each update.
        failing_signal: R of an OOM placement; ``None``: ``sqrt(10 * T_serial)``, with
            ``T_serial`` the sum of all op times on the slowest device (seconds).
        valid_only_after: after this many updates, update only on placements that ran (5,000).
        hidden_size: the placer's LSTM width.

    Named improvements, not in the 2017 paper, off by default (measured on the default run,
    small rnnlm on k80x2, 1,000 placements; faithful: 0.01413 s, expert 0.01048 s):
        entropy_coef: weight of an entropy bonus on the sampled placements' policy entropy.
        normalize_advantage: use ``(R - mean(R)) / std(R)`` over the K placements instead
            of ``R - B`` (0.0128 s with learning rate 0.001).
        ppo_epochs: instead of one REINFORCE step, this many Adam steps on PPO's clipped
            surrogate (Schulman et al. 2017) per batch, re-scoring the batch's placements;
            EAGLE Sec. IV-C trains its placer so (4 epochs, 10 placements, clip 0.3, entropy
            0.01, gradient clip 1.0). With those and normalized advantages at learning rate
            0.003: seed 0 0.01025 s (below expert), seeds 1-4 0.0129-0.0139 s.
        ppo_clip: PPO's clip range epsilon (0.3, EAGLE).
        grad_clip: clip the gradient's global norm to this (``None``: no clipping).
    """

    budget: int = Field(400, ge=1)
    k: int = Field(8, ge=1)
    seed: int = 0
    learning_rate: float = Field(0.01, gt=0)
    baseline_decay: float = Field(0.9, ge=0, lt=1)
    failing_signal: float | None = Field(None, gt=0)
    valid_only_after: int = Field(5000, ge=0)
    hidden_size: int = Field(256, ge=1)
    entropy_coef: float = Field(0.0, ge=0)
    normalize_advantage: bool = False
    ppo_epochs: int = Field(0, ge=0)
    ppo_clip: float = Field(0.3, gt=0)
    grad_clip: float | None = Field(None, gt=0)


@dataclass
class SearchResult:
    """Outcome of a search.

    Attributes:
        best_placement: ``[num_groups]`` device indices of the fastest placement sampled
            (``None`` if every sample ran out of memory).
        best_step_time_s: its step time (seconds).
        step_times: ``[budget]`` step time of each sample, ``None`` for OOM.
        curve: one point per update: ``placements`` sampled so far, ``best_step_time_s``
            so far, ``sample_mean_step_time_s`` of the update's samples that ran.
        failing_signal: the failing signal used.
    """

    best_placement: np.ndarray | None
    best_step_time_s: float | None
    step_times: list[float | None] = field(default_factory=list)
    curve: list[dict] = field(default_factory=list)
    failing_signal: float = 0.0

    def record(self, placement, step_time_s: float | None) -> None:
        """Add one sample: its step time (seconds; ``None`` if it ran out of memory), keeping the fastest."""
        self.step_times.append(step_time_s)
        if step_time_s is not None and (self.best_step_time_s is None or step_time_s < self.best_step_time_s):
            self.best_step_time_s, self.best_placement = step_time_s, np.array(placement, dtype=np.int64)

    def curve_point(self, placements: int, ran_times: list[float]) -> dict:
        """A learning-curve point after ``placements`` samples; ``ran_times``: the update's samples that ran."""
        return {
            "placements": placements,
            "best_step_time_s": self.best_step_time_s,
            "sample_mean_step_time_s": float(np.mean(ran_times)) if ran_times else None,
        }

    def add_point(self, point: dict, on_update: Callable[[dict], None] | None = None) -> None:
        """Append ``point`` to the curve and pass it to ``on_update``."""
        self.curve.append(point)
        if on_update is not None:
            on_update(point)


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


class PlacementLog:
    """Append-only JSON-lines log of a search's sampled placements and their measurements.

    The first line is a header with the search settings; each next line is
    ``{"index", "placement", "step_time_s", "oom"}``. Each record is flushed and fsynced
    before the search uses it.

    Raises:
        ValueError: an existing log was written with other settings.
    """

    def __init__(self, path: str | Path, header: dict) -> None:
        self.path = Path(path)
        self.records: list[dict] = []
        if self.path.exists() and self.path.stat().st_size > 0:
            raw = self.path.read_bytes()
            lines = raw.split(b"\n")
            old = json.loads(lines[0])
            if old != header:
                raise ValueError(f"placement log {self.path}: written with other settings {old}, not {header}")
            good_end = len(lines[0]) + 1  # bytes up to the end of the last complete record
            for line in lines[1:]:
                if not line.strip():
                    break
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn last line from an interrupted write
                good_end += len(line) + 1
            if good_end < len(raw):
                with self.path.open("r+b") as f:  # drop the torn tail so the next record starts on its own line
                    f.truncate(good_end)
            self._file = self.path.open("a")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w")
            self._write(header)

    def _write(self, obj: dict) -> None:
        self._file.write(json.dumps(obj) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def append(self, record: dict) -> None:
        self._write(record)

    def close(self) -> None:
        self._file.close()


FAILING_FACTOR = 10.0


def serial_time(env: Environment) -> float:
    """``T_serial`` (seconds): every op of ``env``'s graph run back to back on the slowest device.

    Uses the environment's op-time matrix (``env.simulator.op_times``) when it has one,
    else the roofline cost model (:func:`cluster.cost_model.op_time_matrix`).
    """
    times = getattr(getattr(env, "simulator", None), "op_times", None)
    if times is None:
        from cluster.cost_model import op_time_matrix

        times = op_time_matrix(env.graph, env.spec)
    return float(np.asarray(times).sum(axis=0).max())


def default_failing_signal(env: Environment) -> float:
    """``sqrt(10 * T_serial)`` (:func:`serial_time`): the reward of a placement that ran out of memory."""
    return float(math.sqrt(FAILING_FACTOR * serial_time(env)))


def reinforce_search(
    env: Environment,
    config: ReinforceConfig,
    log_path: str | Path | None = None,
    on_update: Callable[[dict], None] | None = None,
) -> SearchResult:
    """Search placements of ``env``'s groups with the 2017 method (module docstring).

    Args:
        env: the measurement environment (its grouping fixes the sequence of groups).
        config: the settings.
        log_path: the placement log (JSON lines); an existing log with the same settings is replayed.
        on_update: called with each learning-curve point (for progress display).
    Returns:
        A :class:`SearchResult`; the same seed and settings give the same result.
    """
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    features = group_features(env.graph, env.grouping)
    num_devices = len(env.spec.devices)
    policy = Seq2SeqPlacer(features, num_devices, hidden_size=config.hidden_size)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    failing = config.failing_signal if config.failing_signal is not None else default_failing_signal(env)
    baseline = failing
    header = {
        "graph": env.graph.name,
        "groups": env.grouping.num_groups,
        "grouper": env.grouping.grouper,
        "cluster": env.spec.name,
        "environment": env.kind,
        "search": config.model_dump(),
    }
    log = PlacementLog(log_path, header) if log_path is not None else None
    result = SearchResult(None, None, failing_signal=failing)
    sampled = 0
    updates = 0
    try:
        while sampled < config.budget:
            k = min(config.k, config.budget - sampled)
            placements, logp, ent = policy(k, generator=generator)
            rewards, ran = [], []
            batch_times = []
            for row in placements.numpy():
                m = _measure_or_replay(env, row, sampled, log)
                result.record(row, m.step_time_s)
                if m.step_time_s is not None:
                    batch_times.append(m.step_time_s)
                rewards.append(failing if m.oom else math.sqrt(m.step_time_s))
                ran.append(not m.oom)
                sampled += 1
            r, mask, adv = batch_advantage(rewards, ran, baseline, updates, config.valid_only_after,
                                           config.normalize_advantage)
            if adv is not None:
                if config.ppo_epochs == 0:
                    loss = reinforce_loss(adv, logp, ent, mask, config.entropy_coef)
                    optimizer.zero_grad()
                    loss.backward()
                    if config.grad_clip is not None:
                        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
                    optimizer.step()
                else:
                    old_logp = logp.detach()
                    gain = -adv.detach()  # advantage of a placement: how much faster than the baseline
                    for epoch in range(config.ppo_epochs):
                        if epoch > 0:
                            _, logp, ent = policy(k, actions=placements)
                        ratio = torch.exp(logp - old_logp)
                        clipped = torch.clamp(ratio, 1 - config.ppo_clip, 1 + config.ppo_clip)
                        surrogate = torch.minimum(ratio * gain, clipped * gain)
                        loss = -(surrogate * mask).sum() / k - config.entropy_coef * (ent * mask).sum() / k
                        optimizer.zero_grad()
                        loss.backward()
                        if config.grad_clip is not None:
                            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
                        optimizer.step()
            baseline = config.baseline_decay * baseline + (1 - config.baseline_decay) * float(r.mean())
            updates += 1
            result.add_point(result.curve_point(sampled, batch_times), on_update)
    finally:
        if log is not None:
            log.close()
    return result


def _measure_or_replay(env: Environment, placement: np.ndarray, index: int, log: PlacementLog | None) -> Measurement:
    """Measure ``placement`` (or take sample ``index`` from the log) and log it before returning."""
    as_list = [int(x) for x in placement]
    if log is not None and index < len(log.records):
        rec = log.records[index]
        if rec["placement"] != as_list:
            raise ValueError(f"placement log {log.path}: sample {index} differs from the replayed search")
        return Measurement(step_time_s=rec["step_time_s"], oom=rec["oom"])
    m = env.measure(placement)
    if log is not None:
        log.append({"index": index, "placement": as_list, "step_time_s": m.step_time_s, "oom": m.oom})
    return m
