"""Scores of each output step beside an attribution, named after inseq's step functions
(``probability``, ``logit``, ``crossentropy``, ``entropy``, ``perplexity``, ``pcxmi``,
``contrast_prob_diff``, ``kl_divergence``): what the model thought of each token it wrote,
from one teacher-forced pass.

Probability, logit, cross-entropy, entropy, P-CXMI and KL are inseq's; two are defined
otherwise: inseq's ``perplexity`` is each step's own (from that step's cross-entropy), here it
is the sentence's so far; inseq's ``contrast_prob_diff`` reads p(y'_t) after the contrast's
own prefix y'_<t, here after the translation's prefix y_<t, the quantity the contrastive
attribution explains.

- probability p(y_t | x, y_<t) and its rank among the vocabulary (1 = the model's first
  choice); the logit of y_t (the model's output before the softmax, as inseq's ``logit``);
  the cross-entropy -log p(y_t | x, y_<t) (inseq's ``crossentropy``);
- entropy of the step's distribution, in nats (0: certain; log V: uniform);
- perplexity so far: exp of the mean -log p(y_i) over steps 0..t;
- with a contrast y' (an alternative translation of the same length in pieces): p(y_t) -
  p(y'_t), both read after the translation's prefix y_<t (what the contrastive attribution
  explains), and KL(P_t || P'_t) between the step's distribution after y_<t and after y'_<t
  (0 until the two prefixes differ);
- with a contrast source x' (another source sentence, inseq's ``contrast_sources``): P-CXMI
  as inseq's ``pcxmi`` computes it, -log2(p(y_t | x, y_<t) / p(y_t | x', y_<t)) = log2 p(y_t |
  x', y_<t) - log2 p(y_t | x, y_<t), in bits: positive where x' makes y_t more likely than x
  does (Yin et al. 2021: with x the sentence alone and x' the sentence with its context, the
  context's help), 0 where x' = x.

Shape key: T output steps, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import torch

from core.attribution.batched_gradients import padded
from core.corpus.text import tokenize
from core.model.checked_translation import MAX_SENTENCE_TOKENS
from core.model.interface import TranslationModel
from core.model.parts import Translation, TranslationError

SCORES = ("probability", "logit", "crossentropy", "entropy", "perplexity")  # every step's
SCORES += ("probability_difference", "kl", "pcxmi")  # a contrast's (where given)
LOGIT_BYTES = 64 * 2**20  # the logits of one padded pass of many pairs (float32)


@dataclass
class StepScores:
    """One value per output step of each score (lists of T)."""

    tokens: list[str]
    probability: list[float]
    rank: list[int]
    entropy: list[float]  # nats
    perplexity: list[float]  # so far, steps 0..t
    logit: list[float] | None = None  # the model's logit of y_t
    crossentropy: list[float] | None = None  # -log p(y_t), nats
    contrast_tokens: list[str] | None = None
    probability_difference: list[float] | None = None  # p(y_t) - p(y'_t) after y_<t
    kl: list[float] | None = None  # KL(P_t after y_<t || P'_t after y'_<t), nats
    contrast_source: list[str] | None = None  # x', the contrast source's tokens
    pcxmi: list[float] | None = None  # log2 p(y_t | x', y_<t) - log2 p(y_t | x, y_<t), bits

    def to_json(self) -> dict:
        """Every score rounded to 6 places (the page shows the same numbers)."""
        out = {"tokens": self.tokens, "rank": self.rank}
        for name in SCORES:
            values = getattr(self, name)
            if values is not None:
                out[name] = [round(v, 6) for v in values]
        for name in ("contrast_tokens", "contrast_source"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def frame(self) -> pd.DataFrame:
        """One row per step: step, token, then every score (the contrast's where given)."""
        data = {"step": list(range(len(self.tokens))), **self.to_json()}
        columns = ["step", "tokens", "contrast_tokens", "probability", "rank", *SCORES[1:]]
        frame = pd.DataFrame({c: data[c] for c in columns if c in data})
        return frame.rename(columns={"tokens": "token", "contrast_tokens": "contrast"})


def _logits(m: TranslationModel, src_ids, out_ids) -> torch.Tensor:
    """(T, V) logits of every step after ``out_ids``'s own prefix (teacher forcing)."""
    src = torch.tensor([list(src_ids)], device=m.device)  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(list(out_ids))], device=m.device)  # (1, T)
    return m.run(src, tgt_in).float()[0]  # (T, V)


def batched_logits(m: TranslationModel, pairs) -> Iterator[torch.Tensor]:
    """Each (source ids, output ids) pair's (T, V) logits in turn, as ``_logits`` reads the
    pair alone, from padded passes (the model's pad id: its masks and positions leave each row
    as it reads alone) of as many pairs as LOGIT_BYTES holds, one pass held at a time: the
    file mode's batches."""
    done, V = 0, m.vocab_sizes()[1]
    while done < len(pairs):
        chunk = [pairs[done]]
        for pair in pairs[done + 1 :]:
            T = max(len(o) for _, o in [*chunk, pair])
            if 4 * (len(chunk) + 1) * T * V > LOGIT_BYTES:
                break
            chunk.append(pair)
        src = padded([s for s, _ in chunk], m.pad_id, m.device)  # (P, S)
        tgt_in = padded([m.decoder_inputs(list(o)) for _, o in chunk], m.pad_id, m.device)
        with torch.no_grad(), m.evaluating():
            logits = m.run(src, tgt_in).float()  # (P, T, V)
        yield from (logits[i, : len(o)] for i, (_, o) in enumerate(chunk))  # (T_i, V) each
        done += len(chunk)


def _log_probs(m: TranslationModel, src_ids, out_ids) -> torch.Tensor:
    """(T, V) log p of every step after ``out_ids``'s own prefix (teacher forcing)."""
    return _logits(m, src_ids, out_ids).log_softmax(-1)  # (T, V)


def contrast_source_ids(m: TranslationModel, text: str) -> list[int]:
    """A contrast source x' as the ids the model reads (its specials included), bounded as
    every sentence is (MAX_SENTENCE_TOKENS words); TranslationError naming what to change."""
    if not (text or "").strip():
        raise TranslationError("The contrast source is empty: type another source sentence.")
    if (n := len(tokenize(text))) > MAX_SENTENCE_TOKENS:
        raise TranslationError(
            f"The contrast source has {n} tokens; at most {MAX_SENTENCE_TOKENS} are read. "
            "Give a shorter sentence."
        )
    return list(m.source(text).ids)


@torch.no_grad()
def step_scores(
    m: TranslationModel,
    t: Translation,
    foil: list[int] | None = None,
    contrast_source: list[int] | None = None,
    logits: torch.Tensor | None = None,
) -> StepScores:
    """The scores of every step of ``t`` (against ``foil``, the contrast's output ids of the
    same length, and ``contrast_source``, another source's ids (``contrast_source_ids``),
    where given; ``logits``: its (T, V) teacher-forced logits, already read)."""
    with m.evaluating():
        logits = _logits(m, t.src_ids, t.out_ids) if logits is None else logits  # (T, V)
        logp = logits.log_softmax(-1)  # (T, V)
        ids = torch.tensor(list(t.out_ids), device=logp.device)  # (T,)
        taken = logp.gather(-1, ids[:, None])[:, 0]  # (T,)
        rank = 1 + (logp > taken[:, None]).sum(-1)  # (T,)
        entropy = -(logp.exp() * logp).nan_to_num().sum(-1)  # (T,); 0 log 0 = 0
        steps = torch.arange(1, len(ids) + 1, device=logp.device)
        perplexity = (-taken.cumsum(0) / steps).exp()  # (T,)
        scores = StepScores(
            m.target_tokens(t.out_ids),
            taken.exp().tolist(),
            [int(r) for r in rank],
            entropy.tolist(),
            [min(p, 1e300) for p in perplexity.tolist()],
            logits.gather(-1, ids[:, None])[:, 0].tolist(),
            (-taken).tolist(),
        )
        if contrast_source is not None:
            other_logp = _log_probs(m, contrast_source, t.out_ids)  # (T, V) after x'
            rival = other_logp.gather(-1, ids[:, None])[:, 0]  # (T,) log p(y_t | x', y_<t)
            scores.pcxmi = ((rival - taken) / math.log(2)).tolist()  # (T,) bits, as inseq
            scores.contrast_source = m.source_tokens(contrast_source)
        if foil is None:
            return scores
        other = torch.tensor(list(foil), device=logp.device)  # (T,)
        rival = logp.gather(-1, other[:, None])[:, 0]  # (T,) log p(y'_t) after y_<t
        logq = _log_probs(m, t.src_ids, foil)  # (T, V) after y'_<t
        kl = (logp.exp() * (logp - logq)).nan_to_num().sum(-1).clamp(min=0.0)  # (T,)
    scores.contrast_tokens = m.target_tokens(foil)
    scores.probability_difference = (taken.exp() - rival.exp()).tolist()
    scores.kl = kl.tolist()
    return scores


def perplexity_words(scores: StepScores) -> str:
    """One line for people: the translation's perplexity and its least likely step."""
    if not scores.tokens:
        return "No output step to score."
    worst = min(range(len(scores.tokens)), key=scores.probability.__getitem__)
    ppl = scores.perplexity[-1]
    ppl_text = f"{ppl:,.2f}" if math.isfinite(ppl) else "very large"
    return (
        f"Perplexity of the whole output {ppl_text}; its least likely step is {worst} "
        f"(“{scores.tokens[worst]}”, p = {scores.probability[worst]:.3f}, rank "
        f"{scores.rank[worst]})."
    )
