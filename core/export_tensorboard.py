"""``python -m core.export_tensorboard``: a run as a TensorBoard log folder.

    python -m core.export_tensorboard runs/<id> --out tb/<id>
    tensorboard --logdir tb

Scalars, weight and gradient distributions, the settings, and the probe sentences' maps at
their snapshots as images (``core.figures.tensorboard``; the Train page's "TensorBoard log"
download writes the same file). Prints one JSON line: the events file, its bytes, how many
summaries of each kind, and what was left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.command_line import CommandError, CommandParser, InRange, run_command
from core.figures.tensorboard import export_tensorboard
from core.runs.budget import MB, TENSORBOARD_BYTES
from core.runs.history import SUFFIX

MOST_MB = 4096  # the largest events file --limit-mb may ask for (4 GB)


def build_parser() -> argparse.ArgumentParser:
    """RUN, --out, --no-images and --limit-mb."""
    p = CommandParser(description="Export a run as a TensorBoard log folder.")
    p.add_argument("run", help=f"a run directory (runs/<id>) or a model's {SUFFIX} file")
    p.add_argument("--out", required=True, help="the log folder to write (created)")
    p.add_argument("--no-images", action="store_true", help="leave out the attention maps")
    p.add_argument(
        "--limit-mb",
        type=InRange(float, 0, MOST_MB, above=True),
        default=TENSORBOARD_BYTES / MB,
        help="the events file's largest size in MB (default: %(default)g; summaries past it are "
        "left out)",
    )
    return p


def run(args: argparse.Namespace) -> list[str]:
    """One JSON line: what was written."""
    source = Path(args.run)
    is_history = source.suffix == SUFFIX and source.is_file()
    if not is_history and not (source / "metrics.jsonl").is_file():
        raise CommandError(f"{args.run} is neither a run directory nor a {SUFFIX} file.")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise CommandError(f"--out {args.out} is a file; give a folder.")
    limit = int(args.limit_mb * MB)
    done = export_tensorboard(source, Path(args.out), not args.no_images, limit)
    return [json.dumps({"out": args.out, **done}, ensure_ascii=False)]


def main(argv=None) -> int:
    """Export the run and print what was written."""
    return run_command(build_parser(), run, (OSError,), argv)


if __name__ == "__main__":
    sys.exit(main())
