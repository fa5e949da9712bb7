"""The encoder-decoder Transformer of "Attention Is All You Need" (d2l.ai, chapter 11.7).

Shape key: B batch, S source length, T target length, D model width (d_model),
H heads, Dh head width (D // H), F feed-forward width, V vocabulary size, L layers.

Attention weights are returned explicitly when asked (``need_weights=True``); otherwise
the fused ``F.scaled_dot_product_attention`` path is used. Both give the same outputs.
Training on the CPU takes the explicit path too: there SDPA's backward falls back to its
float32 "math" kernel whenever dropout is on (and its bf16 fused backward was 8x slower
at d2l's shapes), and the explicit path draws its dropout masks cheaply (core.model.dropout).
With ``dropout_masks="bernoulli"`` training keeps SDPA and torch's masks (older runs' path).
Where queries, keys and values are one tensor (self-attention; keys and values for the
memory), W_q, W_k, W_v run as one stacked product; they stay four separate (D, D) linears in
the state_dict.

Every activation the analysis reads passes through a named hook site (``core.model.hooks``:
``encoder.0.self.z``, ``decoder.1.cross.out`` ...), written once here in the forward order:
recording a pass, removing heads (each head's output scaled before W_o), value zeroing,
patching and the embeddings path of the gradient methods are hooks on this one forward.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from core.model.align_loss import AlignTarget, alignment_loss
from core.model.config import ModelConfig
from core.model.dropout import Dropout, dropout
from core.model.hooks import HookPoint
from core.model.output_loss import projected_cross_entropy


@dataclass
class AttentionMaps:
    """Attention weights of one forward pass, stacked over layers."""

    encoder: torch.Tensor | None = None  # (L, B, H, S, S) encoder self-attention
    decoder_self: torch.Tensor | None = None  # (L, B, H, T, T) masked decoder self-attention
    cross: torch.Tensor | None = None  # (L, B, H, T, S) decoder -> encoder attention


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
        self.hook_queries, self.hook_keys = HookPoint(), HookPoint()  # (B, Tq|Tk, D)
        self.hook_v = HookPoint()  # (B, Tk, H, Dh)
        self.hook_pattern = HookPoint()  # (B, H, Tq, Tk), the explicit path only
        self.hook_z = HookPoint()  # (B, Tq, H, Dh)
        self.hook_out = HookPoint()  # (B, Tq, D)

    def name_hooks(self, prefix: str) -> dict[str, HookPoint]:
        """Name this attention's hook sites ``prefix.queries`` ...; {name: hook point}."""
        points = {
            "queries": self.hook_queries,
            "keys": self.hook_keys,
            "v": self.hook_v,
            "pattern": self.hook_pattern,
            "z": self.hook_z,
            "out": self.hook_out,
        }
        for part, point in points.items():
            point.name = f"{prefix}.{part}"
        return {point.name: point for point in points.values()}

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
        if self.hook_v.on():
            v = self.hook_v(v.transpose(1, 2)).transpose(1, 2)  # (B, H, Tk, Dh)
        p = self.dropout if self.training else 0.0
        if need_weights or (self.training and self.masks == "bits" and q.device.type == "cpu"):
            out, weights = attention(q, k, v, mask, p, self.training, self.masks)
            weights = self.hook_pattern(weights)  # (B, H, Tq, Tk)
            return self.hook_out(self.W_o(self.merge_heads(out))), weights if need_weights else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.hook_out(self.W_o(self.merge_heads(out))), None

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


class EncoderLayer(nn.Module):
    """Self-attention and a position-wise FFN, each wrapped in AddNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention = MultiHeadAttention(
            cfg.d_model, cfg.num_heads, cfg.dropout, cfg.dropout_masks
        )
        self.addnorm1 = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.dropout_masks)
        self.ffn = PositionWiseFFN(cfg.d_model, cfg.d_ff)
        self.addnorm2 = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.dropout_masks)
        self.hook_in, self.hook_self_post, self.hook_out = HookPoint(), HookPoint(), HookPoint()

    def name_hooks(self, prefix: str) -> dict[str, HookPoint]:
        """Name this layer's hook sites (``prefix`` = "encoder.0"); {name: hook point}."""
        return _named(
            prefix,
            {"in": self.hook_in, "self.resid_post": self.hook_self_post, "out": self.hook_out},
            {"self": self.attention},
        )

    def forward(self, x, src_mask, need_weights=False):
        """x (B, S, D), src_mask (B, 1, 1, S) -> (x (B, S, D), weights (B, H, S, S)|None)."""
        x = self.hook_in(x)
        x, w = self.addnorm1(x, lambda h: self.attention(h, h, h, src_mask, need_weights))
        x, _ = self.addnorm2(self.hook_self_post(x), lambda h: (self.ffn(h), None))
        return self.hook_out(x), w


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention and FFN, each with AddNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attention = MultiHeadAttention(
            cfg.d_model, cfg.num_heads, cfg.dropout, cfg.dropout_masks
        )
        self.addnorm1 = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.dropout_masks)
        self.cross_attention = MultiHeadAttention(
            cfg.d_model, cfg.num_heads, cfg.dropout, cfg.dropout_masks
        )
        self.addnorm2 = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.dropout_masks)
        self.ffn = PositionWiseFFN(cfg.d_model, cfg.d_ff)
        self.addnorm3 = AddNorm(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.dropout_masks)
        self.hook_in, self.hook_out = HookPoint(), HookPoint()
        self.hook_self_post, self.hook_cross_post = HookPoint(), HookPoint()

    def name_hooks(self, prefix: str) -> dict[str, HookPoint]:
        """Name this layer's hook sites (``prefix`` = "decoder.0"); {name: hook point}."""
        points = {"in": self.hook_in, "self.resid_post": self.hook_self_post}
        points |= {"cross.resid_post": self.hook_cross_post, "out": self.hook_out}
        return _named(prefix, points, {"self": self.self_attention, "cross": self.cross_attention})

    def self_block(self, h, tgt_mask, need_weights, cache):
        """Masked self-attention; with ``cache`` the new keys/values are appended to it."""
        if cache is None:
            return self.self_attention(h, h, h, tgt_mask, need_weights)
        k, v = self.self_attention.project_kv(h, h)  # (B, H, Tnew, Dh)
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)  # (B, H, Tpast + Tnew, Dh)
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        return self.self_attention(h, None, None, tgt_mask, need_weights, kv=(k, v))

    def cross_block(self, h, memory, src_mask, need_weights, cache):
        """Encoder-decoder attention; the memory's keys/values are cached once."""
        if cache is None:
            return self.cross_attention(h, memory, memory, src_mask, need_weights)
        if "mk" not in cache:
            cache["mk"], cache["mv"] = self.cross_attention.project_kv(memory, memory)
        kv = (cache["mk"], cache["mv"])  # (B, H, S, Dh) each
        return self.cross_attention(h, None, None, src_mask, need_weights, kv=kv)

    def forward(
        self, x, memory, src_mask, tgt_mask, need_weights=False, cache=None, need_cross=None
    ):
        """x (B, T, D), memory (B, S, D) -> (x (B, T, D), self (B,H,T,T'), cross (B,H,T,S)).

        ``need_cross`` (default ``need_weights``): the cross-attention weights alone."""
        need_cross = need_weights if need_cross is None else need_cross
        x = self.hook_in(x)
        x, w_self = self.addnorm1(x, lambda h: self.self_block(h, tgt_mask, need_weights, cache))
        x, w_cross = self.addnorm2(
            self.hook_self_post(x),
            lambda h: self.cross_block(h, memory, src_mask, need_cross, cache),
        )
        x, _ = self.addnorm3(self.hook_cross_post(x), lambda h: (self.ffn(h), None))
        return self.hook_out(x), w_self, w_cross


def _named(prefix: str, own: dict[str, HookPoint], attentions: dict) -> dict[str, HookPoint]:
    """Name a layer's own hook points and its attentions' ({name: hook point})."""
    out = {}
    for part, point in own.items():
        point.name = f"{prefix}.{part}"
        out[point.name] = point
    for part, mha in attentions.items():
        out |= mha.name_hooks(f"{prefix}.{part}")
    return out


def _stack(weights: list) -> torch.Tensor | None:
    """Stack the recorded per-layer weights into (L', ...), or None when none was recorded."""
    kept = [w for w in weights if w is not None]
    return torch.stack(kept) if kept else None


def embedding(vocab_size: int, d_model: int) -> nn.Embedding:
    """``nn.Embedding(vocab_size, d_model)``, its N(0, 1) start drawn as nn.Embedding draws
    it (the same random numbers, in the same order), except on the meta device: there
    torch's ``normal_`` imports torch._dynamo, 1.5 s of a fresh server's first page, for a
    model built only to count its parameters (``core.runs.budget``)."""
    weight = torch.empty(vocab_size, d_model)  # (V, D), on the device in force
    if weight.device.type != "meta":
        nn.init.normal_(weight)
    return nn.Embedding(vocab_size, d_model, _weight=weight)


class Encoder(nn.Module):
    """Token embedding x sqrt(D), positional encoding and a stack of EncoderLayers."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_model = cfg.d_model
        self.embedding = embedding(cfg.src_vocab_size, cfg.d_model)
        self.pos_encoding = PositionalEncoding(
            cfg.d_model, cfg.dropout, cfg.max_positions, cfg.dropout_masks
        )
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_encoder_layers))
        self.final_ln = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.hook_embed, self.hook_out = HookPoint("encoder.embed"), HookPoint("encoder.out")

    def forward(self, src, src_mask, need_weights=False):
        """src (B, S) ids, src_mask (B, 1, 1, S) -> (memory (B, S, D), (L, B, H, S, S)|None)."""
        e = self.hook_embed(self.embedding(src))  # (B, S, D) the token embeddings
        x = self.pos_encoding(e * math.sqrt(self.d_model))  # (B, S, D)
        maps = []
        for layer in self.layers:
            x, w = layer(x, src_mask, need_weights)
            maps.append(w)
        return self.hook_out(self.final_ln(x)), _stack(maps)


class Decoder(nn.Module):
    """Target embedding, positional encoding, DecoderLayers and the output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_model = cfg.d_model
        self.embedding = embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.pos_encoding = PositionalEncoding(
            cfg.d_model, cfg.dropout, cfg.max_positions, cfg.dropout_masks
        )
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_decoder_layers))
        self.final_ln = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.dense = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)
        self.hook_embed, self.hook_out = HookPoint("decoder.embed"), HookPoint("decoder.out")

    def forward(
        self,
        tgt,
        memory,
        src_mask,
        tgt_mask,
        need_weights=False,
        cache=None,
        project=True,
        cross_layer=None,
    ):
        """tgt (B, T) ids -> (logits (B, T, V), self (L,B,H,T,T')|None, cross (L,B,H,T,S)|None).

        With ``cache`` (a list with one dict per layer), ``tgt`` holds only new positions.
        With ``project=False`` the final states (B, T, D) come back instead of logits.
        ``cross_layer``: only that layer's cross-attention weights, as (1, B, H, T, S).
        """
        offset = cache[0]["k"].size(2) if cache and "k" in cache[0] else 0
        e = self.hook_embed(self.embedding(tgt))  # (B, T, D) the token embeddings
        x = self.pos_encoding(e * math.sqrt(self.d_model), offset)  # (B, T, D)
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.layers):
            layer_cache = cache[i] if cache is not None else None
            need_cross = need_weights or i == cross_layer
            x, w_self, w_cross = layer(
                x, memory, src_mask, tgt_mask, need_weights, layer_cache, need_cross
            )
            self_maps.append(w_self)
            cross_maps.append(w_cross)
        x = self.hook_out(self.final_ln(x))  # (B, T, D)
        out = self.dense(x) if project else x  # (B, T, V) or (B, T, D)
        return out, _stack(self_maps), _stack(cross_maps)


class Transformer(nn.Module):
    """The encoder-decoder Transformer (EncoderDecoder in the Annotated Transformer)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self._init_weights()
        self._hook_points = self._name_hooks()

    def _name_hooks(self) -> dict[str, HookPoint]:
        """Every hook site of the model by name (``core.model.hooks``), in the forward order."""
        points = {"encoder.embed": self.encoder.hook_embed}
        for i, layer in enumerate(self.encoder.layers):
            points |= layer.name_hooks(f"encoder.{i}")
        points |= {"encoder.out": self.encoder.hook_out, "decoder.embed": self.decoder.hook_embed}
        for i, layer in enumerate(self.decoder.layers):
            points |= layer.name_hooks(f"decoder.{i}")
        return points | {"decoder.out": self.decoder.hook_out}

    def hook_points(self) -> dict[str, HookPoint]:
        """{site name: hook point} of this model (a copy of the model has its own)."""
        return self._hook_points

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix (as the Annotated Transformer does)."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def src_mask(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S) ids -> (B, 1, 1, S) boolean, True at real (non-pad) source tokens."""
        return (src != self.cfg.pad_id)[:, None, None, :]

    def tgt_mask(self, tgt: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, 1, T, T): causal and not padded (keys)."""
        keep = (tgt != self.cfg.pad_id)[:, None, None, :]  # (B, 1, 1, T)
        return keep & subsequent_mask(tgt.size(1), tgt.device)  # (B, 1, T, T)

    def encode(self, src, need_weights=False):
        """src (B, S) -> (memory (B, S, D), src_mask (B,1,1,S), encoder maps|None)."""
        src_mask = self.src_mask(src)
        memory, maps = self.encoder(src, src_mask, need_weights)
        return memory, src_mask, maps

    def forward(self, src, tgt_in, need_weights=False):
        """src (B, S), tgt_in (B, T) -> (logits (B, T, V), AttentionMaps|None)."""
        memory, src_mask, enc_maps = self.encode(src, need_weights)
        logits, self_maps, cross_maps = self.decoder(
            tgt_in, memory, src_mask, self.tgt_mask(tgt_in), need_weights
        )
        maps = AttentionMaps(enc_maps, self_maps, cross_maps) if need_weights else None
        return logits, maps

    def loss(self, src, tgt_in, tgt_out, label_smoothing: float = 0.0) -> torch.Tensor:
        """Mean cross-entropy of tgt_out (B, T) given src (B, S) and tgt_in (B, T)."""
        return self.loss_terms(src, tgt_in, tgt_out, label_smoothing)[0]

    def loss_terms(
        self, src, tgt_in, tgt_out, label_smoothing: float = 0.0, align: AlignTarget | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean cross-entropy, alignment loss of ``align``'s head (0 without one)).

        The output projection runs only at real (non-pad) target positions, fused with the
        loss (``core.model.output_loss``): the (N, V) logits are made once, read once more.
        The alignment loss is ``core.model.align_loss`` (Garg et al. 2019).
        """
        memory, src_mask, _ = self.encode(src)
        layer = align.layer if align is not None else None
        hidden, _, cross = self.decoder(
            tgt_in, memory, src_mask, self.tgt_mask(tgt_in), project=False, cross_layer=layer
        )  # (B, T, D), (1, B, H, T, S) | None
        rows = (tgt_out != self.cfg.pad_id).flatten().nonzero().squeeze(1)  # (N,) real tokens
        real = hidden.flatten(0, 1).index_select(0, rows)  # (N, D)
        target = tgt_out.flatten()[rows]  # (N,)
        ce = projected_cross_entropy(real, self.decoder.dense, target, label_smoothing)
        if align is None:
            return ce, ce.new_zeros(())
        return ce, alignment_loss(cross[0, :, align.head], align.target)

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


@contextmanager
def evaluating(model: nn.Module):
    """The model in eval mode inside the block (dropout off); its mode restored after, always."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
