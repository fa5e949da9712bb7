"""One layer of a one-sequence model, rebuilt from its own modules: its queries and keys, what
"Inside a head" takes apart for the decoder-only and masked families of the table; and its
attention's projections per head and the norm around it, what the decompositions of
``core.attribution.terms`` read of every family (``attention_weights``, ``sublayer_norm``).

From the layer's input (the residual stream) the model's own norm (``input_layernorm`` /
``ln_1``; none before a post-LN layer, BERT's) and projections give q and k of every head
(GPT-2's one ``c_attn`` cut in three, BLOOM's ``query_key_value`` per head); a family with
rotary positions then rotates both by the rotary position embedding of each position (the
model's own ``rotary_emb`` and ``apply_rotary_pos_emb``; Phi's only the first dimensions of
each head), a family with ALiBi adds its bias (BLOOM's own ``build_alibi_tensor``), and a
key/value head serves a group of query heads (grouped-query attention; Falcon's one). The mask
is causal, a sliding window (Mistral; Gemma 2's every other layer) keeps only the last
``window`` keys, and Gemma 2 soft-caps the scores, c·tanh(s/c). Which module is which is the
family's row of the table (``core.model.architectures``).
A test checks that the softmax of the rebuilt scores is the model's own ``output_attentions``
within 1e-5.

Shape key: N tokens, H query heads, Hkv key/value heads, Dh head width, D model width.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from core.model import lm_sites, site_hooks
from core.model.architectures import ALIBI, ROPE, Architecture, architecture_of, part, softcap
from core.model.parts import AttentionWeights, SequenceHeads, SublayerNorm


def _split(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(1, N, heads * Dh) -> (heads, N, Dh)."""
    return x.view(x.size(1), heads, -1).transpose(0, 1)  # via (N, heads, Dh)


def _read(arch: Architecture, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the attention's projections read of the stream x: its norm's output (pre-LN), or
    x as it is (post-LN: BERT, RoBERTa)."""
    return part(layer, arch.stack().self_attention.norm)(x) if arch.norm == "pre" else x


def _projected(arch: Architecture, attn: nn.Module, h, which: str, heads: int, kv: int):
    """One of q, k, v (1, N, heads * Dh or kv * Dh) of the attention from its input h
    (1, N, D): its projection, or its part of the fused one, cut as the row's layout says
    (GPT-2's ``c_attn`` in thirds; BLOOM's ``query_key_value`` per head)."""
    names = arch.projections
    if not names.fused:
        return part(attn, getattr(names, which))(h)  # (1, N, heads * Dh)
    fused = part(attn, names.fused)(h)  # (1, N, (heads + 2 kv) * Dh)
    parts = site_hooks.qkv_parts(fused, names.layout, heads, kv)  # q, k, v: (1, N, H|Hkv, Dh)
    return parts["qkv".index(which)].flatten(-2)  # (1, N, heads * Dh)


def _queries_keys(model: nn.Module, layer: nn.Module, x: torch.Tensor):
    """(q (H, N, Dh), k (Hkv, N, Dh), scale) of one layer's attention read from the stream x
    (1, N, D), before any rotation."""
    arch, attn = architecture_of(model), lm_sites.attention_of(layer)
    heads, kv = model.config.num_attention_heads, arch.kv_heads_of(model.config)
    h = _read(arch, layer, x)
    q, k = (_projected(arch, attn, h, which, heads, kv) for which in ("q", "k"))
    return _split(q, heads), _split(k, kv), arch.scale_of(attn)


def _linear(arch: Architecture, module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (out, in), b (out,)) of a projection as ``nn.Linear`` holds them (GPT-2's Conv1D
    transposed), zeros for a missing bias."""
    weight = module.weight.T if arch.projections.conv1d else module.weight  # (out, in)
    bias = module.bias if module.bias is not None else weight.new_zeros(weight.size(0))
    return weight, bias


def attention_weights(model: nn.Module, layer_index: int) -> AttentionWeights:
    """One layer's attention projections per head, as ``nn.Linear`` holds them: a fused
    projection (GPT-2's ``c_attn``, BLOOM's ``query_key_value``) cut into W_q, W_k and W_v as
    the row's layout cuts its output, key/value heads as they are (``AttentionWeights``
    repeats them for their groups)."""
    arch, layer = architecture_of(model), lm_sites.layers_of(model)[layer_index]
    attn, names = lm_sites.attention_of(layer), arch.projections
    heads, kv = model.config.num_attention_heads, arch.kv_heads_of(model.config)
    if names.fused:
        W, b = _linear(arch, part(attn, names.fused))  # ((H + 2 Hkv) Dh, D), ((H + 2 Hkv) Dh,)
        cut_w = site_hooks.qkv_parts(W.T[None], names.layout, heads, kv)  # (1, D, H|Hkv, Dh)
        cut_b = site_hooks.qkv_parts(b[None, None], names.layout, heads, kv)  # (1, 1, ., Dh)
        qkv = [(w[0].flatten(-2).T, c[0, 0].flatten()) for w, c in zip(cut_w, cut_b)]
    else:
        qkv = [_linear(arch, part(attn, getattr(names, which))) for which in "qkv"]
    w_o = _linear(arch, lm_sites.output_projection_of(layer))  # (D, H Dh), (D,)
    width = qkv[0][0].size(0) // heads  # Dh
    flat = [t for pair in [*qkv, w_o] for t in pair]
    return AttentionWeights(*flat, heads, width, arch.scale_of(attn))


def sublayer_norm(model: nn.Module, layer_index: int) -> SublayerNorm:
    """The norm around one layer's attention: before it (pre-LN, ``ln_1`` /
    ``input_layernorm``) or on the sum after it (post-LN: BERT's ``attention.output``)."""
    arch, layer = architecture_of(model), lm_sites.layers_of(model)[layer_index]
    return SublayerNorm(arch.norm == "pre", part(layer, arch.stack().self_attention.norm))


def _rotated(model: nn.Module, q, k, x: torch.Tensor):
    """q, k rotated by each position's angle (RoPE), as the family's own code rotates them;
    a rotary embedding narrower than the head (Phi's partial_rotary_factor) rotates the
    head's first dimensions and leaves the rest."""
    arch = architecture_of(model)
    if arch.positions != ROPE:
        return q, k, False
    rotary = part(lm_sites.base(model), arch.stack().positions)
    positions = torch.arange(x.size(1), device=x.device)[None]  # (1, N)
    cos, sin = rotary(x, positions)  # (1, N, R), R <= Dh
    apply = importlib.import_module(type(model).__module__).apply_rotary_pos_emb
    R = cos.size(-1)
    q_rot, k_rot = apply(q[None, ..., :R], k[None, ..., :R], cos, sin)  # (1, H|Hkv, N, R)
    q_rot = torch.cat([q_rot[0], q[..., R:]], dim=-1)  # (H, N, Dh)
    k_rot = torch.cat([k_rot[0], k[..., R:]], dim=-1)  # (Hkv, N, Dh)
    return q_rot, k_rot, True


def _position_bias(model: nn.Module, N: int, device) -> torch.Tensor | None:
    """(H, N, N) what the family adds to the scaled q·k for position: ALiBi's slope per head
    times the key's place (built by the family's own ``build_alibi_tensor``); None for the
    others."""
    if architecture_of(model).positions != ALIBI:
        return None
    build = importlib.import_module(type(model).__module__).build_alibi_tensor
    mask = torch.ones(1, N, dtype=torch.long, device=device)  # (1, N)
    heads = model.config.num_attention_heads
    alibi = build(mask, heads, torch.float32)  # (H, 1, N)
    return alibi.expand(heads, N, N)


def _window(arch: Architecture, config, layer_index: int) -> int | None:
    """The keys each query of one layer sees (a sliding window, Mistral's; Gemma 2's every
    other layer), or None: all before it."""
    if "sliding_window" not in arch.quirks or not config.sliding_window:
        return None
    if "sliding_window_alternate" in arch.quirks:
        sliding = config.layer_types[layer_index] == "sliding_attention"
        return config.sliding_window if sliding else None
    return config.sliding_window if getattr(config, "use_sliding_window", True) else None


def sequence_heads(
    model: nn.Module, ids: list[int], layer_index: int, causal: bool = True
) -> SequenceHeads:
    """One layer of ``model`` over ``ids``: every head's q and k and the model's own weights
    (``causal``: a decoder's mask; an encoder's query sees every token)."""
    x = torch.tensor([ids], device=next(model.parameters()).device)  # (1, N)
    with torch.no_grad():
        extra = {"logits_to_keep": 1} if causal else {}  # a masked LM projects every token
        o = model(input_ids=x, output_attentions=True, output_hidden_states=True, **extra)
        stream = o.hidden_states[layer_index]  # (1, N, D): the layer's input
        layer = lm_sites.layers_of(model)[layer_index]
        q, k, scale = _queries_keys(model, layer, stream)
        q_rot, k_rot, rotary = _rotated(model, q, k, stream)
    N = len(ids)
    mask = torch.ones(N, N, dtype=torch.bool, device=x.device)  # (N, N)
    mask = mask.tril() if causal else mask
    arch = architecture_of(model)
    window = _window(arch, model.config, layer_index)
    if window:
        mask &= ~torch.ones(N, N, dtype=torch.bool, device=x.device).tril(-window)
    weights = o.attentions[layer_index][0]  # (H, N, N)
    bias = _position_bias(model, N, x.device)
    cap = softcap(arch, model.config, "attn_logit")
    return SequenceHeads(q_rot, k_rot, q, k, scale, mask, weights, rotary, window, bias, cap)
