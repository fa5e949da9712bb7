"""Attribution for Hugging Face encoder-decoders: the methods whose derivation needs only
the attention weights or the gradient of log p(y_t) with respect to the token embeddings.

- ``attention``: one layer's cross-attention (a head or the heads' mean), as for the studio's
  model;
- ``rollout`` (Abnar & Zuidema 2020): ½ the heads' mean + ½ the residual per sub-layer,
  composed through the encoder, then the decoder's self- and cross-attention
  (``core.attribution.compose``), from the maps ``output_attentions`` returns;
- ``norm`` (Kobayashi et al. 2020) and ``alti`` (ALTI+, Ferrando et al. 2022): each
  attention sub-layer as one term per input token (``core.attribution.hf_terms``, read by
  hooks), mixed and composed as for the studio's model;
- ``grad-input`` and ``integrated-gradients``: captum on the embeddings the stacks read as
  ``inputs_embeds`` (Marian's √D scale included; both methods are unchanged by that scale).

- ``value-zeroing`` (Mohebbi et al. 2023): each layer rerun with one token's values zeroed
  by a hook on its value projection (``core.attribution.hf_value_zeroing``).

Every method the studio has reads these models; integrated gradients is refused for T5, in
one line that says why (``method_problem``).

Shape key: S source tokens, T output tokens, L layers, H heads, D model width.
"""

from __future__ import annotations

import time

import torch

from core.attribution import hf_terms, hf_value_zeroing
from core.attribution.compose import DecoderStep, compose, normalised
from core.attribution.gradients import GradientTask, grad_input, integrated_gradients
from core.attribution.methods import MEAN, METHODS, Attribution, AttributionError
from core.attribution.mixing import cross_mixing, self_mixing
from core.model import hf_inside
from core.model import hugging_face as hf
from core.model.hf_folder import HFModelError

HF_METHODS = METHODS  # every method of the studio's own model


SCALE_FREE = ("t5", "mt5", "umt5")  # RMSNorm first and no absolute positions on the embeddings


def method_problem(hm: hf.HFModel, method: str) -> str | None:
    """Why ``method`` does not explain this model, in one line (None: it does)."""
    if method not in HF_METHODS:
        return f"unknown method {method!r}; choose from {', '.join(HF_METHODS)}"
    if method == "integrated-gradients" and hm.meta.get("model_type") in SCALE_FREE:
        return (
            "Integrated gradients from zero embeddings does not converge for T5: its RMSNorm "
            "maps α·e to nearly e for every α > 0 and no absolute position is added, so the "
            "change sits at α ≈ 0 (completeness off by 65 % with 512 steps on a test model); "
            "use gradient × input."
        )
    return None


def task(hm: hf.HFModel, src_ids, out_ids) -> GradientTask:
    """log p(y_t) of ``out_ids`` as a function of the embeddings the stacks read."""
    src, dec = hf.forced_inputs(hm, src_ids, out_ids)  # (1, S), (1, T)
    out = torch.tensor([list(out_ids)], device=src.device)  # (1, T)

    def log_probs(src_emb: torch.Tensor, dec_emb: torch.Tensor) -> torch.Tensor:
        logp = hf_inside.log_probs_from_embeddings(hm, src_emb, dec_emb)  # (B, T, V)
        return logp.gather(-1, out.expand(logp.size(0), -1)[..., None])[..., 0]  # (B, T)

    pair = hf_inside.embeddings(hm, src, dec)
    with torch.no_grad():
        own = log_probs(*pair)[0]  # (T,)
    return GradientTask(pair, log_probs, own)


def mixing(hm: hf.HFModel, src_ids, out_ids, method: str) -> torch.Tensor:
    """Norm-based or ALTI+ contributions (T, S + T) from each sub-layer's terms."""
    try:
        terms = hf_terms.all_terms(hm, src_ids, out_ids)
    except HFModelError as e:
        raise AttributionError(str(e)) from e
    encoder = [self_mixing(method, t) for t in terms["encoder"]]
    decoder = []
    for own, cross in zip(terms["decoder_self"], terms["cross"]):
        decoder.append(DecoderStep(self_mixing(method, own)))
        decoder.append(cross_mixing(method, cross))
    return compose(encoder, decoder)


def rollout(maps) -> torch.Tensor:
    """Attention rollout (T, S + T) from AttentionMaps with (L, H, Tq, Tk) per kind."""

    def mixing(weights: torch.Tensor) -> torch.Tensor:  # (H, Tq, Tq) -> (Tq, Tq)
        half = 0.5 * weights.mean(0)
        return normalised(half + 0.5 * torch.eye(half.size(0), dtype=half.dtype))

    encoder = [mixing(w) for w in maps.encoder]
    decoder = []
    for own, cross in zip(maps.decoder_self, maps.cross):
        decoder.append(DecoderStep(mixing(own)))
        half = 0.5 * cross.mean(0)  # (T, S)
        rows = normalised(torch.cat([half, torch.full_like(half[:, :1], 0.5)], dim=1))
        decoder.append(DecoderStep(torch.diag(rows[:, -1]), rows[:, :-1]))
    return compose(encoder, decoder)


def attribute(
    hm: hf.HFModel, src_ids, out_ids, method: str, layer: int | None = None, head: str = MEAN
) -> Attribution:
    """Explain each output token of ``out_ids`` with one of HF_METHODS."""
    if problem := method_problem(hm, method):
        raise AttributionError(problem)
    if not len(out_ids) or not len(src_ids):
        raise AttributionError("nothing to explain: the source or the output is empty")
    start, raw, completeness = time.perf_counter(), None, None
    src, dec = hf.forced_inputs(hm, src_ids, out_ids)
    T, S = dec.size(1), src.size(1)
    if method in ("norm", "alti"):
        scores = mixing(hm, src_ids, out_ids, method)
    elif method == "value-zeroing":
        scores = compose(*hf_value_zeroing.value_zeroing_steps(hm, src_ids, out_ids))
    elif method in ("attention", "rollout"):
        _, maps = hf.forced_pass(hm, src, dec)
        maps = type(maps)(*(m[:, 0].float() for m in (maps.encoder, maps.decoder_self, maps.cross)))
        if method == "rollout":
            scores = rollout(maps)
        else:
            L, H = maps.cross.shape[:2]
            layer = L - 1 if layer is None else layer
            if not 0 <= layer < L:
                raise AttributionError(f"layer must be 0..{L - 1} (got {layer})")
            if head != MEAN and not (str(head).isdigit() and int(head) < H):
                raise AttributionError(f"head must be 0..{H - 1} or {MEAN!r} (got {head!r})")
            w = maps.cross[layer].mean(0) if head == MEAN else maps.cross[layer, int(head)]
            scores = torch.cat([w, w.new_zeros(T, T)], dim=1)  # (T, S + T)
    else:
        t = task(hm, src_ids, out_ids)
        g = grad_input(t) if method == "grad-input" else integrated_gradients(t)
        causal = torch.cat([torch.ones(T, S), torch.ones(T, T).tril()], dim=1)  # (T, S + T)
        raw = g.scores * causal
        scores, completeness = normalised(raw.abs()), g.completeness
    return Attribution(
        method,
        scores.float().cpu().numpy(),
        S,
        None if raw is None else raw.cpu().numpy(),
        layer if method == "attention" else None,
        str(head) if method == "attention" else None,
        completeness,
        time.perf_counter() - start,
    )
