"""The building blocks of the d2l / "Attention Is All You Need" Transformer: scaled dot-product
attention, sinusoidal positions, multi-head attention, the position-wise FFN and add & norm.

Shape key: B batch, Tq queries, Tk keys, D model width (d_model), H heads, Dh head width
(D // H), F feed-forward width.

Attention weights are returned explicitly when asked (``need_weights=True``); otherwise the
fused ``F.scaled_dot_product_attention`` path is used (the trade-offs: ``core.model.transformer``).
Each activation the analysis reads passes through a ``HookPoint`` the module holds
(``core.model.hooks``); the model names them (``Transformer.hook_points``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from core.model.dropout import Dropout, dropout
from core.model.hooks import HookPoint


def subsequent_mask(size: int, device=None) -> torch.Tensor:
    """Boolean (size, size) mask, True where query i may attend to key j (j <= i)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def attention(q, k, v, mask=None, p: float = 0.0, training: bool = False, masks="bits"):
    """Scaled dot-product attention returning ``(out, weights)``.

    Args:
        q: (B, H, Tq, Dh) queries; k, v: (B, H, Tk, Dh) keys and values.
        mask: boolean, broadcastable to (B, H, Tq, Tk); True = may attend.
    Returns:
        out (B, H, Tq, Dh) and the softmax weights (B, H, Tq, Tk), exactly 0 where masked.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    dropped = dropout(weights, p, training, masks)  # (B, H, Tq, Tk)
    return dropped @ v, weights  # (B, H, Tq, Dh), (B, H, Tq, Tk)


class PositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal position table, then dropout."""

    def __init__(self, d_model: int, dropout: float, max_len: int, masks: str = "bits"):
        super().__init__()
        self.dropout = Dropout(dropout, masks)
        table = torch.zeros(max_len, d_model)  # (max_len, D), on the device in force
        if table.device.type != "meta":  # a size count needs no values (see ``embedding``)
            pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
            div = torch.pow(10000, torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
            table[:, 0::2] = torch.sin(pos / div)
            table[:, 1::2] = torch.cos(pos / div[: d_model // 2])
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D), positions starting at ``offset``."""
        if offset + x.size(1) > self.table.size(0):
            raise ValueError(
                f"sequence of {offset + x.size(1)} positions exceeds max_len "
                f"{self.table.size(0)} of the positional encoding"
            )
        return self.dropout(x + self.table[offset : offset + x.size(1)])


def packed_linear(x: torch.Tensor, *layers: nn.Linear) -> tuple[torch.Tensor, ...]:
    """Several nn.Linear of one input in one matrix product: n views (B, T, D_out)."""
    weight = torch.cat([m.weight for m in layers])  # (n D_out, D)
    bias = torch.cat([m.bias for m in layers])  # (n D_out,)
    return F.linear(x, weight, bias).chunk(len(layers), dim=-1)  # n x (B, T, D_out)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with W_q, W_k, W_v, W_o projections (stacked when inputs agree)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, masks: str = "bits"):
        super().__init__()
        self.num_heads, self.dropout, self.masks = num_heads, dropout, masks
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.hook_queries = HookPoint("queries")  # (B, Tq, D)
        self.hook_keys = HookPoint("keys")  # (B, Tk, D)
        self.hook_q = HookPoint("q")  # (B, Tq, H, Dh) the queries, per head
        self.hook_k = HookPoint("k")  # (B, Tk, H, Dh) the keys, per head
        self.hook_v = HookPoint("v")  # (B, Tk, H, Dh)
        self.hook_pattern = HookPoint("pattern")  # (B, H, Tq, Tk), the explicit path only
        self.hook_z = HookPoint("z")  # (B, Tq, H, Dh)
        self.hook_out = HookPoint("out")  # (B, Tq, D)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, Dh)."""
        B, T, D = x.shape
        return x.view(B, T, self.num_heads, D // self.num_heads).transpose(1, 2)

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor):
        """Keys and values projected and split: two (B, H, Tk, Dh)."""
        if keys is values:  # memory or self-attention: W_k and W_v in one product
            return [self.split_heads(x) for x in packed_linear(keys, self.W_k, self.W_v)]
        return self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))

    def project(self, queries, keys, values, kv=None):
        """q (B, H, Tq, Dh) and k, v (B, H, Tk, Dh); ``kv`` gives k, v already projected."""
        if kv is None and queries is keys is values:  # self-attention: one product
            q, k, v = packed_linear(queries, self.W_q, self.W_k, self.W_v)  # (B, T, D) each
            return self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k, v = kv if kv is not None else self.project_kv(keys, values)  # (B, H, Tk, Dh)
        return self.split_heads(self.W_q(queries)), k, v

    def hooked_inputs(self, queries, keys, values):
        """The inputs through their hook sites (keys only where they are not the queries);
        values that are the keys' tensor stay the hooked keys' tensor, others stay apart."""
        hooked = self.hook_queries(queries)
        if keys is queries:  # self-attention: one tensor
            return hooked, hooked, hooked if values is keys else values
        if keys is None:  # keys and values come projected (a cache)
            return hooked, keys, values
        memory = self.hook_keys(keys)
        return hooked, memory, memory if values is keys else values

    def forward(self, queries, keys, values, mask=None, need_weights=False, kv=None):
        """queries (B, Tq, D), keys/values (B, Tk, D) -> (out (B, Tq, D), weights|None).

        ``kv`` gives already projected (k, v) of shape (B, H, Tk, Dh), e.g. from a cache.
        """
        queries, keys, values = self.hooked_inputs(queries, keys, values)
        q, k, v = self.project(queries, keys, values, kv)  # (B, H, Tq|Tk, Dh)
        q, k, v = (self.per_head(point, x) for point, x in zip(self.heads_points(), (q, k, v)))
        p = self.dropout if self.training else 0.0
        if need_weights or (self.training and self.masks == "bits" and q.device.type == "cpu"):
            out, weights = attention(q, k, v, mask, p, self.training, self.masks)
            weights = self.hook_pattern(weights)  # (B, H, Tq, Tk)
            return self.hook_out(self.W_o(self.merge_heads(out))), weights if need_weights else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.hook_out(self.W_o(self.merge_heads(out))), None

    def heads_points(self) -> tuple[HookPoint, HookPoint, HookPoint]:
        """The q, k and v sites, in that order."""
        return self.hook_q, self.hook_k, self.hook_v

    @staticmethod
    def per_head(point: HookPoint, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, Dh) x through ``point`` as (B, T, H, Dh), where a hook is on (else x)."""
        return point(x.transpose(1, 2)).transpose(1, 2) if point.on() else x  # (B, H, T, Dh)

    def merge_heads(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, Tq, Dh) -> (B, Tq, D), each head's output through the ``z`` site first."""
        B, H, Tq, Dh = out.shape
        z = self.hook_z(out.transpose(1, 2))  # (B, Tq, H, Dh)
        return z.reshape(B, Tq, H * Dh)  # (B, Tq, D)


class PositionWiseFFN(nn.Module):
    """Two linear layers with a ReLU between, applied at each position."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.dense1 = nn.Linear(d_model, d_ff)
        self.dense2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.dense2(F.relu(self.dense1(x)))


class AddNorm(nn.Module):
    """Residual connection and layer norm around a sublayer (post-LN or pre-LN)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, masks: str = "bits"):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout, masks)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer):
        """Apply ``sublayer`` (returns (y, extra)) with residual and norm; -> (x', extra)."""
        if self.norm_first:
            y, extra = sublayer(self.ln(x))
            return x + self.dropout(y), extra
        y, extra = sublayer(x)
        return self.ln(x + self.dropout(y)), extra
