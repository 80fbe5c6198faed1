"""Learners and the one search loop.

[`LEARNER_NAMES`][placer.LEARNER_NAMES] lists the learners without importing them (cheap: the CLI checks a typo
against it before torch loads). The first use of [`LEARNERS`][placer.learner.LEARNERS] (method name ->
[`placer.learner.Learner`][placer.learner.Learner] class) imports every learner module, which registers itself.
"""

from importlib import import_module

from placer.configs import LEARNER_REGISTRY
from placer.learner import Learner, LearnerConfig, Samples, register  # noqa: F401
from placer.warm import WARM_SUFFIX

LEARNER_MODULES = {
    **{name: module for name, (module, _) in LEARNER_REGISTRY.items()},
    **{f"{name}{WARM_SUFFIX}": "warm_learners" for name in LEARNER_REGISTRY},
}
"""Learner name -> the module of ``placer`` that registers it (in registration order; read from
[`placer.configs.LEARNER_REGISTRY`][placer.configs.LEARNER_REGISTRY]): the learners as their papers start them, then their
warm-started variants (``rl_warm``: [`placer.warm`][placer.warm], in no paper)."""

LEARNER_NAMES = tuple(LEARNER_MODULES)
"""Every learner's method name, known without importing torch (``tests/test_learners*`` check it
against [`LEARNERS`][placer.learner.LEARNERS])."""

DEFAULT_LEARNERS = ("rl", "post", "rl_warm", "post_warm")
"""The learners the experiment runs when ``--methods`` is not given: the 2017 placer and Post
(the two of 2017 Table 2 and Post Table 1) as their papers run them, then the same two started
from the best baseline's placement ([`placer.warm`][placer.warm]; in no paper), so the default run ends with
a learned placement at least as good as the best baseline; the others run when named."""


def __getattr__(name: str):
    """``placer.LEARNERS``: the registry, once every learner module is imported (PEP 562)."""
    if name == "LEARNERS":
        for module in dict.fromkeys(LEARNER_MODULES.values()):
            import_module(f"placer.{module}")
        from placer.learner import LEARNERS

        for key in [*LEARNER_NAMES, *(k for k in list(LEARNERS) if k not in LEARNER_NAMES)]:
            LEARNERS[key] = LEARNERS.pop(key)  # in LEARNER_NAMES order, whichever module was imported first
        globals()["LEARNERS"] = LEARNERS
        return LEARNERS
    raise AttributeError(f"module 'placer' has no attribute {name!r}")


def policy_device_problem(methods, device: str) -> str | None:
    """The first learner of ``methods`` that cannot run its policy on ``device`` (its
    [`placer.learner.Learner.policy_devices`][placer.learner.Learner.policy_devices]), as one line naming both; ``None`` if every
    learner can (always for ``cpu``; other methods are ignored). Checked before a run starts by
    the CLI, the experiment flow and [`placer.distributed.ray_controllers`][placer.distributed.ray_controllers]."""
    if device == "cpu":
        return None
    from placer import LEARNERS

    problems = (LEARNERS[m].policy_device_problem(device) for m in methods if m in LEARNERS)
    return next((p for p in problems if p), None)
