"""Value zeroing (Mohebbi et al. 2023): how much a layer's output moves without a token's values.

For each layer and each token j, the layer runs again with j's value vectors set to zero in
every head of one attention sub-layer (the keys, and so the weights, stay as they are):

    C_ij = 1 - cos(y_i, y_i^{-j})

with y the layer's output (FFN and norms included). Rows are normalised to sum to 1 and
composed over layers like the other methods (``core.attribution.compose``). A decoder layer
has two attention sub-layers: its row covers the decoder positions (zeroed in the masked
self-attention) and the encoder outputs (zeroed in the cross attention), normalised
together. All zeroings of one layer run as one batch of copies through the model's own
forward, a hook on the ``v`` site zeroing one token's values in each copy, the pass stopped
once that layer has run (a decoder layer's copies read the encoder's output as it was). A
one-stack model's layer is zeroed the same way over its whole sequence (its ``v`` site, its
layer's ``sequence.{i}.out``), 16 tokens' copies at a time (``self_matrix``, as the encoder's).

Shape key: S source tokens, T output tokens, H heads, Dh head width, D model width; N the
number of zeroings batched.
"""

from __future__ import annotations

from contextlib import suppress

import torch
import torch.nn.functional as F

from core.attribution.compose import DecoderStep, normalised
from core.measure.progress import check_time
from core.model.hooks import StopForward, stop_at
from core.model.interface import TranslationModel
from core.model.record import Record, attention_site, sequence_site

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


def layer_output(m: TranslationModel, site: str, hooks: list, run) -> torch.Tensor:
    """(N, T, D) what reaches ``site`` (a layer's output) when ``run()`` passes through the
    model with ``hooks`` on; the pass stops there."""
    seen: dict = {}
    with m.hooks([*hooks, (site, stop_at(seen))]), suppress(StopForward):
        run()
    return seen[site]


@torch.no_grad()
def self_matrix(m: TranslationModel, p: Record, v_site: str, out_site: str, base, weights):
    """One self-attention layer's value-zeroing matrix (N, N) over the N tokens it reads:
    ``ZEROINGS`` copies of the pass at a time, copy j with token j's values zeroed at
    ``v_site``, each read at the layer's output ``out_site`` and compared with ``base``
    (1, N, D); a key no head reads (``weights`` (H, N, N) all 0: a later token, one outside a
    sliding window) moves nothing, so its column is 0 (float noise cleared)."""
    N, parts = base.size(-2), []
    for start in range(0, N, ZEROINGS):
        check_time()  # a shared server's limit for one heavy job (a long sequence: many)
        n = min(ZEROINGS, N - start)
        keep = zero_one_each(n, n, 0, p.src.device)  # (n, n): copy j zeroes token start + j
        keep = torch.cat([keep.new_ones(n, start), keep, keep.new_ones(n, N - start - n)], 1)
        batch = (p.src.expand(n, -1), p.tgt_in.expand(n, -1))  # (n, S), (n, T)
        moved = layer_output(m, out_site, [(v_site, zeroing(keep))], lambda b=batch: m.run(*b))
        parts.append(change(base, moved))  # (N, n)
    read = (weights.sum(0) > 0).to(base.dtype)  # (N, N) what each row attends at all
    return normalised(torch.cat(parts, dim=1) * read)  # (N, N)


def encoder_matrix(m: TranslationModel, p: Record, layer: int) -> torch.Tensor:
    """One encoder layer's value-zeroing matrix (S, S)."""
    a = p.attention["encoder"][layer]
    base = p.layer_outputs["encoder"][layer]  # (1, S, D)
    return self_matrix(m, p, f"encoder.{layer}.self.v", f"encoder.{layer}.out", base, a.weights[0])


def sequence_matrix(m: TranslationModel, p: Record, layer: int) -> torch.Tensor:
    """One layer's value-zeroing matrix (N, N) over a one-stack model's whole sequence."""
    whole = p.one_stack
    base, weights = whole.layer_outputs[layer], whole.attention[layer].weights[0]
    v_site = f"{attention_site('decoder_self', layer)}.v"
    return self_matrix(m, p, v_site, sequence_site(layer), base, weights)


@torch.no_grad()
def decoder_step(m: TranslationModel, p: Record, layer: int) -> DecoderStep:
    """One decoder layer's value-zeroing step: rows over the decoder inputs and the source."""
    check_time()  # a shared server's limit for one heavy job
    T, S = p.output_length, p.source_length
    N, device = T + S, p.src.device
    hooks = [
        (f"decoder.{layer}.self.v", zeroing(zero_one_each(T, N, 0, device))),  # (N, T)
        (f"decoder.{layer}.cross.v", zeroing(zero_one_each(S, N, T, device))),  # (N, S)
    ]
    src, tgt_in, memory = p.src.expand(N, -1), p.tgt_in.expand(N, -1), p.memory.expand(N, -1, -1)
    moved = layer_output(
        m, f"decoder.{layer}.out", hooks, lambda: m.run(src, tgt_in, memory=memory)
    )  # (N, T, D)
    moved_by = change(p.layer_outputs["decoder"][layer], moved)  # (T, T + S)
    moved_by[:, :T] *= p.tgt_mask[0, 0]  # a later token moves nothing but float noise
    rows = normalised(moved_by)  # (T, T + S)
    return DecoderStep(rows[:, :T], rows[:, T:])


def value_zeroing_steps(m: TranslationModel, p: Record):
    """Every layer's value-zeroing mixing of a model of two stacks: encoder matrices (S, S)
    and decoder steps."""
    encoder = [encoder_matrix(m, p, i) for i in range(m.cfg.num_encoder_layers)]
    return encoder, [decoder_step(m, p, i) for i in range(m.cfg.num_decoder_layers)]
