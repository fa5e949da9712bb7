"""A model's layers run again from any one of them on a residual stream given, up to any later
one (TransformerLens's ``start_at_layer`` / ``stop_at_layer``), for every family through one
mechanism: each layer's other inputs are kept from one pass.

Every layer of every family carries a permanent forward pre-hook (the studio's Transformer
registers it with its hook sites, ``core.model.sites`` on every Hugging Face layer the table
(``core.model.architectures``) names) that, while this thread has a ``LayerInputs`` open,
keeps the layer's call: its positional and keyword arguments (the masks, a rotary family's cos
and sin, T5's position bias, the encoder's memory). ``LayerInputs.run`` then calls layers
``start`` .. ``stop - 1`` of one stack themselves, the stream given in place of the kept
one, each layer's other arguments as kept (broadcast to the stream's batch when they were
kept at batch 1): the layers below ``start`` are not run, the hooks inside the layers (heads
removed, values zeroed, sites read) act as in a whole pass. A layer is named by its stack and
index: ``encoder.{i}``, ``decoder.{i}``, and a one-stack model's ``sequence.{i}`` over its
whole sequence.

Shape key: B batch, N tokens of the stack (S, T or the one sequence), D model width.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

_open = threading.local()  # this thread's LayerInputs, while one is open
PER_HEAD = ("alibi",)  # keyword arguments (B·H, ...) whose first dimension is batch x heads


class LayerInputs:
    """Every layer's call (module, positional and keyword arguments) of the passes this thread
    runs inside the block, by layer name; ``run`` runs them again from any one on."""

    def __init__(self):
        self.calls: dict[str, tuple[nn.Module, tuple, dict]] = {}

    def __enter__(self) -> LayerInputs:
        _open.value = self
        return self

    def __exit__(self, *exc) -> None:
        _open.value = None

    @staticmethod
    def open() -> bool:
        """Whether this thread keeps layer inputs now."""
        return getattr(_open, "value", None) is not None

    def stream_in(self, name: str) -> torch.Tensor:
        """(B, N, D) the stream layer ``name`` was given in the kept pass."""
        _, args, kwargs = self.calls[name]
        return args[0] if args else kwargs["hidden_states"]

    def run(self, side: str, start: int, stream=None, stop: int | None = None) -> torch.Tensor:
        """(B, N, D) the stream at layer ``stop``'s input of ``side`` ("encoder", "decoder",
        "sequence"): layers ``start`` .. ``stop - 1`` run on ``stream`` (B, N, D), layer
        ``start``'s input (None: the one it was given), under this thread's hooks; ``stop``
        None: the last layer's output (before any final norm). Equal to the kept pass's where
        nothing changes it."""
        if LayerInputs.open():
            raise RuntimeError("LayerInputs.run runs outside LayerInputs (it would keep its own)")
        stop = self.depth(side) if stop is None else stop
        if not 0 <= start <= stop <= self.depth(side):
            raise ValueError(f"layers {start}..{stop} of {side}: it has {self.depth(side)}")
        x = self.stream_in(f"{side}.{start}") if stream is None else stream
        B = x.size(0) if self.stream_in(f"{side}.{start}").size(0) == 1 else 1  # 1: as kept
        for i in range(start, stop):
            layer, args, kwargs = self.calls[f"{side}.{i}"]
            args, kwargs = _batched(args, B), _batched(kwargs, B)
            out = layer(x, *args[1:], **kwargs) if args else layer(**{**kwargs, "hidden_states": x})
            x = out if isinstance(out, torch.Tensor) else out[0]
        return x

    def depth(self, side: str) -> int:
        """How many layers of ``side`` the kept pass ran."""
        i = 0
        while f"{side}.{i}" in self.calls:
            i += 1
        return i


def layer_calls(m, src, tgt_in, memory=None) -> LayerInputs:
    """Every layer's call of one teacher-forced pass of the model ``m`` (a
    ``core.model.interface.TranslationModel``; ``memory``: the encoder's output, given
    instead of running the encoder): what ``run`` runs any slice of the stacks again from,
    as often as asked."""
    m.hook_points()  # a Hugging Face model's permanent hooks, installed on first use
    with LayerInputs() as kept:
        m.run(src, tgt_in, memory=memory)
    return kept


def keeping(name: str):
    """A layer's forward pre-hook (``with_kwargs=True``): its call, for this thread's open
    ``LayerInputs``, under ``name``."""

    def hook(module, args, kwargs) -> None:
        kept = getattr(_open, "value", None)
        if kept is not None:
            kept.calls[name] = (module, args, kwargs)

    return hook


def keep_calls(layers, side: str) -> None:
    """Register ``keeping`` on each of one stack's layers (once, when a model is built)."""
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(keeping(f"{side}.{i}"), with_kwargs=True)


def _batched(value, B: int, name: str = ""):
    """``value`` (a tensor, or a tuple, list or dict of them) kept at batch 1, at batch B: each
    tensor of batch 1 and at least two dimensions expanded (masks, positions, memory), an
    ALiBi bias (H, 1, N) repeated to (B·H, 1, N) (BLOOM's, Falcon's: batch-major,
    ``PER_HEAD``); B 1 leaves it as it is."""
    if isinstance(value, torch.Tensor):
        if B > 1 and name in PER_HEAD:
            return value.repeat(B, *[1] * (value.dim() - 1))
        if B > 1 and value.dim() >= 2 and value.size(0) == 1:
            return value.expand(B, *value.shape[1:])
        return value
    if isinstance(value, tuple | list):
        return type(value)(_batched(v, B) for v in value)
    if isinstance(value, dict):
        return {k: _batched(v, B, k) for k, v in value.items()}
    return value
