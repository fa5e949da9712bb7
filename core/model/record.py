"""The recorded pass: what the analysis layer reads of one teacher-forced pass.

``record(model, src, tgt_in)`` calls the model's own modules in the model's own order (the
``Encoder.forward`` and ``DecoderLayer.forward`` sequence, on the explicit attention path) and
keeps what its forward does not: every attention's queries, keys, mask and weights, every
sub-layer's input and output, every decoder layer's output. What it computes is what
``Transformer.forward(..., need_weights=True)`` computes (tested).

This is the model's interface to the analysis code, like TransformerLens's
``run_with_cache``: the q·k view and the logit lens (``core.attention``), rollout, the
norm-based method, ALTI+, value zeroing, the gradient methods and faithfulness
(``core.attribution``), alignment (``core.alignment``) and the heads over training read a
``Record`` and the functions below, never the forward order itself. Another family of
models fits behind the analysis code by giving the same record.

Shape key: B batch, S source tokens (with <eos>), T decoder steps (inputs <bos> +
output[:-1]), D model width, H heads, V target vocabulary, L layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from core.corpus.vocab import Vocab
from core.model.transformer import (
    AddNorm,
    AttentionMaps,
    MultiHeadAttention,
    Transformer,
    evaluating,
)

KINDS = ("encoder", "decoder_self", "cross")  # the attention kinds, in the model's order
SUBLAYERS = ("encoder_attention", "encoder_ffn", "decoder_self", "cross", "decoder_ffn")


@dataclass
class AttentionRecord:
    """What one attention sub-layer read, and how it attended."""

    queries: torch.Tensor  # (B, Tq, D): the sub-layer's input (layer-normed first if pre-LN)
    keys: torch.Tensor  # (B, Tk, D): the same for self-attention, the memory for cross
    mask: torch.Tensor  # boolean, broadcastable to (B, 1, Tq, Tk); True = may attend
    weights: torch.Tensor  # (B, H, Tq, Tk)


@dataclass
class Sublayer:
    """One residual sub-layer: the stream before it, and after its AddNorm."""

    input: torch.Tensor  # (B, T, D)
    output: torch.Tensor  # (B, T, D)


@dataclass
class Record:
    """One teacher-forced pass, batch first, as the analysis layer reads it."""

    src: torch.Tensor  # (B, S) source ids, <eos> included
    tgt_in: torch.Tensor  # (B, T) decoder inputs: <bos> + output[:-1]
    src_mask: torch.Tensor  # (B, 1, 1, S)
    tgt_mask: torch.Tensor  # (B, 1, T, T)
    attention: dict[str, list[AttentionRecord]]  # kind (KINDS) -> one per layer
    sublayers: dict[str, list[Sublayer]]  # name (SUBLAYERS) -> one per layer
    memory: torch.Tensor  # (B, S, D) the encoder's output
    decoder_outputs: list[torch.Tensor]  # L x (B, T, D) each decoder layer's output
    logits: torch.Tensor  # (B, T, V)
    out_ids: torch.Tensor | None = field(default=None)  # (B, T) the tokens predicted, if given

    @property
    def encoder_inputs(self) -> list[torch.Tensor]:
        """L x (B, S, D): the input of each encoder layer."""
        return [s.input for s in self.sublayers["encoder_attention"]]

    @property
    def self_inputs(self) -> list[torch.Tensor]:
        """L x (B, T, D): the input of each decoder layer (its self-attention sub-layer)."""
        return [s.input for s in self.sublayers["decoder_self"]]

    @property
    def cross_inputs(self) -> list[torch.Tensor]:
        """L x (B, T, D): the input of each cross-attention sub-layer."""
        return [s.input for s in self.sublayers["cross"]]

    @property
    def source_length(self) -> int:
        """S, the number of source tokens."""
        return self.src.size(1)

    @property
    def output_length(self) -> int:
        """T, the number of decoder steps."""
        return self.tgt_in.size(1)

    @property
    def logp(self) -> torch.Tensor:
        """(T,) the log-probability of each of the first sentence's ``out_ids``."""
        logp = self.logits[0].float().log_softmax(-1)  # (T, V)
        return logp.gather(-1, self.out_ids[0][:, None])[:, 0]

    def maps(self) -> AttentionMaps:
        """The weights of every kind, stacked: (L, B, H, Tq, Tk) each."""
        stacked = (torch.stack([a.weights for a in self.attention[k]]) for k in KINDS)
        return AttentionMaps(*stacked)


# ----------------------------------------------------------------------------- the pieces


def embed_source(model: Transformer, src: torch.Tensor) -> torch.Tensor:
    """(B, S) ids -> (B, S, D) token embeddings (before the sqrt(D) scale and positions)."""
    return model.encoder.embedding(src)


def embed_target(model: Transformer, tgt_in: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T, D) token embeddings of the decoder inputs."""
    return model.decoder.embedding(tgt_in)


def encoder_input(model: Transformer, embeddings: torch.Tensor) -> torch.Tensor:
    """(B, S, D) token embeddings -> the first encoder layer's input: e sqrt(D) + positions."""
    enc = model.encoder
    return enc.pos_encoding(embeddings * math.sqrt(enc.d_model))  # (B, S, D)


def decoder_input(model: Transformer, embeddings: torch.Tensor) -> torch.Tensor:
    """(B, T, D) token embeddings -> the first decoder layer's input."""
    dec = model.decoder
    return dec.pos_encoding(embeddings * math.sqrt(dec.d_model))  # (B, T, D)


def self_sublayer(layer, x, tgt_mask):
    """A decoder layer's masked self-attention sub-layer (AddNorm included): (B, T, D)."""
    return layer.addnorm1(x, lambda h: layer.self_attention(h, h, h, tgt_mask))[0]


def cross_sublayer(layer, x, memory, src_mask):
    """A decoder layer's cross-attention sub-layer (AddNorm included): (B, T, D)."""
    return layer.addnorm2(x, lambda h: layer.cross_attention(h, memory, memory, src_mask))[0]


def ffn_sublayer(layer, x):
    """A decoder layer's last sub-layer, the position-wise FFN with its AddNorm: (B, T, D)."""
    return layer.addnorm3(x, lambda h: (layer.ffn(h), None))[0]


def forward_from_embeddings(model, src_emb, tgt_emb, src_mask, tgt_mask) -> torch.Tensor:
    """Token embeddings (B, S, D), (B, T, D) -> log-probabilities (B, T, V), as the model
    computes them (what the gradient methods differentiate)."""
    x = encoder_input(model, src_emb)  # (B, S, D)
    for layer in model.encoder.layers:
        x, _ = layer(x, src_mask)  # (B, S, D)
    memory = model.encoder.final_ln(x)
    y = decoder_input(model, tgt_emb)  # (B, T, D)
    for layer in model.decoder.layers:
        y = ffn_sublayer(
            layer, cross_sublayer(layer, self_sublayer(layer, y, tgt_mask), memory, src_mask)
        )
    logits = model.decoder.dense(model.decoder.final_ln(y))  # (B, T, V)
    return logits.float().log_softmax(-1)


def forced_logits(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """(B, T, V) the logits of a teacher-forced batch, nothing recorded (the fast path: what
    the loss-based analyses need, many sentences at a time)."""
    logits, _ = model(src, tgt_in)
    return logits


def attention_module(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    """The MultiHeadAttention of one kind and layer (ValueError for a wrong kind or layer)."""
    if kind not in KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; use {', '.join(KINDS)}")
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


# ----------------------------------------------------------------------------- the pass


class _Recording:
    """What ``record`` keeps as it goes: the attention and sub-layer records."""

    def __init__(self):
        self.attention: dict[str, list[AttentionRecord]] = {k: [] for k in KINDS}
        self.sublayers: dict[str, list[Sublayer]] = {name: [] for name in SUBLAYERS}

    def attend(self, kind, name, addnorm: AddNorm, mha, x, keys, mask) -> torch.Tensor:
        """One attention sub-layer on x (B, Tq, D) (``keys`` None: self-attention), recorded:
        the very tensors the attention reads (AddNorm hands it x, or its layer norm)."""
        read = {}

        def attention(q):  # (B, Tq, D) -> (B, Tq, D), (B, H, Tq, Tk)
            read["q"], read["k"] = q, q if keys is None else keys  # self: one tensor, as the model
            return mha(read["q"], read["k"], read["k"], mask, True)

        y, w = addnorm(x, attention)  # (B, Tq, D), (B, H, Tq, Tk)
        self.attention[kind].append(AttentionRecord(read["q"], read["k"], mask, w))
        self.sublayers[name].append(Sublayer(x, y))
        return y

    def feed_forward(self, name, addnorm: AddNorm, ffn, x) -> torch.Tensor:
        """One position-wise FFN sub-layer on x (B, T, D), recorded."""
        y, _ = addnorm(x, lambda h: (ffn(h), None))  # (B, T, D)
        self.sublayers[name].append(Sublayer(x, y))
        return y


def record(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, out_ids=None) -> Record:
    """Teacher-force ``tgt_in`` (B, T) after ``src`` (B, S), recording every part (the
    caller chooses eval mode and gradients); ``out_ids`` (B, T): the tokens predicted."""
    src_mask, tgt_mask = model.src_mask(src), model.tgt_mask(tgt_in)
    rec = _Recording()
    x = encoder_input(model, embed_source(model, src))  # (B, S, D)
    for layer in model.encoder.layers:
        x = rec.attend(
            "encoder", "encoder_attention", layer.addnorm1, layer.attention, x, None, src_mask
        )
        x = rec.feed_forward("encoder_ffn", layer.addnorm2, layer.ffn, x)
    memory = model.encoder.final_ln(x)  # (B, S, D)
    y, outputs = decoder_input(model, embed_target(model, tgt_in)), []  # (B, T, D)
    for layer in model.decoder.layers:
        y = rec.attend(
            "decoder_self", "decoder_self", layer.addnorm1, layer.self_attention, y, None, tgt_mask
        )
        y = rec.attend("cross", "cross", layer.addnorm2, layer.cross_attention, y, memory, src_mask)
        y = rec.feed_forward("decoder_ffn", layer.addnorm3, layer.ffn, y)
        outputs.append(y)
    logits = model.decoder.dense(model.decoder.final_ln(y))  # (B, T, V)
    return Record(
        src,
        tgt_in,
        src_mask,
        tgt_mask,
        rec.attention,
        rec.sublayers,
        memory,
        outputs,
        logits,
        out_ids,
    )


@torch.no_grad()
def teacher_forced(model: Transformer, src_ids: Sequence[int], out_ids: Sequence[int]) -> Record:
    """The record of one sentence: ``out_ids`` teacher-forced after ``src_ids`` (lists of ids,
    <eos> included), in eval mode; its ``logp`` is each output token's log-probability."""
    if not len(out_ids):
        raise ValueError("There is no output to feed the decoder: translate a sentence first.")
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    out = torch.tensor([list(out_ids)], device=device)  # (1, T)
    tgt_in = torch.cat([torch.full_like(out[:, :1], Vocab.bos_id), out[:, :-1]], dim=1)  # (1, T)
    with evaluating(model):
        return record(model, src, tgt_in, out)
