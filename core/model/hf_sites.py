"""A Hugging Face encoder-decoder's hook sites (``core.model.hooks``): where each family keeps
its layers, attentions and norms, and the permanent forward hooks that pass each activation
through the site's ``HookPoint``.

Where a family keeps its parts is its row of the table (``core.model.architectures``): BART-like
(Marian, BART, mBART, M2M100, NLLB) ``layers`` / ``self_attn`` / ``encoder_attn`` / ``q_proj``
... ``out_proj`` with a norm per sub-layer (after it, post-LN: Marian, BART; before it, pre-LN:
mBART, M2M100, NLLB, which end each stack with a norm), and T5's (mT5's, UMT5's) ``block`` /
``layer[i].SelfAttention`` / ``EncDecAttention`` / ``q`` ... ``o`` (pre-LN, RMSNorm, a
relative-position bias). The hooks are installed once per model and do nothing (one integer
test) unless a thread has hooks on.

Shape key: B batch, T tokens, H heads, Dh head width, D model width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from core.model.architectures import architecture_of, part
from core.model.hf_folder import HFModelError
from core.model.hooks import HookPoint, any_on
from core.model.record import SIDES, attention_site, side_of


def stack(model: nn.Module, side: str) -> nn.Module:
    """The encoder or the decoder stack."""
    return part(model, architecture_of(model).stack(side).path)


def layers_of(stack_module: nn.Module) -> Sequence[nn.Module]:
    """The layers of an encoder or decoder stack (``layers``, or T5's ``block``)."""
    return part(stack_module, architecture_of(stack_module).layers)


def attention_of(layer: nn.Module, kind: str) -> nn.Module:
    """One layer's attention of ``kind``."""
    return part(layer, architecture_of(layer).attention(kind).path)


def attention_modules(model: nn.Module, kind: str) -> list[nn.Module]:
    """The attention modules of one kind, one per layer."""
    return [attention_of(layer, kind) for layer in layers_of(stack(model, side_of(kind)))]


def projections(module: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear, nn.Linear]:
    """(W_q, W_k, W_v, W_o) of one attention module."""
    names = architecture_of(module).projections
    return tuple(part(module, name) for name in (names.q, names.k, names.v, names.o))


def head_geometry(module: nn.Module) -> tuple[int, int]:
    """(heads, head width) of one attention module."""
    arch = architecture_of(module)
    if arch.heads is None:
        raise HFModelError(f"The studio does not know the heads of a {type(module).__name__}.")
    heads, width = arch.heads
    return int(getattr(module, heads)), int(getattr(module, width))


def final_norm(model: nn.Module) -> nn.Module | None:
    """The decoder's final norm of a pre-LN family (mBART / M2M100 / NLLB ``layer_norm``,
    T5's ``final_layer_norm``); None for a post-LN one (Marian, BART)."""
    name = architecture_of(model).stack("decoder").final_norm
    return None if name is None else part(stack(model, "decoder"), name)


def sublayer_norm(layer: nn.Module, kind: str) -> nn.Module:
    """The norm of one layer's attention sub-layer of ``kind``."""
    return part(layer, architecture_of(layer).attention(kind).norm)


# ----------------------------------------------------------------------------- the hooks


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


def _output_site(name: str):
    """A forward hook passing a module's main output through the site ``name``."""

    def hook(module, args, output):
        if not any_on():
            return None
        x = _first(output)
        y = _point(module, name)(x)
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


class _Installer:
    """Registers the permanent hooks of one model and names their hook points; every hooked
    module holds the model's one dict of points (``POINTS``)."""

    def __init__(self, model: nn.Module):
        self.model, self.points = model, {}
        self.arch = architecture_of(model)

    def hooked(self, module: nn.Module) -> nn.Module:
        """``module``, holding the points (the hooks find their sites through it)."""
        setattr(module, POINTS, self.points)
        return module

    def install(self) -> dict[str, HookPoint]:
        setattr(self.model, POINTS, self.points)
        for side in SIDES:
            self.stack(side)
        return self.points

    def add(self, name: str) -> str:
        """Create the hook point ``name``; its name."""
        self.points[name] = HookPoint(name.rsplit(".", 1)[-1], name)
        return name

    def stack(self, side: str) -> None:
        module = self.hooked(stack(self.model, side))
        embed = self.hooked(part(module, self.arch.stack(side).embed))
        embed.register_forward_hook(_output_site(self.add(f"{side}.embed")))
        for i, layer in enumerate(layers_of(module)):
            self.layer(layer, f"{side}.{i}", side, i)
        module.register_forward_hook(_output_site(self.add(f"{side}.out")))

    def layer(self, layer: nn.Module, s: str, side: str, i: int) -> None:
        layer = self.hooked(layer)
        layer.register_forward_pre_hook(_input_site(self.add(f"{s}.in")), with_kwargs=True)
        kinds = ("encoder",) if side == "encoder" else ("decoder_self", "cross")
        for kind in kinds:
            self.attention(layer, kind, attention_site(kind, i))
        layer.register_forward_hook(_output_site(self.add(f"{s}.out")))

    def attention(self, layer: nn.Module, kind: str, p: str) -> None:
        module = self.hooked(attention_of(layer, kind))
        for site in ("queries", "keys", "v", "pattern", "z", "out", "position_bias", "resid_post"):
            self.add(f"{p}.{site}")
        heads, width = head_geometry(module)
        memory_key = self.arch.attention(kind).memory
        module.register_forward_pre_hook(_queries_keys(p, memory_key), with_kwargs=True)
        module.register_forward_hook(_attention_outputs(p), with_kwargs=True)
        _, _, v, o = (self.hooked(m) for m in projections(module))
        v.register_forward_hook(heads_site(f"{p}.v", v.out_features // width, before=False))
        o.register_forward_pre_hook(heads_site(f"{p}.z", heads, before=True))
        self.resid_post(layer, kind, f"{p}.resid_post")

    def resid_post(self, layer: nn.Module, kind: str, name: str) -> None:
        """The stream after an attention sub-layer, where the row says it is: a module's
        output (T5's sub-layer, a post-LN norm), or the input of the norm that comes next
        (pre-LN)."""
        where, path = self.arch.attention(kind).resid_post
        module = self.hooked(part(layer, path))
        if where == "output":
            module.register_forward_hook(_output_site(name))
        else:
            module.register_forward_pre_hook(_read_input(name))


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """The model's hook points by site name (its hooks installed on first use)."""
    points = getattr(model, POINTS, None)
    if points is None:
        arch = architecture_of(model)
        enc, dec = (part(stack(model, side), arch.stack(side).embed) for side in SIDES)
        if enc is dec:
            raise HFModelError(
                "The encoder and the decoder share one embedding module: the studio cannot "
                "tell their embeddings apart."
            )
        points = _Installer(model).install()
    return points
