"""The contract every learner implements, and the registry ``LEARNERS``.

A *learner* is a placement policy plus its update rule (the 2017 seq2seq placer with
REINFORCE, Post, the Hierarchical Planner, EAGLE, ...). It never measures anything: the
one search loop ([`placer.search.run_search`][placer.search.run_search]) asks it for ``K`` placements, measures
each through the [`cluster.environment.Environment`][cluster.environment.Environment], writes each to the placement
log, and only then hands the measured step times back to [`Learner.update`][placer.learner.Learner.update]. So every
learner gets the same logging, resume, best-keeping, learning curve and checkpoints.

Placements are over the environment's *units*: the groups of ``env.grouping``. A learner
whose [`Learner.units`][placer.learner.Learner.units] is ``"groups"`` places the co-location groups it is given (the
2017 placer, Post and its ablations). A learner whose [`Learner.units`][placer.learner.Learner.units] is
``"colocation"`` groups ops itself (Hierarchical Planner, EAGLE): the search gives it an
environment whose grouping is the graph's TensorFlow colocation units
([`compgraph.grouping.colocation_units`][compgraph.grouping.colocation_units]: the finest grouping that never splits a
colocation group), and its placements are over those units; EAGLE's named option ``units="groups"``
places the co-location groups instead ([`learner_units`][placer.learner.learner_units]).

Adding a learner: its pydantic config (defaults = the paper's, with an ``init`` field: ``WarmInit``)
in [`placer.configs`][placer.configs], and its one entry in [`placer.configs.LEARNER_REGISTRY`][placer.configs.LEARNER_REGISTRY] (name ->
module, config): the only place its name is written; one module under ``placer/`` with a
``Learner`` subclass decorated with [`register`][placer.learner.register] (which names it from its config) whose policy
starts concentrated on [`Learner.start`][placer.learner.Learner.start] when there is one (a warm start, [`placer.warm`][placer.warm]).
The CLI's choices, the flows' forms, ``placer.LEARNER_NAMES`` and the warm-started variant
``<name>_warm`` ([`placer.warm_learners`][placer.warm_learners]) are read from the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from cluster.environment import Environment
from placer.configs import LearnerConfig, learner_name


@dataclass
class Samples:
    """``K`` placements a learner sampled, with what it needs to update from them.

    Attributes:
        placements: int64 ``[K, num_units]`` device indices.
        log_prob: float ``[K]``: each placement's log-probability under the policy that
            sampled it (natural log, summed over units).
        extra: anything else the learner keeps for its update (e.g. the grouper's sampled
            groups); not logged, not checkpointed.
    """

    placements: np.ndarray
    log_prob: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)


class Learner(ABC):
    """A placement policy and its update rule (see the module docstring).

    Subclasses set ``name`` (the method name on the command line and in ``--json``),
    ``Config`` (their pydantic settings, defaults = the paper's), ``paper`` (citation with
    section) and ``units``, and implement the four methods below.

    Args:
        env: the environment whose units (``env.grouping`` groups) are placed on
            ``env.spec.devices``; the learner may read ``env.graph``, ``env.grouping`` and
            ``env.spec`` (features, OOM signal) but must not call ``env.measure``.
        config: an instance of ``Config``.
    Raises:
        ValueError: a warm start (``config.init`` ``best_baseline`` or ``placement``) without
            its ``init_ops``, or with ``init_ops`` of the wrong shape ([`placer.warm.start_units`][placer.warm.start_units]).
    """

    name: ClassVar[str]
    Config: ClassVar[type[LearnerConfig]] = LearnerConfig
    paper: ClassVar[str] = ""
    units: ClassVar[Literal["groups", "colocation"]] = "groups"
    #: Where the policy can run (``policy_device`` of the distributed search): every learner on
    #: ``cpu``; a learner that implements [`to`][placer.learner.Learner.to] for a GPU lists ``cuda`` too.
    policy_devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: True for a learner with a pooled step ([`pooled_update`][placer.learner.Learner.pooled_update], e.g. Post's cross-entropy
    #: step over every controller's placements), run at the parameter server when distributed.
    pools: ClassVar[bool] = False
    #: The learner's failing signal (its stand-in for an OOM placement), ``None`` if it has none.
    failing_signal: float | None = None
    #: The policy's parameters as one module, for learners that have one (the default
    #: [`policy_state`][placer.learner.Learner.policy_state] reads it); set in ``__init__``.
    policy: Any

    def __init__(self, env: Environment, config: LearnerConfig) -> None:
        self.env, self.config = env, config
        #: Set by the distributed search on a learner with [`pools`][placer.learner.Learner.pools]: [`update`][placer.learner.Learner.update] then
        #: makes only its own step, and the pooled one runs at the parameter server.
        self.pooled = False
        from placer.warm import prior_units, start_prob, start_units

        #: The warm start or device prior ([`placer.warm`][placer.warm]): int64 ``[num_units]`` device indices
        #: of ``env``'s units, ``None`` for the paper's start. The subclass biases its policy towards
        #: it; the search loop measures it first and keeps it as the incumbent.
        self.start: np.ndarray | None = start_units(config, env.grouping, len(env.spec.devices), self.name)
        init = getattr(config, "init", "uniform")
        if self.start is None and init != "uniform" and len(env.spec.devices) > 1:
            self.start = prior_units(init, env.grouping.num_groups, env.spec.gpu_indices)
        #: The probability the initial policy gives each unit's start device (``init_prob``, or
        #: scaled to the graph by ``moves_per_sample``: [`placer.warm.start_prob`][placer.warm.start_prob]).
        self.init_prob = start_prob(config, env.grouping.num_groups if self.start is None else len(self.start),
                                    len(env.spec.devices))

    @property
    @abstractmethod
    def batch_size(self) -> int:
        """``K``: placements per update (the loop asks for ``min(K, budget left)``)."""

    @abstractmethod
    def sample(self, k: int) -> Samples:
        """Sample ``k`` placements from the current policy (uses the learner's own seeded RNG)."""

    @abstractmethod
    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """Learn from the measured samples.

        Args:
            samples: what [`sample`][placer.learner.Learner.sample] returned.
            step_times_s: float64 ``[K]`` measured seconds per step (``nan`` where OOM).
            oom: bool ``[K]``: the placement ran out of memory (the learner applies its own
                failing signal).
        Returns:
            Per-update diagnostics for the learning curve, floats by name: ``loss``,
            ``entropy``, ``kl`` (where the method has one), ``baseline`` and any other.
        """

    def observe_start(self, step_time_s: float | None) -> None:
        """The start's measured step time (seconds; ``None``: it did not run), before the first sample
        of a search with a start ([`start`][placer.learner.Learner.start]: a warm start or device prior). The search
        loop measures the start itself as placement 0; a learner that keeps an incumbent
        (``scope_moves``) starts it there. Default: nothing."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue: policy tensors, optimizer state, baselines, RNG
        states. Values are tensors, numpy arrays or JSON-able (saved with ``torch.save``,
        loaded with ``weights_only=True``)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what [`state_dict`][placer.learner.Learner.state_dict] returned."""

    # -- what the distributed search (placer.distributed, 2017 Sec. 3.4) needs; defaults for all --

    def policy_state(self) -> dict[str, np.ndarray]:
        """The policy's parameters, what the parameter server holds and controllers pull: by
        default the ``state_dict`` of ``self.policy`` (a ``torch.nn.Module``) as numpy arrays,
        copied. Floating-point arrays are merged across controllers; others are controller 0's.

        Raises:
            TypeError: the learner has no ``self.policy`` module and does not override this.
        """
        policy = getattr(self, "policy", None)
        import torch

        if not isinstance(policy, torch.nn.Module):
            raise TypeError(f"learner {self.name!r}: has no policy module; override policy_state() and "
                            "load_policy_state() (placer.learner.Learner)")
        return {k: v.detach().cpu().numpy().copy() for k, v in policy.state_dict().items()}

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        """Put [`policy_state`][placer.learner.Learner.policy_state]'s parameters into the policy, in place (an optimizer keeps its
        references), on the device the policy is on."""
        import torch

        current = self.policy.state_dict()
        self.policy.load_state_dict({k: torch.from_numpy(np.array(v)).to(current[k].device) for k, v in state.items()})

    @classmethod
    def policy_device_problem(cls, device: str) -> str | None:
        """Why the policy cannot run on ``device`` (not in [`policy_devices`][placer.learner.Learner.policy_devices]), as one line
        naming the learners that can; ``None`` if it can."""
        if device in cls.policy_devices:
            return None
        able = [name for name, c in LEARNERS.items() if device in c.policy_devices]
        return (f"policy_device {device!r}: learner {cls.name!r} runs its policy on {', '.join(cls.policy_devices)} "
                f"only (on {device}: {', '.join(able) or 'none'}); use policy_device 'cpu' or leave {cls.name} out")

    def to(self, device: str) -> Learner:
        """Run the policy on ``device`` (``cpu`` or ``cuda``); returns ``self``.

        Raises:
            ValueError: ``device`` is not in [`policy_devices`][placer.learner.Learner.policy_devices] ([`policy_device_problem`][placer.learner.Learner.policy_device_problem];
                the default learner runs on the CPU only).
        """
        problem = self.policy_device_problem(device)
        if problem:
            raise ValueError(problem)
        return self

    def pooled_update(self, batches: list[tuple[Samples, np.ndarray, np.ndarray]]) -> dict[str, float] | None:
        """The pooled step at the parameter server over every controller's batch of a round,
        ``(samples, step_times_s [K], oom [K])`` each (``Samples.extra`` empty); returns
        diagnostics when it changed the policy, else ``None``. Default: no pooled step."""
        return None

    def settings(self) -> dict[str, Any]:
        """The settings recorded with the run (MLflow parameters, placement-log header)."""
        return {"learner": self.name, **self.config.model_dump()}


LEARNERS: dict[str, type[Learner]] = {}
"""Method name -> learner class, filled by [`register`][placer.learner.register] when ``placer`` is imported."""


def learner_units(cls: type[Learner], config: LearnerConfig | None = None) -> Literal["groups", "colocation"]:
    """The units a learner of class ``cls`` with ``config`` places: ``config.units`` where its config has that
    named option (EAGLE's, [`placer.configs.EagleConfig`][placer.configs.EagleConfig]), else the class's
    [`Learner.units`][placer.learner.Learner.units]; ``config=None``: the paper's."""
    return getattr(config, "units", None) or cls.units


def register(cls: type[Learner]) -> type[Learner]:
    """Class decorator: name ``cls`` from its config's entry in [`placer.configs.LEARNER_REGISTRY`][placer.configs.LEARNER_REGISTRY]
    ([`placer.configs.learner_name`][placer.configs.learner_name]; a learner outside the registry, e.g. a plugin's, gives its own
    ``name``) and add it to [`LEARNERS`][placer.learner.LEARNERS] under that name.

    Raises:
        ValueError: another learner already has that name; a class whose own ``name`` differs from its
            config's registry name; a class outside the registry without a ``name`` of its own.
    """
    registered, own = learner_name(cls.Config), cls.__dict__.get("name")
    if registered is not None and own is not None and own != registered:
        raise ValueError(f"learner {cls.__name__}: name {own!r}, but its config {cls.Config.__name__} is registered as "
                         f"{registered!r} (placer.configs.LEARNER_REGISTRY)")
    if registered is None and own is None:
        raise ValueError(f"learner {cls.__name__}: no name; add it to placer.configs.LEARNER_REGISTRY or set its "
                         "class attribute name")
    name: str = registered if registered is not None else str(own)
    cls.name = name
    if cls.name in LEARNERS and LEARNERS[cls.name] is not cls:
        raise ValueError(f"learner name {cls.name!r}: already registered by {LEARNERS[cls.name].__name__}")
    LEARNERS[cls.name] = cls
    return cls
