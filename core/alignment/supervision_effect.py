"""What training a head to align changed: the supervised head and the best reader of a model
trained with alignment supervision (Garg et al. 2019), beside the same readers of a model
trained without it, both scored on the same gold set (``core.alignment.grid``).

The Attention page's Alignment section and ``python -m core.align --compare-with`` both
call :func:`supervision_effect` on the two grids, so they agree on every figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.alignment.extract import MODES, Reader, readers
from core.alignment.gold import GoldLinks
from core.alignment.grid import AlignmentGrid, GridRow, alignment_grid
from core.attention.head_stats import supervised_head
from core.model.interface import TranslationModel


class SupervisionError(ValueError):
    """Supervision cannot be compared as asked; the message says why."""


@dataclass(frozen=True)
class EffectRow:
    """One reader's scores in the plain model and in the supervised one."""

    reader: str  # in words: "supervised head, AWO" or "best reader"
    plain: GridRow  # the plain model's row (for "best reader": its own best)
    supervised: GridRow  # the supervised model's row

    @property
    def change(self) -> float:
        """AER of the supervised model minus the plain one's (negative: supervision helped)."""
        return self.supervised.aer - self.plain.aer

    def to_json(self) -> dict:
        """The command's JSON line."""
        return {
            "reader": self.reader,
            "plain": self.plain.to_json(),
            "supervised": self.supervised.to_json(),
            "change": self.change,
        }


def grid_row(grid: AlignmentGrid, layer: int, head: int, mode: str) -> GridRow:
    """One head's row of a grid (SupervisionError when the grid has no such head)."""
    for row in grid.rows:
        if row.layer == layer and row.head == str(head) and row.mode == mode:
            return row
    raise SupervisionError(
        f"the plain model has no cross-attention layer {layer} head {head} to compare with"
    )


def supervision_effect(
    plain: AlignmentGrid, supervised: AlignmentGrid, layer: int, head: int
) -> list[EffectRow]:
    """The supervised head in both modes, then each model's best reader, on one gold set."""
    rows = [
        EffectRow(
            f"supervised head, {mode.upper()}",
            grid_row(plain, layer, head, mode),
            grid_row(supervised, layer, head, mode),
        )
        for mode in MODES
    ]
    return rows + [EffectRow("best reader", plain.best, supervised.best)]


def whole_target_row(
    lm: TranslationModel,
    plain: TranslationModel,
    pairs: list,
    gold: list[GoldLinks],
    threshold: float | None = None,
    both_ways: bool = False,
) -> EffectRow | None:
    """For a head trained with the whole target visible (``align_full_context``, Garg et
    al.'s full context): that head read the same way in both models, AWO; None for a head
    trained in the causal pass (ValueError from a model that reads causal passes only)."""
    found = supervised_head(lm.meta)
    if found is None or not (lm.meta.get("train_config") or {}).get("align_full_context"):
        return None
    only = [Reader(found[0], found[1], "awo")]

    def read(m: TranslationModel) -> GridRow:
        with m.whole_target():
            return alignment_grid(m, pairs, gold, only, threshold, both_ways=both_ways).rows[0]

    return EffectRow("supervised head, AWO, whole target", read(plain), read(lm))


def compared(
    lm: TranslationModel,
    plain: TranslationModel,
    pairs: list,
    gold: list[GoldLinks],
    grid: AlignmentGrid,
    threshold: float | None = None,
    both_ways: bool = False,
) -> list[EffectRow]:
    """``lm``'s supervised head and best reader (``grid``: every reader of ``lm`` scored on
    ``pairs``/``gold``) beside those of ``plain``, scored here on the same gold set, read
    the way ``grid`` was (``threshold``, ``both_ways``: ``extract.links``)."""
    found = supervised_head(lm.meta)
    if found is None:
        raise SupervisionError(
            "this model has no head trained to align (core.train --align-teacher or "
            "--align-links): there is no supervision to compare"
        )
    if problem := plain.supports("supervision") or lm.supports("supervision"):
        raise SupervisionError(problem)
    if len(grid.rows) < len(readers(lm.cfg.num_decoder_layers, lm.cfg.num_heads)):
        raise SupervisionError(
            "the comparison scores every reader: leave out --layer/--head/--mode"
        )
    plain_grid = alignment_grid(plain, pairs, gold, threshold=threshold, both_ways=both_ways)
    rows = supervision_effect(plain_grid, grid, found[0], found[1])
    whole = whole_target_row(lm, plain, pairs, gold, threshold, both_ways)
    return rows if whole is None else [*rows, whole]
