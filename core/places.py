"""Where the app keeps its files: the run and model directories, set by the environment."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


RUNS_ENV = "ATTENTION_STUDIO_RUNS"  # where run directories live (default <repo>/runs)


CHECKPOINTS_ENV = "ATTENTION_STUDIO_CHECKPOINTS"  # promoted models (default <repo>/checkpoints)


def runs_root() -> Path:
    """Directory of run directories (ATTENTION_STUDIO_RUNS or <repo>/runs), created."""
    root = Path(os.environ.get(RUNS_ENV) or REPO_ROOT / "runs")
    root.mkdir(parents=True, exist_ok=True)
    return root


def checkpoints_root() -> Path:
    """Directory of promoted models (ATTENTION_STUDIO_CHECKPOINTS or <repo>/checkpoints)."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or REPO_ROOT / "checkpoints")
