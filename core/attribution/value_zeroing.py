"""Value zeroing (Mohebbi et al. 2023): how much a layer's output moves without a token's values.

For each layer and each token j, the layer runs again with j's value vectors set to zero in
every head of one attention sub-layer (the keys, and so the weights, stay as they are):

    C_ij = 1 - cos(y_i, y_i^{-j})

with y the layer's output (FFN and norms included). Rows are normalised to sum to 1 and
composed over layers like the other methods (``core.attribution.compose``). A decoder layer
has two attention sub-layers: its row covers the decoder positions (zeroed in the masked
self-attention) and the encoder outputs (zeroed in the cross attention), normalised
together. All zeroings of one layer run as one batch.

Shape key: S source tokens, T output tokens, H heads, Dh head width, D model width; N the
number of zeroings batched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.attribution.compose import DecoderStep, normalised
from core.model.record import Record, ffn_sublayer


def zeroed_values(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (1, H, Tk, Dh) -> Tk copies, copy j with token j's values zeroed."""
    n = v.size(2)
    keep = 1.0 - torch.eye(n, dtype=v.dtype, device=v.device)  # (N=Tk, Tk)
    v_many = v.expand(n, -1, -1, -1) * keep[:, None, :, None]  # (N, H, Tk, Dh)
    return k.expand(n, -1, -1, -1), v_many


def kv_of(norm, mha, x: torch.Tensor, memory=None):
    """The projected keys and values an attention sub-layer reads: two (1, H, Tk, Dh)."""
    if memory is not None:
        return mha.project_kv(memory, memory)
    h = norm.ln(x) if norm.norm_first else x  # (1, Tk, D)
    return mha.project_kv(h, h)


def change(base: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """1 - cos between base (1, T, D) and each of N moved copies (N, T, D) -> (T, N)."""
    return (1.0 - F.cosine_similarity(base, moved, dim=-1)).clamp(min=0).T  # (T, N)


@torch.no_grad()
def encoder_matrix(layer, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
    """One encoder layer's value-zeroing matrix (S, S) at its input x (1, S, D)."""
    mha = layer.attention
    kv = zeroed_values(*kv_of(layer.addnorm1, mha, x))  # (N, H, S, Dh) each

    def run(kv_pair):
        h = layer.addnorm1(
            x.expand(kv_pair[0].size(0), -1, -1), lambda q: mha(q, None, None, src_mask, kv=kv_pair)
        )[0]
        return layer.addnorm2(h, lambda q: (layer.ffn(q), None))[0]  # (N, S, D)

    base = run(kv_of(layer.addnorm1, mha, x))  # (1, S, D)
    return normalised(change(base, run(kv)))  # (S, S)


def _decoder_layer(layer, x, memory, p: Record, self_kv, cross_kv):
    """A decoder layer at input x (N, T, D) with given projected keys/values: (N, T, D)."""
    y = layer.addnorm1(x, lambda q: layer.self_attention(q, None, None, p.tgt_mask, kv=self_kv))[0]
    y = layer.addnorm2(y, lambda q: layer.cross_attention(q, None, None, p.src_mask, kv=cross_kv))[
        0
    ]
    return ffn_sublayer(layer, y)


@torch.no_grad()
def decoder_step(layer, x: torch.Tensor, p: Record) -> DecoderStep:
    """One decoder layer's value-zeroing step at its input x (1, T, D)."""
    T, S = x.size(1), p.memory.size(1)
    self_kv = kv_of(layer.addnorm1, layer.self_attention, x)  # (1, H, T, Dh) each
    cross_kv = kv_of(layer.addnorm2, layer.cross_attention, x, p.memory)  # (1, H, S, Dh)
    base = _decoder_layer(layer, x, p.memory, p, self_kv, cross_kv)  # (1, T, D)
    zs, zc = zeroed_values(*self_kv), zeroed_values(*cross_kv)
    same_self = tuple(t.expand(S, -1, -1, -1) for t in self_kv)  # (S, H, T, Dh)
    same_cross = tuple(t.expand(T, -1, -1, -1) for t in cross_kv)  # (T, H, S, Dh)
    kv_self = tuple(torch.cat(pair) for pair in zip(zs, same_self))  # (T + S, H, T, Dh)
    kv_cross = tuple(torch.cat(pair) for pair in zip(same_cross, zc))  # (T + S, H, S, Dh)
    moved = _decoder_layer(layer, x.expand(T + S, -1, -1), p.memory, p, kv_self, kv_cross)
    moved_by = change(base, moved)  # (T, T + S)
    moved_by[:, :T] *= p.tgt_mask[0, 0]  # a later token moves nothing but float noise
    rows = normalised(moved_by)  # (T, T + S)
    return DecoderStep(rows[:, :T], rows[:, T:])


def value_zeroing_steps(model, p: Record) -> tuple[list[torch.Tensor], list[DecoderStep]]:
    """Every layer's value-zeroing mixing: encoder matrices (S, S) and decoder steps."""
    encoder = [
        encoder_matrix(layer, x, p.src_mask)
        for layer, x in zip(model.encoder.layers, p.encoder_inputs)
    ]
    decoder = [decoder_step(layer, x, p) for layer, x in zip(model.decoder.layers, p.self_inputs)]
    return encoder, decoder
