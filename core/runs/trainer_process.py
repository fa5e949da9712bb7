"""A trainer process: its fixed command line, its environment (memory cap, niceness, passive
waits), its log kept within budget, its device slot, and its launch recorded in job.json.

``core.runs.jobs`` starts and resumes runs through it; no user value reaches the command line
(settings travel in the run directory's ``request.json``). No Streamlit here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from core.cpu_load import SHARE_ENV, passive_waits
from core.places import REPO_ROOT
from core.runs import budget, capacity, processes
from core.runs.locks import acquire_gpu_lock, write_lock
from core.runs.run_dir import RunDir, write_json
from core.training.devices import MEMORY_ENV, NICE_ENV, TRAINER_NICE, default_memory_gb


def launch(rd: RunDir, argv: list[str], job: dict, gpu_fd: int | None) -> None:
    """Start the trainer in its own session, log to train.log, record its pid."""
    job["launched_at"] = time.time()
    write_json(rd.job, {**job, "pid": None, "identity": None})
    env = trainer_env(job.get("processes", 1))
    _trim_log(rd.log)
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
    job["pid"], job["identity"] = proc.pid, processes.identity(proc.pid)
    job.setdefault("launches", []).append({"pid": proc.pid, "at": job["launched_at"]})
    write_json(rd.job, job)
    if gpu_fd is not None:
        write_lock(gpu_fd, {"run_id": rd.name, "pid": proc.pid})


def _trim_log(path) -> None:
    """Keep a trainer log within half of budget.LOG_BYTES before a launch appends to it (its
    start goes: the last lines are the ones the page shows)."""
    keep = budget.LOG_BYTES // 2
    try:
        if path.stat().st_size <= keep:
            return
        with open(path, "rb") as f:
            f.seek(-keep, os.SEEK_END)
            tail = f.read()
    except OSError:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"[earlier lines cut]\n" + tail[tail.find(b"\n") + 1 :])
    os.replace(tmp, path)


def trainer_env(processes: int, env=None) -> dict[str, str]:
    """The trainer's environment: unbuffered output, each CPU process's memory cap (so a run
    never makes the machine swap) and its niceness (so the server answers first); the
    server's environment may set either; and it yields a core while the machine is busy,
    its threads waiting passively (``core.runs.cpu_share``)."""
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    if MEMORY_ENV not in env and (gb := default_memory_gb(processes)):
        env[MEMORY_ENV] = str(gb)
    env.setdefault(NICE_ENV, str(TRAINER_NICE))  # the pages stay responsive while it trains
    env.setdefault(SHARE_ENV, "1")
    return passive_waits(env)


@contextlib.contextmanager
def device_slot(device_type: str, run_id: str):
    """Hold a GPU slot (yielding its fd for the trainer) or check the CPU job limit."""
    if device_type != "cuda":
        capacity.check_cpu_capacity()
        yield None
        return
    fd = acquire_gpu_lock(run_id, capacity.max_gpu_jobs())
    try:
        yield fd
    finally:
        os.close(fd)  # the trainer keeps its own copy of the locked file open


def trainer_argv(rd: RunDir, resume: bool = False, processes: int = 1) -> list[str]:
    """The trainer's command line: fixed flags and the run directory, never a user value.

    Settings travel as data in ``request.json`` inside the run directory. With several
    processes (a checked whole number) this process becomes their agent
    (``core.runs.launcher``, rendezvous on loopback): the process the app checks, signals
    and reaps.
    """
    argv = [sys.executable, "-m", "core.train", "--out", str(rd.path), "--request"]
    argv += [f"--processes={processes}"] if processes > 1 else []
    return argv + ["--resume", "--no-progress"] if resume else argv + ["--no-progress"]
