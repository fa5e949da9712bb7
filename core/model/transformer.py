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
``encoder.0.self.z``, ``decoder.1.cross.out`` ...), written once in the forward order (here
and in the blocks, ``core.model.blocks``):
recording a pass, removing heads (each head's output scaled before W_o), value zeroing,
patching and the embeddings path of the gradient methods are hooks on this one forward.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager

import torch
from torch import nn

from core.model.align_loss import AlignTarget, alignment_loss
from core.model.blocks import (
    AddNorm,
    MultiHeadAttention,
    PositionalEncoding,
    PositionWiseFFN,
    subsequent_mask,
)
from core.model.config import ModelConfig
from core.model.hooks import HookPoint
from core.model.layer_runs import keep_calls
from core.model.output_loss import projected_cross_entropy
from core.model.parts import AttentionMaps


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
        self.hook_in, self.hook_out = HookPoint("in"), HookPoint("out")  # (B, S, D)
        self.hook_self_post = HookPoint("self.resid_post")  # (B, S, D)
        self.hook_mlp_out = HookPoint("mlp_out")  # (B, S, D) the FFN's output

    def feed_forward(self, h: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The FFN of the (normed) stream h (B, T, D), through the ``mlp_out`` site."""
        return self.hook_mlp_out(self.ffn(h)), None

    def forward(self, x, src_mask, need_weights=False):
        """x (B, S, D), src_mask (B, 1, 1, S) -> (x (B, S, D), weights (B, H, S, S)|None)."""
        x = self.hook_in(x)
        x, w = self.addnorm1(x, lambda h: self.attention(h, h, h, src_mask, need_weights))
        x, _ = self.addnorm2(self.hook_self_post(x), self.feed_forward)
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
        self.hook_in, self.hook_out = HookPoint("in"), HookPoint("out")  # (B, T, D)
        self.hook_self_post = HookPoint("self.resid_post")  # (B, T, D)
        self.hook_cross_post = HookPoint("cross.resid_post")  # (B, T, D)
        self.hook_mlp_out = HookPoint("mlp_out")  # (B, T, D) the FFN's output

    def feed_forward(self, h: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The FFN of the (normed) stream h (B, T, D), through the ``mlp_out`` site."""
        return self.hook_mlp_out(self.ffn(h)), None

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
        x, _ = self.addnorm3(self.hook_cross_post(x), self.feed_forward)
        return self.hook_out(x), w_self, w_cross


ATTENTIONS = {"attention": "self", "self_attention": "self", "cross_attention": "cross"}


def _named(module: nn.Module, prefix: str) -> dict[str, HookPoint]:
    """A module's hook points named ``prefix.<part>`` (a layer's with its attentions')."""
    points = {}
    for point in vars(module).values():
        if isinstance(point, HookPoint):
            point.name = f"{prefix}.{point.part}"
            points[point.name] = point
    for attr, part in ATTENTIONS.items():
        if (mha := getattr(module, attr, None)) is not None:
            points |= _named(mha, f"{prefix}.{part}")
    return points


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
        self.hook_embed, self.hook_out = HookPoint("embed"), HookPoint("out")

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
        self.hook_embed, self.hook_out = HookPoint("embed"), HookPoint("out")

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


_WHOLE_TARGET = threading.local()  # Transformer.whole_target(): this thread's passes unmasked


class Transformer(nn.Module):
    """The encoder-decoder Transformer (EncoderDecoder in the Annotated Transformer)."""

    decodes = True  # writes its output token by token: a run measures it by BLEU

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self._init_weights()
        self._hook_points = self._name_hooks()

    def _name_hooks(self) -> dict[str, HookPoint]:
        """Every hook site of the model by name (``core.model.hooks``), stack by stack."""
        points = {}
        for side, stack in (("encoder", self.encoder), ("decoder", self.decoder)):
            points |= _named(stack, side)  # "encoder.embed", "encoder.out"
            for i, layer in enumerate(stack.layers):
                points |= _named(layer, f"{side}.{i}")
            keep_calls(stack.layers, side)  # core.model.layer_runs: its layers run again
        return points

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
        """(B, T) ids -> (B, 1, T, T): causal and not padded (keys); inside
        ``whole_target()`` in this thread, not padded only (B, 1, 1, T)."""
        keep = self.pad_mask(tgt)  # (B, 1, 1, T)
        if getattr(_WHOLE_TARGET, "on", False):
            return keep
        return keep & subsequent_mask(tgt.size(1), tgt.device)  # (B, 1, T, T)

    def pad_mask(self, tgt: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, 1, 1, T) boolean, True at real (non-pad) target tokens."""
        return (tgt != self.cfg.pad_id)[:, None, None, :]

    @staticmethod
    @contextmanager
    def whole_target():
        """Every decoder position sees the whole target (no future mask) inside the block, in
        this thread only: Garg et al.'s full-context pass, which reads a head trained to align
        with ``align_full_context``. Not a translation: the decoder reads what it predicts."""
        was = getattr(_WHOLE_TARGET, "on", False)
        _WHOLE_TARGET.on = True
        try:
            yield
        finally:
            _WHOLE_TARGET.on = was

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
        full = align is not None and align.full_context
        layer = align.layer if align is not None and not full else None
        hidden, _, cross = self.decoder(
            tgt_in, memory, src_mask, self.tgt_mask(tgt_in), project=False, cross_layer=layer
        )  # (B, T, D), (1, B, H, T, S) | None
        if full:  # a second pass with the whole target visible, for the supervised head
            _, _, cross = self.decoder(
                tgt_in,
                memory,
                src_mask,
                self.pad_mask(tgt_in),
                project=False,
                cross_layer=align.layer,
            )
        rows = (tgt_out != self.cfg.pad_id).flatten().nonzero().squeeze(1)  # (N,) real tokens
        real = hidden.flatten(0, 1).index_select(0, rows)  # (N, D)
        target = tgt_out.flatten()[rows]  # (N,)
        ce = projected_cross_entropy(real, self.decoder.dense, target, label_smoothing)
        if align is None:
            return ce, ce.new_zeros(())
        return ce, alignment_loss(cross[0, :, align.head], align.target)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameters by group, in the order of the forward pass (``core.training.monitor``):
        the two embeddings, each encoder and decoder layer, the output layer."""
        groups = {
            "source embedding": list(self.encoder.embedding.parameters()),
            "target embedding": list(self.decoder.embedding.parameters()),
        }
        for side, stack in (("encoder", self.encoder), ("decoder", self.decoder)):
            for i, layer in enumerate(stack.layers):
                groups[f"{side} {i}"] = list(layer.parameters())
        groups["output layer"] = list(self.decoder.dense.parameters())
        return groups

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
