"""``python -m core.circuits``: a run's circuit scores over training, one JSON line per
evaluation, then the phase change.

    python -m core.circuits --run runs/my-induction-run
    python -m core.circuits --run checkpoints/induction-2l.history   (a shipped model's)

Each line: ``step``, ``val_loss``, the best induction head (``layer``, ``head``: the one the
phase change names, else the highest last induction score) and its ``induction``,
``previous_token`` and ``duplicate_token`` scores, ``repeat_loss``, ``first_copy_loss`` and
``icl``, and ``per_head``: every head's three scores, ``{"induction": [[...]],
"previous_token": ..., "duplicate_token": ...}`` indexed ``[layer][head]`` (null where an
evaluation lacks a head), the numbers the Train page's charts draw; the last line has
``summary``: the evaluations read, the best head and the ``phase_change``
(``core.training.circuits.phase_change``; null before the head formed). The library is
``core.runs.circuit_history``, what the Train page draws.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.command_line import CommandError, CommandParser, run_command
from core.runs.circuit_history import run_circuit_lines


def build_parser() -> argparse.ArgumentParser:
    """--run."""
    p = CommandParser(description="A run's circuit scores over training, as JSON lines.")
    p.add_argument("--run", required=True, help="the run directory, or a model's .history file")
    return p


def run(args: argparse.Namespace) -> list[str]:
    """One JSON line per evaluation with circuit scores, then the summary line."""
    try:
        lines = run_circuit_lines(args.run)
    except ValueError as e:
        raise CommandError(str(e)) from None
    return [json.dumps(line, ensure_ascii=False) for line in lines]


def main(argv=None) -> int:
    """Print a run's circuit scores at each evaluation and its phase change."""
    return run_command(build_parser(), run, (), argv)


if __name__ == "__main__":
    sys.exit(main())
