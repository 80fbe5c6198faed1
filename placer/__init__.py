"""Learners and the one search loop. Importing ``placer`` fills :data:`LEARNERS`
(method name -> :class:`placer.learner.Learner` class) with every learner module below."""

from placer.learner import LEARNERS, Learner, LearnerConfig, Samples, register  # noqa: F401
from placer import reinforce, post, post_ablations, hierarchical, eagle, local_search  # noqa: E402,F401  (register every learner)

DEFAULT_LEARNERS = ("rl", "post")
"""The learners the experiment runs when ``--methods`` is not given: the 2017 placer and Post
(the two of 2017 Table 2 and Post Table 1); the others run when named."""
