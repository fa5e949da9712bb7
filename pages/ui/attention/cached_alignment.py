"""Cached calls of the "Alignment" section: every reader's alignment error rate on a gold set."""

from __future__ import annotations

from core.alignment import grid, supervision_effect
from core.alignment import other_readers as readers
from core.model.interface import TranslationModel
from pages.ui.progress import LateProgress
from pages.ui.shared_cache import shared


@shared()
def alignment_grid(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    gold_key: str,
    _pairs: list,
    _gold: list,
    both_ways: bool = False,
) -> grid.AlignmentGrid:
    """Every reader's AER on a gold set (``gold_key``: a hash of its content), per model file,
    read by argmax or ``both_ways`` (``core.alignment.extract.links``).

    A progress bar shows when it runs past a second; created and removed in here, it is
    replayed as nothing on a cache hit.
    """
    report = LateProgress()
    try:
        return grid.alignment_grid(_lm, _pairs, _gold, both_ways=both_ways, progress=report)
    finally:
        report.done()


@shared()
def other_readers(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    gold_key: str,
    _pairs: list,
    _gold: list,
    methods: tuple[str, ...],
    _reverse: TranslationModel | None,
    reverse_path: str | None,
    reverse_mtime: float | None,
    both_ways: bool = False,
) -> list[dict]:
    """Readers beyond one head on a gold set (``core.alignment.other_readers``: the command's
    rows), per model file, gold set and reverse model file; both directions' heads read by
    argmax or ``both_ways``."""
    return readers.other_readers(_lm, _pairs, _gold, methods, True, _reverse, None, both_ways)


@shared()
def whole_target_row(
    _lm: TranslationModel,
    path: str,
    mtime: float,
    _plain: TranslationModel,
    plain_path: str,
    plain_mtime: float,
    gold_key: str,
    _pairs: list,
    _gold: list,
    both_ways: bool = False,
) -> supervision_effect.EffectRow | None:
    """A head trained with the whole target visible, read so in it and in a plain model, on
    a gold set (``core.alignment.supervision_effect.whole_target_row``), per model files."""
    return supervision_effect.whole_target_row(_lm, _plain, _pairs, _gold, None, both_ways)
