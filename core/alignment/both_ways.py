"""The share a link needs when attention is read both ways, chosen on the dev gold set.

Read both ways (``extract.links(..., both_ways=True)``), a weight links its two words when
its share of its target piece's row times its share of its source piece's column reaches a
cut: awesome-align's two-way extraction (Dou & Neubig 2021) applied to one attention map.
The cut is one number for every model (``extract.BOTH_WAYS``), chosen once on the dev set
(``gold/tatoeba-dev.gold``: 100 validation pairs that neither the studio set nor the held-out
set shares) as the cut with the lowest mean AER of the shipped models' best readers; the
other two gold sets only report (``bench/alignment.py`` prints the scan).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.alignment.aer import score
from core.alignment.extract import modes, pair_maps, readers
from core.alignment.gold import GoldLinks
from core.alignment.grid import predicted
from core.model.interface import TranslationModel

CUTS = tuple(round(0.05 * k, 2) for k in range(1, 11))  # 0.05, 0.1, ..., 0.5


def best_aer_by_cut(
    lm: TranslationModel, pairs, gold: Sequence[GoldLinks], cuts: Sequence[float] = CUTS
) -> dict[float, float]:
    """{cut: the AER of the model's best reader (any layer, head, mode) read both ways at
    that cut} on a gold set."""
    maps = pair_maps(lm, pairs, english_first=True)  # a gold set: English first
    every = readers(lm.cfg.num_decoder_layers, lm.cfg.num_heads, modes(lm))
    gold = list(gold)
    return {c: min(score(predicted(maps, r, c, True), gold).aer for r in every) for c in cuts}


def chosen_cut(tables: Sequence[dict[float, float]]) -> tuple[float, dict[float, float]]:
    """The cut with the lowest mean AER over the models' tables (``best_aer_by_cut``; a tie:
    the smaller cut), and every cut's mean."""
    means = {c: sum(t[c] for t in tables) / len(tables) for c in tables[0]}
    return min(means, key=lambda c: (round(means[c], 6), c)), means
