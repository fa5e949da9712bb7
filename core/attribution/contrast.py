"""Contrastive explanations (Yin & Neubig 2022, "Interpreting Language Models with
Contrastive Explanations"; inseq's ``contrast_prob_diff``): why this word rather than that
one. The explained quantity at step t is log p(y_t) - log p(y'_t), y the translation (the
model's own or a target the user gave), y' an alternative (the foil) of the same length in
pieces, both read after y's prefix: a token that pushes y_t up and y'_t down scores high.

Methods that contrast: the gradient methods (gradient x input and integrated gradients of
the difference at the token embeddings) and occlusion (each source token replaced by the
unknown token in turn, the difference's drop). The others explain how the model mixes its
tokens, the same whatever word is asked about: they cannot contrast.

Shape key: S source tokens, T output tokens, V vocabulary, N occluded sources.
"""

from __future__ import annotations

import time

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


def foil_ids(m: TranslationModel, t: Translation, foil: str) -> list[int]:
    """The alternative translation as output ids, as long as ``t``'s (its end token added;
    a multilingual model's language code first, as in ``t``)."""
    ids = m.target_ids(foil or "", first=t.out_ids[0] if t.out_ids else None)
    if len(ids) != len(t.out_ids):
        raise AttributionError(
            f"The alternative must have as many tokens as the translation: it has "
            f"{len(ids)} with the end token, the translation {len(t.out_ids)}."
        )
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation itself: change a word.")
    return ids


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
