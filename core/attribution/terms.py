"""An attention sub-layer's output as a sum of one term per input token (ALTI's decomposition).

A post-LN sub-layer (d2l's AddNorm, ours by default) computes, for query i,

    y_i = LN(z_i),   z_i = x_i + sum_j v_ij + b_O,   v_ij = sum_h a^h_ij (u_j W_V^h + b_V^h) W_O^h

where x_i is the query's own input (the residual), u_j the j-th key/value input (u = x in
self-attention, the encoder output in cross attention), a^h the softmax weights of head h
(exactly 0 where masked), and LN(z) = g * (z - mean(z)) / s + beta with
s = sqrt(var(z) + eps). For this one input, s_i is a number, and centring, z -> z - mean(z),
is linear. So, with s_i fixed at its actual value, LN is an affine map, and it distributes
over the sum:

    y_i = sum_j T_i(u_j) + T_i^res + c_i,
    T_i(u_j) = g * P(v_ij) / s_i,   T_i^res = g * P(x_i) / s_i,   c_i = g * P(b_O) / s_i + beta

with P the centring. This is exact, not an approximation: the only non-linear step of LN is
the division by s_i, and s_i is the actual one. As in the ALTI+ authors' code
(mt-upc/transformer-contributions-nmt), the value bias travels with its token's attention
weight and the output bias b_O and LN's beta stay apart (no token's). ALTI then compares
each term with the real output y_i (``core.attribution.mixing``).
``tests/test_attribution.py`` rebuilds every sub-layer's real output from these terms.

A pre-LN sub-layer (``norm_first=True``) computes y_i = x_i + sum_j v_ij + b_O with the
values read from LN(x) (self-attention) or from the encoder output (cross attention), and
no norm after: the terms are v_ij and x_i themselves, c_i = b_O.

Shape key: Tq queries, Tk keys, H heads, Dh head width, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.model.transformer import AddNorm, MultiHeadAttention


@dataclass
class SublayerTerms:
    """One attention sub-layer of one sentence, as terms that sum to its output."""

    keys: torch.Tensor  # (Tq, Tk, D) T_i(u_j): what key token j adds to output i
    residual: torch.Tensor  # (Tq, D) T_i^res: what the query's own input adds
    bias: torch.Tensor  # (Tq, D) c_i: what no token adds (biases, LN's beta)
    output: torch.Tensor  # (Tq, D) the sub-layer's real output
    weights: torch.Tensor  # (H, Tq, Tk) the attention weights of each head
    values: torch.Tensor  # (Tq, Tk, D) sum_h a^h_ij f^h(u_j), f with b_V: Kobayashi's vectors
    queries: torch.Tensor  # (Tq, D) x_i, the sub-layer's input: the residual before any norm

    def rebuilt(self) -> torch.Tensor:
        """(Tq, D) the sum of all terms: equals ``output`` up to float rounding."""
        return self.keys.sum(1) + self.residual + self.bias


def head_maps(mha: MultiHeadAttention, u: torch.Tensor) -> torch.Tensor:
    """f^h(u_j) = (u_j W_V^h + b_V^h) W_O^h for each head: u (Tk, D) -> (H, Tk, D)."""
    H, D = mha.num_heads, u.size(-1)
    v = mha.W_v(u).view(-1, H, D // H).transpose(0, 1)  # (H, Tk, Dh)
    w_o = mha.W_o.weight.view(D, H, D // H).permute(1, 2, 0)  # (H, Dh, D)
    return v @ w_o  # (H, Tk, D)


def linearised_norm(ln: nn.LayerNorm, z: torch.Tensor):
    """LN at z (Tq, D) as an affine map: (linear part t -> g P(t) / s, beta)."""
    s = (z.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()  # (Tq, 1)

    def apply(t: torch.Tensor) -> torch.Tensor:
        scale = s if t.dim() == 2 else s[:, None]  # (Tq, 1) or (Tq, 1, 1)
        return ln.weight * (t - t.mean(-1, keepdim=True)) / scale

    return apply, ln.bias


@torch.no_grad()
def sublayer_terms(
    norm: AddNorm, mha: MultiHeadAttention, x: torch.Tensor, memory=None, mask=None
) -> SublayerTerms:
    """Decompose one attention sub-layer of one sentence (eval mode).

    Args:
        x: (1, Tq, D) the sub-layer's input (queries and residual).
        memory: (1, Tk, D) the encoder output for cross attention; None for self-attention.
        mask: broadcastable to (1, H, Tq, Tk), True where a query may attend.
    """
    h = norm.ln(x) if norm.norm_first else x  # (1, Tq, D) what the attention reads
    u = h if memory is None else memory  # (1, Tk, D) keys and values
    attended, w = mha(h, u, u, mask, need_weights=True)  # (1, Tq, D), (1, H, Tq, Tk)
    values = torch.einsum("hij,hjd->ijd", w[0], head_maps(mha, u[0]))  # (Tq, Tk, D)
    z = x[0] + attended[0]  # (Tq, D) the residual sum
    bias = mha.W_o.bias.expand_as(z)  # (Tq, D)
    if norm.norm_first:
        return SublayerTerms(values, x[0], bias, z, w[0], values, x[0])
    lin, beta = linearised_norm(norm.ln, z)
    return SublayerTerms(lin(values), lin(x[0]), lin(bias) + beta, norm.ln(z), w[0], values, x[0])
