"""Where a one-stack model (decoder-only or masked) keeps its parts (its layers, each layer's
attention and output projection, its final norm); the families of ``hf_config.LM_TYPES`` and
``hf_config.ENCODER_TYPES``.

Where they are is the family's row of the table (``core.model.architectures``), read through
``core.model.sites`` (which also installs their hook sites): GPT-2 keeps them in
``transformer.h[i].attn`` (one ``c_attn`` making q, k and v, ``c_proj`` as W_o, learned
positions ``wpe``, LayerNorm ``ln_f``); Llama, Qwen2, Mistral and Gemma in
``model.layers[i].self_attn`` (``q_proj`` ... ``o_proj``, key/value heads shared by groups of
query heads, rotary positions, RMSNorm ``norm``), Gemma 2 and Phi (W_o ``dense``) too; BLOOM and
Falcon in ``transformer.h[i].self_attention`` (one ``query_key_value``, W_o ``dense``); BERT,
RoBERTa and ELECTRA (masked language models, read the same way) in
``<base>.encoder.layer[i].attention.self``, W_o outside it; DistilBERT in
``distilbert.transformer.layer[i].attention`` (W_o ``out_lin``).

Shape key: B batch, N tokens, D model width.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from core.model import sites
from core.model.architectures import architecture_of, part
from core.model.hf_folder import HFModelError


def base(model: nn.Module) -> nn.Module:
    """The stack under the language-model head (``model.model`` / ``model.transformer``)."""
    return sites.stack(model)


def layers_of(model: nn.Module) -> Sequence[nn.Module]:
    """The layers, in order."""
    return sites.layers_of(base(model))


def attention_of(layer: nn.Module) -> nn.Module:
    """A layer's self-attention module (BERT's: ``attention.self``)."""
    return sites.attention_of(layer, "decoder_self")


def final_norm(model: nn.Module) -> nn.Module:
    """The norm after the last layer (``norm`` / ``ln_f``)."""
    name = architecture_of(model).stack().final_norm
    if name is None:  # a post-LN stack (BERT): each layer ends with its norm
        raise HFModelError(f"A {type(model).__name__} has no norm after its last layer.")
    return part(base(model), name)


def output_projection_of(layer: nn.Module) -> nn.Module:
    """W_o of a layer's attention (BERT's: ``attention.output.dense``, outside its heads)."""
    return sites.output_projection_of(layer, "decoder_self")


def output_projection(attention: nn.Module) -> nn.Module:
    """W_o of one attention (``o_proj`` / GPT-2's ``c_proj``)."""
    name = architecture_of(attention).projections.o
    if name is None:  # BERT's sits outside the attention module (output_projection_of)
        raise HFModelError(f"A {type(attention).__name__} holds no W_o: its layer does.")
    return part(attention, name)
