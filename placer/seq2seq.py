"""The 2017 placer: an attentional sequence-to-sequence policy over co-location groups.

Mirhoseini et al. 2017, Sec. 3.2 (Fig. 2): an LSTM encoder reads the groups' embeddings
(tunable type embedding, output shapes, adjacency: [`placer.features`][placer.features]); an LSTM
decoder with content-based attention (Bahdanau et al. 2015) runs one step per group and
outputs that group's device; each device has a tunable embedding that is fed to the next
decoder step. Our decoder's input at step ``i`` is the previous device's embedding
concatenated with the encoder's output at step ``i`` ("the decoder outputs the device for
the operation at the same encoder time step").

The paper gives no layer sizes; ``hidden_size=256`` and 32-dim type and device embeddings
are our defaults.

Speed (same distribution, same gradients; ``tests/test_search.py`` checks both against a
plain step-by-step implementation):

- Sampling runs the decoder step by step *without* autograd; the sampled placements are then
  scored in one teacher-forced pass *with* autograd: the decoder's input at step ``i``
  (previous device, encoder output ``i``) is known once the placement is, and the attention
  comes after the decoder LSTM, so the whole decoder is one ``nn.LSTM`` call over the
  sequence and the attention and output layers are batched over all steps. The per-step
  Python and autograd work of the old single pass (about 60% of its time on nmt paper) is gone.
- The additive attention scores ``v . tanh(W_e enc_j + W_d dec_i)``
  ([`placer.attention.additive_scores`][placer.attention.additive_scores]) use ``tanh(x) = 2 sigmoid(2x) - 1`` (torch's CPU
  sigmoid is ~6x faster than its tanh), keep only their inputs and recompute the
  ``[rows, G, A]`` term in blocks in the backward pass (a whole ``[K, G, G, A]`` tensor would
  be 2 GB on nmt paper).

Named option (not in the paper, off by default): ``attention_size`` ``A`` (default: ``hidden_size``),
the width of the attention's hidden layer (Bahdanau et al.'s ``n'``); the attention costs
``O(K G^2 A)`` per batch, the rest ``O(K G H^2)``, so a smaller ``A`` is what makes 500-group
graphs fast.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from placer.attention import FixedKeys, additive_scores
from placer.features import GroupFeatures


class Seq2SeqPlacer(nn.Module):
    """Policy ``pi(P | G; theta)`` over placements of ``num_groups`` groups on ``num_devices`` devices.

    Args:
        features: the graph's group features (fixed for one search).
        num_devices: D, the number of devices.
        hidden_size: LSTM width H.
        embedding_size: width of the type and device embeddings.
        attention_size: width A of the attention's hidden layer (``None``: ``hidden_size``; a
            named speed option, module docstring).
    """

    # buffers (register_buffer), declared for the type checker
    type_counts: torch.Tensor
    shapes: torch.Tensor
    adjacency: torch.Tensor
    prior: torch.Tensor | None

    def __init__(
        self, features: GroupFeatures, num_devices: int, hidden_size: int = 256, embedding_size: int = 32,
        attention_size: int | None = None,
    ) -> None:
        super().__init__()
        self.num_devices = num_devices
        a = hidden_size if attention_size is None else attention_size
        self.register_buffer("type_counts", torch.from_numpy(features.type_counts))
        self.register_buffer("shapes", torch.from_numpy(features.output_shapes))
        self.register_buffer("adjacency", torch.from_numpy(features.adjacency))
        num_types = features.type_counts.shape[1]
        in_size = embedding_size + features.output_shapes.shape[1] + features.adjacency.shape[1]
        self.type_embedding = nn.Linear(num_types, embedding_size, bias=False)
        self.encoder = nn.LSTM(in_size, hidden_size, batch_first=True)
        self.device_embedding = nn.Embedding(num_devices + 1, embedding_size)  # last row: <start>
        # one LSTM layer; stepped one group at a time when sampling, run over the sequence when scoring
        self.decoder = nn.LSTM(embedding_size + hidden_size, hidden_size, batch_first=True)
        self.attn_enc = nn.Linear(hidden_size, a, bias=False)
        self.attn_dec = nn.Linear(hidden_size, a)
        self.attn_v = nn.Linear(a, 1, bias=False)
        self.out = nn.Linear(2 * hidden_size, num_devices)
        # a warm start's constant log-prior on each step's logits (set_prior); None: the paper's policy
        self.register_buffer("prior", None, persistent=False)

    def set_prior(self, log_prior) -> None:
        """Add the constant ``log_prior`` (float ``[num_groups, num_devices]``, e.g.
        [`placer.warm.start_log_probs`][placer.warm.start_log_probs]) to the logits of group ``i``'s step, in sampling and
        scoring alike: a warm start ([`placer.warm`][placer.warm]; in no paper). Not a parameter (not
        learned, not in the state dict: rebuilt from the config).

        Raises:
            ValueError: not ``[num_groups, num_devices]``.
        """
        prior = torch.as_tensor(log_prior, dtype=torch.float32, device=self.out.weight.device)
        want = (self.type_counts.shape[0], self.num_devices)
        if tuple(prior.shape) != want:
            raise ValueError(f"prior: shape {list(prior.shape)}, expected {list(want)} (groups, devices)")
        self.prior = prior

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints written when the decoder was an nn.LSTMCell ("decoder.weight_ih" ...)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            old = f"{prefix}decoder.{name}"
            if old in state_dict:
                state_dict[f"{old}_l0"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def encode(self) -> torch.Tensor:
        """Encoder outputs, ``[num_groups, hidden]``."""
        x = torch.cat([self.type_embedding(self.type_counts), self.shapes, self.adjacency], dim=1)
        enc, _ = self.encoder(x.unsqueeze(0))
        return enc.squeeze(0)

    def forward(
        self, batch: int, generator: torch.Generator | None = None, actions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``batch`` placements (or score given ``actions``).

        Args:
            batch: K, the number of placements.
            generator: the random generator for sampling (seeded by the caller).
            actions: optional ``[K, num_groups]`` int64 placements to score instead of sampling.
        Returns:
            ``(placements [K, num_groups] int64, log_prob [K], entropy [K])``: the
            placements, the sum over groups of each one's log-probability, and of the
            per-step entropies (with autograd when it is enabled).
        """
        scores = None
        enc = self.encode()  # once for both passes: the parameters do not change between them
        if actions is None:
            actions, scores = self.sample(batch, generator, enc.detach())
        logp, ent = self.score(actions, scores, enc)
        return actions, logp.sum(1), ent.sum(1)

    @torch.no_grad()
    def sample(self, batch: int, generator: torch.Generator | None = None,
               enc: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch`` placements, the decoder stepped one group at a time, no autograd; ``enc``: the encoder's
        outputs ``[G, H]`` ([`encode`][placer.seq2seq.Seq2SeqPlacer.encode]) when the caller has them.

        Returns:
            ``(placements [K, G] int64, attention scores [K, G, G])``: the scores each step
            attended with, which [`score`][placer.seq2seq.Seq2SeqPlacer.score] re-uses as its forward values.
        """
        enc = self.encode() if enc is None else enc  # [G, H]
        g, h = enc.shape
        attend = FixedKeys(self.attn_enc(enc).unsqueeze(0), self.attn_v.weight[0])  # keys [1, G, A]
        dec: Any = self.decoder  # nn.LSTM's weights: attributes torch's type stubs do not declare
        w_x, w_h = dec.weight_ih_l0, dec.weight_hh_l0
        bias = dec.bias_ih_l0 + dec.bias_hh_l0
        emb = self.device_embedding.weight @ w_x[:, : self.device_embedding.embedding_dim].T  # [D + 1, 4H]
        enc_x = torch.addmm(bias, enc, w_x[:, self.device_embedding.embedding_dim :].T)  # [G, 4H]
        hx, cx = enc.new_zeros(batch, h), enc.new_zeros(batch, h)
        prev = torch.full((batch,), self.num_devices, dtype=torch.long, device=enc.device)
        chosen = torch.empty(batch, g, dtype=torch.long, device=enc.device)
        all_scores = enc.new_empty(batch, g, g)
        for i in range(g):
            gates = torch.addmm(emb[prev] + enc_x[i], hx, w_h.T)
            ig, fg, gg, og = gates.chunk(4, dim=1)
            cx = torch.sigmoid(fg) * cx + torch.sigmoid(ig) * torch.tanh(gg)
            hx = torch.sigmoid(og) * torch.tanh(cx)
            scores = attend.scores(self.attn_dec(hx).unsqueeze(0))[0]  # [K, G]
            all_scores[:, i] = scores
            context = torch.softmax(scores, dim=1) @ enc  # [K, H]
            logits = self.out(torch.cat([hx, context], dim=1))
            if self.prior is not None:
                logits = logits + self.prior[i]
            prev = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
            chosen[:, i] = prev
        return chosen, all_scores

    def score(self, actions: torch.Tensor, scores: torch.Tensor | None = None,
              enc: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced ``(log p [K, G], entropy [K, G])`` per decision of ``actions [K, G]``.

        ``scores``: the attention scores ``[K, G, G]`` [`sample`][placer.seq2seq.Seq2SeqPlacer.sample] drew ``actions`` with, used
        as the forward values of the attention (computing them again is a third of the
        attention's cost); ``None``: computed here. ``enc``: the encoder's outputs ``[G, H]`` when the caller
        has them (with autograd, for the encoder's gradient).
        """
        enc = self.encode() if enc is None else enc  # [G, H]
        k, g = actions.shape
        h = enc.shape[1]
        prev = torch.cat([actions.new_full((k, 1), self.num_devices), actions[:, :-1]], dim=1)  # [K, G]
        x = torch.cat([self.device_embedding(prev), enc.unsqueeze(0).expand(k, g, h)], dim=2)
        dec, _ = self.decoder(x)  # [K, G, H]
        keys = self.attn_enc(enc)  # [G, A]
        scores = additive_scores(keys.unsqueeze(0), self.attn_dec(dec).reshape(1, k * g, -1), self.attn_v.weight[0],
                                 None if scores is None else scores.reshape(1, k * g, g))[0]
        context = torch.softmax(scores, dim=1) @ enc  # [K * G, H]
        logits = self.out(torch.cat([dec.reshape(k * g, h), context], dim=1))
        if self.prior is not None:
            logits = logits + self.prior.repeat(k, 1)  # row k * G + i is group i's step
        logp = torch.log_softmax(logits, dim=1)  # [K * G, D]
        chosen = logp.gather(1, actions.reshape(k * g, 1)).reshape(k, g)
        ent = -(logp.exp() * logp).sum(1).reshape(k, g)
        return chosen, ent
