"""Every Hugging Face model's hook sites (``core.model.hooks``), installed by one installer from
its row of the table (``core.model.architectures``): where a family keeps its stacks, layers,
attentions and norms, and the permanent forward hooks that pass each activation through the
site's ``HookPoint``.

Each stack of the row is hooked by the same code: its token embeddings, each layer's input and
output, each attention's heads before W_o (``z``), and, for an encoder-decoder, its queries'
and keys' inputs, values (``v``), weights (``pattern``), output (``out``), T5's position bias
and the stream after the sub-layer (``resid_post``, where the row says it is), and the stack's
output. A one-stack model (decoder-only, masked) holds the source and the decoder inputs in one
sequence: its stream sites are named as an encoder-decoder's (``encoder.{i}.out`` at each
row's source, ``decoder.{i}.out`` at the decoder inputs, ``encoder.embed`` and
``decoder.embed``) and cut from the sequence inside ``placing``; its heads are
``decoder.{i}.self.z``, over the whole sequence; its layers keep their inputs for this
thread's open ``LayerInputs`` and its last layer its output for an open ``LastOutput``. The
hooks are installed once per model and do nothing (one integer test) unless a thread has hooks
on.

Shape key: B batch, S source, T decoder inputs, N tokens, H heads, Dh head width, D model width.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import contextmanager

import torch
from torch import nn

from core.model.architectures import Architecture, architecture_of, part
from core.model.hf_folder import HFModelError
from core.model.hooks import HookPoint, any_on
from core.model.record import SIDES, attention_site, side_of

# ----------------------------------------------------------------------------- the parts


def stack(model: nn.Module, side: str | None = None) -> nn.Module:
    """The encoder or the decoder stack (``side``); a one-stack model's one stack."""
    return part(model, architecture_of(model).stack(side).path)


def layers_of(stack_module: nn.Module) -> Sequence[nn.Module]:
    """The layers of a stack (``layers``, T5's ``block``, GPT-2's ``h``)."""
    return part(stack_module, architecture_of(stack_module).layers)


def attention_of(layer: nn.Module, kind: str) -> nn.Module:
    """One layer's attention of ``kind`` (a one-stack model's one attention)."""
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


def output_projection_of(layer: nn.Module, kind: str) -> nn.Module:
    """W_o of a layer's attention of ``kind`` (BERT's: ``attention.output.dense``, outside the
    attention module)."""
    arch = architecture_of(layer)
    outside = arch.attention(kind).output
    if outside:
        return part(layer, outside)
    if arch.projections.o is None:
        raise HFModelError(f"A {type(layer).__name__}'s attention holds no W_o.")
    return part(attention_of(layer, kind), arch.projections.o)


def final_norm(model: nn.Module) -> nn.Module | None:
    """The decoder's final norm of a pre-LN family (mBART / M2M100 / NLLB ``layer_norm``,
    T5's ``final_layer_norm``, a decoder-only model's ``norm`` / ``ln_f``); None for a post-LN
    one (Marian, BART, BERT)."""
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


# ----------------------------------------------------------------------------- one sequence

_placed = threading.local()  # this thread's pass: (each row's source positions, the steps')


@contextmanager
def placing(sources: Sequence[slice], steps: slice):
    """Within the block, this thread's passes through a one-stack model give the stream sites
    in the interface's terms: ``encoder.{i}.out`` at each row's source positions (left-aligned,
    (B, S, D)), ``decoder.{i}.out`` at the decoder inputs' ((B, T, D))."""
    _placed.value = (list(sources), steps)
    try:
        yield
    finally:
        _placed.value = None


def _placed_sites(encoder_name: str, decoder_name: str):
    """A forward hook passing a module's output (B, N, D) at the source's and the decoder
    inputs' positions through the two sites (only inside ``placing``, only where this thread
    hooks them): a layer's output, or the token embeddings."""

    def hook(module, args, output):
        where = getattr(_placed, "value", None)
        if not any_on() or where is None:
            return None
        encoder, decoder = _point(module, encoder_name), _point(module, decoder_name)
        if not (encoder.on() or decoder.on()):
            return None
        x = output if isinstance(output, torch.Tensor) else output[0]  # (B, N, D)
        sources, steps = where
        y = x
        if encoder.on():
            S = max(s.stop - s.start for s in sources)
            view = x.new_zeros(x.size(0), S, x.size(-1))  # (B, S, D) each row's source first
            for b, at in enumerate(sources):
                view[b, : at.stop - at.start] = x[b, at]
            new = encoder(view)
            if new is not view:
                y = y.clone()
                for b, at in enumerate(sources):
                    y[b, at] = new[b, : at.stop - at.start]
        if decoder.on():
            view = y[:, steps].clone()  # (B, T, D)
            new = decoder(view)
            if new is not view:
                y = y.clone() if y is x else y
                y[:, steps] = new
        if y is x:
            return None
        return y if isinstance(output, torch.Tensor) else (y, *output[1:])

    return hook


_kept = threading.local()  # this thread's LastOutput, while one is open


class LastOutput:
    """The last layer's output (before the final norm) of the pass this thread runs inside the
    block, through a one-stack model: ``output`` (B, N, D). A permanent hook on the last layer
    keeps it for the thread that asked; no hook is added or removed while other threads run
    the model."""

    def __init__(self, model: nn.Module):
        install(model)  # the permanent hooks, installed once
        self.output = None

    def __enter__(self) -> LastOutput:
        _kept.value = self
        return self

    def __exit__(self, *exc) -> None:
        _kept.value = None


def _keep_last(module, args, output) -> None:
    """The last layer's forward hook: its output, for this thread's open LastOutput."""
    kept = getattr(_kept, "value", None)
    if kept is not None:
        kept.output = output if isinstance(output, torch.Tensor) else output[0]


_inputs = threading.local()  # this thread's LayerInputs, while one is open


class LayerInputs:
    """Every layer's inputs (positional and keyword arguments: the stream, the mask, the
    positions) of the pass this thread runs inside the block through a one-stack model, kept
    by a permanent pre-hook on each layer, so that ``lm_sites.resumed`` can run the layers
    from any one on again with the layers below as they were."""

    def __init__(self, model: nn.Module):
        install(model)  # the permanent hooks, installed once
        self.calls: dict[int, tuple[tuple, dict]] = {}

    def __enter__(self) -> LayerInputs:
        _inputs.value = self
        return self

    def __exit__(self, *exc) -> None:
        _inputs.value = None

    @staticmethod
    def open() -> bool:
        """Whether this thread keeps layer inputs now."""
        return getattr(_inputs, "value", None) is not None


def _keep_inputs(index: int):
    """Layer ``index``'s forward pre-hook: its arguments, for this thread's open LayerInputs."""

    def hook(module, args, kwargs) -> None:
        kept = getattr(_inputs, "value", None)
        if kept is not None:
            kept.calls[index] = (args, kwargs)

    return hook


# ----------------------------------------------------------------------------- the installer


class _Installer:
    """Registers the permanent hooks of one model, stack by stack as its row says, and names
    their hook points; every hooked module holds the model's one dict of points (``POINTS``)."""

    def __init__(self, model: nn.Module, arch: Architecture):
        self.model, self.arch, self.points = model, arch, {}

    def hooked(self, module: nn.Module) -> nn.Module:
        """``module``, holding the points (the hooks find their sites through it)."""
        setattr(module, POINTS, self.points)
        return module

    def install(self) -> dict[str, HookPoint]:
        self.hooked(self.model)
        one_stack = len(self.arch.stacks) == 1  # the source and the decoder inputs in one
        for side in (None,) if one_stack else SIDES:
            self.stack(side)
        return self.points

    def add(self, name: str) -> str:
        """Create the hook point ``name``; its name."""
        self.points[name] = HookPoint(name.rsplit(".", 1)[-1], name)
        return name

    def stream(self, module: nn.Module, side: str | None, site: str) -> None:
        """The stream at a module's output: ``{side}.{site}``; a one-stack model's
        ``encoder.{site}`` and ``decoder.{site}``, cut from its one sequence (``placing``)."""
        module = self.hooked(module)
        if side is None:
            names = (self.add(f"{s}.{site}") for s in SIDES)
            module.register_forward_hook(_placed_sites(*names))
        else:
            module.register_forward_hook(_output_site(self.add(f"{side}.{site}")))

    def stack(self, side: str | None) -> None:
        row = self.arch.stack(side)
        module = self.hooked(part(self.model, row.path))
        self.stream(part(module, row.embed), side, "embed")
        layers = part(module, self.arch.layers)
        for i, layer in enumerate(layers):
            self.layer(self.hooked(layer), side, i)
        if side is None:
            layers[-1].register_forward_hook(_keep_last)
        else:
            module.register_forward_hook(_output_site(self.add(f"{side}.out")))

    def layer(self, layer: nn.Module, side: str | None, i: int) -> None:
        if side is None:
            layer.register_forward_pre_hook(_keep_inputs(i), with_kwargs=True)
            self.heads(layer, "decoder_self", attention_site("decoder_self", i))
        else:
            layer.register_forward_pre_hook(
                _input_site(self.add(f"{side}.{i}.in")), with_kwargs=True
            )
            kinds = ("encoder",) if side == "encoder" else ("decoder_self", "cross")
            for kind in kinds:
                self.attention(layer, kind, attention_site(kind, i))
        self.stream(layer, side, f"{i}.out")

    def heads(self, layer: nn.Module, kind: str, p: str) -> None:
        """Each head's output before W_o, ``p.z`` (B, N, H, Dh): what removing a head scales."""
        attention = attention_of(layer, kind)
        if self.arch.heads is None:
            heads = self.model.config.num_attention_heads  # GPT-2's config maps it to n_head
        else:
            heads, _ = head_geometry(attention)
        w_o = self.hooked(output_projection_of(layer, kind))
        w_o.register_forward_pre_hook(heads_site(self.add(f"{p}.z"), heads, before=True))

    def attention(self, layer: nn.Module, kind: str, p: str) -> None:
        """Every site of an encoder-decoder's attention sub-layer."""
        module = self.hooked(attention_of(layer, kind))
        for site in ("queries", "keys", "v", "pattern", "out", "position_bias", "resid_post"):
            self.add(f"{p}.{site}")
        _, width = head_geometry(module)
        memory_key = self.arch.attention(kind).memory
        module.register_forward_pre_hook(_queries_keys(p, memory_key), with_kwargs=True)
        module.register_forward_hook(_attention_outputs(p), with_kwargs=True)
        v = self.hooked(projections(module)[2])
        v.register_forward_hook(heads_site(f"{p}.v", v.out_features // width, before=False))
        self.heads(layer, kind, p)
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


def install(model: nn.Module, arch: Architecture | None = None) -> dict[str, HookPoint]:
    """The model's hook points by site name, its hooks installed from its row (``arch``, by
    default the model's own) on first use."""
    points = getattr(model, POINTS, None)
    if points is not None:
        return points
    arch = arch or architecture_of(model)
    if len(arch.stacks) > 1:
        enc, dec = (part(stack(model, side), arch.stack(side).embed) for side in SIDES)
        if enc is dec:
            raise HFModelError(
                "The encoder and the decoder share one embedding module: the studio cannot "
                "tell their embeddings apart."
            )
    return _Installer(model, arch).install()
