"""Learners and the one search loop. Importing ``placer`` fills :data:`LEARNERS`
(method name -> :class:`placer.learner.Learner` class) with every learner module below."""

from placer.learner import LEARNERS, Learner, LearnerConfig, Samples, register  # noqa: F401
from placer import reinforce, post, post_ablations, hierarchical, eagle  # noqa: E402,F401  (register every learner)
