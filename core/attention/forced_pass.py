"""One teacher-forced pass of a translation, keeping each attention's inputs and layer outputs.

The "Inside a head" views recompute one head's queries and keys (``core.attention.query_key``)
and project every decoder layer's output through the output layer
(``core.attention.logit_lens``). Both need what the model's own forward does not keep: what
each attention read as queries and keys, and what each decoder layer wrote. ``forced_pass``
calls the model's own modules in the model's own order (the ``Encoder.forward`` and
``DecoderLayer.forward`` sequence) on the explicit attention path (``need_weights=True``), so
what it records is what ``Transformer.forward(..., need_weights=True)`` computes (tested).

Shape key: S source tokens (with <eos>), T decoder steps (inputs <bos> + output[:-1]),
D model width, V target vocabulary, L layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.attention.kinds import kind_labels
from core.corpus.vocab import Vocab
from core.model.transformer import AddNorm, MultiHeadAttention, Transformer, evaluating


@dataclass
class AttentionInput:
    """What one attention sub-layer read: its queries, keys (= values) and mask."""

    queries: torch.Tensor  # (1, Tq, D): the sub-layer's input (layer-normed first if pre-LN)
    keys: torch.Tensor  # (1, Tk, D): the same tensor for self-attention, the memory for cross
    mask: torch.Tensor  # boolean, broadcastable to (1, 1, Tq, Tk); True = may attend


@dataclass
class ForcedPass:
    """One sentence fed through the model by teacher forcing, with what the views need."""

    src: torch.Tensor  # (1, S) source ids, <eos> included
    tgt_in: torch.Tensor  # (1, T) decoder inputs: <bos> + output[:-1]
    inputs: dict[str, list[AttentionInput]]  # kind -> one AttentionInput per layer
    decoder_outputs: list[torch.Tensor]  # L x (1, T, D): each decoder layer's output
    logits: torch.Tensor  # (1, T, V) the model's output


def attention_module(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    """The MultiHeadAttention of one kind and layer (raises ValueError for a wrong layer)."""
    kind_labels(kind)  # raises for an unknown kind
    stack = model.encoder.layers if kind == "encoder" else model.decoder.layers
    if not 0 <= layer < len(stack):
        side = "encoder" if kind == "encoder" else "decoder"
        raise ValueError(
            f"Layer {layer}: this model has {len(stack)} {side} layers (0..{len(stack) - 1})."
        )
    block = stack[layer]
    return {
        "encoder": lambda: block.attention,
        "decoder_self": lambda: block.self_attention,
        "cross": lambda: block.cross_attention,
    }[kind]()


def sublayer_input(addnorm: AddNorm, x: torch.Tensor) -> torch.Tensor:
    """What AddNorm hands its sub-layer: x (post-LN) or its layer norm (pre-LN)."""
    return addnorm.ln(x) if addnorm.norm_first else x


def encode_recorded(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor):
    """Source ids (1, S) -> (memory (1, S, D), each encoder layer's AttentionInput)."""
    enc = model.encoder
    x = enc.pos_encoding(enc.embedding(src) * math.sqrt(enc.d_model))  # (1, S, D)
    inputs = []
    for layer in enc.layers:
        h = sublayer_input(layer.addnorm1, x)  # (1, S, D)
        inputs.append(AttentionInput(h, h, src_mask))
        x, _ = layer(x, src_mask, need_weights=True)  # (1, S, D)
    return enc.final_ln(x), inputs


def layer_recorded(layer, y, memory, src_mask, tgt_mask):
    """One DecoderLayer's forward -> (self AttentionInput, cross AttentionInput, y (1, T, D))."""
    h = sublayer_input(layer.addnorm1, y)  # (1, T, D)
    self_in = AttentionInput(h, h, tgt_mask)
    y, _ = layer.addnorm1(y, lambda h: layer.self_attention(h, h, h, tgt_mask, True))
    cross_in = AttentionInput(sublayer_input(layer.addnorm2, y), memory, src_mask)
    y, _ = layer.addnorm2(y, lambda h: layer.cross_attention(h, memory, memory, src_mask, True))
    y, _ = layer.addnorm3(y, lambda h: (layer.ffn(h), None))  # (1, T, D)
    return self_in, cross_in, y


def decode_recorded(model, tgt_in, memory, src_mask, tgt_mask):
    """Decoder inputs (1, T) -> (self inputs, cross inputs, layer outputs, logits (1, T, V))."""
    dec = model.decoder
    y = dec.pos_encoding(dec.embedding(tgt_in) * math.sqrt(dec.d_model))  # (1, T, D)
    selfs, crosses, outputs = [], [], []
    for layer in dec.layers:
        self_in, cross_in, y = layer_recorded(layer, y, memory, src_mask, tgt_mask)
        selfs.append(self_in)
        crosses.append(cross_in)
        outputs.append(y)
    return selfs, crosses, outputs, dec.dense(dec.final_ln(y))  # logits (1, T, V)


@torch.no_grad()
def forced_pass(model: Transformer, src_ids: Sequence[int], out_ids: Sequence[int]) -> ForcedPass:
    """Teacher-force ``out_ids`` after ``src_ids`` (ids, <eos> included) in eval mode."""
    if not out_ids:
        raise ValueError("There is no output to feed the decoder: translate a sentence first.")
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    tgt_in = torch.tensor([[Vocab.bos_id, *list(out_ids)[:-1]]], device=device)  # (1, T)
    src_mask, tgt_mask = model.src_mask(src), model.tgt_mask(tgt_in)
    with evaluating(model):
        memory, enc_inputs = encode_recorded(model, src, src_mask)
        selfs, crosses, outputs, logits = decode_recorded(model, tgt_in, memory, src_mask, tgt_mask)
    inputs = {"encoder": enc_inputs, "decoder_self": selfs, "cross": crosses}
    return ForcedPass(src, tgt_in, inputs, outputs, logits)
