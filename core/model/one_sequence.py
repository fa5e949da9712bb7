"""What the one interface asks of a model of one stack over one sequence (a decoder-only model
reading its prompt and output, or an encoder-only one reading a sentence), and what a model of
two stacks answers: its defaults (flags, words, start ids, loss pairs), and each question
about the one sequence declined in one line (ValueError).

``TranslationModel`` inherits it; ``PromptedModel`` and ``MaskedModel`` answer it. Head roles,
Inside a head, head importance's loss, the projector's sides and the one-attention attribution
read a model through it.

Shape key: L layers, H heads, N tokens of the sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.model.parts import SequenceHeads

TWO_STACKS = "Only a one-sequence model reads its source and output as one sequence."


class OneSequence:
    """A one-sequence model's questions, declined by a model of two stacks."""

    one_sequence: bool = False  # one stack over one sequence (decoder-only, or encoder-only)
    kinds_words: str = ""  # what its three kinds of attention are, where not an encoder-decoder's
    stream_sides: tuple[str, ...] = ("encoder", "decoder")  # where its tokens have states
    loss_words: str = ""  # what a one-sequence model's head importance measures, in words

    def loss_pairs(self, src_ids, first_pairs) -> list[tuple[list[int], list[int]]]:
        """The (ids, labels) pairs a one-sequence model's loss reads, given each validation
        sentence's ids and its first (source, reference) pair: those pairs (a language
        model's prompt, then the reference)."""
        return list(first_pairs)

    def sequence_ids(self, src_ids: Sequence[int], out_ids: Sequence[int]) -> list[int]:
        """The ids it reads for this source and output (a prompt, then the output but its
        last; or the sentence)."""
        raise ValueError(TWO_STACKS)

    def sequence_patterns(self, ids: Sequence[int]) -> torch.Tensor:
        """(L, H, N, N) its attention weights over ``ids`` (its own ``output_attentions``)."""
        raise ValueError(TWO_STACKS)

    def sequence_heads(
        self, src_ids: Sequence[int], out_ids: Sequence[int], layer: int
    ) -> tuple[SequenceHeads, list[str]]:
        """One layer over ``sequence_ids``: every head's q and k, the mask and its own weights,
        with the sequence's shown tokens."""
        raise ValueError(TWO_STACKS)

    def sequence_spans(self, S: int, T: int) -> tuple[slice, slice]:
        """(the source's positions, the decoder inputs') in ``sequence_ids`` of S source and T
        output tokens (a one-sequence model that translates)."""
        raise ValueError(TWO_STACKS)

    def first_step(self, src_ids: Sequence[int], out_ids: Sequence[int]) -> int:
        """Where the first decoder input (or predicted token) sits in ``sequence_ids``."""
        raise ValueError(TWO_STACKS)

    def hidden_resumable(self, src, tgt_in):
        """``hidden`` of one pass (B, T, D), and ``again(layer)``: the same run again from that
        layer on, the layers below as they were."""
        raise ValueError(TWO_STACKS)

    def start_ids(self) -> list[int]:
        """The ids it reads before any text (its start token, or none)."""
        return []
