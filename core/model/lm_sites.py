"""Where a decoder-only language model keeps its parts (its layers, each layer's attention and
output projection, its final norm) and its hook sites; the families of ``hf_folder.LM_TYPES``.

Where they are is the family's row of the table (``core.model.architectures``): GPT-2 keeps
them in ``transformer.h[i].attn`` (one ``c_attn`` making q, k and v, ``c_proj`` as W_o,
learned positions ``wpe``, LayerNorm ``ln_f``); Llama, Qwen2, Mistral and Gemma in
``model.layers[i].self_attn`` (``q_proj`` ... ``o_proj``, key/value heads shared by groups of
query heads, rotary positions, RMSNorm ``norm``), Gemma 2 and Phi (W_o ``dense``) too; BLOOM and
Falcon in ``transformer.h[i].self_attention`` (one ``query_key_value``, W_o ``dense``); BERT,
RoBERTa and ELECTRA (masked language models, read the same way) in
``<base>.encoder.layer[i].attention.self``, W_o outside it; DistilBERT in
``distilbert.transformer.layer[i].attention`` (W_o ``out_lin``).

Its hook sites (``core.model.hooks``) are installed once, as an encoder-decoder's are
(``core.model.hf_sites``): ``decoder.{i}.self.z``, each head's output before W_o (what removing
a head scales), over the whole sequence; ``encoder.{i}.out`` and ``decoder.{i}.out``, the
layer's output at the sentence's positions and at the decoder inputs', as an
encoder-decoder's stacks give them (what patching reads and writes); ``encoder.embed`` and
``decoder.embed``, the token embeddings there (what the gradient methods differentiate).

Shape key: B batch, N tokens, D model width.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import contextmanager

import torch
from torch import nn

from core.model.architectures import architecture_of, part
from core.model.hf_folder import HFModelError
from core.model.hf_sites import POINTS, heads_site
from core.model.hooks import HookPoint, any_on


def base(model: nn.Module) -> nn.Module:
    """The stack under the language-model head (``model.model`` / ``model.transformer``)."""
    return part(model, architecture_of(model).stack().path)


def layers_of(model: nn.Module) -> Sequence[nn.Module]:
    """The decoder layers, in order."""
    return part(base(model), architecture_of(model).layers)


def attention_of(layer: nn.Module) -> nn.Module:
    """A layer's self-attention module (BERT's: ``attention.self``)."""
    return part(layer, architecture_of(layer).stack().self_attention.path)


def final_norm(model: nn.Module) -> nn.Module:
    """The norm after the last layer (``norm`` / ``ln_f``)."""
    name = architecture_of(model).stack().final_norm
    if name is None:  # a post-LN stack (BERT): each layer ends with its norm
        raise HFModelError(f"A {type(model).__name__} has no norm after its last layer.")
    return part(base(model), name)


_kept = threading.local()  # this thread's LastOutput, while one is open


class LastOutput:
    """The last layer's output (before the final norm) of the pass this thread runs inside the
    block: ``output`` (B, N, D). A permanent hook on the last layer (``hook_points``) keeps it
    for the thread that asked; no hook is added or removed while other threads run the model."""

    def __init__(self, model: nn.Module):
        hook_points(model)  # the permanent hooks, installed once
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


def output_projection_of(layer: nn.Module) -> nn.Module:
    """W_o of a layer's attention (BERT's: ``attention.output.dense``, outside its heads)."""
    outside = architecture_of(layer).stack().self_attention.output
    return part(layer, outside) if outside else output_projection(attention_of(layer))


def output_projection(attention: nn.Module) -> nn.Module:
    """W_o of one attention (``o_proj`` / GPT-2's ``c_proj``)."""
    name = architecture_of(attention).projections.o
    if name is None:  # BERT's sits outside the attention module (output_projection_of)
        raise HFModelError(f"A {type(attention).__name__} holds no W_o: its layer does.")
    return part(attention, name)


_inputs = threading.local()  # this thread's LayerInputs, while one is open


class LayerInputs:
    """Every layer's inputs (positional and keyword arguments: the stream, the mask, the
    positions) of the pass this thread runs inside the block, kept by a permanent pre-hook
    on each layer (``hook_points``), so that ``resumed`` can run the layers from any one on
    again with the layers below as they were."""

    def __init__(self, model: nn.Module):
        hook_points(model)  # the permanent hooks, installed once
        self.calls: dict[int, tuple[tuple, dict]] = {}

    def __enter__(self) -> LayerInputs:
        _inputs.value = self
        return self

    def __exit__(self, *exc) -> None:
        _inputs.value = None


def _keep_inputs(index: int):
    """Layer ``index``'s forward pre-hook: its arguments, for this thread's open LayerInputs."""

    def hook(module, args, kwargs) -> None:
        kept = getattr(_inputs, "value", None)
        if kept is not None:
            kept.calls[index] = (args, kwargs)

    return hook


def resumed(model: nn.Module, kept: LayerInputs, start: int) -> torch.Tensor:
    """(B, N, D) the last layer's output (before the final norm) of layers ``start``... run
    again on the stream layer ``start`` was given, with each layer's other arguments as kept
    (under this thread's hooks: a head removed at or above ``start`` changes it; the layers
    below are not run). Equal to the whole pass's (tested per family)."""
    if getattr(_inputs, "value", None) is not None:
        raise RuntimeError("resumed runs outside LayerInputs (it would keep its own inputs)")
    args, kwargs = kept.calls[start]
    x = args[0] if args else kwargs["hidden_states"]  # (B, N, D)
    for i, layer in enumerate(layers_of(model)[start:], start):
        args, kwargs = kept.calls[i]
        out = layer(x, *args[1:], **kwargs) if args else layer(**{**kwargs, "hidden_states": x})
        x = out if isinstance(out, torch.Tensor) else out[0]
    return x


_placed = threading.local()  # this thread's pass: (each row's source positions, the steps')


@contextmanager
def placing(sources: Sequence[slice], steps: slice):
    """Within the block, this thread's passes give the stream sites in the interface's terms:
    ``encoder.{i}.out`` at each row's source positions (left-aligned, (B, S, D)),
    ``decoder.{i}.out`` at the decoder inputs' ((B, T, D))."""
    _placed.value = (list(sources), steps)
    try:
        yield
    finally:
        _placed.value = None


def _placed_sites(encoder: HookPoint, decoder: HookPoint):
    """A forward hook passing a module's output (B, N, D) at the source's and the decoder
    inputs' positions through the two sites (only inside ``placing``, only where this thread
    hooks them): a layer's output, or the token embeddings."""

    def hook(module, args, output):
        where = getattr(_placed, "value", None)
        if not any_on() or where is None or not (encoder.on() or decoder.on()):
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


def _placed_pair(points: dict, module: nn.Module, suffix: str) -> None:
    """The ``encoder.{suffix}`` and ``decoder.{suffix}`` sites on a module's output."""
    encoder, decoder = (
        HookPoint(suffix.rsplit(".", 1)[-1], f"{side}.{suffix}") for side in ("encoder", "decoder")
    )
    points[encoder.name], points[decoder.name] = encoder, decoder
    module.register_forward_hook(_placed_sites(encoder, decoder))


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """The model's hook points by site name (installed on first use): each layer's ``z``
    (B, N, H, Dh) over the whole sequence; its output, and the token embeddings, at the source
    and at the decoder inputs (``placing``)."""
    points = getattr(model, POINTS, None)
    if points is not None:
        return points
    points = {}
    setattr(model, POINTS, points)
    heads = model.config.num_attention_heads  # GPT-2's config maps it to n_head
    for i, layer in enumerate(layers_of(model)):
        name = f"decoder.{i}.self.z"
        points[name] = HookPoint("z", name)
        w_o = output_projection_of(layer)
        setattr(w_o, POINTS, points)
        w_o.register_forward_pre_hook(heads_site(name, heads, before=True))
        _placed_pair(points, layer, f"{i}.out")
        layer.register_forward_pre_hook(_keep_inputs(i), with_kwargs=True)
    embed = part(base(model), architecture_of(model).stack().embed)
    _placed_pair(points, embed, "embed")
    layers_of(model)[-1].register_forward_hook(_keep_last)
    return points
