"""Learners and the one search loop. Importing ``placer`` fills :data:`LEARNERS`
(method name -> :class:`placer.learner.Learner` class) with every learner module below."""

from placer.learner import LEARNERS, Learner, LearnerConfig, Samples, register  # noqa: F401
from placer import reinforce, post, post_ablations  # noqa: E402,F401  (register rl, post, ppo, ce, pg)

for _optional in ("hierarchical", "eagle"):  # other helpers' learners, registered when present
    try:
        __import__(f"placer.{_optional}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"placer.{_optional}":
            raise
