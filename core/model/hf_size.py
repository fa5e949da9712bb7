"""A Hugging Face config's size, read before anything is built: its parameters counted by
arithmetic, per family, and the caps every config must keep within.

Building a model, even on the meta device, builds every layer: a 1 KB config.json asking for
20,000 layers held a page for minutes, and a large ``num_labels`` has transformers name each
label as it parses the config. Here the config is plain JSON (a dict) and nothing is parsed
by transformers or built: ``scale_problem`` says why a config is refused, ``counted_parameters``
what its model holds (tested equal to the built model's count for every family the studio
reads, and ``FAMILY_DEFAULTS`` to what transformers assumes of a key left out). Which
arithmetic counts a family, and what its config class assumes, are its row of the table
(``core.model.architectures``: ``count``, ``config_defaults``).

Letters: V vocabulary, D model width, F feed-forward width, P positions, H heads, Hkv
key/value heads, Dh head width.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from core.model.architectures import ARCHITECTURES

MAX_LAYERS = 256  # layers per stack a config may ask for (Llama 3.1 405B has 126)
MAX_PARAMETERS = 100 * 10**9  # parameters a config may describe (400 GB in float32)
MAX_SIZE = 1 << 40  # any one size (no vocabulary, width or context comes near)
MAX_LABELS = 10_000  # num_labels: transformers writes out each label's name as it reads them
LAYER_KEYS = (  # every key a family names a stack's layers by (ProphetNet's and DistilBERT's too)
    "encoder_layers",
    "decoder_layers",
    "num_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "num_hidden_layers",
    "n_layer",
    "n_layers",
)
FAMILY_DEFAULTS = {  # what each family's config class assumes of a key config.json leaves out
    name: dict(row.config_defaults) for name, row in ARCHITECTURES.items()
}


def _flag(config: dict, key: str):
    """``config[key]``, or what its family's config class assumes when it is left out."""
    value = config.get(key)
    return FAMILY_DEFAULTS[config["model_type"]][key] if value is None else value


def _size(config: dict, *names: str, default: int | None = None) -> int:
    """The first of ``names`` the config gives, a whole number from 1 to MAX_SIZE
    (``default`` where it gives none); ValueError, in words, otherwise."""
    for name in names:
        value = config.get(name)
        if value is None:
            continue
        if type(value) is not int or not 1 <= value <= MAX_SIZE:
            shown = json.dumps(value)[:40]
            raise ValueError(
                f"config.json gives {name} as {shown}, not a whole number from 1 to 2^40."
            )
        return value
    if default is None:
        raise ValueError(f"config.json does not give {names[0]}.")
    return default


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    """Parameters of an ``nn.Linear`` (or GPT-2's ``Conv1D``)."""
    return n_in * n_out + (n_out if bias else 0)


def _output(c: dict, V: int, D: int) -> int:
    """The output layer's own parameters: none where it is tied to the token embeddings."""
    return 0 if _flag(c, "tie_word_embeddings") else V * D


def _bart_like(c: dict) -> int:
    """Marian, BART, mBART, M2M100 / NLLB: biased projections, LayerNorms (weight and
    bias), the token embeddings one table shared by both stacks (separate ones where the
    config unties them), positions learned (BART, mBART), sinusoidal parameters (Marian) or
    buffers (M2M100)."""
    family, D, V = c["model_type"], _size(c, "d_model"), _size(c, "vocab_size")
    P = _size(c, "max_position_embeddings")
    enc, dec = _size(c, "encoder_layers"), _size(c, "decoder_layers")
    F_enc, F_dec = _size(c, "encoder_ffn_dim"), _size(c, "decoder_ffn_dim")
    attention, norm = 4 * _linear(D, D), 2 * D
    stacks = enc * (attention + _linear(D, F_enc) + _linear(F_enc, D) + 2 * norm)
    stacks += dec * (2 * attention + _linear(D, F_dec) + _linear(F_dec, D) + 3 * norm)
    if family == "marian" and not _flag(c, "share_encoder_decoder_embeddings"):
        V_dec = _size(c, "decoder_vocab_size", default=V)  # each stack its own table
        return V * D + V_dec * D + _output(c, V_dec, D) + 2 * P * D + stacks
    tokens = V * D if _flag(c, "tie_word_embeddings") else 3 * V * D  # shared (+ each stack's)
    extra = {
        "marian": 2 * P * D,  # sinusoidal positions: frozen parameters
        "bart": 2 * (P + 2) * D + 2 * norm,  # learned positions (offset 2), a norm after them
        "mbart": 2 * (P + 2) * D + 4 * norm,  # the same, and a norm ending each stack (pre-LN)
        "m2m_100": 2 * norm,  # a norm ending each stack; its sinusoidal positions are buffers
    }[family]
    return tokens + _output(c, V, D) + extra + stacks


def _t5(c: dict) -> int:
    """T5 and mT5: bias-free projections to H x Dh, RMSNorm (weight only), the relative
    position bias in each stack's first layer, a gated feed-forward for ``gated-*``."""
    D, F, V = _size(c, "d_model"), _size(c, "d_ff"), _size(c, "vocab_size")
    H = _size(c, "num_heads")
    inner = H * _size(c, "d_kv")
    enc = _size(c, "num_layers")
    dec = _size(c, "num_decoder_layers", default=enc)
    gated = str(_flag(c, "feed_forward_proj")).startswith("gated-")
    attention, feed_forward = 4 * D * inner, (3 if gated else 2) * D * F
    stacks = enc * (attention + feed_forward + 2 * D) + dec * (2 * attention + feed_forward + 3 * D)
    key = "relative_attention_num_buckets"
    bias = 2 * _size(c, key, default=_flag(c, key)) * H
    return V * D + _output(c, V, D) + stacks + 2 * D + bias


def _umt5(c: dict) -> int:
    """UMT5: T5's, with a relative position bias in every layer (T5's is in each stack's
    first layer only)."""
    enc = _size(c, "num_layers")
    dec = _size(c, "num_decoder_layers", default=enc)
    key = "relative_attention_num_buckets"
    per_layer = _size(c, key, default=_flag(c, key)) * _size(c, "num_heads")
    return _t5(c) + (enc + dec - 2) * per_layer


def _gpt2(c: dict) -> int:
    """GPT-2: learned positions, Conv1D projections with biases, LayerNorms, tied output."""
    D, V, P = _size(c, "n_embd"), _size(c, "vocab_size"), _size(c, "n_positions")
    F = _size(c, "n_inner", default=4 * D)
    layer = _linear(D, 3 * D) + _linear(D, D) + _linear(D, F) + _linear(F, D) + 4 * D
    if _flag(c, "add_cross_attention"):
        layer += _linear(D, D) + _linear(D, 2 * D) + _linear(D, D) + 2 * D
    return V * D + _output(c, V, D) + P * D + _size(c, "n_layer") * layer + 2 * D


def _llama_like(c: dict) -> int:
    """Llama, Qwen2, Mistral, Gemma: q, k, v, o to H x Dh and Hkv x Dh (biases where the
    family has them), a gated MLP, RMSNorm (weight only), rotary positions (no parameters)."""
    family, D, V = c["model_type"], _size(c, "hidden_size"), _size(c, "vocab_size")
    F, H = _size(c, "intermediate_size"), _size(c, "num_attention_heads")
    Hkv = _size(c, "num_key_value_heads", default=H)
    Dh = _size(c, "head_dim", default=FAMILY_DEFAULTS[family].get("head_dim") or D // H)
    biased = family in ("llama", "gemma") and bool(_flag(c, "attention_bias"))
    qkv_bias = biased or family == "qwen2"
    mlp_bias = family == "llama" and bool(_flag(c, "mlp_bias"))
    attention = _linear(D, H * Dh, qkv_bias) + 2 * _linear(D, Hkv * Dh, qkv_bias)
    attention += _linear(H * Dh, D, biased)
    mlp = 2 * _linear(D, F, mlp_bias) + _linear(F, D, mlp_bias)
    layers = _size(c, "num_hidden_layers") * (attention + mlp + 2 * D)
    return V * D + _output(c, V, D) + layers + D


def _bloom(c: dict) -> int:
    """BLOOM: a LayerNorm on the embeddings, biased projections (one query_key_value), a 4 D
    MLP, LayerNorms, ALiBi (no position parameters), the output tied."""
    D, V = _size(c, "hidden_size", "n_embed"), _size(c, "vocab_size")
    layer = _linear(D, 3 * D) + _linear(D, D) + _linear(D, 4 * D) + _linear(4 * D, D) + 4 * D
    return V * D + _output(c, V, D) + 2 * D + _size(c, "n_layer") * layer + 2 * D


def _falcon(c: dict) -> int:
    """Falcon (7B's layout): one query_key_value making H query heads and one key/value head
    (multi-query), a 4 D MLP, one LayerNorm per layer (parallel attention), biases where
    config.bias, rotary positions (no parameters), the output tied where the config says."""
    D, V, H = _size(c, "hidden_size"), _size(c, "vocab_size"), _size(c, "num_attention_heads")
    F, bias = _size(c, "ffn_hidden_size", default=4 * D), bool(_flag(c, "bias"))
    Dh = D // H
    attention = _linear(D, (H + 2) * Dh, bias) + _linear(D, D, bias)
    layer = attention + _linear(D, F, bias) + _linear(F, D, bias) + 2 * D
    return V * D + _output(c, V, D) + _size(c, "num_hidden_layers") * layer + 2 * D


def _phi(c: dict) -> int:
    """Phi: q, k, v, dense to H x Dh and Hkv x Dh, all biased, one LayerNorm per layer
    (parallel attention), a 2-matrix MLP, rotary positions (no parameters), lm_head with a
    bias (its weight tied where the config says)."""
    D, V, H = _size(c, "hidden_size"), _size(c, "vocab_size"), _size(c, "num_attention_heads")
    F, Hkv = _size(c, "intermediate_size"), _size(c, "num_key_value_heads", default=H)
    Dh = _size(c, "head_dim", default=D // H)
    attention = _linear(D, H * Dh) + 2 * _linear(D, Hkv * Dh) + _linear(H * Dh, D)
    layer = attention + _linear(D, F) + _linear(F, D) + 2 * D
    return V * D + _output(c, V, D) + V + _size(c, "num_hidden_layers") * layer + 2 * D


def _gemma2(c: dict) -> int:
    """Gemma 2: Gemma's count with four RMSNorms per layer (before and after each sub-layer)."""
    D, V, H = _size(c, "hidden_size"), _size(c, "vocab_size"), _size(c, "num_attention_heads")
    F, Hkv = _size(c, "intermediate_size"), _size(c, "num_key_value_heads", default=H)
    Dh = _size(c, "head_dim", default=FAMILY_DEFAULTS["gemma2"]["head_dim"])
    bias = bool(_flag(c, "attention_bias"))
    attention = _linear(D, H * Dh, bias) + 2 * _linear(D, Hkv * Dh, bias)
    attention += _linear(H * Dh, D, bias)
    layer = attention + 3 * D * F + 4 * D
    return V * D + _output(c, V, D) + _size(c, "num_hidden_layers") * layer + D


def _bert_like(c: dict) -> int:
    """BERT, RoBERTa as masked LMs: word, position and token-type embeddings, post-LN layers
    with biased projections, the MLM head (a dense layer, a norm, its decoder's bias)."""
    D, V, F = _size(c, "hidden_size"), _size(c, "vocab_size"), _size(c, "intermediate_size")
    P = _size(c, "max_position_embeddings")
    types = _size(c, "type_vocab_size", default=_flag(c, "type_vocab_size"))
    embeddings = (V + P + types) * D + 2 * D
    layer = 4 * _linear(D, D) + _linear(D, F) + _linear(F, D) + 4 * D
    untied = 0 if _flag(c, "tie_word_embeddings") else V * D + V  # its own weight and bias
    return embeddings + _size(c, "num_hidden_layers") * layer + _linear(D, D) + 2 * D + V + untied


def _distilbert(c: dict) -> int:
    """DistilBERT as a masked LM: word and position embeddings (no token types), BERT's
    post-LN layers, the MLM head (a dense layer, a norm, its projector's bias)."""
    D, V, F = _size(c, "dim"), _size(c, "vocab_size"), _size(c, "hidden_dim")
    embeddings = (V + _size(c, "max_position_embeddings")) * D + 2 * D
    layer = 4 * _linear(D, D) + _linear(D, F) + _linear(F, D) + 4 * D
    untied = 0 if _flag(c, "tie_word_embeddings") else V * D
    return embeddings + _size(c, "n_layers") * layer + _linear(D, D) + 2 * D + V + untied


def _electra(c: dict) -> int:
    """ELECTRA's generator as a masked LM: embeddings E wide (E = embedding_size), projected
    to D where E != D, BERT's layers, the generator's head (D -> E, a norm, its bias)."""
    D, V, F = _size(c, "hidden_size"), _size(c, "vocab_size"), _size(c, "intermediate_size")
    E = _size(c, "embedding_size", default=_flag(c, "embedding_size"))
    types = _size(c, "type_vocab_size", default=_flag(c, "type_vocab_size"))
    embeddings = (V + _size(c, "max_position_embeddings") + types) * E + 2 * E
    embeddings += _linear(E, D) if E != D else 0
    layer = 4 * _linear(D, D) + _linear(D, F) + _linear(F, D) + 4 * D
    untied = 0 if _flag(c, "tie_word_embeddings") else V * E
    return embeddings + _size(c, "num_hidden_layers") * layer + _linear(D, E) + 2 * E + V + untied


ARITHMETIC: dict[str, Callable[[dict], int]] = {  # a row's ``count`` -> the function
    "bart_like": _bart_like,
    "t5": _t5,
    "umt5": _umt5,
    "gpt2": _gpt2,
    "llama_like": _llama_like,
    "bert_like": _bert_like,
    "bloom": _bloom,
    "falcon": _falcon,
    "phi": _phi,
    "gemma2": _gemma2,
    "distilbert": _distilbert,
    "electra": _electra,
}
COUNTS: dict[str, Callable[[dict], int]] = {  # model_type -> its count, from the table
    name: ARITHMETIC[row.count] for name, row in ARCHITECTURES.items()
}


def counted_parameters(config: dict) -> int | None:
    """Parameters of the model a config (config.json's dict) describes, by arithmetic, never
    built; None for a model_type without a row in the table (refused before it is counted);
    ValueError, in words, for a size that is not a whole number."""
    count = COUNTS.get(str(config.get("model_type")))
    return None if count is None else count(config)


def _labels_problem(config: dict) -> str | None:
    """Why the config's ``num_labels`` is refused (None: it is not): transformers writes out
    each label's name as it reads the config (15 s for three million, measured)."""
    labels = config.get("num_labels")
    if labels is None or (type(labels) is int and 0 <= labels <= MAX_LABELS):
        return None
    shown = f"{labels:,}" if type(labels) is int else json.dumps(labels)[:40]
    return f"config.json asks for {shown} labels (num_labels); a model has at most {MAX_LABELS:,}."


def scale_problem(config: dict) -> str | None:
    """Why a config is refused before anything is built (None: it is not): more than
    MAX_LAYERS layers in a stack, MAX_LABELS labels or MAX_PARAMETERS parameters, or a size
    that is not a whole number."""
    if problem := _labels_problem(config):
        return problem
    try:
        for key in LAYER_KEYS:
            if config.get(key) is not None and _size(config, key) > MAX_LAYERS:
                return (
                    f"config.json asks for {config[key]:,} layers ({key}); the studio opens "
                    f"models of at most {MAX_LAYERS} layers per stack."
                )
        count = counted_parameters(config)
    except ValueError as e:
        return str(e)
    if count is not None and count > MAX_PARAMETERS:
        return (
            f"config.json describes {count / 1e6:,.0f} M parameters; the studio opens models of "
            f"at most {MAX_PARAMETERS / 1e6:,.0f} M."
        )
    return None
