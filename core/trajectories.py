"""``python -m core.trajectories``: every attention head's numbers over training, as JSON lines.

    python -m core.trajectories --run DIR [--sentences N] [--probes-only]
    python -m core.trajectories --checkpoint CK [--sentences N] [--probes-only]

``--run`` reads a run directory's snapshots; ``--checkpoint`` a model's training history
(the run directory it sits in, else the ``.history`` file beside it), and measures that
model too. The first line sums up: steps, steps with a model, which metrics each basis has,
notes, and what the page reads off them (``core.attention.trajectory_reading``): ``stages``
(the heuristic, in words), ``source_share_reading`` (the "Measured:" line; null with fewer
than two measured steps), ``specialisation`` (the "When heads specialise" table: kind, layer,
head, pattern, since) and ``largest_change`` (per basis, per metric it has: each head's kind,
layer, head, step, change, value: the chart's stars). Then one line per
(basis, step, kind, layer, head): entropy, diagonal, previous, special, aer (null where not
measured). ``probes``: the probe sentences at every snapshot; ``validation``: the first N
validation sentences, teacher-forced, with each cross head's AER on the shipped gold set,
at steps where a checkpoint was saved (a run whose snapshots hold translations). A run of
any architecture keeps snapshots: a one-stack model's (decoder-only, encoder) one pass of its
one stack; where its evaluations carry circuit scores (induction, lm, encoder), each head's
line carries its ``induction``, ``previous_token`` and ``duplicate_token`` scores at that
step, and the first line the ``phase`` change (``core.training.circuits.phase_change``). A
model with no run or ``.history`` beside it, or whose history keeps no snapshots, is refused
in one line (``core.model.capabilities.replay_problem``). The library is
``core.alignment.head_aer``, the function the Attention page calls; results are cached in
``<runs>/.trajectories/``.
Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.alignment.head_aer import head_trajectories
from core.attention.trajectories import SENTENCES, as_json_lines, history_of
from core.attention.trajectory_reading import readings
from core.command_line import CommandError, CommandParser, InRange, run_command
from core.model.capabilities import replay_problem
from core.model.checkpoints import CheckpointError, read_metadata
from core.runs.history import open_history

MAX_SENTENCES = 10_000


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = CommandParser(description="Every attention head's numbers over training.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--run", help="a run directory (with snapshots/)")
    where.add_argument("--checkpoint", help="a model file: its run's or .history file's history")
    sentences = InRange(int, 1, MAX_SENTENCES)
    p.add_argument("--sentences", type=sentences, default=SENTENCES, help="validation sentences")
    p.add_argument("--probes-only", action="store_true", help="skip the validation sentences")
    return p


def source_of(args) -> tuple[Path, Path | None]:
    """(the history to read, the checkpoint to measure too); CommandError naming what is wrong."""
    if args.run is not None:
        run = Path(args.run)
        if not run.is_dir():
            raise CommandError(f"--run {run} is not a directory")
        source, checkpoint = run, None
    else:
        checkpoint = Path(args.checkpoint)
        source = history_of(checkpoint)
        if source is None and not checkpoint.is_dir():
            read_metadata(checkpoint)  # CheckpointError when it is not a model file
    steps = open_history(source).snapshot_steps() if source is not None else []
    if problem := replay_problem(source is not None, len(steps)):
        raise CommandError(f"{source or checkpoint}: {problem}")
    return source, checkpoint


def run(args) -> list[str]:
    """The lines to print."""
    source, checkpoint = source_of(args)
    result = head_trajectories(
        source, checkpoint, args.sentences, "off" if args.probes_only else "measure"
    )
    lines = as_json_lines(result)
    lines[0] |= {"source": str(source), **readings(result)}
    return [json.dumps(line, ensure_ascii=False) for line in lines]


def main(argv=None) -> int:
    """Print the trajectories as JSON lines."""
    return run_command(build_parser(), run, (CheckpointError, OSError), argv)


if __name__ == "__main__":
    sys.exit(main())
