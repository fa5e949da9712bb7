"""Sharing the CPU between the app's server and its trainers, so neither starves the other.

torch runs an operation on all its threads, and they wait for each other at its end. When
another busy process holds one of the cores, a trainer on every core runs at the pace of its
thread that shares that core: on a 2-core machine beside one busy process, a "small" run on
two threads kept 0.07 of its tokens/s, on one thread 0.53 (26 November 2026, AMD EPYC).
Beside a server answering a class (no browsers on the machine, ``bench/load.py --browsers
none``), two threads kept 0.73 of it where the server used 0.32 cores (one thread: 0.52),
0.45 at 0.62 (0.47) and 0.32 at 0.85 (0.43): one thread fewer pays past about 0.6 cores.

- The server answers one sentence at a time, operations too small to gain from a second
  thread: its pages compute on ``SERVER_THREADS``; heavy work (head importance, one at a
  time per server) gets torch's default back while it runs (``all_threads``).
- A CPU trainer on torch's default threads, the app's and the command's alike (``SHARE_ENV``
  "0" turns it off; a command by hand with ``OMP_NUM_THREADS`` keeps its count), measures
  after each step, once ``MIN_WINDOW_S`` have passed (a timer, not the metrics cadence: a
  starved run once kept two threads for 6.5 minutes until its next record), how much of the
  machine the other processes used and how long its own threads waited for a core: past
  ``BUSY_CORES``, or on all its threads past ``WAIT_CORES`` of waiting (a busy loop that
  shares a core with a spinning trainer thread shows as half a core, not one), it trains on
  one thread fewer, below ``IDLE_CORES`` on all of them again (``CpuShare``): beside a spin
  loop started mid-run a two-thread command kept 0.27 of its speed before, 0.45-0.46 now; its
  threads may also wait passively (``core.cpu_load.passive_waits``, opt-in: 0.68, but 28 %
  slower on a quiet machine; docs/training.md, "A trainer on a busy machine").
- Another command (``python -m core.*``) looks at the machine for a quarter of a second before it
  starts and takes one thread fewer past ``BUSY_CORES`` (``core.cpu_load.command_threads``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

import torch

from core.cpu_load import (
    BUSY_CORES,
    IDLE_CORES,
    SHARE_ENV,
    WAIT_CORES,
    machine_busy_seconds,
    own_busy_seconds,
    run_delay_seconds,
    sharing,
)

__all__ = [
    "BUSY_CORES",
    "IDLE_CORES",
    "SHARE_ENV",
    "WAIT_CORES",
    "machine_busy_seconds",
    "own_busy_seconds",
    "run_delay_seconds",
]
SERVER_THREADS = 1  # torch threads of the server's pages (one sentence at a time)
MIN_WINDOW_S = 2.0  # the shortest span a measurement covers

_default_threads: int | None = None  # torch's own count, before the server set its own
_lock = threading.Lock()
_heavy = 0  # heavy computations running now (each asked for every thread)


def server_threads() -> int:
    """Give this process (the app's server) SERVER_THREADS torch threads; torch's default is
    kept for ``all_threads``. Called at each page run; returns the count now."""
    global _default_threads
    with _lock:
        if _default_threads is None:
            _default_threads = torch.get_num_threads()
        if not _heavy and torch.get_num_threads() != SERVER_THREADS:
            torch.set_num_threads(SERVER_THREADS)
    return torch.get_num_threads()


def default_threads() -> int:
    """torch's default thread count: what a new process (a trainer) starts with, whatever
    this one was given (the server runs on SERVER_THREADS)."""
    with _lock:
        return _default_threads or torch.get_num_threads()


@contextlib.contextmanager
def all_threads():
    """torch's default thread count while heavy work runs (back to SERVER_THREADS after,
    once no heavy work is left); unchanged in a process that never called server_threads."""
    global _heavy
    with _lock:
        _heavy += 1
        if _default_threads is not None:
            torch.set_num_threads(_default_threads)
    try:
        yield
    finally:
        with _lock:
            _heavy -= 1
            if _default_threads is not None and not _heavy:
                torch.set_num_threads(SERVER_THREADS)


class CpuShare:
    """A trainer's thread count, from what the other processes use (see the module's text).

    ``machine`` and ``own`` read CPU seconds, ``waited`` the seconds this process's threads
    waited for a core and ``clock`` wall seconds (injectable, so a test drives them); ``full``
    is the thread count when the machine is free.
    """

    def __init__(
        self,
        full: int,
        machine: Callable[[], float] = machine_busy_seconds,
        own: Callable[[], float] = own_busy_seconds,
        clock: Callable[[], float] = time.monotonic,
        apply: Callable[[int], None] = torch.set_num_threads,
        waited: Callable[[], float] = run_delay_seconds,
    ):
        self.full, self.threads = full, full
        self.machine, self.own, self.clock, self.apply = machine, own, clock, apply
        self.waited = waited
        self.mark = self.read()
        self.changes = 0  # how often the count changed (reported in the run's log)

    def read(self) -> tuple[float, float, float, float]:
        """Wall, machine, own and waited seconds now."""
        return self.clock(), self.machine(), self.own(), self.waited()

    def measure(self) -> tuple[float, float] | None:
        """Cores the other processes used, and cores' worth of time this process's threads
        waited for one, on average since the last measurement (None when it covers less than
        MIN_WINDOW_S; the mark moves only when it does not)."""
        if self.clock() - self.mark[0] < MIN_WINDOW_S:
            return None  # checked at every step: the clock alone until a window has passed
        now = self.read()
        wall = now[0] - self.mark[0]
        others = (now[1] - self.mark[1]) - (now[2] - self.mark[2])
        waited = now[3] - self.mark[3]  # < 0 where a thread that had waited has ended
        self.mark = now
        return max(others, 0.0) / wall, max(waited, 0.0) / wall

    def wanted(self, others: float, waited: float) -> int:
        """The thread count for a window in which the others used ``others`` cores and this
        process's threads waited ``waited`` (on all threads: a thread that shares its core
        with a busy loop waits, even where the loop, sharing with it, shows as half a core)."""
        if others > BUSY_CORES or (self.threads == self.full and waited > WAIT_CORES):
            return self.full - 1
        if others < IDLE_CORES:
            return self.full
        return self.threads

    def update(self) -> int:
        """Measure, then take one thread fewer or all of them; the thread count now."""
        measured = self.measure()
        if measured is None or self.full < 2:
            return self.threads
        wanted = self.wanted(*measured)
        if wanted != self.threads:
            self.apply(wanted)
            self.threads, self.changes = wanted, self.changes + 1
            print(
                f"Sharing the CPU: training on {wanted} of {self.full} threads (the other "
                f"processes used {measured[0]:.1f} cores, its threads waited "
                f"{measured[1]:.1f} s a second for one, since the last record)",
                flush=True,
            )
        return self.threads


def trainer_share(device_type: str, threads_setting: int, env=None) -> CpuShare | None:
    """The CpuShare of a trainer: only on CPU, sharing (``core.cpu_load.sharing``: the app's
    and a command's, unless SHARE_ENV is "0") and with torch's default thread count (a run
    that names its threads keeps them)."""
    if device_type != "cpu" or threads_setting or not sharing(env):
        return None
    if not os.path.isfile("/proc/stat"):
        return None
    return CpuShare(torch.get_num_threads())
