"""``python -m core.align``: word alignments from cross-attention, and their error rate.

    python -m core.align --checkpoint CK --data PAIRS [--gold LINKS] [--one-indexed]
        [--layer L] [--head H|mean] [--mode awo|awi|whole] [--threshold X] [--both-ways]
    python -m core.align --checkpoint CK --held-out [--similarity] [--reverse FR_EN_CK] ...

``PAIRS``: ``english ||| french`` lines. Without ``--gold``: a line of Pharaoh links (``i-j``,
from 0) per pair, by the best chosen reader on the shipped gold set. With ``--gold``: a JSON
line per reader (``layer``, ``head``, ``mode``, ``aer``, ``precision``, ``recall``, ``pairs``;
``--layer/--head/--mode`` narrow them), per ``--method`` (an attribution's source part), per
state reader with ``--similarity`` (SimAlign), per combination with a model of the other way
(``--reverse CK``), ``{"best": ...}``, ``--compare-with PLAIN``'s ``{"supervision": ...}``.
``--held-out``: the held-out gold set. ``--whole-target``: every mode with no future mask.
``--both-ways``: a link where a weight's row share x column share reaches ``--threshold``
(default ``extract.BOTH_WAYS``; awesome-align's extraction)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from core.alignment import gold as files
from core.alignment.extract import Reader, links, modes, pair_maps, pick_readers
from core.alignment.grid import alignment_grid
from core.alignment.held_out import held_out_gold
from core.alignment.other_readers import other_readers
from core.alignment.supervision_effect import SupervisionError, compared
from core.attribution.methods import METHODS
from core.command_line import CommandError, CommandParser, InRange, add_prompt_flag, run_command
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Word alignments from cross-attention, and AER.")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", help="a file of 'english ||| french' lines")
    p.add_argument("--held-out", action="store_true", help="the held-out Tatoeba gold set")
    p.add_argument("--gold", help="Pharaoh links per pair: i-j sure, ipj possible")
    p.add_argument("--one-indexed", action="store_true", help="the gold links count from 1")
    p.add_argument("--layer", type=InRange.index("all"), help="'all': the mean of every layer")
    p.add_argument("--head", type=InRange.index("mean"), help="a head number, or 'mean'")
    p.add_argument("--mode", help="awo (the step that predicts a word), awi, or whole")
    share = InRange(float, 0, 1, above=True)
    p.add_argument("--threshold", type=share, help="link every source word at or above this share")
    p.add_argument("--both-ways", action="store_true", help="row share x column share (awesome)")
    p.add_argument("--method", action="append", help="with --gold: also an attribution method")
    p.add_argument("--whole-target", action="store_true", help="read with no future mask")
    p.add_argument("--similarity", action="store_true", help="with --gold: SimAlign readers")
    p.add_argument("--reverse", help="with --gold: a model of the opposite direction")
    p.add_argument("--compare-with", help="with --gold: a model trained without supervision")
    add_prompt_flag(p)
    return p


def chosen_readers(args, lm) -> list[Reader]:
    """The readers the flags ask for (CommandError naming a bad flag)."""
    try:
        layers, heads = lm.cfg.num_decoder_layers, lm.cfg.num_heads
        layer, head = (None if v is None else str(v) for v in (args.layer, args.head))
        return pick_readers(layers, heads, args.mode, layer, head, modes(lm))
    except ValueError as e:
        raise CommandError(str(e)) from e


def method_flags(args, lm) -> None:
    """CommandError for a flag that cannot be honoured, before any reading is computed."""
    for m in args.method or []:
        if m not in METHODS:
            raise CommandError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
        if problem := lm.supports(m):
            raise CommandError(problem)
    for flag in ("method", "similarity", "reverse", "compare_with"):
        if getattr(args, flag) and args.gold is None and not args.held_out:
            raise CommandError(f"--{flag.replace('_', '-')} scores readers: give --gold too")
    if bool(args.data) == args.held_out:
        raise CommandError("give --data (and --gold), or --held-out")


def run(args) -> list[str]:
    """The lines to print (every pass with the whole target visible, with --whole-target)."""
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="alignment")
    method_flags(args, lm)
    with lm.whole_target() if args.whole_target else contextlib.nullcontext():
        return lines(args, lm)


def lines(args, lm) -> list[str]:
    picked, reading = chosen_readers(args, lm), (args.threshold, args.both_ways)
    if args.held_out:
        pairs, gold = held_out_gold()
    elif args.gold is None:
        grid = alignment_grid(lm, *files.studio_gold(), picked, *reading)
        maps = pair_maps(lm, files.read_pairs(args.data), english_first=True)
        return [files.write_links(links(m, grid.best.reader(), *reading)) for m in maps]
    else:
        pairs, gold = files.read_pairs(args.data), files.read_links(args.gold, args.one_indexed)
        files.check_gold(pairs, gold, (Path(args.data).name, Path(args.gold).name))
    grid = alignment_grid(lm, pairs, gold, picked, *reading)
    reverse = open_model(args.reverse, hub=True) if args.reverse else None
    extra = other_readers(lm, pairs, gold, args.method or (), args.similarity, reverse, *reading)
    rows = [r.to_json() for r in grid.rows] + extra + [{"best": grid.best.to_json()}]
    if args.compare_with:
        effect = compared(lm, open_model(args.compare_with), pairs, gold, grid, *reading)
        rows += [{"supervision": row.to_json()} for row in effect]
    return [json.dumps(r) for r in rows]


def main(argv=None) -> int:
    """Print alignments, or the AER of every reader."""
    errors = CheckpointError, files.GoldError, SupervisionError, OSError, ValueError
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
