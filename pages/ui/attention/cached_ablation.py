"""Cached calls of the "Remove heads" and "Patching" sections: translations with heads
removed and activation patching, on a private copy of the model, shared by every session."""

from __future__ import annotations

import threading

from core.attention import ablation as ablate
from core.attention.ablation import HeadSpec
from core.attention.patching import Patching, patch
from core.model import checked_translation as translation
from core.model.checkpoints import LoadedModel
from core.model.decode import DecodeSettings, Translation
from pages.ui.cached import fitted
from pages.ui.shared_cache import MODELS, shared


@shared(pool=MODELS)
def private_model(_lm: LoadedModel, path: str, mtime: float) -> tuple[LoadedModel, threading.Lock]:
    """A copy of the model whose head gates this section sets, and the lock that guards it.

    The loaded model is shared by every session and never has gates set; sessions take
    turns on the copy.
    """
    return ablate.private_copy(_lm), threading.Lock()


def ablated_translate(
    lm: LoadedModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    heads: tuple[HeadSpec, ...],
) -> Translation:
    """A checked translation with ``heads`` removed, cached per model and input, within the
    server's budget for one translation."""
    settings, note = fitted(lm, sentence, settings)
    return _ablated_translate(lm, path, mtime, sentence, settings, heads, note)


@shared()
def _ablated_translate(
    _lm: LoadedModel,
    path: str,
    mtime: float,
    sentence: str,
    settings: DecodeSettings,
    heads: tuple[HeadSpec, ...],
    note: str,
) -> Translation:
    """translate_sentence of the private copy with ``heads`` removed, ``note`` in its warnings."""
    own, lock = private_model(_lm, path, mtime)
    with lock, ablate.ablated(own.model, heads):
        t = translation.translate_sentence(own, sentence, settings)
    t.warnings += [note] if note else []
    return t


@shared(spinner="Patching every head and every position…")
def patched(
    _lm: LoadedModel,
    path: str,
    mtime: float,
    clean: str,
    corrupt: str,
    direction: str = "denoise",
    prefix: str | None = None,
    answers: tuple[str, str] | None = None,
) -> Patching:
    """Activation patching of the private copy (its hooks touch no shared model), cached per
    model, sentence pair and question for every session."""
    own, lock = private_model(_lm, path, mtime)
    with lock:
        return patch(own, clean, corrupt, direction=direction, prefix=prefix, answers=answers)
