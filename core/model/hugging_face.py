"""Hugging Face encoder-decoders (Marian / opus-mt, BART, mBART, T5, M2M100, NLLB) behind the
studio's translation interface.

A model is a folder in ``save_pretrained`` layout (``config.json``, safetensors weights,
tokenizer files), or on the command line a hub id downloaded into Hugging Face's cache. It is
loaded with ``attn_implementation="eager"`` (only the eager path returns attention weights),
never with ``trust_remote_code``. What the pages and commands read of it is what they read of
the studio's own model: a ``Translation`` with the maps of all three kinds, from
``generate`` (greedy or beam search) and one teacher-forced pass with ``output_attentions``;
heads are removed by zeroing the head's slice at the output projection's input (a forward
pre-hook), as ``core.attention.ablation`` does for the studio's model.

Tokens are shown in the studio's convention (``core.corpus.bpe``): a piece that continues a
word carries the ``##`` prefix; SentencePiece's ``▁`` and byte-level BPE's ``Ġ`` word
starts are dropped; specials stay as the tokenizer writes them (``</s>``, ``<pad>``).

Shape key: S source tokens, T decoder steps, L layers, H heads, V vocabulary.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import threading
import warnings
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from core.corpus.bpe import PREFIX
from core.model.config import ModelConfig
from core.model.decode import DecodeSettings, Translation, TranslationError
from core.model.transformer import AttentionMaps
from core.places import shown_path

FAMILY = "hugging face"
CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "source.spm", "spiece.model")
CONFIG_BYTES = 1 << 20  # a config.json larger than this is not a model's config
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
LANGUAGE_CODE = re.compile(
    r"^(__[a-z]{2,3}(_[A-Za-z]+)?__|[a-z]{2,3}_[A-Z][a-z]{3}|>>[a-z_]{2,8}<<)$"
)
MULTILINGUAL = ("m2m_100", "nllb_moe", "mbart")  # model types whose target language is forced
WORD_STARTS = ("\u2581", "\u0120")  # SentencePiece's ▁ and byte-level BPE's Ġ


class HFModelError(Exception):
    """A folder or hub id is not a Hugging Face encoder-decoder the studio can open; the
    message says why in one line."""


@dataclass
class HFModel:
    """A Hugging Face encoder-decoder with its tokenizer, as the studio reads it."""

    model: nn.Module  # an AutoModelForSeq2SeqLM, eager attention, eval mode
    tokenizer: object  # its AutoTokenizer
    cfg: ModelConfig  # its sizes in the studio's terms (for budgets and head pickers)
    meta: dict = field(default_factory=dict)  # family, model type, languages, parameters
    family: str = FAMILY
    subword: bool = True  # its tokenizer cuts words into pieces

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language names, or ("source", "target") when unknown."""
        return self.meta.get("source_lang") or "source", self.meta.get("target_lang") or "target"


def is_model_folder(path) -> bool:
    """Whether ``path`` is a folder holding a model's ``config.json``."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG).is_file()


def read_config(folder) -> dict:
    """A model folder's config.json as a dict; HFModelError when it is missing or not JSON."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        raise HFModelError(
            f"{shown_path(folder)} has no config.json: a Hugging Face model folder holds "
            "config.json, model.safetensors and the tokenizer files (save_pretrained)."
        )
    if path.stat().st_size > CONFIG_BYTES:
        raise HFModelError(f"{shown_path(path)} is too large to be a model's config.")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise HFModelError(f"{shown_path(path)} cannot be read as JSON: {e}") from e
    if not isinstance(config, dict):
        raise HFModelError(f"{shown_path(path)} is not a model configuration.")
    return config


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
        norm_first=bool(
            config.get("normalize_before") or config.get("model_type") in ("t5", "mt5", "umt5")
        ),
        pad_id=int(config.get("pad_token_id") or 0),
    )


def check_encoder_decoder(config: dict) -> None:
    """HFModelError unless the config describes an encoder-decoder."""
    kind = str(config.get("model_type") or "unknown")
    if not config.get("is_encoder_decoder"):
        raise HFModelError(
            f"The studio reads encoder-decoder models; this is a {kind} (decoder-only or "
            "encoder-only)."
        )
    if config.get("auto_map"):
        raise HFModelError(
            f"This {kind} needs its own code (auto_map); the studio never runs a model's "
            "remote code."
        )


def safetensors_parameters(folder) -> int:
    """Parameters stored in a folder's safetensors files, read from their headers only
    (HFModelError when the folder has no safetensors weights)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise HFModelError(
            f"{shown_path(folder)} has no safetensors weights (model.safetensors): the studio "
            "opens no pickled weights (pytorch_model.bin); save with save_pretrained."
        )
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100 << 20:
                raise HFModelError(f"{shown_path(path)} is not a safetensors file.")
            try:
                header = json.loads(f.read(size))
            except ValueError as e:
                raise HFModelError(f"{shown_path(path)} is not a safetensors file: {e}") from e
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def languages(folder, config: dict) -> dict:
    """What the files say of a model's languages: source_lang / target_lang (Marian's
    tokenizer config), and the language codes a multilingual model can be forced to."""
    out = {}
    path = Path(folder) / "tokenizer_config.json"
    if path.is_file() and path.stat().st_size <= 16 * CONFIG_BYTES:
        try:
            tok = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            tok = {}
        for key, name in (("source_lang", "source_lang"), ("src_lang", "source_lang")):
            if isinstance(tok.get(key), str):
                out[name] = tok[key]
        for key, name in (("target_lang", "target_lang"), ("tgt_lang", "target_lang")):
            if isinstance(tok.get(key), str):
                out[name] = tok[key]
    return out


def describe(folder) -> dict:
    """What the picker shows of a model folder, its weights never read: model type,
    parameters, layers, heads, width and languages (HFModelError when it cannot be opened)."""
    config = read_config(folder)
    check_encoder_decoder(config)
    if not any((Path(folder) / name).is_file() for name in TOKENIZER_FILES):
        raise HFModelError(
            f"{shown_path(folder)} has no tokenizer files (tokenizer.json or "
            "tokenizer_config.json): save the tokenizer beside the model."
        )
    cfg = studio_config(config)
    return {
        "family": FAMILY,
        "model_type": str(config.get("model_type") or "unknown"),
        "parameters": safetensors_parameters(folder),
        "model_config": vars(cfg),
        **languages(folder, config),
    }


def size_label(info: dict) -> str:
    """E.g. 'marian · 74.6 M params · 512 wide · 6+6 layers · 8 heads · en→fr'."""
    cfg = info.get("model_config") or {}
    langs = ""
    if info.get("source_lang") or info.get("target_lang"):
        langs = f" · {info.get('source_lang', '?')}→{info.get('target_lang', '?')}"
    return (
        f"{info.get('model_type', '?')} · {info.get('parameters', 0) / 1e6:.2f} M params · "
        f"{cfg.get('d_model')} wide · {cfg.get('num_encoder_layers')}+"
        f"{cfg.get('num_decoder_layers')} layers · {cfg.get('num_heads')} heads{langs}"
    )


# ----------------------------------------------------------------------------- loading


def resolve(spec: str) -> Path:
    """A model folder, or a hub id downloaded into Hugging Face's cache (command line only);
    HFModelError when offline or not found."""
    path = Path(spec)
    if path.is_dir():
        return path
    if not HUB_ID.fullmatch(spec or ""):
        raise HFModelError(f"{spec} is neither a model folder nor a hub id (owner/name).")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise HFModelError(
            f"{spec} is a hub id and this machine is offline (HF_HUB_OFFLINE): download it "
            "elsewhere with save_pretrained and pass the folder."
        )
    try:
        from huggingface_hub import snapshot_download

        patterns = [CONFIG, "*.safetensors", "*.safetensors.index.json", "generation_config.json"]
        patterns += [*TOKENIZER_FILES, "special_tokens_map.json", "vocab.json", "*.spm"]
        patterns += ["sentencepiece.bpe.model", "target.spm"]
        return Path(snapshot_download(spec, allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001 - network and hub errors of every kind
        raise HFModelError(
            f"{spec} could not be downloaded from the Hugging Face hub ({type(e).__name__}): "
            "offline, or no such model."
        ) from e


def load(folder, device: str | torch.device = "cpu", max_bytes: int | None = None) -> HFModel:
    """Load a model folder (eager attention, eval mode); HFModelError in one line when it is
    not an encoder-decoder, has no safetensors weights, passes ``max_bytes`` in float32, or
    its tokenizer does not fit the model."""
    folder = Path(folder)
    info = describe(folder)
    if max_bytes is not None and 4 * info["parameters"] > max_bytes:
        raise HFModelError(
            f"This model has {info['parameters'] / 1e6:,.0f} M parameters "
            f"({4 * info['parameters'] / 2**30:.1f} GB in float32); this server opens models "
            f"of at most {max_bytes / 2**30:.2f} GB."
        )
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():  # MarianTokenizer: "Recommended: pip install sacremoses"
            warnings.filterwarnings("ignore", message=".*sacremoses.*")
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(
            folder, attn_implementation="eager", local_files_only=True, use_safetensors=True
        )
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HFModelError(f"{shown_path(folder)} cannot be loaded: {first}") from e
    check_tokenizer(tokenizer, model.config)
    model.to(device).eval()
    info["tokens"] = tokenizer_kind(tokenizer)
    info["language_codes"] = language_codes(tokenizer) if _multilingual(model.config) else []
    cfg = studio_config(model.config.to_dict())
    cfg.norm_first = final_norm(model) is not None  # a final norm after the stack: pre-LN
    return HFModel(model, tokenizer, cfg, info)


def check_tokenizer(tokenizer, config) -> None:
    """HFModelError unless every id the tokenizer writes exists in the model."""
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if len(tokenizer) > vocab:
        raise HFModelError(
            f"The tokenizer has {len(tokenizer):,} tokens but the model only {vocab:,} "
            "embeddings: this tokenizer does not belong to this model."
        )
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None and value >= vocab:
            raise HFModelError(f"The tokenizer's {name} ({value}) is not an id of the model.")


def _multilingual(config) -> bool:
    """Whether the target language is chosen by forcing its code as the first output."""
    return getattr(config, "model_type", "") in MULTILINGUAL


def language_codes(tokenizer) -> list[str]:
    """The language codes among the tokenizer's special tokens (M2M100 ``__fr__``, NLLB
    ``fra_Latn``), sorted."""
    tokens = set(getattr(tokenizer, "additional_special_tokens", None) or [])
    tokens |= set(getattr(tokenizer, "lang_code_to_id", {}) or {})
    tokens |= {t for t in tokenizer.get_vocab() if LANGUAGE_CODE.fullmatch(t)}
    return sorted(t for t in tokens if LANGUAGE_CODE.fullmatch(t))


def tokenizer_kind(tokenizer) -> str:
    """How the tokenizer marks words: "metaspace" (▁), "byte-level" (Ġ) or "pieces"."""
    sample = [t for t in list(tokenizer.get_vocab())[:5000] if t not in _specials(tokenizer)]
    for mark, kind in zip(WORD_STARTS, ("metaspace", "byte-level")):
        if any(t.startswith(mark) for t in sample):
            return kind
    return "pieces"


def _specials(tokenizer) -> set[str]:
    """The tokenizer's special tokens."""
    return set(getattr(tokenizer, "all_special_tokens", []) or [])


# ----------------------------------------------------------------------------- tokens


def shown_tokens(hm: HFModel, ids: Sequence[int]) -> list[str]:
    """Tokens in the studio's convention: continuing pieces carry ``##``, word-start marks
    dropped, specials as the tokenizer writes them."""
    raw = hm.tokenizer.convert_ids_to_tokens(list(ids))
    specials, kind = _specials(hm.tokenizer), hm.meta.get("tokens", "pieces")
    shown, first = [], True
    for tok in raw:
        if tok in specials or LANGUAGE_CODE.fullmatch(tok):
            shown.append(tok)
            continue
        if kind == "pieces":
            shown.append(tok)
        elif tok.startswith(WORD_STARTS):
            shown.append(tok[1:] or tok)
        else:
            shown.append(tok if first else PREFIX + tok)
        first = False
    return shown


def words_of(hm: HFModel, ids: Sequence[int]) -> list[str]:
    """The decoded text of ``ids`` (specials skipped), as words."""
    return hm.tokenizer.decode(list(ids), skip_special_tokens=True).split()


# ----------------------------------------------------------------------------- decoding


def encode_source(hm: HFModel, sentence: str) -> torch.Tensor:
    """(1, S) the ids the encoder reads (the tokenizer's specials included)."""
    if not (sentence or "").strip():
        raise TranslationError("The sentence is empty: type a few words to translate.")
    limit = hm.cfg.max_positions
    ids = hm.tokenizer(sentence, truncation=True, max_length=limit)["input_ids"]
    return torch.tensor([ids], device=_device(hm))


def _device(hm: HFModel) -> torch.device:
    return next(hm.model.parameters()).device


def forced_bos(hm: HFModel, target_lang: str | None) -> int | None:
    """The id forced as the first output for ``target_lang`` (multilingual models)."""
    if not target_lang:
        return None
    if target_lang not in hm.meta.get("language_codes", []):
        raise TranslationError(
            f"{target_lang} is not a language code of this model; use one of: "
            + ", ".join(hm.meta.get("language_codes", [])[:20])
        )
    return hm.tokenizer.convert_tokens_to_ids(target_lang)


def generate_kwargs(hm: HFModel, settings: DecodeSettings, target_lang: str | None) -> dict:
    """The arguments of ``generate`` for these decoding settings (no sampling)."""
    kwargs = {
        "num_beams": max(1, settings.beam_size),
        "do_sample": False,
        "max_new_tokens": max(1, min(settings.max_len, hm.cfg.max_positions - 1)),
        "num_return_sequences": 1,
    }
    if settings.beam_size > 1:
        kwargs["length_penalty"] = settings.alpha
    if (bos := forced_bos(hm, target_lang)) is not None:
        kwargs["forced_bos_token_id"] = bos
    return kwargs


@torch.no_grad()
def generate(hm: HFModel, src: torch.Tensor, settings: DecodeSettings, target_lang=None):
    """(1, T + 1) the sequence ``generate`` returns: the decoder's start token, then the
    output (with </s> when reached)."""
    out = hm.model.generate(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        **generate_kwargs(hm, settings, target_lang),
    )
    seq = out[0].tolist()
    eos = hm.model.config.eos_token_id
    if eos in seq[1:]:
        seq = seq[: seq.index(eos, 1) + 1]
    return torch.tensor([seq], device=src.device)


@torch.no_grad()
def forced_pass(hm: HFModel, src: torch.Tensor, decoder_inputs: torch.Tensor):
    """One teacher-forced pass with ``output_attentions``: (log-probabilities (1, T, V),
    AttentionMaps with (L, 1, H, Tq, Tk) per kind)."""
    out = hm.model(
        input_ids=src,
        attention_mask=torch.ones_like(src),
        decoder_input_ids=decoder_inputs,
        output_attentions=True,
        return_dict=True,
    )
    maps = AttentionMaps(
        torch.stack(out.encoder_attentions),  # (L, 1, H, S, S)
        torch.stack(out.decoder_attentions),  # (L, 1, H, T, T)
        torch.stack(out.cross_attentions),  # (L, 1, H, T, S)
    )
    return out.logits.float().log_softmax(-1), maps


def _topk(hm: HFModel, logp: torch.Tensor, k: int) -> list[list[tuple[str, float]]]:
    """(T, V) log-probs -> per step the k best (token, probability)."""
    p, i = logp.exp().topk(min(k, logp.size(-1)), dim=-1)  # (T, k)
    return [
        list(zip(hm.tokenizer.convert_ids_to_tokens(row_i.tolist()), row_p.tolist()))
        for row_p, row_i in zip(p, i)
    ]


def translate(
    hm: HFModel, sentence: str, settings: DecodeSettings, target_lang: str | None = None
) -> Translation:
    """Translate with ``generate`` (greedy or beam), then read every map of that output in
    one teacher-forced pass."""
    src = encode_source(hm, sentence)  # (1, S)
    seq = generate(hm, src, settings, target_lang)  # (1, T + 1)
    logp, maps = forced_pass(hm, src, seq[:, :-1])
    out_ids = seq[0, 1:].tolist()
    eos = hm.model.config.eos_token_id
    warnings = []
    if not out_ids or out_ids[-1] != eos:
        warnings.append(f"Stopped at the maximum output length ({len(out_ids)}) before </s>.")
    src_ids = src[0].tolist()
    unknown = [i == hm.tokenizer.unk_token_id for i in src_ids]
    if any(unknown):
        warnings.append("Some words are not in the model's vocabulary (read as unknown).")
    outputs = shown_tokens(hm, out_ids)
    step_logp = logp[0].gather(-1, seq[0, 1:, None])  # (T, 1)
    return Translation(
        shown_tokens(hm, src_ids),
        unknown,
        outputs[:-1] if out_ids and out_ids[-1] == eos else outputs,
        outputs,
        shown_tokens(hm, seq[0, :-1].tolist()),
        _topk(hm, logp[0], settings.topk),
        float(step_logp.sum()),
        AttentionMaps(
            *(m[:, 0].float().cpu() for m in (maps.encoder, maps.decoder_self, maps.cross))
        ),
        warnings,
        words_of(hm, out_ids),
        src_ids,
        out_ids,
    )


# ----------------------------------------------------------------------------- heads


def _layers(stack: nn.Module) -> Sequence[nn.Module]:
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
    return [_attention_of(layer, kind) for layer in _layers(stack)]


def head_geometry(module: nn.Module) -> tuple[nn.Linear, int, int]:
    """(output projection, heads, head width) of one attention module."""
    out = getattr(module, "out_proj", None) or getattr(module, "o", None)
    heads = getattr(module, "num_heads", None) or getattr(module, "n_heads", None)
    width = getattr(module, "head_dim", None) or getattr(module, "key_value_proj_dim", None)
    if out is None or not heads or not width:
        raise HFModelError(f"The studio does not know the heads of a {type(module).__name__}.")
    return out, int(heads), int(width)


_REMOVED = threading.local()  # this thread's {output projection: (H * Dh,) keep mask}


def _zero_removed(module: nn.Module, args: tuple):
    """Forward pre-hook of an output projection: zero the removed heads' slices of its input
    (B, T, H * Dh), for the thread that removed them only."""
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
    _install_hooks(model)
    masks: dict[nn.Linear, torch.Tensor] = {}
    for kind, layer, head in heads:
        out, n, width = head_geometry(attention_modules(model, kind)[layer])
        mask = masks.setdefault(out, torch.ones(n * width, device=out.weight.device))
        mask[head * width : (head + 1) * width] = 0.0
    before = getattr(_REMOVED, "masks", {})
    _REMOVED.masks = masks
    try:
        yield model
    finally:
        _REMOVED.masks = before


# ----------------------------------------------------------------------------- logit lens


def final_norm(model: nn.Module) -> nn.Module | None:
    """The decoder's final norm of a pre-LN family (mBART / M2M100 / NLLB ``layer_norm``,
    T5's ``final_layer_norm``); None for a post-LN one (Marian, BART)."""
    decoder = model.get_decoder()
    return getattr(decoder, "layer_norm", None) or getattr(decoder, "final_layer_norm", None)


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

    hooks = [layer.register_forward_hook(keep) for layer in _layers(hm.model.get_decoder())]
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
    if getattr(hm.model.config, "scale_decoder_outputs", False):
        h = h * hm.model.config.d_model**-0.5
    logits = hm.model.get_output_embeddings()(h)  # (L, T, V)
    bias = getattr(hm.model, "final_logits_bias", None)
    if bias is not None:
        logits = logits + bias
    return logits.float().log_softmax(-1)


# ----------------------------------------------------------------------------- q·k


@dataclass
class AttentionInputs:
    """What one attention module read in a teacher-forced pass, and how it scores."""

    queries: torch.Tensor  # (1, Tq, D) its input
    keys: torch.Tensor  # (1, Tk, D) the same for self-attention, the encoder's output for cross
    scale: float  # what q·k is multiplied by: 1/sqrt(Dh), or 1 (T5)
    bias: torch.Tensor | None  # (1, H, Tq, Tk) T5's relative-position bias (None elsewhere)
    weights: torch.Tensor  # (1, H, Tq, Tk) the weights the model returned


def forced_inputs(hm: HFModel, src_ids, out_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """((1, S) source, (1, T) decoder inputs: the start token + out_ids[:-1])."""
    device = _device(hm)
    start = hm.model.config.decoder_start_token_id
    return (
        torch.tensor([list(src_ids)], device=device),
        torch.tensor([[start, *list(out_ids)[:-1]]], device=device),
    )


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


# ----------------------------------------------------------------------------- forcing


def target_ids(hm: HFModel, text: str, target_lang: str | None = None) -> list[int]:
    """A target sentence as the decoder's output ids (with </s>; a multilingual model's
    language code first), cut to the model's positions."""
    ids = hm.tokenizer(text_target=text)["input_ids"]
    if (bos := forced_bos(hm, target_lang)) is not None:
        ids = [bos, *ids]
    return ids[: hm.cfg.max_positions - 1]


def forced_maps(hm: HFModel, sentence: str, reference: str, target_lang: str | None = None):
    """Teacher-force ``reference`` after ``sentence``: (source tokens, output tokens,
    decoder-input tokens, AttentionMaps with (L, H, Tq, Tk) per kind)."""
    if not (reference or "").strip():
        raise TranslationError("The reference is empty: type the translation to force.")
    src = encode_source(hm, sentence)  # (1, S)
    out_ids = target_ids(hm, reference, target_lang)
    _, dec = forced_inputs(hm, src[0].tolist(), out_ids)  # (1, T)
    _, maps = forced_pass(hm, src, dec)
    squeezed = AttentionMaps(
        *(m[:, 0].float().cpu() for m in (maps.encoder, maps.decoder_self, maps.cross))
    )
    tokens = shown_tokens(hm, out_ids)
    return shown_tokens(hm, src[0].tolist()), tokens, shown_tokens(hm, dec[0].tolist()), squeezed


def unknown_target_words(hm: HFModel, text: str) -> list[str]:
    """Words of ``text`` that the tokenizer reads (partly) as its unknown token."""
    unk = hm.tokenizer.unk_token_id
    if unk is None:
        return []
    return [w for w in text.split() if unk in hm.tokenizer(text_target=w)["input_ids"]]
