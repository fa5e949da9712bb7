"""Both directions combined: the best reader of an English→French model and of a French→English
one, symmetrised as a statistical aligner's two directions are (Och & Ney 2003; Koehn's
grow-diag-final-and, ``core.alignment.aer``).

Each model's best reader is chosen on the gold set (as every "best" reader is): the reverse
model reads the pairs the other way round (French source, English target) and its links
come back as (English word, French word) (``core.alignment.extract.encoded``).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.alignment.aer import COMBINATIONS, combinations, score
from core.alignment.extract import links, mode_label, pair_maps
from core.alignment.gold import GoldLinks, Link
from core.alignment.grid import GridRow, alignment_grid
from core.model.interface import TranslationModel


def direction_problem(forward: TranslationModel, reverse: TranslationModel) -> str | None:
    """Why ``reverse`` is not ``forward`` the other way round, in one line (None when it is,
    or when either model does not say its languages)."""
    fwd, rev = forward.languages, reverse.languages
    unknown = ("source", "target")
    if unknown in (fwd, rev) or fwd == rev[::-1]:
        return None
    return (
        f"The reverse model translates {rev[0]}→{rev[1]}; symmetrising needs the other "
        f"direction of {fwd[0]}→{fwd[1]} ({fwd[1]}→{fwd[0]})."
    )


def best_links(
    lm: TranslationModel, pairs, gold, threshold: float | None = None, both_ways: bool = False
) -> tuple[GridRow, list[set[Link]]]:
    """A model's best attention reader on a gold set, and every pair's links under it (each
    read as ``extract.links`` reads with ``threshold`` and ``both_ways``)."""
    best = alignment_grid(lm, pairs, gold, None, threshold, both_ways).best
    maps = pair_maps(lm, pairs, english_first=True)
    return best, [links(m, best.reader(), threshold, both_ways) for m in maps]


def symmetrised(
    forward: TranslationModel,
    reverse: TranslationModel,
    pairs,
    gold: Sequence[GoldLinks],
    threshold: float | None = None,
    both_ways: bool = False,
) -> list[dict]:
    """One row per combination of the two models' best readers (read as ``best_links``
    says): AER, precision, recall."""
    if problem := direction_problem(forward, reverse):
        raise ValueError(problem)
    fwd_best, fwd = best_links(forward, pairs, gold, threshold, both_ways)
    rev_best, rev = best_links(reverse, pairs, gold, threshold, both_ways)
    combined = combinations(fwd, rev, [(len(s), len(t)) for s, t in pairs])
    ways = ", both ways" if both_ways else ""
    readers = {
        "forward_reader": reader_name(fwd_best) + ways,
        "reverse_reader": reader_name(rev_best) + ways,
    }
    rows = []
    for name in COMBINATIONS:
        s = score(combined[name], list(gold))
        figures = {"aer": s.aer, "precision": s.precision, "recall": s.recall, "pairs": s.pairs}
        rows.append({"combination": name, **readers, **figures})
    return rows


def reader_name(row: GridRow) -> str:
    """A reader in a few words: "layer 0 head 0, AWO", "all layers, AWO"."""
    if row.layer == "all":
        return f"all layers, {mode_label(row.mode)}"
    head = "mean of heads" if row.head == "mean" else f"head {row.head}"
    return f"layer {row.layer} {head}, {mode_label(row.mode)}"
