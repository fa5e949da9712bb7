"""One layer of a one-sequence model, rebuilt from its own modules: its queries and keys, what
"Inside a head" takes apart for the decoder-only and masked families of the table; and a
decoder-only model's value terms and feed-forward, what its norm-based, ALTI+ and value
zeroing attributions read (``core.attribution.one_sequence``).

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
from core.model.parts import SequenceHeads


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


def head_outputs(model: nn.Module, layer: nn.Module, x: torch.Tensor):
    """(f (H, N, D), b_O (D,)): what each token's value becomes through each head's W_O,
    f^h(x_j) = (norm(x_j) W_V^h + b_V^h) W_O^h, from the layer's input x (N, D) by its own
    pre-attention norm and projections (a key/value head serving its group of query heads),
    and W_O's bias (zero where it has none): the attention's output at i is
    sum_h sum_j a^h_ij f^h(x_j) + b_O. A pre-LN decoder's only (GPT-2, Llama, Qwen2,
    Mistral)."""
    arch, attn = architecture_of(model), lm_sites.attention_of(layer)
    heads, kv = model.config.num_attention_heads, arch.kv_heads_of(model.config)
    w_o = lm_sites.output_projection(attn)
    v = _projected(arch, attn, _read(arch, layer, x[None]), "v", heads, kv)
    v = _split(v, kv)  # (Hkv, N, Dh)
    v = v.repeat_interleave(heads // kv, dim=0)  # (H, N, Dh): each query head's
    if arch.projections.conv1d:  # GPT-2's Conv1D keeps W as (in, out)
        per_head = w_o.weight.view(heads, -1, w_o.weight.size(-1))  # (H, Dh, D)
    else:
        per_head = w_o.weight.T.reshape(heads, -1, w_o.weight.size(0))  # (H, Dh, D)
    bias = w_o.bias if w_o.bias is not None else x.new_zeros(x.size(-1))
    return torch.einsum("hnd,hde->hne", v, per_head), bias  # (H, N, D), (D,)


def after_attention(layer: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """(..., D) the layer's output from its residual after attention y (..., D): the
    pre-LN feed-forward added, y + MLP(norm(y)) (``ln_2`` / ``post_attention_layernorm``)."""
    stack = architecture_of(layer).stack()
    (mlp_path,) = stack.mlp  # a pre-LN decoder's one MLP module
    norm, mlp = part(layer, stack.mlp_norm), part(layer, mlp_path)
    dtype = next(mlp.parameters()).dtype
    h = norm(y.to(dtype))
    if "residual_inside" in architecture_of(layer).quirks:  # BLOOM's mlp(h, residual)
        return mlp(h, y.to(dtype)).to(y.dtype)
    return y + mlp(h).to(y.dtype)


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
