"""Readers beyond one head of cross-attention, scored on a gold set as the heads are: an
attribution method's contributions (``from_attribution``), the similarity of the encoder's
and decoder's states (``similarity``), and both directions symmetrised with a model of the
opposite direction (``symmetrised``). ``python -m core.align`` prints their rows."""

from __future__ import annotations

from collections.abc import Sequence

from core.alignment.from_attribution import attribution_scores
from core.alignment.gold import GoldLinks
from core.alignment.similarity import similarity_scores
from core.alignment.symmetrised import symmetrised
from core.model.interface import TranslationModel


def other_readers(
    lm: TranslationModel,
    pairs,
    gold: Sequence[GoldLinks],
    methods: Sequence[str] = (),
    similarity: bool = False,
    reverse: TranslationModel | None = None,
    threshold: float | None = None,
    both_ways: bool = False,
) -> list[dict]:
    """One JSON-able row per method, per state reader (best first, with ``similarity``) and
    per combination of both directions (with a ``reverse`` model: each model's best head
    read as ``threshold``/``both_ways`` say, ``extract.links``)."""
    rows = [attribution_scores(lm, pairs, gold, m) for m in methods]
    if similarity:
        rows += [r.to_json() for r in similarity_scores(lm, pairs, gold)]
    if reverse is not None:
        both = symmetrised(lm, reverse, pairs, gold, threshold, both_ways)
        rows += [{"symmetrised": r} for r in both]
    return rows
