"""How busy this machine's CPU is, read from /proc: what the app's server, its trainers and
the commands use to share the cores (``core.runs.cpu_share`` tells why one thread fewer pays
on a busy machine). No torch at import: the lightest commands import it too.

A trainer's OpenMP threads may also wait for each other passively (``passive_waits``, where
``ATTENTION_STUDIO_PASSIVE_WAITS=1`` asks): a thread that sleeps between operations is woken
ahead of a process that keeps a core busy, where one that spins for its next operation takes
its turns like any busy loop; it costs a quiet machine a quarter of its speed, so it is off by
default (docs/training.md, "A trainer on a busy machine").
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import MutableMapping

BUSY_CORES = 0.6  # others' use (cores) above which a process takes one thread fewer
IDLE_CORES = 0.45  # ... and below which it takes every thread again
WAIT_CORES = 0.3  # a trainer's threads waiting this long per second for a core: one fewer
SAMPLE_S = 0.25  # how long a command looks at the machine before it starts
SHARE_ENV = "ATTENTION_STUDIO_TRAINER_SHARE"  # "0": a trainer keeps its threads and waits
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"  # read once, when torch loads OpenMP
WAIT_POLICY = "PASSIVE"  # a trainer's threads sleep between operations instead of spinning
PASSIVE_ENV = "ATTENTION_STUDIO_PASSIVE_WAITS"  # "1": they do (it costs ~28 % on a quiet CPU)


def machine_busy_seconds() -> float:
    """CPU seconds every process of this machine has used since boot (from /proc/stat)."""
    fields = open("/proc/stat").readline().split()[1:]  # cpu user nice system idle iowait ...
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_busy_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def run_delay_seconds() -> float:
    """Seconds this process's threads have waited, ready to run, for a core (the kernel's
    schedstat of each thread; a thread that has ended is no longer counted)."""
    total = 0
    for path in glob.glob("/proc/self/task/*/schedstat"):  # run time, run delay, slices (ns)
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # the thread ended while it was read
            continue
    return total / 1e9


def sharing(env=None) -> bool:
    """Whether a trainer shares the cores (``core.runs.cpu_share``): unless SHARE_ENV is
    "0" (the app sets "1"; a command by hand shares unless OMP_NUM_THREADS names its threads)."""
    env = os.environ if env is None else env
    if env.get(SHARE_ENV) in ("0", "1"):
        return env[SHARE_ENV] == "1"
    return not env.get("OMP_NUM_THREADS")


def passive_waits(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Set a trainer's OpenMP wait policy to WAIT_POLICY in ``env`` where PASSIVE_ENV asks for
    it, it shares the cores and nobody chose one; ``env``. Only a process that has not loaded
    torch yet reads it. Off by default: on a quiet machine it trains the "small" preset at 9.0
    against 12.6 thousand tokens/s (spinning waits; docs/training.md)."""
    if env.get(PASSIVE_ENV) == "1" and sharing(env) and not env.get(WAIT_POLICY_ENV):
        env[WAIT_POLICY_ENV] = WAIT_POLICY
    return env


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
