"""Hierarchical Planner: a feed-forward grouper and a seq2seq placer trained jointly (REINFORCE).

Mirhoseini, Goldie, Pham, Steiner, Le, Dean, *A Hierarchical Model for Device Placement*,
ICLR 2018; described in EAGLE (Lan, Chen, Li, IPDPS 2021) Sec. II-C
(Fig. 1) and III-A; defaults from its open-source version, TensorFlow's
``tensorflow/python/grappler/hierarchical_controller.py`` (``hierarchical_controller_hparams``).

**Units.** ``units = "colocation"``: the environment's grouping is the graph's TensorFlow
colocation units ([`compgraph.grouping.colocation_grouping`][compgraph.grouping.colocation_grouping]), so a colocation group is
never split. The grappler code samples a group for every op independently. Its grouper is
*linear* (``op_embedding @ w_grouping_ff @ w_grouping_softmax``, no bias, no activation), so
sampling every op's group and keeping only samples where a unit's ops agree gives each
unit the distribution ``P(unit -> g) ∝ prod_op p_op(g) = softmax(sum_op logits_op)_g``
= ``softmax((sum_op x_op) @ W1 @ W2)``: we sum the op embeddings of each unit once
([`unit_inputs`][placer.hierarchical.unit_inputs]) and sample one group per unit, exactly that conditional
distribution. A unit of one op gets the grappler's per-op distribution.

**Grouper** (grappler ``create_op_embeddings``, ``make_grouping_predictions``): per-op input
``[type id, output shapes (5 outputs x 5 dims), adjacency (10 neighbours as [index, +-1]
pairs)]`` (``1 + 25 + 20`` floats, raw values as the code), then ``64`` hidden units, then
``num_groups = min(256, 20 x devices)`` logits. Until update ``stop_noise_step`` (750)
Gaussian noise of std ``logits_std_noise`` (0.5) x the logits' RMS is added to the logits.

**Group embeddings** (``create_group_embeddings``; [`placer.features.eagle_group_features`][placer.features.eagle_group_features]
is the same computation for one grouping): per group ``[D, D^T, type counts, summed output
shapes]`` with ``D[a, b]`` the op-to-op edges from group a to b, each row divided by its
max + 1; ``[num_groups, 2 num_groups + T + 25]``, no gradient (numpy in the code).

**Placer** (``encode``, ``decode``): a bi-directional LSTM encoder (``hidden_size / 2`` per
direction) over the group embeddings; an LSTM decoder (``hidden_size`` 512) started from the
encoder's final states, whose input is the embedding of the previous group's device
(a learned ``<go>`` embedding first); Bahdanau attention *after* the decoder (EAGLE Fig.
4b): ``logits = [h_t, context_t] @ W``, then ``tanh(logits / temperature) x tanh_constant``
(1.0) plus the same logit noise as the grouper. Groups are decoded in index order.

**Training** (``build_controller``): ``R = sqrt(step time)`` (``reward_function="sqrt"``), an
OOM placement gets the failing signal; ``loss = mean_k (R_k - B) (log p_place + log
p_group)`` minimised with Adam (lr 0.1, x0.95 every 50 updates after update 400,
gradient global norm clipped to 1.0); ``B`` starts at the failing signal and moves as
``B <- 0.9 B + 0.1 mean(R)`` after each update; after ``stop_updating_after_steps`` (1000)
updates, the loss and the baseline use only placements that ran. One placement per update
(``num_children = 1``).

Not reproduced (each changes what is learned from what was measured, or follows no
paper): ``stop_sampling`` (after 500 updates the code
re-uses the last sampled placement instead of sampling), the code's re-sampling of the
actions inside its training step (we score the placements that were measured), and the
code's bi-LSTM alignment (its backward state at step ``i`` is the one after group
``G - 1 - i``; ours is the standard one, after group ``i``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import numpy as np
import torch
from torch import nn

from cluster.environment import Environment
from compgraph.ir import Grouping, OpGraph
from placer.configs import HierarchicalConfig
from placer.attention import FixedKeys, additive_scores
from placer.features import Restarts, ScopeMoves, initial_state, oom_values, op_features, static_memory_load
from placer.learner import Learner, LearnerConfig, Samples, register
from placer.search import serial_time

FAILING_FACTOR = 10.0  #: OOM step time = FAILING_FACTOR x T_serial (as [`placer.reinforce`][placer.reinforce])


# --------------------------------------------------------------------------------------
# inputs per colocation unit (computed once per search)
# --------------------------------------------------------------------------------------


@dataclass
class UnitInputs:
    """Per-unit inputs of a grouper and of the group embeddings; ``U`` units, ``T`` op types.

    Attributes:
        x: float32 ``[U, 1 + S + adj_embed_dim]``: the sum over the unit's ops of their grouper
            inputs (grappler ``op_embeddings``), ``S = max_outputs * max_rank``.
        x_gram: float64 ``[F, F]``: ``X_op^T X_op`` over all ops (for the RMS of the per-op logits).
        num_ops: number of ops (rows of ``X_op``).
        type_counts: float32 ``[U, T]``: the unit's ops of each type.
        shapes: float32 ``[U, S]``: the sum of the unit's ops' output shapes (unknown dims 0).
        edge_src, edge_dst: int64 ``[E]``: units of the two ends of each distinct op-to-op edge.
        type_names: the ``T`` op types (sorted).
        noise_scale: float32 ``[U]``: std of a unit's logit noise relative to one op's.
    """

    x: np.ndarray
    x_gram: np.ndarray
    num_ops: int
    type_counts: np.ndarray
    shapes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    type_names: list[str]
    noise_scale: np.ndarray

    @property
    def num_units(self) -> int:
        return int(self.x.shape[0])

    def embedding_width(self, num_groups: int) -> int:
        """Width of one group embedding: ``2 G + T + S``."""
        return 2 * num_groups + self.type_counts.shape[1] + self.shapes.shape[1]


INPUT_SCALINGS = ("raw", "column_max")  #: grouper input scalings ([`unit_inputs`][placer.hierarchical.unit_inputs])
UNIT_POOLINGS = ("sum", "mean")  #: how a unit's op inputs are pooled ([`unit_inputs`][placer.hierarchical.unit_inputs])


def unit_inputs(graph: OpGraph, grouping: Grouping, max_outputs: int = 5, max_rank: int = 5,
                adj_embed_dim: int = 20, scaling: str = "raw", pooling: str = "sum") -> UnitInputs:
    """[`UnitInputs`][placer.hierarchical.UnitInputs] of ``grouping``'s units (grappler ``create_op_embeddings``).

    Per op: ``[type index, output shapes, adjacency]`` with the shapes as
    [`placer.features.op_features`][placer.features.op_features] (unknown dims -1, padding 0; the code pads with -1)
    and the adjacency the first ``adj_embed_dim / 2`` neighbours (inputs, then outputs) as
    ``[op index, -1 input / +1 output]`` pairs, zero-padded.

    ``scaling="raw"``: the values as they are (the grappler code); ``"column_max"``: each
    column divided by its largest absolute value over the ops (a named option). ``pooling="sum"``:
    a unit's input is the sum of its ops' (with a linear grouper: the product of the ops'
    group distributions, renormalised); ``"mean"``: their mean (the geometric mean of the
    ops' distributions, a named option that keeps big units' logits on the ops' scale).

    Raises:
        ValueError: ``grouping`` does not cover ``graph``'s ops; ``adj_embed_dim`` not even and
            >= 2; an unknown ``scaling`` or ``pooling``.
    """
    if scaling not in INPUT_SCALINGS:
        raise ValueError(f"scaling: unknown {scaling!r}; valid: {', '.join(INPUT_SCALINGS)}")
    if pooling not in UNIT_POOLINGS:
        raise ValueError(f"pooling: unknown {pooling!r}; valid: {', '.join(UNIT_POOLINGS)}")
    og = np.asarray(grouping.op_group, dtype=np.int64)
    if og.shape != (graph.num_ops,):
        raise ValueError(f"grouping.op_group has shape {og.shape}; graph {graph.name!r} has {graph.num_ops} ops")
    if adj_embed_dim < 2 or adj_embed_dim % 2:
        raise ValueError(f"adj_embed_dim={adj_embed_dim!r}: must be an even integer >= 2")
    f = op_features(graph, max_outputs=max_outputs, max_rank=max_rank, max_neighbours=adj_embed_dim // 2)
    n, u = graph.num_ops, grouping.num_groups
    pairs = np.stack([np.where(f.adjacency > 0, f.adjacency - 1, 0), f.adjacency_direction], axis=2)
    x_op = np.concatenate([f.type_ids[:, None].astype(np.float64), f.output_shapes.astype(np.float64),
                           pairs.reshape(n, adj_embed_dim).astype(np.float64)], axis=1)
    if scaling == "column_max":
        x_op = x_op / np.maximum(np.abs(x_op).max(axis=0), 1e-12)
    x = np.zeros((u, x_op.shape[1]), dtype=np.float64)
    np.add.at(x, og, x_op)
    sizes = np.bincount(og, minlength=u).astype(np.float64)
    if pooling == "mean":
        x /= np.maximum(sizes, 1.0)[:, None]
    t = len(f.type_names)
    type_counts = np.bincount(og * t + f.type_ids, minlength=u * t).reshape(u, t).astype(np.float32)
    shapes = np.zeros((u, f.output_shapes.shape[1]), dtype=np.float32)
    np.add.at(shapes, og, np.maximum(f.output_shapes, 0.0))
    pairs_e = np.array(sorted({(e.src, e.dst) for e in graph.edges}), dtype=np.int64).reshape(-1, 2)
    # a unit's logit noise: the sum (mean) of its ops' independent noises, std x sqrt(n) (/ sqrt(n))
    noise_scale = np.sqrt(sizes) if pooling == "sum" else 1.0 / np.sqrt(np.maximum(sizes, 1.0))
    return UnitInputs(x.astype(np.float32), x_op.T @ x_op, n, type_counts, shapes,
                      og[pairs_e[:, 0]], og[pairs_e[:, 1]], f.type_names, noise_scale.astype(np.float32))


def group_embeddings(inputs: UnitInputs, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Group embeddings of ``K`` groupings (grappler ``create_group_embeddings``), no gradient.

    Args:
        inputs: the units' inputs.
        groups: int64 ``[K, U]``: the group of each unit in each grouping.
        num_groups: ``G``.
    Returns:
        float32 ``[K, G, 2G + T + S]``: ``[D, D^T, type counts, shapes]`` per group, each row
        divided by (its max + 1), ``D[a, b]`` = op-to-op edges from group ``a`` to ``b``.
    """
    k, u = groups.shape
    g = num_groups
    off = (torch.arange(k).unsqueeze(1) * g)  # [K, 1]
    src = torch.from_numpy(inputs.edge_src)
    dst = torch.from_numpy(inputs.edge_dst)
    ga, gb = groups[:, src], groups[:, dst]  # [K, E]
    dag = torch.bincount(((off * g) + ga * g + gb).reshape(-1), minlength=k * g * g).reshape(k, g, g).float()
    flat = (groups + off).reshape(-1)
    tc = torch.from_numpy(inputs.type_counts)
    sh = torch.from_numpy(inputs.shapes)
    types = torch.zeros(k * g, tc.shape[1]).index_add_(0, flat, tc.repeat(k, 1)).reshape(k, g, -1)
    shapes = torch.zeros(k * g, sh.shape[1]).index_add_(0, flat, sh.repeat(k, 1)).reshape(k, g, -1)
    emb = torch.cat([dag, dag.transpose(1, 2), types, shapes], dim=2)
    return emb / (emb.amax(dim=2, keepdim=True) + 1.0)


class LinearGrouper(nn.Module):
    """The grappler grouper: ``logits = x @ W1 @ W2`` (``[F, hidden]``, ``[hidden, G]``, Glorot-uniform, no bias).

    Args:
        in_size: ``F``; hidden_size: 64; num_groups: ``G``.
    """

    def __init__(self, in_size: int, hidden_size: int, num_groups: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(nn.init.xavier_uniform_(torch.empty(in_size, hidden_size)))
        self.w2 = nn.Parameter(nn.init.xavier_uniform_(torch.empty(hidden_size, num_groups)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., F]`` -> logits ``[..., G]``."""
        return (x @ self.w1) @ self.w2

    def op_logit_rms(self, x_gram: torch.Tensor, num_ops: int) -> torch.Tensor:
        """RMS of the per-op logits ``||X_op W1 W2||_F / sqrt(N G)`` from ``X_op^T X_op`` (no per-op pass)."""
        w = (self.w1 @ self.w2).double()
        sq = (w * (x_gram @ w)).sum().clamp_min(0.0)
        return torch.sqrt(sq / (num_ops * w.shape[1])).float()


class StepPrior(nn.Module):
    """A placer whose step ``i`` logits get a constant log-prior ``prior[i]`` (``[G, D]``): a warm
    start ([`placer.warm`][placer.warm]; in no paper). ``None`` (the default): the paper's placer. A
    non-persistent buffer: it moves with the module, and is not in the state dict (rebuilt from
    the config)."""

    prior: torch.Tensor | None
    d: int

    def _init_prior(self) -> None:
        self.register_buffer("prior", None, persistent=False)

    def set_prior(self, log_prior) -> None:
        """Set the prior, float ``[num_groups, num_devices]`` (e.g. [`placer.warm.two_level_priors`][placer.warm.two_level_priors]'s second).

        Raises:
            ValueError: not ``[G, num_devices]``.
        """
        prior = torch.as_tensor(log_prior, dtype=torch.float32)
        if prior.dim() != 2 or prior.shape[1] != self.d:
            raise ValueError(f"prior: shape {list(prior.shape)}, expected [groups, {self.d}] (groups, devices)")
        self.prior = prior


def sample_categorical(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of ``logits [..., C]`` (Gumbel-max): int64 ``[...]``."""
    u = torch.rand(logits.shape, generator=generator).clamp_(1e-20, 1.0)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


def clip_and_step(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, grad_clip: float | None) -> float:
    """Clip the gradients' global norm to ``grad_clip`` (``None``: no clipping), step; returns the norm before clipping."""
    if grad_clip is None:
        norm = torch.sqrt(cast(torch.Tensor, sum((p.grad.detach() ** 2).sum() for p in params if p.grad is not None)))
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    return float(norm)


def warm_priors(start: np.ndarray | None, num_groups: int, num_devices: int, prob: float,
                placer: StepPrior) -> torch.Tensor | None:
    """A grouper + placer learner's warm start ([`placer.warm`][placer.warm]; in no paper): sets the placer's
    step prior and returns the grouper's (float32 ``[U, G]``, added to its logits), from the unit
    placement ``start`` ([`placer.warm.two_level_priors`][placer.warm.two_level_priors]); ``None`` and nothing set without one."""
    if start is None:
        return None
    from placer.warm import two_level_priors

    grouper_prior, placer_prior = two_level_priors(start, num_groups, num_devices, prob)
    placer.set_prior(placer_prior)
    return torch.from_numpy(grouper_prior).float()


def scope_actions(scope: ScopeMoves, rows, groups: torch.Tensor, actions: torch.Tensor, placements: np.ndarray,
                  num_devices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A grouper + placer batch (``groups [K, U]``, ``actions [K, G]``, ``placements [K, U]``) with
    ``rows`` replaced by scope or unit moves of the incumbent (named options ``scope_moves``, ``unit_moves``; of the walk with ``scope_travel``), written as the
    two levels' actions: unit ``u`` to group ``P[u]``, group ``d`` to device ``d`` (as a warm start's
    priors, [`placer.warm.two_level_priors`][placer.warm.two_level_priors]). ``placements`` is changed in place; returns the new
    ``(groups, actions)``, for the learner to score teacher-forced."""
    groups, actions = groups.clone(), actions.clone()
    for i in rows:
        p = scope.moved()
        groups[i] = torch.from_numpy(p)
        actions[i, :num_devices] = torch.arange(num_devices)
        placements[i] = p
    return groups, actions


def failing_time(env: Environment, failing_time_s: float | None) -> float:
    """The step time (seconds) given to an OOM placement: ``failing_time_s`` or ``10 x T_serial``."""
    return float(failing_time_s) if failing_time_s is not None else FAILING_FACTOR * serial_time(env)


def measured_times(failing_time_s: float, memory_load: Callable[[np.ndarray], np.ndarray] | None,
                   placements: np.ndarray, step_times_s: np.ndarray, oom: np.ndarray) -> np.ndarray:
    """The step time each of ``K`` placements is scored by (seconds, float64 ``[K]``): its
    measured time; for an OOM placement (``oom`` bool ``[K]``) ``failing_time_s``, times
    ``max(1, static memory load)`` of its row of ``placements`` (int ``[K, units]``) when
    ``memory_load`` is given (``oom_reward="memory_scaled"``,
    [`placer.features.oom_values`][placer.features.oom_values]); a time that is NaN (no
    measurement) gets ``failing_time_s``."""
    oom = np.asarray(oom, dtype=bool)
    fail = oom_values(failing_time_s, memory_load, placements, oom)
    t = np.nan_to_num(np.asarray(step_times_s, dtype=np.float64), nan=failing_time_s)
    return np.where(oom, fail, t)


@contextmanager
def policy_compute(threads: int):
    """Run the policy's small tensor ops on ``threads`` intra-op threads (restored after). On 2
    loaded cores, 1 thread ran the search loop ~15x faster in CPU time than torch's default
    (2 threads). oneDNN's fused LSTM stays on: on one thread it halves the Hierarchical
    Planner's update on nmt paper (202 -> 105 ms a placement) against autograd's per-step LSTM."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seeded_init(seed: int, build):
    """Run ``build()`` with torch's global RNG seeded by ``seed``, restoring it after (so
    parameter initialisation depends on the seed only)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


# --------------------------------------------------------------------------------------
# the Hierarchical Planner's placer (attention after the decoder, EAGLE Fig. 4b)
# --------------------------------------------------------------------------------------


class HierarchicalPlacer(StepPrior):
    """The grappler seq2seq placer over ``G`` group embeddings (module docstring).

    Args:
        in_size: width of a group embedding; num_devices: ``D``; hidden_size: 512 (even);
        forget_bias: initial forget-gate bias (1.0); temperature, tanh_constant: logit transforms;
        attention_size: ``A``, the width of the attention memory (``encoder outputs @ attn_w1``,
            also the context's width; ``None``: ``hidden_size`` as the code).
    """

    def __init__(self, in_size: int, num_devices: int, hidden_size: int = 512, forget_bias: float = 1.0,
                 temperature: float = 1.0, tanh_constant: float = 1.0, attention_size: int | None = None) -> None:
        super().__init__()
        h = hidden_size
        a = h if attention_size is None else attention_size
        self.h, self.d = h, num_devices
        self.temperature, self.tanh_constant = temperature, tanh_constant
        self.encoder = nn.LSTM(in_size, h // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTM(h, h, batch_first=True)
        self.device_embeddings = nn.Parameter(torch.empty(num_devices, h))
        self.go = nn.Parameter(torch.empty(1, h))
        self.attn_w1 = nn.Parameter(torch.empty(h, a))
        self.attn_w2 = nn.Parameter(torch.empty(h, a))
        self.attn_v = nn.Parameter(torch.empty(a, 1))
        self.device_softmax = nn.Parameter(torch.empty(h + a, num_devices))  # [h_t, context_t] -> logits
        self._init_prior()  # a warm start's prior on the (transformed) logits: StepPrior
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            else:
                nn.init.xavier_uniform_(p)
        for lstm in (self.encoder, self.decoder):
            for name, p in lstm.named_parameters():
                if name.startswith("bias_ih"):
                    n = p.shape[0] // 4
                    p.data[n : 2 * n] = forget_bias  # PyTorch gate order i, f, g, o

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x [K, G, E]`` -> attention memory ``[K, G, H]`` (encoder outputs @ attn_w1) and the decoder's initial state."""
        out, (hn, cn) = self.encoder(x)
        k = x.shape[0]
        h0 = hn.transpose(0, 1).reshape(1, k, self.h)
        c0 = cn.transpose(0, 1).reshape(1, k, self.h)
        return out @ self.attn_w1, (h0.contiguous(), c0.contiguous())

    def _logits(self, h: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        """Decoder outputs ``h [K, L, H]`` and memory ``[K, G, H]`` -> transformed logits ``[K, L, D]``."""
        scores = additive_scores(mem, h @ self.attn_w2, self.attn_v[:, 0])  # [K, L, G]
        context = torch.softmax(scores, dim=2) @ mem  # [K, L, H]
        logits = torch.cat([h, context], dim=2) @ self.device_softmax / self.temperature
        if self.tanh_constant > 0:
            logits = torch.tanh(logits) * self.tanh_constant
        if self.prior is not None:
            logits = logits + self.prior[: logits.shape[1]]
        return logits

    @torch.no_grad()
    def sample(self, x: torch.Tensor, generator: torch.Generator,
               noise_std: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample a device per group: ``(actions [K, G] int64, noise [K, G, D], log p [K])``
        (noise 0 when ``noise_std`` is 0; log p summed over the ``G`` decisions)."""
        mem, (h0, c0) = self.encode(x)
        k, g, _ = mem.shape
        h = self.h
        dec: Any = self.decoder  # nn.LSTM's weights: attributes torch's type stubs do not declare
        # the decoder's input is a device embedding: its input gates are a [D + 1, 4H] table
        emb_gates = torch.cat([self.device_embeddings, self.go]) @ dec.weight_ih_l0.T + dec.bias_ih_l0 + dec.bias_hh_l0
        w_h = torch.cat([dec.weight_hh_l0.T, self.attn_w2], dim=1)  # [H, 5H]: recurrence and attention query
        w_out_h, w_out_c = self.device_softmax[:h], self.device_softmax[h:]
        attend = FixedKeys(mem, self.attn_v[:, 0])
        hx, cx = h0[0], c0[0]
        rec = hx @ dec.weight_hh_l0.T
        prev = torch.full((k,), self.d, dtype=torch.long)
        actions, noises = [], []
        logp = torch.zeros(k)
        for i in range(g):
            ig, fg, gg, og = (emb_gates[prev] + rec).chunk(4, dim=1)
            cx = torch.sigmoid(fg) * cx + torch.sigmoid(ig) * torch.tanh(gg)
            hx = torch.sigmoid(og) * torch.tanh(cx)
            proj = hx @ w_h
            rec, query = proj[:, : 4 * h], proj[:, 4 * h :]
            scores = attend.scores(query.unsqueeze(1))[:, 0]  # [K, G]
            context = (torch.softmax(scores, dim=1).unsqueeze(1) @ mem).squeeze(1)
            logits = (hx @ w_out_h + context @ w_out_c) / self.temperature
            if self.tanh_constant > 0:
                logits = torch.tanh(logits) * self.tanh_constant
            noise = _noise(logits, noise_std, generator)  # scaled by the network's logits, not the prior's
            if self.prior is not None:
                logits = logits + self.prior[i]
            a = sample_categorical(logits + noise, generator)
            logp += torch.log_softmax(logits + noise, dim=1).gather(1, a.unsqueeze(1)).squeeze(1)
            actions.append(a)
            noises.append(noise)
            prev = a
        return torch.stack(actions, 1), torch.stack(noises, 1), logp

    def score(self, x: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced log-probabilities: ``(log p [K], entropy [K])`` summed over the ``G`` decisions."""
        mem, state = self.encode(x)
        k = x.shape[0]
        inp = torch.cat([self.go.expand(k, 1, self.h), self.device_embeddings[actions[:, :-1]]], dim=1)
        out, _ = self.decoder(inp, state)
        logp = torch.log_softmax(self._logits(out, mem) + noise, dim=2)
        chosen = logp.gather(2, actions.unsqueeze(2)).squeeze(2).sum(1)
        return chosen, -(logp.exp() * logp).sum(dim=(1, 2))


def _noise(logits: torch.Tensor, std_factor: float, generator: torch.Generator) -> torch.Tensor:
    """Grappler logit noise: normal, std = ``std_factor`` x RMS of ``logits``; zeros if ``std_factor`` is 0."""
    if std_factor <= 0:
        return torch.zeros_like(logits)
    rms = torch.sqrt((logits.float() ** 2).mean())
    return torch.randn(logits.shape, generator=generator) * (std_factor * rms)


# --------------------------------------------------------------------------------------
# the learner
# --------------------------------------------------------------------------------------


@register
class HierarchicalPlanner(Learner):
    """The Hierarchical Planner (module docstring): grouper + placer, joint REINFORCE.

    Placements are ``[K, U]`` device indices of ``env.grouping``'s colocation units.
    ``Samples.extra``: ``groups`` int64 ``[K, U]`` (each unit's group), ``actions`` int64
    ``[K, G]`` (each group's device), ``group_noise`` ``[K, U, G]`` and ``place_noise``
    ``[K, G, D]`` (the logit noise the samples were drawn with, re-used to score them).
    A warm start (``init`` ``best_baseline`` or ``placement``; in no paper, [`placer.warm`][placer.warm])
    adds constant priors to the grouper's and the placer's logits ([`warm_priors`][placer.hierarchical.warm_priors]).
    """

    Config: ClassVar[type[LearnerConfig]] = HierarchicalConfig
    config: HierarchicalConfig
    paper: ClassVar[str] = ("Mirhoseini et al., A Hierarchical Model for Device Placement, ICLR 2018 "
                            "(EAGLE Sec. II-C, III-A; TensorFlow grappler/hierarchical_controller.py)")
    units: ClassVar[Literal["groups", "colocation"]] = "colocation"

    def __init__(self, env: Environment, config: HierarchicalConfig) -> None:
        super().__init__(env, config)
        c = config
        self.num_devices = len(env.spec.devices)
        self.num_groups = c.num_groups if c.num_groups is not None else min(256, 20 * self.num_devices)
        self.inputs = unit_inputs(env.graph, env.grouping, c.max_num_outputs, c.max_output_size, c.adj_embed_dim,
                                  c.input_scaling, c.unit_pooling)
        self._x = torch.from_numpy(self.inputs.x)
        self._gram = torch.from_numpy(self.inputs.x_gram)
        emb = self.inputs.embedding_width(self.num_groups)

        def build():
            return (LinearGrouper(self._x.shape[1], c.grouping_hidden_size, self.num_groups),
                    HierarchicalPlacer(emb, self.num_devices, c.hidden_size, c.forget_bias_init,
                                       c.temperature, c.tanh_constant, c.attention_size))

        self.grouper, self.placer = seeded_init(c.seed, build)
        # the policy's parameters as one module (what the distributed search shares: Learner.policy_state)
        self.policy = nn.ModuleDict({"grouper": self.grouper, "placer": self.placer})
        self.params = list(self.grouper.parameters()) + list(self.placer.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=c.learning_rate)
        self.generator = torch.Generator().manual_seed(c.seed)
        self.failing_time_s = failing_time(env, c.failing_time_s)
        self.failing_signal = math.sqrt(self.failing_time_s)
        self.memory_load = static_memory_load(env) if c.oom_reward == "memory_scaled" else None
        # start_with_failing_signal=True; a warm start (placer.warm) starts B at its first reward instead: the
        # failing signal's exploration would undo the start
        self.baseline: float | None = self.failing_signal if self.start is None else None
        self.group_prior = warm_priors(self.start, self.num_groups, self.num_devices, self.init_prob, self.placer)
        self.updates = 0
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
        """``restart_after``: the initial parameters, a fresh Adam, the priors on ``centre`` (``[U]``
        devices; [`warm_priors`][placer.hierarchical.warm_priors]) and the baseline at the next batch's reward; the schedules
        (learning-rate decay, noise, ``stop_updating_after_steps``) keep counting the search's updates."""
        self.policy.load_state_dict(self._initial)
        self.optimizer = torch.optim.Adam(self.params, lr=self.config.learning_rate)
        self.group_prior = warm_priors(centre, self.num_groups, self.num_devices, self.init_prob, self.placer)
        self.baseline = None

    def _noise_on(self) -> bool:
        return self.updates <= self.config.stop_noise_step  # the code: noise while global_step <= stop_noise_step

    def learning_rate(self) -> float:
        """Adam's step size at the current update (staircase decay after ``start_decay_step``)."""
        c = self.config
        if self.updates < c.start_decay_step:
            return c.learning_rate
        return c.learning_rate * c.lr_dec ** ((self.updates - c.start_decay_step) // c.decay_steps)

    def sample(self, k: int) -> Samples:
        """Sample ``k`` (grouping, placement) pairs; placements are ``[k, U]`` unit devices."""
        c = self.config
        noise_on = self._noise_on()
        with torch.no_grad(), policy_compute(c.threads):
            logits = self._group_logits().expand(k, -1, -1)  # [k, U, G]
            if noise_on and c.logits_std_noise > 0:
                # the sum over a unit's n ops of independent per-op noises: std x sqrt(n)
                std = c.logits_std_noise * self.grouper.op_logit_rms(self._gram, self.inputs.num_ops)
                n = torch.from_numpy(self.inputs.noise_scale).view(1, -1, 1)
                gnoise = torch.randn(logits.shape, generator=self.generator) * (std * n)
            else:
                gnoise = torch.zeros_like(logits)
            groups = sample_categorical(logits + gnoise, self.generator)  # [k, U]
            x = group_embeddings(self.inputs, groups, self.num_groups)
            actions, pnoise, plogp = self.placer.sample(x, self.generator, c.logits_std_noise if noise_on else 0.0)
            glogp = torch.log_softmax(logits + gnoise, dim=2).gather(2, groups.unsqueeze(2)).squeeze(2).sum(1)
        placements = actions.gather(1, groups).numpy().astype(np.int64)
        rows = self.scope.incumbent_rows(k)
        if len(rows):  # scope_moves: some samples move a scope of the incumbent (scope_travel: of the walk)
            groups, actions = scope_actions(self.scope, rows, groups, actions, placements, self.num_devices)
            with torch.no_grad(), policy_compute(c.threads):  # their own log-probabilities, teacher-forced
                x = group_embeddings(self.inputs, groups, self.num_groups)
                plogp, _ = self.placer.score(x, actions, pnoise)
                glogp = torch.log_softmax(logits + gnoise, dim=2).gather(2, groups.unsqueeze(2)).squeeze(2).sum(1)
        return Samples(placements, (glogp + plogp).numpy().astype(np.float64),
                       {"groups": groups, "actions": actions, "group_noise": gnoise, "place_noise": pnoise,
                        "embeddings": x})

    def update(self, samples: Samples, step_times_s: np.ndarray, oom: np.ndarray) -> dict[str, float]:
        """One REINFORCE step on the grouper and placer together (module docstring)."""
        c = self.config
        oom = np.asarray(oom, dtype=bool)
        t = measured_times(self.failing_time_s, self.memory_load, samples.placements, step_times_s, oom)
        before = self.scope.incumbent_time
        self.scope.keep(samples.placements, np.where(oom, np.inf, t))  # the fastest placement so far
        r = torch.from_numpy(np.sqrt(t)).float()
        ran = torch.from_numpy(~oom)
        late = self.updates >= c.stop_updating_after_steps
        mask = ran.float() if late else torch.ones(len(r))
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        ex = samples.extra
        with policy_compute(c.threads):
            out = self._update(ex, r, ran, mask, late)
        centre = self.restarts.due(self.scope, before, len(t))
        if centre is not None:  # named option restart_after
            self._restart(centre)
        return {**out, **self.restarts.diagnostics()}

    def _update(self, ex: dict, r: torch.Tensor, ran: torch.Tensor, mask: torch.Tensor, late: bool) -> dict[str, float]:
        c = self.config
        self.optimizer.zero_grad()
        logits = self._group_logits().expand(len(r), -1, -1) + ex["group_noise"]
        glogp_all = torch.log_softmax(logits, dim=2)
        glogp = glogp_all.gather(2, ex["groups"].unsqueeze(2)).squeeze(2).sum(1)
        # softmax, not glogp_all.exp(): the raw inputs' logits reach the thousands, and exp of
        # log-probabilities far below -87 takes torch's slow path (6 ms against 1 ms here)
        gent = -(torch.softmax(logits, dim=2) * glogp_all).sum(dim=(1, 2))
        plogp, pent = self.placer.score(ex["embeddings"], ex["actions"], ex["place_noise"])
        if self.baseline is None:  # a warm start: B starts at the first batch's mean reward (of those that ran)
            self.baseline = float(r[ran].mean()) if bool(ran.any()) else float(r.mean())
        adv = r - self.baseline
        loss = (adv * (glogp + plogp) * mask).sum() / mask.sum().clamp_min(1.0)
        grad_norm = float("nan")
        if mask.sum() > 0:
            loss.backward()
            grad_norm = clip_and_step(self.params, self.optimizer, c.grad_bound)
        # baseline update after the step (the code runs train_op, then baseline_update)
        if not late:
            self.baseline = c.bl_dec * self.baseline + (1 - c.bl_dec) * float(r.mean())
        elif bool(ran.any()):
            self.baseline = c.bl_dec * self.baseline + (1 - c.bl_dec) * float(r[ran].mean())
        self.updates += 1
        gent, pent = gent.detach(), pent.detach()
        return {"loss": float(loss.detach()), "entropy": float((gent + pent).mean()),
                "grouper_entropy": float(gent.mean()), "placer_entropy": float(pent.mean()), "baseline": float(self.baseline),
                "advantage": float(adv.mean()), "grad_norm": grad_norm, "learning_rate": self.learning_rate()}

    def observe_start(self, step_time_s: float | None) -> None:
        """The start is the first incumbent of ``scope_moves`` when it ran."""
        self.scope.observe_start(self.start, step_time_s)

    def state_dict(self) -> dict[str, Any]:
        return {"grouper": self.grouper.state_dict(), "placer": self.placer.state_dict(),
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "baseline": None if self.baseline is None else float(self.baseline), "updates": int(self.updates),
                **self.scope.state_dict(), **self.restarts.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.grouper.load_state_dict(state["grouper"])
        self.placer.load_state_dict(state["placer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.updates = int(state["updates"])
        self.scope.load_state_dict(state)
        self.restarts.load_state_dict(state)
        if self.restarts.centre is not None:  # the priors are not parameters: rebuilt on the latest restart's incumbent
            self.group_prior = warm_priors(self.restarts.centre, self.num_groups, self.num_devices, self.init_prob,
                                           self.placer)
