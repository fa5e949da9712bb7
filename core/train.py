"""``python -m core.train``: train a Transformer into a run directory.

    python -m core.train --out runs/my-run [--preset small] [--d-model 256 ...]
    python -m core.train --out runs/my-run --resume [--max-steps 5000]

One flag per setting (``core.training.settings``); the app launches it with ``--request``,
so settings travel as data in the run's ``request.json``. The work is done by
``core.runs.training_run``; under ``torchrun`` every process runs this same command.
"""

from __future__ import annotations

import argparse
import os
import sys

from core.runs.launcher import launch
from core.runs.training_run import run
from core.training.presets import PRESETS
from core.training.settings import add_setting_flags


def build_parser() -> argparse.ArgumentParser:
    """--out, --preset, --resume, --no-progress and one flag per setting
    (core.training.settings)."""
    p = argparse.ArgumentParser(description="Train an English-French Transformer.")
    p.add_argument("--out", required=True, help="run directory to create (or resume)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--request",
        action="store_true",
        help="read the settings (or, with --resume, new limits) from <out>/request.json",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="train with N processes on this machine, their rendezvous on 127.0.0.1 "
        "(several machines: run torchrun yourself)",
    )
    add_setting_flags(p)
    return p


def main(argv=None) -> int:
    """Parse the flags and train (or resume) the run; the exit code.

    With ``--processes N`` (N > 1, outside torchrun) this process starts the N training
    processes and waits for them (``core.runs.launcher``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.processes < 1:
        print("error: --processes must be 1 or more.", file=sys.stderr)
        return 2
    if args.processes > 1 and "WORLD_SIZE" not in os.environ:
        return launch(argv, args.processes)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
