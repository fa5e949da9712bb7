"""Gradient x input and integrated gradients at the token embeddings, through captum.

The explained quantity is the log-probability of each output token y_t given the source and
the prefix, log p(y_t | x, y_<t), as a function of the token embeddings e: the embedding
modules' outputs (``encoder.embed`` / ``decoder.embed`` hook sites), put in place of the ids'
own by the model's embeddings path (``TranslationModel.log_probs_from_embeddings``), so the
function is the model's own from ids on every family (a √D scale and the positions are part
of it, wherever the family applies them). A token's score is the sum over the embedding
dimensions of captum's attribution. For output token t the batch holds one copy of the
sentence and captum's ``target`` picks position t.

Integrated gradients (Sundararajan et al. 2017) integrates from an all-zero embedding
baseline (positions kept); completeness says the scores of a row sum to
log p(y_t) - log p_baseline(y_t), and ``Gradients.completeness`` reports how far they are.

Shape key: S source tokens, T output tokens, D model width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.model.interface import TranslationModel
from core.model.record import Record

IG_STEPS = 32  # integration points of integrated gradients (Gauss-Legendre)
IG_BATCH = 512  # sentence copies per forward/backward pass of integrated gradients


@dataclass
class Gradients:
    """Signed scores of one sentence: row t over [source ; prefix]."""

    scores: torch.Tensor  # (T, S + T) signed: sum over D of the attribution
    completeness: float | None = None  # integrated gradients: sum |delta_t| / sum |change_t|


@dataclass
class GradientTask:
    """What the gradient methods explain: log p(y_t) of every output token as a function of
    the token embeddings, at one sentence's embeddings."""

    embeddings: tuple[torch.Tensor, torch.Tensor]  # (1, S, D) source, (1, T, D) prefix
    log_probs: Callable  # (B, S, D), (B, T, D) -> (B, T) log p(y_t) of the output tokens
    logp: torch.Tensor  # (T,) the sentence's own log p(y_t)

    @property
    def output_length(self) -> int:
        """T, the number of output tokens explained."""
        return self.embeddings[1].size(1)


def embedding_task(m: TranslationModel, p: Record, function: Callable | None = None):
    """The task of a recorded pass (one sentence): log p(y_t) of its ``out_ids``, or
    ``function((B, T, V) log-probabilities) -> (B, T)`` of them."""
    out = p.out_ids  # (1, T)

    def chosen(logp: torch.Tensor) -> torch.Tensor:
        return logp.gather(-1, out.expand(logp.size(0), -1)[..., None])[..., 0]  # (B, T)

    pick = function or chosen

    def log_probs(src_emb: torch.Tensor, tgt_emb: torch.Tensor) -> torch.Tensor:
        return pick(m.log_probs_from_embeddings(p.src, p.tgt_in, src_emb, tgt_emb))

    pair = m.embeddings(p.src, p.tgt_in)  # (1, S, D), (1, T, D)
    with torch.no_grad():
        own = p.logp if function is None else log_probs(*pair)[0]  # (T,)
    return GradientTask(pair, log_probs, own)


def _inputs(task: GradientTask) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentence's embeddings, one copy per output token: (T, S, D), (T, T, D)."""
    T = task.output_length
    src, tgt = (x.detach().expand(T, -1, -1).clone() for x in task.embeddings)
    return src.requires_grad_(), tgt.requires_grad_()


def _scores(parts) -> torch.Tensor:
    """captum's attributions (T, S, D), (T, T, D) -> (T, S + T) per-token scores."""
    return torch.cat([a.sum(-1) for a in parts], dim=1).detach().float()


def grad_input(task: GradientTask) -> Gradients:
    """Gradient x input of every output token's log-probability."""
    # captum is imported here, not above: its import takes 0.7 s (matplotlib among it), which
    # every page's first opening paid, and few ask for gradients
    from captum.attr import InputXGradient

    explainer = InputXGradient(task.log_probs)
    with torch.enable_grad():
        parts = explainer.attribute(_inputs(task), target=list(range(task.output_length)))
    return Gradients(_scores(parts))


def integrated_gradients(task: GradientTask, steps: int = IG_STEPS) -> Gradients:
    """Integrated gradients from zero embeddings, with the completeness error."""
    from captum.attr import IntegratedGradients  # here: see grad_input

    log_probs = task.log_probs
    explainer = IntegratedGradients(log_probs)
    inputs = _inputs(task)
    T = task.output_length
    with torch.enable_grad():
        parts, delta = explainer.attribute(
            inputs,
            baselines=tuple(torch.zeros_like(x) for x in inputs),
            target=list(range(T)),
            n_steps=steps,
            internal_batch_size=max(IG_BATCH, T),
            return_convergence_delta=True,
        )
    with torch.no_grad():
        zero = log_probs(*(torch.zeros_like(x[:1]) for x in inputs))[0]  # (T,)
        change = (task.logp - zero).abs().sum()
    error = float(delta.abs().sum() / change.clamp(min=1e-12))
    return Gradients(_scores(parts), error)
