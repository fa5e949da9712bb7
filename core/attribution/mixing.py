"""Each method's mixing matrix for one attention sub-layer: rollout, norm-based and ALTI.

A self-attention sub-layer mixes positions of one sequence: an (Tq, Tq) matrix whose
diagonal carries the residual. A cross-attention sub-layer mixes the query's own state
(the residual) with the encoder outputs: ``DecoderStep(diag(own), (Tq, S))``. Rows are
non-negative and sum to 1.

- rollout (Abnar & Zuidema 2020): half the residual, half the heads' mean attention
  (``core.attention.head_stats.rollout_pieces``, what the maps' rollout is made of too);
- norm (Kobayashi et al. 2020, 2021): the norm of what each key adds through the heads,
  ||sum_h a^h_ij f^h(u_j)|| with f^h(u) = (u W_V^h + b_V^h) W_O^h, beside the norm of the
  residual ||x_i||, before the layer norm;
- alti (Ferrando et al. 2022): from the exact decomposition of ``core.attribution.terms``,
  c_ij = max(0, ||y_i||_1 - ||y_i - T_i(u_j)||_1) with y_i the sub-layer's real output,
  residual included, layer norm included (the authors' "min_sum" normalisation).

Shape key: Tq queries, Tk keys, S source tokens, D model width.
"""

from __future__ import annotations

import torch

from core.attention.head_stats import rollout_pieces
from core.attribution.compose import DecoderStep, normalised
from core.attribution.terms import SublayerTerms

MIXING_METHODS = ("rollout", "norm", "alti")


def alti_scores(pieces: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Token terms (Tq, N, D) of outputs y (Tq, D) -> ALTI scores (Tq, N), not normalised."""
    close = y.abs().sum(-1, keepdim=True) - (y[:, None] - pieces).abs().sum(-1)  # (Tq, N)
    return close.clamp(min=0)


def _pieces(method: str, t: SublayerTerms) -> tuple[torch.Tensor, torch.Tensor]:
    """(key scores (Tq, Tk), residual scores (Tq,)) of one sub-layer, not normalised."""
    if method == "rollout":
        return rollout_pieces(t.weights)  # (Tq, Tk), (Tq,)
    if method == "norm":
        return t.values.norm(dim=-1), t.queries.norm(dim=-1)  # (Tq, Tk), (Tq,)
    if method == "alti":
        pieces = torch.cat([t.keys, t.residual[:, None]], dim=1)  # (Tq, Tk + 1, D)
        scores = alti_scores(pieces, t.output)  # (Tq, Tk + 1)
        return scores[:, :-1], scores[:, -1]
    raise ValueError(f"unknown mixing method {method!r}; choose from {MIXING_METHODS}")


def rollout_mixing(weights: torch.Tensor) -> torch.Tensor:
    """(Tq, Tq) a self-attention's rollout mixing of its weights (H, Tq, Tq): what
    ``self_mixing`` gives for "rollout", from the weights alone."""
    keys, own = rollout_pieces(weights)  # (Tq, Tq), (Tq,)
    return normalised(keys + torch.diag(own))


def self_mixing(method: str, t: SublayerTerms) -> torch.Tensor:
    """A self-attention sub-layer's mixing (Tq, Tq): the residual on the diagonal."""
    if method == "rollout":
        return rollout_mixing(t.weights)
    keys, own = _pieces(method, t)
    if method == "alti":  # the residual is part of the query's own token term
        whole = t.keys.clone()  # (Tq, Tq, D)
        diagonal = torch.arange(whole.size(0))
        whole[diagonal, diagonal] += t.residual
        return normalised(alti_scores(whole, t.output))
    return normalised(keys + torch.diag(own))  # (Tq, Tq)


def cross_mixing(method: str, t: SublayerTerms) -> DecoderStep:
    """A cross-attention sub-layer's mixing: the query's own state and the encoder outputs."""
    keys, own = _pieces(method, t)
    rows = normalised(torch.cat([keys, own[:, None]], dim=1))  # (Tq, S + 1)
    return DecoderStep(torch.diag(rows[:, -1]), rows[:, :-1])
