"""Value zeroing (Mohebbi et al. 2023): how much a layer's output moves without a token's values.

For each layer and each token j, the layer runs again with j's value vectors set to zero in
every head of one attention sub-layer (the keys, and so the weights, stay as they are):

    C_ij = 1 - cos(y_i, y_i^{-j})

with y the layer's output (FFN and norms included). Rows are normalised to sum to 1 and
composed over layers like the other methods (``core.attribution.compose``). A decoder layer
has two attention sub-layers: its row covers the decoder positions (zeroed in the masked
self-attention) and the encoder outputs (zeroed in the cross attention), normalised
together. All zeroings of one layer run as one batch of copies of that layer alone, on the
stream it read and its other inputs (masks, positions, the encoder's output) kept from one
pass (``core.model.layer_runs``: the model runs once for every layer, not once per copy or per
layer), a hook on the ``v`` site zeroing one token's values in each copy. A one-stack model's
layer is zeroed the same way over its whole sequence (its ``v`` site, its layer
``sequence.{i}``), 16 tokens' copies at a time (``self_matrix``, as the encoder's).

Shape key: S source tokens, T output tokens, H heads, Dh head width, D model width; N the
number of zeroings batched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.attribution.compose import DecoderStep, normalised
from core.measure.progress import check_time
from core.model.interface import TranslationModel
from core.model.layer_runs import LayerInputs, layer_calls
from core.model.record import Record, attention_site

ZEROINGS = 16  # tokens zeroed in one batch of copies: (16, N, D) through the model


def change(base: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """1 - cos between base (1, T, D) and each of N moved copies (N, T, D) -> (T, N), the
    cosine in float64 (in float32, 1 - cos of a small move is mostly rounding)."""
    cos = F.cosine_similarity(base.double(), moved.double(), dim=-1)  # (N, T)
    return (1.0 - cos).clamp(min=0).T.to(base.dtype)  # (T, N)


def zeroing(keep: torch.Tensor):
    """A hook on a ``v`` site (N, Tk, H, Dh): copy n keeps token j's values times keep[n, j]."""

    def hook(v: torch.Tensor, name: str) -> torch.Tensor:
        return v * keep.to(v.dtype)[:, :, None, None]

    return hook


def zero_one_each(n: int, rows: int, offset: int, device) -> torch.Tensor:
    """(rows, n) keep masks: copy offset + j zeroes token j, every other copy keeps all."""
    keep = torch.ones(rows, n, device=device)
    keep[offset + torch.arange(n), torch.arange(n)] = 0.0
    return keep


def layer_output(m: TranslationModel, kept: LayerInputs, layer: str, n: int, hooks: list):
    """(n, N, D) the output of ``layer`` ("encoder.2", "sequence.0") run on n copies of the
    stream it was given in the kept pass (``kept``), with ``hooks`` on: the layers below are
    not run."""
    side, i = layer.rsplit(".", 1)
    stream = kept.stream_in(layer)  # (1, N, D)
    with m.hooks(hooks):
        return kept.run(side, int(i), stream.expand(n, -1, -1).contiguous(), int(i) + 1)


@torch.no_grad()
def kept_calls(m: TranslationModel, p: Record) -> LayerInputs:
    """Every layer's call of ``p``'s pass (``layer_calls``): one pass for all of its layers'
    zeroings."""
    return layer_calls(m, p.src, p.tgt_in)


@torch.no_grad()
def self_matrix(
    m: TranslationModel,
    p: Record,
    layer: str,
    v_site: str,
    base,
    weights,
    kept: LayerInputs | None = None,
):
    """One self-attention layer's value-zeroing matrix (N, N) over the N tokens it reads:
    ``ZEROINGS`` copies of ``layer`` ("encoder.2", "sequence.0") at a time, run on the stream
    it read, copy j with token j's values zeroed at ``v_site``, each compared at the layer's
    output with ``base`` (1, N, D); a key no head reads (``weights`` (H, N, N) all 0: a later
    token, one outside a sliding window) moves nothing, so its column is 0 (float noise
    cleared); ``kept``: ``kept_calls(m, p)`` (None: one pass now)."""
    kept = kept_calls(m, p) if kept is None else kept
    N, parts = base.size(-2), []
    for start in range(0, N, ZEROINGS):
        check_time()  # a shared server's limit for one heavy job (a long sequence: many)
        n = min(ZEROINGS, N - start)
        keep = zero_one_each(n, n, 0, p.src.device)  # (n, n): copy j zeroes token start + j
        keep = torch.cat([keep.new_ones(n, start), keep, keep.new_ones(n, N - start - n)], 1)
        moved = layer_output(m, kept, layer, n, [(v_site, zeroing(keep))])  # (n, N, D)
        parts.append(change(base, moved))  # (N, n)
    read = (weights.sum(0) > 0).to(base.dtype)  # (N, N) what each row attends at all
    return normalised(torch.cat(parts, dim=1) * read)  # (N, N)


def encoder_matrix(
    m: TranslationModel, p: Record, layer: int, kept: LayerInputs | None = None
) -> torch.Tensor:
    """One encoder layer's value-zeroing matrix (S, S) (``kept``: as ``self_matrix``'s)."""
    a = p.attention["encoder"][layer]
    base = p.layer_outputs["encoder"][layer]  # (1, S, D)
    v_site = f"encoder.{layer}.self.v"
    return self_matrix(m, p, f"encoder.{layer}", v_site, base, a.weights[0], kept)


def sequence_matrix(
    m: TranslationModel, p: Record, layer: int, kept: LayerInputs | None = None
) -> torch.Tensor:
    """One layer's value-zeroing matrix (N, N) over a one-stack model's whole sequence
    (``kept``: as ``self_matrix``'s)."""
    whole = p.one_stack
    base, weights = whole.layer_outputs[layer], whole.attention[layer].weights[0]
    v_site = f"{attention_site('decoder_self', layer)}.v"
    return self_matrix(m, p, f"sequence.{layer}", v_site, base, weights, kept)


@torch.no_grad()
def decoder_step(
    m: TranslationModel, p: Record, layer: int, kept: LayerInputs | None = None
) -> DecoderStep:
    """One decoder layer's value-zeroing step: rows over the decoder inputs and the source
    (``kept``: as ``self_matrix``'s)."""
    check_time()  # a shared server's limit for one heavy job
    T, S = p.output_length, p.source_length
    N, device = T + S, p.src.device
    hooks = [
        (f"decoder.{layer}.self.v", zeroing(zero_one_each(T, N, 0, device))),  # (N, T)
        (f"decoder.{layer}.cross.v", zeroing(zero_one_each(S, N, T, device))),  # (N, S)
    ]
    name = f"decoder.{layer}"
    kept = layer_calls(m, p.src, p.tgt_in, memory=p.memory) if kept is None else kept
    moved = layer_output(m, kept, name, N, hooks)  # (N, T, D)
    moved_by = change(p.layer_outputs["decoder"][layer], moved)  # (T, T + S)
    moved_by[:, :T] *= p.tgt_mask[0, 0]  # a later token moves nothing but float noise
    rows = normalised(moved_by)  # (T, T + S)
    return DecoderStep(rows[:, :T], rows[:, T:])


def value_zeroing_steps(m: TranslationModel, p: Record):
    """Every layer's value-zeroing mixing of a model of two stacks: encoder matrices (S, S)
    and decoder steps, from one pass's layer calls."""
    kept = kept_calls(m, p)  # every layer's call, once
    encoder = [encoder_matrix(m, p, i, kept) for i in range(m.cfg.num_encoder_layers)]
    return encoder, [decoder_step(m, p, i, kept) for i in range(m.cfg.num_decoder_layers)]
