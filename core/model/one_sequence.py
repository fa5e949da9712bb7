"""What the one interface asks of a model of one stack over one sequence (a decoder-only model
reading its prompt and output, or an encoder-only one reading a sentence), and what a model of
two stacks answers: its defaults (flags, words, start ids, loss pairs), and each question
about the one sequence declined in one line (ValueError).

``TranslationModel`` inherits it; ``PromptedModel`` and ``MaskedModel`` answer it. Head roles
(``core.model.interface.token_weights``), Inside a head, head importance's loss and the
one-attention attribution read a model through it; the projector's sides are a capability row
(``decoder_side``).

Shape key: L layers, H heads, N tokens of the sequence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.model.parts import SequenceHeads, TranslationError

TWO_STACKS = "Only a one-sequence model reads its source and output as one sequence."


class OneSequence:
    """A one-sequence model's questions, declined by a model of two stacks."""

    one_sequence: bool = False  # one stack over one sequence (decoder-only, or encoder-only)
    kinds_words: str = ""  # what its three kinds of attention are, where not an encoder-decoder's
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

    def output_positions(self, src: torch.Tensor, tgt_in: torch.Tensor) -> list[list[int]]:
        """Each row's output positions in the one sequence a batch pass of (B, S) sources and
        (B, T) decoder inputs reads (what ``hidden`` is the last layer's stream at): the
        decoder inputs, the last T positions of a sequence whose every source is left-padded
        to the longest (``sequence_spans`` of the longest rows, trailing padding not counted);
        declined by a model of two stacks, whose decoder's stream is at its outputs."""
        S, T = (max(map(len, unpadded(x, self.pad_id))) for x in (src, tgt_in))
        steps = self.sequence_spans(S, T)[1]
        return [list(range(steps.start, steps.stop))] * src.size(0)

    def start_ids(self) -> list[int]:
        """The ids it reads before any text (its start token, or none)."""
        return []


def without_padding(ids: Sequence[int], pad: int, token: str) -> list[int]:
    """The ids of typed text; TranslationError where they hold the padding id: a padded
    batch's rows end where their padding starts (``unpadded``), so a one-sequence model cannot
    read it inside a text (a typed ``<|endoftext|>``, GPT-2's padding, cut the row short)."""
    if pad in ids:
        raise TranslationError(
            f"The text holds {token}, the model's padding token, which it cannot read inside "
            "a text: remove it."
        )
    return list(ids)


def unpadded(ids: torch.Tensor, pad: int) -> list[list[int]]:
    """Each row of (B, .) padded ids without its trailing padding."""
    rows = []
    for row in ids.tolist():
        while row and row[-1] == pad:
            row.pop()
        rows.append(row)
    return rows


def at_outputs(states: torch.Tensor, positions: list[list[int]]) -> torch.Tensor:
    """(B, T, D) each row's (B, N, D) ``states`` at its output ``positions``
    (``output_positions``), zeros after a row's last (T: the most positions of a row)."""
    out = states.new_zeros(states.size(0), max(map(len, positions)), states.size(-1))  # (B, T, D)
    for b, where in enumerate(positions):
        out[b, : len(where)] = states[b, where]
    return out
