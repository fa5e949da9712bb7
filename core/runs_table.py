"""``python -m core.runs_table``: every run's settings and final metrics, one JSON line each.

The rows are the Train page's "All runs" table (``core.runs.table``), filtered the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from core.command_line import CommandError, CommandParser, run_command
from core.places import RUNS_ENV
from core.runs.status import FINAL_STATES, LIVE_STATES, list_runs
from core.runs.table import filter_rows, run_rows


def plain(value):
    """``value`` with NaN and infinities as None, so every line is standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def build_parser() -> argparse.ArgumentParser:
    """--runs, --search, --state and --tag."""
    p = CommandParser(
        description="Every run's settings, final metrics, note and tags as JSON lines."
    )
    p.add_argument("--runs", help=f"runs directory (default: ${RUNS_ENV} or runs/)")
    p.add_argument("--search", default="", help="text in the run id, name, note or tags")
    p.add_argument(
        "--state",
        action="append",
        default=[],
        choices=(*LIVE_STATES, *FINAL_STATES, "unknown"),  # as the Train page's state filter
        help="keep runs in this state (repeatable; default: every state)",
    )
    p.add_argument(
        "--tag", action="append", default=[], help="keep runs with this tag (repeatable)"
    )
    return p


def run(args: argparse.Namespace) -> list[str]:
    """One JSON object per run under --runs (newest first) that passes the filters."""
    if args.runs:
        if not Path(args.runs).is_dir():
            raise CommandError(f"{args.runs} is not a directory of runs.")
        os.environ[RUNS_ENV] = str(Path(args.runs).resolve())
    rows = filter_rows(run_rows(list_runs()), args.search, args.state, args.tag)
    return [json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False) for row in rows]


def main(argv=None) -> int:
    """Print the runs table's rows as JSON lines."""
    return run_command(build_parser(), run, (), argv)


if __name__ == "__main__":
    sys.exit(main())
