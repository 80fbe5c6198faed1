"""Post's ablations (Gao, Chen, Li, NeurIPS 2018, Sec. 4 "Setup", Fig. 2): the learners Post
is compared against, on Post's softmax placement distributions (Sec. 3.2, Eq. 2-3).

* ``ppo``: *Proximal Policy Optimization* alone (Eq. 11 with the adaptive KL penalty after
  every ``k`` placements; no cross-entropy update), as used by Spotlight.
* ``ce``: *Cross-Entropy Minimization* alone (Eq. 10 every ``n_ce`` placements, nothing
  between).
* ``pg``: the *Policy Gradient Method* (REINFORCE, Williams 1992, as Mirhoseini et al. 2017
  train their placer) on the softmax distributions: one gradient-ascent step of learning
  rate ``ppo_learning_rate`` (1, the paper's SGA rate) on ``1/K sum_n A_n log f(d_n)``,
  ``A_n = b - T(d_n)``, after every ``k`` placements.

Each is [`placer.post.PostLearner`][placer.post.PostLearner] with other defaults of its switches
(``cross_entropy``, ``policy_update``); every other setting is Post's.
"""

from __future__ import annotations


from placer.configs import CEConfig, PGConfig, PPOConfig
from placer.learner import register
from placer.post import PostLearner


@register
class PPOLearner(PostLearner):
    """PPO alone on softmax distributions (Post Sec. 4's "Proximal Policy Optimization")."""

    Config = PPOConfig
    paper = "Gao, Chen, Li, Post, NeurIPS 2018, Sec. 3.3 Eq. 11 and Sec. 4 (baseline PPO); Schulman et al. 2017"


@register
class CELearner(PostLearner):
    """Cross-entropy minimisation alone (Post Sec. 4's "Cross-Entropy Minimization")."""

    Config = CEConfig
    paper = "Gao, Chen, Li, Post, NeurIPS 2018, Sec. 3.2 Eq. 10 and Sec. 4 (baseline CE)"


@register
class PGLearner(PostLearner):
    """The policy gradient method on softmax distributions (Post Sec. 4's "Policy Gradient")."""

    Config = PGConfig
    paper = "Gao, Chen, Li, Post, NeurIPS 2018, Sec. 4 (baseline PG); Williams 1992; Mirhoseini et al. 2017 Eq. 3"
