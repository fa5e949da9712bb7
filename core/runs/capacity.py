"""How much training this machine takes at once: jobs per device kind, processes per run.

``ATTENTION_STUDIO_MAX_CPU_JOBS`` CPU jobs and ``ATTENTION_STUDIO_MAX_GPU_JOBS`` GPU jobs
may run at once (one of each by default); a run trains with at most one process per GPU or
per CPU core, and its processes must fit the memory. ``core.runs.jobs`` asks here before it
launches. No Streamlit here.
"""

from __future__ import annotations

import os

from core.runs import run_bytes
from core.runs.run_dir import RunError
from core.runs.status import list_runs
from core.training.devices import device_memory, estimate_memory, gigabytes, resolve_device
from core.training.settings import merged_settings, validate_settings

MAX_CPU_JOBS_ENV = "ATTENTION_STUDIO_MAX_CPU_JOBS"  # concurrent CPU jobs (default 1)
MAX_GPU_JOBS_ENV = "ATTENTION_STUDIO_MAX_GPU_JOBS"  # concurrent GPU jobs (default 1)


def _env_int(name: str, default: int) -> int:
    """A positive integer from the environment, or ``default``."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def max_cpu_jobs() -> int:
    """How many CPU training jobs may run at once."""
    return _env_int(MAX_CPU_JOBS_ENV, 1)


def max_gpu_jobs() -> int:
    """How many GPU training jobs may run at once (one by default)."""
    return _env_int(MAX_GPU_JOBS_ENV, 1)


def max_processes(device_type: str) -> int:
    """How many processes one run may train with: one per GPU, or per CPU core."""
    if device_type == "cuda":
        import torch

        return max(1, torch.cuda.device_count())
    if device_type == "cpu":
        return max(1, os.cpu_count() or 1)
    return 1  # Apple MPS: one process


def processes_problem(processes, device_type: str, cfg: dict | None = None) -> str | None:
    """Why a run cannot train with ``processes`` processes on ``device_type`` (None: it can)."""
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        return f"processes must be a whole number, 1 or more (got {processes!r})"
    most = max_processes(device_type)
    if processes > most:
        what = "GPU" if device_type == "cuda" else "CPU core" if device_type == "cpu" else ""
        where = f"{most} {what}{'s' if most > 1 else ''} here" if what else device_type
        return f"processes ({processes}) cannot exceed {most} on {where}"
    have = device_memory(device_type) if device_type == "cpu" else None
    need = estimate_memory(cfg) * processes if cfg and processes > 1 else 0
    if have is not None and need > 0.8 * have:
        return (
            f"{processes} processes need about {gigabytes(need)} of memory but only "
            f"{gigabytes(have)} is available; use fewer processes or a smaller batch_size"
        )
    return None


def launch_problems(
    preset: str, overrides: dict | None, processes, any_source: bool = False
) -> list[str]:
    """Human reasons why a new run cannot start with these settings and processes ([]: it can;
    ``any_source``: the command line's, which reads a corpus at any path)."""
    problems = validate_settings(preset, overrides, any_source)
    if problems:
        return problems
    cfg = merged_settings(preset, overrides)
    device_type = resolve_device(cfg["train"]["device"])
    problems = [p for p in [processes_problem(processes, device_type, cfg)] if p]
    return problems + run_bytes.run_problems(cfg)  # what this server holds of it


def command_problems(preset: str, settings: dict, processes: int, read_later: bool) -> list[str]:
    """What the Train page's Launch refuses of ``python -m core.train``'s flags, before any
    corpus is read: a new run's settings and processes (``launch_problems``); with
    ``read_later`` (a resume, the app's request.json: the settings are the run's own, checked
    as they are read) its processes alone."""
    if not read_later:
        return launch_problems(preset, settings, processes, any_source=True)
    device_type = resolve_device(settings.get("train", {}).get("device", "auto"))
    return [p for p in [processes_problem(processes, device_type)] if p]


def check_cpu_capacity() -> None:
    """RunError if the allowed number of CPU jobs are already running."""
    live = [r for r in list_runs() if r.alive and r.device_type != "cuda"]
    if len(live) >= max_cpu_jobs():
        names = ", ".join(r.run_id for r in live)
        raise RunError(
            f"{len(live)} CPU training job(s) already running ({names}); the limit is "
            f"{max_cpu_jobs()} (set {MAX_CPU_JOBS_ENV} to change it). Stop a run or "
            "wait for it to finish."
        )
