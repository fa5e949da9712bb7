"""The devices training can use: which one, in words, its memory, and what a run needs."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import subprocess
from pathlib import Path

import torch


def pick_device(name: str = "auto") -> torch.device:
    """CUDA, then Apple MPS, then CPU for "auto"; an explicit name must be available."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but no CUDA GPU is available")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device 'mps' was asked for, but Apple MPS is not available")
    return torch.device(name)


def device_description(device: torch.device, threads: int | None = None) -> str:
    """A readable device name, e.g. 'cuda (NVIDIA H100)' or 'cpu (2 threads)' (``threads``:
    the count to name, else this process's own)."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        n = threads or torch.get_num_threads()
        return f"cpu ({n} thread{'s' * (n != 1)})"
    return device.type


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True if this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), read on Linux."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bfloat16 where the device runs it fast (CUDA with bf16, native-bf16 CPUs), else None."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "cpu" and cpu_has_native_bf16():
        return torch.bfloat16
    return None


def resolve_device(name: str = "auto") -> str:
    """The device type a run asking for ``name`` would train on: cuda, mps or cpu."""
    return pick_device(name).type


@functools.lru_cache(maxsize=1)
def device_summary(threads: int | None = None) -> str:
    """The device a new run would use with device 'auto', in words (``threads``: what a new
    trainer process starts with, where this process runs on fewer, as the app's server does)."""
    return device_description(pick_device("auto"), threads)


def gpu_stats() -> list[dict]:
    """Utilisation and memory of each NVIDIA GPU (empty without nvidia-smi)."""
    query = "--query-gpu=name,utilization.gpu,memory.used,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=3,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            rows.append(
                {
                    "name": parts[0],
                    "util": float(parts[1]),
                    "mem_used_mb": float(parts[2]),
                    "mem_total_mb": float(parts[3]),
                }
            )
    return rows


def device_memory(device_type: str) -> int | None:
    """Bytes a run may use: the GPU's total memory, or the RAM available now (None if unknown)."""
    if device_type == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _vocab_guess(data: dict) -> int:
    """A generous guess of the vocabulary size these data settings produce."""
    rows = data.get("num_train") if data.get("split") == "head" else 0
    rows = rows or data.get("max_pairs") or 200_000
    size = data.get("bpe_vocab", 8000) if data.get("tokenizer") == "bpe" else data["max_vocab"]
    return max(8, min(int(size), 20_000, 8 + 3 * int(rows)))


def estimate_memory(cfg: dict[str, dict]) -> int:
    """Rough bytes one training step needs: weights, gradients, Adam, activations."""
    d, m, t = cfg["data"], cfg["model"], cfg["train"]
    v, dm, ff, h = _vocab_guess(d), m["d_model"], m["d_ff"], m["num_heads"]
    le, ld = m["num_encoder_layers"], m["num_decoder_layers"]
    seq, batch = d["max_len"] + 2, t["batch_size"]
    params = 3 * v * dm + le * (4 * dm * dm + 2 * dm * ff) + ld * (8 * dm * dm + 2 * dm * ff)
    positions = 2 * m.get("max_positions", 512) * dm  # the sinusoid table, encoder and decoder
    per_token = (
        le * (10 * dm + 2 * ff + 3 * h * seq) + ld * (16 * dm + 2 * ff + 5 * h * seq) + 4 * v
    )  # floats kept for backward per target position
    return 4 * (4 * params + positions + batch * seq * per_token)


def gigabytes(n_bytes: float) -> str:
    """A memory size for people: '1.5 GB', '2,346 GB', '3.6 billion GB', '4.2e+15 GB'."""
    gb = n_bytes / 2**30
    if gb < 1000:
        return f"{gb:.1f} GB"
    if gb < 1e6:
        return f"{gb:,.0f} GB"
    if gb >= 1e15:
        return f"{gb:.1e} GB"
    scale, word = (
        (1e12, "trillion") if gb >= 1e12 else (1e9, "billion") if gb >= 1e9 else (1e6, "million")
    )
    return f"{gb / scale:.1f} {word} GB"


def memory_problem(cfg: dict, device_type: str) -> str | None:
    """A reason if the batch clearly cannot fit in the device's memory."""
    need, have = estimate_memory(cfg), device_memory(device_type)
    if have is None or need <= 0.8 * have:
        return None
    return (
        f"a batch of {cfg['train']['batch_size']} needs about {gigabytes(need)} on "
        f"{device_type} but only {gigabytes(have)} is available; lower batch_size, max_len, "
        "max_vocab or d_model"
    )


MEMORY_ENV = "ATTENTION_STUDIO_TRAINER_MEMORY_GB"  # a CPU trainer's address-space cap (GB)
NICE_ENV = "ATTENTION_STUDIO_TRAINER_NICE"  # the niceness a trainer gives itself at start
TRAINER_NICE = 10  # the app's trainers: below the server, which answers the pages
AUTOGROUP = "/proc/self/autogroup"  # this session's scheduling group (Linux)
MEMORY_SHARE = 0.75  # the app's trainers (all processes of a run) take at most this share of RAM


def total_memory() -> int | None:
    """Bytes of RAM of this machine (None if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_gb(processes: int = 1) -> float | None:
    """Each process's share of MEMORY_SHARE of the RAM, in GB (the app's default cap)."""
    total = total_memory()
    return round(MEMORY_SHARE * total / max(processes, 1) / 2**30, 2) if total else None


def memory_limit(env=None) -> int | None:
    """Bytes of address space a CPU training process may take: ATTENTION_STUDIO_TRAINER_MEMORY_GB
    (set by the app at launch; unset or 0: no cap)."""
    env = os.environ if env is None else env
    try:
        gb = float(env.get(MEMORY_ENV) or 0)
    except ValueError:
        return None
    return int(gb * 2**30) if gb > 0 and math.isfinite(gb) else None


def lower_priority(env=None, autogroup: str = AUTOGROUP) -> int:
    """Raise this process's niceness to ATTENTION_STUDIO_TRAINER_NICE (set by the app at
    launch, 0-19; unset: unchanged); the niceness it has now.

    Where Linux groups processes by session (``kernel.sched_autogroup_enabled``, on in most
    desktop distributions) a niceness counts only inside the session: the app starts each
    trainer in a session of its own, so the session's niceness (``autogroup``) is raised too,
    or the trainer would weigh as much as the whole server."""
    env = os.environ if env is None else env
    try:
        wanted = min(max(int(env.get(NICE_ENV) or 0), 0), 19)
    except ValueError:
        wanted = 0
    now = os.nice(0)
    if wanted and os.getsid(0) == os.getpid():  # the leader of its own session
        with contextlib.suppress(OSError):
            Path(autogroup).write_text(str(wanted))
    return os.nice(wanted - now) if wanted > now else now


def limit_memory(device_type: str) -> int | None:
    """Cap this process's address space (CPU runs; CUDA maps far more than it uses), so a run
    that outgrows it (a corpus of millions of tiny pairs, a batch too large) fails with
    MemoryError instead of making the machine swap; the cap, or None."""
    limit = memory_limit() if device_type == "cpu" else None
    if limit is None:
        return None
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit
