"""The learners' configs: their settings, with the papers' hyperparameters as defaults.

They live here, apart from the learners (which import torch), so that a config can be built and
validated without torch: the experiment config ([`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig]) types each
learner's options with them, and the CLI checks a bad option before any model loads. Each learner
module re-exports its own (``placer.reinforce.ReinforceConfig`` ...). The fields' sources (paper,
section) are in each class's docstring.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model, model_validator

from placer.warm import WARM_SUFFIX


class LearnerConfig(BaseModel):
    """Settings every learner has; a learner's own config subclasses this.

    Attributes:
        budget: placements sampled (and measured) in all.
        seed: seeds the policy's initialisation and sampling (one seed, one search).

    The warm start ([`placer.warm`][placer.warm]; no paper does this), beside each learner's own ``init``
    (``uniform``: the paper's start; ``single_gpu``: a device prior; ``best_baseline``; ``placement``):
        init_placement: with ``init="placement"``: the op -> device JSON file to start from
            (``placement export --format json``); read by the experiment into ``init_ops``.
        init_prob: the probability the initial policy gives each unit's start device (0.9).
        moves_per_sample: ``m`` (a named option, in no paper): the start's probability scaled to
            the graph, ``init_prob = 1 - m / U`` on ``U`` units when that is more than ``init_prob``
            (graphs of more than ``m / (1 - init_prob)`` units), so a sample from the initial policy
            moves about ``m`` units off the start on a large graph and the paper's share on a
            small one ([`placer.warm.start_prob`][placer.warm.start_prob]); ``None``: ``init_prob`` as given.
            The softmax learners (Post and its ablations) use the same rate for the
            cross-entropy step's uniform mixing ([`PostConfig`][placer.configs.PostConfig]); ``local_search``
            moves one unit at a time and ignores it.
        init_ops: the start, ``[num_ops]`` device indices (filled in by the experiment:
            [`tasks.search.warm_start_config`][tasks.search.warm_start_config]); not a setting (not dumped, not logged).
        init_source: what the start is (a baseline's name or the file), for labels; not dumped.

    Raises:
        pydantic.ValidationError (a ``ValueError``): ``init="placement"`` without
            ``init_placement``, or ``init_placement`` with another ``init``.
    """

    budget: int = Field(1000, ge=1)
    seed: int = 0
    init_placement: str | None = None
    init_prob: float = Field(0.9, gt=0, lt=1)
    moves_per_sample: float | None = Field(None, gt=0)
    init_ops: list[int] | None = Field(None, exclude=True, repr=False)
    init_source: str | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _init_placement_with_init(self):
        init = getattr(self, "init", None)
        if init == "placement" and not self.init_placement:
            raise ValueError("init 'placement' needs init_placement: the op -> device JSON file to start from "
                             "(`placement export --format json`)")
        if self.init_placement and init != "placement":
            raise ValueError(f"init_placement {self.init_placement!r}: given with init {init!r}; set init 'placement' "
                             "to start from it")
        majority = getattr(self, "scope_majority", 0.0)
        if majority and not (getattr(self, "scope_moves", 0) or getattr(self, "scope_prob", 0)):
            raise ValueError(f"scope_majority {majority:g}: only with scope moves (scope_moves > 0, or scope_prob > 0 "
                             "for local_search); it says how the scope moves move")
        units = getattr(self, "unit_moves", 0.0)
        if units and units + getattr(self, "scope_moves", 0.0) > 1:
            raise ValueError(f"unit_moves {units:g}: with scope_moves {getattr(self, 'scope_moves', 0.0):g} more than every "
                             "sample (their sum is the share of samples replaced; at most 1): lower one of them "
                             "(the _warm variants of post, ppo, ce, pg and rl default to unit_moves 0.5, eagle_warm, eagle_ce_warm and hierarchical_warm to 0.8)")
        given = self.model_fields_set  # a warm default with its moves turned off is inert; one asked for is refused
        if "unit_dont_look" in given and getattr(self, "unit_dont_look", False) and not units:
            raise ValueError("unit_dont_look true: only with unit_moves > 0 (got 0); it says how the unit moves are drawn")
        if ("moves_over" in given and getattr(self, "moves_over", "units") != "units"
                and not (units or getattr(self, "scope_moves", 0.0) or getattr(self, "layer_descent", 0.0))):
            raise ValueError(f"moves_over {getattr(self, 'moves_over')!r}: only with scope_moves, unit_moves or "
                             "layer_descent > 0 (all 0); it says what those moves move")
        if ("adaptive_shares" in given and getattr(self, "adaptive_shares", False)
                and not (units or getattr(self, "scope_moves", 0.0))):
            raise ValueError("adaptive_shares true: only with scope_moves or unit_moves > 0 (both 0); it shares the "
                             "samples between the policy and those moves")
        travel = getattr(self, "scope_travel", None)
        kick = getattr(self, "unit_kick", 0)
        if kick == 1:
            raise ValueError("unit_kick 1: a kick of one unit is a unit move, and at a local optimum every one is tried; "
                             "0 (off) or 2 and more")
        if "unit_kick" in given and kick and not (units and getattr(self, "unit_dont_look", False)):
            raise ValueError(f"unit_kick {kick}: only with unit_dont_look true and unit_moves > 0 (got unit_dont_look "
                             f"{getattr(self, 'unit_dont_look', False)}, unit_moves {units:g}); the don't-look bits say when to kick")
        if "unit_kick" in given and kick and travel is not None:
            raise ValueError(f"unit_kick {kick}: not with scope_travel {travel:g}; each is a walk of its own")
        if travel is not None and not getattr(self, "scope_moves", 0):
            raise ValueError(f"scope_travel {travel:g}: only with scope_moves > 0 (got {getattr(self, 'scope_moves', 0):g}); "
                             "the walk's moves are the scope moves")
        return self


WarmInit = Literal["uniform", "single_gpu", "best_baseline", "placement"]
"""A learner's ``init`` ([`placer.warm`][placer.warm]): the paper's start, a device prior (``single_gpu``), or a warm start."""


# placer.reinforce
class ReinforceConfig(LearnerConfig):
    """Search settings; defaults follow 2017 Sec. 3.1 where the paper gives them.

    Attributes:
        budget: placements sampled (and measured) in all.
        k: placements per policy update (K in Eq. 3; the paper's workers per controller: 4 or 8).
        seed: seeds the policy's initialisation and sampling.
        learning_rate: Adam's step size (not given in the paper). 0.001: at 0.01 (our earlier
            default) the policy collapses within tens of placements, because every placement
            that ran has a large negative advantage against the baseline's failing-signal start.
            Measured at 2,400 placements (``benchmarks/learners.py``), 0.01 against 0.001: nmt
            paper k80x4 5.516 s (collapsed onto one OOM placement by sample 28) against 1.921 s;
            inception_v3 paper k80x4, median of seeds 0-2, 2.927 s (seed 1 collapsed at 5.411 s)
            against 2.894 s; rnnlm paper k80x2 1.460 s against 1.446 s.
        baseline_decay: ``B <- decay * B + (1 - decay) * mean(R)`` after each update.
        failing_signal: R of an OOM placement; ``None``: ``sqrt(10 * T_serial)``, with
            ``T_serial`` the sum of all op times on the slowest device (seconds).
        valid_only_after: after this many updates, update only on placements that ran (5,000).
        hidden_size: the placer's LSTM width.
        torch_threads: CPU threads torch uses (process-wide, set when the learner is built):
            the policy's matrices are small, so one thread is fastest (a 7-group search of
            800 placements: 0.97 CPU-s on 1 thread, 23 CPU-s on the default 2 of a loaded
            2-core machine); ``None``: leave torch's setting.

    Named improvements, not in the 2017 paper, off by default (measured on the default run of
    an earlier preset, small rnnlm on k80x2, 1,000 placements, learning rate 0.01; faithful:
    0.01413 s, expert 0.01048 s):
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

    Named options for out-of-memory placements (the paper's failing signal is one constant,
    Sec. 3.1; with ``B`` initialised to it, a batch in which every placement runs out of
    memory gives ``R - B = 0`` and no gradient, and a policy that has collapsed onto an OOM
    placement drags ``B`` to that constant and stays there: measured on nmt paper k80x4,
    samples 28 to 300 all the same OOM placement):
        oom_reward: ``constant`` (the paper) or ``memory_scaled``: the failing signal times
            the placement's static memory load, ``max(1, max_d bytes_d / memory_d)``
            ([`placer.features.static_memory_load`][placer.features.static_memory_load]), so that among OOM placements the one that
            overflows least is the least bad, and an all-OOM batch still has a gradient.
        baseline_samples: ``all`` (the paper: ``B`` moves with the mean reward of every
            sample) or ``ran``: ``B`` moves only with placements that ran (it stays where it
            is after an all-OOM batch), so OOM placements keep a positive ``R - B``.

    Named option for the start (not in the 2017 paper, nor any other; [`placer.warm`][placer.warm]):
        init: ``uniform`` (the paper: the network's random initialisation), ``single_gpu`` (a device
            prior: the start is the single-GPU placement, [`placer.warm`][placer.warm]), ``best_baseline``
            or ``placement`` (``init_placement``): a constant additive prior on each decoder
            step's logits makes the start placement's device about ``init_prob`` likely, and
            ``B`` starts at the first batch's mean reward instead of the failing signal (whose
            exploration undid the start: small rnnlm on k80x2, 1,000 placements from expert's
            0.07929 s, seeds 0-2: 0.07725, 0.07929, 0.07929 s with ``B`` from the failing
            signal, the last 100 samples' median 0.107-0.28 s; 0.07655 s each from the first
            batch, median 0.077-0.079 s).

    Named option for the policy gradient's step (not in the Post paper, whose ``pg`` baseline takes
    ``A_n = b - T(d_n)`` in seconds at learning rate 1):
        advantage ``rank``: the batch's centred ranks, fastest ``+0.5`` to slowest ``-0.5``
            ([`placer.post.rank_advantage`][placer.post.rank_advantage]; the fitness shaping of natural evolution
            strategies, Wierstra et al., JMLR 2014, Sec. 3.1). Why: one OOM placement at the failing
            time (tens of seconds, times its memory load with ``oom_reward=memory_scaled``) gives
            advantages of tens to thousands of seconds, and one step of learning rate 1 drove every
            distribution to a single device: on inception_v3 ``k80x4`` (``pg`` with the options of
            ``scope_moves`` below, seed 0) the mean entropy was 0.11 nats after 241 placements and 0
            from 481 on, the best 2.881 s from placement 481; with ranks 0.38-0.49 nats throughout and
            2.572 s. Over seeds 0-5 of the five graphs of ``benchmarks/learners.py`` (docs/results.md):
            inception_v3 2.572 / 2.645 s (medians of seeds 0-2 / 3-5) against 2.881 / 2.893 s, the
            other four within 0.3% either way. Chosen after that one trace of seed 0 on inception_v3.
            Only with ``policy_update="pg"``: with PPO's adaptive KL penalty the ranks' small steps
            halved ``beta`` to 0 and the tables diverged (NaN) in the one run tried.

    Named option for moves a human expert makes (in no paper; as Post's, [`PostConfig`][placer.configs.PostConfig]):
        scope_moves: the share of samples (each by a coin flip) replaced by the fastest placement
            measured so far with one name scope moved whole to one device
            ([`placer.features.move_scope`][placer.features.move_scope]); the decoder scores the replaced samples
            teacher-forced, so Eq. 3 learns from them as from its own. 0: the paper's.
        scope_travel: the scope moves start from a walk that takes any scope move within ``1 +
            scope_travel`` of the incumbent's step time (record-to-record travel; as Post's,
            [`PostConfig`][placer.configs.PostConfig]). ``None``: from the incumbent. Only with ``scope_moves``.
        scope_majority: the share of scope moves that move only the scope's units on its most common
            device, keeping its others where they are (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: every move whole.
        unit_moves: a further share of samples that are the incumbent with one unit moved to one other
            device (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's.
        unit_dont_look: the unit moves skip moves tried and not faster until their unit or a
            neighbour moves (don't-look bits; as Post's, [`PostConfig`][placer.configs.PostConfig]). ``False``: uniform.
        adaptive_shares: the shares of the policy's samples, scope moves and unit moves follow how often
            each was faster than the incumbent (probability matching; as Post's, [`PostConfig`][placer.configs.PostConfig]).
            ``False``: fixed.
        unit_kick: when every unit move from the point they move is tried, a kick of this many units
            (groups) from the incumbent and a walk from there, an iterated local search (as Post's,
            [`PostConfig`][placer.configs.PostConfig]). 0: off. Only with ``unit_dont_look``.

    Named option for a search that stalls (in no paper; as Post's, [`PostConfig`][placer.configs.PostConfig]):
        restart_after: after this many placements without a faster one, the decoder's parameters
            and Adam go back to their initial state, its prior (a warm start's) onto the fastest
            placement measured so far, and the baseline starts at the next batch's mean reward
            ([`placer.features.Restarts`][placer.features.Restarts]). ``None``: the paper's. Not on Ray.
        layer_descent: the share of the budget that is first a descent over whole layers, then a
            restart on the incumbent (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's. Not on Ray.
    """

    budget: int = Field(400, ge=1)
    k: int = Field(8, ge=1)
    seed: int = 0
    learning_rate: float = Field(0.001, gt=0)
    baseline_decay: float = Field(0.9, ge=0, lt=1)
    failing_signal: float | None = Field(None, gt=0)
    valid_only_after: int = Field(5000, ge=0)
    hidden_size: int = Field(256, ge=1)
    attention_size: int | None = Field(None, ge=1)
    torch_threads: int | None = Field(1, ge=1)
    entropy_coef: float = Field(0.0, ge=0)
    normalize_advantage: bool = False
    ppo_epochs: int = Field(0, ge=0)
    ppo_clip: float = Field(0.3, gt=0)
    grad_clip: float | None = Field(None, gt=0)
    oom_reward: Literal["constant", "memory_scaled"] = "constant"
    baseline_samples: Literal["all", "ran"] = "all"
    init: WarmInit = "uniform"
    scope_moves: float = Field(0.0, ge=0, le=1)
    unit_moves: float = Field(0.0, ge=0, le=1)
    unit_dont_look: bool = False
    adaptive_shares: bool = False
    unit_kick: int = Field(0, ge=0)
    scope_travel: float | None = Field(None, gt=0, lt=1)
    scope_majority: float = Field(0.0, ge=0, le=1)
    restart_after: int | None = Field(None, ge=1)
    layer_descent: float = Field(0.0, ge=0, lt=1)


# placer.post
class PostConfig(LearnerConfig):
    """Post's settings; defaults are the paper's (Sec. 4 "Setup").

    Attributes:
        budget: placements sampled (and measured) in all (the paper: 2,400).
        k: placements per PPO iteration (12 workers).
        n_ce: placements between cross-entropy updates (60: five iterations).
        rho: fraction of a CE period's placements kept as elites (0.1).
        epsilon: initial weight of the uniform distribution mixed in after CE (0.1, to 0 linearly).
        ppo_steps: gradient-ascent steps per PPO iteration (10).
        ppo_learning_rate: their step size (1).
        kl_target: target KL divergence per group for the adaptive penalty (0.03).
        beta: initial KL penalty coefficient (1).
        baseline_decay: ``b <- decay * b + (1 - decay) * mean(T)`` after each iteration.
        failing_time_s: step time given to an OOM placement; ``None``: ``10 * T_serial``.
        advantage: ``seconds`` (``b - T``, Eq. 11), ``relative`` (``(b - T) / b``, an option) or
            ``rank`` (named option, ``pg`` only, below).
        ppo_clip: ``eps`` of PPO's clipped surrogate (named option; Schulman et al. 2017, Eq. 7),
            beside the KL penalty: each term ``r A`` becomes ``min(r A, clip(r, 1 - eps, 1 + eps) A)``.
            ``None``: Eq. 11 as Post has it. Why: unclipped, the ratio of a sample the policy gives a
            tiny probability (a scope move, the incumbent) grows step by step within one update until
            it overflows; that step is then not taken (the diagnostic ``nonfinite_steps``; before, the
            tables became NaN). Measured (2,400 placements, medians of seeds 0-2, docs/results.md
            "Post's PPO step at a probability of 0"): ``ppo_warm`` / ``post_warm`` nmt 1.6638 /
            1.6361 s and inception_v3 2.3305 / 2.3592 s, against 1.6509 / 1.6455 and 2.3226 / 2.3444 s
            without; from scratch ``post`` on nmt 1.5777 s against 1.5960 s but ``ppo`` on inception_v3
            2.8708 s against 2.5543 s (the named settings of ``scope_moves`` below). So off.
        seed: seeds sampling.
        torch_threads: CPU threads torch uses (process-wide, set when the learner is built; the
            ``[G, D]`` updates are small, so one thread is fastest: inside ``placement
            experiment`` on a loaded 2-core machine the default threads made the search's CPU
            time exceed its wall time); ``None``: leave torch's setting.
        cross_entropy: apply the cross-entropy update every ``n_ce`` placements (Eq. 10).
        policy_update: the update of the other iterations: ``ppo`` (Eq. 11), ``pg`` (one
            gradient-ascent step on ``1/K sum_n A_n log f(d_n)``, the policy gradient method
            on the softmax distributions; learning rate ``ppo_learning_rate``) or ``none``.

    Named option for the start (not in the Post paper, whose distributions start uniform,
    Algorithm 1 line 1): with groups in the hundreds and a CPU ten times slower than a GPU,
    a uniform start puts a third of the groups on the CPU, and 2,400 placements do not
    learn that away (measured: rnnlm paper k80x2, 84 groups of 253 on the CPU at the start,
    74 after 2,400 placements, best 4.1x expert).
        init: ``uniform`` (the paper) or ``single_gpu`` (every learner's device prior,
            [`placer.warm`][placer.warm]): each group's distribution starts with ``init_prob`` on the
            first GPU, the rest uniform, and the single-GPU placement is measured first. The
            local-search reference starts there too. (Before the prior was every learner's, Post's
            ``single_gpu`` was ``(1 - epsilon)`` on that GPU plus ``epsilon`` uniform, 0.92 on
            five devices against 0.9 now, and the start was not measured first.)
            ``best_baseline`` or ``placement`` (``init_placement``; no paper does this,
            [`placer.warm`][placer.warm]): each group's distribution starts with ``init_prob`` on its
            device in that placement, the rest uniform.

    Named options for the cross-entropy step (not in the Post paper, whose Eq. 10 sets each
    distribution to the period's elite frequencies; both are standard in the CE literature,
    de Boer, Kroese, Mannor and Rubinstein, *A Tutorial on the Cross-Entropy Method*, Annals of
    Operations Research 2005, Sec. 3.2 (smoothed updating) and Remark 3.5 (elitism)):
        smoothing: ``alpha`` of the smoothed update: the new distribution is
            ``alpha * (elite frequencies mixed with epsilon uniform) + (1 - alpha) * old``
            (1: the paper, the old distribution forgotten).
        elites_kept: the best this-many placements measured so far (any period) join each CE
            step's elites (0: the paper, each period's own elites only), so a step never
            forgets the incumbent.

    Named option for out-of-memory placements (the paper gives every OOM placement one large
    step time, Sec. 4 "Setup"; from a start that does not fit, e.g. one H100 for the 6.7B
    decoder, every placement of a period then ties and the elites are arbitrary: measured,
    ``init=single_gpu`` with the two options above on ``gpt/6.7b`` ``h100x8``: 2,400 of
    2,400 placements OOM):
        oom_reward: ``constant`` (the paper: ``failing_time_s``) or ``memory_scaled``:
            ``failing_time_s`` times the placement's static memory load
            ([`placer.features.static_memory_load`][placer.features.static_memory_load], at least 1), so the placements that
            overflow least rank first, as in the 2017 placer's option of the same name and
            the local search's ranking.

    Named option for exploration on large graphs (not in the Post paper, whose ``epsilon`` 0.1
    and the prior's 0.9 move each group off its likeliest device with about the same
    probability whatever the number of groups: on rnnlm's 253 and nmt's 502 groups, 17 to 50
    groups at once per sample, where the hill climber moves one; the candidate "entropy floors,
    reward scaling per graph" of issue 36, as the step size of a (1+lambda) evolution strategy
    is set per dimension):
        moves_per_sample: ``m`` ([`LearnerConfig`][placer.configs.LearnerConfig]): the exploration rate is ``m / G`` on ``G``
            groups (at most the paper's: ``1 - init_prob`` and ``epsilon``), used for both the device prior
            or warm start (``init_prob = 1 - m / G`` on the start device) and the cross-entropy step's
            uniform mixing (``epsilon = m / G``,
            decaying as the paper's), so a sample moves about ``m`` groups off the likeliest
            device on any graph; ``None``: the paper's ``epsilon`` and ``init_prob``. Measured
            (``ce`` with ``init=single_gpu``, ``smoothing`` 0.7, ``elites_kept`` 6,
            ``oom_reward=memory_scaled``, 2,400 placements, docs/results.md): ``m`` = 4 took
            nmt from 2.25 s to 1.84 s and rnnlm from 1.42 s to 1.38 s (medians of 3 seeds),
            below the hill climber's 1.92 s and 1.39 s, and again on 3 held-out seeds; it
            does not help on inception_v3 (68 groups) or from the 6.7B decoder's OOM start.

    Named option for moves a human expert makes (not in the Post paper, whose samples move groups
    independently; the expert of Mirhoseini et al. 2017, Sec. 4.2 puts "each layer on its own GPU"):
        scope_moves: the share of samples (0 to 1, each sample by a coin flip) that are the
            fastest placement the learner has measured so far with one name scope
            ([`compgraph.grouping.name_scopes`][compgraph.grouping.name_scopes]: a layer ``rnnlm/layer_1``, a time step, a
            block ``h.11``) moved whole to one device: a depth of the scope tree, then a scope at
            that depth, then a device, each uniformly (before anything is measured: a sample of
            the distributions). Such a sample enters the cross-entropy step and the policy update
            as any other (its probability under the policy is its own). 0: the paper's. Measured
            (``ce``, the options of ``moves_per_sample`` above and 0.25, 2,400 placements, seed 0):
            rnnlm 0.950 s (1.38 s without; the expert 0.978 s), nmt 1.522 s (1.84 s; the
            optimum search 1.608 s); moving a scope of a *sampled* placement instead found 1.39 s
            and 1.85 s: the cross-entropy step's per-group frequencies mix elites that moved
            different scopes.
        scope_travel: ``t`` (record-to-record travel: G. Dueck, J. Comput. Phys. 104, 1993): the scope
            moves start from a walk instead of the incumbent; a scope move measured within ``1 + t``
            of the incumbent's step time becomes the walk's placement, and a new incumbent puts the
            walk back on it ([`placer.features.ScopeMoves`][placer.features.ScopeMoves]), so a move a little slower than the
            incumbent can be followed by a second: on nmt ``k80x4``, from the expert (1.7235 s),
            the decoder to a free GPU is 0.3% slower (1.7292 s), and its softmax back then gives
            1.6491 s, which no single scope move reaches. ``None``: from the incumbent. Only with
            ``scope_moves`` (refused without). Measured (warm-started, ``scope_moves=0.5``, ``t`` =
            0.01, 2,400 placements, docs/results.md "Scope moves from a walk"): 4-7% faster on nmt,
            mixed on inception_v3 (``ce_warm`` above 1.05x), slower on the 6.7B decoder, so off by default.
        scope_majority: ``q``: with probability ``q`` a scope move moves only the scope's groups on its
            most common device, and the scope's other groups stay where they are
            ([`placer.features.move_scope`][placer.features.move_scope]): a human expert who moves a layer keeps the exceptions
            already found (a few of the softmax's groups on the CPU and other GPUs, on nmt). Why: from
            ``ce_warm``'s best on nmt ``k80x4`` (seed 0 with ``scope_travel``, 1.5190 s, the softmax's 42
            groups 37 on ``/gpu:0``, 5 elsewhere), the softmax moved whole to ``/gpu:1`` takes 1.5536 s, its
            37 alone 1.5047 s. 0: every move whole. Only with ``scope_moves`` (refused without).
            Measured in docs/results.md ("Scope moves that keep a scope's exceptions").
        unit_moves: a further share of samples (0 to 1, by the same coin flips: a sample is replaced
            with probability ``scope_moves + unit_moves``, at most 1) that are the fastest placement
            measured so far with one group moved to one other device, each uniformly: a hill
            climber's move beside the scope moves ([`placer.features.ScopeMoves`][placer.features.ScopeMoves]). Why: from
            ``ce_warm``'s layer-level optimum at seed 1 on nmt ``k80x4`` (1.6484 s) the faster placements split the softmax's
            time steps and the layers' small side groups over the devices one group at a time, and
            samples that move about 4 groups at once (``moves_per_sample``) rarely move only one: a
            scratch hill climber from there (2,000 placements, batches of 12, seeds 0-9, medians)
            ended at 1.485 s with one group a move, 1.545 s with two, 1.607 s with four. 0: the
            paper's. Measured in docs/results.md ("One group at a time: `unit_moves`").
        unit_dont_look: the unit moves draw their (unit, device) among those not yet tried from the
            point they move: a move tried and not faster is not drawn again until that unit or a
            unit it exchanges tensors with moves (don't-look bits, J. J. Bentley, *Fast algorithms for
            geometric traveling salesman problems*, ORSA J. Comput. 4(4), 1992, Sec. 3;
            [`placer.features.ScopeMoves`][placer.features.ScopeMoves]); when every move is tried, every
            one is drawable again. ``False``: each drawn uniformly. Only with ``unit_moves``.
        adaptive_shares: the shares of the policy's samples, the scope moves and the unit moves
            follow how often each kind of sample was faster than the incumbent, probability matching
            (D. E. Goldberg, *Probability matching, the magnitude of reinforcement, and classifier
            system bidding*, Machine Learning 5(4), 1990; D. Thierens, *An adaptive pursuit strategy
            for allocating operator probabilities*, GECCO 2005, Sec. 2): each kind's rate is its
            discounted faster samples over its discounted samples (each sample's weight decays by
            0.999 a placement), and each kind on gets a floor of 0.05 plus the rest in proportion to
            its rate; a kind set to 0 stays 0. Until a sample is faster the configured shares hold.
            ``False``: ``scope_moves`` and ``unit_moves`` throughout. Only with ``scope_moves`` or ``unit_moves``.
        unit_kick: an iterated local search over the unit moves (H. R. Lourenço, O. C. Martin and
            T. Stützle, *Iterated local search*, Handbook of Metaheuristics, 2003, Sec. 3): when every
            (unit, device) move from the point the moves start from is tried (the don't-look bits say
            so), instead of trying them all again, that point becomes the incumbent with a connected set
            of this many units (a unit and neighbours of those drawn: it exchanges tensors with them)
            moved to one device, uniformly among those not all of them are on (a kick; handed out as a
            unit move): a move that one-unit moves cannot make where each alone adds a transfer; and
            the unit and scope moves start from it, a walk that takes the fastest of each batch's
            moves from it when faster than it; a new incumbent puts the walk
            back on it, and the next local optimum kicks the incumbent again ("better" acceptance,
            their Sec. 3.4). From the first kick on, a placement measured or handed out before is not
            drawn again as a unit move (a memo of 16-byte digests, kept in a checkpoint); until then
            the draws are those without it (scope moves and the policy's samples may repeat). Fewer units
            where the set has no more neighbours. 0: off (every move drawable again); 1 is refused (a
            one-unit kick is a unit move). Only with ``unit_dont_look``, not with ``scope_travel``; a warm
            default with either is inert.

    Named option for a search that stalls (in no paper):
        restart_after: after this many placements without a faster one, the policy starts again
            as a warm start on the fastest placement measured so far: the tables become the start's
            distribution there (``init_prob``, scaled by ``moves_per_sample``), the step-time
            baseline and the KL coefficient ``beta`` start afresh; the kept elites stay
            ([`placer.features.Restarts`][placer.features.Restarts]: an iterated local search whose moves are the
            policy's samples). ``None``: the paper's. Not on Ray (each controller's incumbent is its
            own). Chosen on inception_v3 ``k80x4``, warm-started, seeds 0-2 (48 against 24, 120
            and 480; docs/results.md, "Restarts from the incumbent").
        layer_descent: the share of the budget (0 to 1, rounded to placements) that, after the
            first incumbent (a warm start: the start), is an iterated local search over whole layers,
            the first rows of each batch until it is spent (the batch that ends a neighbourhood is
            topped up with the policy's samples): each layer ([`compgraph.grouping.layer_scopes`][compgraph.grouping.layer_scopes]) moved whole to each GPU,
            the fastest taken once all are measured, a kick of two layers when none is faster
            ([`placer.features.LayerDescent`][placer.features.LayerDescent]); then the policy restarts on the fastest placement
            so far, as with ``restart_after``. They are samples as any other (logged, counted in
            the budget; the policy learns from them before its restart). 0: the paper's. Not on
            Ray; none on a cluster with one GPU. Why: on nmt ``k80x4`` the best placement that keeps every layer whole (1.6473 s,
            ``benchmarks/layer_search.py``) is a step back from the expert's basin, which the
            warm-started learners never left; ``ce_warm``'s descent of 300 placements from the expert
            ends within 0.2% of it at 15 of 20 seeds (docs/results.md, "A descent over whole layers first").
    """

    budget: int = Field(2400, ge=1)
    k: int = Field(12, ge=1)
    n_ce: int = Field(60, ge=1)
    rho: float = Field(0.1, gt=0, le=1)
    epsilon: float = Field(0.1, ge=0, le=1)
    ppo_steps: int = Field(10, ge=0)
    ppo_learning_rate: float = Field(1.0, gt=0)
    kl_target: float = Field(0.03, gt=0)
    beta: float = Field(1.0, ge=0)
    baseline_decay: float = Field(0.9, ge=0, lt=1)
    failing_time_s: float | None = Field(None, gt=0)
    advantage: Literal["seconds", "relative", "rank"] = "seconds"
    ppo_clip: float | None = Field(None, gt=0, lt=1)
    seed: int = 0
    cross_entropy: bool = True
    policy_update: Literal["ppo", "pg", "none"] = "ppo"
    init: WarmInit = "uniform"
    torch_threads: int | None = Field(1, ge=1)
    smoothing: float = Field(1.0, gt=0, le=1)
    elites_kept: int = Field(0, ge=0)
    oom_reward: Literal["constant", "memory_scaled"] = "constant"
    scope_moves: float = Field(0.0, ge=0, le=1)
    unit_moves: float = Field(0.0, ge=0, le=1)
    unit_dont_look: bool = False
    adaptive_shares: bool = False
    unit_kick: int = Field(0, ge=0)
    scope_travel: float | None = Field(None, gt=0, lt=1)
    scope_majority: float = Field(0.0, ge=0, le=1)
    restart_after: int | None = Field(None, ge=1)
    layer_descent: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _rank_with_pg(self):
        if self.advantage == "rank" and self.policy_update != "pg":
            raise ValueError(f"advantage 'rank': only with policy_update 'pg' (got {self.policy_update!r}; with PPO's "
                             "adaptive KL penalty it diverged)")
        if self.ppo_clip is not None and self.policy_update != "ppo":
            raise ValueError(f"ppo_clip {self.ppo_clip}: only with policy_update 'ppo' (got {self.policy_update!r}, "
                             "which has no ratio to clip)")
        return self


# placer.post_ablations
class PPOConfig(PostConfig):
    """Post's settings without the cross-entropy update."""

    cross_entropy: bool = False
    policy_update: Literal["ppo", "pg", "none"] = "ppo"


# placer.post_ablations
class CEConfig(PostConfig):
    """Post's settings without the PPO iterations."""

    cross_entropy: bool = True
    policy_update: Literal["ppo", "pg", "none"] = "none"


# placer.post_ablations
class PGConfig(PostConfig):
    """Post's settings with a policy-gradient step instead of PPO and no cross-entropy update."""

    cross_entropy: bool = False
    policy_update: Literal["ppo", "pg", "none"] = "pg"


# placer.hierarchical
class HierarchicalConfig(LearnerConfig):
    """Hierarchical Planner settings; defaults are ``hierarchical_controller_hparams`` of the grappler code.

    Attributes:
        k: placements per update (the code's ``num_children``: 1).
        num_groups: ``None``: ``min(256, 20 x devices)`` (the code's default).
        grouping_hidden_size: the grouper's hidden width (64).
        hidden_size: the placer's LSTM width (512; the bi-LSTM encoder has 256 per direction).
        attention_size: width of the attention memory (``None``: ``hidden_size``, as the code; a
            named speed option).
        max_num_outputs, max_output_size: outputs and dims per output in the op/group inputs (5, 5).
        adj_embed_dim: adjacency width of the op input (20: 10 neighbours).
        forget_bias_init: initial forget-gate bias (1.0).
        temperature, tanh_constant: placer logits are ``tanh(l / temperature) x tanh_constant`` (1.0, 1.0).
        logits_std_noise: std of the logit noise relative to the logits' RMS (0.5) ...
        stop_noise_step: ... added until this many updates (750).
        learning_rate: Adam's initial step size (the code: 0.1; default here 0.01, see below) ...
        lr_dec, start_decay_step, decay_steps: ... times ``lr_dec`` (0.95) every ``decay_steps``
            (50) updates after ``start_decay_step`` (400), staircase.
        grad_bound: clip the gradients' global norm to this (1.0).
        bl_dec: baseline decay (0.9).
        stop_updating_after_steps: after this many updates, only placements that ran count (1000).
        failing_time_s: step time of an OOM placement (the code: 100 s); ``None``: ``10 x
            T_serial`` (every op back to back on the slowest device), the project's rule for
            all learners, since simulated steps range from milliseconds to seconds.
        input_scaling, unit_pooling: the grouper's inputs (`unit_inputs`): the code's
            ``raw`` and ``sum``, or the named options ``column_max`` and ``mean`` (the defaults here).
        threads: torch intra-op threads while sampling and updating (`policy_compute`).

    **Defaults that differ from the code** (named options, issue 21; the code's values are
    ``learning_rate=0.1, input_scaling="raw", unit_pooling="sum"``): with raw inputs (op
    indices and shapes in the thousands) the linear grouper's logits reach the thousands, so
    its distribution is one-hot from the start and Adam at 0.1 keeps it so. Measured on
    small rnnlm, k80x2 (550 units), grouper entropy after 0, 3, 10 and 20 updates: the
    code's settings 5.87, 1.10, 0.13, 0.00 nats (gradient norm 0 from update 20 on);
    ``column_max`` + ``mean`` at 0.1: 2228, 816, 82, 42; at 0.01: 2228, 2204, 2118, 1893.
    EAGLE's own defaults ([`placer.eagle`][placer.eagle]) are the same three.

    Named option for the start (in no paper; [`placer.warm`][placer.warm]):
        init: ``uniform`` (the code's random initialisation), ``single_gpu`` (a device prior, [`placer.warm`][placer.warm]),
            ``best_baseline`` or ``placement``
            (``init_placement``): constant additive priors on the grouper's logits (each unit to
            the group of its start device) and the placer's (group ``d`` to device ``d``), each
            ``sqrt(init_prob)`` likely ([`placer.warm.two_level_priors`][placer.warm.two_level_priors]); the baseline
            starts at the first reward instead of the failing signal (as the 2017 placer's,
            [`ReinforceConfig`][placer.configs.ReinforceConfig]).

    Named option for moves a human expert makes (in no paper; as Post's, [`PostConfig`][placer.configs.PostConfig]):
        scope_moves: the share of samples (each by a coin flip) replaced by the fastest placement
            measured so far with one name scope of units moved whole to one device
            ([`placer.features.move_scope`][placer.features.move_scope]), written as grouper and placer actions (unit
            ``u`` to group ``P[u]``, group ``d`` to device ``d``, as a warm start's priors) and
            scored teacher-forced, so the joint REINFORCE step learns from them as from its own.
            0: the paper's.
        scope_travel: the scope moves start from a walk that takes any scope move within ``1 +
            scope_travel`` of the incumbent's step time (record-to-record travel; as Post's,
            [`PostConfig`][placer.configs.PostConfig]). ``None``: from the incumbent. Only with ``scope_moves``.
        scope_majority: the share of scope moves that move only the scope's units on its most common
            device, keeping its others where they are (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: every move whole.
        unit_moves: a further share of samples that are the incumbent with one unit moved to one other
            device (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's.
        unit_dont_look: the unit moves skip moves tried and not faster until their unit or a
            neighbour moves (don't-look bits; as Post's, [`PostConfig`][placer.configs.PostConfig]). ``False``: uniform.
        adaptive_shares: the shares of the policy's samples, scope moves and unit moves follow how often
            each was faster than the incumbent (probability matching; as Post's, [`PostConfig`][placer.configs.PostConfig]).
            ``False``: fixed.
        unit_kick: when every unit move from the point they move is tried, a kick of this many units
            (groups) from the incumbent and a walk from there, an iterated local search (as Post's,
            [`PostConfig`][placer.configs.PostConfig]). 0: off. Only with ``unit_dont_look``.
        moves_over: ``"units"``: the scope moves, the layer descent and the unit moves above act on the
            colocation units, by their names (the ops'); ``"groups"``: on the prepared co-location groups (the
            2017 grouper's, which the other learners place), by the groups' names (a layer is the groups under its
            scope, as theirs), a unit move moving one group whole and the don't-look bits over (group, device)
            pairs ([`placer.features.ScopeMoves.of_learner`][placer.features.ScopeMoves.of_learner]; the environment's
            ``grouping.coarse_group``, the units where none is given). In no paper; only with one of those moves.

    Named option for out-of-memory placements (in no paper; as the 2017 placer's, [`ReinforceConfig`][placer.configs.ReinforceConfig]):
        oom_reward: ``constant`` (the code: every OOM placement gets ``failing_time_s``) or
            ``memory_scaled``: ``failing_time_s`` times the placement's static memory load
            ``max(1, max_d bytes_d / memory_d)`` ([`placer.hierarchical.measured_times`][placer.hierarchical.measured_times]), so
            that from a start that does not fit (the 6.7B decoder on one H100) the samples that
            overflow least score best.

    Named option for a search that stalls (in no paper; as Post's, [`PostConfig`][placer.configs.PostConfig]):
        restart_after: after this many placements without a faster one, the grouper's and
            placer's parameters and Adam go back to their initial state, their priors (a warm
            start's) onto the fastest placement measured so far, and the baseline starts afresh;
            the learning-rate decay, the logits noise and ``stop_updating_after_steps`` keep
            counting the search's updates (a late restart learns at the decayed rate)
            ([`placer.features.Restarts`][placer.features.Restarts]). ``None``: the paper's. Not on Ray.
        layer_descent: the share of the budget that is first a descent over whole layers, then a
            restart on the incumbent (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's. Not on Ray.
    """

    k: int = Field(1, ge=1)
    num_groups: int | None = Field(None, ge=1)
    grouping_hidden_size: int = Field(64, ge=1)
    hidden_size: int = Field(512, ge=2, multiple_of=2)
    attention_size: int | None = Field(None, ge=1)
    max_num_outputs: int = Field(5, ge=1)
    max_output_size: int = Field(5, ge=1)
    adj_embed_dim: int = Field(20, ge=2, multiple_of=2)
    forget_bias_init: float = 1.0
    temperature: float = Field(1.0, gt=0)
    tanh_constant: float = Field(1.0, ge=0)
    logits_std_noise: float = Field(0.5, ge=0)
    stop_noise_step: int = Field(750, ge=0)
    learning_rate: float = Field(0.01, gt=0)
    lr_dec: float = Field(0.95, gt=0, le=1)
    start_decay_step: int = Field(400, ge=0)
    decay_steps: int = Field(50, ge=1)
    grad_bound: float | None = Field(1.0, gt=0)
    bl_dec: float = Field(0.9, ge=0, lt=1)
    stop_updating_after_steps: int = Field(1000, ge=0)
    failing_time_s: float | None = Field(None, gt=0)
    input_scaling: Literal["raw", "column_max"] = "column_max"
    unit_pooling: Literal["sum", "mean"] = "mean"
    threads: int = Field(1, ge=1)
    init: WarmInit = "uniform"
    scope_moves: float = Field(0.0, ge=0, le=1)
    unit_moves: float = Field(0.0, ge=0, le=1)
    unit_dont_look: bool = False
    adaptive_shares: bool = False
    unit_kick: int = Field(0, ge=0)
    moves_over: Literal["units", "groups"] = "units"
    scope_travel: float | None = Field(None, gt=0, lt=1)
    scope_majority: float = Field(0.0, ge=0, le=1)
    restart_after: int | None = Field(None, ge=1)
    layer_descent: float = Field(0.0, ge=0, lt=1)
    oom_reward: Literal["constant", "memory_scaled"] = "constant"


# placer.eagle
class EagleConfig(LearnerConfig):
    """EAGLE's settings; defaults are Sec. IV-C's where the paper gives them.

    Attributes:
        k: placements per mini-batch (10).
        ppo_epochs: updates per mini-batch (4).
        ppo_clip: PPO's clip ratio epsilon (0.3).
        entropy_coef: weight of the entropy bonus (0.01).
        learning_rate: Adam's step size (0.01).
        grad_clip: clip the gradients' global norm to this (1.0).
        num_groups: the grouper's groups (256).
        grouping_hidden_size: the grouper's hidden units (64).
        hidden_size: encoder (both directions together) and decoder LSTM width (512).
        attention: ``before`` the decoder (Fig. 4a, the paper's) or ``after`` it (Fig. 4b; a
            named option, EAGLE Table II compares both): scoring placements is then one
            LSTM call and batched attention instead of a step-by-step pass.
        attention_size: width of the attention's hidden layer (``None``: ``hidden_size``, the
            paper gives none); a named speed option: the attention costs ``O(K G^2 A)`` a pass.
        link_hidden_size: width of the RNN from grouper parameters to placer inputs (64: ours).
        baseline_decay: decay of the reward's exponential moving average (0.9: ours).
        max_num_outputs, max_output_size, adj_embed_dim: op/group inputs as the grappler code (5, 5, 20).
        ce_interval: placements between cross-entropy updates (``None``: PPO only; ``eagle_ce``: 50).
        ce_elites: elites per cross-entropy update (5).
        ce_epochs: Adam steps per cross-entropy update (4: ours).
        failing_time_s: step time of an OOM placement; ``None``: ``10 x T_serial``.
        input_scaling, unit_pooling: the grouper's inputs ([`placer.hierarchical.unit_inputs`][placer.hierarchical.unit_inputs]):
            ``column_max`` and ``mean`` (ours: the paper says only that EAGLE optimised the
            network inputs; with the grappler's raw ``sum`` the grouper's logits are in the
            thousands and every PPO ratio is clipped); ``raw``/``sum`` is the grappler's.
        threads: torch intra-op threads while sampling and updating
            ([`placer.hierarchical.policy_compute`][placer.hierarchical.policy_compute]).
        init: ``uniform`` (random initialisation), ``single_gpu`` (a device prior), ``best_baseline`` or ``placement``: as the
            Hierarchical Planner's ([`HierarchicalConfig`][placer.configs.HierarchicalConfig]; in no paper, [`placer.warm`][placer.warm]).

    Named option for moves a human expert makes (in no paper; as the Hierarchical Planner's,
    [`HierarchicalConfig`][placer.configs.HierarchicalConfig]):
        scope_moves: the share of samples replaced by the fastest placement measured so far with one
            name scope of units moved whole to one device, written as grouper and placer actions and
            scored teacher-forced (their PPO ratio starts at 1). 0: the paper's.
        scope_travel: the scope moves start from a walk that takes any scope move within ``1 +
            scope_travel`` of the incumbent's step time (record-to-record travel; as Post's,
            [`PostConfig`][placer.configs.PostConfig]). ``None``: from the incumbent. Only with ``scope_moves``.
        scope_majority: the share of scope moves that move only the scope's units on its most common
            device, keeping its others where they are (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: every move whole.
        unit_moves: a further share of samples that are the incumbent with one unit moved to one other
            device (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's.
        unit_dont_look: the unit moves skip moves tried and not faster until their unit or a
            neighbour moves (don't-look bits; as Post's, [`PostConfig`][placer.configs.PostConfig]). ``False``: uniform.
        adaptive_shares: the shares of the policy's samples, scope moves and unit moves follow how often
            each was faster than the incumbent (probability matching; as Post's, [`PostConfig`][placer.configs.PostConfig]).
            ``False``: fixed.
        unit_kick: when every unit move from the point they move is tried, a kick of this many units
            (groups) from the incumbent and a walk from there, an iterated local search (as Post's,
            [`PostConfig`][placer.configs.PostConfig]). 0: off. Only with ``unit_dont_look``.
        moves_over: ``"units"`` or ``"groups"``: what the scope moves, the layer descent and the unit moves act on,
            the colocation units or the prepared co-location groups (as the Hierarchical Planner's,
            [`HierarchicalConfig`][placer.configs.HierarchicalConfig]).

    Named option for out-of-memory placements (in no paper; as the Hierarchical Planner's):
        oom_reward: ``constant`` (``failing_time_s`` for every OOM placement) or ``memory_scaled``
            (times the placement's static memory load).

    Named option for what the grouper groups (in no paper):
        units: ``colocation`` (the TensorFlow colocation units, the finest that never splits a
            colocation group: the paper's ops as near as they can be placed) or ``groups``: the
            prepared co-location groups (the 2017 grouping, the units the softmax learners place).
            Coarser units are fewer decisions: on the 6.7B decoder (``h100x8``; 359 groups against
            3,917 units) EAGLE with ``scope_moves`` ends 1.03x the best known over the groups against
            1.29-1.34x over the units; on the paper graphs the groups cost 2.5-10% (``docs/results.md``,
            "EAGLE over the co-location groups").

    Named option for a search that stalls (in no paper; as Post's, [`PostConfig`][placer.configs.PostConfig]):
        restart_after: after this many placements without a faster one, the grouper's, link's
            and placer's parameters and Adam go back to their initial state, their priors (a warm
            start's) onto the fastest placement measured so far, and the baseline starts afresh
            (the CE elites stay)
            ([`placer.features.Restarts`][placer.features.Restarts]). ``None``: the paper's. Not on Ray.
        layer_descent: the share of the budget that is first a descent over whole layers, then a
            restart on the incumbent (as Post's, [`PostConfig`][placer.configs.PostConfig]). 0: the paper's. Not on Ray.
    """

    k: int = Field(10, ge=1)
    ppo_epochs: int = Field(4, ge=1)
    ppo_clip: float = Field(0.3, gt=0)
    entropy_coef: float = Field(0.01, ge=0)
    learning_rate: float = Field(0.01, gt=0)
    grad_clip: float | None = Field(1.0, gt=0)
    num_groups: int = Field(256, ge=1)
    grouping_hidden_size: int = Field(64, ge=1)
    hidden_size: int = Field(512, ge=2, multiple_of=2)
    attention: Literal["before", "after"] = "before"
    attention_size: int | None = Field(None, ge=1)
    link_hidden_size: int = Field(64, ge=1)
    baseline_decay: float = Field(0.9, ge=0, lt=1)
    max_num_outputs: int = Field(5, ge=1)
    max_output_size: int = Field(5, ge=1)
    adj_embed_dim: int = Field(20, ge=2, multiple_of=2)
    ce_interval: int | None = Field(None, ge=1)
    ce_elites: int = Field(5, ge=1)
    ce_epochs: int = Field(4, ge=1)
    failing_time_s: float | None = Field(None, gt=0)
    input_scaling: Literal["raw", "column_max"] = "column_max"
    unit_pooling: Literal["sum", "mean"] = "mean"
    threads: int = Field(1, ge=1)
    init: WarmInit = "uniform"
    scope_moves: float = Field(0.0, ge=0, le=1)
    unit_moves: float = Field(0.0, ge=0, le=1)
    unit_dont_look: bool = False
    adaptive_shares: bool = False
    unit_kick: int = Field(0, ge=0)
    moves_over: Literal["units", "groups"] = "units"
    scope_travel: float | None = Field(None, gt=0, lt=1)
    scope_majority: float = Field(0.0, ge=0, le=1)
    restart_after: int | None = Field(None, ge=1)
    layer_descent: float = Field(0.0, ge=0, lt=1)
    oom_reward: Literal["constant", "memory_scaled"] = "constant"
    units: Literal["colocation", "groups"] = "colocation"


# placer.eagle
class EagleCEConfig(EagleConfig):
    """``eagle_ce``: EAGLE's settings plus cross-entropy every 50 placements with 5 elites (Sec. IV-C)."""

    ce_interval: int | None = Field(50, ge=1)


# placer.local_search
class LocalSearchConfig(LearnerConfig):
    """Hill-climbing settings (not from a paper: this is the project's reference search).

    Attributes:
        budget: placements measured in all (as the learners': 2,400 is Post's).
        k: candidate moves measured per round (one batch).
        block_prob: probability that a move is a block move.
        max_block: the longest block (groups).
        start: ``single_gpu`` or ``random`` (module docstring).
        patience: rounds without improvement before a restart (``None``: ``max(4, ceil(G (D-1) / k))``).
        kick: random moves applied to the best placement at a restart.
        seed: seeds the moves.
        init: ``uniform``: start from ``start``; ``single_gpu``: the single-GPU placement; ``best_baseline`` or ``placement``
            (``init_placement``): start from that placement instead ([`placer.warm`][placer.warm]).
        scope_prob: probability that a move is a *scope move*, one name scope moved whole to one
            device ([`placer.features.move_scope`][placer.features.move_scope]; named option, 0 by default): the same
            moves as the softmax learners' ``scope_moves``, so the reference can be compared with
            them on the same neighbourhood.
        scope_majority: the share of scope moves that move only the scope's groups on its most common
            device (the learners' option of that name, [`PostConfig`][placer.configs.PostConfig]). 0: every move whole.
    """

    budget: int = Field(2400, ge=1)
    k: int = Field(16, ge=1)
    block_prob: float = Field(0.5, ge=0, le=1)
    max_block: int = Field(30, ge=2)
    start: Literal["single_gpu", "random"] = "single_gpu"
    patience: int | None = Field(None, ge=1)
    kick: int = Field(3, ge=1)
    init: WarmInit = "uniform"
    scope_prob: float = Field(0.0, ge=0, le=1)
    scope_majority: float = Field(0.0, ge=0, le=1)


LEARNER_REGISTRY: dict[str, tuple[str, type[LearnerConfig]]] = {
    "rl": ("reinforce", ReinforceConfig),
    "post": ("post", PostConfig),
    "ppo": ("post_ablations", PPOConfig),
    "ce": ("post_ablations", CEConfig),
    "pg": ("post_ablations", PGConfig),
    "hierarchical": ("hierarchical", HierarchicalConfig),
    "eagle": ("eagle", EagleConfig),
    "eagle_ce": ("eagle", EagleCEConfig),
    "local_search": ("local_search", LocalSearchConfig),
}
"""The one place a learner's name is written: method name -> (the module of ``placer`` that defines
it, its config), in the order the CLI and the tables list them. The learner class takes its name from
here ([`placer.learner.register`][placer.learner.register]); [`placer.LEARNER_NAMES`][placer.LEARNER_NAMES], the CLI's choices and the flows'
forms read it, and every entry gets a warm-started variant ``<name>_warm``."""

FAITHFUL_CONFIGS: dict[str, type[LearnerConfig]] = {name: config for name, (_, config) in LEARNER_REGISTRY.items()}
"""Each learner with its paper's start -> its config (from [`LEARNER_REGISTRY`][placer.configs.LEARNER_REGISTRY])."""


WARM_MOVES_PER_SAMPLE = 4.0
"""The warm-started variants' ``moves_per_sample``: a sample from the start moves about 4 units.
With the fixed ``init_prob`` 0.9 a sample moved a tenth of the units (50 of nmt's 502 groups) and
no softmax learner improved on the expert there in 2,400 placements (1.7235 s, seeds 0-2); with 4,
ce_warm found 1.619 s and post_warm 1.683 s (seed 0; docs/results.md "Warm starts")."""


WARM_SCOPE_MOVES = 0.25
"""The warm-started variants' ``scope_moves`` (every learner but ``local_search``, EAGLE's and the
Hierarchical Planner's, below)."""

WARM_SCOPE_MOVES_GROUPER = 0.1
"""The ``scope_moves`` of the grouper + placer learners' warm variants (``eagle_warm``, ``eagle_ce_warm`` and
``hierarchical_warm``): a tenth of their samples are the incumbent with one name scope moved, beside the eight in
ten of one-group moves ([`WARM_UNIT_MOVES_GROUPER`][placer.configs.WARM_UNIT_MOVES_GROUPER]), so a tenth are the
learner's own. EAGLE's was 0.5, with no unit moves, until 2026-11-29 (inception_v3 ``k80x4`` 2.286 s against 2.429 s
at 0.25, seed 0; docs/results.md "EAGLE's warm scope moves"); the Hierarchical Planner's 0.9 until 2026-11-30
(docs/results.md "The Hierarchical Planner's warm scope moves"). On nmt the scope moves are rarely faster (a scratch
count, ``post_warm`` seed 1: 0 of 113 after the layer descent, against 39 of 1,783 one-group moves), so the
unit moves take most of the share (docs/results.md "EAGLE's warm one-group moves")."""

WARM_RESTART_AFTER = 48
"""The warm-started variants' ``restart_after`` (every learner but ``local_search``, which restarts
by its own ``patience``). With both (medians of seeds 0-2, 2,400 placements, docs/results.md
"Restarts from the incumbent"): on inception_v3 ``k80x4`` post_warm 2.327 s, ppo_warm 2.303 s,
ce_warm 2.332 s and pg_warm 2.372 s against 2.390, 2.450, 2.351 and 2.678 s without; on nmt ``k80x4``
1.646, 1.655, 1.637 and 1.668 s against 1.688, 1.724, 1.619 and 1.706 s; on rnnlm 0.950-0.954 s
against 0.948-0.978 s; on the 6.7B decoder 1.871-1.872 s against 1.883-1.889 s. Chosen on
inception_v3, seeds 0-2 (48 against 24, 120 and 480, with and without scope moves); the held-out
seeds 3-5 are within 2.3% of these."""


WARM_LAYER_DESCENT = 0.125
"""The ``layer_descent`` of the warm-started softmax learners (``post_warm``, ``ppo_warm``, ``ce_warm``,
``pg_warm``) and the 2017 placer (``rl_warm``): an eighth of the budget (300 of 2,400 placements) is first a descent over whole layers
from the start ([`placer.features.LayerDescent`][placer.features.LayerDescent]). Measured (2,400 placements, medians,
docs/results.md "A descent over whole layers first"): on nmt ``k80x4`` post_warm 1.485 s, ppo_warm
1.535 s, ce_warm 1.454 s and pg_warm 1.497 s at seeds 0-2 against 1.646, 1.651, 1.637 and 1.668 s
without (held-out seeds 3-5: 1.531, 1.573, 1.548, 1.571 s against 1.609, 1.608, 1.636, 1.636 s); on
inception_v3, rnnlm and the 6.7B decoder at most 1.2% slower and up to 2.3% faster (seeds 0-5;
inception_v3 seeds 0-2 2.306-2.360 s against 2.323-2.372 s); GPT-2 unchanged; on the default run's small rnnlm (1,000
placements) post_warm 2.0% slower. rl_warm (``hidden_size=64, attention_size=16``, seeds 0-2):
nmt 1.555 s against 1.644 s, inception_v3 2.359 s against 2.358 s. The grouper + placer learners' warm
variants descend for twice as long, beside their one-group moves ([`WARM_LAYER_DESCENT_GROUPER`][placer.configs.WARM_LAYER_DESCENT_GROUPER])."""


WARM_UNIT_MOVES = 0.5
"""The ``unit_moves`` of the warm-started softmax learners (``post_warm``, ``ppo_warm``, ``ce_warm``,
``pg_warm``) and the 2017 placer (``rl_warm``): half their samples are the incumbent with one group
moved, beside the quarter that move a scope, so a quarter are the policy's own. Measured (2,400
placements, medians, docs/results.md "One group at a time: `unit_moves`"): on nmt ``k80x4`` post_warm
1.482 s, ppo_warm 1.502 s, ce_warm 1.471 s and pg_warm 1.497 s over seeds 0-5 against 1.498, 1.554,
1.493 and 1.553 s without; on inception_v3, rnnlm, the 6.7B decoder and GPT-2 (seeds 0-2) from 0.3%
slower (post_warm on rnnlm) to 1.5% faster (ppo_warm on inception_v3). rl_warm (``hidden_size=64,
attention_size=16``): nmt 1.522 s against 1.555 s at seeds 0-2, but 1.526 s against 1.517 s over seeds
0-5 (0.6% slower); inception_v3 2.316 s against 2.359 s (seeds 0-2). The Hierarchical Planner
(``scope_moves=0.4, unit_moves=0.5``) and EAGLE (``scope_moves=0.25, unit_moves=0.25``) were slower with
it on nmt (seeds 0-2), so theirs stayed 0; both take 0.8 over the co-location groups since
([`WARM_UNIT_MOVES_GROUPER`][placer.configs.WARM_UNIT_MOVES_GROUPER])."""


WARM_ADAPTIVE_SHARES = True
"""The ``adaptive_shares`` of the warm-started softmax learners and the 2017 placer (the same five as
[`WARM_UNIT_MOVES`][placer.configs.WARM_UNIT_MOVES]): after the layer descent, the shares of the policy's
samples, the scope moves and the unit moves follow how often each is faster than the incumbent.
On nmt ``k80x4`` after the descent, 18-29 of the 21-33 new incumbents of a ``pg_warm`` or ``ppo_warm`` run
(seeds 0-2) came from unit moves, and the policy's ~600 samples and the ~480 scope moves gave 0-9 and 0-3.
With both, the four softmax learners' nmt medians went from 1.513-1.527 s to 1.436-1.439 s (seeds 0-9), and
on the other graphs from 0.6% slower to 1.0% faster (seeds 0-2); either alone did little.
Measured with [`WARM_UNIT_DONT_LOOK`][placer.configs.WARM_UNIT_DONT_LOOK] in docs/results.md ("Shares that follow
what pays, and don't-look bits")."""

WARM_UNIT_DONT_LOOK = True
"""The ``unit_dont_look`` of the same five warm-started variants (and the grouper + placer learners' three, [`WARM_UNIT_MOVES_GROUPER`][placer.configs.WARM_UNIT_MOVES_GROUPER]): a unit move tried from a placement and
not faster is not drawn again until its unit or a neighbour moves. A scratch hill climber of one-group
moves from nmt's layer-level optimum (2,000 placements) ended at a median of 1.435 s with it against
1.461 s without (seeds 40-99), 1.436 against 1.474 s with a scope move at 0.1 (seeds 0-39).
docs/results.md ("Shares that follow what pays, and don't-look bits")."""


WARM_UNIT_KICK = 2
"""The ``unit_kick`` of the same five warm-started variants (and the grouper + placer learners' three): where every one-unit move from the incumbent is
tried and none is faster (a local optimum of the unit moves, which the don't-look bits see), a kick of two
neighbouring units to one device and a walk from there, instead of measuring the same moves again. Warm-started
``post_warm`` on inception_v3 ``k80x4`` (68 groups) found nothing faster after 1,117-1,308 of its 2,400
placements (seeds 0-2). With it, over inception_v3 and rnnlm (the four softmax learners at seeds 0-5, the 2017
placer at seeds 0-5 and 0-2) 25 runs ended faster, 13 slower and 19 the same, and ``post_warm`` on inception_v3
went from 2.3287 to 2.2877 s (seeds 0-2); on nmt, the decoder and GPT-2 (seeds 0-2) no run reached a local
optimum, and every one ended as before, to the bit. docs/results.md ("Kicks at a local optimum: `unit_kick`")."""


WARM_UNIT_MOVES_GROUPER = 0.8
"""The ``unit_moves`` of the grouper + placer learners' warm variants (``eagle_warm``, ``eagle_ce_warm`` and
``hierarchical_warm``): eight samples in ten are the incumbent with one co-location group moved whole
(``moves_over="groups"``), drawn among those not tried (``unit_dont_look``) and kicked at a local optimum
(``unit_kick``), after a descent over whole layers ([`WARM_LAYER_DESCENT_GROUPER`][placer.configs.WARM_LAYER_DESCENT_GROUPER]),
in fixed shares (the learner's own samples: a tenth). Measured (2,400 placements; EAGLE at the named widths
``attention=after, hidden_size=64, attention_size=16``, the Hierarchical Planner at ``hidden_size=64``;
docs/results.md "EAGLE's warm one-group moves" and "A longer descent for the grouper + placer learners"): EAGLE on nmt
``k80x4`` 1.4708 s at seeds 0-2 against 1.5579 s with scope moves at 0.5 alone (with the shorter descent, 0.125),
inception_v3 2.2425 s against 2.3215 s; the Hierarchical Planner (with the descent of 0.25) on nmt 1.4661 s at seeds 0-2
against 1.4989 s with ``scope_moves=0.9`` alone (held-out seeds 3-5: 1.5016 s against 1.5378 s), inception_v3 2.2470 s
against 2.3474 s, rnnlm 0.9468 s against 0.9441 s, the 6.7B decoder 1.8576 s against 1.8586 s, GPT-2 the same. With the
descent of 0.125 it was not faster (1.5524 s on nmt, seeds 0-2)."""


WARM_LAYER_DESCENT_GROUPER = 0.25
"""The ``layer_descent`` of the grouper + placer learners' warm variants (``eagle_warm``, ``eagle_ce_warm``,
``hierarchical_warm``): a quarter of the budget (600 of 2,400 placements), twice the softmax learners'
([`WARM_LAYER_DESCENT`][placer.configs.WARM_LAYER_DESCENT]). At 0.125, where the descent ends (placement 300), EAGLE's
slow seeds on nmt ``k80x4`` (4 and 5, traced) were still in the expert's basin (1.7228 s, against the layer-level
optimum's 1.647 s) and ended at 1.611-1.628 s; at 0.25, at placement 600, nine runs of ten had left it.
Measured (2,400 placements, docs/results.md "A longer descent for the grouper + placer learners"): EAGLE on nmt
1.4373 s at seeds 0-2 against 1.4708 s at 0.125, over seeds 0-9 a median of 1.4618 s against 1.4755 s and a slowest
run of 1.5551 s against 1.6276 s; inception_v3 2.2342 s against 2.2425 s, rnnlm 0.9538 s against 0.9502 s, the 6.7B
decoder 1.8690 s against 1.8714 s, GPT-2 the same (seeds 0-2); ``eagle_ce_warm`` 1.4373 s on nmt. The Hierarchical Planner
with EAGLE's moves: 1.4661 s on nmt at 0.25 against 1.5524 s at 0.125 (seeds 0-2; the figures are in
[`WARM_UNIT_MOVES_GROUPER`][placer.configs.WARM_UNIT_MOVES_GROUPER])."""


def warm_config(config: type[LearnerConfig]) -> type[LearnerConfig]:
    """``config`` with the warm-started variant's defaults: ``init="best_baseline"``, ``moves_per_sample``
    [`WARM_MOVES_PER_SAMPLE`][placer.configs.WARM_MOVES_PER_SAMPLE], ``scope_moves`` [`WARM_SCOPE_MOVES`][placer.configs.WARM_SCOPE_MOVES] (the
    grouper + placer learners': [`WARM_SCOPE_MOVES_GROUPER`][placer.configs.WARM_SCOPE_MOVES_GROUPER]) and ``restart_after``
    [`WARM_RESTART_AFTER`][placer.configs.WARM_RESTART_AFTER], and for the softmax learners and the 2017 placer ``layer_descent``
    [`WARM_LAYER_DESCENT`][placer.configs.WARM_LAYER_DESCENT], ``unit_moves`` [`WARM_UNIT_MOVES`][placer.configs.WARM_UNIT_MOVES],
    ``adaptive_shares`` [`WARM_ADAPTIVE_SHARES`][placer.configs.WARM_ADAPTIVE_SHARES] and ``unit_dont_look``
    [`WARM_UNIT_DONT_LOOK`][placer.configs.WARM_UNIT_DONT_LOOK], with kicks at a local optimum ``unit_kick``
    [`WARM_UNIT_KICK`][placer.configs.WARM_UNIT_KICK], and for the grouper + placer learners (EAGLE, EAGLE-CE, the
    Hierarchical Planner) the same don't-look bits and kicks after a longer descent
    ([`WARM_LAYER_DESCENT_GROUPER`][placer.configs.WARM_LAYER_DESCENT_GROUPER]), with ``unit_moves``
    [`WARM_UNIT_MOVES_GROUPER`][placer.configs.WARM_UNIT_MOVES_GROUPER] over the co-location groups
    (``moves_over="groups"``) in fixed shares: the config of the warm-started variant of a learner (``rl_warm``...;
    [`placer.warm`][placer.warm], in no paper); ``local_search_warm`` moves one unit at a time, restarts by
    its own ``patience`` and has none of the others."""
    name = config.__name__.removesuffix("Config") + "WarmConfig"
    fields: dict[str, Any] = {"init": (config.model_fields["init"].annotation, "best_baseline")}
    grouper = issubclass(config, (EagleConfig, HierarchicalConfig))  # fixed shares, over the co-location groups
    scope_moves = WARM_SCOPE_MOVES_GROUPER if grouper else WARM_SCOPE_MOVES
    defaults: list[tuple[str, Any]] = []
    if config is not LocalSearchConfig:
        defaults += [("moves_per_sample", WARM_MOVES_PER_SAMPLE), ("scope_moves", scope_moves),
                     ("restart_after", WARM_RESTART_AFTER),
                     ("layer_descent", WARM_LAYER_DESCENT_GROUPER if grouper else WARM_LAYER_DESCENT),
                     ("unit_moves", WARM_UNIT_MOVES_GROUPER if grouper else WARM_UNIT_MOVES),
                     ("moves_over", "groups") if grouper else ("adaptive_shares", WARM_ADAPTIVE_SHARES),
                     ("unit_dont_look", WARM_UNIT_DONT_LOOK), ("unit_kick", WARM_UNIT_KICK)]
    chosen = dict(defaults)
    for field, default in defaults:  # each field as the learner's (its bounds), with the warm default
        info = config.model_fields[field]
        fields[field] = (Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation, default)
    return create_model(name, __base__=config, __module__=__name__,  # type: ignore[call-overload]
                        __doc__=f"{config.__name__} with ``init='best_baseline'``, a start scaled to the graph "
                                f"(``moves_per_sample={WARM_MOVES_PER_SAMPLE:g}``), scope moves "
                                f"(``scope_moves={scope_moves:g}``) and restarts from the incumbent "
                                f"(``restart_after={WARM_RESTART_AFTER}``)"
                                + (f", after a descent over whole layers (``layer_descent={chosen['layer_descent']:g}``)"
                                   f" and with one-group moves (``unit_moves={chosen['unit_moves']:g}``, drawn among those"
                                   " not tried, ``unit_dont_look``, and kicked at a local optimum, ``unit_kick``),"
                                   + (" in shares that follow what is faster (``adaptive_shares``)" if "adaptive_shares" in fields
                                      else " over the co-location groups (``moves_over='groups'``), in fixed shares")
                                   if "layer_descent" in fields else "")
                                + ": the warm-started variant (placer.warm; no paper does this).", **fields)


CONFIGS: dict[str, type[LearnerConfig]] = {
    **FAITHFUL_CONFIGS, **{f"{m}{WARM_SUFFIX}": warm_config(c) for m, c in FAITHFUL_CONFIGS.items()},
}
"""Learner name -> its config, known without torch (``tests/test_learners.py`` checks it is each
learner's [`placer.learner.Learner.Config`][placer.learner.Learner.Config]): the faithful learners, then their warm-started
variants (``rl_warm``...)."""


def learner_name(config: type) -> str | None:
    """The registered name of the learner whose config class is ``config`` ([`CONFIGS`][placer.configs.CONFIGS]), ``None``
    for a config outside the registry."""
    return next((name for name, c in CONFIGS.items() if c is config), None)
