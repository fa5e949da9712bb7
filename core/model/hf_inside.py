"""Inside a Hugging Face encoder-decoder: its attention modules and heads (removed per
thread by a pre-hook at the output projection), its decoder layers' outputs for the logit
lens, what one attention module read (the q·k view), and its token embeddings (the
gradient methods). Every family is found by its own attribute names: BART-like
``self_attn`` / ``encoder_attn`` / ``out_proj`` and T5's ``SelfAttention`` /
``EncDecAttention`` / ``o``.

Shape key: T decoder steps, L layers, H heads, Dh head width, D model width, V vocabulary.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from core.model.hf_folder import HFModelError
from core.model.hugging_face import HFModel, final_norm, forced_inputs


def layers_of(stack: nn.Module) -> Sequence[nn.Module]:
    """The layers of an encoder or decoder stack (``layers``, or T5's ``block``)."""
    layers = getattr(stack, "layers", None)
    layers = layers if layers is not None else getattr(stack, "block", None)
    if layers is None:
        raise HFModelError(
            f"The studio does not know where the layers of a {type(stack).__name__} are."
        )
    return layers


def _attention_of(layer: nn.Module, kind: str) -> nn.Module:
    """One layer's attention of ``kind``: BART-like ``self_attn`` / ``encoder_attn``, or
    T5's ``layer[0].SelfAttention`` / ``layer[1].EncDecAttention``."""
    if hasattr(layer, "self_attn"):
        return layer.encoder_attn if kind == "cross" else layer.self_attn
    if hasattr(layer, "layer"):
        return layer.layer[1].EncDecAttention if kind == "cross" else layer.layer[0].SelfAttention
    raise HFModelError(f"The studio does not know where a {type(layer).__name__}'s heads are.")


def attention_modules(model: nn.Module, kind: str) -> list[nn.Module]:
    """The attention modules of one kind, one per layer."""
    stack = model.get_encoder() if kind == "encoder" else model.get_decoder()
    return [_attention_of(layer, kind) for layer in layers_of(stack)]


def head_geometry(module: nn.Module) -> tuple[nn.Linear, int, int]:
    """(output projection, heads, head width) of one attention module."""
    out = getattr(module, "out_proj", None) or getattr(module, "o", None)
    heads = getattr(module, "num_heads", None) or getattr(module, "n_heads", None)
    width = getattr(module, "head_dim", None) or getattr(module, "key_value_proj_dim", None)
    if out is None or not heads or not width:
        raise HFModelError(f"The studio does not know the heads of a {type(module).__name__}.")
    return out, int(heads), int(width)


_REMOVED = threading.local()  # this thread's {output projection: (H * Dh,) or (B, 1, H * Dh)}


def _zero_removed(module: nn.Module, args: tuple):
    """Forward pre-hook of an output projection: multiply its input (B, T, H * Dh) by this
    thread's mask, a (H * Dh,) keep mask or (B, 1, H * Dh) gates of each row's heads."""
    keep = getattr(_REMOVED, "masks", {}).get(module)
    if keep is None:
        return None
    return (args[0] * keep.to(args[0].dtype), *args[1:])


def _install_hooks(model: nn.Module) -> None:
    """Give every output projection the pre-hook once (it does nothing until heads are
    removed): a model shared by many sessions is never changed while one of them reads it."""
    if getattr(model, "_studio_hooks", False):
        return
    for kind in ("encoder", "decoder_self", "cross"):
        for module in attention_modules(model, kind):
            head_geometry(module)[0].register_forward_pre_hook(_zero_removed)
    model._studio_hooks = True


@contextmanager
def heads_removed(model: nn.Module, heads: Iterable[tuple[str, int, int]]):
    """Within the block, in this thread, each (kind, layer, head) contributes nothing: its
    slice of the output projection's input is zeroed."""
    masks: dict[nn.Linear, torch.Tensor] = {}
    for kind, layer, head in heads:
        out, n, width = head_geometry(attention_modules(model, kind)[layer])
        mask = masks.setdefault(out, torch.ones(n * width, device=out.weight.device))
        mask[head * width : (head + 1) * width] = 0.0
    with _masked(model, masks):
        yield model


@contextmanager
def rows_gated(model: nn.Module, gates: Mapping[tuple[str, int], torch.Tensor]):
    """Within the block, in this thread, row b of a batch has head h of (kind, layer) scaled
    by ``gates[(kind, layer)][b, h]`` ((B, H) each; 0 removes the head, 1 keeps it, and a
    gate that requires grad gives each row's gradient, as core.attention.ablation.gated
    does for the studio's model). Greedy ``generate`` keeps its rows, so it may run inside."""
    masks: dict[nn.Linear, torch.Tensor] = {}
    for (kind, layer), gate in gates.items():
        out, n, width = head_geometry(attention_modules(model, kind)[layer])
        masks[out] = gate.repeat_interleave(width, dim=-1)[:, None, :]  # (B, 1, H * Dh)
    with _masked(model, masks):
        yield model


@contextmanager
def _masked(model: nn.Module, masks: dict):
    """This thread's output-projection masks inside the block; the previous ones after."""
    _install_hooks(model)
    before = getattr(_REMOVED, "masks", {})
    _REMOVED.masks = masks
    try:
        yield
    finally:
        _REMOVED.masks = before


# ----------------------------------------------------------------------------- logit lens


def lens_projection(model: nn.Module) -> str:
    """What the logit lens projects through, in words."""
    steps = []
    if (norm := final_norm(model)) is not None:
        steps.append(f"the decoder's final norm ({type(norm).__name__})")
    if getattr(model.config, "scale_decoder_outputs", False):
        steps.append("the d^-1/2 rescaling of tied embeddings (T5)")
    steps.append("lm_head")
    if getattr(model, "final_logits_bias", None) is not None:
        steps.append("final_logits_bias")
    return "each decoder layer's output through " + ", then ".join(steps)


@torch.no_grad()
def decoder_layer_outputs(hm: HFModel, src: torch.Tensor, decoder_inputs: torch.Tensor):
    """(L x (1, T, D) each decoder layer's output, read by forward hooks; logits (1, T, V))."""
    captured: list[torch.Tensor] = []

    def keep(module, args, output):
        captured.append(output[0] if isinstance(output, tuple) else output)

    hooks = [layer.register_forward_hook(keep) for layer in layers_of(hm.model.get_decoder())]
    try:
        out = hm.model(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            decoder_input_ids=decoder_inputs,
            return_dict=True,
        )
    finally:
        for h in hooks:
            h.remove()
    return captured, out.logits


@torch.no_grad()
def lens_log_probs(hm: HFModel, outputs: list[torch.Tensor]) -> torch.Tensor:
    """L x (1, T, D) decoder layer outputs -> (L, T, V) log-probabilities, through what the
    model applies after its last layer (``lens_projection``)."""
    h = torch.cat(outputs)  # (L, T, D)
    if (norm := final_norm(hm.model)) is not None:
        h = norm(h)
    return output_logits(hm.model, h).float().log_softmax(-1)  # (L, T, V)


def output_logits(model: nn.Module, h: torch.Tensor, weight: torch.Tensor | None = None):
    """(..., D) decoder outputs (after the decoder's final norm) -> (..., V) logits, as the
    model's own forward makes them: T5's d^-1/2 rescaling, ``lm_head``, ``final_logits_bias``.
    ``weight``: ``lm_head``'s weight already cast (once for many calls, e.g. to bfloat16)."""
    if getattr(model.config, "scale_decoder_outputs", False):
        h = h * model.config.d_model**-0.5
    head = model.get_output_embeddings()
    if weight is None:
        logits = head(h)  # (..., V)
    else:
        logits = torch.nn.functional.linear(h.to(weight.dtype), weight, head.bias)  # (..., V)
    bias = getattr(model, "final_logits_bias", None)
    return logits if bias is None else logits + bias


# ----------------------------------------------------------------------------- q·k


@dataclass
class AttentionInputs:
    """What one attention module read in a teacher-forced pass, and how it scores."""

    queries: torch.Tensor  # (1, Tq, D) its input
    keys: torch.Tensor  # (1, Tk, D) the same for self-attention, the encoder's output for cross
    scale: float  # what q·k is multiplied by: 1/sqrt(Dh), or 1 (T5)
    bias: torch.Tensor | None  # (1, H, Tq, Tk) T5's relative-position bias (None elsewhere)
    weights: torch.Tensor  # (1, H, Tq, Tk) the weights the model returned


@torch.no_grad()
def attention_inputs(hm: HFModel, src_ids, out_ids, kind: str, layer: int) -> AttentionInputs:
    """Teacher-force ``out_ids`` and keep what one attention module read (hooks)."""
    module = attention_modules(hm.model, kind)[layer]
    seen: dict = {}

    def before(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        seen["q"], seen["k"] = x, kwargs.get("key_value_states")

    def after(mod, args, kwargs, output):
        if getattr(mod, "has_relative_attention_bias", None) is not None:  # T5: its bias
            seen["bias"] = output[1]

    hooks = [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, with_kwargs=True),
    ]
    src, dec = forced_inputs(hm, src_ids, out_ids)
    try:
        out = hm.model(
            input_ids=src, decoder_input_ids=dec, output_attentions=True, return_dict=True
        )
    finally:
        for h in hooks:
            h.remove()
    maps = {
        "encoder": out.encoder_attentions,
        "decoder_self": out.decoder_attentions,
        "cross": out.cross_attentions,
    }[kind]
    keys = seen["k"] if seen["k"] is not None else seen["q"]
    scale = float(getattr(module, "scaling", head_geometry(module)[2] ** -0.5))
    return AttentionInputs(seen["q"], keys, scale, seen.get("bias"), maps[layer])


def head_vectors(module: nn.Module, inputs: AttentionInputs, head: int):
    """One head's (Tq, Dh) queries and (Tk, Dh) keys, by the module's own projections."""
    _, _, width = head_geometry(module)
    q_proj = getattr(module, "q_proj", None) or module.q
    k_proj = getattr(module, "k_proj", None) or module.k
    cut = slice(head * width, (head + 1) * width)
    with torch.no_grad():
        q = q_proj(inputs.queries)[0, :, cut]  # (Tq, Dh)
        k = k_proj(inputs.keys)[0, :, cut]  # (Tk, Dh)
    return q.float(), k.float()


# ----------------------------------------------------------------------------- gradients


def _embedded(stack: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """(B, N) ids -> (B, N, D): what the stack reads as ``inputs_embeds``: its token
    embedding, with Marian's √D scale (BART and M2M100 scale inside the embedding module)."""
    return stack.embed_tokens(ids) * getattr(stack, "embed_scale", 1.0)


@torch.no_grad()
def embeddings(hm: HFModel, src: torch.Tensor, dec: torch.Tensor):
    """((B, S, D), (B, T, D)) the token embeddings the encoder and decoder read."""
    return _embedded(hm.model.get_encoder(), src), _embedded(hm.model.get_decoder(), dec)


def log_probs_from_embeddings(hm: HFModel, src_emb: torch.Tensor, dec_emb: torch.Tensor):
    """(B, S, D), (B, T, D) token embeddings -> (B, T, V) log-probabilities, as the model
    computes them from ids (tested): what the gradient methods differentiate."""
    out = hm.model(
        inputs_embeds=src_emb,
        attention_mask=torch.ones(src_emb.shape[:2], dtype=torch.long, device=src_emb.device),
        decoder_inputs_embeds=dec_emb,
        return_dict=True,
    )
    return out.logits.float().log_softmax(-1)
