"""``python -m core.align``: word alignments from cross-attention, and their error rate.

    python -m core.align --checkpoint CK --data PAIRS [--gold LINKS] [--one-indexed]
        [--layer L] [--head H|mean] [--mode awo|awi] [--threshold X] [--whole-target]

``PAIRS`` holds one ``english tokens ||| french tokens`` line per pair. Without ``--gold``
the command prints one line of Pharaoh links (``i-j``, source word i, target word j,
0-indexed) per pair, read from the chosen layer, head and mode (what is not given comes
from the model's best reader on the shipped gold set, ``core/alignment/gold``). With
``--gold`` it prints one JSON line per reader (``layer``, ``head``, ``mode``, ``aer``,
``precision``, ``recall``, ``pairs``; every layer x head x mode unless ``--layer``,
``--head`` or ``--mode`` narrow it), then one line per ``--method`` (an attribution
method's source part read as a map, AWO), then ``{"best": {...}}`` (the best attention
reader), then with ``--compare-with PLAIN`` one ``{"supervision": {...}}`` line each for
the head ``--checkpoint`` was trained to align (both modes) and the best reader, beside
PLAIN's. ``--whole-target``: every pass without the future mask (a head trained with
``align_full_context``). The library is ``core.alignment``, as on the Attention page.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from core.alignment.extract import Reader, links, pair_maps, pick_readers
from core.alignment.from_attribution import attribution_scores
from core.alignment.gold import (
    GoldError,
    check_gold,
    read_links,
    read_pairs,
    studio_gold,
    write_links,
)
from core.alignment.grid import alignment_grid
from core.alignment.supervision_effect import SupervisionError, compared
from core.attribution.methods import METHODS
from core.command_line import CommandError, run_command
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(description="Word alignments from cross-attention, and AER.")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="a file of 'english ||| french' lines")
    p.add_argument("--gold", help="Pharaoh links per pair: i-j sure, ipj possible")
    p.add_argument("--one-indexed", action="store_true", help="the gold links count from 1")
    p.add_argument("--layer", help="a decoder layer, or 'all' (the mean of every layer)")
    p.add_argument("--head", help="a head number, or 'mean'")
    p.add_argument("--mode", help="awo (the step that predicts a word) or awi (that reads it)")
    p.add_argument("--threshold", type=float, help="link every source word at or above this share")
    p.add_argument("--method", action="append", help="with --gold: also an attribution method")
    p.add_argument("--whole-target", action="store_true", help="read with no future mask")
    p.add_argument(
        "--compare-with", help="with --gold: a model trained without supervision, to compare"
    )
    return p


def chosen_readers(args, layers: int, heads: int) -> list[Reader]:
    """The readers the flags ask for (CommandError naming a bad flag)."""
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise CommandError(f"--threshold must be in (0, 1] (got {args.threshold})")
    try:
        return pick_readers(layers, heads, args.mode, args.layer, args.head)
    except ValueError as e:
        raise CommandError(str(e)) from e


def method_flags(args, lm) -> None:
    """CommandError for a --method that is unknown or does not explain this model (before
    any reading is computed)."""
    for m in args.method or []:
        if m not in METHODS:
            raise CommandError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
        if problem := lm.supports(m):
            raise CommandError(problem)
    if args.method and args.gold is None:
        raise CommandError("--method scores an attribution method: give --gold too")


def run(args) -> list[str]:
    """The lines to print (every pass with the whole target visible, with --whole-target)."""
    lm = open_model(args.checkpoint, hub=True)
    with lm.whole_target() if args.whole_target else contextlib.nullcontext():
        return lines(args, lm)


def lines(args, lm) -> list[str]:
    method_flags(args, lm)
    pairs = read_pairs(args.data)
    cfg = lm.cfg
    picked = chosen_readers(args, cfg.num_decoder_layers, cfg.num_heads)
    if args.gold is None:
        best = alignment_grid(lm, *studio_gold(), picked, args.threshold).best.reader()
        return [write_links(links(m, best, args.threshold)) for m in pair_maps(lm, pairs)]
    gold = read_links(args.gold, args.one_indexed)
    check_gold(pairs, gold, (Path(args.data).name, Path(args.gold).name))
    grid = alignment_grid(lm, pairs, gold, picked, args.threshold)
    extra = [attribution_scores(lm, pairs, gold, m) for m in args.method or []]
    rows = [r.to_json() for r in grid.rows] + extra + [{"best": grid.best.to_json()}]
    if args.compare_with:
        effect = compared(lm, open_model(args.compare_with), pairs, gold, grid, args.threshold)
        rows += [{"supervision": row.to_json()} for row in effect]
    return [json.dumps(r) for r in rows]


def main(argv=None) -> int:
    """Print alignments, or the AER of every reader."""
    errors = (CheckpointError, GoldError, SupervisionError, OSError, ValueError)
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
