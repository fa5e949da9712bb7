"""The forward hooks behind every Hugging Face model's sites (``core.model.sites``): each
passes one activation through its site's ``HookPoint``: a module's output or input, the heads
before W_o, an encoder-decoder's queries, keys and attention outputs, a fused q/k/v projection
cut into its parts, a one-stack model's rotated queries and keys, its scores before the softmax
and its weights, and a norm's scale. Each does nothing (one integer test) unless a thread has
hooks on.

Shape key: B batch, N tokens, H heads, Hkv key/value heads, Dh head width.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

import torch
from torch import nn

from core.model.hooks import HookPoint, any_on


def _first(output):
    """A module's main output: the tensor itself, a tuple's first item, or last_hidden_state."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "last_hidden_state"):
        return output.last_hidden_state
    return output[0]


def _with_first(output, value):
    """``output`` with its main tensor replaced by ``value`` (the same kind of object)."""
    if isinstance(output, torch.Tensor):
        return value
    if hasattr(output, "last_hidden_state"):
        output.last_hidden_state = value
        return output
    return (value, *output[1:])


POINTS = "_studio_hook_points"  # the attribute every hooked module (and the model) holds


def _point(module: nn.Module, name: str) -> HookPoint:
    """The hook point ``name`` of the model ``module`` belongs to. The hooks name their sites
    and find them here at each call, never hold them: a deep copy of the model gets its own
    points (the modules' one shared dict is copied once, with them) that its hooks call."""
    return getattr(module, POINTS)[name]


def _output_site(name: str, apart: bool = False):
    """A forward hook passing a module's main output through the site ``name``; ``apart``:
    the model goes on with a copy where a hook is on, so that what the hooks read stays as
    they read it (Falcon adds the attention's output into its MLP's output in place)."""

    def hook(module, args, output):
        if not any_on():
            return None
        x = _first(output)
        point = _point(module, name)
        y = point(x)
        if apart and y is x and point.on():
            y = x.clone()
        return None if y is x else _with_first(output, y)

    return hook


def _through(point: HookPoint, args: tuple, kwargs: dict, key: str = "hidden_states"):
    """(args, kwargs) with the first argument (or ``key``) passed through ``point``; None when
    nothing changed."""
    if args:
        y = point(args[0])
        return None if y is args[0] else ((y, *args[1:]), kwargs)
    if key not in kwargs or kwargs[key] is None:
        return None
    y = point(kwargs[key])
    return None if y is kwargs[key] else (args, {**kwargs, key: y})


def _input_site(name: str):
    """A forward pre-hook (with kwargs) passing the first argument through the site ``name``."""

    def hook(module, args, kwargs):
        return _through(_point(module, name), args, kwargs) if any_on() else None

    return hook


def heads_site(name: str, heads: int, before: bool):
    """A hook passing a (B, T, H * Dh) tensor through the site ``name`` as (B, T, H, Dh): a
    forward pre-hook on W_o (``before``), or a forward hook on W_v."""

    def through(module, x: torch.Tensor) -> torch.Tensor | None:
        point = _point(module, name)
        if not point.on():
            return None
        return point(x.view(*x.shape[:-1], heads, -1)).reshape(x.shape)  # via (B, T, H, Dh)

    def pre(module, args):
        y = through(module, args[0]) if any_on() else None
        return None if y is None else (y, *args[1:])

    def post(module, args, output):
        return through(module, output) if any_on() else None

    return pre if before else post


def _attention_outputs(p: str):
    """A forward hook on an attention module: its output (``p.out``), weights (``p.pattern``)
    and T5's position bias (``p.position_bias``)."""

    def hook(module, args, kwargs, output):
        if not any_on():
            return None
        out = _point(module, f"{p}.out")(output[0])
        if output[-1] is not None:
            _point(module, f"{p}.pattern")(output[-1])
        if len(output) == 3 and output[1] is not None:  # T5: (output, position_bias, weights)
            _point(module, f"{p}.position_bias")(output[1])
        return None if out is output[0] else (out, *output[1:])

    return hook


def _queries_keys(p: str, memory_key: str | None):
    """A forward pre-hook on an attention module: its queries' and keys' inputs (a
    cross-attention's keys: the keyword argument ``memory_key``)."""

    def hook(module, args, kwargs):
        if not any_on():
            return None
        args, kwargs = _through(_point(module, f"{p}.queries"), args, kwargs) or (args, kwargs)
        memory = kwargs.get(memory_key) if memory_key else None
        keys = _point(module, f"{p}.keys")
        if memory is not None and (y := keys(memory)) is not memory:
            kwargs = {**kwargs, memory_key: y}
        return args, kwargs

    return hook


def _read_input(name: str):
    """A forward pre-hook reading a module's first input at the site ``name``."""

    def hook(module, args):
        if any_on():
            _point(module, name)(args[0])

    return hook


def qkv_parts(fused: torch.Tensor, layout: str, heads: int, kv: int) -> list[torch.Tensor]:
    """q (B, N, H, Dh), k and v (B, N, Hkv, Dh) cut from one fused projection's output
    (B, N, (H + 2 Hkv) Dh) as the row's layout says: "blocks" (GPT-2's thirds, Falcon's query
    heads then its key/value heads) or "per_head" (BLOOM's (H, 3, Dh))."""
    if layout == "per_head":
        per = fused.view(*fused.shape[:-1], heads, 3, -1)  # (B, N, H, 3, Dh)
        return [per[..., i, :] for i in range(3)]
    width = fused.size(-1) // (heads + 2 * kv)  # Dh
    q, k, v = fused.split([heads * width, kv * width, kv * width], dim=-1)
    return [x.view(*x.shape[:-1], n, width) for x, n in ((q, heads), (k, kv), (v, kv))]


def _joined(parts: Sequence[torch.Tensor], layout: str) -> torch.Tensor:
    """(B, N, (H + 2 Hkv) Dh): ``qkv_parts`` put back together."""
    if layout == "per_head":
        return torch.stack(list(parts), dim=-2).flatten(-3)  # via (B, N, H, 3, Dh)
    return torch.cat([x.flatten(-2) for x in parts], dim=-1)


def _fused_site(names: Sequence[str], layout: str, heads: int, kv: int):
    """A forward hook on a projection making q, k and v at once (GPT-2's ``c_attn``, BLOOM's
    and Falcon's ``query_key_value``): each part through its site ``names`` per head."""

    def hook(module, args, output):
        if not any_on():
            return None
        points = [_point(module, name) for name in names]
        if not any(point.on() for point in points):
            return None
        parts = qkv_parts(output, layout, heads, kv)  # q, k, v: (B, N, H|Hkv, Dh)
        new = [point(x) for point, x in zip(points, parts)]
        changed = any(y is not x for y, x in zip(new, parts))
        return _joined(new, layout) if changed else None

    return hook


_unrotated = threading.local()  # this thread's q and k of the attention running now, by site


def _reads(module: nn.Module, names: Sequence[str]) -> bool:
    """Whether a hook of this thread reads any of the sites ``names`` the model has."""
    points = getattr(module, POINTS)
    return any(points[n].on() for n in names if n in points)


def _keep_unrotated(p: str, which: str, layout: tuple | None, heads: int = 0):
    """A forward hook on a projection (after its sites' hooks) keeping what it gives of q or
    k ((B, N, H|Hkv, Dh): ``heads`` of them) for ``_one_stack_attention``, only while a hook
    reads ``p.rot_q``, ``p.rot_k`` or ``p.scores``; ``layout``: (layout, H, Hkv) of a fused
    projection."""

    def hook(module, args, output) -> None:
        if not any_on():
            return
        if not _reads(module, [f"{p}.rot_q", f"{p}.rot_k", f"{p}.scores"]):
            return
        kept = getattr(_unrotated, "value", None)
        if kept is None:
            kept = _unrotated.value = {}
        if layout is not None:
            q, k, _ = qkv_parts(output, *layout)
            kept[f"{p}.q"], kept[f"{p}.k"] = q, k
        else:
            kept[f"{p}.{which}"] = output.view(*output.shape[:-1], heads, -1)

    return hook


def rotated(attention: nn.Module, q: torch.Tensor, k: torch.Tensor, cos, sin):
    """q (B, N, H, Dh) and k (B, N, Hkv, Dh) rotated by each position's angle as the family's
    own ``apply_rotary_pos_emb`` rotates them; a rotary embedding narrower than the head
    (Phi's ``partial_rotary_factor``) rotates the head's first R dimensions only."""
    apply = importlib.import_module(type(attention).__module__).apply_rotary_pos_emb
    R = cos.size(-1)
    q_h, k_h = q.transpose(1, 2), k.transpose(1, 2)  # (B, H|Hkv, N, Dh)
    q_rot, k_rot = apply(q_h[..., :R], k_h[..., :R], cos, sin)  # (B, H|Hkv, N, R)
    q_rot = torch.cat([q_rot, q_h[..., R:]], dim=-1).transpose(1, 2)  # (B, N, H, Dh)
    k_rot = torch.cat([k_rot, k_h[..., R:]], dim=-1).transpose(1, 2)  # (B, N, Hkv, Dh)
    return q_rot, k_rot


def attention_scores(q, k, scale: float, kwargs: dict, cap: float | None, alibi: bool):
    """(B, H, N, N) the scores one-stack attention takes the softmax of, as the family's
    eager attention computes them from q (B, N, H, Dh) and k (B, N, Hkv, Dh; rotated where
    the family rotates them): q·k times ``scale``, BLOOM's ALiBi (``alibi``: the bias the
    module was given, added to the scaled q·k as its ``baddbmm`` does), Gemma 2's soft cap
    c·tanh(s/c), then the additive mask the module was given (causal, sliding window,
    padding: 0 where a key is seen, the dtype's most negative value where not, so a masked
    score is q·k + min, not −inf)."""
    k = k.repeat_interleave(q.size(2) // k.size(2), dim=2)  # (B, N, H, Dh): each group's head
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale  # (B, H, N, N)
    if alibi:
        B, H, N = scores.shape[:3]
        scores = scores + kwargs["alibi"].view(B, H, 1, -1)  # (B, H, N, N)
    if cap:
        scores = cap * torch.tanh(scores / cap)
    mask = kwargs.get("attention_mask")  # (B, 1, N, N) or None (nothing masked)
    if isinstance(mask, torch.Tensor):
        mask = mask[..., : k.size(1)]  # (B, 1, N, N)
        if mask.dtype == torch.bool:  # True where a key is seen
            mask = torch.zeros_like(scores).masked_fill(~mask, torch.finfo(scores.dtype).min)
        scores = scores + mask
    return scores


def _one_stack_attention(p: str, rotary: bool, how: tuple):
    """A forward hook (with kwargs) on a one-stack model's attention module: its weights
    (``p.pattern``, (B, H, N, N)), for a rotary family q and k after the rotation
    (``p.rot_q``, ``p.rot_k``), and the scores before the softmax (``p.scores``, (B, H, N,
    N): ``attention_scores``, ``how`` its (scale, soft cap, ALiBi)), read from the
    projections' q and k of this call and what the module was given (``position_embeddings``
    (cos, sin), the mask, ALiBi's bias). Read only."""

    def hook(module, args, kwargs, output):
        if not any_on():
            return None
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if isinstance(weights, torch.Tensor):
            _point(module, f"{p}.pattern")(weights)
        kept = getattr(_unrotated, "value", None) or {}
        if f"{p}.q" not in kept:
            return None
        q, k = kept.pop(f"{p}.q"), kept.pop(f"{p}.k")  # (B, N, H, Dh), (B, N, Hkv, Dh)
        if rotary:
            q, k = rotated(module, q, k, *kwargs["position_embeddings"])
            _point(module, f"{p}.rot_q")(q)
            _point(module, f"{p}.rot_k")(k)
        if _point(module, f"{p}.scores").on():
            scale, cap, alibi = how
            _point(module, f"{p}.scores")(attention_scores(q, k, scale, kwargs, cap, alibi))
        return None

    return hook


def _norm_scale(name: str, rms: bool, eps: str):
    """A forward pre-hook on a norm reading its scale, (B, N, 1): what it divides each
    token's vector by, √(var + ε) (LayerNorm) or √(mean x² + ε) (RMSNorm), from its input
    and its own ε (the attribute ``eps``), as TransformerLens's ``hook_scale``. Read only."""

    def hook(module, args) -> None:
        if not any_on():
            return
        point = _point(module, name)
        if point.on():
            x = args[0].float()  # (B, N, D)
            spread = x.pow(2).mean(-1, keepdim=True) if rms else x.var(-1, False, keepdim=True)
            point((spread + getattr(module, eps)).sqrt())  # (B, N, 1)

    return hook
