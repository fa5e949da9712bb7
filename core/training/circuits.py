"""The circuit scores of a model in training on the induction task, and where its induction
head formed: every head's previous-token, duplicate-token and induction scores and the
in-context-learning score at each evaluation, and the phase change read from them.

``circuit_scores`` reads the model as ``core.attention.head_detectors`` reads any model, with
the same formulas (``core.model.detector_scores``), on fixed sequences a training process makes
itself: a start token, then n distinct random tokens of the task's K types (ids 4 .. K + 3),
then the same n again, drawn from their own seeded generator (the training's random streams are
never touched). ``phase_change`` finds the best induction head in a run's eval records and the
evaluations between which it formed (Olsson et al. 2022 mark the phase change as the window in
which induction heads form and the loss on repeated tokens falls).

Every run that writes no translation is scored so: the induction and lm tasks, and an
encoder's masked-LM run (``core.model.encoder_trainee``). An encoder reads the same sequences
both ways, so the patterns are its bidirectional attention (a weight on a later token counts
toward no score: the detectors' cells all look back) and each token's loss is its masked-LM
loss with that token alone masked; both copies are in view, so a model that copies fills the
first copy from the repeat as well as the repeat from it, and the ICL score measures no
in-context learning there (docs/training.md, "The encoder").

Shape key: L layers, B sequences, H heads, N = 2n + 1 tokens.
"""

from __future__ import annotations

import math

import torch

from core.corpus.induction import FIRST_TOKEN
from core.corpus.vocab import Vocab
from core.model import detector_scores as formulas

SEQUENCES = 8  # B: the sequences each evaluation's scores are averaged over
SEED = 0  # of those sequences: the same at every evaluation of every run
DIGITS = 4  # the scores and losses as the eval records keep them
BEFORE = 0.1  # an induction score below this: no induction head yet
FORMED = 0.5  # an induction score this high, to the end of the run: the head has formed


TEXT_LENGTH = 20  # n of a language model's scores (TransformerLens's head detector's length)


def circuit_sizes(summary: dict, max_positions: int) -> tuple[int, int]:
    """(n, K) a run scores its heads with: the induction task's own lengths and types, or for
    a language model (the lm task) TEXT_LENGTH random pieces of its whole vocabulary read
    twice (within its position table), as the head detector reads any model."""
    if summary.get("task") == "induction":
        return summary["induction_length"], summary["induction_tokens"]
    types = int(summary["tgt_vocab"]) - FIRST_TOKEN
    return min(TEXT_LENGTH, (max_positions - 1) // 2), types


def circuit_sequences(n: int, types: int, sequences: int = SEQUENCES, seed: int = SEED):
    """(B, 2n + 1) ids [bos, a, a]: each ``a`` n distinct random ids of FIRST_TOKEN ..
    FIRST_TOKEN + types - 1 (n at most ``types``), from a generator of ``seed``."""
    g = torch.Generator().manual_seed(seed)
    copies = torch.stack([torch.randperm(types, generator=g)[:n] for _ in range(sequences)])
    copies = copies + FIRST_TOKEN  # (B, n)
    start = torch.full((sequences, 1), Vocab.bos_id, dtype=torch.long)  # (B, 1)
    return torch.cat([start, copies, copies], dim=1)  # (B, 2n + 1)


def circuit_scores(
    model: torch.nn.Module, n: int, K: int, sequences: int = SEQUENCES, seed: int = SEED
) -> dict:
    """Every head's three detector scores and the losses along ``sequences`` sequences
    [bos, a, a] of n distinct tokens of the K types (n is cut to K where K is smaller; the
    dict's "length" says which), as JSON-able lists and floats: "previous_token",
    "duplicate_token", "induction" (L lists of H), "repeat_loss", "first_copy_loss", "icl",
    "length", "sequences". The model offers ``patterns(ids)`` (L, B, H, N, N) and
    ``token_losses(ids)`` (B, N - 1); it is read in eval mode without gradients and left in
    the mode it was in."""
    n = min(n, K)
    device = next(model.parameters()).device
    ids = circuit_sequences(n, K, sequences, seed).to(device)  # (B, N)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            weights = model.patterns(ids).float().cpu()  # (L, B, H, N, N)
            losses = model.token_losses(ids).float().mean(0).cpu()  # (N - 1,)
    finally:
        model.train(training)
    scores = formulas.scores_of(weights, n)  # {score: (L, H)}
    out = {name: rounded(scores[name].tolist()) for name in formulas.SCORES}
    return out | {
        "repeat_loss": round(formulas.repeat_loss(losses, n), DIGITS),
        "first_copy_loss": round(formulas.first_copy_loss(losses, n), DIGITS),
        "icl": round(formulas.icl_score(losses, n), DIGITS),
        "length": n,
        "sequences": sequences,
    }


def rounded(grid: list[list[float]]) -> list[list[float]]:
    """An (L, H) list of lists, each value to DIGITS places."""
    return [[round(v, DIGITS) for v in row] for row in grid]


def phase_change(records: list[dict]) -> dict | None:
    """Where the induction head formed, from a run's eval records (each with "step" and
    "circuits", as ``circuit_scores`` gives them; others are skipped), or None when no head
    formed.

    The head is the one with the highest induction score at the last record. It has formed
    when its score is at least FORMED (0.5) at the last record: "formed" is the first step
    from which it stays at least FORMED at every later record, "before" the last step ahead of
    it at which it was below BEFORE (0.1), or None when it never was (already above at the
    first record). Between them ("before", or the first record, to "formed") lies the phase
    change; "start" and "end" are the two consecutive evaluations in it between which the score
    rose fastest per step (the band a page shades), "rise" the score gained between them, and
    "repeat_loss_before" / "repeat_loss_after" the loss on the repeated tokens at "start" and
    at "end". A spike that falls back below FORMED before the end is not the phase change.
    """
    steps, scores, losses, head = best_head_series(records)
    if not steps or scores[-1] < FORMED:
        return None
    formed = len(scores) - 1
    while formed > 0 and scores[formed - 1] >= FORMED:
        formed -= 1
    below = [i for i in range(formed) if scores[i] < BEFORE]
    first = below[-1] if below else 0
    start = steepest_rise(steps, scores, first, formed)
    return {
        "layer": head[0],
        "head": head[1],
        "score": scores[-1],
        "before": steps[below[-1]] if below else None,
        "formed": steps[formed],
        "start": steps[start] if start is not None else None,
        "end": steps[start + 1] if start is not None else None,
        "rise": round(scores[start + 1] - scores[start], DIGITS) if start is not None else None,
        "repeat_loss_before": losses[start] if start is not None else None,
        "repeat_loss_after": losses[start + 1] if start is not None else None,
    }


def best_head_series(records: list[dict]):
    """(steps, the best head's induction scores, repeat losses, (layer, head)) of the records
    that carry circuit scores, in step order (the last record of a step counts); empty lists
    when none does."""
    by_step = {r["step"]: r["circuits"] for r in records if isinstance(r.get("circuits"), dict)}
    if not by_step:
        return [], [], [], None
    steps = sorted(by_step)
    last = by_step[steps[-1]]["induction"]  # (L, H)
    head = max(
        ((layer, h) for layer, row in enumerate(last) for h in range(len(row))),
        key=lambda lh: last[lh[0]][lh[1]],
    )
    scores = [_score_at(by_step[s]["induction"], *head) for s in steps]
    losses = [by_step[s].get("repeat_loss", math.nan) for s in steps]
    return steps, scores, losses, head


def _score_at(grid, layer: int, head: int) -> float:
    """A head's score in one record's (L, H) grid; NaN where that record has none (a grid of
    another shape, a score stored as null)."""
    row = grid[layer] if layer < len(grid) else []
    score = row[head] if head < len(row) else None
    return float(score) if isinstance(score, int | float) else math.nan


def steepest_rise(steps: list[int], scores: list[float], first: int, last: int) -> int | None:
    """The index i in [first, last) whose score rises most per step to i + 1 (None when none
    rises: ``last`` is ``first``, the head above FORMED from the first record on)."""
    rises = [
        ((scores[i + 1] - scores[i]) / max(steps[i + 1] - steps[i], 1), i)
        for i in range(first, last)
    ]
    rising = [(slope, i) for slope, i in rises if slope > 0]
    return max(rising)[1] if rising else None
