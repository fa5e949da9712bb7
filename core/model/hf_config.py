"""A Hugging Face ``config.json`` in the studio's terms, read without loading anything: its
sizes as a ``ModelConfig``, whether it is a decoder-only or a masked language model, and what a
model trained here records in it (``STUDIO_KEY``: its task, layout and data settings).
"""

from __future__ import annotations

from core.corpus.config import TASKS
from core.model.architectures import DECODER_ONLY, MASKED, architecture_of, of_kind
from core.model.config import ModelConfig
from core.model.prompt import TRAINED_LAYOUT

LM_TYPES = {  # the decoder-only families of the table -> how they place tokens
    name: row.positions for name, row in of_kind(DECODER_ONLY).items()
}
ENCODER_TYPES = {  # the encoder-only (masked) families of the table -> how they place tokens
    name: row.positions for name, row in of_kind(MASKED).items()
}
STUDIO_KEY = "attention_studio"  # config.json's entry of a model trained here: {"task": ...}


def _first(config: dict, *names, default=None):
    """The first of ``names`` present in ``config``."""
    return next((config[n] for n in names if config.get(n) is not None), default)


def studio_config(config: dict) -> ModelConfig:
    """A Hugging Face config's sizes as the studio's ModelConfig (layers, heads, width)."""
    layers = _first(config, "encoder_layers", "num_layers", default=1)
    d_model = int(_first(config, "d_model", "hidden_size", default=1))
    return ModelConfig(
        src_vocab_size=int(config.get("vocab_size") or 1),
        tgt_vocab_size=int(_first(config, "decoder_vocab_size", "vocab_size", default=1)),
        d_model=d_model,
        num_heads=int(_first(config, "encoder_attention_heads", "num_heads", default=1)),
        num_encoder_layers=int(layers),
        num_decoder_layers=int(
            _first(config, "decoder_layers", "num_decoder_layers", default=layers)
        ),
        d_ff=int(_first(config, "encoder_ffn_dim", "d_ff", default=1)),
        dropout=0.0,
        max_positions=int(_first(config, "max_position_embeddings", "n_positions", default=512)),
        norm_first=architecture_of(config).norm == "pre",
        pad_id=int(config.get("pad_token_id") or 0),
    )


def studio_task(config: dict) -> str:
    """The task a model trained here records in its config (``STUDIO_KEY``'s ``task``:
    "induction", "translation"); "" for any other model or a value that is not a task."""
    entry = config.get(STUDIO_KEY)
    task = entry.get("task") if isinstance(entry, dict) else None
    return task if task in TASKS else ""


def studio_layout(config: dict) -> str:
    """The layout a model trained here on translation read (``STUDIO_KEY``'s ``layout``:
    ``prompt.TRAINED_LAYOUT``); "" for any other model or value."""
    entry = config.get(STUDIO_KEY)
    layout = entry.get("layout") if isinstance(entry, dict) else None
    return layout if layout == TRAINED_LAYOUT else ""


def studio_data(config: dict) -> dict:
    """The data settings a model trained here records (``STUDIO_KEY``'s ``data``: its run's
    ``data_config``, the corpus by name); {} for any other model."""
    entry = config.get(STUDIO_KEY)
    data = entry.get("data") if isinstance(entry, dict) else None
    return dict(data) if isinstance(data, dict) else {}


def is_language_model(config: dict) -> bool:
    """Whether a config describes a decoder-only language model (``...ForCausalLM``,
    ``GPT2LMHeadModel``)."""
    names = [str(a) for a in config.get("architectures") or []]
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in names)
    return not config.get("is_encoder_decoder") and (causal or config.get("model_type") in LM_TYPES)


def is_masked_lm(config: dict) -> bool:
    """Whether a config describes an encoder-only masked language model (``...ForMaskedLM``,
    or a BERT / RoBERTa)."""
    names = [str(a) for a in config.get("architectures") or []]
    masked = any(a.endswith("ForMaskedLM") for a in names)
    return not config.get("is_encoder_decoder") and (
        masked or config.get("model_type") in ENCODER_TYPES
    )


def lm_config(config: dict) -> ModelConfig:
    """A decoder-only config's sizes in the studio's terms: its one stack counted as both the
    encoder's and the decoder's layers (a prompted model's three kinds of attention are blocks
    of the same layers' one attention)."""
    d_model = int(_first(config, "hidden_size", "n_embd", "dim", default=1))
    layers = int(_first(config, "num_hidden_layers", "n_layer", "n_layers", default=1))
    vocab = int(config.get("vocab_size") or 1)
    return ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        num_heads=int(_first(config, "num_attention_heads", "n_head", "n_heads", default=1)),
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        d_ff=int(_first(config, "intermediate_size", "n_inner", "hidden_dim", default=4 * d_model)),
        dropout=0.0,
        max_positions=int(_first(config, "max_position_embeddings", "n_positions", default=2048)),
        norm_first=True,
        pad_id=0,
    )


def lm_geometry(config: dict) -> dict:
    """What a decoder-only config says of its attention: key/value heads (grouped-query
    attention when fewer than the query heads), positions, a sliding window."""
    heads = int(_first(config, "num_attention_heads", "n_head", "n_heads", default=1))
    row = architecture_of(config)
    kv = _first(config, row.kv_heads or "num_key_value_heads", default=heads)
    out = {
        "kv_heads": 1 if "multi_query" in row.quirks else int(kv),
        "positions": LM_TYPES.get(str(config.get("model_type")), "positions"),
    }
    if config.get("sliding_window") and config.get("use_sliding_window", True):
        out["sliding_window"] = int(config["sliding_window"])
    return out
