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

from core.places import RUNS_ENV
from core.runs.status import list_runs
from core.runs.table import filter_rows, run_rows


def plain(value):
    """``value`` with NaN and infinities as None, so every line is standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def main(argv=None) -> int:
    """Print one JSON object per run under --runs (newest first) that passes the filters."""
    p = argparse.ArgumentParser(
        description="Every run's settings, final metrics, note and tags as JSON lines."
    )
    p.add_argument("--runs", help=f"runs directory (default: ${RUNS_ENV} or runs/)")
    p.add_argument("--search", default="", help="text in the run id, name, note or tags")
    p.add_argument(
        "--state", action="append", default=[], help="keep runs in this state (repeatable)"
    )
    p.add_argument(
        "--tag", action="append", default=[], help="keep runs with this tag (repeatable)"
    )
    args = p.parse_args(argv)
    if args.runs:
        if not Path(args.runs).is_dir():
            print(f"error: {args.runs} is not a directory of runs.", file=sys.stderr)
            return 2
        os.environ[RUNS_ENV] = str(Path(args.runs).resolve())
    rows = filter_rows(run_rows(list_runs()), args.search, args.state, args.tag)
    for row in rows:
        print(json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
