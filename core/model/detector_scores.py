"""The head detector's formulas as pure tensor functions: previous-token, duplicate-token and
induction scores of attention weights, and the in-context-learning score and copy losses of
token losses, over a start token and n distinct tokens read twice.

They live in the engine so that a training process can score its model while it trains
(``core.training.circuits``) with the definitions ``core.attention.head_detectors`` reads any
model with: one formula, two callers.

A head's score for a pattern is TransformerLens's "mul" measure (``exclude_bos`` and
``exclude_current_token`` off), the attention weight on the pattern's cells divided by the rows
the pattern reaches instead of by every row, so that a perfect head scores 1. The
in-context-learning score is Olsson et al.'s (2022) loss at the 500th token minus the loss at
the 50th of a 512-token context, at positions scaled to this context.

Shape key: L layers, B sequences, H heads, N = 2n + 1 tokens.
"""

from __future__ import annotations

import torch

SCORES = ("previous_token", "duplicate_token", "induction")
OLSSON = (50, 500, 512)  # Olsson et al.'s early and late tokens, of their 512-token contexts


def detection_patterns(n: int) -> dict[str, torch.Tensor]:
    """{score: (N, N) 0/1 pattern} of a start token and n distinct tokens read twice
    (TransformerLens's ``get_*_head_detection_pattern`` of that sequence)."""
    N = 2 * n + 1
    previous = torch.zeros(N, N)
    previous[1:, :-1] = torch.eye(N - 1)  # query i -> key i - 1
    second = torch.arange(n + 1, N)  # the second copy's queries
    duplicate = torch.zeros(N, N)
    duplicate[second, second - n] = 1  # -> the same token in the first copy
    induction = torch.zeros(N, N)
    induction[second, second - n + 1] = 1  # -> the token after it
    return {"previous_token": previous, "duplicate_token": duplicate, "induction": induction}


def pattern_score(weights: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """(...) the weight of (..., N, N) attention on a 0/1 pattern's cells, per row the pattern
    reaches: TransformerLens's "mul" score with the rows it reaches as its denominator."""
    reached = pattern.sum(-1).gt(0).sum()  # rows with a cell
    return (weights * pattern).sum((-2, -1)) / reached


def scores_of(weights: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """{score: (L, H)} of (L, B, H, N, N) weights over sequences of n tokens read twice, the
    mean over the B sequences."""
    return {
        name: pattern_score(weights.float(), p).mean(1) for name, p in detection_patterns(n).items()
    }


def icl_positions(N: int) -> tuple[int, int]:
    """(early, late) tokens of an N-token context: Olsson's 50th and 500th of 512, scaled."""
    early, late, context = OLSSON
    return max(1, round(N * early / context)), min(N - 1, round(N * late / context))


def icl_score(losses: torch.Tensor, n: int) -> float:
    """Loss at the late token minus loss at the early one, of (N - 1,) losses of token
    1 .. N - 1 (Olsson et al. 2022): negative where later tokens are predicted better."""
    early, late = icl_positions(2 * n + 1)
    return float(losses[late - 1] - losses[early - 1])


def first_copy_loss(losses: torch.Tensor, n: int) -> float:
    """Mean loss over the first copy's tokens, of (N - 1,) losses of token 1 .. N - 1."""
    return float(losses[:n].mean())


def repeat_loss(losses: torch.Tensor, n: int) -> float:
    """Mean loss over the second copy's tokens, of (N - 1,) losses of token 1 .. N - 1."""
    return float(losses[n:].mean())
