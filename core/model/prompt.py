"""Translation by prompting: the prompt a decoder-only model reads, the three blocks of its
one attention that the studio shows as an encoder-decoder's three kinds, and one batched pass
cut into them (``Pass``).

A template (``English: {src}\\nFrench:`` by default, any text holding ``{src}`` once) is cut
at ``{src}``: the ids before the English span (the tokenizer's start token included where it
adds one), the span itself, the ids after it. The model continues the prompt; its
continuation is the translation, read up to the end of the line. The sequence it reads is

    before · source (S: the sentence's pieces, then after[0]) · after[1:-1]
           · decoder inputs (T: after[-1], then the output[:-1])

so the first id after the sentence (a new line, by default) plays an encoder's end token, and
the last one (``:``) the decoder's start token: the first output is predicted there. Of
each layer's causal self-attention (N × N) the studio shows three blocks:

- ``encoder``: the source's rows over the source (S × S; causal, so its upper triangle is 0);
- ``decoder_self``: the decoder inputs' rows over themselves (T × T, causal);
- ``cross``: the decoder inputs' rows over the source (T × S): an encoder-decoder's
  cross-attention, what the alignment readers read.

A block's rows do not sum to 1: each row's other weight is on the template's tokens (and the
first token, where many heads park weight). The template is a user's text: it is cut, never
formatted (no ``str.format`` on it), and bounded in length.

Shape key: L layers, H heads, N sequence, S source pieces, T decoder steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.model.parts import MAX_TEMPLATE_CHARS, TranslationError

SLOT = "{src}"


def template_problem(template: str) -> str | None:
    """Why a template cannot make a prompt, in one line; None when it can."""
    if len(template) > MAX_TEMPLATE_CHARS:
        return (
            f"The prompt template has {len(template):,} characters; at most {MAX_TEMPLATE_CHARS}."
        )
    if template.count(SLOT) != 1:
        return f"The prompt template must hold {SLOT} exactly once, where the sentence goes."
    if not template.split(SLOT)[1].strip(" "):
        return (
            f"The prompt template needs text after {SLOT} (such as a new line and 'French:'): "
            "the model reads it before it writes the translation."
        )
    return None


def template_parts(template: str) -> tuple[str, str, str]:
    """(the text before the sentence, the spaces that lead into it, the text after it): the
    spaces at the end of the first part go with the sentence, as a tokenizer reads them."""
    before, after = template.split(SLOT)
    kept = before.rstrip(" ")
    return kept, before[len(kept) :], after


@dataclass(frozen=True)
class PromptLayout:
    """The ids a template puts around a source: ``before`` it, ``after`` it (the last id
    of ``after`` is the first decoder input), and the spaces that lead into it. A layout
    that reads no source (``unprompted``: a model trained here on the induction task) is its
    start token alone, then the output: the source is empty, ``after`` read whole after it."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    gap: str  # what precedes the sentence's first word ("" or " ")
    reads_source: bool = True  # False: no sentence is read (``after[0]`` ends none)

    def source_ids(self, pieces) -> list[int]:
        """A sentence's pieces as the source: the first id after them ends it (none where
        no source is read)."""
        return [*pieces, self.after[0]] if self.reads_source else []

    @property
    def _between(self) -> tuple[int, ...]:
        """The ids between the source and the decoder inputs: ``after`` but its last id, less
        its first where that one ends the source."""
        return self.after[1 if self.reads_source else 0 : -1]

    def prompt(self, src_ids) -> list[int]:
        """What the model reads before it writes: the template around a source."""
        return [*self.before, *src_ids, *self._between, self.after[-1]]

    def sequence(self, src_ids, tgt_in) -> list[int]:
        """The ids the model reads for a source and its decoder inputs (``tgt_in[0]`` is
        ``after[-1]``)."""
        return [*self.before, *src_ids, *self._between, *tgt_in]

    def spans(self, S: int, T: int) -> tuple[slice, slice]:
        """(the source's positions, the decoder inputs' positions) in ``sequence``."""
        a = len(self.before)
        c = a + S + len(self._between)
        return slice(a, a + S), slice(c, c + T)


TRAINED_LAYOUT = "source-eos-bos"  # a decoder-only model trained here on translation reads this


def source_eos_bos(eos_id: int, bos_id: int) -> PromptLayout:
    """The layout of a decoder-only model trained here on translation: ``source <eos> <bos>``,
    then the output (``<eos>`` ends the source, ``<bos>`` is the first decoder input)."""
    return PromptLayout((), (eos_id, bos_id), "")


def unprompted(start_id: int) -> PromptLayout:
    """The layout of a model that reads no prompt: its start token, then its output."""
    return PromptLayout((), (start_id,), "", reads_source=False)


def layout_of(tokenizer, template: str, meta: dict) -> PromptLayout:
    """The ids ``template`` puts around a source for this tokenizer; a model trained here on
    the induction task reads none: its start token, then its output (``unprompted``); one
    trained here on translation (or the lm task) reads the sentence as it was trained, without
    a template (``source_eos_bos``). TranslationError for too little after ``{src}``."""
    if meta.get("task") == "induction":
        return unprompted(int(tokenizer.bos_token_id))
    if meta.get("layout") == TRAINED_LAYOUT or meta.get("task") == "lm":  # trained here on
        # translation, or on the same text packed (a folder written before it named its layout)
        return source_eos_bos(int(tokenizer.eos_token_id), int(tokenizer.bos_token_id))
    before, gap, after = template_parts(template)
    first = tokenizer(before)["input_ids"]  # the start token, where it adds one
    rest = tokenizer(after, add_special_tokens=False)["input_ids"]
    if len(rest) < 2:
        raise TranslationError(
            "The text after {src} must be two tokens or more: the first ends the sentence, "
            "the model writes after the last (e.g. a new line and 'French:')."
        )
    return PromptLayout(tuple(first), tuple(rest), gap)


def blocks(weights: torch.Tensor, source: slice, steps: slice) -> dict[str, torch.Tensor]:
    """{kind: block} of (..., N, N) attention weights: the source's rows over the source,
    the steps' over the steps, the steps' over the source."""
    return {
        "encoder": weights[..., source, source],  # (..., S, S)
        "decoder_self": weights[..., steps, steps],  # (..., T, T)
        "cross": weights[..., steps, source],  # (..., T, S)
    }


@dataclass
class Pass:
    """One forward of a padded batch over the whole sequences."""

    logits: torch.Tensor | None  # (B, T, V) at the decoder inputs, when asked for
    attentions: torch.Tensor | None  # (L, B, H, N, N), when asked for
    stream: list[torch.Tensor]  # L + 1 x (B, N, D): each layer's input, the last one's output
    sources: list[slice]  # each row's source positions
    steps: slice  # the decoder inputs' positions (the same in every row)

    def block(self, kind: str, b: int, S: int) -> torch.Tensor:
        """(L, H, Tq, Tk) one row's block of ``kind``, its source's columns first and zeros
        after them (up to S)."""
        w = blocks(self.attentions[:, b], self.sources[b], self.steps)[kind]
        if kind == "decoder_self":
            return w
        pad = [0, S - w.size(-1)] + ([0, S - w.size(-2)] if kind == "encoder" else [])
        return nn.functional.pad(w, pad)

    def at_source(self, states: torch.Tensor, S: int) -> torch.Tensor:
        """(B, S, D) of (B, N, D): each row's source positions first, zeros after them."""
        out = states.new_zeros(states.size(0), S, states.size(-1))
        for b, where in enumerate(self.sources):
            out[b, : where.stop - where.start] = states[b, where]
        return out
