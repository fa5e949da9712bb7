"""Where the eflomal aligner is, for a run that asks it to teach a head to align.

eflomal (Östling & Tiedemann 2016) is GPLv3, so the studio never imports it:
``pip install eflomal`` (in this environment or any other) installs an ``eflomal-align``
program, found on the PATH or beside this Python, or ``ATTENTION_STUDIO_EFLOMAL`` names it.
``core.alignment.eflomal_teacher`` runs it; the Train form and the launcher ask here first.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

EFLOMAL = "eflomal"  # --align-teacher / a run's request: the aligner, not a checkpoint
PROGRAM_ENV = "ATTENTION_STUDIO_EFLOMAL"  # the eflomal-align program, if not on the PATH
PROGRAM = "eflomal-align"


def eflomal_program() -> str | None:
    """The eflomal-align program: $ATTENTION_STUDIO_EFLOMAL, the PATH, or beside this Python
    (None: not installed)."""
    named = os.environ.get(PROGRAM_ENV)
    if named:
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    beside = Path(sys.executable).parent / PROGRAM
    return shutil.which(PROGRAM) or (str(beside) if beside.is_file() else None)


def missing_line() -> str:
    """What to do when eflomal is not installed, in one line."""
    return (
        "eflomal is not installed: `pip install eflomal` (GPLv3; the studio runs it as a "
        f"separate program), or set `{PROGRAM_ENV}` to its `eflomal-align` program."
    )
