"""Cached calls of the "Remove heads" and "Patching" sections: translations with heads
removed and activation, attribution and path patching (in the server's heavy slot), shared by
every session. Heads are removed and activations patched by hooks of the calling thread only
(``core.model.hooks``): the model every session reads is used as it is, with no private copy
and no lock."""

from __future__ import annotations

from core.attention import ablation as ablate
from core.attention.ablation import HeadSpec
from core.attention.attribution_patching import Estimated, attribution_patch
from core.attention.patching import DEFAULT_SELECTION, Patching, patch
from core.attention.path_patching import PathPatching, path_patch_named
from core.model.interface import TranslationModel
from core.model.parts import DecodeSettings, Translation
from pages.ui.cached import fitted
from pages.ui.heavy_work import heavy_slot_or_raise
from pages.ui.shared_cache import shared


def ablated_translate(
    lm: TranslationModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    heads: tuple[HeadSpec, ...],
    target: str = "",
) -> Translation:
    """A checked translation with ``heads`` removed (``target``: forced instead of decoded),
    cached per model and input, within the server's budget for one translation."""
    settings, note = fitted(lm, sentence, settings, target)
    return _ablated_translate(lm, path, mtime, sentence, settings, heads, note, target)


@shared()
def _ablated_translate(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    heads: tuple[HeadSpec, ...],
    note: str,
    target: str = "",
) -> Translation:
    """ablation.removed_translation, ``note`` in its warnings."""
    t = ablate.removed_translation(_lm, sentence, settings, heads, target)
    t.warnings += [note] if note else []
    return t


@shared(spinner="Patching every head and every position…")
def patched(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    clean: str,
    corrupt: str,
    direction: str = "denoise",
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
    view: str = "",
    selection: tuple[str, ...] = DEFAULT_SELECTION,
) -> Patching:
    """Activation patching of ``selection`` (``patching.SELECTIONS``), cached per model
    (``view``: its ``view_key``, a prompted model's template), sentence pair and question
    for every session, in the server's heavy slot
    (SlotTaken when another session holds it; TranslationError in one line, before any pass,
    for a pass past the server's bytes)."""
    with heavy_slot_or_raise():
        return patch(
            _lm,
            clean,
            corrupt,
            direction=direction,
            prefix=prefix,
            answers=answers,
            target_lang=target_lang or None,
            selection=selection,
        )


@shared(spinner="Estimating every patch from one gradient, and patching each for real…")
def attribution_patched(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    clean: str,
    corrupt: str,
    direction: str = "denoise",
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
    view: str = "",
    selection: tuple[str, ...] = DEFAULT_SELECTION,
) -> Estimated:
    """Attribution patching of ``selection`` beside real patching, cached and bounded as
    ``patched``."""
    with heavy_slot_or_raise():
        return attribution_patch(
            _lm,
            clean,
            corrupt,
            direction=direction,
            prefix=prefix,
            answers=answers,
            target_lang=target_lang or None,
            selection=selection,
        )


@shared(spinner="Patching each head's path through the receivers…")
def path_patched(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    clean: str,
    corrupt: str,
    receivers: str,
    direction: str = "denoise",
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
    target_lang: str = "",
    view: str = "",
    freeze_mlps: bool = False,
) -> PathPatching:
    """Every head's effect through ``receivers`` as typed (``path_patch_named``:
    TranslationError in one line for a head the model lacks; ``freeze_mlps``: the MLPs frozen
    with the heads), cached and bounded as ``patched``."""
    with heavy_slot_or_raise():
        return path_patch_named(
            _lm,
            clean,
            corrupt,
            receivers,
            direction=direction,
            prefix=prefix,
            answers=answers,
            target_lang=target_lang or None,
            freeze_mlps=freeze_mlps,
        )
