"""Attribution methods: for each output token, one contribution vector over [source ; prefix].

``attribute(model, src_ids, out_ids, method)`` explains the model's log-probability of each
output token y_t. Row t of the result covers the S source tokens (the encoder's input,
<eos> included) and then the T decoder inputs (<bos>, y_1 .. y_{T-1}); only <bos> ..
y_{t-1} can matter to row t. Every method's rows are non-negative and sum to 1; the
gradient methods normalise absolute values and keep their signed scores in ``raw``.

Methods (``METHODS``):
- ``attention``: one layer's cross-attention (one head or the heads' mean); no prefix part
  (a one-stack model: its one attention's rows, cut from its record's whole sequence);
- ``rollout``: attention rollout through encoder, decoder and cross attention (a one-stack
  model: through its one attention over the whole sequence, then cut the same way);
- ``norm``: rollout of norm-based contributions ||a f(x)|| (Kobayashi et al. 2020);
- ``alti``: ALTI+ (Ferrando et al. 2022), exact for post-LN (``core.attribution.terms``);
- ``value-zeroing``: Mohebbi et al. 2023, rolled out the same way;
- ``grad-input``, ``integrated-gradients``: at the embeddings (``core.attribution.gradients``:
  captum's integration rules, the studio's own passes);
- ``saliency``, ``deeplift``, ``gradient-shap``: at the same embeddings, by captum's own
  classes (``core.attribution.captum_methods``).

Every method reads a model only through the one interface (``core.model.interface``): a
recorded pass, its attention weights and norms, its hook sites. What a model cannot be
explained by comes from ``TranslationModel.supports``.

Shape key: S source tokens, T output tokens, L layers, H heads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.attribution.captum_methods import CAPTUM_METHODS, captum_gradients
from core.attribution.compose import DecoderStep, compose, normalised
from core.attribution.gradients import (
    DEFAULT_CHOICES,
    GradientChoices,
    embedding_task,
    grad_input,
    integrated_gradients,
)
from core.attribution.mixing import MIXING_METHODS, cross_mixing, rollout_mixing, self_mixing
from core.attribution.terms import TermsError, sublayer_terms
from core.attribution.value_zeroing import kept_calls, sequence_matrix, value_zeroing_steps
from core.model.interface import TranslationModel
from core.model.record import Record

METHODS = (
    "attention",
    "rollout",
    "norm",
    "alti",
    "value-zeroing",
    "grad-input",
    "integrated-gradients",
    *CAPTUM_METHODS,
)
GRADIENT_METHODS = ("grad-input", "integrated-gradients", *CAPTUM_METHODS)  # at the embeddings
METHOD_NAMES = {
    "attention": "Raw cross-attention",
    "rollout": "Attention rollout",
    "norm": "Norm-based",
    "alti": "ALTI+",
    "value-zeroing": "Value zeroing",
    "grad-input": "Gradient × input",
    "integrated-gradients": "Integrated gradients",
    "saliency": "Saliency",
    "deeplift": "DeepLIFT",
    "gradient-shap": "GradientSHAP",
}
MEAN = "mean"  # the ``head`` of the attention method that averages the layer's heads
ONE_ATTENTION = "Raw attention"  # the attention method's name on a model of one attention


def method_name(m: TranslationModel, method: str) -> str:
    """A method's name for this model: the attention method reads a translator's
    cross-attention, or a one-stack model's one attention over its sentence and prefix (the
    capability ``cross_attention`` refused, saying so)."""
    if method == "attention" and m.supports("cross_attention"):
        return ONE_ATTENTION
    return METHOD_NAMES[method]


class AttributionError(ValueError):
    """An attribution cannot be computed as asked; the message says why."""


@dataclass
class Attribution:
    """What each source and prefix token contributes to each output token of one sentence."""

    method: str
    contributions: np.ndarray  # (T, S + T) non-negative, rows sum to 1
    source_length: int  # S: the first S columns are source tokens, the rest the prefix
    raw: np.ndarray | None = None  # (T, S + T) signed scores (gradient methods)
    layer: int | None = None  # the attention method's layer
    head: str | None = None  # the attention method's head ("mean" or a number)
    completeness: float | None = None  # integrated gradients' relative completeness error
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def source_share(self) -> np.ndarray:
        """(T,) the share of each output token's contributions that comes from the source."""
        return self.contributions[:, : self.source_length].sum(1)

    @property
    def source(self) -> np.ndarray:
        """(T, S) the source part of the contributions."""
        return self.contributions[:, : self.source_length]

    @property
    def prefix(self) -> np.ndarray:
        """(T, T) the target-prefix part of the contributions."""
        return self.contributions[:, self.source_length :]


def sequence_mixing(m: TranslationModel, p: Record, method: str) -> torch.Tensor:
    """(N, N) every layer's mixing over a one-stack record's whole sequence (rollout,
    norm-based, ALTI+ or value zeroing), composed, the first layer's on the right: each
    layer's one attention is a self-attention sub-layer, decomposed as every family's is."""
    out = None
    kept = kept_calls(m, p) if method == "value-zeroing" else None  # every layer's call, once
    for i, a in enumerate(p.one_stack.attention):
        if method == "value-zeroing":
            mix = sequence_matrix(m, p, i, kept)  # (N, N)
        elif method == "rollout":
            mix = rollout_mixing(a.weights[0].double())  # (N, N)
        else:
            mix = self_mixing(method, sublayer_terms(m, "decoder_self", i, a))  # (N, N)
        out = mix.double() if out is None else mix.double() @ out  # (N, N)
    return out


def mixing_contributions(m: TranslationModel, p: Record, method: str) -> torch.Tensor:
    """Rollout, norm-based, ALTI+ or value zeroing contributions of a recorded pass:
    (T, S + T); a one-stack record's mixing over its whole sequence, cut to the decoder
    inputs' rows over the source and the decoder inputs, renormalised."""
    if p.one_stack is not None:
        try:
            return normalised(p.one_stack.cut(sequence_mixing(m, p, method))).float()
        except TermsError as e:
            raise AttributionError(str(e)) from e
    if method == "value-zeroing":
        return compose(*value_zeroing_steps(m, p))
    try:
        encoder = [
            self_mixing(method, sublayer_terms(m, "encoder", i, a))
            for i, a in enumerate(p.attention["encoder"])
        ]
        decoder = []
        for i, (own, cross) in enumerate(zip(p.attention["decoder_self"], p.attention["cross"])):
            decoder.append(
                DecoderStep(self_mixing(method, sublayer_terms(m, "decoder_self", i, own)))
            )
            decoder.append(cross_mixing(method, sublayer_terms(m, "cross", i, cross)))
    except TermsError as e:
        raise AttributionError(str(e)) from e
    return compose(encoder, decoder)


def check_layer_head(m: TranslationModel, layer: int, head: str) -> None:
    """AttributionError unless the model has this decoder layer and head (or "mean")."""
    L, H = m.cfg.num_decoder_layers, m.cfg.num_heads
    if not 0 <= layer < L:
        raise AttributionError(f"layer must be 0..{L - 1} (got {layer})")
    if head != MEAN and not (str(head).isdigit() and int(head) < H):
        raise AttributionError(f"head must be 0..{H - 1} or {MEAN!r} (got {head!r})")


def attention_contributions(m: TranslationModel, p: Record, layer: int, head: str) -> torch.Tensor:
    """One layer's cross-attention, a head or the heads' mean, as (T, S + T) rows; a
    one-stack record's one attention, cut to the decoder inputs' rows over the source and the
    decoder inputs, renormalised."""
    check_layer_head(m, layer, head)
    if p.one_stack is not None:
        w = p.one_stack.attention[layer].weights[0].double()  # (H, N, N)
        return normalised(p.one_stack.cut(w.mean(0) if head == MEAN else w[int(head)])).float()
    recorded = p.attention["cross"][layer].weights[0].float()  # (H, T, S)
    weights = recorded.mean(0) if head == MEAN else recorded[int(head)]  # (T, S)
    return torch.cat([weights, weights.new_zeros(p.output_length, p.output_length)], dim=1)


def gradient_attribution(
    m: TranslationModel, p: Record, method: str, choices: GradientChoices = DEFAULT_CHOICES
):
    """(shown (T, S + T), signed (T, S + T), completeness) of a gradient method, as
    ``choices`` say (the signed scores are the chosen aggregation's; shown: their absolute
    values normalised per row, or the signed scores themselves with normalisation none)."""
    task = embedding_task(m, p, choices=choices)
    if method == "grad-input":
        g = grad_input(task, choices)
    elif method in CAPTUM_METHODS:
        g = captum_gradients(task, m.model, method, choices)
    else:
        g = integrated_gradients(task, choices=choices)
    scores = g.scores if p.one_stack is None else p.one_stack.once(g.scores)  # (T, S + T)
    return (*shown_gradients(scores, p.tgt_mask[0, 0], choices), g.completeness)


def shown_gradients(scores: torch.Tensor, tgt_mask: torch.Tensor, choices: GradientChoices):
    """(shown, signed) (T, S + T) of a gradient method's scores (T, S + T): the prefix tokens
    the decoder's mask (T, T) hides set to 0, shown as ``choices`` normalise them."""
    T, S = tgt_mask.size(0), scores.size(1) - tgt_mask.size(0)
    causal = torch.cat([torch.ones(T, S), tgt_mask.float().cpu()], 1)  # (T, S + T)
    signed = scores * causal.to(scores.device)  # later prefix tokens are 0
    shown = normalised(signed.abs()) if choices.normalisation == "row" else signed
    return shown, signed


CONTRAST_ONLY = ("occlusion",)  # methods of a contrast alone (``core.attribution.contrast``)


def unknown_method(method: str) -> str:
    """Why ``method`` is none of METHODS, in one line: a contrast's own, or unknown."""
    if method in CONTRAST_ONLY:
        return f"{method} explains a contrast only: give one (--contrast)"
    return f"unknown method {method!r}; choose from {', '.join(METHODS)}"


def method_problem(m: TranslationModel, method: str) -> str | None:
    """Why ``method`` does not explain this model, in one line (None: it does)."""
    return unknown_method(method) if method not in METHODS else m.supports(method)


def attribute(
    m: TranslationModel,
    src_ids,
    out_ids,
    method: str,
    layer: int | None = None,
    head: str = MEAN,
    p: Record | None = None,
    choices: GradientChoices = DEFAULT_CHOICES,
) -> Attribution:
    """Explain each output token of ``out_ids`` (the model's output after ``src_ids``).

    ``layer`` and ``head`` choose what the ``attention`` method shows (default: the last
    layer's mean over heads). ``p`` reuses an already recorded pass of the same sentence.
    ``choices``: the gradient methods' baseline, steps, aggregation and function.
    """
    if problem := method_problem(m, method):
        raise AttributionError(problem)
    if problems := choices.problems():
        raise AttributionError("; ".join(problems))
    if not len(out_ids) or not len(src_ids):
        raise AttributionError("nothing to explain: the source or the output is empty")
    start = time.perf_counter()
    with m.evaluating():
        p = p or m.forced(src_ids, out_ids)
        raw = completeness = None
        if method == "attention":
            layer = m.cfg.num_decoder_layers - 1 if layer is None else layer
            scores = attention_contributions(m, p, layer, str(head))
        elif method in (*MIXING_METHODS, "value-zeroing"):
            scores = mixing_contributions(m, p, method)
        else:
            try:
                scores, raw, completeness = gradient_attribution(m, p, method, choices)
            except ValueError as e:  # a baseline token the tokenizer lacks, kl uncontrasted
                raise AttributionError(str(e)) from None
    gradient = method in GRADIENT_METHODS
    return Attribution(
        method,
        scores.float().cpu().numpy(),
        p.source_length,
        None if raw is None else raw.cpu().numpy(),
        layer if method == "attention" else None,
        str(head) if method == "attention" else None,
        completeness,
        time.perf_counter() - start,
        extra={"choices": choices} if gradient and choices != DEFAULT_CHOICES else {},
    )
