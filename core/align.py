"""``python -m core.align``: word alignments from cross-attention, and their error rate.

    python -m core.align --checkpoint CK --data PAIRS [--gold LINKS] [--one-indexed]
        [--layer L] [--head H|mean] [--mode awo|awi] [--threshold X]

``PAIRS`` holds one ``english tokens ||| french tokens`` line per pair. Without ``--gold``
the command prints one line of Pharaoh links (``i-j``, source word i, target word j,
0-indexed) per pair, read from the chosen layer, head and mode (what is not given comes
from the model's best reader on the shipped gold set, ``core/alignment/gold``). With
``--gold`` it prints
one JSON line per reader (``layer``, ``head``, ``mode``, ``aer``, ``precision``,
``recall``, ``pairs``; every layer x head x mode unless ``--layer``/``--head``/``--mode``
narrow it), then one line per ``--method`` (an attribution method's source part read as a
map, AWO), then ``{"best": {...}}`` (the best attention reader), then with ``--compare-with
PLAIN`` one ``{"supervision": {...}}`` line each for the head ``--checkpoint`` was trained
to align (both modes) and the best reader, beside PLAIN's. The library is
``core.alignment``, the same functions the Attention page calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.alignment.extract import MODES, Reader, links, pair_maps, readers
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
from core.alignment.supervision_effect import compared
from core.attribution.methods import METHODS
from core.command_line import run_command
from core.model.checkpoints import CheckpointError
from core.model.opened import is_hugging_face, open_model


def parser() -> argparse.ArgumentParser:
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
    p.add_argument(
        "--compare-with", help="with --gold: a model trained without supervision, to compare"
    )
    return p


def chosen_readers(args, layers: int, heads: int) -> list[Reader]:
    """The readers the flags ask for (raises ValueError naming a bad flag)."""
    every = readers(layers, heads)
    if unknown := [m for m in args.method or [] if m not in METHODS]:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise ValueError(f"--threshold must be in (0, 1] (got {args.threshold})")
    if args.mode is not None and args.mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)} (got {args.mode!r})")
    if args.layer not in (None, "all") and not (args.layer.isdigit() and int(args.layer) < layers):
        raise ValueError(f"--layer must be 0..{layers - 1} or 'all' (got {args.layer!r})")
    if args.head not in (None, "mean") and not (args.head.isdigit() and int(args.head) < heads):
        raise ValueError(f"--head must be 0..{heads - 1} or 'mean' (got {args.head!r})")
    keep = [
        r
        for r in every
        if (args.mode is None or r.mode == args.mode)
        and (args.layer is None or str(r.layer_label) == args.layer)
        and (args.head is None or r.head_label == args.head)
    ]
    if not keep:
        raise ValueError(
            "no reader matches --layer/--head (the mean of all layers has head 'mean')"
        )
    return keep


def run(args) -> list[str]:
    """The lines to print."""
    lm = open_model(args.checkpoint, hub=True)
    pairs = read_pairs(args.data)
    cfg = lm.cfg
    picked = chosen_readers(args, cfg.num_decoder_layers, cfg.num_heads)
    if args.gold is None:
        best = alignment_grid(lm, *studio_gold(), picked, args.threshold).best.reader()
        return [write_links(links(m, best, args.threshold)) for m in pair_maps(lm, pairs)]
    gold = read_links(args.gold, args.one_indexed)
    check_gold(pairs, gold, (Path(args.data).name, Path(args.gold).name))
    grid = alignment_grid(lm, pairs, gold, picked, args.threshold)
    if args.method and is_hugging_face(lm):
        raise ValueError("--method reads the studio's own checkpoints only (not built yet)")
    extra = [attribution_scores(lm, pairs, gold, m) for m in args.method or []]
    rows = [r.to_json() for r in grid.rows] + extra + [{"best": grid.best.to_json()}]
    if args.compare_with:
        effect = compared(lm, open_model(args.compare_with), pairs, gold, grid, args.threshold)
        rows += [{"supervision": row.to_json()} for row in effect]
    return [json.dumps(r) for r in rows]


def main(argv=None) -> int:
    """Print alignments, or the AER of every reader."""
    return run_command(parser(), run, (CheckpointError, GoldError, ValueError, OSError), argv)


if __name__ == "__main__":
    sys.exit(main())
