"""Locks between sessions and processes: one launch at a time, and the GPU slots."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from core.places import runs_root
from core.run_dir import RunError, read_json


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
