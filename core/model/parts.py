"""What the one interface (``core.model.interface``) hands out, whatever the family: a sentence
as a model reads it, a sentence pair in pieces, one attention's weights and the norm around it,
a one-sequence model's queries and keys over its whole sequence.

Shape key: D model width, H heads, Dh head width, Tq queries, Tk keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

LANGUAGE_CODE = re.compile(  # how tokenizers write a language code: M2M100 __fr__, NLLB
    r"^(__[a-z]{2,3}(_[A-Za-z]+)?__|[a-z]{2,3}_[A-Z][a-z]{3}|>>[a-z_]{2,8}<<)$"
)  # fra_Latn, multi-target Marian >>fra<<


@dataclass
class Source:
    """A sentence as a model reads it."""

    ids: list[int]  # what the encoder reads, the end token (and any language code) included
    tokens: list[str]  # the same as shown tokens
    unknown: list[bool]  # True where the token is the unknown one
    notes: list[str]  # what the user should know (words cut, unknown words)


@dataclass
class WordPair:
    """A sentence pair in pieces, each piece knowing its word."""

    src_ids: list[int]  # what the encoder reads (specials included)
    out_ids: list[int]  # the decoder's outputs: specials first, the pieces, the end token
    src_words: list[int]  # the word index of each source piece
    tgt_words: list[int]  # the word index of each target piece
    src_start: int  # where the source pieces start in src_ids (after leading specials)
    tgt_start: int  # where the target pieces start in out_ids

    def source_columns(self) -> slice:
        """The source pieces and the end token after them."""
        return slice(self.src_start, self.src_start + len(self.src_words) + 1)

    def target_rows(self) -> slice:
        """The steps that write the target pieces, then the end token."""
        return slice(self.tgt_start, self.tgt_start + len(self.tgt_words) + 1)


@dataclass
class AttentionWeights:
    """One attention module's projections, per head: what q, k, v and W_o are made of."""

    W_q: torch.Tensor  # (H * Dh, D) as nn.Linear holds it
    b_q: torch.Tensor  # (H * Dh,) zeros where the module has no bias
    W_k: torch.Tensor  # (H_kv * Dh, D)
    b_k: torch.Tensor
    W_v: torch.Tensor  # (H_kv * Dh, D)
    b_v: torch.Tensor
    W_o: torch.Tensor  # (D, H * Dh)
    b_o: torch.Tensor  # (D,)
    heads: int  # H
    head_width: int  # Dh
    scale: float  # what q·k is multiplied by: 1/sqrt(Dh), or 1 (T5)

    def head_values(self, u: torch.Tensor) -> torch.Tensor:
        """f^h(u_j) = (u_j W_V^h + b_V^h) W_O^h for each head: u (Tk, D) -> (H, Tk, D)."""
        H, Dh = self.heads, self.head_width
        v = (u @ self.W_v.T + self.b_v).view(-1, H, Dh).transpose(0, 1)  # (H, Tk, Dh)
        w_o = self.W_o.view(self.W_o.size(0), H, Dh).permute(1, 2, 0)  # (H, Dh, D)
        return v @ w_o  # (H, Tk, D)

    def head_queries_keys(self, queries: torch.Tensor, keys: torch.Tensor, head: int):
        """One head's queries (Tq, Dh) and keys (Tk, Dh) from the inputs (Tq, D), (Tk, D)."""
        cut = slice(head * self.head_width, (head + 1) * self.head_width)
        q = queries @ self.W_q[cut].T + self.b_q[cut]  # (Tq, Dh)
        k = keys @ self.W_k[cut].T + self.b_k[cut]  # (Tk, Dh)
        return q, k


@dataclass
class SublayerNorm:
    """The norm around one attention sub-layer."""

    pre: bool  # pre-LN: y = x + attention(norm(x)); post-LN: y = norm(x + attention(x))
    norm: nn.Module  # the norm module (a LayerNorm, or T5's RMSNorm where pre)


def linear_parts(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of a linear layer, zeros for a missing bias."""
    bias = linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)
    return linear.weight, bias


@dataclass
class SequenceHeads:
    """One layer of a decoder-only model over a whole sequence: q and k of every head, before
    and after the rotary embedding, the mask, and the model's own weights."""

    q: torch.Tensor  # (H, N, Dh) queries as the scores use them (rotated where RoPE)
    k: torch.Tensor  # (Hkv, N, Dh) keys as the scores use them
    q_plain: torch.Tensor  # (H, N, Dh) queries before any rotation
    k_plain: torch.Tensor  # (Hkv, N, Dh) keys before any rotation
    scale: float  # what q·k is multiplied by
    mask: torch.Tensor  # (N, N) boolean, True = may attend
    weights: torch.Tensor  # (H, N, N) the model's own attention weights (output_attentions)
    rotary: bool  # whether q and k are rotated by position (RoPE)
    window: int | None = None  # a sliding window: the keys a query sees at most

    @property
    def group(self) -> int:
        """Query heads per key/value head (1: every head its own keys)."""
        return self.q.size(0) // self.k.size(0)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads."""
        return head // self.group

    def sharing(self, head: int) -> list[int]:
        """The query heads that read the same keys as ``head`` (itself included)."""
        g = self.group
        return list(range(self.kv_head(head) * g, (self.kv_head(head) + 1) * g))
