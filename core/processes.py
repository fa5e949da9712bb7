"""Trainer processes: which pid is our trainer, which is alive, and reaping the finished."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_CHILDREN: dict[int, subprocess.Popen] = {}  # trainers started by this process, reaped by poll()


def adopt(proc: subprocess.Popen) -> None:
    """Remember a trainer started here, so its exit status is collected (no zombies)."""
    _CHILDREN[proc.pid] = proc


def reap() -> None:
    """Collect exit codes of finished trainers started here (no zombies)."""
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def pid_alive(pid) -> bool:
    """True if a process with this pid exists and is not a zombie."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    reap()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_trainer(pid, path: Path) -> bool:
    """True if ``pid`` is alive and is ``core.train`` writing into ``path``."""
    if not pid_alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return True  # no /proc: trust the pid
    target = os.path.realpath(path)
    return "core.train" in args and any(
        os.path.realpath(os.path.join(cwd, a)) == target for a in args if a
    )
