"""Raw attention and attention rollout of a one-sequence model (a decoder-only model
translating by a prompt): the rows of the decoder inputs over the source and the prefix.

Such a model has one causal attention per layer over the prompt and its output. ``attention``
takes one layer's weights (a head, or the heads' mean); ``rollout`` (Abnar & Zuidema 2020)
multiplies every layer's 0.5 (mean over heads) + 0.5 I, rows renormalised, over the whole
sequence, so that weight reaching the source through the template's tokens counts. Either way
the rows of the decoder inputs are cut to the source's and the prefix's columns and
renormalised: the template's own tokens (and the first token many heads park on) are left
out, which the Attribution section says.

Shape key: L layers, H heads, N sequence, S source tokens, T output tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.attribution.compose import normalised
from core.model.interface import TranslationModel


def rollout(weights: torch.Tensor) -> torch.Tensor:
    """(N, N) the rollout of (L, H, N, N) causal weights: each layer 0.5 A + 0.5 I, rows
    renormalised, the first layer's on the right."""
    N = weights.size(-1)
    eye = torch.eye(N, dtype=weights.dtype, device=weights.device)
    out = eye
    for layer in weights:  # (H, N, N)
        mix = normalised(0.5 * layer.mean(0) + 0.5 * eye)  # (N, N)
        out = mix @ out
    return out


def sequence_contributions(
    m: TranslationModel,
    src_ids: Sequence[int],
    out_ids: Sequence[int],
    method: str,
    layer: int,
    head: str,
) -> torch.Tensor:
    """(T, S + T) rows of the decoder inputs over [source ; prefix], summing to 1."""
    ids = m.sequence_ids(src_ids, out_ids)
    with torch.no_grad():
        w = m.sequence_patterns(ids).double()  # (L, H, N, N)
    source, steps = m.sequence_spans(len(src_ids), len(out_ids))
    if method == "rollout":
        a = rollout(w)  # (N, N)
    else:
        a = w[layer].mean(0) if head == "mean" else w[layer][int(head)]  # (N, N)
    rows = a[steps]  # (T, N)
    return normalised(torch.cat([rows[:, source], rows[:, steps]], dim=1)).float()  # (T, S + T)
