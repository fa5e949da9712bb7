"""``python -m core.head_scores``: every decoder head's previous-token, duplicate-token and
induction scores and the in-context-learning score, as JSON lines.

    python -m core.head_scores --checkpoint CK [--length 20] [--sequences 8] [--seed 0]
        [--prompt T]

``--length`` defaults to the longest copy a model trained here on the induction task read
(its run's or ``.history``'s circuit scores say), else 20, as on the page.

Prints one JSON line per head (``layer``, ``head``, ``previous_token``, ``duplicate_token``,
``induction``), then one summary line (``length``, ``sequences``, ``seed``, ``icl``, the
``early_token`` and ``late_token`` it compares, ``first_copy_loss``, ``repeat_loss``). The
library is ``core.attention.head_detectors``, the function the Attention page's "Head scores"
section calls.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.attention.head_detectors import (
    LENGTH,
    LENGTHS,
    SEED,
    SEEDS,
    SEQUENCE_COUNTS,
    SEQUENCES,
    HeadScoresError,
    head_scores,
)
from core.command_line import CommandParser, InRange, add_model_flag, add_prompt_flag, run_command
from core.model.checkpoints import CheckpointError
from core.model.opened import open_model
from core.model.parts import TranslationError
from core.runs.circuit_history import trained_length


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Head detector scores on random tokens read twice.")
    add_model_flag(p)
    p.add_argument(
        "--length",
        type=InRange(int, *LENGTHS),
        default=None,
        help=f"random tokens per copy (default: an induction model's own, else {LENGTH})",
    )
    p.add_argument(
        "--sequences",
        type=InRange(int, *SEQUENCE_COUNTS),
        default=SEQUENCES,
        help="sequences the scores are averaged over",
    )
    p.add_argument("--seed", type=InRange(int, *SEEDS), default=SEED, help="of the random tokens")
    add_prompt_flag(p)
    return p


def run(args) -> list[str]:
    """The lines to print: one per head, then the summary."""
    m = open_model(args.checkpoint, hub=True, prompt=args.prompt, section="head_scores")
    length = args.length or trained_length(args.checkpoint) or LENGTH  # as the page's
    s = head_scores(m, length, args.sequences, args.seed)
    return [json.dumps(row) for row in [*s.rows(), s.summary()]]


def main(argv=None) -> int:
    """Print every head's detector scores and the in-context-learning score."""
    errors = (CheckpointError, HeadScoresError, TranslationError, ValueError)
    return run_command(build_parser(), run, errors, argv)


if __name__ == "__main__":
    sys.exit(main())
