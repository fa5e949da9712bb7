"""Cached calls of the "Over training" section: head trajectories and whether a run is live."""

from __future__ import annotations

from pathlib import Path

from core.alignment.head_aer import head_trajectories
from core.attention.trajectories import Trajectories
from core.runs import status as run_status
from core.runs.run_dir import RunError
from pages.ui.progress import LateProgress
from pages.ui.shared_cache import shared


@shared()
def trajectories(
    source: str, checkpoint: str | None, steps: tuple, sentences: int, stored: str
) -> Trajectories:
    """Every head's trajectory on the probe maps, plus the validation numbers already on
    disk (re-read when new snapshots arrive, ``steps``, or when the disk cache holds new
    results, ``stored``: a measurement by any session or by the command). A progress bar
    shows when it runs past a second."""
    report = LateProgress()
    try:
        return head_trajectories(source, checkpoint, sentences, "cached", progress=report)
    finally:
        report.done()


def run_is_live(run_dir: str | None) -> bool:
    """Whether the run a model comes from is training now (False for no run or a bad one)."""
    if not run_dir:
        return False
    try:
        return run_status.run_info(Path(run_dir).name).live
    except (RunError, OSError, ValueError):
        return False
