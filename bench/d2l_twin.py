"""A plain PyTorch transcription of d2l.ai's Transformer (chapter 11.7), for the benchmarks.

Written the way the book writes it: ``masked_softmax`` over ``valid_lens``, heads folded
into the batch by ``transpose_qkv`` / ``transpose_output``, bias-free attention
projections, post-LN ``AddNorm``, embeddings scaled by sqrt(num_hiddens), the output
projection over every target position and a cross-entropy masked at <pad> afterwards
(d2l's ``Seq2Seq.loss``), here with label smoothing so that it matches our objective.

Shape key: B batch, S source length, T target length, D num_hiddens, H heads,
Dh head width (D // H), V target vocabulary.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from core.model.config import ModelConfig


def sequence_mask(X, valid_len, value=0.0):
    """Set the entries of each row of X (N, K) at or past its valid length to ``value``."""
    maxlen = X.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value  # (N, K), in place as the book does
    return X


def masked_softmax(X, valid_lens):
    """Softmax over the last axis of X (B*H, Tq, Tk), keys past ``valid_lens`` masked out."""
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])  # (B*H*Tq,)
    else:
        valid_lens = valid_lens.reshape(-1)  # (B*H*Tq,)
    X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)  # (B*H*Tq, Tk)
    return F.softmax(X.reshape(shape), dim=-1)  # (B*H, Tq, Tk)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention; keeps its weights on ``attention_weights``."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None):
        """queries (B*H, Tq, Dh), keys/values (B*H, Tk, Dh) -> (B*H, Tq, Dh)."""
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)  # (B*H, Tq, Tk)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)  # (B*H, Tq, Dh)


class MultiHeadAttention(nn.Module):
    """d2l's multi-head attention: heads folded into the batch axis."""

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float, bias: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        """queries (B, Tq, D), keys/values (B, Tk, D), valid_lens (B,) or (B, Tq) -> (B, Tq, D)."""
        queries = self.transpose_qkv(self.W_q(queries))  # (B*H, Tq, Dh)
        keys = self.transpose_qkv(self.W_k(keys))  # (B*H, Tk, Dh)
        values = self.transpose_qkv(self.W_v(values))  # (B*H, Tk, Dh)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, self.num_heads, dim=0)  # (B*H, ...)
        output = self.attention(queries, keys, values, valid_lens)  # (B*H, Tq, Dh)
        return self.W_o(self.transpose_output(output))  # (B, Tq, D)

    def transpose_qkv(self, X):
        """(B, T, D) -> (B*H, T, Dh)."""
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)  # (B, T, H, Dh)
        X = X.permute(0, 2, 1, 3)  # (B, H, T, Dh)
        return X.reshape(-1, X.shape[2], X.shape[3])  # (B*H, T, Dh)

    def transpose_output(self, X):
        """(B*H, T, Dh) -> (B, T, D)."""
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])  # (B, H, T, Dh)
        X = X.permute(0, 2, 1, 3)  # (B, T, H, Dh)
        return X.reshape(X.shape[0], X.shape[1], -1)  # (B, T, D)


class PositionalEncoding(nn.Module):
    """The sinusoidal table P added to the (scaled) embeddings, then dropout."""

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, num_hiddens))  # (1, max_len, D)
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
        )  # (max_len, D / 2)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        """(B, T, D) -> (B, T, D)."""
        X = X + self.P[:, : X.shape[1], :].to(X.device)  # (B, T, D)
        return self.dropout(X)


class PositionWiseFFN(nn.Module):
    """dense1, ReLU, dense2 at every position."""

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int):
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)

    def forward(self, X):
        """(B, T, D) -> (B, T, D)."""
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """Residual connection followed by layer normalisation (post-LN)."""

    def __init__(self, num_hiddens: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def forward(self, X, Y):
        """X, Y (B, T, D) -> (B, T, D)."""
        return self.ln(self.dropout(Y) + X)


class TransformerEncoderBlock(nn.Module):
    """Self-attention and FFN, each inside AddNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.addnorm1 = AddNorm(cfg.d_model, cfg.dropout)
        self.ffn = PositionWiseFFN(cfg.d_model, cfg.d_ff)
        self.addnorm2 = AddNorm(cfg.d_model, cfg.dropout)

    def forward(self, X, valid_lens):
        """X (B, S, D), valid_lens (B,) -> (B, S, D)."""
        Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


class TransformerEncoder(nn.Module):
    """Embedding x sqrt(D), positional encoding, encoder blocks."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_hiddens = cfg.d_model
        self.embedding = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.pos_encoding = PositionalEncoding(cfg.d_model, cfg.dropout)
        self.blks = nn.Sequential()
        for i in range(cfg.num_encoder_layers):
            self.blks.add_module(f"block{i}", TransformerEncoderBlock(cfg))

    def forward(self, X, valid_lens):
        """X (B, S) ids, valid_lens (B,) -> (B, S, D); weights kept on attention_weights."""
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))  # (B, S, D)
        self.attention_weights = [None] * len(self.blks)
        for i, blk in enumerate(self.blks):
            X = blk(X, valid_lens)
            self.attention_weights[i] = blk.attention.attention.attention_weights
        return X


class TransformerDecoderBlock(nn.Module):
    """Masked self-attention, encoder-decoder attention, FFN, each inside AddNorm."""

    def __init__(self, cfg: ModelConfig, i: int):
        super().__init__()
        self.i = i
        self.attention1 = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.addnorm1 = AddNorm(cfg.d_model, cfg.dropout)
        self.attention2 = MultiHeadAttention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.addnorm2 = AddNorm(cfg.d_model, cfg.dropout)
        self.ffn = PositionWiseFFN(cfg.d_model, cfg.d_ff)
        self.addnorm3 = AddNorm(cfg.d_model, cfg.dropout)

    def forward(self, X, state):
        """X (B, T, D), state [enc_outputs, enc_valid_lens, per-block keys] -> (X, state)."""
        enc_outputs, enc_valid_lens = state[0], state[1]
        past = state[2][self.i]  # keys of earlier steps (prediction), None in training
        key_values = X if past is None else torch.cat((past, X), dim=1)  # (B, Tpast + T, D)
        state[2][self.i] = key_values
        if self.training:
            batch_size, num_steps, _ = X.shape
            dec_valid_lens = torch.arange(1, num_steps + 1, device=X.device).repeat(
                batch_size, 1
            )  # (B, T): query t sees keys 1..t
        else:
            dec_valid_lens = None
        Y = self.addnorm1(X, self.attention1(X, key_values, key_values, dec_valid_lens))
        Z = self.addnorm2(Y, self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens))
        return self.addnorm3(Z, self.ffn(Z)), state


class TransformerDecoder(nn.Module):
    """Embedding x sqrt(D), positional encoding, decoder blocks, dense to the vocabulary."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_hiddens = cfg.d_model
        self.num_blks = cfg.num_decoder_layers
        self.embedding = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.pos_encoding = PositionalEncoding(cfg.d_model, cfg.dropout)
        self.blks = nn.Sequential()
        for i in range(cfg.num_decoder_layers):
            self.blks.add_module(f"block{i}", TransformerDecoderBlock(cfg, i))
        self.dense = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        """The decoder state: encoder outputs, their valid lengths, per-block past keys."""
        return [enc_outputs, enc_valid_lens, [None] * self.num_blks]

    def forward(self, X, state):
        """X (B, T) ids -> (logits (B, T, V), state)."""
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))  # (B, T, D)
        self._attention_weights = [[None] * len(self.blks) for _ in range(2)]
        for i, blk in enumerate(self.blks):
            X, state = blk(X, state)
            self._attention_weights[0][i] = blk.attention1.attention.attention_weights
            self._attention_weights[1][i] = blk.attention2.attention.attention_weights
        return self.dense(X), state  # (B, T, V)


class D2LTransformer(nn.Module):
    """d2l's Seq2Seq(TransformerEncoder, TransformerDecoder) with the bench's loss interface."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = TransformerEncoder(cfg)
        self.decoder = TransformerDecoder(cfg)

    def forward(self, src, tgt_in):
        """src (B, S), tgt_in (B, T) -> (logits (B, T, V), None)."""
        src_valid_len = (src != self.cfg.pad_id).sum(dim=1)  # (B,), pairs are right-padded
        enc_outputs = self.encoder(src, src_valid_len)  # (B, S, D)
        state = self.decoder.init_state(enc_outputs, src_valid_len)
        return self.decoder(tgt_in, state)[0], None

    def loss(self, src, tgt_in, tgt_out, label_smoothing=0.0):
        """d2l's Seq2Seq.loss: per-token cross-entropy over all positions, masked at <pad>."""
        Y_hat, _ = self(src, tgt_in)  # (B, T, V)
        per_token = F.cross_entropy(
            Y_hat.reshape(-1, Y_hat.shape[-1]),
            tgt_out.reshape(-1),
            reduction="none",
            label_smoothing=label_smoothing,
        )  # (B*T,)
        mask = (tgt_out.reshape(-1) != self.cfg.pad_id).type(torch.float32)  # (B*T,)
        return (per_token * mask).sum() / mask.sum()
