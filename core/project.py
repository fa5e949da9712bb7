"""``python -m core.project``: where tokens live, the representations of validation sentences
projected to 2-D or 3-D, one JSON line per point.

    python -m core.project --checkpoint CK [--side encoder|decoder] [--layer N|all]
                           [--method pca|umap] [--dims 2|3] [--sentences N] [--data SOURCE]
                           [--pick SENTENCE:POSITION [--neighbours K]]

prints one line per point (``side``, ``layer``, ``sentence``, ``position``, ``token``, ``x``,
``y`` and with 3 dimensions ``z``), then one line with what was projected and, for PCA, the
share of the variance each axis explains. ``--pick`` adds a line with that token's nearest
neighbours at the same layer (cosine in the model's width; with ``--layer all`` at the last
layer). Layer 0 is what the stack's first layer reads; the decoder reads each sentence's
first reference. The library is ``core.attention.projector``, the function the Attention
page's "Where tokens live" calls.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.projector import (
    ALL_LAYERS,
    DIMS,
    MAX_SENTENCES,
    METHODS,
    NEIGHBOURS,
    READS,
    SENTENCES,
    SIDES,
    ProjectionError,
    project,
)
from core.command_line import (
    INDICES,
    CommandError,
    CommandParser,
    InRange,
    add_prompt_flag,
    run_command,
    terminal_progress,
    usable_target_lang,
)
from core.corpus.source import DataError
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model

MAX_NEIGHBOURS = 1000  # the most neighbours --pick lists
LAYER = InRange(int, *INDICES, words=(("all", ALL_LAYERS),))  # 0 = what the first layer reads


def pick_arg(text: str) -> tuple[int, int]:
    """SENTENCE:POSITION, two numbers from 0 (a sentence of the first MAX_SENTENCES)."""
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"is SENTENCE:POSITION, e.g. 3:1 (got {text})")
    return InRange(int, 0, MAX_SENTENCES - 1)(parts[0]), InRange.index()(parts[1])


def build_parser() -> argparse.ArgumentParser:
    """--checkpoint, --side, --layer, --method, --dims, --sentences, --data, --pick."""
    p = CommandParser(
        description="Token representations of validation sentences projected to 2-D or 3-D."
    )
    p.add_argument("--checkpoint", required=True, help="a studio checkpoint, model folder or id")
    p.add_argument("--side", choices=SIDES, default="encoder")
    p.add_argument("--layer", type=LAYER, default=ALL_LAYERS, help="0 = the input; or all")
    p.add_argument("--method", choices=METHODS, default="pca")
    p.add_argument("--dims", type=int, choices=DIMS, default=2)
    sentences = InRange(int, 1, MAX_SENTENCES)
    p.add_argument("--sentences", type=sentences, default=SENTENCES, help="the first N validation")
    p.add_argument("--data", default=None, help="corpus path (default: the checkpoint's own)")
    p.add_argument("--target-lang", default="", help="a multilingual model's target language")
    p.add_argument("--pick", type=pick_arg, default=None, help="SENTENCE:POSITION")
    near = InRange(int, 1, MAX_NEIGHBOURS)
    p.add_argument("--neighbours", type=near, default=NEIGHBOURS, help="neighbours of --pick")
    p.add_argument(
        "--decoder-reads", choices=READS, default=READS[0], help="a reference or its translation"
    )
    add_prompt_flag(p)
    return p


def run(args: argparse.Namespace) -> list[str]:
    """Every point, the summary, and the picked token's neighbours."""
    lm = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="project")
    result = project(
        lm,
        args.side,
        args.layer,
        args.method,
        args.dims,
        args.sentences,
        args.data,
        usable_target_lang(args.target_lang, lm),
        terminal_progress(),
        name=args.checkpoint,
        reads=args.decoder_reads,
    )
    lines = [json.dumps(row, ensure_ascii=False) for row in result.rows()]
    lines.append(json.dumps(result.summary(), ensure_ascii=False))
    if args.pick is not None:
        index = result.index_of(*args.pick, result.layers[-1])
        if index is None:
            raise CommandError(f"There is no token {args.pick[0]}:{args.pick[1]} to pick.")
        near = result.neighbours(index, args.neighbours)
        lines.append(
            json.dumps({"picked": result.point(index), "neighbours": near}, ensure_ascii=False)
        )
    return lines


def main(argv=None) -> int:
    """Print the projected points as JSON lines."""
    return run_command(build_parser(), run, (CheckpointError, DataError, ProjectionError), argv)


if __name__ == "__main__":
    sys.exit(main())
