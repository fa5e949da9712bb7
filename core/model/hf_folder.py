"""A Hugging Face model folder as the studio reads it before loading anything: its config,
its safetensors headers, its tokenizer's languages; and a hub id fetched (command line only).

A folder is ``save_pretrained`` layout: ``config.json``, safetensors weights, tokenizer
files. Nothing here reads weights or runs model code (``core.model.hugging_face`` loads).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from pathlib import Path

from core.corpus.source import file_sha1
from core.model.architectures import (
    DECODER_ONLY,
    ENCODER_DECODER,
    MASKED,
    config_problem,
    of_kind,
    refusal,
)
from core.model.capabilities import LANGUAGE_MODEL, MASKED_LM
from core.model.hf_config import (
    ENCODER_TYPES,
    LM_TYPES,
    is_language_model,
    is_masked_lm,
    lm_config,
    lm_geometry,
    studio_config,
    studio_task,
)
from core.model.hf_size import counted_parameters, scale_problem
from core.places import shown_path, shown_paths

FAMILY = "hugging face"
CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "source.spm", "spiece.model")
TOKENIZER_BYTES = 64 << 20  # a larger tokenizer file is not one (NLLB-200's is 17 MB)
CONFIG_BYTES = 1 << 20  # a config.json larger than this is not a model's config
HEADER_BYTES = 100_000_000  # a larger safetensors header is not one (safetensors' own limit)
WEIGHTS = "model.safetensors"  # a model's weights, in one file
INDEX = "model.safetensors.index.json"  # or which shard holds each of its tensors
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
FILE_SUFFIXES = (".pt", ".pth", ".bin", ".history", ".tsv", ".txt", ".zip", ".json")  # a path


class HFModelError(Exception):
    """A folder or hub id is not a Hugging Face encoder-decoder the studio can open; the
    message says why in one line."""


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` names a model on the Hugging Face hub: ``owner/name`` that is no path
    here (nothing there, no file's suffix such as .pt, no folder ``owner`` here)."""
    if not HUB_ID.fullmatch(spec or "") or Path(spec).exists():
        return False
    owner = spec.split("/", 1)[0]
    return Path(spec).suffix.lower() not in FILE_SUFFIXES and not Path(owner).is_dir()


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
        reason = shown_paths(str(e), path)
        raise HFModelError(f"{shown_path(path)} cannot be read as JSON: {reason}") from e
    if not isinstance(config, dict):
        raise HFModelError(f"{shown_path(path)} is not a model configuration.")
    return config


def check_encoder_decoder(config: dict) -> None:
    """HFModelError unless the config describes an encoder-decoder, a decoder-only or a masked
    language model of a family the table knows (``core.model.architectures``)."""
    kind = str(config.get("model_type") or "unknown")
    if config.get("auto_map"):
        raise HFModelError(
            f"This {kind} needs its own code (auto_map); the studio never runs a model's "
            "remote code."
        )
    if problem := config_problem(config):
        raise HFModelError(problem)
    if is_masked_lm(config) and not is_language_model(config):
        if kind not in ENCODER_TYPES:
            raise HFModelError(refusal(kind, MASKED))
        return
    if is_language_model(config):
        if kind not in LM_TYPES:
            raise HFModelError(refusal(kind, DECODER_ONLY))
        return
    if not config.get("is_encoder_decoder"):
        raise HFModelError(
            f"The studio reads encoder-decoder, decoder-only and masked language models; this "
            f"{kind} is none of them."
        )
    if kind not in of_kind(ENCODER_DECODER):  # its modules are not in the table
        raise HFModelError(refusal(kind, ENCODER_DECODER))


def folder_sha1(folder) -> str:
    """One SHA-1 of a model folder's files (names and contents; each file's own SHA-1 is
    computed once per version): the key of results cached for this model."""
    digest = hashlib.sha1()
    for path in sorted(p for p in Path(folder).iterdir() if p.is_file()):
        digest.update(f"{path.name}\0{file_sha1(path)}\0".encode())
    return digest.hexdigest()


def _data_end(tensor: dict) -> int:
    """Where one tensor's bytes end, from its header entry (ValueError when its offsets
    are not 0 <= begin <= end)."""
    begin, end = (int(n) for n in tensor["data_offsets"])
    if not 0 <= begin <= end:
        raise ValueError(f"data offsets {begin}, {end} are out of order")
    return end


def _header(path: Path) -> tuple[int, int]:
    """(parameters of a safetensors file, the length in bytes its header declares: 8 + the
    header + where the last tensor ends), the header only read; HFModelError in one line for
    anything that is not a safetensors header (an empty or truncated file, a header that is
    not an object of tensors)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise HFModelError(f"{shown_path(path)} is empty or cut short (being copied?).")
        (size,) = struct.unpack("<Q", head)
        if size > HEADER_BYTES:
            raise HFModelError(f"{shown_path(path)} is not a safetensors file.")
        try:
            header = json.loads(f.read(size))
            tensors = [v for k, v in header.items() if k != "__metadata__"]
            parameters = sum(math.prod(int(n) for n in v["shape"]) for v in tensors)
            end = max((_data_end(v) for v in tensors), default=0)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise HFModelError(f"{shown_path(path)} is not a safetensors file: {e}") from e
    return parameters, 8 + size + end


def _header_parameters(path: Path) -> int:
    """Parameters of one safetensors file, read from its header only; HFModelError in one
    line for a damaged file, or one whose length is not what its header declares (cut short
    as a copy is under way, or with bytes after its tensors)."""
    try:
        parameters, declared = _header(path)
        length = path.stat().st_size
    except OSError as e:
        raise HFModelError(f"{shown_path(path)} cannot be read ({e.strerror or e}).") from e
    if length < declared:
        raise HFModelError(
            f"{shown_path(path)} is cut short (being copied?): its header declares "
            f"{declared:,} bytes, the file has {length:,}."
        )
    if length > declared:
        raise HFModelError(
            f"{shown_path(path)} is longer than its header says ({length:,} bytes, not "
            f"{declared:,}): it is not one whole safetensors file."
        )
    return parameters


def _check_shards(folder: Path) -> None:
    """HFModelError unless every shard a sharded model's index names is a file of the
    folder (by its base name: an index never sends the loader elsewhere)."""
    index = folder / INDEX
    if not index.is_file():
        return
    try:
        if index.stat().st_size > 16 * CONFIG_BYTES:
            raise ValueError("too large to be an index of shards")
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as e:
        reason = shown_paths(str(e), index)
        raise HFModelError(f"{shown_path(index)} is not an index of shards: {reason}") from e
    for name in sorted(str(s) for s in shards):
        if Path(name).name != name or not (folder / name).is_file():
            raise HFModelError(
                f"{shown_path(index)} names the shard {json.dumps(name)[:80]}, which is not a "
                "file of the folder (still being copied?)."
            )


def safetensors_parameters(folder) -> int:
    """Parameters stored in a folder's safetensors files (a sharded model's every shard),
    read from their headers only; HFModelError when the folder has no safetensors weights, a
    shard its index names is missing, or a file is damaged or not its declared length."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise HFModelError(
            f"{shown_path(folder)} has no safetensors weights (model.safetensors): the studio "
            "opens no pickled weights (pytorch_model.bin); save with save_pretrained."
        )
    if not (folder / WEIGHTS).is_file() and not (folder / INDEX).is_file():
        raise HFModelError(
            f"{shown_path(folder)} has no {WEIGHTS} (nor {INDEX}, the index of a sharded "
            f"model's files), which transformers reads: save with save_pretrained."
        )
    _check_shards(folder)
    return sum(_header_parameters(path) for path in files)


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


def check_tokenizer_files(folder) -> None:
    """HFModelError unless the folder holds a tokenizer, none of its files past
    TOKENIZER_BYTES."""
    for name in (*TOKENIZER_FILES, "vocab.json", "target.spm", "sentencepiece.bpe.model"):
        path = Path(folder) / name
        if path.is_file() and path.stat().st_size > TOKENIZER_BYTES:
            raise HFModelError(
                f"{shown_path(path)} is {path.stat().st_size / 2**20:,.0f} MB: a tokenizer "
                f"file of more than {TOKENIZER_BYTES >> 20} MB is not opened."
            )
    if not any((Path(folder) / name).is_file() for name in TOKENIZER_FILES):
        raise HFModelError(
            f"{shown_path(folder)} has no tokenizer files (tokenizer.json or "
            "tokenizer_config.json): save the tokenizer beside the model."
        )


def _family_facts(folder, config: dict) -> dict:
    """The family, the sizes in the studio's terms and what else the picker names: how a
    one-stack model places tokens, an encoder-decoder's languages."""
    kind = str(config.get("model_type") or "unknown")
    if is_masked_lm(config) and not is_language_model(config):
        facts = {"family": MASKED_LM, "positions": ENCODER_TYPES[kind]}
        return facts | {"model_config": vars(lm_config(config))}
    if is_language_model(config):
        facts = {"family": LANGUAGE_MODEL, **lm_geometry(config)}
        return facts | {"model_config": vars(lm_config(config))}
    facts = {"family": FAMILY, "model_config": vars(studio_config(config))}
    return facts | languages(folder, config)


def describe(folder) -> dict:
    """What the picker shows of a model folder, its weights never read and nothing built:
    model type, parameters (``parameters`` in the weight files, ``config_parameters`` as the
    config counts them, by its family's arithmetic: ``hf_size``), layers, heads, width and
    languages, and the task a model trained here records (``studio_task``; "" for any other);
    HFModelError when it cannot be opened, a config past ``hf_size``'s caps too."""
    config = read_config(folder)
    check_encoder_decoder(config)
    if problem := scale_problem(config):
        raise HFModelError(f"{shown_path(folder)}: {problem}")
    check_tokenizer_files(folder)
    try:
        facts = _family_facts(folder, config)
    except (TypeError, ValueError) as e:  # a size its family's count does not read
        reason = f"config.json's sizes cannot be read ({e})."
        raise HFModelError(f"{shown_path(folder)}: {reason}") from e
    return facts | {
        "model_type": str(config.get("model_type") or "unknown"),
        "parameters": safetensors_parameters(folder),
        "config_parameters": counted_parameters(config),
        "task": studio_task(config),
    }


def size_label(info: dict) -> str:
    """E.g. 'marian · 74.6 M params · 512 wide · 6+6 layers · 8 heads · en→fr', or
    'llama · 134.52 M params · 576 wide · 30 layers · 9 heads (3 key/value heads) · rope'."""
    cfg = info.get("model_config") or {}
    if info.get("family") in (LANGUAGE_MODEL, MASKED_LM):
        heads, kv = cfg.get("num_heads"), info.get("kv_heads")
        shared = f" ({kv} key/value head{'s' * (kv != 1)})" if kv and kv != heads else ""
        window = f" · sliding window {info['sliding_window']}" if info.get("sliding_window") else ""
        return (
            f"{info.get('model_type', '?')} · {info.get('parameters', 0) / 1e6:.2f} M params · "
            f"{cfg.get('d_model')} wide · {cfg.get('num_decoder_layers')} layers · {heads} "
            f"heads{shared} · {info.get('positions', '?')}{window}"
        )
    langs = ""
    if info.get("source_lang") or info.get("target_lang"):
        langs = f" · {info.get('source_lang', '?')}→{info.get('target_lang', '?')}"
    return (
        f"{info.get('model_type', '?')} · {info.get('parameters', 0) / 1e6:.2f} M params · "
        f"{cfg.get('d_model')} wide · {cfg.get('num_encoder_layers')}+"
        f"{cfg.get('num_decoder_layers')} layers · {cfg.get('num_heads')} heads{langs}"
    )


def resolve(spec: str) -> Path:
    """A model folder, or a hub id downloaded into Hugging Face's cache (command line only);
    HFModelError when offline or not found."""
    path = Path(spec)
    if path.is_dir():
        return path
    if not is_hub_id(spec):
        raise HFModelError(
            f"{shown_paths(spec, spec)} is neither a model folder nor a hub id (owner/name)."
        )
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
            f"{spec} is no file or folder here and could not be downloaded from the Hugging "
            f"Face hub ({type(e).__name__}): offline, or no such model. Without a network, "
            "download it elsewhere with save_pretrained and pass the folder."
        ) from e
