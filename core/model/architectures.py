"""The table of architectures: one row per Hugging Face ``model_type`` the studio reads, saying
where the family keeps its parts and what it does differently from the others.

A row says, as TransformerLens's ``component_mapping`` and inseq's ``model_config.yaml`` do:
its kind (encoder-decoder, decoder-only, masked); each stack's path from the model, its token
embeddings, positions, final norm and, per layer, its attention sub-layers (the attention
module, the norm of the sub-layer, the stream after it) and its feed-forward (the modules and
their norm); how every attention module names its projections (q, k, v, o, or GPT-2's one
fused ``c_attn`` cut in thirds, BLOOM's per head) and its heads; the norms' kind and
placement; the output head; what q·k is scaled by; the family's quirks (``QUIRKS``); the
config flags its paths hold for (``requires``: another value is refused in one line,
``config_problem``); and what its mathematics does not allow (``refuses``: a section or a
method and why, in one line, what ``supports`` answers through ``core.model.capabilities``).
Paths are dotted module paths (``nn.Module.get_submodule``). Every path of every row is
resolved on its family's tiny model built with its real checkpoints' flags
(``tests/test_architectures.py``): a new family is one row here plus its tiny model in
``tests/hf_tiny.py`` or ``tests/lm_tiny.py``.

The rest of ``core/model`` reads these rows instead of trying attribute names: the hook sites
(``sites``) and a one-stack model's parts (``lm_sites``), the rebuilt heads (``lm_heads``),
the adapters' heads and lens (``hf_model``, ``masked``), the families a folder may be
(``hf_folder``), their parameter counts (``hf_size``) and which ones are forced to a target
language (``hugging_face``). A ``model_type`` without a row is refused in one line that names
the rows (``refusal``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table is plain data: nothing here imports torch
    from torch import nn

ENCODER_DECODER = "encoder-decoder"  # two stacks: an encoder reads the source, a decoder writes
DECODER_ONLY = "decoder-only"  # one causal stack (translates by a prompt)
MASKED = "masked"  # one bidirectional stack filling mask tokens

SINUSOIDAL = "sinusoidal positions"  # how a family places tokens, in the picker's words
LEARNED = "learned positions"
ROPE = "rope"
RELATIVE = "relative position bias"
ALIBI = "alibi"  # no position embedding: a bias on q·k, a slope per head times the key's place

QUIRKS = {  # what a family does that the parts alone do not say
    "decoder_embed_scale": "the decoder multiplies the inputs_embeds it is given by √D (its "
    "encoder scales only what it embeds from ids)",
    "embed_scale": "the token embeddings are multiplied by √D inside the embedding module "
    "(Gemma; mBART and M2M100 where config.scale_embedding, as their checkpoints set it)",
    "norm_plus_one": "RMSNorm scales by (1 + w), not w",
    "relative_bias": "a relative position bias added to q·k, computed in each stack's first layer",
    "relative_bias_per_layer": "a relative position bias added to q·k, each layer its own",
    "rescale_tied_output": "the decoder's output is multiplied by D^-1/2 before a tied lm_head "
    "(config.scale_decoder_outputs)",
    "final_logits_bias": "a bias buffer (final_logits_bias) added to the logits after lm_head",
    "sliding_window": "each query sees only the last config.sliding_window keys (where "
    "config.use_sliding_window is not false)",
    "multilingual": "the target language is chosen by forcing its code as the first output",
    "positions_past_padding": "positions start after the padding id (RoBERTa: 2, not 0)",
    "residual_inside": "the attention and the feed-forward modules add the residual they are "
    "given themselves (BLOOM: dense(z) + residual, mlp(h, residual))",
    "multi_query": "one key/value head serves every query head (Falcon's multi_query)",
    "parallel": "attention and the feed-forward read one norm's output side by side and both "
    "add to the stream (Falcon's parallel_attn; Phi)",
    "partial_rotary": "RoPE rotates only the first config.partial_rotary_factor of each "
    "head's dimensions (Phi)",
    "softcap": "scores and logits are soft-capped, c·tanh(s/c): q·k by "
    "config.attn_logit_softcapping, the logits by config.final_logit_softcapping (Gemma 2)",
    "sliding_window_alternate": "only the layers config.layer_types names sliding_attention see "
    "through the window (Gemma 2: every other layer)",
    "sandwich_norms": "each sub-layer's output is normalised again before it is added to the "
    "stream (Gemma 2's post_attention_layernorm, post_feedforward_layernorm)",
    "embed_norm": "a LayerNorm on the token embeddings before the first layer (BLOOM's "
    "word_embeddings_layernorm)",
    "narrow_embeddings": "the token embeddings are config.embedding_size wide, projected to "
    "the stream's width (embeddings_project) where that differs (ELECTRA)",
}


@dataclass(frozen=True)
class Projections:
    """How every attention module of a family names its projections, within the module."""

    q: str  # W_q ("q_proj", "q", "query")
    k: str  # W_k
    v: str  # W_v
    o: str | None  # W_o; None where it sits outside the attention module (``Attention.output``)
    fused: str | None = None  # one projection making q, k and v (GPT-2's c_attn)
    layout: str = "blocks"  # how the fused output is cut: "blocks", the H query heads' then
    # the key/value heads' keys, then values (GPT-2's thirds); "per_head", each head's q, k and
    # v side by side (BLOOM's query_key_value: (H, 3, Dh))
    conv1d: bool = False  # weights kept as (in, out): GPT-2's Conv1D, not nn.Linear's (out, in)


@dataclass(frozen=True)
class Attention:
    """One attention sub-layer of a layer; every path is from the layer."""

    path: str  # the attention module ("self_attn", "layer.0.SelfAttention", "attention.self")
    norm: str  # the sub-layer's norm: before the attention (pre-LN) or after the sum (post-LN)
    resid_post: tuple[str, str]  # the stream after the sub-layer: ("output", m), m's output,
    # or ("input", m), the input of m, the norm that comes next (pre-LN)
    output: str | None = None  # W_o where it sits outside the attention module (BERT)
    memory: str | None = None  # the keyword argument a cross-attention reads its keys from


@dataclass(frozen=True)
class Stack:
    """One stack of layers; ``path`` is from the model, the others from the stack, the
    feed-forward's from a layer."""

    path: str  # the stack ("model.encoder", "decoder", "transformer", "bert")
    embed: str  # the token embedding module ("embed_tokens", "wte")
    positions: str | None  # the module placing tokens (learned, sinusoidal or rotary)
    final_norm: str | None  # the norm after the last layer; None for a post-LN stack
    self_attention: Attention
    cross_attention: Attention | None  # a decoder's attention over the encoder's output
    mlp: tuple[str, ...]  # the feed-forward's modules, from a layer, in order (with BART's
    # activation between fc1 and fc2)
    mlp_norm: str  # the feed-forward's norm, from a layer
    mlp_out: str | None = None  # what the feed-forward adds to the stream, from a layer, where
    # it is not the output of mlp[-1]: BLOOM's mlp.dense_4h_to_h (its mlp adds the residual
    # itself), Gemma 2's post_feedforward_layernorm (its output normalised again)


@dataclass(frozen=True)
class Architecture:
    """One family: where its parts are and what it does differently."""

    model_type: str  # config.json's model_type
    kind: str  # ENCODER_DECODER, DECODER_ONLY or MASKED
    stacks: Mapping[str, Stack]  # "encoder" and "decoder"; a one-stack model's one stack
    layers: str  # each stack's layers, from the stack ("layers", "block", "h", "encoder.layer")
    projections: Projections
    heads: tuple[str, str] | None  # the attention module's (heads, head width) attributes;
    # None: the config's num_attention_heads (and head width from the projections)
    kv_heads: str | None  # the config key of key/value heads (grouped-query attention)
    scale: str | float  # what q·k is multiplied by: an attention module attribute, or a number
    norm: str  # "pre" (a norm before each sub-layer) or "post" (after each residual sum)
    norm_class: str  # "LayerNorm" or "RMSNorm"
    positions: str  # SINUSOIDAL, LEARNED, ROPE, RELATIVE or ALIBI
    head: str | tuple[str, ...]  # the output head, from the model ("lm_head"; BERT's
    # masked-LM head "cls"), or the modules it applies in order where the model holds no one
    # head module (DistilBERT's vocab_transform, activation, vocab_layer_norm, vocab_projector)
    quirks: frozenset[str]  # of QUIRKS
    count: str  # hf_size's arithmetic for its parameters ("bart_like", "t5", "llama_like")
    config_defaults: Mapping[str, object]  # what its config class assumes of a key left out
    requires: Mapping[str, object] = field(default_factory=dict)  # config flags the row's
    # paths hold for (as its real checkpoints ship them); another value is refused in one line
    refuses: Mapping[str, str] = field(default_factory=dict)  # what its mathematics does not
    # allow (a section, a method) -> why, in one line (``core.model.capabilities``)
    norm_eps: str = "eps"  # the norms' attribute holding their epsilon (Llama's RMSNorm:
    # variance_epsilon), what a norm's scale (the ``ln1.scale`` hook sites) adds before √

    def stack(self, side: str | None = None) -> Stack:
        """The stack of ``side`` ("encoder", "decoder"); a one-stack model's one stack."""
        if side is None:
            (only,) = self.stacks.values()
            return only
        return self.stacks[side]

    def scale_of(self, attention: nn.Module) -> float:
        """What q·k is multiplied by in one of its attention modules (T5: 1, no 1/√Dh)."""
        scale = self.scale
        return float(getattr(attention, scale) if isinstance(scale, str) else scale)

    def output_head(self, model: nn.Module) -> nn.Module:
        """The output head of ``model``: its one module, or its modules in order."""
        if isinstance(self.head, str):
            return part(model, self.head)
        from torch import nn  # the table itself imports no torch

        return nn.Sequential(*(part(model, path) for path in self.head))

    def kv_heads_of(self, config) -> int:
        """Key/value heads of a config (a transformers config): fewer than the query heads in
        grouped-query attention, one in multi-query."""
        heads = config.num_attention_heads  # GPT-2's config maps it to n_head
        if "multi_query" in self.quirks:
            return 1
        return (getattr(config, self.kv_heads, None) if self.kv_heads else None) or heads

    def attention(self, kind: str) -> Attention:
        """The sub-layer of an attention kind: "encoder", "decoder_self" or "cross" (a
        one-stack model's one attention for every kind)."""
        if len(self.stacks) == 1:
            return self.stack().self_attention
        if kind == "cross":
            return self.stacks["decoder"].cross_attention
        return self.stacks["encoder" if kind == "encoder" else "decoder"].self_attention


# ----------------------------------------------------------------------------- shared parts

BART_PROJECTIONS = Projections(q="q_proj", k="k_proj", v="v_proj", o="out_proj")
T5_PROJECTIONS = Projections(q="q", k="k", v="v", o="o")
LLAMA_PROJECTIONS = Projections(q="q_proj", k="k_proj", v="v_proj", o="o_proj")
BERT_PROJECTIONS = Projections(q="query", k="key", v="value", o=None)


def bart_stacks(norm: str) -> dict[str, Stack]:
    """Marian, BART, mBART, M2M100 / NLLB: ``model.encoder`` and ``model.decoder``, each layer
    ``self_attn`` (and ``encoder_attn``) with a LayerNorm per sub-layer and ``fc1``, ``fc2``;
    a pre-LN stack ends with ``layer_norm``, and there the stream after a sub-layer is the
    next norm's input (post-LN: its own norm's output)."""

    def sublayer(path: str, own: str, next_norm: str, memory: str | None = None) -> Attention:
        after = ("input", next_norm) if norm == "pre" else ("output", own)
        return Attention(path=path, norm=own, resid_post=after, memory=memory)

    def stack(side: str, cross: Attention | None, next_norm: str) -> Stack:
        return Stack(
            path=f"model.{side}",
            embed="embed_tokens",
            positions="embed_positions",
            final_norm="layer_norm" if norm == "pre" else None,
            self_attention=sublayer("self_attn", "self_attn_layer_norm", next_norm),
            cross_attention=cross,
            mlp=("fc1", "fc2"),
            mlp_norm="final_layer_norm",
        )

    cross = sublayer(
        "encoder_attn", "encoder_attn_layer_norm", "final_layer_norm", memory="key_value_states"
    )
    return {
        "encoder": stack("encoder", None, "final_layer_norm"),
        "decoder": stack("decoder", cross, "encoder_attn_layer_norm"),
    }


def t5_stacks() -> dict[str, Stack]:
    """T5, mT5, UMT5: ``encoder`` and ``decoder``, each layer (``block[i]``) a list of
    sub-layers (``layer``: self-attention, [cross-attention,] feed-forward), each with its
    RMSNorm before it; the stream after a sub-layer is that sub-layer's output."""

    def sublayer(i: int, name: str, memory: str | None = None) -> Attention:
        return Attention(
            path=f"layer.{i}.{name}",
            norm=f"layer.{i}.layer_norm",
            resid_post=("output", f"layer.{i}"),
            memory=memory,
        )

    def stack(side: str, cross: Attention | None) -> Stack:
        mlp = 2 if cross else 1  # the feed-forward comes after the attention sub-layers
        return Stack(
            path=side,
            embed="embed_tokens",
            positions=None,  # the relative bias sits in the attention modules
            final_norm="final_layer_norm",
            self_attention=sublayer(0, "SelfAttention"),
            cross_attention=cross,
            mlp=(f"layer.{mlp}.DenseReluDense",),
            mlp_norm=f"layer.{mlp}.layer_norm",
        )

    cross = sublayer(1, "EncDecAttention", "key_value_states")
    return {"encoder": stack("encoder", None), "decoder": stack("decoder", cross)}


def llama_stacks() -> dict[str, Stack]:
    """Llama, Qwen2, Mistral, Gemma: ``model``, each layer ``self_attn`` after
    ``input_layernorm`` and ``mlp`` after ``post_attention_layernorm``, rotary positions
    (``rotary_emb``), RMSNorm ``norm`` at the end."""
    attention = Attention(
        path="self_attn",
        norm="input_layernorm",
        resid_post=("input", "post_attention_layernorm"),
    )
    return {
        "decoder": Stack(
            path="model",
            embed="embed_tokens",
            positions="rotary_emb",
            final_norm="norm",
            self_attention=attention,
            cross_attention=None,
            mlp=("mlp",),
            mlp_norm="post_attention_layernorm",
        )
    }


def distilbert_stacks() -> dict[str, Stack]:
    """DistilBERT: ``distilbert.transformer.layer[i]``, post-LN, the attention's W_o inside it
    (``attention.out_lin``), ``sa_layer_norm`` on the sum after it, the feed-forward
    ``ffn.lin1``, ``ffn.lin2`` and ``output_layer_norm`` on the sum."""
    attention = Attention(
        path="attention", norm="sa_layer_norm", resid_post=("output", "sa_layer_norm")
    )
    return {
        "encoder": Stack(
            path="distilbert",
            embed="embeddings.word_embeddings",
            positions="embeddings.position_embeddings",
            final_norm=None,
            self_attention=attention,
            cross_attention=None,
            mlp=("ffn.lin1", "ffn.lin2"),
            mlp_norm="output_layer_norm",
        )
    }


def bert_stacks(base: str) -> dict[str, Stack]:
    """BERT, RoBERTa: ``<base>.encoder.layer[i]``, post-LN, the attention's W_o outside its
    heads (``attention.output.dense``, then ``attention.output.LayerNorm`` on the sum), the
    feed-forward ``intermediate`` then ``output.dense`` (``output.LayerNorm`` on the sum)."""
    attention = Attention(
        path="attention.self",
        norm="attention.output.LayerNorm",
        resid_post=("output", "attention.output.LayerNorm"),
        output="attention.output.dense",
    )
    return {
        "encoder": Stack(
            path=base,
            embed="embeddings.word_embeddings",
            positions="embeddings.position_embeddings",
            final_norm=None,
            self_attention=attention,
            cross_attention=None,
            mlp=("intermediate", "output.dense"),
            mlp_norm="output.LayerNorm",
        )
    }


# ----------------------------------------------------------------------------- the rows

SANDWICH = (
    "This model normalises each attention output again before adding it to the stream "
    "(Gemma 2's post_attention_layernorm): the per-token terms norm-based attribution, ALTI+ "
    "and value zeroing split the stream into are not that norm's output; use attention, "
    "rollout or gradient × input."
)
DECOMPOSITIONS = ("norm", "alti", "value-zeroing")  # the methods that split the stream into terms
PARALLEL = (
    "This model runs attention and the feed-forward side by side on one norm's output (a "
    "parallel residual): no stream holds the input plus attention alone, which norm-based "
    "attribution, ALTI+ and value zeroing decompose and pass through the feed-forward; use "
    "attention, rollout or the gradients."
)

_ROWS = (
    Architecture(  # Helsinki-NLP/opus-mt-*: post-LN, √D embedding scale, static sinusoids
        model_type="marian",
        kind=ENCODER_DECODER,
        stacks=bart_stacks("post"),
        layers="layers",
        projections=BART_PROJECTIONS,
        heads=("num_heads", "head_dim"),
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=SINUSOIDAL,
        head="lm_head",
        quirks=frozenset({"decoder_embed_scale", "final_logits_bias"}),
        count="bart_like",
        config_defaults={"tie_word_embeddings": True, "share_encoder_decoder_embeddings": True},
    ),
    Architecture(  # facebook/bart-*: post-LN, learned positions (offset 2)
        model_type="bart",
        kind=ENCODER_DECODER,
        stacks=bart_stacks("post"),
        layers="layers",
        projections=BART_PROJECTIONS,
        heads=("num_heads", "head_dim"),
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=LEARNED,
        head="lm_head",
        quirks=frozenset({"final_logits_bias"}),
        count="bart_like",
        config_defaults={"tie_word_embeddings": True},
    ),
    Architecture(  # facebook/mbart-large-50-*: pre-LN, the target language forced first
        model_type="mbart",
        kind=ENCODER_DECODER,
        stacks=bart_stacks("pre"),
        layers="layers",
        projections=BART_PROJECTIONS,
        heads=("num_heads", "head_dim"),
        kv_heads=None,
        scale="scaling",
        norm="pre",
        norm_class="LayerNorm",
        positions=LEARNED,
        head="lm_head",
        quirks=frozenset({"embed_scale", "final_logits_bias", "multilingual"}),
        count="bart_like",
        config_defaults={"tie_word_embeddings": True},
    ),
    Architecture(  # facebook/m2m100_*, and NLLB (facebook/nllb-200-*, codes as fra_Latn)
        model_type="m2m_100",
        kind=ENCODER_DECODER,
        stacks=bart_stacks("pre"),
        layers="layers",
        projections=BART_PROJECTIONS,
        heads=("num_heads", "head_dim"),
        kv_heads=None,
        scale="scaling",
        norm="pre",
        norm_class="LayerNorm",
        positions=SINUSOIDAL,
        head="lm_head",
        quirks=frozenset({"embed_scale", "multilingual"}),
        count="bart_like",
        config_defaults={"tie_word_embeddings": True},
    ),
    Architecture(  # t5-*, google/t5-v1_1-*, google/flan-t5-*: no 1/√Dh on q·k
        model_type="t5",
        kind=ENCODER_DECODER,
        stacks=t5_stacks(),
        layers="block",
        projections=T5_PROJECTIONS,
        heads=("n_heads", "key_value_proj_dim"),
        kv_heads=None,
        scale=1.0,
        norm="pre",
        norm_class="RMSNorm",
        positions=RELATIVE,
        head="lm_head",
        quirks=frozenset({"relative_bias", "rescale_tied_output"}),
        norm_eps="variance_epsilon",
        count="t5",
        config_defaults={
            "tie_word_embeddings": True,
            "feed_forward_proj": "relu",
            "relative_attention_num_buckets": 32,
        },
    ),
    Architecture(  # google/mt5-*: T5's layers; its output is not rescaled even when tied
        model_type="mt5",
        kind=ENCODER_DECODER,
        stacks=t5_stacks(),
        layers="block",
        projections=T5_PROJECTIONS,
        heads=("n_heads", "key_value_proj_dim"),
        kv_heads=None,
        scale=1.0,
        norm="pre",
        norm_class="RMSNorm",
        positions=RELATIVE,
        head="lm_head",
        quirks=frozenset({"relative_bias"}),
        norm_eps="variance_epsilon",
        count="t5",
        config_defaults={
            "tie_word_embeddings": True,
            "feed_forward_proj": "gated-gelu",
            "relative_attention_num_buckets": 32,
        },
    ),
    Architecture(  # google/umt5-*: T5's layers, a relative bias in every layer
        model_type="umt5",
        kind=ENCODER_DECODER,
        stacks=t5_stacks(),
        layers="block",
        projections=T5_PROJECTIONS,
        heads=("n_heads", "key_value_proj_dim"),
        kv_heads=None,
        scale=1.0,
        norm="pre",
        norm_class="RMSNorm",
        positions=RELATIVE,
        head="lm_head",
        quirks=frozenset({"relative_bias_per_layer", "rescale_tied_output"}),
        norm_eps="variance_epsilon",
        count="umt5",
        config_defaults={
            "tie_word_embeddings": True,
            "feed_forward_proj": "gated-gelu",
            "relative_attention_num_buckets": 32,
        },
    ),
    Architecture(  # openai-community/gpt2: one Conv1D c_attn makes q, k and v
        model_type="gpt2",
        kind=DECODER_ONLY,
        stacks={
            "decoder": Stack(
                path="transformer",
                embed="wte",
                positions="wpe",
                final_norm="ln_f",
                self_attention=Attention(path="attn", norm="ln_1", resid_post=("input", "ln_2")),
                cross_attention=None,
                mlp=("mlp",),
                mlp_norm="ln_2",
            )
        },
        layers="h",
        projections=Projections(
            q="c_attn", k="c_attn", v="c_attn", o="c_proj", fused="c_attn", conv1d=True
        ),
        heads=None,
        kv_heads=None,
        scale="scaling",
        norm="pre",
        norm_class="LayerNorm",
        positions=LEARNED,
        head="lm_head",
        quirks=frozenset(),
        count="gpt2",
        config_defaults={"tie_word_embeddings": True, "add_cross_attention": False},
    ),
    Architecture(  # meta-llama/*, HuggingFaceTB/SmolLM-*: grouped-query attention
        model_type="llama",
        kind=DECODER_ONLY,
        stacks=llama_stacks(),
        layers="layers",
        projections=LLAMA_PROJECTIONS,
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",
        norm="pre",
        norm_class="RMSNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset(),
        norm_eps="variance_epsilon",
        count="llama_like",
        config_defaults={"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    ),
    Architecture(  # Qwen/Qwen2-*: biases on q, k, v; a sliding window its checkpoints turn off
        model_type="qwen2",
        kind=DECODER_ONLY,
        stacks=llama_stacks(),
        layers="layers",
        projections=LLAMA_PROJECTIONS,
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",
        norm="pre",
        norm_class="RMSNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset({"sliding_window"}),
        norm_eps="variance_epsilon",
        count="llama_like",
        config_defaults={"tie_word_embeddings": False},
    ),
    Architecture(  # mistralai/Mistral-7B-v0.1: a sliding window of 4096 keys
        model_type="mistral",
        kind=DECODER_ONLY,
        stacks=llama_stacks(),
        layers="layers",
        projections=LLAMA_PROJECTIONS,
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",
        norm="pre",
        norm_class="RMSNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset({"sliding_window"}),
        norm_eps="variance_epsilon",
        count="llama_like",
        config_defaults={"tie_word_embeddings": False},
    ),
    Architecture(  # google/gemma-*: √D embeddings, RMSNorm by (1 + w), head width set apart
        model_type="gemma",
        kind=DECODER_ONLY,
        stacks=llama_stacks(),
        layers="layers",
        projections=LLAMA_PROJECTIONS,
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",
        norm="pre",
        norm_class="RMSNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset({"embed_scale", "norm_plus_one"}),
        count="llama_like",
        config_defaults={"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256},
    ),
    Architecture(  # google/gemma-2-*: Gemma's, with soft-capped scores and logits, a sliding
        # window every other layer, each sub-layer's output normalised again (sandwich norms)
        model_type="gemma2",
        kind=DECODER_ONLY,
        stacks={
            "decoder": Stack(
                path="model",
                embed="embed_tokens",
                positions="rotary_emb",
                final_norm="norm",
                self_attention=Attention(
                    path="self_attn",
                    norm="input_layernorm",
                    resid_post=("input", "pre_feedforward_layernorm"),
                ),
                cross_attention=None,
                mlp=("mlp",),
                mlp_norm="pre_feedforward_layernorm",
                mlp_out="post_feedforward_layernorm",
            )
        },
        layers="layers",
        projections=LLAMA_PROJECTIONS,
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",  # query_pre_attn_scalar^-1/2
        norm="pre",
        norm_class="RMSNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset(
            {
                "embed_scale",
                "norm_plus_one",
                "softcap",
                "sliding_window",
                "sliding_window_alternate",
                "sandwich_norms",
            }
        ),
        count="gemma2",
        config_defaults={
            "tie_word_embeddings": True,
            "attention_bias": False,
            "head_dim": 256,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
        },
        refuses={
            **{method: SANDWICH for method in DECOMPOSITIONS},
            "logit_attribution": "Gemma 2 normalises each head's output again before adding "
            "it to the stream and soft-caps its logits: a head's z through W_o is not what it "
            "wrote, and the logits are not affine in the stream; use the logit lens or patching.",
            "integrated-gradients": "Integrated gradients from zero embeddings does not "
            "converge for Gemma 2: the RMSNorms before and after each sub-layer give nearly "
            "the same output for α·e at every α > 0, so the change sits at α ≈ 0 "
            "(completeness off by 80 % on a test model); use gradient × input.",
        },
    ),
    Architecture(  # microsoft/phi-*: attention and MLP in parallel on one LayerNorm, rotary
        # positions on part of each head (partial_rotary_factor), biases everywhere, W_o `dense`
        model_type="phi",
        kind=DECODER_ONLY,
        stacks={
            "decoder": Stack(
                path="model",
                embed="embed_tokens",
                positions="rotary_emb",
                final_norm="final_layernorm",
                self_attention=Attention(
                    path="self_attn",
                    norm="input_layernorm",
                    resid_post=("output", "self_attn"),  # no stream holds x + attention
                ),
                cross_attention=None,
                mlp=("mlp",),
                mlp_norm="input_layernorm",  # the attention's own: both read its output
            )
        },
        layers="layers",
        projections=Projections(q="q_proj", k="k_proj", v="v_proj", o="dense"),
        heads=None,
        kv_heads="num_key_value_heads",
        scale="scaling",
        norm="pre",
        norm_class="LayerNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset({"parallel", "partial_rotary"}),
        count="phi",
        config_defaults={"tie_word_embeddings": False, "qk_layernorm": False},
        requires={"qk_layernorm": False},  # phi-2's: q and k read as projected
        refuses={method: PARALLEL for method in DECOMPOSITIONS},
    ),
    Architecture(  # bigscience/bloom-*: ALiBi (no position embedding), a LayerNorm on the
        # embeddings, one query_key_value cut per head, the residual added inside the modules
        model_type="bloom",
        kind=DECODER_ONLY,
        stacks={
            "decoder": Stack(
                path="transformer",
                embed="word_embeddings",
                positions=None,  # ALiBi: a bias on q·k, built from the mask in each pass
                final_norm="ln_f",
                self_attention=Attention(
                    path="self_attention",
                    norm="input_layernorm",
                    resid_post=("input", "post_attention_layernorm"),
                ),
                cross_attention=None,
                mlp=("mlp",),
                mlp_norm="post_attention_layernorm",
                mlp_out="mlp.dense_4h_to_h",
            )
        },
        layers="h",
        projections=Projections(
            q="query_key_value",
            k="query_key_value",
            v="query_key_value",
            o="dense",
            fused="query_key_value",
            layout="per_head",
        ),
        heads=None,
        kv_heads=None,
        scale="inv_norm_factor",
        norm="pre",
        norm_class="LayerNorm",
        positions=ALIBI,
        head="lm_head",
        quirks=frozenset({"residual_inside", "embed_norm"}),
        count="bloom",
        config_defaults={
            "tie_word_embeddings": True,
            "apply_residual_connection_post_layernorm": False,
            "slow_but_exact": False,
        },
        requires={  # the residual is the layer's input; W_o is one call (no sliced dense)
            "apply_residual_connection_post_layernorm": False,
            "slow_but_exact": False,
        },
    ),
    Architecture(  # tiiuae/falcon-7b: attention and MLP in parallel on one LayerNorm, one
        # key/value head (multi-query), rotary positions, no biases, one query_key_value
        model_type="falcon",
        kind=DECODER_ONLY,
        stacks={
            "decoder": Stack(
                path="transformer",
                embed="word_embeddings",
                positions="rotary_emb",
                final_norm="ln_f",
                self_attention=Attention(
                    path="self_attention",
                    norm="input_layernorm",
                    resid_post=("output", "self_attention"),  # no stream holds x + attention
                ),
                cross_attention=None,
                mlp=("mlp",),
                mlp_norm="input_layernorm",  # the attention's own: both read its output
            )
        },
        layers="h",
        projections=Projections(
            q="query_key_value",
            k="query_key_value",
            v="query_key_value",
            o="dense",
            fused="query_key_value",
        ),
        heads=None,
        kv_heads=None,  # multi_query: one (``kv_heads_of``)
        scale="inv_norm_factor",
        norm="pre",
        norm_class="LayerNorm",
        positions=ROPE,
        head="lm_head",
        quirks=frozenset({"multi_query", "parallel"}),
        count="falcon",
        config_defaults={
            "tie_word_embeddings": True,
            "alibi": False,
            "bias": False,
            "multi_query": True,
            "new_decoder_architecture": False,
            "parallel_attn": True,
        },
        requires={  # falcon-7b's; Falcon-40B's new decoder architecture and the RW models'
            # ALiBi keep their parts elsewhere
            "alibi": False,
            "multi_query": True,
            "new_decoder_architecture": False,
            "parallel_attn": True,
        },
        refuses={method: PARALLEL for method in DECOMPOSITIONS},
    ),
    Architecture(  # google-bert/bert-*: post-LN, the masked-LM head `cls`
        model_type="bert",
        kind=MASKED,
        stacks=bert_stacks("bert"),
        layers="encoder.layer",
        projections=BERT_PROJECTIONS,
        heads=None,
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=LEARNED,
        head="cls",
        quirks=frozenset(),
        count="bert_like",
        config_defaults={"tie_word_embeddings": True, "type_vocab_size": 2},
    ),
    Architecture(  # FacebookAI/roberta-*: BERT's layers, the masked-LM head `lm_head`
        model_type="roberta",
        kind=MASKED,
        stacks=bert_stacks("roberta"),
        layers="encoder.layer",
        projections=BERT_PROJECTIONS,
        heads=None,
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=LEARNED,
        head="lm_head",
        quirks=frozenset({"positions_past_padding"}),
        count="bert_like",
        config_defaults={"tie_word_embeddings": True, "type_vocab_size": 2},
    ),
    Architecture(  # distilbert/distilbert-base-*: BERT's post-LN layers, six of them, W_o
        # inside the attention, no token types, a masked-LM head of four modules on the model
        model_type="distilbert",
        kind=MASKED,
        stacks=distilbert_stacks(),
        layers="transformer.layer",
        projections=Projections(q="q_lin", k="k_lin", v="v_lin", o="out_lin"),
        heads=None,
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=LEARNED,
        head=("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
        quirks=frozenset(),
        count="distilbert",
        config_defaults={"tie_word_embeddings": True, "sinusoidal_pos_embds": False},
    ),
    Architecture(  # google/electra-*-generator: BERT's layers on embeddings narrower than the
        # stream (embedding_size), projected up by embeddings_project; the generator's head
        model_type="electra",
        kind=MASKED,
        stacks=bert_stacks("electra"),
        layers="encoder.layer",
        projections=BERT_PROJECTIONS,
        heads=None,
        kv_heads=None,
        scale="scaling",
        norm="post",
        norm_class="LayerNorm",
        positions=LEARNED,
        head=("generator_predictions", "generator_lm_head"),
        quirks=frozenset({"narrow_embeddings"}),
        count="electra",
        config_defaults={
            "tie_word_embeddings": True,
            "type_vocab_size": 2,
            "embedding_size": 128,
        },
    ),
)
ARCHITECTURES: dict[str, Architecture] = {row.model_type: row for row in _ROWS}


# ----------------------------------------------------------------------------- reading it


class UnknownArchitectureError(ValueError):
    """A ``model_type`` without a row; the message names the rows, in one line."""


def of_kind(kind: str) -> dict[str, Architecture]:
    """The rows of one kind, in the table's order."""
    return {name: row for name, row in ARCHITECTURES.items() if row.kind == kind}


KIND_WORDS = {  # a kind in a refusal's words
    ENCODER_DECODER: "encoder-decoder",
    DECODER_ONLY: "decoder-only",
    MASKED: "encoder-only",
}


def refusal(model_type: str, kind: str | None = None) -> str:
    """The one line refusing a ``model_type`` without a row (of ``kind``, where given)."""
    known = of_kind(kind) if kind else ARCHITECTURES
    what = f"{KIND_WORDS[kind]} models" if kind else "models"
    return f"The studio reads {what} of the families {', '.join(known)}; this is a {model_type}."


def config_problem(config: Mapping) -> str | None:
    """Why a config (config.json's dict) of a family with a row is not what its row reads, in
    one line: a flag its row ``requires`` set otherwise; None when it is."""
    row = ARCHITECTURES.get(str(config.get("model_type")))
    for key, wanted in (row.requires if row else {}).items():
        value = config.get(key, row.config_defaults.get(key))
        if value != wanted:
            return (
                f"The studio reads a {row.model_type} as its checkpoints ship it ({key} "
                f"{json.dumps(wanted)}); this one's {key} is {json.dumps(value)[:40]}."
            )
    return None


def _model_type(thing) -> str:
    """The model_type of a config (a dict or a transformers config), a model, or a model's
    part (by the transformers module its class is defined in: ``models.<type>.modeling_*``)."""
    if isinstance(thing, Mapping):
        return str(thing.get("model_type") or "unknown")
    config = getattr(thing, "config", thing)
    if isinstance(getattr(config, "model_type", None), str) and config.model_type:
        return config.model_type
    parts = type(thing).__module__.split(".")
    return parts[-2] if parts[-1].startswith("modeling_") else "unknown"


def architecture_of(thing) -> Architecture:
    """The row of a config, a model or any part of a model; UnknownArchitectureError in one line
    for a ``model_type`` without one."""
    model_type = _model_type(thing)
    row = ARCHITECTURES.get(model_type)
    if row is None:
        raise UnknownArchitectureError(refusal(model_type))
    return row


def part(module: nn.Module, path: str) -> nn.Module:
    """The submodule at one of a row's dotted paths ("model.decoder", "layer.0.SelfAttention")."""
    return module.get_submodule(path)


def softcap(arch: Architecture, config, what: str) -> float | None:
    """The soft cap c of ``what`` ("attn_logit", "final_logit"): c·tanh(s/c) (Gemma 2), or
    None."""
    return getattr(config, f"{what}_softcapping", None) if "softcap" in arch.quirks else None
