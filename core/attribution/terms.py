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

A pre-LN sub-layer (``norm_first=True``; mBART, M2M100, NLLB, T5) computes
y_i = x_i + sum_j v_ij + b_O with the values read from norm(x) (self-attention) or from the
encoder output (cross attention), and no norm after: the terms are v_ij and x_i themselves,
c_i = b_O, whatever that norm is (T5's RMSNorm included).

Every family is decomposed by this one function from a recorded pass
(``core.model.record``) and the model's own projections
(``TranslationModel.attention_weights``, ``sublayer_norm``).

Shape key: Tq queries, Tk keys, H heads, Dh head width, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.model.interface import TranslationModel
from core.model.record import AttentionRecord


class TermsError(ValueError):
    """A sub-layer cannot be decomposed: its norm is not one the derivation holds for."""


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


def linearised_norm(ln: nn.LayerNorm, z: torch.Tensor):
    """LN at z (Tq, D) as an affine map: (linear part t -> g P(t) / s, beta)."""
    s = (z.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()  # (Tq, 1)
    weight = ln.weight if ln.weight is not None else torch.ones_like(z[0])
    beta = ln.bias if ln.bias is not None else torch.zeros_like(z[0])

    def apply(t: torch.Tensor) -> torch.Tensor:
        scale = s if t.dim() == 2 else s[:, None]  # (Tq, 1) or (Tq, 1, 1)
        return weight * (t - t.mean(-1, keepdim=True)) / scale

    return apply, beta


@torch.no_grad()
def sublayer_terms(
    m: TranslationModel, kind: str, layer: int, a: AttentionRecord, row: int = 0
) -> SublayerTerms:
    """Decompose one attention sub-layer of one sentence (row ``row`` of a recorded pass)."""
    weights = m.attention_weights(kind, layer)
    norm = m.sublayer_norm(kind, layer)
    w = a.weights[row].float()  # (H, Tq, Tk)
    x, attended = a.resid_pre[row].float(), a.output[row].float()  # (Tq, D) each
    values = torch.einsum("hij,hjd->ijd", w, weights.head_values(a.keys[row].float()))
    bias = weights.b_o.float().expand_as(attended)  # (Tq, D)
    if norm.pre:  # y = x + sum_j v_ij + b_O: nothing after the sum
        return SublayerTerms(values, x, bias, x + attended, w, values, x)
    if not isinstance(norm.norm, nn.LayerNorm):
        raise TermsError(
            f"A post-norm sub-layer with {type(norm.norm).__name__}: ALTI's linearised norm is "
            "derived for LayerNorm only."
        )
    lin, beta = linearised_norm(norm.norm, x + attended)
    output = a.resid_post[row].float()  # (Tq, D) LN(x + sum_j v_ij + b_O)
    return SublayerTerms(lin(values), lin(x), lin(bias) + beta, output, w, values, x)
