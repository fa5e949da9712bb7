"""How often an open page polls a live run: its state, its curves, the runs table, its
snapshots. ``ATTENTION_STUDIO_POLL_SECONDS`` sets the pace (a class server may poll less
often; the browser tests poll every second)."""

from __future__ import annotations

import os

POLL_ENV = "ATTENTION_STUDIO_POLL_SECONDS"  # how often a watcher polls a live run (1-60 s)
DEFAULT_POLL_S = 5.0  # the pace where the variable is unset


def poll_seconds(default: float = DEFAULT_POLL_S) -> float:
    """Seconds between updates of a live run's state: ``ATTENTION_STUDIO_POLL_SECONDS``
    (clamped to 1-60; the default where unset or not a number). A class server may poll
    less often; the browser tests poll every second."""
    try:
        value = float(os.environ.get(POLL_ENV, default))
    except ValueError:
        return default
    return min(max(value, 1.0), 60.0) if value == value else default  # NaN: the default


POLL_S = poll_seconds()  # seconds between updates of a live run's state and progress bar
CURVES_POLL_S = 2 * POLL_S  # between redraws of its curves (bench/watch_cost.py)
TABLE_POLL_S = 2 * POLL_S  # between updates of the all-runs table while a run is live
