"""Open any model the studio reads, by one call: its own checkpoints (``.pt``) and Hugging
Face encoder-decoder folders (``save_pretrained`` layout; on the command line also hub ids).

Both kinds answer the same questions the pages and commands ask of a model: ``cfg`` (layers,
heads, width), ``meta``, ``subword``, ``family``, a ``Translation`` with every map
(``translate_any``; ``forced_any`` for a target the user gives) and a context that removes
heads (``heads_removed_any``).
"""

from __future__ import annotations

from pathlib import Path

from core.model import hf_folder
from core.model import hugging_face as hf
from core.model.checkpoints import CheckpointError, LoadedModel, load_checkpoint
from core.model.decode import (
    ALPHA,
    MAX_LEN,
    DecodeSettings,
    Translation,
    TranslationError,
    forced_translation,
    prepare_source,
    translate,
    translate_batch,
)

AnyModel = LoadedModel | hf.HFModel  # what open_model returns


def is_hugging_face(lm) -> bool:
    """Whether a loaded model is a Hugging Face one."""
    return getattr(lm, "family", "") == hf_folder.FAMILY


def open_model(spec: str, device="cpu", max_bytes: int | None = None, hub: bool = False):
    """A studio checkpoint, or a Hugging Face model folder (a hub id too when ``hub``);
    CheckpointError in one line when it cannot be opened."""
    looks_like_hub = hub and not Path(spec).exists() and hf_folder.HUB_ID.fullmatch(spec or "")
    if hf_folder.is_model_folder(spec) or looks_like_hub:
        try:
            return hf.load(hf_folder.resolve(spec), device, max_bytes)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    if Path(spec).is_dir():  # a folder without config.json: read_config says so
        try:
            hf_folder.read_config(spec)
        except hf_folder.HFModelError as e:
            raise CheckpointError(str(e)) from e
    return load_checkpoint(spec, device)


def translate_any(lm, sentence: str, settings: DecodeSettings) -> Translation:
    """A translation with every map, by the model's own decoding (no input checks: see
    ``core.model.checked_translation``)."""
    if is_hugging_face(lm):
        return hf.translate(lm, sentence, settings, settings.target_lang or None)
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


def forced_any(lm, sentence: str, target: str, settings: DecodeSettings) -> Translation:
    """A target the user gave, teacher-forced after the sentence, as a Translation with every
    map and each target token's probability and rank (no input checks: see
    ``core.model.checked_translation``)."""
    if is_hugging_face(lm):
        return hf.forced_translation(
            lm, sentence, target, settings.topk, settings.target_lang or None
        )
    return forced_translation(lm.model, lm.src_vocab, lm.tgt_vocab, sentence, target, settings.topk)


def translate_lines(
    lm,
    lines: list[str],
    beam: int = 1,
    alpha: float = ALPHA,
    max_len: int = MAX_LEN,
    target_lang: str = "",
) -> tuple[list[str], list[str]]:
    """Translations of ``lines`` in order ("" where a line cannot be translated) and warnings."""
    if is_hugging_face(lm):
        return _hf_lines(lm, lines, DecodeSettings(beam, alpha, max_len, target_lang=target_lang))
    outs, warnings, todo = [""] * len(lines), [], {}
    for i, line in enumerate(lines):
        try:
            _, tokens, _, notes = prepare_source(line, lm.src_vocab, lm.model.cfg.max_positions)
        except TranslationError as e:
            warnings.append(f"line {i + 1}: {e}")
            continue
        warnings += [f"line {i + 1}: {n}" for n in notes]
        todo[i] = lm.src_vocab.words(tokens[:-1])  # without <eos>, pieces joined
    if beam <= 1:
        done = translate_batch(
            lm.model, lm.src_vocab, lm.tgt_vocab, list(todo.values()), max_len=max_len
        )
        for i, words in zip(todo, done):
            outs[i] = " ".join(words)
    else:
        for i in todo:
            outs[i] = translate(
                lm.model, lm.src_vocab, lm.tgt_vocab, lines[i], beam, alpha, max_len
            ).text
    return outs, warnings


def _hf_lines(lm, lines: list[str], settings: DecodeSettings) -> tuple[list[str], list[str]]:
    """A Hugging Face model's translations of ``lines`` (``generate``, one line at a time)."""
    outs, warnings = [""] * len(lines), []
    for i, line in enumerate(lines):
        try:
            t = translate_any(lm, line, settings)
        except TranslationError as e:
            warnings.append(f"line {i + 1}: {e}")
            continue
        outs[i] = t.text
        warnings += [f"line {i + 1}: {w}" for w in t.warnings]
    return outs, warnings
