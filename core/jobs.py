"""Training jobs: start, resume, stop and delete ``python -m core.train`` processes.

Each job is its own OS process writing into its run directory, so it survives page
reloads, closed tabs and server restarts; the disk is the source of truth, never a
Streamlit session. ``ATTENTION_STUDIO_MAX_GPU_JOBS`` GPU jobs (an ``fcntl.flock`` slot
each, held by the trainer until it exits) and ``ATTENTION_STUDIO_MAX_CPU_JOBS`` CPU jobs
may run at once (one of each by default). No Streamlit here.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from core import processes
from core.corpus_files import UPLOADS
from core.devices import resolve_device
from core.locks import acquire_gpu_lock, launch_lock, write_lock
from core.places import REPO_ROOT, runs_root
from core.run_dir import RunDir, RunError, read_json, run_dir, write_json
from core.run_status import LIVE_STATES, RunInfo, list_runs, run_info
from core.settings import merged_settings, to_flags, validate_settings

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


def _check_cpu_capacity() -> None:
    """RunError if the allowed number of CPU jobs are already running."""
    live = [r for r in list_runs() if r.alive and r.device_type != "cuda"]
    if len(live) >= max_cpu_jobs():
        names = ", ".join(r.run_id for r in live)
        raise RunError(
            f"{len(live)} CPU training job(s) already running ({names}); the limit is "
            f"{max_cpu_jobs()} (set {MAX_CPU_JOBS_ENV} to change it). Stop a run or "
            "wait for it to finish."
        )


def _new_run_dir(preset: str) -> RunDir:
    """Create a fresh run directory named like 20261122-013000-small."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{preset}"
    for i in range(1, 1000):
        path = runs_root() / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return RunDir(path)
    raise RunError("Could not create a run directory (too many runs this second).")


def _stage_source(rd: RunDir, source: str) -> str:
    """Absolute corpus path for the trainer; staged uploads are copied into the run."""
    if source == "fra-eng":
        return source
    path = Path(source).expanduser().resolve()
    if path.parent == (runs_root() / UPLOADS).resolve():
        dest = rd.path / ("data" + path.suffix)
        shutil.copyfile(path, dest)
        return str(dest)
    return str(path)


def _launch(rd: RunDir, argv: list[str], job: dict, gpu_fd: int | None) -> None:
    """Start the trainer in its own session, log to train.log, record its pid."""
    job["launched_at"] = time.time()
    write_json(rd.job, {**job, "pid": None})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(rd.log, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            pass_fds=(gpu_fd,) if gpu_fd is not None else (),
        )
    processes.adopt(proc)
    job["pid"] = proc.pid
    job.setdefault("launches", []).append({"pid": proc.pid, "at": job["launched_at"]})
    write_json(rd.job, job)
    if gpu_fd is not None:
        write_lock(gpu_fd, {"run_id": rd.name, "pid": proc.pid})


@contextlib.contextmanager
def _device_slot(device_type: str, run_id: str):
    """Hold a GPU slot (yielding its fd for the trainer) or check the CPU job limit."""
    if device_type != "cuda":
        _check_cpu_capacity()
        yield None
        return
    fd = acquire_gpu_lock(run_id, max_gpu_jobs())
    try:
        yield fd
    finally:
        os.close(fd)  # the trainer keeps its own copy of the locked file open


def start_run(preset: str, overrides: dict | None = None) -> str:
    """Validate settings, then launch ``python -m core.train`` in a new run; returns its id."""
    overrides = copy.deepcopy(overrides or {})
    problems = validate_settings(preset, overrides)
    if problems:
        raise RunError("Cannot start: " + "; ".join(problems) + ".")
    cfg = merged_settings(preset, overrides)
    device_type = resolve_device(cfg["train"]["device"])
    with launch_lock():
        rd = _new_run_dir(preset)
        try:
            with _device_slot(device_type, rd.name) as gpu_fd:
                source = cfg["data"].get("source", "fra-eng")
                overrides.setdefault("data", {})["source"] = _stage_source(rd, source)
                argv = [
                    sys.executable,
                    "-m",
                    "core.train",
                    "--out",
                    str(rd.path),
                    "--preset",
                    preset,
                    "--no-progress",
                    *to_flags(overrides),
                ]
                job = {
                    "run_id": rd.name,
                    "preset": preset,
                    "overrides": overrides,
                    "settings": merged_settings(preset, overrides),
                    "device_type": device_type,
                    "created_at": time.time(),
                    "argv": argv,
                }
                _launch(rd, argv, job, gpu_fd)
        except BaseException:
            shutil.rmtree(rd.path, ignore_errors=True)
            raise
    return rd.name


def resume_run(run_id: str, limits: dict | None = None) -> None:
    """Continue a stopped or failed run from last.pt (``limits``: new epochs, max_steps...)."""
    rd = run_dir(run_id)
    info = run_info(run_id)
    if info.alive:
        raise RunError(f"Run {run_id} is still {info.state}; nothing to resume.")
    if not info.resumable:
        raise RunError(
            f"Run {run_id} has no last checkpoint (last.pt) to resume from; "
            "start a new run instead."
        )
    job = read_json(rd.job, {}) or {"run_id": run_id, "created_at": info.started_at}
    device_type = job.get("device_type") or resolve_device(
        rd.read_config().get("train", {}).get("device", "auto")
    )
    keep = ("epochs", "max_steps", "time_budget")
    extra = to_flags({"train": {k: v for k, v in (limits or {}).items() if k in keep}})
    argv = [sys.executable, "-m", "core.train", "--out", str(rd.path), "--resume", "--no-progress"]
    with launch_lock(), _device_slot(device_type, run_id) as gpu_fd:
        _launch(rd, argv + extra, {**job, "device_type": device_type, "argv": argv + extra}, gpu_fd)


def stop_run(run_id: str, wait: float = 0.0) -> RunInfo:
    """Ask a live run to save a checkpoint and stop (STOP file + SIGTERM)."""
    rd = run_dir(run_id)
    info = run_info(run_id)
    if not info.alive:
        raise RunError(f"Run {run_id} is not running (it is {info.state}).")
    rd.request_stop()
    if info.state == "running":
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGTERM)  # the trainer saves last.pt, then exits
    else:
        _stop_starting(rd, info.pid)
    deadline = time.time() + wait
    while time.time() < deadline and run_info(run_id).alive:
        time.sleep(0.2)
    return run_info(run_id)


def _stop_starting(rd: RunDir, pid: int) -> None:
    """Stop a trainer still loading data (before its SIGTERM handler exists)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not processes.pid_alive(pid):
            break
        time.sleep(0.1)
    if not processes.pid_alive(pid) and rd.read_status().get("state") in (None, *LIVE_STATES):
        rd.write_status(state="stopped", message="Stopped before training began.", eta_s=None)


def delete_run(run_id: str) -> None:
    """Delete a run directory; refused while its trainer is running."""
    info = run_info(run_id)
    if info.alive:
        raise RunError(f"Run {run_id} is {info.state}; stop it before deleting it.")
    shutil.rmtree(info.path)
