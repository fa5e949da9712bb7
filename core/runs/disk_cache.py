"""The app's disk caches (``.ablation``, ``.attribution``, ``.trajectories`` under the runs
folder): JSON objects stored by key, each folder kept under budget.DISK_CACHE_BYTES.

A hit marks its file as used (its modification time), so past the limit the least recently
used results go first. A failure to write is ignored: a cache only saves time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from core.runs.budget import DISK_CACHE_BYTES

STALE_SECONDS = 600  # a temporary file this old was left by a write that died (killed)


def read_cached(folder: Path, key: str) -> dict | None:
    """The JSON object stored under ``key`` in ``folder``, or None (missing or unreadable)."""
    path = folder / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # used now: the last to go
    return data if isinstance(data, dict) else None


def stored_keys(folder: Path) -> str:
    """A digest of the keys ``folder`` holds now: it changes when any process stores a new
    result or the limit drops one (not when a hit marks its file used), so a cache of what
    was read from the folder, kept in memory for every session, knows when to read again."""
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".json"))
    except OSError:
        names = []
    return hashlib.sha1("\n".join(names).encode()).hexdigest()


def write_cached(folder: Path, key: str, data: dict, limit: int = DISK_CACHE_BYTES) -> None:
    """Store a JSON object under ``key`` (temporary file, then rename), then keep the folder
    within ``limit`` bytes; failures are ignored."""
    path = folder / f"{key}.json"
    text = json.dumps(data)
    if len(text) > limit:
        return  # larger than the whole cache: not kept
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # its own
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a partial file (the disk full) is not left behind
        return
    drop_stale(folder)
    prune(folder, limit, keep=path)


def drop_stale(folder: Path, now: float | None = None) -> list[Path]:
    """Delete the temporary files of ``folder`` older than STALE_SECONDS (writes a killed
    process never finished, which ``prune``'s pattern does not count); the deleted paths."""
    now, gone = time.time() if now is None else now, []
    for tmp in folder.glob("*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > STALE_SECONDS:
                tmp.unlink()
                gone.append(tmp)
    return gone


def prune(
    folder: Path, limit: int, keep: Path | None = None, pattern: str = "*.json"
) -> list[Path]:
    """Delete the least recently used files of ``folder`` (those ``pattern`` matches) until
    they hold at most ``limit`` bytes (``keep`` stays); the deleted paths are returned."""
    files = []
    for path in folder.glob(pattern):
        with contextlib.suppress(OSError):
            st = path.stat()
            files.append((st.st_mtime_ns, st.st_size, path))
    total, gone = sum(size for _, size, _ in files), []
    for _, size, path in sorted(files):
        if total <= limit:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
            gone.append(path)
    return gone
