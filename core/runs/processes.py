"""Trainer processes: which pid is our trainer (checked, never guessed), signals, reaping.

A pid alone is not an identity: after a reboot, or once a trainer has exited, the same
number can belong to an unrelated process. At launch the app records the trainer's
identity (the boot id and the process start time, from Linux's /proc); every check and
every signal compares it first. Where it cannot be read (no /proc, another user's
process), the answer is "unknown" and nothing is signalled.

A run trained by several processes is launched as ``python -m core.train --out RUN
--processes N``: that agent (``core.runs.launcher``) is the trainer the app records, checks,
signals and reaps; it passes SIGTERM on to its workers (each in a session of its own),
and a SIGKILL is sent to the verified workers too, since none could pass it on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

PROC = Path("/proc")  # where Linux shows processes (tests point it elsewhere)
_CHILDREN: dict[int, subprocess.Popen] = {}  # trainers started by this process, reaped by poll()


def adopt(proc: subprocess.Popen) -> None:
    """Remember a trainer started here and collect its exit status when it ends (no zombie)."""
    _CHILDREN[proc.pid] = proc
    threading.Thread(target=_reap_when_done, args=(proc,), daemon=True).start()


def _reap_when_done(proc: subprocess.Popen) -> None:
    """Wait for a child to exit, then forget it (runs in a daemon thread)."""
    proc.wait()
    _CHILDREN.pop(proc.pid, None)


def reap() -> None:
    """Collect exit codes of finished trainers started here (no zombies)."""
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None where unreadable."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def identity(pid) -> str | None:
    """'<boot id>:<start time>' of a running process (a recycled pid cannot repeat it)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    fields = _stat_fields(pid)
    try:
        boot = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None
    return f"{boot}:{fields[19]}" if fields and len(fields) > 19 else None  # field 22


def _runs_in(pid: int, path: Path) -> bool | None:
    """Whether the process's command line is ``core.train`` for ``path`` (None: unreadable)."""
    try:
        args = (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return _gone_or_unknown(pid)
    target = os.path.realpath(path)
    return "core.train" in args and any(
        os.path.realpath(os.path.join(cwd, a)) == target for a in args if a
    )


def _gone_or_unknown(pid: int) -> bool | None:
    """After /proc could not be read for ``pid``: False if it exited or is exiting (a dying
    process has no cwd), None if /proc is unavailable or hides it (it may still run)."""
    if not (PROC / "self" / "stat").exists():
        return None  # no /proc here at all
    fields = _stat_fields(pid)
    return False if fields is None or fields[0] in ("Z", "X") else None  # exited / exiting


def check_trainer(pid, path: Path, recorded: str | None) -> bool | None:
    """True: ``pid`` is the trainer of ``path``; False: it is not (or gone); None: unknown.

    ``recorded`` is the identity written at launch (None for runs from older versions:
    then the command line alone decides).
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    reap()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None  # exists, but belongs to another user: not ours to judge or signal
    fields = _stat_fields(pid)
    if fields is None:
        return _gone_or_unknown(pid)
    if fields[0] == "Z":
        return False
    if recorded is not None and identity(pid) != recorded:
        return False  # the pid was recycled
    return _runs_in(pid, path)


def workers(pid: int, path: Path) -> list[int]:
    """The children of ``pid`` that are trainers of ``path`` (a torchrun agent's ranks)."""
    kids = []
    for entry in PROC.glob("[0-9]*"):
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 1 and fields[1] == str(pid) and _runs_in(int(entry.name), path):
            kids.append(int(entry.name))
    return kids


def signal_trainer(pid, path: Path, recorded: str | None, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to the trainer of ``path`` only if ``pid`` is verified to be it.

    SIGKILL goes to its workers first (a torchrun agent's), as a killed agent cannot stop them.
    """
    if check_trainer(pid, path, recorded) is not True:
        return False
    for worker in workers(pid, path) if sig == signal.SIGKILL else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, sig)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
