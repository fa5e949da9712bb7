"""An attention sub-layer's output as a sum of one term per input token (ALTI's decomposition).

A post-LN sub-layer (d2l's AddNorm, ours by default) computes, for query i,

    y_i = LN(z_i),   z_i = x_i + sum_h sum_j a^h_ij (u_j W_V^h + b_V^h) W_O^h + b_O

where x_i is the query's own input (the residual), u_j the j-th key/value input (u = x in
self-attention, the encoder output in cross attention), a^h the softmax weights of head h,
and LN(z) = g * (z - mean(z)) / s + beta with s = sqrt(var(z) + eps). For this one input,
s_i is a number; centring, z -> z - mean(z), is linear. So, with s_i fixed at its actual
value, LN is an affine map and distributes over the sum:

    y_i = sum_j T_i(u_j) + T_i^res + c_i,
    T_i(u_j)  = g * P(sum_h a^h_ij u_j W_V^h W_O^h) / s_i        (one term per key j)
    T_i^res   = g * P(x_i) / s_i                                  (the residual)
    c_i       = g * P(b_V W_O + b_O) / s_i + beta                 (no token: the biases)

with P the centring. The value bias leaves the token terms because sum_j a^h_ij = 1 for every
head (masked keys have a^h_ij = 0 exactly). This is exact, not an approximation: the only
non-linear step of LN is the division by s_i, and s_i is taken from the actual z_i.
``tests/test_attribution.py`` rebuilds every sub-layer's real output from these terms.

A pre-LN sub-layer (``norm_first=True``) computes z_i = x_i + Attn(LN(x))_i with no norm
after; there the LN of each key j is the affine map (with its own s_j), so
T_i(x_j) = sum_h a^h_ij (g * P(x_j) / s_j) W_V^h W_O^h, T_i^res = x_i and c_i holds beta's
and the biases' share. (Cross attention reads the encoder output, not normalised again.)

Shape key: Tq queries, Tk keys, H heads, Dh head width, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
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

    def rebuilt(self) -> torch.Tensor:
        """(Tq, D) the sum of all terms: equals ``output`` up to float rounding."""
        return self.keys.sum(1) + self.residual + self.bias


def head_maps(mha: MultiHeadAttention, u: torch.Tensor) -> torch.Tensor:
    """f^h(u_j) = u_j W_V^h W_O^h for each head: u (Tk, D) -> (H, Tk, D), no biases."""
    H, D = mha.num_heads, u.size(-1)
    v = F.linear(u, mha.W_v.weight)  # (Tk, D)
    v = v.view(-1, H, D // H).transpose(0, 1)  # (H, Tk, Dh)
    w_o = mha.W_o.weight.view(D, H, D // H).permute(1, 2, 0)  # (H, Dh, D)
    return v @ w_o  # (H, Tk, D)


def mixed(weights: torch.Tensor, per_head: torch.Tensor) -> torch.Tensor:
    """sum_h a^h_ij f^h_j: weights (H, Tq, Tk), per_head (H, Tk, D) -> (Tq, Tk, D)."""
    return torch.einsum("hij,hjd->ijd", weights, per_head)


def value_bias(mha: MultiHeadAttention) -> torch.Tensor:
    """f^h of the value bias alone, per head: (H, 1, D)."""
    H, D = mha.num_heads, mha.W_v.bias.numel()
    b = mha.W_v.bias.view(H, 1, D // H)  # (H, 1, Dh)
    return b @ mha.W_o.weight.view(D, H, D // H).permute(1, 2, 0)  # (H, 1, D)


def linearised_norm(ln: nn.LayerNorm, z: torch.Tensor):
    """LN at z (Tq, D) as an affine map: (linear part t -> g P(t) / s, beta)."""
    s = (z.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()  # (Tq, 1)
    g = ln.weight

    def apply(t: torch.Tensor) -> torch.Tensor:
        scale = s if t.dim() == 2 else s[:, None]  # (Tq, 1) or (Tq, 1, 1)
        return g * (t - t.mean(-1, keepdim=True)) / scale

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
    if norm.norm_first:
        return _pre_ln_terms(norm, mha, x, memory, mask)
    u = x if memory is None else memory  # (1, Tk, D) keys and values
    attended, w = mha(x, u, u, mask, need_weights=True)  # (1, Tq, D), (1, H, Tq, Tk)
    z = x[0] + attended[0]  # (Tq, D) before the norm
    lin, beta = linearised_norm(norm.ln, z)
    per_head = head_maps(mha, u[0])  # (H, Tk, D)
    const = value_bias(mha).sum(0)[0] + mha.W_o.bias  # (D,) b_V W_O + b_O
    values = mixed(w[0], per_head + value_bias(mha))  # (Tq, Tk, D)
    return SublayerTerms(
        lin(mixed(w[0], per_head)),
        lin(x[0]),
        lin(const.expand_as(z)) + beta,
        norm.ln(z),
        w[0],
        values,
    )


def _pre_ln_terms(norm, mha, x, memory, mask) -> SublayerTerms:
    """The pre-LN decomposition: LN linearised per key (self) or none (cross)."""
    h = norm.ln(x)  # (1, Tq, D) the queries
    u = h if memory is None else memory  # (1, Tk, D)
    attended, w = mha(h, u, u, mask, need_weights=True)
    if memory is None:
        lin, beta = linearised_norm(norm.ln, x[0])
        keys_in = lin(x[0])  # (Tk, D) g P(x_j) / s_j: LN of each key without beta
        const = F.linear(F.linear(beta, mha.W_v.weight, mha.W_v.bias), mha.W_o.weight)
    else:
        keys_in = u[0]
        const = value_bias(mha).sum(0)[0]
    per_head = head_maps(mha, keys_in)  # (H, Tk, D)
    return SublayerTerms(
        mixed(w[0], per_head),
        x[0],
        (const + mha.W_o.bias).expand_as(x[0]),
        x[0] + attended[0],
        w[0],
        mixed(w[0], head_maps(mha, u[0]) + value_bias(mha)),
    )
