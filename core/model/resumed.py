"""A teacher-forced pass's decoder outputs computed again from any head's layer on, for every
family: what removing heads in that layer or above changes, the layers below as they were
(TransformerLens's ``start_at_layer``).

``resumable`` runs one pass keeping every layer's call (``core.model.layer_runs``), then
``again(kind, layer)`` runs the layers of the stack that holds a head of ``kind`` from
``layer`` on and what follows the last one (a one-stack model's cut to its output positions,
the door's ``output_positions``; the final norm, where the stack has one, the door's
``stream_layout``), under this thread's hooks. A head of a two-stack model's encoder changes
the memory every decoder layer reads: the pass is run whole again instead.

Shape key: B batch, S source tokens, T decoder steps, N tokens of a one-stack model's sequence,
D model width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from core.model.layer_runs import LayerInputs
from core.model.one_sequence import at_outputs
from core.model.record import side_of

Again = Callable[[str, int], torch.Tensor]  # (kind, layer) -> (B, T, D)


def resumable(m, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, Again]:
    """``m.hidden`` (B, T, D) of one pass of (B, S) sources and (B, T) decoder inputs, and
    ``again(kind, layer)``: the same outputs with layer ``layer`` of ``kind``'s stack and the
    ones above run again under this thread's hooks (``m``: a
    ``core.model.interface.TranslationModel``)."""
    m.hook_points()  # a Hugging Face model's permanent hooks, installed on first use
    with LayerInputs() as kept:
        whole = m.hidden(src, tgt_in)  # (B, T, D)
    norm = final_norm(m)
    if m.one_sequence:  # its one stack over its whole sequence, cut to the output positions
        at = m.output_positions(src, tgt_in)
        return whole, lambda kind, layer: norm(at_outputs(kept.run("sequence", layer), at))

    def again(kind: str, layer: int) -> torch.Tensor:
        if side_of(kind) == "encoder":  # the memory changes: every decoder layer reads it
            return m.hidden(src, tgt_in)  # (B, T, D)
        return norm(kept.run("decoder", layer))  # (B, T, D)

    return whole, again


def final_norm(m) -> nn.Module:
    """What the model's decoder (or one stack) applies after its last layer (its
    ``stream_layout``'s final norm: a pre-LN model's), or nothing (a post-LN one)."""
    return m.stream_layout().final_norm or nn.Identity()
