"""Cached calls of the "Where tokens live" section: the validation sentences a model reads,
and their projections, shared by every session."""

from __future__ import annotations

from core.attention import projector
from core.model.interface import TranslationModel
from pages.ui.progress import LateProgress
from pages.ui.shared_cache import shared


@shared(spinner="Rebuilding the validation sentences…")
def sentences(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    n: int,
    target_lang: str,
    reads: str = "reference",
) -> projector.Sentences:
    """The model's first ``n`` validation sentences, as it reads them (the decoder a
    reference or the model's own translation: ``reads``)."""
    return projector.sentences_of(_lm, n, target_lang=target_lang or None, reads=reads)


@shared()
def projection(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    side: str,
    layer: int,
    method: str,
    dims: int,
    n: int,
    target_lang: str,
    reads: str = "reference",
) -> projector.Projection:
    """One projection (its size checked before it is computed); a progress bar shows when
    it runs past a second."""
    read = sentences(_lm, path, mtime, n, target_lang, reads)
    report = LateProgress()
    try:
        return projector.project(_lm, side, layer, method, dims, read, progress=report)
    finally:
        report.done()
