"""Warm starts: a learner whose policy starts concentrated on a given placement, then learns.

**Not in any paper.** The 2017 placer, Post, the Hierarchical Planner and EAGLE all start from
an uninformed policy (random initial weights, Post's uniform distributions). A user who already
has a good placement (the best baseline, a heuristic of their own) wants a learner that starts
there and improves on it. Every learner has the named option ``init`` (its config, [`placer.configs`][placer.configs]):

* ``uniform``: the paper's start (the default; for ``local_search`` its own ``start``);
* ``best_baseline``: the placement of the fastest baseline the experiment measured;
* ``placement``: the op -> device file ``init_placement`` (what ``placement export --format json`` writes);
* ``single_gpu``: a *device prior*, not an outside placement: every unit on the first GPU (ops
  without a GPU kernel fall back to the CPU, as TensorFlow's soft placement does). With groups
  in the hundreds and a CPU ten times slower than a GPU, a uniform start puts a third of the
  groups on the CPU and 2,400 placements do not learn that away (Post on rnnlm paper
  ``k80x2``: 84 of 253 groups on the CPU at the start, 74 after 2,400 placements). The
  local-search reference starts from the same placement, so the two compare on equal terms.

The start is an op placement (``init_ops``, ``[num_ops]`` device indices, filled in by the
experiment: [`tasks.search.warm_start_config`][tasks.search.warm_start_config]); each learner maps it onto the units it
places ([`units_of_ops`][placer.warm.units_of_ops]: a unit's device is the one most of its ops are on) and biases its
policy so that each unit's start device has probability about ``init_prob`` (0.9):

* softmax tables (Post and its ablations): the logits are ``log`` of that distribution
  ([`start_log_probs`][placer.warm.start_log_probs]), exactly;
* seq2seq decoders (the 2017 placer): a constant additive prior ``log p`` on the output
  layer's logits of each step ([`start_log_probs`][placer.warm.start_log_probs]), so the initial distribution is about
  ``init_prob`` on the start device (the network's own initial logits are small, not zero);
  learning then proceeds as the paper's algorithm (the prior is a constant, not a parameter);
* grouper + placer (Hierarchical Planner, EAGLE): unit ``u`` is biased to group ``start[u]``
  and group ``d < D`` to device ``d`` ([`two_level_priors`][placer.warm.two_level_priors]), each with probability
  ``sqrt(init_prob)``, so a unit lands on its start device with probability about ``init_prob``;
* the hill climber (``local_search``): its current placement starts as the start.

Learning then proceeds as the paper's algorithm, with one change where a paper starts its
REINFORCE baseline at the failing signal for exploration (the 2017 placer, the Hierarchical
Planner): a warm start starts it at its first batch's mean reward, as Post and EAGLE start
theirs, since exploring away from the start undid it (the 2017 placer on small rnnlm, seed 1:
every sample on the CPU after 100 placements).

The search loop ([`placer.search.search_loop`][placer.search.search_loop]) measures the start first, as placement 0 of
the budget, and writes it to the placement log before anything else happens with it; it is the
incumbent, so a warm-started learner never returns a placement worse than its start.

The warm-started variants (``<learner>_warm``; [`placer.configs.warm_config`][placer.configs.warm_config]) start scaled to
the graph (``moves_per_sample`` 4) and, but ``local_search_warm``, move name scopes of the incumbent
(``scope_moves`` 0.25; the grouper + placer learners' 0.1: EAGLE's two and the Hierarchical Planner's) and restart on it
when they stall (``restart_after`` 48: [`placer.features.Restarts`][placer.features.Restarts]); all of them first descend over whole
layers (``layer_descent`` 0.125; the grouper + placer learners' 0.25) and move single groups of the incumbent too
(``unit_moves`` 0.5; the grouper + placer learners' 0.8, over the co-location groups, ``moves_over="groups"``), drawn among
the moves not yet tried (``unit_dont_look``), with a kick of two neighbouring groups when every one is tried and
none is faster (``unit_kick`` 2), for the softmax learners and the 2017 placer in shares of policy samples, scope and
unit moves that follow which kind is faster (``adaptive_shares``; the grouper + placer learners' are fixed). Each is a named option of the
learner, off in its faithful form.

This module is torch-free (the configs and the CLI read it).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

INITS = ("uniform", "single_gpu", "best_baseline", "placement")
"""Every learner's ``init`` values."""

PRIOR_INITS = ("single_gpu",)
"""The ``init`` values that start from a placement the learner builds itself, no outside placement:
``single_gpu`` (a device prior that keeps the CPU out unless it pays: every unit on the first GPU,
where the local-search reference starts too; [`prior_units`][placer.warm.prior_units])."""

WARM_INITS = ("best_baseline", "placement")
"""The ``init`` values that start from a given placement."""

WARM_SUFFIX = "_warm"
"""A warm-started learner's method name: the learner's name and this (``rl_warm``: ``rl`` with
``init="best_baseline"``); [`placer.LEARNER_NAMES`][placer.LEARNER_NAMES] lists one for every learner."""

DEFAULT_INIT_PROB = 0.9
"""The probability the initial policy gives each unit's start device (``init_prob``)."""


def is_warm(config) -> bool:
    """True if ``config`` (a learner config) starts from a given placement (``init`` in [`WARM_INITS`][placer.warm.WARM_INITS])."""
    return getattr(config, "init", "uniform") in WARM_INITS


def base_learner(method: str) -> str:
    """The learner a method is a variant of: ``rl_warm`` -> ``rl``; any other name is returned as is."""
    return method[: -len(WARM_SUFFIX)] if method.endswith(WARM_SUFFIX) else method


def start_source_label(source: str) -> str:
    """How a start is named in a label: a baseline's name as is, a file by its name (no folders)."""
    return Path(source).name if ("/" in source or source.endswith(".json")) else source


def warm_label(method: str, source: str | None) -> str:
    """The results table's label of a warm-started learner: ``rl (warm: expert)``, ``post (warm:
    mine.json)``; ``source`` ``None``: ``rl (warm)``."""
    base = base_learner(method)
    return f"{base} (warm: {start_source_label(source)})" if source else f"{base} (warm)"


def units_of_ops(ops, grouping, num_devices: int) -> np.ndarray:
    """An op placement as a placement of ``grouping``'s units: each unit on the device most of
    its ops are on (ties: the lower device index).

    Args:
        ops: ``[num_ops]`` device indices.
        grouping: a [`compgraph.ir.Grouping`][compgraph.ir.Grouping] of the same ops (``op_group`` ``[num_ops]``).
        num_devices: ``D``.
    Returns:
        int64 ``[num_units]`` device indices (a unit without ops: device 0).
    Raises:
        ValueError: ``ops`` not ``[num_ops]`` or a device index outside ``0..D-1`` (names ``init_ops``).
    """
    ops = np.asarray(ops)
    og = np.asarray(grouping.op_group, dtype=np.int64)
    if ops.ndim != 1 or ops.shape[0] != og.shape[0]:
        raise ValueError(f"init_ops: shape {list(ops.shape)}, expected [{og.shape[0]}] (one device index per op)")
    if ops.size and not np.issubdtype(ops.dtype, np.integer):
        raise ValueError(f"init_ops: {ops.dtype} values, expected device indices (integers)")
    bad = ops[(ops < 0) | (ops >= num_devices)]
    if bad.size:
        raise ValueError(f"init_ops: device index {int(bad[0])} is not one of the {num_devices} devices "
                         f"(0..{num_devices - 1})")
    counts = np.zeros((grouping.num_groups, num_devices), dtype=np.int64)
    np.add.at(counts, (og, ops.astype(np.int64)), 1)
    return counts.argmax(axis=1).astype(np.int64)


def fits_units(ops, grouping) -> bool:
    """True if the op placement ``ops`` keeps every unit of ``grouping`` on one device (its unit
    placement is then the same placement, measured the same)."""
    ops = np.asarray(ops, dtype=np.int64)
    og = np.asarray(grouping.op_group, dtype=np.int64)
    first = np.full(grouping.num_groups, -1, dtype=np.int64)
    first[og[::-1]] = ops[::-1]  # each unit's first op's device
    return bool(np.array_equal(first[og], ops))


def exploration_rate(moves: float, num_units: int, num_devices: int, paper_rate: float) -> float:
    """The per-unit rate at which a sample moves units off their likeliest device with
    ``moves_per_sample=m`` (a named option, in no paper): ``min(m / U, paper_rate, 1 - 1/D)``, so
    about ``m`` units a sample on a graph of many units, and never more than the paper's rate
    (``1 - init_prob``, or Post's ``epsilon``) on a small one.

    Args:
        moves: ``m`` > 0, units moved per sample.
        num_units: ``U`` >= 1.
        num_devices: ``D`` >= 1 (one device: rate 0, no choice).
        paper_rate: the rate without the option, in ``[0, 1]``.
    Returns:
        The rate in ``[0, min(paper_rate, 1 - 1/D)]``.
    """
    return min(moves / max(num_units, 1), paper_rate, 1.0 - 1.0 / num_devices)


def start_prob(config, num_units: int, num_devices: int) -> float:
    """The probability a learner's initial policy gives each unit's start device: ``config.init_prob``,
    or with ``moves_per_sample=m`` ``1 - m / U`` when that is larger (a graph of more than
    ``m / (1 - init_prob)`` units, 40 for 4 and 0.9): a sample from the start then moves about ``m``
    of the ``U`` units, where a fixed 0.9 moves a tenth of them (50 of nmt's 502 groups;
    [`placer.configs.LearnerConfig`][placer.configs.LearnerConfig]).

    Args:
        config: a learner config (``init_prob``, ``moves_per_sample``).
        num_units: ``U``, the units the learner places.
        num_devices: ``D``.
    Returns:
        A probability in ``[init_prob, 1)``.
    """
    if config.moves_per_sample is None or num_devices < 2:
        return float(config.init_prob)
    return 1.0 - exploration_rate(config.moves_per_sample, num_units, num_devices, 1.0 - float(config.init_prob))


def start_log_probs(start: np.ndarray, num_choices: int, prob: float) -> np.ndarray:
    """``log`` of the start distribution: ``prob`` on each row's start choice, the rest shared
    evenly by the others.

    Args:
        start: int ``[N]``: the start choice of each of ``N`` rows (a device, or a group).
        num_choices: ``C``, the choices of a row.
        prob: the start's probability, in ``(0, 1)``.
    Returns:
        float64 ``[N, C]`` log-probabilities (with one choice: all 0).
    Raises:
        ValueError: ``prob`` outside ``(0, 1)``; a start outside ``0..C-1``.
    """
    if not 0 < prob < 1:
        raise ValueError(f"init_prob: {prob!r}, expected a probability between 0 and 1 (exclusive)")
    start = np.asarray(start, dtype=np.int64)
    if start.size and (start.min() < 0 or start.max() >= num_choices):
        raise ValueError(f"start: choice {int(start.max())} outside 0..{num_choices - 1}")
    if num_choices == 1:
        return np.zeros((len(start), 1))
    out = np.full((len(start), num_choices), math.log((1 - prob) / (num_choices - 1)))
    out[np.arange(len(start)), start] = math.log(prob)
    return out


def two_level_priors(start: np.ndarray, num_groups: int, num_devices: int, prob: float) -> tuple[np.ndarray, np.ndarray]:
    """Additive log-priors of a grouper + placer learner (Hierarchical Planner, EAGLE) that start
    concentrated on the unit placement ``start``: unit ``u`` to group ``start[u]`` and group
    ``d < D`` to device ``d``, each with probability ``sqrt(prob)`` (the other groups' devices
    uniform), so a unit is on its start device with probability at least about ``prob``.

    Args:
        start: int ``[U]`` device index of each unit.
        num_groups: ``G`` (at least ``D``).
        num_devices: ``D``.
        prob: ``init_prob``.
    Returns:
        ``(grouper prior [U, G], placer prior [G, D])``, float64 log-probabilities.
    Raises:
        ValueError: fewer groups than devices (names ``num_groups``); see [`start_log_probs`][placer.warm.start_log_probs].
    """
    if num_groups < num_devices:
        raise ValueError(f"num_groups: {num_groups}, fewer than the {num_devices} devices; a warm start puts the "
                         f"units of each device in a group of their own")
    q = math.sqrt(prob)
    grouper = start_log_probs(start, num_groups, q)
    placer = np.zeros((num_groups, num_devices))
    placer[:num_devices] = start_log_probs(np.arange(num_devices), num_devices, q)
    return grouper, placer


def prior_units(init: str, num_units: int, gpu_indices) -> np.ndarray | None:
    """The start of a device prior ([`PRIOR_INITS`][placer.warm.PRIOR_INITS]) over ``num_units`` units, or ``None``
    (another ``init``, or a cluster without a GPU: the paper's start then).

    Args:
        init: the learner's ``init``.
        num_units: ``U``.
        gpu_indices: the cluster's GPU device indices (``ClusterSpec.gpu_indices``).
    Returns:
        int64 ``[U]``: every unit on the first GPU (``single_gpu``).
    """
    if init != "single_gpu" or not len(gpu_indices):
        return None
    return np.full(num_units, int(gpu_indices[0]), dtype=np.int64)


def start_units(config, grouping, num_devices: int, learner: str = "learner") -> np.ndarray | None:
    """The warm start of a learner over ``grouping``'s units, or ``None`` for a learner that is not
    warm-started ([`is_warm`][placer.warm.is_warm]).

    Raises:
        ValueError: a warm start without its op placement ``init_ops`` (names the learner and
            ``init``); ``init_ops`` of the wrong shape or with devices outside the cluster.
    """
    if not is_warm(config):
        return None
    ops = getattr(config, "init_ops", None)
    if ops is None:
        raise ValueError(f"learner {learner!r}: init {config.init!r} needs its start placement (init_ops, one device "
                         "index per op); the experiment fills it in from the best baseline or init_placement "
                         "(tasks.search.warm_start_config)")
    return units_of_ops(ops, grouping, num_devices)
