"""One teacher-forced pass of one sentence, keeping the input of every sub-layer.

The attribution methods decompose each sub-layer of this pass (``core.attribution.terms``)
or re-run one layer with a token's values zeroed (``core.attribution.value_zeroing``); they
need what went into each sub-layer, which the model's own forward does not keep.
``run_pass`` calls the model's own modules in the model's own order, and a test checks that
its log-probabilities equal ``Transformer.forward``'s.

Shape key: S source tokens (with <eos>), T output tokens (decoder inputs: <bos> +
output[:-1]), D model width, L layers, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from core.corpus.vocab import Vocab
from core.model.transformer import Transformer


@dataclass
class Pass:
    """The inputs of every sub-layer of one sentence's teacher-forced pass (batch of one)."""

    src: torch.Tensor  # (1, S) source ids, <eos> included
    tgt_in: torch.Tensor  # (1, T) decoder inputs: <bos> + output[:-1]
    out_ids: torch.Tensor  # (T,) the output tokens whose log-probabilities are explained
    src_mask: torch.Tensor  # (1, 1, 1, S)
    tgt_mask: torch.Tensor  # (1, 1, T, T)
    encoder_inputs: list[torch.Tensor]  # L x (1, S, D): the input of each encoder layer
    memory: torch.Tensor  # (1, S, D) the encoder's output
    self_inputs: list[torch.Tensor]  # L x (1, T, D): the input of each decoder layer
    cross_inputs: list[torch.Tensor]  # L x (1, T, D): the input of each cross sub-layer
    logp: torch.Tensor  # (T,) log-probability of each output token

    @property
    def source_length(self) -> int:
        """S, the number of source tokens."""
        return self.src.size(1)

    @property
    def output_length(self) -> int:
        """T, the number of output tokens."""
        return self.tgt_in.size(1)


def embed_source(model: Transformer, src: torch.Tensor) -> torch.Tensor:
    """(B, S) ids -> (B, S) token embeddings e (before the sqrt(D) scale and positions)."""
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


def encode_recorded(model: Transformer, x: torch.Tensor, src_mask: torch.Tensor):
    """Encoder layers from their first input x (B, S, D) -> (memory, inputs of each layer)."""
    inputs = []
    for layer in model.encoder.layers:
        inputs.append(x)
        x, _ = layer(x, src_mask)  # (B, S, D)
    return model.encoder.final_ln(x), inputs


def decode_recorded(model, y, memory, src_mask, tgt_mask):
    """Decoder layers from their first input y (B, T, D) -> (logits (B, T, V), inputs)."""
    self_inputs, cross_inputs = [], []
    for layer in model.decoder.layers:
        self_inputs.append(y)
        y = self_sublayer(layer, y, tgt_mask)
        cross_inputs.append(y)
        y = cross_sublayer(layer, y, memory, src_mask)
        y = ffn_sublayer(layer, y)  # (B, T, D)
    logits = model.decoder.dense(model.decoder.final_ln(y))  # (B, T, V)
    return logits, self_inputs, cross_inputs


def forward_from_embeddings(model, src_emb, tgt_emb, src_mask, tgt_mask) -> torch.Tensor:
    """Token embeddings (B, S, D), (B, T, D) -> log-probabilities (B, T, V), as the model."""
    memory, _ = encode_recorded(model, encoder_input(model, src_emb), src_mask)
    logits, _, _ = decode_recorded(model, decoder_input(model, tgt_emb), memory, src_mask, tgt_mask)
    return logits.float().log_softmax(-1)  # (B, T, V)


def run_pass(model: Transformer, src_ids, out_ids) -> Pass:
    """Teacher-force ``out_ids`` after ``src_ids`` (lists of ids, <eos> included), recording."""
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    out = torch.tensor(list(out_ids), device=device)  # (T,)
    tgt_in = torch.cat([torch.tensor([Vocab.bos_id], device=device), out[:-1]])[None]  # (1, T)
    src_mask, tgt_mask = model.src_mask(src), model.tgt_mask(tgt_in)
    with torch.no_grad():
        memory, enc_inputs = encode_recorded(
            model, encoder_input(model, embed_source(model, src)), src_mask
        )
        y = decoder_input(model, embed_target(model, tgt_in))  # (1, T, D)
        logits, self_in, cross_in = decode_recorded(model, y, memory, src_mask, tgt_mask)
    logp = logits[0].float().log_softmax(-1).gather(-1, out[:, None])[:, 0]  # (T,)
    return Pass(src, tgt_in, out, src_mask, tgt_mask, enc_inputs, memory, self_in, cross_in, logp)
