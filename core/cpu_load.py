"""How busy this machine's CPU is, read from /proc: what the app's server, its trainers and
the commands use to share the cores (``core.runs.cpu_share`` tells why one thread fewer pays
on a busy machine). No torch at import: the lightest commands import it too.
"""

from __future__ import annotations

import os
import time

BUSY_CORES = 0.6  # others' use (cores) above which a process takes one thread fewer
IDLE_CORES = 0.45  # ... and below which it takes every thread again
SAMPLE_S = 0.25  # how long a command looks at the machine before it starts


def machine_busy_seconds() -> float:
    """CPU seconds every process of this machine has used since boot (from /proc/stat)."""
    fields = open("/proc/stat").readline().split()[1:]  # cpu user nice system idle iowait ...
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_busy_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def others_cores(seconds: float = SAMPLE_S) -> float | None:
    """Cores the other processes use on average over the next ``seconds`` (None where
    /proc/stat cannot be read)."""
    try:
        start = (time.monotonic(), machine_busy_seconds(), own_busy_seconds())
        time.sleep(seconds)
        end = (time.monotonic(), machine_busy_seconds(), own_busy_seconds())
    except (OSError, ValueError):
        return None
    wall = max(end[0] - start[0], 1e-6)
    return max((end[1] - start[1]) - (end[2] - start[2]), 0.0) / wall


def command_threads(env=None) -> str | None:
    """Give a command the app's thread policy: on a machine where other processes keep more
    than BUSY_CORES busy, torch's default threads less one (two threads that wait for each
    other at every operation lose most of their speed when one shares its core: one forward
    pass took 0.53 s on two busy threads, 0.003 s on one). Set OMP_NUM_THREADS, or torch
    threads in the command, to decide yourself. Returns what it did, for stderr, or None."""
    env = os.environ if env is None else env
    if env.get("OMP_NUM_THREADS"):
        return None
    import torch  # here: a command that never computes does not pay for it

    full = torch.get_num_threads()
    if full < 2:
        return None
    busy = others_cores()
    if busy is None or busy <= BUSY_CORES:
        return None
    torch.set_num_threads(full - 1)
    return (
        f"note: the other processes keep {busy:.1f} cores busy: computing on {full - 1} of "
        f"{full} threads (set OMP_NUM_THREADS to choose)"
    )
