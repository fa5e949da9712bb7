"""Alignment error rate of every reader (layer x head x mode) on a gold set, and the best one.

The pairs are teacher-forced once (their cross-attention kept, ``core.alignment.extract``);
then every reader's links are scored against the gold links with AER (``core.alignment.aer``).
Readers: each decoder layer's heads and their mean, the mean of all layers, in AWO and AWI
mode (and ``whole`` for a model whose head was trained with the whole target visible). The
best reader has the lowest AER (ties: higher precision, then the earlier reader).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.alignment.aer import score
from core.alignment.extract import Reader, links, modes, pair_maps, readers
from core.alignment.gold import GoldLinks
from core.measure.progress import ProgressFn, checked
from core.model.interface import TranslationModel


@dataclass
class GridRow:
    """One reader's scores on the gold set."""

    layer: int | str  # a decoder layer, or "all"
    head: str  # a head number, or "mean"
    mode: str  # "awo" or "awi"
    aer: float
    precision: float
    recall: float
    pairs: int

    def to_json(self) -> dict:
        """The command's JSON line."""
        return asdict(self)

    def reader(self) -> Reader:
        """The reader this row scores."""
        layer = None if self.layer == "all" else int(self.layer)
        return Reader(layer, None if self.head == "mean" else int(self.head), self.mode)


@dataclass
class AlignmentGrid:
    """Every reader's AER on a gold set."""

    rows: list[GridRow]
    seconds: float

    @property
    def best(self) -> GridRow:
        """The lowest AER (then the highest precision, then the first listed)."""
        return min(self.rows, key=lambda r: (r.aer, -r.precision))


def predicted(
    maps, reader: Reader, threshold: float | None = None, both_ways: bool = False
) -> list[set]:
    """Every pair's links under one reader (``extract.links``)."""
    return [links(m, reader, threshold, both_ways) for m in maps]


def alignment_grid(
    lm: TranslationModel,
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    gold: Sequence[GoldLinks],
    only: Sequence[Reader] | None = None,
    threshold: float | None = None,
    both_ways: bool = False,
    progress: ProgressFn | None = None,
) -> AlignmentGrid:
    """Score every reader (or ``only`` these) against the gold links, each read as
    ``extract.links`` reads it (argmax, a threshold, or both ways)."""
    start, n = time.perf_counter(), max(len(pairs), 1)
    done, report = [0], checked(progress)  # stops past a shared server's time limit

    def tick(k: int) -> None:
        done[0] += k
        report(0.5 * done[0] / n, "reading the cross-attention")

    maps = pair_maps(lm, pairs, tick=tick, english_first=True)  # a gold set: English first
    cfg = lm.cfg
    every = readers(cfg.num_decoder_layers, cfg.num_heads, modes(lm))
    chosen = list(only) if only is not None else every
    rows = []
    for i, reader in enumerate(chosen):
        s = score(predicted(maps, reader, threshold, both_ways), list(gold))
        rows.append(
            GridRow(
                reader.layer_label,
                reader.head_label,
                reader.mode,
                s.aer,
                s.precision,
                s.recall,
                s.pairs,
            )
        )
        report(0.5 + 0.5 * (i + 1) / len(chosen), "scoring each layer and head")
    return AlignmentGrid(rows, time.perf_counter() - start)
