"""EAGLE: a feed-forward grouper linked to a seq2seq placer by an RNN, trained with PPO (+ CE).

Lan, Chen, Li, *EAGLE: Expedited Device Placement with Automatic Grouping for Large Models*,
IPDPS 2021, Sec. III and IV-C.

**Units.** As the Hierarchical Planner ([`placer.hierarchical`][placer.hierarchical]): the environment's units
are the TensorFlow colocation units and each unit gets one group from the product of its
ops' grouper distributions (exact, since the grouper is linear), so a colocation group is
never split.

**Grouper** (Sec. III-B, IV-C "a two-layer feed-forward neural network with 64 hidden units
... The number of groups is set to 256"): the grappler grouper EAGLE reproduced
([`placer.hierarchical.LinearGrouper`][placer.hierarchical.LinearGrouper] over the same op inputs), 256 groups, no logit
noise (EAGLE does not mention the grappler's).

**The RNN from grouper to placer** (Abstract: "An extra RNN is introduced to transform
parameters of the grouper into inputs of the placer, linking the originally separated parts
together"; the body gives no more). Our reading: an LSTM (``link_hidden_size``, 64) reads
the grouper's output-layer weights column by column (column ``g`` of ``W2 [64, 256]``: group
``g``'s weight vector), and its output at step ``g`` is appended to group ``g``'s embedding.
The placer's input then depends differentiably on the grouper's parameters, so the placer's
loss trains the grouper too, beside the grouping's own log-probability.

**Group embeddings** (Sec. III-C): counts of op types, output shapes and adjacency of each
group, aggregated as the Hierarchical Planner ([`placer.hierarchical.group_embeddings`][placer.hierarchical.group_embeddings]).

**Placer** (Sec. III-C, Fig. 3a, 4a; IV-C): a bi-directional LSTM encoder (512 wide: 256 per
direction, as the grappler code), a uni-directional LSTM decoder (512) started from the
encoder's final states, Bahdanau attention *before* the decoder (Fig. 4a): at step ``t`` the
context ``c_t`` over the encoder outputs is scored against the previous decoder state
``h_{t-1}``; the LSTM reads ``[embedding of the previous device, c_t]`` and ``h_{t-1}``; the
device is drawn from ``softmax(W h_t)``.

**Training** (Sec. III-D, Eq. 1-4; IV-C): PPO's clipped surrogate (Eq. 3, clip 0.3) with one
ratio per decision (each unit's group, each group's device), all sharing their placement's
advantage, averaged over the decisions, as Post's PPO (Post Eq. 11, the same group's earlier
paper) takes one ratio per group (one ratio for the joint probability of ~6,000 decisions
is clipped for every sample after the first step); entropy bonus 0.01 on the mean entropy
per decision (the units' group distributions and the groups' device distributions),
10 placements a mini-batch, 4 updates each, Adam (0.01), gradient norm clipped at 1.0.
Eq. 4: ``R_t = -sqrt(step time)`` of the ``t``-th placement, ``B_t`` the exponential moving
average of ``R_1..R_t`` (decay ``baseline_decay`` per placement, 0.9: the paper gives none),
``A_t = R_t - B_t``. (An average moved once per mini-batch lagged the improving rewards so
that nearly every advantage was positive on the test graph.) An OOM
placement gets the step time ``10 x T_serial`` (the paper gives none).

**Speed** (same distribution and updates): the attention scores are
[`placer.attention.additive_scores`][placer.attention.additive_scores] (``tanh`` as ``2 sigmoid(2x) - 1``, blocks recomputed
in the backward pass instead of one ``[K, G, H]`` autograd tensor per step); the update's
``kl`` diagnostic is the mean ``log pi_old - log pi`` at the last PPO epoch, before its step
(measuring it after the step decoded the whole batch once more). With the paper's attention
*before* the decoder, each of the 4 PPO epochs still decodes the batch step by step (the
context at step ``t`` needs ``h_{t-1}``); the named option ``attention="after"`` (Fig. 4b, Table
II's alternative) scores a batch in one LSTM call.

**eagle_ce** (Sec. III-D "PPO joint with cross-entropy minimization", IV-C): every 50
placements, the 5 best placements sampled so far (all of them, not just the last 50) are
elites and the policy is moved towards them: ``ce_epochs`` (4, our choice: the paper gives
none) Adam steps minimising ``-mean log pi(elite)``, the neural-policy form of Post's
cross-entropy minimisation (Post Eq. 10 solves it in closed form for its softmax tables).
On Ray ([`placer.distributed`][placer.distributed]; the paper runs one process) each controller keeps the elites
of the placements it sampled and makes its own CE steps, which the parameter server merges as
any other update: a choice of ours, not a pooled step as Post's.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from cluster.environment import Environment
from placer.configs import EagleCEConfig, EagleConfig
from placer.attention import additive_scores
from placer.features import Restarts, ScopeMoves, initial_state, static_memory_load
from placer.hierarchical import (
    LinearGrouper,
    StepPrior,
    clip_and_step,
    failing_time,
    group_embeddings,
    measured_times,
    policy_compute,
    scope_actions,
    sample_categorical,
    seeded_init,
    unit_inputs,
    warm_priors,
)
from placer.learner import Learner, LearnerConfig, Samples, register


class EaglePlacer(StepPrior):
    """EAGLE's seq2seq placer (module docstring): attention before the decoder (Fig. 4a, the
    paper's choice) or, as a named option, after it (Fig. 4b, the Hierarchical Planner's, which
    EAGLE's Table II compares).

    With attention *after* the decoder the decoder's input at step ``t`` is only the previous
    device's embedding, so scoring given placements is one ``nn.LSTM`` call over the sequence
    and the attention is batched over all steps (as [`placer.hierarchical.HierarchicalPlacer`][placer.hierarchical.HierarchicalPlacer]);
    *before* the decoder, the context at step ``t`` depends on ``h_{t-1}`` and every step runs in turn.

    Args:
        in_size: width of a group's input; num_devices: ``D``; hidden_size: 512 (even);
        attention: ``"before"`` (Fig. 4a) or ``"after"`` (Fig. 4b);
        attention_size: width of the attention's hidden layer (``None``: ``hidden_size``).
    """

    def __init__(self, in_size: int, num_devices: int, hidden_size: int = 512, attention: str = "before",
                 attention_size: int | None = None) -> None:
        super().__init__()
        if attention not in ("before", "after"):
            raise ValueError(f"attention: unknown {attention!r}; valid: before, after")
        h = hidden_size
        a = h if attention_size is None else attention_size
        self.h, self.d, self.attention = h, num_devices, attention
        self._init_prior()  # a warm start's prior on each step's logits (placer.hierarchical.StepPrior)
        self.encoder = nn.LSTM(in_size, h // 2, batch_first=True, bidirectional=True)
        self.device_embedding = nn.Embedding(num_devices + 1, h)  # row D: <go>
        self.attn_enc = nn.Linear(h, a, bias=False)
        self.attn_dec = nn.Linear(h, a)
        self.attn_v = nn.Linear(a, 1, bias=False)
        if attention == "after":
            self.decoder = nn.LSTM(h, h, batch_first=True)  # reads the previous device's embedding
            self.out = nn.Linear(2 * h, num_devices)  # [h_t, c_t] -> logits
            return
        # decoder LSTM cell on [device embedding, context]; gates i, f, g, o (PyTorch order)
        self.w_emb = nn.Parameter(torch.empty(4 * h, h))
        self.w_ctx = nn.Parameter(torch.empty(4 * h, h))
        self.w_hh = nn.Parameter(torch.empty(4 * h, h))
        self.b = nn.Parameter(torch.zeros(4 * h))
        bound = 1.0 / math.sqrt(h)
        for w in (self.w_emb, self.w_ctx, self.w_hh):
            nn.init.uniform_(w, -bound, bound)
        self.out = nn.Linear(h, num_devices)

    def _prior(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """Step ``step``'s logits ``[K, D]`` plus the warm start's prior, if any."""
        return logits if self.prior is None else logits + self.prior[step]

    def _encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [K, G, E]`` -> ``(encoder outputs [K, G, H], keys [K, G, H], h0 [K, H], c0 [K, H])``."""
        enc, (hn, cn) = self.encoder(x)  # [K, G, H]
        k, g, h = enc.shape
        return enc, self.attn_enc(enc), hn.transpose(0, 1).reshape(k, h), cn.transpose(0, 1).reshape(k, h)

    def _run(self, x: torch.Tensor, actions: torch.Tensor | None, generator: torch.Generator | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode all groups step by step: sample (``actions`` None) or score given ``actions [K, G]``.

        Returns ``(actions [K, G], log p [K, G] per decision, entropy [K] summed over the decisions)``.
        """
        enc, keys, hx, cx = self._encode(x)
        k, g, h = enc.shape
        v = self.attn_v.weight[0]
        prev = torch.full((k,), self.d, dtype=torch.long)
        chosen, logps, ent = [], [], x.new_zeros(k)
        if self.attention == "after":
            dec: Any = self.decoder  # nn.LSTM's weights: attributes torch's type stubs do not declare
            emb_gates = self.device_embedding.weight @ dec.weight_ih_l0.T + dec.bias_ih_l0 + dec.bias_hh_l0
            w_h = torch.cat([dec.weight_hh_l0, self.attn_dec.weight], dim=0).T  # [H, 5H]
        else:
            emb_gates = self.device_embedding.weight @ self.w_emb.T + self.b  # [D + 1, 4H]
            w_h = torch.cat([self.w_hh, self.attn_dec.weight], dim=0).T  # [H, 5H]
        hproj = hx @ w_h
        for i in range(g):
            rec, query = hproj[:, : 4 * h], hproj[:, 4 * h :] + self.attn_dec.bias
            if self.attention == "before":  # context from h_{t-1}, then the LSTM reads it
                context = (torch.softmax(additive_scores(keys, query.unsqueeze(1), v), dim=2) @ enc).squeeze(1)
                gates = emb_gates[prev] + context @ self.w_ctx.T + rec
            else:
                gates = emb_gates[prev] + rec
            ig, fg, gg, og = gates.chunk(4, dim=1)
            cx = torch.sigmoid(fg) * cx + torch.sigmoid(ig) * torch.tanh(gg)
            hx = torch.sigmoid(og) * torch.tanh(cx)
            hproj = hx @ w_h
            if self.attention == "before":
                lp = torch.log_softmax(self._prior(self.out(hx), i), dim=1)
            else:  # the LSTM's output h_t attends, then [h_t, c_t] -> logits
                query = hproj[:, 4 * h :] + self.attn_dec.bias
                context = (torch.softmax(additive_scores(keys, query.unsqueeze(1), v), dim=2) @ enc).squeeze(1)
                lp = torch.log_softmax(self._prior(self.out(torch.cat([hx, context], dim=1)), i), dim=1)
            a = sample_categorical(lp, generator) if actions is None else actions[:, i]
            logps.append(lp.gather(1, a.unsqueeze(1)).squeeze(1))
            ent = ent + (-(lp.exp() * lp).sum(1))
            chosen.append(a)
            prev = a
        return torch.stack(chosen, 1), torch.stack(logps, 1), ent

    @torch.no_grad()
    def sample(self, x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [K, G, E]`` -> ``(actions [K, G] int64, log p [K, G] per decision)``."""
        a, lp, _ = self._run(x, None, generator)
        return a, lp

    def score(self, x: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced ``(log p [K, G] per decision, entropy [K])`` of ``actions [K, G]``, with gradient."""
        if self.attention == "before":
            _, lp, ent = self._run(x, actions, None)
            return lp, ent
        enc, keys, h0, c0 = self._encode(x)
        k, g, h = enc.shape
        prev = torch.cat([actions.new_full((k, 1), self.d), actions[:, :-1]], dim=1)
        out, _ = self.decoder(self.device_embedding(prev), (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()))
        context = torch.softmax(additive_scores(keys, self.attn_dec(out), self.attn_v.weight[0]), dim=2) @ enc
        logits = self.out(torch.cat([out, context], dim=2))  # [K, G, D]
        lp_all = torch.log_softmax(logits if self.prior is None else logits + self.prior[:g], dim=2)
        return lp_all.gather(2, actions.unsqueeze(2)).squeeze(2), -(lp_all.exp() * lp_all).sum(dim=(1, 2))


@register
class Eagle(Learner):
    """EAGLE trained with PPO (module docstring); ``eagle_ce`` adds cross-entropy updates.

    Placements are ``[K, U]`` device indices of ``env.grouping``'s colocation units.
    ``Samples.extra``: ``groups`` int64 ``[K, U]``, ``actions`` int64 ``[K, G]``,
    ``embeddings`` float32 ``[K, G, 2G + T + S]`` (without the link RNN's part).
    A warm start (``init`` ``best_baseline`` or ``placement``; in no paper, [`placer.warm`][placer.warm])
    adds constant priors to the grouper's and the placer's logits
    ([`placer.hierarchical.warm_priors`][placer.hierarchical.warm_priors]).
    """

    Config: ClassVar[type[LearnerConfig]] = EagleConfig
    config: EagleConfig
    paper: ClassVar[str] = "Lan, Chen, Li, EAGLE, IPDPS 2021, Sec. III, IV-C (Eq. 1-4)"
    units: ClassVar[Literal["groups", "colocation"]] = "colocation"

    def __init__(self, env: Environment, config: EagleConfig) -> None:
        super().__init__(env, config)
        c = config
        self.num_devices = len(env.spec.devices)
        self.num_groups = c.num_groups
        self.inputs = unit_inputs(env.graph, env.grouping, c.max_num_outputs, c.max_output_size, c.adj_embed_dim,
                                  c.input_scaling, c.unit_pooling)
        self._x = torch.from_numpy(self.inputs.x)
        emb = self.inputs.embedding_width(self.num_groups) + c.link_hidden_size

        def build():
            return (LinearGrouper(self._x.shape[1], c.grouping_hidden_size, self.num_groups),
                    nn.LSTM(c.grouping_hidden_size, c.link_hidden_size, batch_first=True),
                    EaglePlacer(emb, self.num_devices, c.hidden_size, c.attention, c.attention_size))

        self.grouper, self.link, self.placer = seeded_init(c.seed, build)
        # the policy's parameters as one module (what the distributed search shares: Learner.policy_state)
        self.policy = nn.ModuleDict({"grouper": self.grouper, "link": self.link, "placer": self.placer})
        self.params = [*self.grouper.parameters(), *self.link.parameters(), *self.placer.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=c.learning_rate)
        self.generator = torch.Generator().manual_seed(c.seed)
        self.failing_time_s = failing_time(env, c.failing_time_s)
        self.memory_load = static_memory_load(env) if c.oom_reward == "memory_scaled" else None
        self.group_prior = warm_priors(self.start, self.num_groups, self.num_devices, self.init_prob, self.placer)
        self.baseline: float | None = None
        self.sampled = 0
        self.updates = 0
        u, g = self.inputs.num_units, self.num_groups
        self.elite_times = torch.zeros(0, dtype=torch.float64)
        self.elite_groups = torch.zeros(0, u, dtype=torch.long)
        self.elite_actions = torch.zeros(0, g, dtype=torch.long)
        #: ``scope_moves`` (named option): the units' name scopes, their own generator and the incumbent
        self.scope = ScopeMoves.of_learner(env, c, np.random.default_rng(c.seed))
        #: ``restart_after`` (named option): restarts from the incumbent, from the initial parameters
        self.restarts = Restarts(c.restart_after)
        self._initial = initial_state(self.policy) if c.restart_after is not None or c.layer_descent else {}

    @property
    def batch_size(self) -> int:
        return self.config.k

    def _group_logits(self) -> torch.Tensor:
        """The grouper's logits ``[U, G]``, plus a warm start's prior (``group_prior``) when there is one."""
        logits = self.grouper(self._x)
        return logits if self.group_prior is None else logits + self.group_prior

    def _restart(self, centre: np.ndarray) -> None:
        """``restart_after``: the initial parameters, a fresh Adam, the priors on ``centre`` (``[U]`` devices;
        [`placer.hierarchical.warm_priors`][placer.hierarchical.warm_priors]) and the baseline at the next reward; the CE elites stay."""
        self.policy.load_state_dict(self._initial)
        self.optimizer = torch.optim.Adam(self.params, lr=self.config.learning_rate)
        self.group_prior = warm_priors(centre, self.num_groups, self.num_devices, self.init_prob, self.placer)
        self.baseline = None

    def _placer_inputs(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Group embeddings ``[K, G, E]`` + the link RNN over the grouper's ``W2`` columns -> ``[K, G, E + link]``."""
        link, _ = self.link(self.grouper.w2.T.unsqueeze(0))  # [1, G, link]
        return torch.cat([embeddings, link.expand(embeddings.shape[0], -1, -1)], dim=2)

    def _log_prob(self, groups: torch.Tensor, actions: torch.Tensor, embeddings: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-decision ``(log p [K, U + G], mean entropy per decision [K])`` of groupings
        (one decision per unit) and placements (one per group), with gradient."""
        glp = torch.log_softmax(self._group_logits(), dim=1)  # [U, G]
        glogp = glp[torch.arange(glp.shape[0]), groups]  # [K, U]
        gent = -(glp.exp() * glp).sum()
        plogp, pent = self.placer.score(self._placer_inputs(embeddings), actions)
        u, g = glp.shape
        return torch.cat([glogp, plogp], dim=1), (gent + pent) / (u + g)

    def sample(self, k: int) -> Samples:
        """Sample ``k`` (grouping, placement) pairs; placements are ``[k, U]`` unit devices."""
        c = self.config
        with torch.no_grad(), policy_compute(c.threads):
            glp = torch.log_softmax(self._group_logits(), dim=1)  # [U, G], the same for all k
            groups = torch.multinomial(glp.exp(), k, replacement=True, generator=self.generator).T.contiguous()
            glogp = glp.gather(1, groups.T).T  # [k, U]
            emb = group_embeddings(self.inputs, groups, self.num_groups)
            actions, plogp = self.placer.sample(self._placer_inputs(emb), self.generator)
            logp = torch.cat([glogp, plogp], dim=1)  # [k, U + G]
        placements = actions.gather(1, groups).numpy().astype(np.int64)
        rows = self.scope.incumbent_rows(k)
        if len(rows):  # scope_moves: some samples move a scope of the incumbent (scope_travel: of the walk)
            groups, actions = scope_actions(self.scope, rows, groups, actions, placements, self.num_devices)
            with torch.no_grad(), policy_compute(c.threads):  # their own log-probabilities, teacher-forced (PPO ratio 1)
                emb = group_embeddings(self.inputs, groups, self.num_groups)
                plogp, _ = self.placer.score(self._placer_inputs(emb), actions)
                logp = torch.cat([glp.gather(1, groups.T).T, plogp], dim=1)
        return Samples(placements, logp.sum(1).numpy().astype(np.float64),
                       {"groups": groups, "actions": actions, "embeddings": emb, "log_prob": logp})

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """PPO epochs on the mini-batch (Eq. 3-4), then a CE update when one is due."""
        c = self.config
        oom = np.asarray(oom, dtype=bool)
        t = measured_times(self.failing_time_s, self.memory_load, samples.placements, step_times_s, oom)
        r = -np.sqrt(t)
        before = self.scope.incumbent_time
        self.scope.keep(samples.placements, np.where(oom, np.inf, t))  # the fastest placement so far
        self.sampled += len(t)
        # Eq. 4, t indexing placements: B_t = ExpMovAvg(R_1..R_t), A_t = R_t - B_t
        b = np.empty_like(r)
        for i, ri in enumerate(r):
            self.baseline = float(ri) if self.baseline is None else (
                c.baseline_decay * self.baseline + (1 - c.baseline_decay) * float(ri))
            b[i] = self.baseline
        adv = torch.from_numpy(r - b).float()
        ex = samples.extra
        old = ex["log_prob"]
        with policy_compute(c.threads):
            for _ in range(c.ppo_epochs):
                self.optimizer.zero_grad()
                logp, ent = self._log_prob(ex["groups"], ex["actions"], ex["embeddings"])
                ratio = torch.exp(logp - old)  # [K, U + G]
                a = adv.unsqueeze(1)
                surr = torch.minimum(ratio * a, ratio.clamp(1 - c.ppo_clip, 1 + c.ppo_clip) * a)
                loss = -surr.mean() - c.entropy_coef * ent.mean()
                loss.backward()
                grad_norm = clip_and_step(self.params, self.optimizer, c.grad_clip)
            # KL(old || policy) estimated at the last epoch, before its step: one decoding of the
            # batch fewer than measuring after the step (a tenth of the update's time)
            kl = float((old - logp.detach()).mean())
            self.updates += 1
            out = {"loss": float(loss.detach()), "entropy": float(ent.detach().mean()), "kl": kl, "baseline": float(b[-1]),
                   "advantage": float(adv.mean()), "clip_fraction": float(((ratio - 1).abs() > c.ppo_clip).float().mean()),
                   "grad_norm": grad_norm}
            self._remember_elites(samples, t, oom)
            if c.ce_interval is not None and self.sampled // c.ce_interval > (self.sampled - len(t)) // c.ce_interval:
                out["ce_loss"] = self._cross_entropy_update()
        centre = self.restarts.due(self.scope, before, len(t))
        if centre is not None:  # named option restart_after
            self._restart(centre)
        return {**out, **self.restarts.diagnostics()}

    def _remember_elites(self, samples: Samples, t: np.ndarray, oom: np.ndarray) -> None:
        """Keep the ``ce_elites`` fastest placements sampled so far (those that ran), earliest first on ties."""
        if self.config.ce_interval is None or not (~oom).any():
            return
        ran = torch.from_numpy(~oom)
        times = torch.cat([self.elite_times, torch.from_numpy(t)[ran]])
        groups = torch.cat([self.elite_groups, samples.extra["groups"][ran]])
        actions = torch.cat([self.elite_actions, samples.extra["actions"][ran]])
        keep = torch.from_numpy(np.argsort(times.numpy(), kind="stable")[: self.config.ce_elites])
        self.elite_times, self.elite_groups, self.elite_actions = times[keep], groups[keep], actions[keep]

    def _cross_entropy_update(self) -> float:
        """``ce_epochs`` Adam steps on ``-mean log pi(elite)`` (module docstring); returns the last loss."""
        if len(self.elite_times) == 0:
            return float("nan")
        with torch.no_grad():
            emb = group_embeddings(self.inputs, self.elite_groups, self.num_groups)
        loss = torch.tensor(float("nan"))
        for _ in range(self.config.ce_epochs):
            self.optimizer.zero_grad()
            logp, _ = self._log_prob(self.elite_groups, self.elite_actions, emb)
            loss = -logp.sum(1).mean()
            loss.backward()
            clip_and_step(self.params, self.optimizer, self.config.grad_clip)
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        return {"grouper": self.grouper.state_dict(), "link": self.link.state_dict(),
                "placer": self.placer.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "baseline": self.baseline, "sampled": self.sampled,
                "updates": self.updates, "elite_times": self.elite_times, "elite_groups": self.elite_groups,
                "elite_actions": self.elite_actions, **self.scope.state_dict(), **self.restarts.state_dict()}

    def observe_start(self, step_time_s: float | None) -> None:
        """The start is the first incumbent of ``scope_moves`` when it ran."""
        self.scope.observe_start(self.start, step_time_s)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.grouper.load_state_dict(state["grouper"])
        self.link.load_state_dict(state["link"])
        self.placer.load_state_dict(state["placer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.sampled, self.updates = int(state["sampled"]), int(state["updates"])
        self.elite_times, self.elite_groups = state["elite_times"], state["elite_groups"]
        self.elite_actions = state["elite_actions"]
        self.scope.load_state_dict(state)
        self.restarts.load_state_dict(state)
        if self.restarts.centre is not None:  # the priors are not parameters: rebuilt on the latest restart's incumbent
            self.group_prior = warm_priors(self.restarts.centre, self.num_groups, self.num_devices, self.init_prob,
                                           self.placer)


@register
class EagleCE(Eagle):
    """``eagle_ce``: EAGLE with PPO joint with cross-entropy minimisation (Sec. III-D, IV-C)."""

    Config: ClassVar[type[LearnerConfig]] = EagleCEConfig
    paper: ClassVar[str] = "Lan, Chen, Li, EAGLE, IPDPS 2021, Sec. III-D (PPO+CE), IV-C"
