"""The question path and attribution patching ask, as activation patching asks it (the two
checked sources, the decoder's inputs, the two answers and each run's metric), and the three
patching methods' names.

The pieces are ``core.attention.patching``'s own (its source checks, its step found or given,
its byte budget checked before any pass), gathered here so that a method other than patching
one component at a time asks exactly the question ``patch`` asks and normalises its effects
by the same gap.

Shape key: S source pieces, T decoder inputs, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.attention import patching
from core.attention.patching import DIRECTIONS, Patching
from core.model.interface import TranslationModel
from core.model.parts import MAX_LEN, TranslationError
from core.runs import budget

METHODS = ("activation", "attribution", "path")  # how a patching question is answered: each
# component patched for real, the gradient's estimate of every patch at once, or each head's
# effect through chosen receivers only
METHOD_NAMES = {
    "activation": "activation",
    "attribution": "attribution (fast estimate)",
    "path": "path (through receivers)",
}


@dataclass
class Question:
    """Two runs of one length and the step whose logit difference they are measured by."""

    clean: torch.Tensor  # (1, S) the clean source's ids
    corrupt: torch.Tensor  # (1, S) the corrupted source's ids
    tokens: tuple[list[str], list[str]]  # the clean and the corrupted source pieces
    tgt_in: torch.Tensor  # (1, T) the start token and the prefix
    answers: tuple[int, int]  # the clean run's answer id and the corrupted run's
    given: bool  # the prefix or the answers were given, not found by translating
    prompt: int | None  # a prompted model's template positions (budget.prompt_positions)
    direction: str = DIRECTIONS[0]

    @property
    def runs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(donor, receiver) sources: clean into corrupted to denoise, the other way to noise."""
        pair = (self.clean, self.corrupt)
        return pair if self.direction == "denoise" else pair[::-1]

    def metric(self, logits: torch.Tensor) -> torch.Tensor:
        """(B,) logit(answer) - logit(wrong) of (B, V) last-step logits."""
        return logits[:, self.answers[0]] - logits[:, self.answers[1]]

    def effects(self, metrics: torch.Tensor, m_clean: float, m_corrupt: float) -> list[float]:
        """Each receiving run's metric as ``patch`` normalises it (0 = nothing moved)."""
        moved = metrics - m_corrupt if self.direction == "denoise" else m_clean - metrics
        return (moved / (m_clean - m_corrupt)).tolist()

    def result(self, m: TranslationModel, metrics: tuple[float, float], rows, sequence=None):
        """The answer as ``patch`` gives it (a ``Patching``): ``metrics`` (clean, corrupted),
        ``rows``, a one-stack model's whole ``sequence`` of tokens."""
        words = m.target_tokens([*self.tgt_in[0].tolist(), *self.answers])
        step = self.tgt_in.size(1) - 1
        return Patching(
            *self.tokens,
            words[: step + 1],
            words[step + 1],
            words[step + 2],
            *metrics,
            list(rows),
            self.direction,
            self.given,
            sequence or [],
        )


def ask(
    m: TranslationModel,
    clean: str,
    corrupt: str,
    direction: str = DIRECTIONS[0],
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str | None = None,
    max_len: int = MAX_LEN,
) -> Question:
    """The question ``patch`` would ask of these sentences (TranslationError in one line,
    before any pass past the server's bytes); call it inside ``m.evaluating()``."""
    if direction not in DIRECTIONS:
        raise TranslationError(f"The direction is one of {', '.join(DIRECTIONS)}.")
    (a_ids, a_tokens), (b_ids, b_tokens) = patching._sources(m, clean, corrupt)
    prompt = budget.prompt_positions(m)
    patching._check_pass(m, len(a_ids), 1, prompt)  # before any pass: the shortest question
    src_a, src_b = (torch.tensor([i], device=m.device) for i in (a_ids, b_ids))  # (1, S)
    given = prefix is not None or answers is not None
    tgt_in, ids = (
        patching._given_question(m, (src_a, src_b), prefix, answers, target_lang, prompt)
        if given
        else patching._found_question(m, (src_a, src_b), max_len, target_lang)
    )
    patching._check_pass(m, len(a_ids), tgt_in.size(1), prompt)  # the question's
    return Question(src_a, src_b, (a_tokens, b_tokens), tgt_in, ids, given, prompt, direction)
