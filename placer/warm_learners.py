"""The warm-started variants of every learner: ``rl_warm``, ``post_warm``, ... ([`placer.warm`][placer.warm]).

Each is its learner with ``init="best_baseline"`` as the default (its config:
[`placer.configs.warm_config`][placer.configs.warm_config]), so the experiment can run it beside the faithful learner
under its own method name, and the results table labels it ``rl (warm: expert)``. No paper
starts its learner from a given placement; this is what a user with a good heuristic wants.
"""

from __future__ import annotations

from importlib import import_module

from placer import LEARNER_MODULES
from placer.configs import CONFIGS, FAITHFUL_CONFIGS
from placer.learner import LEARNERS, Learner, register
from placer.warm import WARM_SUFFIX


def warm_variant(cls: type[Learner]) -> type[Learner]:
    """A subclass of the learner ``cls`` named ``<name>_warm`` whose config starts from the best
    baseline (``init="best_baseline"``); registered in [`placer.learner.LEARNERS`][placer.learner.LEARNERS]."""
    name = cls.name + WARM_SUFFIX
    doc = (f"``{name}``: `{cls.__module__}.{cls.__name__}` started from the best baseline's placement "
           "(``init='best_baseline'``; [`placer.warm`][placer.warm], in no paper).")
    variant = type(f"Warm{cls.__name__}", (cls,), {
        "name": name, "Config": CONFIGS[name], "__module__": __name__, "__doc__": doc,
        "paper": f"{cls.paper}; warm start (init best_baseline): ours, in no paper",
    })
    return register(variant)


for _name in FAITHFUL_CONFIGS:
    import_module(f"placer.{LEARNER_MODULES[_name]}")
    warm_variant(LEARNERS[_name])
