"""Raw attention, attention rollout, norm-based, ALTI+ and value zeroing of a one-sequence
model (a decoder-only model translating by a prompt): the rows of the decoder inputs over the
source and the prefix. Norm-based, ALTI+ and value zeroing decompose each layer's pre-LN
attention sub-layer into one term per token (``sublayer_terms``) and roll the layers' mixing
out like rollout.

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
from core.attribution.mixing import self_mixing
from core.attribution.terms import SublayerTerms
from core.attribution.value_zeroing import change
from core.measure.progress import check_time
from core.model import lm_heads, lm_sites
from core.model.interface import TranslationModel

ZEROINGS = 16  # tokens zeroed in one batch of copies: (16, N, D) through the feed-forward


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


def mixing_rollout(m: TranslationModel, ids: Sequence[int], method: str) -> torch.Tensor:
    """(N, N) the layers' norm-based or ALTI+ mixing of a pre-LN decoder over ``ids``,
    composed (the first layer's on the right). Each layer's attention sub-layer is
    y_i = x_i + sum_j v_ij + b_O with v_ij = sum_h a^h_ij f^h(x_j) (``lm_heads.head_outputs``:
    its norm comes before, RMSNorm or LayerNorm alike): the terms of ``core.attribution.terms``'
    pre-LN case, mixed by ``core.attribution.mixing``."""
    x = torch.tensor([list(ids)], device=m.device)  # (1, N)
    o = m.model(input_ids=x, output_attentions=True, output_hidden_states=True, logits_to_keep=1)
    out = None
    for i, layer in enumerate(lm_sites.layers_of(m.model)):
        t = sublayer_terms(m.model, layer, o.hidden_states[i][0], o.attentions[i][0])
        mix = zeroing_mix(layer, t) if method == "value-zeroing" else self_mixing(method, t)
        out = mix.double() if out is None else mix.double() @ out  # (N, N)
    return out


def zeroing_mix(layer, t: SublayerTerms) -> torch.Tensor:
    """(N, N) one layer's value zeroing (Mohebbi et al. 2023): C_ij = 1 - cos(h_i, h_i^-j),
    h the layer's output and h^-j the same with token j's values zeroed in every head (the
    weights as they are): the sub-layer's output less j's term, then the feed-forward;
    rows normalised. A later token's term is 0, so is its column (float noise cleared)."""
    base = lm_heads.after_attention(layer, t.output)  # (N, D)
    N, parts = t.output.size(0), []
    for start in range(0, N, ZEROINGS):
        check_time()  # a shared server's limit for one heavy job (a long prompt: many)
        terms = t.values[:, start : start + ZEROINGS].transpose(0, 1)  # (n, N, D): j's terms
        moved = lm_heads.after_attention(layer, t.output[None] - terms)  # (n, N, D)
        parts.append(change(base[None], moved))  # (N, n)
    read = (t.weights.sum(0) > 0).to(base.dtype)  # (N, N) what each row attends at all
    return normalised(torch.cat(parts, dim=1) * read)  # (N, N): no float noise elsewhere


def sublayer_terms(model, layer, x: torch.Tensor, weights: torch.Tensor) -> SublayerTerms:
    """One layer's attention sub-layer over the sequence as terms: its input x (N, D), its
    weights (H, N, N)."""
    x, weights = x.float(), weights.float()
    f, b_o = lm_heads.head_outputs(model, layer, x)  # (H, N, D), (D,)
    values = torch.einsum("hij,hjd->ijd", weights, f.float())  # (N, N, D)
    bias = b_o.float().expand_as(x)  # (N, D)
    output = x + values.sum(1) + bias  # (N, D) the residual after the sub-layer
    return SublayerTerms(values, x, bias, output, weights, values, x)


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
    elif method in ("norm", "alti", "value-zeroing"):
        with torch.no_grad():
            a = mixing_rollout(m, ids, method)  # (N, N)
    else:
        a = w[layer].mean(0) if head == "mean" else w[layer][int(head)]  # (N, N)
    rows = a[steps]  # (T, N)
    return normalised(torch.cat([rows[:, source], rows[:, steps]], dim=1)).float()  # (T, S + T)
