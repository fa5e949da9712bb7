"""Scores of each output step beside an attribution, named after inseq's step functions
(``probability``, ``entropy``, ``perplexity``, ``contrast_prob_diff``, ``kl_divergence``):
what the model thought of each token it wrote, from one teacher-forced pass.

Probability, entropy and KL are inseq's; two are defined otherwise: inseq's ``perplexity``
is each step's own (from that step's cross-entropy), here it is the sentence's so far;
inseq's ``contrast_prob_diff`` reads p(y'_t) after the contrast's own prefix y'_<t, here
after the translation's prefix y_<t, the quantity the contrastive attribution explains.

- probability p(y_t | x, y_<t) and its rank among the vocabulary (1 = the model's first
  choice);
- entropy of the step's distribution, in nats (0: certain; log V: uniform);
- perplexity so far: exp of the mean -log p(y_i) over steps 0..t;
- with a contrast y' (an alternative translation of the same length in pieces): p(y_t) -
  p(y'_t), both read after the translation's prefix y_<t (what the contrastive attribution
  explains), and KL(P_t || P'_t) between the step's distribution after y_<t and after y'_<t
  (0 until the two prefixes differ).

Shape key: T output steps, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch

from core.model.interface import TranslationModel
from core.model.parts import Translation


@dataclass
class StepScores:
    """One value per output step of each score (lists of T)."""

    tokens: list[str]
    probability: list[float]
    rank: list[int]
    entropy: list[float]  # nats
    perplexity: list[float]  # so far, steps 0..t
    contrast_tokens: list[str] | None = None
    probability_difference: list[float] | None = None  # p(y_t) - p(y'_t) after y_<t
    kl: list[float] | None = None  # KL(P_t after y_<t || P'_t after y'_<t), nats

    def to_json(self) -> dict:
        """Every score rounded to 6 places (the page shows the same numbers)."""
        out = {"tokens": self.tokens, "rank": self.rank}
        for name in ("probability", "entropy", "perplexity", "probability_difference", "kl"):
            values = getattr(self, name)
            if values is not None:
                out[name] = [round(v, 6) for v in values]
        if self.contrast_tokens is not None:
            out["contrast_tokens"] = self.contrast_tokens
        return out

    def frame(self) -> pd.DataFrame:
        """One row per step: step, token, then every score (the contrast's where given)."""
        data = {"step": list(range(len(self.tokens))), **self.to_json()}
        columns = ["step", "tokens", "contrast_tokens", "probability", "rank", "entropy"]
        columns += ["perplexity", "probability_difference", "kl"]
        frame = pd.DataFrame({c: data[c] for c in columns if c in data})
        return frame.rename(columns={"tokens": "token", "contrast_tokens": "contrast"})


def _log_probs(m: TranslationModel, src_ids, out_ids) -> torch.Tensor:
    """(T, V) log p of every step after ``out_ids``'s own prefix (teacher forcing)."""
    src = torch.tensor([list(src_ids)], device=m.device)  # (1, S)
    tgt_in = torch.tensor([m.decoder_inputs(list(out_ids))], device=m.device)  # (1, T)
    return m.run(src, tgt_in).float().log_softmax(-1)[0]  # (T, V)


@torch.no_grad()
def step_scores(m: TranslationModel, t: Translation, foil: list[int] | None = None) -> StepScores:
    """The scores of every step of ``t`` (and against ``foil``, the contrast's output ids of
    the same length, where given)."""
    with m.evaluating():
        logp = _log_probs(m, t.src_ids, t.out_ids)  # (T, V)
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
        )
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
