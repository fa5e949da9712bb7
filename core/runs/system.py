"""What the training process costs the machine, sampled at each metrics record (cheaply).

CPU is the process's CPU time over wall time since the last sample, all threads together
(100 % is one core busy); memory is the resident set now (Linux ``/proc/self/statm``,
elsewhere the peak ``getrusage`` reports) and the peak so far (``getrusage``); GPU memory
is what torch's caching allocator holds on the current CUDA device, when one is in use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
import time

import torch

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _glibc_trim():
    """glibc's ``malloc_trim``, or None where the C library is another (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


MALLOC_TRIM = _glibc_trim() if sys.platform.startswith("linux") else None


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc); elsewhere nothing.

    Each batch has its own shape, so a training step frees and allocates buffers of
    sizes glibc has not seen, and its heap keeps the freed ones: a "small" run on one
    thread grew from 0.8 GB after setup to 1.75 GB in 240 steps, of which 0.5 GB was free
    heap that ``malloc_trim`` gave back. The recorder trims at every metrics record.
    """
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


def peak_resident_mb() -> float:
    """The most resident memory this process has held so far, in MB (``getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, B on macOS
    return peak * (1 if sys.platform == "darwin" else 1024) / 1e6


def resident_mb() -> float:
    """Resident memory of this process in MB (the peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE / 1e6
    except (OSError, ValueError, IndexError):
        return peak_resident_mb()


class ProcessMeter:
    """Samples CPU %, resident memory and GPU memory; each CPU % covers the time since the
    previous sample."""

    def __init__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def sample(self) -> dict:
        """{"cpu_percent", "rss_mb", "peak_rss_mb"} (+ "gpu_mem_mb" on CUDA) now."""
        cpu, wall = time.process_time(), time.perf_counter()
        busy = 100 * (cpu - self.cpu) / max(wall - self.wall, 1e-9)
        self.cpu, self.wall = cpu, wall
        out = {"cpu_percent": round(busy, 1), "rss_mb": round(resident_mb(), 1)}
        out["peak_rss_mb"] = round(peak_resident_mb(), 1)  # since the process started
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["gpu_mem_mb"] = round(torch.cuda.memory_allocated() / 1e6, 1)
        return out
