"""Open any model the studio reads, by one call: its own checkpoints (``.pt``) and Hugging
Face encoder-decoder folders (``save_pretrained`` layout; on the command line also hub ids).

Both kinds answer the same questions the pages and commands ask of a model: ``cfg`` (layers,
heads, width), ``meta``, ``subword``, ``family``, a ``Translation`` with every map
(``translate_any``) and a context that removes heads (``heads_removed_any``).
"""

from __future__ import annotations

from pathlib import Path

from core.model import hugging_face as hf
from core.model.checkpoints import CheckpointError, LoadedModel, load_checkpoint
from core.model.decode import DecodeSettings, Translation

AnyModel = LoadedModel | hf.HFModel  # what open_model returns


def is_hugging_face(lm) -> bool:
    """Whether a loaded model is a Hugging Face one."""
    return getattr(lm, "family", "") == hf.FAMILY


def open_model(spec: str, device="cpu", max_bytes: int | None = None, hub: bool = False):
    """A studio checkpoint, or a Hugging Face model folder (a hub id too when ``hub``);
    CheckpointError in one line when it cannot be opened."""
    looks_like_hub = hub and not Path(spec).exists() and hf.HUB_ID.fullmatch(spec or "")
    if hf.is_model_folder(spec) or looks_like_hub:
        try:
            return hf.load(hf.resolve(spec), device, max_bytes)
        except hf.HFModelError as e:
            raise CheckpointError(str(e)) from e
    if Path(spec).is_dir():  # a folder without config.json: read_config says so
        try:
            hf.read_config(spec)
        except hf.HFModelError as e:
            raise CheckpointError(str(e)) from e
    return load_checkpoint(spec, device)


def translate_any(lm, sentence: str, settings: DecodeSettings) -> Translation:
    """A translation with every map, by the model's own decoding (no input checks: see
    ``core.model.checked_translation``)."""
    if is_hugging_face(lm):
        return hf.translate(lm, sentence, settings, settings.target_lang or None)
    from core.model.decode import translate

    return translate(
        lm.model,
        lm.src_vocab,
        lm.tgt_vocab,
        sentence,
        settings.beam_size,
        settings.alpha,
        settings.max_len,
        settings.topk,
    )
