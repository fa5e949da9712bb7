"""Checkpoints as plain data: tensors plus JSON-able metadata, loaded with weights_only."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path, PureWindowsPath

import torch
from torch import nn

from core.corpus.bpe import checkpoint_entries, checkpoint_vocabs
from core.corpus.config import DataConfig
from core.corpus.source import (
    FRA_ENG_SHA1,
    FRA_ENG_SHA1S,
    DataError,
    corpus_problem,
    file_sha1,
    fra_eng_copy,
    named_source,
    sha1_of,
)
from core.corpus.splits import Split, load_splits
from core.corpus.vocab import Vocab
from core.places import corpus_folders, replace_durably, run_corpus_files, runs_root, shown_path

FORMAT = "attention-studio/1"
ENCODER_DECODER = "encoder-decoder"  # ModelConfig.arch of the model studio_loading builds
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # a run directory's name


class CheckpointError(Exception):
    """A checkpoint is missing, damaged or not ours; the message says which."""


class DecoderOnlyCheckpointError(CheckpointError):
    """A decoder-only (or encoder) run's training state: its model opens from the folder saved
    beside it (``folder``: ``best.pt`` -> ``best.hf``)."""

    def __init__(self, path, arch: str = "decoder-only"):
        self.folder = exported_folder(path)
        article = "an" if arch[:1] in "aeiou" else "a"
        super().__init__(
            f"{shown_path(path)} is the training state of {article} {arch} model: open the model "
            f"folder saved beside it, {shown_path(self.folder)}."
        )


def exported_folder(path) -> Path:
    """The ``save_pretrained`` folder a decoder-only run writes beside a checkpoint
    (``<run>/best.pt`` -> ``<run>/best.hf``)."""
    return Path(path).with_suffix(".hf")


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file, then rename: never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    replace_durably(tmp, path)


def all_finite(state_dict: dict) -> bool:
    """True if every floating-point tensor of a state dict is finite (no NaN, no inf)."""
    return all(
        bool(torch.isfinite(v).all())
        for v in state_dict.values()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    )


def portable_data_config(data_config: dict, path=None) -> dict:
    """``data_config`` with its source named portably (never a machine path), plus its SHA-1.

    ``path`` is the corpus file that was read (default: the source, if it is a file here).
    d2l's fra-eng.zip becomes "fra-eng" (by name or by SHA-1), any other file its base
    name; "source_sha1" identifies the file. The split settings are kept.
    """
    cfg = dict(data_config)
    source = str(cfg.get("source", "fra-eng"))
    local = source_file(source) if path is None else Path(path)
    if local is not None and local.is_file():
        cfg["source_sha1"] = sha1_of(local)
    elif source == "fra-eng":
        cfg.setdefault("source_sha1", FRA_ENG_SHA1)
    fra_eng = source == "fra-eng" or cfg.get("source_sha1") in FRA_ENG_SHA1S
    cfg["source"] = "fra-eng" if fra_eng else PureWindowsPath(source).name
    return cfg


def data_config_of(meta: Mapping) -> DataConfig:
    """The DataConfig a checkpoint records (its other keys, such as source_sha1, dropped)."""
    known = {f.name for f in fields(DataConfig)}
    return DataConfig(**{k: v for k, v in (meta.get("data_config") or {}).items() if k in known})


def trained_data(meta: Mapping, source: str | None = None, command: bool = True) -> DataConfig:
    """The data settings a checkpoint records, with its corpus found on this machine.

    ``source`` (a path given on the command line) replaces the recorded corpus; ``command``
    False words the error for a page (no flag to pass). A recorded
    name is looked up only in the app's own folders (the corpus folders of ``places`` and the
    copy inside the model's run), never by a recorded absolute path nor in the current
    directory, and only a file whose SHA-1 is the one recorded is used: it is the corpus
    the model was trained on. DataError says why not, and what to do.
    """
    cfg = data_config_of(meta)
    recorded = (meta.get("data_config") or {}).get("source_sha1")
    if source:
        cfg.source = source
    elif cfg.source != "fra-eng":
        try:
            cfg.source = _recorded_corpus(cfg.source, recorded, meta.get("run"))
        except DataError:  # fra-eng.zip recorded by its file name, another packing of it here
            if named_source(cfg.source, recorded) != "fra-eng":
                raise
            cfg.source = "fra-eng"
    if reason := corpus_problem(cfg.source):
        hint = " (pass the corpus with --data, or put it in the data folder)"
        if source or not command:  # a page's reader cannot pass a flag
            hint = "" if source else "; whoever runs the server can put it in the app's data folder"
        raise DataError(f"The validation sentences cannot be rebuilt: {reason}{hint}.")
    return cfg


CARRIED_PAIRS = 5000  # validation pairs a saved model carries at most (each side <= max_len)


def carried_validation(meta: Mapping) -> Split | None:
    """The validation pairs a saved model carries (``validation_pairs``: [source, target]
    texts of d2l's words), as a Split; None when it carries none (or they are malformed)."""
    pairs = meta.get("validation_pairs")
    if not isinstance(pairs, list) or not pairs:
        return None
    if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) for t in p)
               for p in pairs):  # fmt: skip
        return None
    return Split([(src.split(), tgt.split()) for src, tgt in pairs[:CARRIED_PAIRS]])


def validation_source(meta: Mapping, source: str | None = None, command: bool = True):
    """(data settings, carried Split or None): where a checkpoint's validation sentences
    come from — its corpus found on this machine (``trained_data``), or, when that corpus
    is not here and no ``source`` was given, the pairs a saved model carries. DataError
    when neither."""
    try:
        return trained_data(meta, source, command), None
    except DataError:
        carried = None if source else carried_validation(meta)
        if carried is None:
            raise
        return data_config_of(meta), carried


def validation_pairs_of(meta: Mapping) -> list[list[str]] | None:
    """The validation pairs a saved model should carry, rebuilt from its corpus (its run's
    copy included) as [source, target] texts, at most CARRIED_PAIRS; None when the corpus
    is not here or the model has no validation split, and for fra-eng, which any machine
    downloads with its checksum (and whose 167,130 pairs take seconds to split)."""
    recorded = meta.get("data_config") or {}
    if (
        recorded.get("source", "fra-eng") == "fra-eng"
        or recorded.get("source_sha1") in FRA_ENG_SHA1S
    ):
        return None
    try:
        cfg = trained_data(meta)
        pairs = load_splits(cfg).val.pairs
    except (DataError, OSError, ValueError):
        return None
    return [[" ".join(src), " ".join(tgt)] for src, tgt in pairs[:CARRIED_PAIRS]] or None


def _recorded_corpus(source: str, sha1: str | None, run: str | None = None) -> str:
    """The recorded corpus here: the file of that base name in a corpus folder, the copy of
    it inside the model's run (``places.run_corpus_files``), or for fra-eng.zip the copy the
    app reads (``fra_eng_copy``), whose content has the recorded SHA-1; DataError when none
    does (or no SHA-1 was recorded to check against)."""
    name = PureWindowsPath(source).name
    found = [folder / name for folder in corpus_folders() if name and (folder / name).is_file()]
    if name == "fra-eng.zip" and (copy := fra_eng_copy()) is not None:
        found.append(copy)
    if isinstance(run, str) and RUN_NAME.fullmatch(run):
        found += run_corpus_files(runs_root() / run)
    if not sha1:
        raise DataError(
            f"The validation sentences cannot be rebuilt: this model does not record its "
            f"corpus's SHA-1, so no file named {name} can be checked to be it; pass the corpus "
            "with --data."
        )
    for path in found:
        if path.is_file() and file_sha1(path) == sha1:
            return str(path)
    if found:
        raise DataError(
            f"{shown_path(found[0])} is not the corpus this model was trained on (its SHA-1 "
            "differs from the one the checkpoint records); pass the right file with --data."
        )
    return f"{corpus_folders()[0] / name}"


def source_file(source: str) -> Path | None:
    """The local file a data source names: fra-eng's local copy, or an absolute path."""
    if source == "fra-eng":
        return fra_eng_copy()
    path = Path(source).expanduser()
    return path if path.is_absolute() else None


def save_checkpoint(
    path, model: nn.Module, src_vocab: Vocab, tgt_vocab: Vocab, half: bool = False, **meta
) -> None:
    """Save weights, configs (as dicts), vocabularies (as lists) and ``meta``.

    ``half`` stores floating-point weights as float16 (a compact file for sharing).
    Weights that are not all finite are never saved (CheckpointError).
    """
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    if not all_finite(state):
        raise CheckpointError(
            f"Not saving {shown_path(path)}: the model's weights hold NaN or inf values."
        )
    atomic_save(
        {
            "format": FORMAT,
            "model_config": asdict(model.cfg),
            **checkpoint_entries(src_vocab, tgt_vocab),
            "state_dict": state,
            **meta,
        },
        path,
    )


def read_checkpoint(path, mmap: bool = False) -> dict:
    """The raw dict of a checkpoint, loaded safely (no code is ever unpickled).

    With ``mmap`` the tensors are mapped from the file, not read: cheap for metadata.
    """
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():
        raise CheckpointError(
            f"{shown_path(path)} is a Hugging Face model folder: the Translate and Attention "
            "pages and `python -m core.translate` open it; this reads the studio's own "
            "checkpoints (.pt)."
        )
    if not path.is_file():
        raise CheckpointError(f"No such file or folder: {shown_path(path)}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any unreadable file (struct.error, ...) is one case
        if isinstance(e, MemoryError):
            raise
        raise not_ours(path) from None  # torch's words: a paragraph about weights_only
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise not_ours(path)
    return ckpt


def not_ours(path) -> CheckpointError:
    """The one line for a file that is not a checkpoint (damaged, truncated or another's)."""
    return CheckpointError(
        f"{shown_path(path)} is not an Attention Studio checkpoint or a Hugging Face model "
        f"folder (a damaged, truncated or foreign file; ours are {FORMAT})."
    )


def inconsistent(path, e: Exception) -> CheckpointError:
    """The error for a checkpoint whose parts do not fit together."""
    return CheckpointError(f"{shown_path(path)} is inconsistent and cannot be loaded: {e}")


def read_metadata(path) -> dict:
    """A checkpoint's metadata (configs, vocabularies, state...) without reading its weights;
    CheckpointError if its vocabularies or BPE tokenizers cannot be rebuilt."""
    ckpt = read_checkpoint(path, mmap=True)
    try:
        checkpoint_vocabs(ckpt)
    except (KeyError, TypeError, ValueError) as e:
        raise inconsistent(path, e) from e
    return {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer", "rng")}


def compact(src, dst, half: bool = True) -> Path:
    """Copy a checkpoint without optimiser state (and in float16), e.g. to ship or promote.

    Its data source is written portably (see portable_data_config). A decoder-only run's
    checkpoint is copied as the ``save_pretrained`` folder beside it (``copied_folder``).
    """
    ckpt = read_checkpoint(src)
    if saved_as_folder(ckpt):
        return copied_folder(src, dst)
    ckpt.pop("optimizer", None)
    ckpt.pop("rng", None)
    if ckpt.get("data_config"):
        ckpt["data_config"] = portable_data_config(ckpt["data_config"])
    if half:
        ckpt["state_dict"] = {
            k: v.half() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()
        }
    if not all_finite(ckpt["state_dict"]):
        raise CheckpointError(
            f"Not writing {dst}: its weights hold NaN or inf values"
            + (" in float16 (try --float32)." if half else ".")
        )
    atomic_save(ckpt, Path(dst))
    return Path(dst)


def saved_as_folder(ckpt: dict) -> bool:
    """Whether a run's checkpoint is a training state whose model is the ``save_pretrained``
    folder beside it (any arch but the encoder-decoder; ``exported_folder``)."""
    return (ckpt.get("model_config") or {}).get("arch", ENCODER_DECODER) != ENCODER_DECODER


def copied_folder(src, dst) -> Path:
    """A decoder-only run's model folder (``exported_folder`` of ``src``) copied whole to
    ``dst`` (a folder, replaced if there); CheckpointError when the run has none."""
    folder, dst = exported_folder(src), Path(dst)
    if not (folder / "config.json").is_file():
        raise CheckpointError(
            f"{shown_path(src)} is a decoder-only model's training state and its model folder "
            f"{shown_path(folder)} is missing: train or resume the run to write it."
        )
    if dst.suffix == ".pt":
        raise CheckpointError(f"{shown_path(dst)}: a decoder-only model is copied as a folder")
    new = dst.with_name(dst.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(folder, new)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(new, dst)
    return dst
