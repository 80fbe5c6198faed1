"""Additive (Bahdanau) attention scores, computed fast and in bounded memory on a CPU.

``scores[b, l, g] = sum_a v[a] tanh(keys[b, g, a] + query[b, l, a])`` (Bahdanau, Cho, Bengio,
ICLR 2015, Eq. 6 with the projections applied by the caller): the content-based attention of
every seq2seq placer here (2017 Sec. 3.2, the Hierarchical Planner, EAGLE Fig. 4).

Two things make it fast without changing it (``tests/test_search.py`` checks values and
gradients against the plain ``tanh`` formula):

- ``tanh(x) = 2 sigmoid(2x) - 1``, so ``scores = 2 (sigmoid(2 keys + 2 query) @ v) - sum(v)``:
  torch's CPU ``sigmoid`` is about 6x faster than its ``tanh`` (502 x 256 x 8 elements on one
  thread: 0.42 ms against 2.7 ms); the results agree to float32 rounding (about 1e-5).
- The ``[rows, G, A]`` blocks are made ``CHUNK_ELEMENTS`` at a time and never kept for the
  backward pass, which recomputes them (``d tanh(x)/dx = 4 s (1 - s)``, ``s = sigmoid(2x)``):
  autograd would keep one ``[K, G, A]`` tensor per decoder step (about 4 GB for nmt paper's
  502 groups, K = 8, A = 256).
- The backward pass makes ``s (1 - s) grad`` in place (``addcmul_``) and applies the factor ``4 v``,
  constant over its sums, once to the summed ``[B, G, A]`` and ``[B, L, A]`` gradients, not to every
  block; a block of one memory sums over its queries as a ``[1, l] @ [l, G A]`` product. A decoder's
  sampling loop doubles its keys once ([`FixedKeys`][placer.attention.FixedKeys]), not at every step.
  Together with the 2017 placer's encoder run once for sampling and scoring, its paper widths on nmt
  went from 8.65-9.02 to 10.06-10.47 placements per CPU-second inside ``placement experiment``
  (``docs/results.md``); the gradients agree with the code before to float32 rounding.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 20  #: elements of one ``[rows, G, A]`` block (4 MB of float32)


def additive_scores(keys: torch.Tensor, query: torch.Tensor, v: torch.Tensor,
                    values: torch.Tensor | None = None) -> torch.Tensor:
    """Additive attention scores (module docstring), with autograd when it is enabled.

    Args:
        keys: ``[B, G, A]`` (the projected memory; ``B`` may be 1 for a memory shared by all rows).
        query: ``[B, L, A]`` (the projected decoder states).
        v: ``[A]``.
        values: the scores of these inputs already computed (``[B, L, G]``, e.g. by the
            no-autograd pass that sampled the placements being scored): returned as the
            forward result instead of computing them again; the backward pass is the same.
            They must be the scores of (numerically) the same ``keys`` and ``query``.
    Returns:
        ``[B, L, G]`` float scores.
    Raises:
        ValueError: shapes that do not match.
    """
    if keys.dim() != 3 or query.dim() != 3 or keys.shape[0] != query.shape[0] or keys.shape[2] != query.shape[2] \
            or v.shape != (keys.shape[2],) \
            or (values is not None and values.shape != (keys.shape[0], query.shape[1], keys.shape[1])):
        raise ValueError(f"additive_scores: keys {tuple(keys.shape)}, query {tuple(query.shape)}, v {tuple(v.shape)}, "
                         f"values {None if values is None else tuple(values.shape)}: expected [B, G, A], [B, L, A], [A], [B, L, G]")
    if not torch.is_grad_enabled():  # sampling: the same forward without autograd.Function's bookkeeping
        return values.detach().clone() if values is not None else _forward(keys, query, v)
    return _AdditiveScores.apply(keys, query, v, values)


def _blocks(b: int, n: int, g: int, a: int) -> list[tuple[int, int, int, int]]:
    """``(b0, b1, l0, l1)`` blocks of ``b`` memories x ``n`` queries of ``CHUNK_ELEMENTS`` at most (one row at least)."""
    rows = max(1, CHUNK_ELEMENTS // max(1, g * a))
    if n >= rows:
        return [(i, i + 1, lo, min(n, lo + rows)) for i in range(b) for lo in range(0, n, rows)]
    per = max(1, rows // max(n, 1))
    return [(i, min(b, i + per), 0, n) for i in range(0, b, per)]


def _sigmoid_2x(keys2: torch.Tensor, query2: torch.Tensor) -> torch.Tensor:
    """``sigmoid(keys2[:, None] + query2[:, :, None])``: ``[b, G, A]``, ``[b, l, A]`` -> ``[b, l, G, A]``, for
    ``keys2 = 2 keys`` and ``query2 = 2 query``: ``sigmoid(2 (keys + query))`` with the doubling done on the
    small inputs, not on the block (doubling is exact in floating point, so ``2k + 2q`` rounds as ``2 (k + q)``)."""
    return torch.add(keys2.unsqueeze(1), query2.unsqueeze(2)).sigmoid_()


def _forward(keys: torch.Tensor, query: torch.Tensor, v: torch.Tensor,
             keys2: torch.Tensor | None = None) -> torch.Tensor:
    """The scores ``[B, L, G]`` of ``keys [B, G, A]``, ``query [B, L, A]``, ``v [A]`` (module docstring), block by block;
    ``keys2``: ``2 keys`` when the caller has it already."""
    (b, g, a), n = keys.shape, query.shape[1]
    out = query.new_empty(b, n, g)
    keys2, query2 = keys * 2.0 if keys2 is None else keys2, query * 2.0
    for b0, b1, l0, l1 in _blocks(b, n, g, a):
        s = _sigmoid_2x(keys2[b0:b1], query2[b0:b1, l0:l1])  # [b, l, G, A]
        out[b0:b1, l0:l1] = s @ v
    return out.mul_(2.0).sub_(v.sum())


class FixedKeys:
    """Additive attention over one memory for many queries without autograd: a decoder's sampling loop, which
    attends over the same ``keys`` at every step. The same scores as [`additive_scores`][placer.attention.additive_scores]
    (to the bit), with ``2 keys`` computed once instead of at every step.

    Args:
        keys: ``[B, G, A]``; v: ``[A]``.
    Raises:
        ValueError: shapes that do not match (at [`scores`][placer.attention.FixedKeys.scores]).
    """

    def __init__(self, keys: torch.Tensor, v: torch.Tensor):
        self.keys, self.v = keys.detach(), v.detach()
        self.keys2 = self.keys * 2.0

    def scores(self, query: torch.Tensor) -> torch.Tensor:
        """``[B, L, G]`` scores of ``query [B, L, A]`` (no autograd)."""
        keys, v = self.keys, self.v
        if query.dim() != 3 or query.shape[0] != keys.shape[0] or query.shape[2] != keys.shape[2]:
            raise ValueError(f"FixedKeys.scores: keys {tuple(keys.shape)}, query {tuple(query.shape)}: expected [B, G, A], [B, L, A]")
        with torch.no_grad():
            return _forward(keys, query, v, self.keys2)


class _AdditiveScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, keys: torch.Tensor, query: torch.Tensor, v: torch.Tensor, values: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(keys, query, v)
        if values is not None:
            return values.detach().clone()
        return _forward(keys, query, v)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        keys, query, v = ctx.saved_tensors
        (b, g, a), n = keys.shape, query.shape[1]
        grad = grad.contiguous()
        grad_keys = keys.new_zeros(keys.shape)  # contiguous whatever the keys' strides: its rows are viewed flat below
        grad_query, grad_v = torch.empty_like(query), torch.zeros_like(v)
        keys2, query2 = (keys * 2.0).contiguous(), (query * 2.0).contiguous()  # so that each block is contiguous
        ones = keys.new_ones(1, n)
        for b0, b1, l0, l1 in _blocks(b, n, g, a):
            s = _sigmoid_2x(keys2[b0:b1], query2[b0:b1, l0:l1])  # [b, l, G, A]
            gr = grad[b0:b1, l0:l1]  # [b, l, G]
            grad_v += (gr.reshape(1, -1) @ s.reshape(-1, a)).squeeze(0)  # sum grad * s
            s.addcmul_(s, s, value=-1.0).mul_(gr.unsqueeze(3))  # s (1 - s) grad, in place
            if b1 - b0 == 1:  # the sum over the block's queries as a [1, l] @ [l, G A] product (faster than sum(1))
                grad_keys[b0].view(1, g * a).addmm_(ones[:, : l1 - l0], s.view(l1 - l0, g * a))
            else:
                grad_keys[b0:b1] += s.sum(1)
            grad_query[b0:b1, l0:l1] = s.sum(2)
        # d scores / d (keys + query) = 4 s (1 - s) v grad: the factor 4 v, constant over the blocks' sums, applied once;
        # d scores / d v = sum grad * tanh = 2 sum grad * s - sum grad
        v4 = v * 4.0
        return grad_keys.mul_(v4), grad_query.mul_(v4), grad_v.mul_(2.0).sub_(grad.sum()), None
