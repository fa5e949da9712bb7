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
from contextlib import nullcontext

import numpy as np
import torch

from core.attribution.compose import normalised
from core.attribution.gradients import GradientTask, grad_input, integrated_gradients, studio_task
from core.attribution.hf_faithfulness import unk_id
from core.attribution.methods import METHODS, Attribution, AttributionError
from core.corpus.text import tokenize
from core.corpus.vocab import Vocab
from core.model import hf_inside
from core.model import hugging_face as hf
from core.model.decode import Translation
from core.model.opened import is_hugging_face
from core.model.record import forced_logits, forward_from_embeddings, teacher_forced
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


def foil_ids(lm, t: Translation, foil: str) -> list[int]:
    """The alternative translation as output ids, as long as ``t``'s (its end token added)."""
    if is_hugging_face(lm):
        ids = hf.target_ids(lm, foil, None)
        if t.out_ids and t.out_ids[0] != ids[0] and len(ids) + 1 == len(t.out_ids):
            ids = [t.out_ids[0], *ids]  # a multilingual model's language code, as in t
    else:
        ids = [*lm.tgt_vocab.segment(tokenize(foil or ""))[1], Vocab.eos_id]
    if len(ids) != len(t.out_ids):
        raise AttributionError(
            f"The alternative must have as many tokens as the translation: it has "
            f"{len(ids)} with the end token, the translation {len(t.out_ids)}."
        )
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation itself: change a word.")
    return ids


def foil_at(lm, t: Translation, step: int, token: str) -> list[int]:
    """The translation's ids with ``token`` (as the model writes it) at ``step`` instead."""
    if is_hugging_face(lm):
        tid = lm.tokenizer.convert_tokens_to_ids(token)
    else:
        tid = lm.tgt_vocab.stoi.get(token, Vocab.unk_id)
    if not 0 <= step < len(t.out_ids):
        raise AttributionError(f"step must be 0..{len(t.out_ids) - 1} (got {step})")
    ids = list(t.out_ids)
    ids[step] = int(tid)
    if ids == list(t.out_ids):
        raise AttributionError("The alternative is the translation's own word: pick another.")
    return ids


def _difference_task(lm, t: Translation, foil: list[int]) -> GradientTask:
    """log p(y_t) - log p(y'_t) of every step as a function of the token embeddings."""
    if is_hugging_face(lm):
        src, dec = hf.forced_inputs(lm, t.src_ids, t.out_ids)  # (1, S), (1, T)

        def full(src_emb, dec_emb):
            return hf_inside.log_probs_from_embeddings(lm, src_emb, dec_emb)  # (B, T, V)

        pair = hf_inside.embeddings(lm, src, dec)
    else:
        p = teacher_forced(lm.model, t.src_ids, t.out_ids)
        base = studio_task(lm.model, p)

        def full(src_emb, dec_emb):
            return forward_from_embeddings(lm.model, src_emb, dec_emb, p.src_mask, p.tgt_mask)

        pair = base.embeddings
    wanted, other = (torch.tensor([ids], device=pair[0].device) for ids in (t.out_ids, foil))

    def difference(src_emb, dec_emb):
        logp = full(src_emb, dec_emb)  # (B, T, V)
        rows = logp.size(0)
        pick = [logp.gather(-1, i.expand(rows, -1)[..., None])[..., 0] for i in (wanted, other)]
        return pick[0] - pick[1]  # (B, T)

    with torch.no_grad():
        own = difference(*pair)[0]  # (T,)
    return GradientTask(pair, difference, own)


@torch.no_grad()
def _differences(lm, sources: list[list[int]], out_ids, foil) -> torch.Tensor:
    """(N, T) log p(y_t) - log p(y'_t) after each of N equally long sources."""
    device = next(lm.model.parameters()).device
    wanted, other = (torch.tensor(ids, device=device) for ids in (out_ids, foil))
    parts = []
    for i in range(0, len(sources), ROWS):
        src = torch.tensor(sources[i : i + ROWS], device=device)  # (n, S)
        if is_hugging_face(lm):
            _, dec = hf.forced_inputs(lm, sources[i], out_ids)  # (1, T)
            logits = lm.model(input_ids=src, decoder_input_ids=dec.expand(len(src), -1)).logits
        else:
            tgt_in = torch.tensor([[Vocab.bos_id, *out_ids[:-1]]], device=device)  # (1, T)
            logits = forced_logits(lm.model, src, tgt_in.expand(len(src), -1))  # (n, T, V)
        logp = logits.float().log_softmax(-1)  # (n, T, V)
        n = len(src)
        parts.append(
            logp.gather(-1, wanted.expand(n, -1)[..., None])[..., 0]
            - logp.gather(-1, other.expand(n, -1)[..., None])[..., 0]
        )
    return torch.cat(parts).cpu()  # (N, T)


def _occlusion(lm, t: Translation, foil: list[int]) -> torch.Tensor:
    """(T, S) the drop of each step's difference when each source token is occluded."""
    unk = unk_id(lm) if is_hugging_face(lm) else Vocab.unk_id
    src = list(t.src_ids)
    occluded = [src[:j] + [unk] + src[j + 1 :] for j in range(len(src))]
    rows = _differences(lm, [src, *occluded], t.out_ids, foil)  # (1 + S, T)
    return (rows[0] - rows[1:]).T  # (T, S)


def contrast(lm, t: Translation, foil: list[int], method: str) -> Attribution:
    """Explain log p(y_t) - log p(y'_t) of every step of ``t`` with ``method``."""
    if problem := contrast_problem(method):
        raise AttributionError(problem)
    start = time.perf_counter()
    S, T = len(t.src_ids), len(t.out_ids)
    model = lm.model
    with nullcontext() if is_hugging_face(lm) else evaluating(model):
        if method == "occlusion":
            raw = torch.cat([_occlusion(lm, t, foil), torch.zeros(T, T)], dim=1)  # (T, S + T)
            completeness = None
        else:
            task = _difference_task(lm, t, foil)
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
