"""A teacher-forced pass's decoder outputs computed again from any head's layer on, for every
family: what removing heads in that layer or above changes, the layers below as they were
(TransformerLens's ``start_at_layer``).

``resumable`` runs one pass keeping every layer's call (``core.model.layer_runs``), then
``again(kind, layer)`` runs the layers of the stack that holds a head of ``kind`` from
``layer`` on and what follows the last one (the final norm, where the stack has one; a
one-stack model's cut to its output positions, its adapter's ``hidden_resumable``), under this
thread's hooks. A head of a two-stack model's encoder changes the memory every decoder layer
reads: the pass is run whole again instead.

Shape key: B batch, S source tokens, T decoder steps, D model width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from core.model import sites
from core.model.capabilities import STUDIO
from core.model.layer_runs import LayerInputs
from core.model.record import side_of

Again = Callable[[str, int], torch.Tensor]  # (kind, layer) -> (B, T, D)


def resumable(m, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, Again]:
    """``m.hidden`` (B, T, D) of one pass of (B, S) sources and (B, T) decoder inputs, and
    ``again(kind, layer)``: the same outputs with layer ``layer`` of ``kind``'s stack and the
    ones above run again under this thread's hooks (``m``: a
    ``core.model.interface.TranslationModel``)."""
    if m.one_sequence:  # its adapter cuts its one sequence to the output positions
        whole, from_layer = m.hidden_resumable(src, tgt_in)
        return whole, lambda kind, layer: from_layer(layer)
    m.hook_points()  # a Hugging Face model's permanent hooks, installed on first use
    with LayerInputs() as kept:
        whole = m.hidden(src, tgt_in)  # (B, T, D)
    norm = final_norm(m)

    def again(kind: str, layer: int) -> torch.Tensor:
        if side_of(kind) == "encoder":  # the memory changes: every decoder layer reads it
            return m.hidden(src, tgt_in)  # (B, T, D)
        return norm(kept.run("decoder", layer))  # (B, T, D)

    return whole, again


def final_norm(m) -> nn.Module:
    """What a two-stack model's decoder applies after its last layer: the studio's
    ``final_ln`` (an identity if post-LN), a Hugging Face family's final norm (the table's,
    ``core.model.architectures``), or nothing (a post-LN family)."""
    if m.family == STUDIO:
        return m.model.decoder.final_ln
    return sites.final_norm(m.model) or nn.Identity()
