"""Locks between sessions and processes: one launch at a time, and the GPU slots."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from core.places import runs_root
from core.runs.run_dir import RunError, read_json


@contextlib.contextmanager
def launch_lock():
    """Serialise launches and state repairs across sessions and processes."""
    with open(runs_root() / ".launch.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def acquire_gpu_lock(run_id: str, slots: int) -> int:
    """An open fd holding one of the GPU slots (flock), or RunError naming the holder."""
    holders = []
    for slot in range(slots):
        path = runs_root() / f".gpu.lock.{slot}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holders.append(read_json(path, {}) or {})
            os.close(fd)
            continue
        write_lock(fd, {"run_id": run_id, "pid": os.getpid()})
        return fd
    who = ", ".join(f"run {h.get('run_id', '?')} (pid {h.get('pid', '?')})" for h in holders)
    raise RunError(
        f"The GPU is busy: {who} holds it. One GPU job runs at a time; wait for it "
        "to finish, stop it, or set the device to 'cpu'."
    )


def write_lock(fd: int, holder: dict) -> None:
    """Record who holds a lock inside the lock file (for the busy message)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


TRAINER_LOCK = ".trainer.lock"  # inside a run directory: held by its trainer while it runs


def hold_run(path) -> int:
    """Lock a run directory for this trainer (an fd to keep open), or RunError if taken.

    The kernel drops the lock when the process ends, however it ends, so a lock that is
    held means a trainer of this run is running.
    """
    fd = os.open(os.path.join(path, TRAINER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = (read_json(os.path.join(path, TRAINER_LOCK), {}) or {}).get("pid", "?")
        os.close(fd)
        raise RunError(
            f"Run {os.path.basename(path)} is already being trained by another process "
            f"(pid {holder}); stop it first."
        ) from None
    write_lock(fd, {"pid": os.getpid()})
    return fd


def run_is_held(path) -> bool:
    """True while some process holds the run's trainer lock."""
    lock = os.path.join(path, TRAINER_LOCK)
    if not os.path.exists(lock):
        return False
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
