"""ALTI's decomposition of a Hugging Face encoder-decoder's attention sub-layers, read by hooks
in one teacher-forced pass: what each attention read (its queries and its keys/values), what
it returned (output projection and bias included) and its weights, and the norm around it.
From these, ``core.attribution.terms``'s derivation gives each sub-layer as one term per
input token (``SublayerTerms``), as it does for the studio's own model, so the norm-based
method and ALTI+ (``core.attribution.mixing``) read either family alike.

Whether a sub-layer is post-LN (Marian, BART: y = LN(x + attention(x))) or pre-LN (mBART,
M2M100, NLLB, T5: y = x + attention(LN(x))) is read from the pass itself: the attention read
its norm's output (pre-LN) or the norm read the sum (post-LN). A post-LN norm must be a
LayerNorm (its centring is what the derivation makes linear); a pre-LN norm may be anything
(T5's RMSNorm included): no norm follows the sum there.

Shape key: Tq queries, Tk keys, H heads, Dh head width, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.attribution.terms import SublayerTerms, linearised_norm
from core.model import hugging_face as hf
from core.model.hf_folder import HFModelError
from core.model.hf_inside import attention_modules, head_geometry, layers_of

KINDS = ("encoder", "decoder_self", "cross")


def sublayer_norm(layer: nn.Module, kind: str) -> nn.Module:
    """The norm around one layer's attention of ``kind``: BART-like ``self_attn_layer_norm``
    / ``encoder_attn_layer_norm``, or T5's ``layer[i].layer_norm``."""
    if hasattr(layer, "self_attn_layer_norm"):
        return layer.encoder_attn_layer_norm if kind == "cross" else layer.self_attn_layer_norm
    if hasattr(layer, "layer"):
        return layer.layer[1 if kind == "cross" else 0].layer_norm
    raise HFModelError(f"The studio does not know the norms of a {type(layer).__name__}.")


@dataclass
class Seen:
    """What hooks saw of one attention sub-layer in one pass (batch of 1 dropped)."""

    read: torch.Tensor  # (Tq, D) the attention's query input
    keys: torch.Tensor  # (Tk, D) its key/value input
    attended: torch.Tensor  # (Tq, D) its output, out_proj's bias included
    weights: torch.Tensor  # (H, Tq, Tk)
    norm_in: torch.Tensor  # (Tq, D) the norm's input
    norm_out: torch.Tensor  # (Tq, D) the norm's output


def _watch(module: nn.Module, norm: nn.Module, box: dict) -> list:
    """Hooks that fill ``box`` with one sub-layer's Seen fields; the handles."""

    def before(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        box["read"] = x[0]
        kv = kwargs.get("key_value_states")
        box["keys"] = (x if kv is None else kv)[0]

    def after(mod, args, kwargs, output):  # (output, weights), T5: (output, bias, weights)
        box["attended"], box["weights"] = output[0][0], output[-1][0]

    def normed(mod, args, output):
        box["norm_in"], box["norm_out"] = args[0][0], output[0]

    return [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, with_kwargs=True),
        norm.register_forward_hook(normed),
    ]


@torch.no_grad()
def seen_sublayers(hm: hf.HFModel, src_ids, out_ids) -> dict[str, list[Seen]]:
    """Teacher-force ``out_ids`` after ``src_ids`` once: kind -> each layer's Seen."""
    model, boxes, handles = hm.model, {}, []
    for kind in KINDS:
        stack = model.get_encoder() if kind == "encoder" else model.get_decoder()
        for i, (layer, module) in enumerate(zip(layers_of(stack), attention_modules(model, kind))):
            boxes[(kind, i)] = {}
            handles += _watch(module, sublayer_norm(layer, kind), boxes[(kind, i)])
    src, dec = hf.forced_inputs(hm, src_ids, out_ids)
    try:
        model(input_ids=src, decoder_input_ids=dec, output_attentions=True, return_dict=True)
    finally:
        for h in handles:
            h.remove()
    return {kind: [Seen(**box) for (k, _), box in boxes.items() if k == kind] for kind in KINDS}


def head_maps(module: nn.Module, u: torch.Tensor) -> torch.Tensor:
    """f^h(u_j) = (u_j W_V^h + b_V^h) W_O^h for each head: u (Tk, D) -> (H, Tk, D)."""
    out, H, Dh = head_geometry(module)
    v_proj = getattr(module, "v_proj", None) or module.v
    v = v_proj(u).view(-1, H, Dh).transpose(0, 1)  # (H, Tk, Dh)
    w_o = out.weight.view(out.weight.size(0), H, Dh).permute(1, 2, 0)  # (H, Dh, D)
    return v @ w_o  # (H, Tk, D)


def sublayer_terms(module: nn.Module, norm: nn.Module, seen: Seen) -> SublayerTerms:
    """One sub-layer as terms that sum to its output (``core.attribution.terms``)."""
    values = torch.einsum("hij,hjd->ijd", seen.weights, head_maps(module, seen.keys))
    out = head_geometry(module)[0]
    bias = out.bias if out.bias is not None else seen.attended.new_zeros(seen.attended.size(-1))
    bias = bias.expand_as(seen.attended)  # (Tq, D)
    if torch.equal(seen.read, seen.norm_out):  # pre-LN: the attention read the norm's output
        x = seen.norm_in  # (Tq, D) the residual
        return SublayerTerms(values, x, bias, x + seen.attended, seen.weights, values, x)
    if not isinstance(norm, nn.LayerNorm):
        raise HFModelError(
            f"A post-norm sub-layer with {type(norm).__name__}: ALTI's linearised norm is "
            "derived for LayerNorm only."
        )
    x = seen.read  # post-LN: the attention read the residual itself
    lin, beta = linearised_norm(norm, seen.norm_in)
    return SublayerTerms(
        lin(values), lin(x), lin(bias) + beta, seen.norm_out, seen.weights, values, x
    )


def all_terms(hm: hf.HFModel, src_ids, out_ids) -> dict[str, list[SublayerTerms]]:
    """kind -> each layer's SublayerTerms of one teacher-forced pass (float32)."""
    seen = seen_sublayers(hm, src_ids, out_ids)
    out = {}
    with torch.no_grad():
        for kind in KINDS:
            stack = hm.model.get_encoder() if kind == "encoder" else hm.model.get_decoder()
            modules = attention_modules(hm.model, kind)
            out[kind] = [
                sublayer_terms(m, sublayer_norm(layer, kind), s)
                for layer, m, s in zip(layers_of(stack), modules, seen[kind])
            ]
    return out
