"""Contrastive explanations (Yin & Neubig 2022, "Interpreting Language Models with
Contrastive Explanations"; inseq's ``contrast_prob_diff``): why this word rather than that
one.

The explained quantity at step t is log p(y_t) - log p(y'_t), y the translation (the model's
own or a target the user gave), y' an alternative (the foil), both read after y's prefix: a
token that pushes y_t up and y'_t down scores high. As inseq's step functions, the difference
of probabilities p(y_t) - p(y'_t) (``contrast_prob_diff``) or the KL divergence between the
step's distribution and the alternative's (``kl_divergence``) may be explained instead
(``GradientChoices.function``). A foil of another length is laid on y's steps
(``aligned_foil``): compared at the first step where the two differ, or at the steps a user
pairs (inseq's ``contrast_targets_alignments``).

Methods that contrast: the gradient methods (gradient x input, integrated gradients,
saliency, DeepLIFT and GradientSHAP of the difference at the token embeddings) and occlusion
(each source token replaced by the unknown token in turn, the difference's drop). The others
explain how the model mixes its tokens, the same whatever word is asked about: they cannot
contrast.

Shape key: S source tokens, T output tokens, V vocabulary, N occluded sources.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from core.attribution.captum_methods import CAPTUM_METHODS, captum_gradients
from core.attribution.compose import normalised
from core.attribution.gradients import (
    CHOICE_WORDS,
    DEFAULT_CHOICES,
    GradientChoices,
    Pick,
    embedding_task,
    grad_input,
    integrated_gradients,
)
from core.attribution.methods import METHODS, Attribution, AttributionError
from core.model.interface import TranslationModel, known_token_id
from core.model.parts import Translation

CONTRAST_METHODS = ("grad-input", "integrated-gradients", *CAPTUM_METHODS, "occlusion")
CONTRAST_NAMES = {
    "grad-input": "Gradient × input",
    "integrated-gradients": "Integrated gradients",
    "saliency": "Saliency",
    "deeplift": "DeepLIFT",
    "gradient-shap": "GradientSHAP",
    "occlusion": "Occlusion",
}
CONTRAST_FUNCTIONS = ("log-prob", "prob", "kl")  # what a contrast may explain
ROWS = 8  # occluded sources per forward pass (a 59k vocabulary's logits are big)
WHY_NOT = (
    "{method} cannot contrast: it explains how the model mixes its tokens, the same whatever "
    "word is asked about. Contrast with a gradient method (gradient x input, integrated "
    "gradients, saliency, DeepLIFT, GradientSHAP) or occlusion."
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
    if missing := m.unknown_target_words(foil or ""):  # an <unk> explains nothing
        words = ", ".join(dict.fromkeys(missing))
        raise AttributionError(f"The alternative has words the model lacks: {words}.")
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
    if (tid := known_token_id(m, token)) is None:
        raise AttributionError(f"The model has no output token {token!r}: pick one it writes.")
    ids[step] = tid
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation's own word: pick another.")
    return ids


def contrast_pick(
    m: TranslationModel, t: Translation, foil: list[int], function: str = "log-prob"
) -> Pick:
    """f of a step from its (B, V) log-probabilities after the translation's prefix:
    log p(y_t) - log p(y'_t), p(y_t) - p(y'_t), or KL(P_t || P'_t) with P'_t the step's
    distribution after the alternative's prefix y'_<t (held fixed: what is explained is how
    far the translation's distribution moves from it)."""
    if function not in CONTRAST_FUNCTIONS:
        raise AttributionError(
            f"{CHOICE_WORDS.get(function, function)} cannot contrast: choose "
            f"{', '.join(CONTRAST_FUNCTIONS)}"
        )
    wanted, other = (torch.tensor(list(ids), device=m.device) for ids in (t.out_ids, foil))
    if function == "kl":
        with torch.no_grad(), m.evaluating():
            logq = m.forced(t.src_ids, foil).logits[0].float().log_softmax(-1)  # (T, V)
        return lambda logp, steps: (logp.exp() * (logp - logq[steps])).nan_to_num().sum(-1)

    def difference(logp: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        a, b = (logp.gather(-1, ids[steps][:, None])[:, 0] for ids in (wanted, other))  # (B,)
        return a.exp() - b.exp() if function == "prob" else a - b

    return difference


@torch.no_grad()
def _differences(m: TranslationModel, sources: list[list[int]], out_ids, pick: Pick):
    """(N, T) the contrast's f of every step after each of N equally long sources."""
    tgt_in = torch.tensor([m.decoder_inputs(out_ids)], device=m.device)  # (1, T)
    T, parts = len(out_ids), []
    for i in range(0, len(sources), ROWS):
        src = torch.tensor(sources[i : i + ROWS], device=m.device)  # (n, S)
        logp = m.run(src, tgt_in.expand(len(src), -1)).float().log_softmax(-1)  # (n, T, V)
        steps = torch.arange(T, device=m.device).repeat(len(src))  # (n * T,)
        parts.append(pick(logp.flatten(0, 1), steps).view(len(src), T))  # (n, T)
    return torch.cat(parts).cpu()  # (N, T)


def _occlusion(m: TranslationModel, t: Translation, pick: Pick) -> torch.Tensor:
    """(T, S) the drop of each step's f when each source token is occluded."""
    if m.unk_id is None:
        raise AttributionError("This model's tokenizer has no unknown token to occlude words with.")
    src = list(t.src_ids)
    occluded = [src[:j] + [m.unk_id] + src[j + 1 :] for j in range(len(src))]
    rows = _differences(m, [src, *occluded], t.out_ids, pick)  # (1 + S, T)
    return (rows[0] - rows[1:]).T  # (T, S)


def compared_steps(own: Sequence[int], foil: Sequence[int], function: str) -> torch.Tensor:
    """(T,) the steps with something to contrast: where the two words differ, or for the KL
    divergence every step after the two prefixes part (before, the distributions agree)."""
    differs = torch.tensor([a != b for a, b in zip(own, foil)])  # (T,)
    if function == "kl":
        parted = differs.long().cumsum(0) > 0  # (T,) the prefixes differ from step t + 1
        return torch.cat([torch.zeros(1, dtype=torch.bool), parted[:-1]])
    return differs


def contrast(
    m: TranslationModel,
    t: Translation,
    foil: list[int],
    method: str,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Attribution:
    """Explain the contrast of every step of ``t`` with ``foil`` (log p(y_t) - log p(y'_t)
    by default; ``choices.function``: p(y_t) - p(y'_t) or the KL divergence) with ``method``."""
    if problem := contrast_problem(method) or m.supports(method):
        raise AttributionError(problem)
    if problems := choices.problems():
        raise AttributionError("; ".join(problems))
    start = time.perf_counter()
    S, T = len(t.src_ids), len(t.out_ids)
    pick = contrast_pick(m, t, foil, choices.function)
    with m.evaluating():
        if method == "occlusion":
            raw = torch.cat([_occlusion(m, t, pick), torch.zeros(T, T)], dim=1)  # (T, S + T)
            completeness = None
        else:
            task = embedding_task(m, m.forced(t.src_ids, t.out_ids), pick, choices)
            if method == "grad-input":
                g = grad_input(task, choices)
            elif method in CAPTUM_METHODS:
                g = captum_gradients(task, m.model, method, choices)
            else:
                try:
                    g = integrated_gradients(task, choices=choices)
                except ValueError as e:  # a baseline token the tokenizer lacks
                    raise AttributionError(str(e)) from None
            causal = torch.cat([torch.ones(T, S), torch.ones(T, T).tril()], dim=1)
            raw, completeness = g.scores.cpu() * causal, g.completeness  # (T, S + T)
    compared = compared_steps(t.out_ids, foil, choices.function)  # (T,)
    raw = raw * compared[:, None]  # a step with nothing to contrast scores 0
    scores = normalised(raw.abs()) if choices.normalisation == "row" else raw
    extra = {"contrast_steps": np.flatnonzero(compared.numpy()).tolist()}
    if choices != DEFAULT_CHOICES:
        extra["choices"] = choices
    return Attribution(
        method,
        scores.float().numpy(),
        S,
        raw.float().numpy(),
        completeness=completeness,
        seconds=time.perf_counter() - start,
        extra=extra,
    )
