"""``python -m core.train``: train a Transformer into a run directory.

    python -m core.train --out runs/my-run [--preset small] [--d-model 256 ...]
    python -m core.train --out runs/my-run --resume [--max-steps 5000]
    python -m core.train --out runs/aligned --align-teacher checkpoints/fra-eng-small.pt

``--align-teacher CK`` (the teacher's best attention reader), ``--align-teacher eflomal``
(eflomal on the training pairs, where installed) or ``--align-links FILE --align-pairs FILE``
(an aligner's Pharaoh links and its ``english ||| french`` or TAB lines) train one
cross-attention head toward alignments of the training pairs (Garg et al. 2019;
``core.alignment.teacher``), with weight ``--align-weight`` (``--align-layer``, ``-head``).

One flag per setting (``core.training.settings``), checked as the Train page checks them
(``core.runs.capacity``); the app launches it with ``--request`` (settings as data in
``request.json``); the work is ``core.runs.training_run``'s, under ``torchrun`` in every process.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

from core.cpu_load import passive_waits

if __name__ == "__main__":  # before torch loads OpenMP, which reads it once (core.runs.cpu_share)
    passive_waits(os.environ)  # where asked; the app's trainers: from their launch (trainer_env)

from core.alignment.teacher import prepare_alignments, read_source
from core.command_line import CommandError, CommandParser, run_command
from core.corpus.config import DataConfig
from core.corpus.source import DataError
from core.model.checkpoints import CheckpointError
from core.runs.alignment_request import ALIGN_WEIGHT, requested_alignment
from core.runs.capacity import command_problems
from core.runs.launcher import launch
from core.runs.run_dir import RunDir, new_run_problem
from core.runs.training_run import read_request, run
from core.training.presets import PRESETS
from core.training.settings import add_setting_flags, resume_problem, settings_from_args


def build_parser() -> argparse.ArgumentParser:
    """--out, --preset, --resume, --no-progress and one flag per setting (core.training)."""
    p = CommandParser(description="Train an English-French Transformer.")
    p.add_argument("--out", required=True, help="a new run directory (or one to --resume)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--request", action="store_true", help="settings (or limits) from request.json")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="train with N processes on this machine, their rendezvous on 127.0.0.1 "
        "(several machines: run torchrun yourself)",
    )
    p.add_argument("--align-teacher", help="a checkpoint whose best reader aligns, or 'eflomal'")
    p.add_argument("--align-links", help="Pharaoh links of the training pairs (an aligner's)")
    p.add_argument("--align-pairs", help="the 'english ||| french' (or TAB) lines they align")
    add_setting_flags(p)
    return p


def requested_data(args: argparse.Namespace) -> dict:
    """The data settings of a new run: the app's request.json, or the preset and flags."""
    if args.request:
        return dict(read_request(RunDir(args.out)).get("settings", {}).get("data") or {})
    return settings_from_args(args)["data"]


def with_alignments(args: argparse.Namespace) -> None:
    """Write the run's alignments (not again in a process the launcher started, nor on
    resume) and set the alignment settings: where they came from, a default weight."""
    if args.request and not args.resume:  # the app's launch: what its request.json asks
        asked = requested_alignment(RunDir(args.out))
        args.align_teacher, args.align_links, args.align_pairs = asked
    if not (args.align_teacher or args.align_links or args.align_pairs) or args.resume:
        return
    path = Path(args.out) / "alignments.txt"
    if "WORLD_SIZE" in os.environ and path.is_file():
        source = read_source(path)
    else:
        data = DataConfig(**requested_data(args))
        source = prepare_alignments(
            path, data, args.align_teacher, args.align_links, args.align_pairs, not args.no_progress
        )
    setattr(args, "train.align_source", source)
    if not vars(args).get("train.align_weight"):
        setattr(args, "train.align_weight", ALIGN_WEIGHT)


def train(args: argparse.Namespace, argv: list[str]) -> int:
    """Train (or resume) the run ``args`` names, or start its processes; the exit code."""
    asked = (args.preset, settings_from_args(args), args.processes, args.resume or args.request)
    if "WORLD_SIZE" not in os.environ and (problems := command_problems(*asked)):
        raise CommandError("Invalid settings: " + "; ".join(problems) + ".")  # as the page's
    if args.resume and (why := resume_problem(args, RunDir(args.out).read_config())):
        raise CommandError(why)
    args.fresh = not (args.resume or args.request or "WORLD_SIZE" in os.environ)  # checked:
    if args.fresh and (why := new_run_problem(args.out)):  # a run, or other files, there
        raise CommandError(why)
    with_alignments(args)
    if args.processes > 1 and "WORLD_SIZE" not in os.environ:
        return launch(argv, args.processes)
    return run(args)


def main(argv=None) -> int:
    """Parse the flags, then train: in this process, or in N (``core.runs.launcher``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    errors = (ValueError, OSError, DataError, CheckpointError)  # GoldError is a ValueError
    return run_command(build_parser(), partial(train, argv=argv), errors, argv, share_cores=False)


if __name__ == "__main__":
    sys.exit(main())
