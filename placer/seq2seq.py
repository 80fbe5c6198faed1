"""The 2017 placer: an attentional sequence-to-sequence policy over co-location groups.

Mirhoseini et al. 2017, Sec. 3.2 (Fig. 2): an LSTM encoder reads the groups' embeddings
(tunable type embedding, output shapes, adjacency: :mod:`placer.features`); an LSTM
decoder with content-based attention (Bahdanau et al. 2015) runs one step per group and
outputs that group's device; each device has a tunable embedding that is fed to the next
decoder step. Our decoder's input at step ``i`` is the previous device's embedding
concatenated with the encoder's output at step ``i`` ("the decoder outputs the device for
the operation at the same encoder time step").

The paper gives no layer sizes; ``hidden_size=256`` and 32-dim type and device embeddings
are our defaults.

Speed (same distribution, same gradients): the additive attention scores
``v . tanh(W_e enc_j + W_d dec)`` of one decoder step are one autograd node
(:class:`_AdditiveScores`) that keeps only its inputs and recomputes the ``[K, G, H]`` tanh
in the backward pass, instead of keeping two ``[K, G, H]`` tensors per step (about 4 GB for
nmt paper's 502 groups, K = 8, H = 256), and the encoder's ``[G, G]`` one-hot adjacency
enters as a sparse product with the LSTM's input weights (``O(edges * H)`` not ``O(G^2 H)``).
"""

from __future__ import annotations

import torch
from torch import nn

from placer.features import GroupFeatures


class _AdditiveScores(torch.autograd.Function):
    """``scores[k, j] = sum_h v[h] * tanh(keys[j, h] + query[k, h])``: ``keys [G, H]``,
    ``query [K, H]``, ``v [H]`` -> ``[K, G]``; the backward pass recomputes the tanh."""

    @staticmethod
    def forward(ctx, keys: torch.Tensor, query: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t = torch.tanh(keys.unsqueeze(0) + query.unsqueeze(1))  # [K, G, H]
        ctx.save_for_backward(keys, query, v)
        return t @ v

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        keys, query, v = ctx.saved_tensors
        t = torch.tanh(keys.unsqueeze(0) + query.unsqueeze(1))  # [K, G, H]
        grad_v = torch.einsum("kg,kgh->h", grad, t)
        t.mul_(t).neg_().add_(1.0).mul_(grad.unsqueeze(2)).mul_(v)  # d scores / d (keys + query)
        return t.sum(0), t.sum(1), grad_v


class Seq2SeqPlacer(nn.Module):
    """Policy ``pi(P | G; theta)`` over placements of ``num_groups`` groups on ``num_devices`` devices.

    Args:
        features: the graph's group features (fixed for one search).
        num_devices: D, the number of devices.
        hidden_size: LSTM and attention width.
        embedding_size: width of the type and device embeddings.
    """

    def __init__(
        self, features: GroupFeatures, num_devices: int, hidden_size: int = 256, embedding_size: int = 32
    ) -> None:
        super().__init__()
        self.num_devices = num_devices
        self.register_buffer("type_counts", torch.from_numpy(features.type_counts))
        self.register_buffer("shapes", torch.from_numpy(features.output_shapes))
        self.register_buffer("adjacency", torch.from_numpy(features.adjacency))
        num_types = features.type_counts.shape[1]
        in_size = embedding_size + features.output_shapes.shape[1] + features.adjacency.shape[1]
        self.type_embedding = nn.Linear(num_types, embedding_size, bias=False)
        self.encoder = nn.LSTM(in_size, hidden_size, batch_first=True)
        self.device_embedding = nn.Embedding(num_devices + 1, embedding_size)  # last row: <start>
        self.decoder = nn.LSTMCell(embedding_size + hidden_size, hidden_size)
        self.attn_enc = nn.Linear(hidden_size, hidden_size, bias=False)
        self.attn_dec = nn.Linear(hidden_size, hidden_size)
        self.attn_v = nn.Linear(hidden_size, 1, bias=False)
        self.out = nn.Linear(2 * hidden_size, num_devices)

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
            per-step entropies.
        """
        enc = self.encode()  # [G, H]
        g, h = enc.shape
        keys = self.attn_enc(enc)  # [G, H]
        state = (enc.new_zeros(batch, h), enc.new_zeros(batch, h))
        prev = torch.full((batch,), self.num_devices, dtype=torch.long, device=enc.device)
        chosen, logps, ents = [], [], []
        for i in range(g):
            x = torch.cat([self.device_embedding(prev), enc[i].expand(batch, h)], dim=1)
            state = self.decoder(x, state)
            dec = state[0]
            scores = _AdditiveScores.apply(keys, self.attn_dec(dec), self.attn_v.weight[0])  # [K, G]
            context = torch.softmax(scores, dim=1) @ enc  # [K, H]
            logits = self.out(torch.cat([dec, context], dim=1))
            logp = torch.log_softmax(logits, dim=1)
            if actions is None:
                a = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            else:
                a = actions[:, i]
            chosen.append(a)
            logps.append(logp.gather(1, a.unsqueeze(1)).squeeze(1))
            ents.append(-(logp.exp() * logp).sum(dim=1))
            prev = a
        return torch.stack(chosen, dim=1), torch.stack(logps, dim=1).sum(1), torch.stack(ents, dim=1).sum(1)
