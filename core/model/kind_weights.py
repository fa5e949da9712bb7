"""Every attention's weights over the sequence its queries read, whatever the family: what head
roles read (``core.attention.head_roles``).

A model of two stacks has three: the encoder's self-attention over the source (it may look
forward), the decoder's causal self-attention over its inputs (the output fed back) and the
cross-attention from those inputs to the source; a one-stack model has one, over its whole
sequence (a decoder-only model's causal one over its prompt and output, a masked model's over
its sentence, both ways). ``translation_weights`` reads them from one teacher-forced pass of a
translation (the door's record); ``twice_weights`` reads each self-attention over random tokens
read twice: a model of two stacks reads its copies as its source (its specials around them)
and as its decoder inputs (after its start token) in one pass, the source of that decoder pass
being the encoder's copies; a one-stack model reads its copies after its start ids, alone
(``core.model.interface.token_weights``).

Shape key: L layers, H heads, Tq queries, Tk keys, N tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.model.interface import TranslationModel, token_weights
from core.model.record import KINDS, WHOLE, AttentionRecord


@dataclass
class KindWeights:
    """One attention of a pass, every layer: its weights and which keys its queries may see."""

    kind: str  # an attention kind (``KINDS``), or WHOLE: a one-stack model's one attention
    weights: torch.Tensor  # (L, H, Tq, Tk) the model's own, float32, on the CPU
    mask: torch.Tensor  # (Tq, Tk) True where a query may attend
    own: bool  # its queries and keys are one sequence's tokens (a self-attention)

    @property
    def looks_ahead(self) -> bool:
        """Whether a query may attend to a later token of its own sequence (not causal)."""
        return self.own and bool(self.mask.triu(1).any())


def _stacked(layers: list[AttentionRecord]) -> torch.Tensor:
    """(L, H, Tq, Tk) the first row's weights of every layer, float32 on the CPU."""
    return torch.stack([a.weights[0] for a in layers]).float().cpu()


def _kind(kind: str, layers: list[AttentionRecord], own: bool) -> KindWeights:
    """One attention's weights and mask, from its records."""
    w = _stacked(layers)  # (L, H, Tq, Tk)
    mask = layers[0].mask.expand(1, 1, *w.shape[-2:])[0, 0].cpu()  # (Tq, Tk)
    return KindWeights(kind, w, mask, own)


def translation_weights(
    m: TranslationModel, src_ids: Sequence[int], out_ids: Sequence[int]
) -> list[KindWeights]:
    """Each attention of ``out_ids`` teacher-forced after ``src_ids``, in the model's order:
    a model of two stacks's three kinds, a one-stack model's one attention (WHOLE)."""
    r = m.forced(src_ids, out_ids)
    if r.one_stack is not None:
        return [_kind(WHOLE, r.one_stack.attention, True)]
    return [_kind(k, r.attention[k], k != "cross") for k in KINDS]


def twice_weights(
    m: TranslationModel, source: Sequence[int], output: Sequence[int]
) -> dict[str, tuple[torch.Tensor, int]]:
    """{attention: ((L, H, N, N) weights, where the first copy begins)} of each self-attention
    over random tokens read twice: a model of two stacks reads ``source`` twice as its source
    and ``output`` twice as its decoder inputs, in one pass; a one-stack model reads ``output``
    twice after its start ids (WHOLE)."""
    n = len(output)
    if m.one_sequence:
        ids = [*m.start_ids(), *output, *output]
        return {WHOLE: (token_weights(m, ids).float().cpu(), len(ids) - 2 * n)}
    pre, post = m.framing([], target=False)  # the specials around a source
    r = m.forced([*pre, *source, *source, *post], [*output, *output, m.eos_id])
    T = r.output_length  # the decoder inputs: its start, then the copies
    return {
        "encoder": (_stacked(r.attention["encoder"]), len(pre)),
        "decoder_self": (_stacked(r.attention["decoder_self"]), T - 2 * n),
    }
