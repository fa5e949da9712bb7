"""Contrastive explanations (Yin & Neubig 2022, "Interpreting Language Models with
Contrastive Explanations"; inseq's ``contrast_prob_diff``): why this word rather than that
one. The explained quantity at step t is log p(y_t) - log p(y'_t), y the translation (the
model's own or a target the user gave), y' an alternative (the foil), both read after y's
prefix: a token that pushes y_t up and y'_t down scores high. A foil of another length is
laid on y's steps (``aligned_foil``): compared at the first step where the two differ, or at
the steps a user pairs (inseq's ``contrast_targets_alignments``).

Methods that contrast: the gradient methods (gradient x input and integrated gradients of
the difference at the token embeddings) and occlusion (each source token replaced by the
unknown token in turn, the difference's drop). The others explain how the model mixes its
tokens, the same whatever word is asked about: they cannot contrast.

Shape key: S source tokens, T output tokens, V vocabulary, N occluded sources.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from core.attribution.compose import normalised
from core.attribution.gradients import (
    GradientTask,
    embedding_task,
    grad_input,
    integrated_gradients,
)
from core.attribution.methods import METHODS, Attribution, AttributionError
from core.model.decode import Translation
from core.model.interface import TranslationModel
from core.model.transformer import evaluating

CONTRAST_METHODS = ("grad-input", "integrated-gradients", "occlusion")
CONTRAST_NAMES = {
    "grad-input": "Gradient × input",
    "integrated-gradients": "Integrated gradients",
    "occlusion": "Occlusion",
}
ROWS = 8  # occluded sources per forward pass (a 59k vocabulary's logits are big)
WHY_NOT = (
    "{method} cannot contrast: it explains how the model mixes its tokens, the same whatever "
    "word is asked about. Contrast with gradient x input, integrated gradients or occlusion."
)


def contrast_problem(method: str) -> str | None:
    """Why ``method`` cannot explain a contrast (None: it can)."""
    if method in CONTRAST_METHODS:
        return None
    if method in METHODS:
        return WHY_NOT.format(method=method)
    return f"unknown method {method!r}; contrast with {', '.join(CONTRAST_METHODS)}"


def parse_alignment(text: str) -> list[tuple[int, int]]:
    """``"3-3,4-5"`` -> [(3, 3), (4, 5)]: pairs of (translation step, alternative step), as
    inseq's ``contrast_targets_alignments``; AttributionError naming a pair it cannot read."""
    pairs = []
    for part in (p.strip() for p in (text or "").replace(" ", ",").split(",")):
        if not part:
            continue
        left, _, right = part.partition("-")
        if not (left.isdigit() and right.isdigit() and len(left) < 7 and len(right) < 7):
            raise AttributionError(f"{part!r} is not a pair of steps: write t-j, e.g. 3-4")
        pairs.append((int(left), int(right)))
    return pairs


def aligned_foil(
    own: Sequence[int], other: Sequence[int], pairs: Sequence[tuple[int, int]] | None = None
) -> list[int]:
    """The alternative laid on the translation's steps: at each compared step the
    alternative's token, elsewhere the translation's own (nothing to contrast there).

    Compared: the ``pairs`` (t, j) given; else, for an alternative as long as the translation,
    every step where they differ; for one of another length, the first step where they
    differ (after it the two prefixes part ways and no step matches another by itself)."""
    own, other = list(own), list(other)
    if pairs is None:
        if len(own) == len(other):
            pairs = [(t, t) for t in range(len(own))]
        else:
            first = next((t for t, (a, b) in enumerate(zip(own, other)) if a != b), None)
            first = min(len(own), len(other)) if first is None else first
            pairs = [(first, first)] if first < min(len(own), len(other)) else []
    for t, j in pairs:
        if not (0 <= t < len(own) and 0 <= j < len(other)):
            raise AttributionError(
                f"pair {t}-{j} is out of range: steps 0..{len(own) - 1} of the translation, "
                f"0..{len(other) - 1} of the alternative"
            )
    out = list(own)
    for t, j in pairs:
        out[t] = other[j]
    return out


def foil_ids(
    m: TranslationModel, t: Translation, foil: str, alignment: str | None = None
) -> list[int]:
    """The alternative translation as output ids laid on ``t``'s steps (``aligned_foil``;
    its end token added, a multilingual model's language code first, as in ``t``)."""
    ids = m.target_ids(foil or "", first=t.out_ids[0] if t.out_ids else None)
    pairs = parse_alignment(alignment) if alignment else None
    laid = aligned_foil(t.out_ids, ids, pairs)
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation itself: change a word.")
    if laid == list(t.out_ids):
        raise AttributionError(
            "No compared step differs: the alternative agrees with the translation at every "
            "step the alignment pairs."
        )
    return laid


def foil_at(m: TranslationModel, t: Translation, step: int, token: str) -> list[int]:
    """The translation's ids with ``token`` (as the model writes it) at ``step`` instead."""
    if not 0 <= step < len(t.out_ids):
        raise AttributionError(f"step must be 0..{len(t.out_ids) - 1} (got {step})")
    ids = list(t.out_ids)
    ids[step] = int(m.target_token_id(token))
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation's own word: pick another.")
    return ids


def _picked(logp: torch.Tensor, wanted: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """(B, T) log p(y_t) - log p(y'_t) of (B, T, V) log-probabilities; (1, T) ids each."""
    rows = logp.size(0)
    pick = [logp.gather(-1, i.expand(rows, -1)[..., None])[..., 0] for i in (wanted, other)]
    return pick[0] - pick[1]


def _difference_task(m: TranslationModel, t: Translation, foil: list[int]) -> GradientTask:
    """log p(y_t) - log p(y'_t) of every step as a function of the token embeddings."""
    p = m.forced(t.src_ids, t.out_ids)
    wanted, other = (torch.tensor([ids], device=p.src.device) for ids in (t.out_ids, foil))
    return embedding_task(m, p, lambda logp: _picked(logp, wanted, other))


@torch.no_grad()
def _differences(m: TranslationModel, sources: list[list[int]], out_ids, foil) -> torch.Tensor:
    """(N, T) log p(y_t) - log p(y'_t) after each of N equally long sources."""
    wanted, other = (torch.tensor([ids], device=m.device) for ids in (out_ids, foil))
    tgt_in = torch.tensor([m.decoder_inputs(out_ids)], device=m.device)  # (1, T)
    parts = []
    for i in range(0, len(sources), ROWS):
        src = torch.tensor(sources[i : i + ROWS], device=m.device)  # (n, S)
        logp = m.run(src, tgt_in.expand(len(src), -1)).float().log_softmax(-1)  # (n, T, V)
        parts.append(_picked(logp, wanted, other))
    return torch.cat(parts).cpu()  # (N, T)


def _occlusion(m: TranslationModel, t: Translation, foil: list[int]) -> torch.Tensor:
    """(T, S) the drop of each step's difference when each source token is occluded."""
    if m.unk_id is None:
        raise AttributionError("This model's tokenizer has no unknown token to occlude words with.")
    src = list(t.src_ids)
    occluded = [src[:j] + [m.unk_id] + src[j + 1 :] for j in range(len(src))]
    rows = _differences(m, [src, *occluded], t.out_ids, foil)  # (1 + S, T)
    return (rows[0] - rows[1:]).T  # (T, S)


def contrast(m: TranslationModel, t: Translation, foil: list[int], method: str) -> Attribution:
    """Explain log p(y_t) - log p(y'_t) of every step of ``t`` with ``method``."""
    if problem := contrast_problem(method) or m.supports(method):
        raise AttributionError(problem)
    start = time.perf_counter()
    S, T = len(t.src_ids), len(t.out_ids)
    with evaluating(m.model):
        if method == "occlusion":
            raw = torch.cat([_occlusion(m, t, foil), torch.zeros(T, T)], dim=1)  # (T, S + T)
            completeness = None
        else:
            task = _difference_task(m, t, foil)
            g = grad_input(task) if method == "grad-input" else integrated_gradients(task)
            causal = torch.cat([torch.ones(T, S), torch.ones(T, T).tril()], dim=1)
            raw, completeness = g.scores.cpu() * causal, g.completeness  # (T, S + T)
    differs = torch.tensor([a != b for a, b in zip(t.out_ids, foil)])  # (T,)
    raw = raw * differs[:, None]  # a step where both words agree has nothing to contrast
    scores = normalised(raw.abs())
    return Attribution(
        method,
        scores.float().numpy(),
        S,
        raw.float().numpy(),
        completeness=completeness,
        seconds=time.perf_counter() - start,
        extra={"contrast_steps": np.flatnonzero(differs.numpy()).tolist()},
    )
