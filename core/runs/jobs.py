"""Training jobs: start, resume, stop and delete ``python -m core.train`` processes.

Each job is its own OS process writing into its run directory, so it survives page
reloads, closed tabs and server restarts; the disk is the source of truth, never a
Streamlit session. ``ATTENTION_STUDIO_MAX_GPU_JOBS`` GPU jobs (an ``fcntl.flock`` slot
each, held by the trainer until it exits) and ``ATTENTION_STUDIO_MAX_CPU_JOBS`` CPU jobs
may run at once (one of each by default). A job of several processes (one run trained by
``core.runs.launcher``) is one job: the app launches, checks, stops and reaps the agent,
which starts and stops its workers. How many may run, and with how many processes:
``core.runs.capacity``. No Streamlit here.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import signal
import threading
import time

from core.corpus.source import DataError
from core.corpus.user_files import allowed_path, prune_uploads, safe_file_name
from core.model.checkpoints import CheckpointError, read_metadata
from core.places import RUN_CORPUS, run_corpus_files, runs_root
from core.runs import budget, capacity, processes, quota, run_bytes, trainer_process
from core.runs.alignment_request import (
    AlignmentChoice,
    alignment_bytes,
    alignment_problems,
    stage_alignment,
)
from core.runs.locks import launch_lock, run_is_held
from core.runs.owners import OwnershipError, User, check_create, check_owner, owner_of, run_owner
from core.runs.run_dir import RunDir, RunError, read_json, run_dir, write_json
from core.runs.status import EARLY_STOP, LIVE_STATES, STOP_GRACE_S, RunInfo, list_runs, run_info
from core.training.config import LIMITS, RESUME_CHANGES, TrainConfig, longer_limits
from core.training.devices import (
    resolve_device,
)
from core.training.settings import merged_settings

WATCH_S = 600.0  # longest a stop is watched from the server (the grace period is far shorter)


def _live_runs() -> set[str]:
    """The ids of the runs whose trainer is running now."""
    return {r.run_id for r in list_runs() if r.alive}


def check_room(need: int, what: str, owner: str | None, exclude: str | None = None) -> None:
    """RunError unless ``need`` more bytes fit the quota (and the owner's share of it)."""
    live = _live_runs()
    try:
        quota.check_room(need, what, owner, live.__contains__, exclude)
    except budget.BudgetError as e:
        raise RunError(str(e)) from None


def _corpus_bytes(source: str) -> int:
    """Bytes of the corpus copy a run of this source keeps (fra-eng is not copied)."""
    if source == "fra-eng":
        return 0
    try:
        return allowed_path(source).stat().st_size
    except (DataError, OSError):
        return 0  # the launch says why it cannot read it


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
    """The corpus the trainer reads: fra-eng, or a copy inside the run of an allowed file,
    under the file's own name (made safe), which names the run's data on the pages.

    The copy makes the run self-contained, and the trainer never opens a path a user typed.
    """
    if source == "fra-eng":
        return source
    try:
        path = allowed_path(source)
        dest = rd.path / RUN_CORPUS / safe_file_name(path.name)
        dest.parent.mkdir(exist_ok=True)
        shutil.copyfile(path, dest)
    except (DataError, OSError) as e:
        raise RunError(f"Cannot read the corpus: {e}") from e
    return str(dest)


def start_run(
    preset: str,
    overrides: dict | None = None,
    processes: int = 1,
    user: User | None = None,
    alignment: AlignmentChoice | None = None,
) -> str:
    """Validate settings, then launch ``python -m core.train`` in a new run; returns its id.

    ``processes`` > 1 trains the run with that many processes (``core.runs.launcher``; each takes
    ``batch_size`` pairs a step, so a step's batch is ``batch_size * processes``). The run's
    disk budget must fit the quota (``core.runs.budget``); ``user`` (None: the command line)
    becomes its owner where users are known; ``alignment``: where the alignments of an
    alignment-supervised run come from (``core.runs.alignment_request``).
    """
    try:
        check_create(user, "a run")
    except OwnershipError as e:
        raise RunError(str(e)) from None
    overrides = copy.deepcopy(overrides or {})
    problems = capacity.launch_problems(preset, overrides, processes)
    if problems:
        raise RunError("Cannot start: " + "; ".join(problems) + ".")
    cfg = merged_settings(preset, overrides)
    if problems := alignment_problems(alignment, cfg["train"]):
        raise RunError("Cannot start: " + "; ".join(problems) + ".")
    device_type = resolve_device(cfg["train"]["device"])
    prune_uploads()
    owner = owner_of(user)
    with launch_lock():
        need = run_bytes.run_budget(cfg, _corpus_bytes(cfg["data"].get("source", "fra-eng"))).total
        need += alignment_bytes(alignment)
        check_room(need, "this run", owner)
        if problem := quota.runs_problem(owner):
            raise RunError(problem)
        rd = _new_run_dir(preset)
        try:
            with trainer_process.device_slot(device_type, rd.name) as gpu_fd:
                cfg["data"]["source"] = _stage_source(rd, cfg["data"].get("source", "fra-eng"))
                asked = stage_alignment(rd, alignment, cfg["train"])
                request = {"settings": cfg} | ({"alignment": asked} if asked else {})
                write_json(rd.request, request)  # the trainer reads settings here
                job = {
                    "run_id": rd.name,
                    "preset": preset,
                    "settings": cfg,
                    "device_type": device_type,
                    "processes": processes,
                    "created_at": time.time(),
                    "budget_bytes": need,  # the most disk it may take (core.runs.budget)
                    "owner": owner,
                }
                trainer_process.launch(
                    rd, trainer_process.trainer_argv(rd, processes=processes), job, gpu_fd
                )
        except BaseException:
            shutil.rmtree(rd.path, ignore_errors=True)
            raise
    return rd.name


def _check_resumable(rd: RunDir) -> RunInfo:
    """The run's info if it can be resumed now, else RunError saying why (under the lock)."""
    info = run_info(rd.name)
    if info.alive or info.state == "unknown" or run_is_held(rd.path):
        raise RunError(f"Run {rd.name} is still {info.state}; nothing to resume.")
    if processes.check_trainer(info.pid, rd.path, info.identity):  # wrote its end, exiting
        raise RunError(f"Run {rd.name}'s trainer is still exiting; resume it in a moment.")
    if not info.resumable:
        raise RunError(
            f"Run {rd.name} has no last checkpoint (last.pt) to resume from; "
            "start a new run instead."
        )
    return info


def resume_processes(run_id: str) -> tuple[int, int]:
    """(processes of the run's last launch, the most it may resume with here)."""
    rd = run_dir(run_id)
    job = read_json(rd.job, {}) or {}
    device_type = job.get("device_type") or resolve_device(
        rd.read_config().get("train", {}).get("device", "auto")
    )
    return int(job.get("processes", 1)), capacity.max_processes(device_type)


def resume_run(
    run_id: str,
    limits: dict | None = None,
    processes: int | None = None,
    user: User | None = None,
) -> None:
    """Continue a run from last.pt (``limits``: new epochs, max_steps, time_budget; after a
    divergence also lr, warmup_steps, grad_clip) with ``processes`` processes (None: as many
    as its last launch); its budget must still fit the quota."""
    rd = run_dir(run_id)
    check_owner(user, rd, "resume")
    with launch_lock():  # two sessions resuming one run: the second is refused here
        info = _check_resumable(rd)
        job = read_json(rd.job, {}) or {"run_id": run_id, "created_at": info.started_at}
        need = max(_run_budget(rd, job), _run_budget(rd, {}, limits), quota.folder_bytes(rd.path))
        check_room(need, f"run {run_id}", run_owner(rd), exclude=run_id)
        job["budget_bytes"] = need
        device_type = job.get("device_type") or resolve_device(
            rd.read_config().get("train", {}).get("device", "auto")
        )
        processes = job.get("processes", 1) if processes is None else processes
        problem = capacity.processes_problem(processes, device_type)
        if problem:
            raise RunError(f"Cannot resume: {problem}.")
        write_json(
            rd.request, {"limits": {k: v for k, v in (limits or {}).items() if k in RESUME_CHANGES}}
        )
        with trainer_process.device_slot(device_type, run_id) as gpu_fd:
            argv = trainer_process.trainer_argv(rd, resume=True, processes=processes)
            job = {**job, "device_type": device_type, "processes": processes}
            trainer_process.launch(rd, argv, job, gpu_fd)


def _run_budget(rd: RunDir, job: dict, limits: dict | None = None) -> int:
    """A run's disk budget: as recorded at launch, else from its settings (with new
    ``limits``, when given: a longer run may log more) and its corpus copy."""
    if isinstance(job.get("budget_bytes"), int) and not limits:
        return job["budget_bytes"]
    settings = copy.deepcopy(rd.read_config() or job.get("settings") or {})
    if limits and isinstance(settings.get("train"), dict):
        settings["train"].update({k: v for k, v in limits.items() if k in RESUME_CHANGES})
    try:
        corpus = sum(p.stat().st_size for p in run_corpus_files(rd.path))
        return run_bytes.run_budget(settings, corpus).total
    except (KeyError, TypeError, ValueError):
        return 0


def train_longer(
    run_id: str,
    steps: int = 0,
    minutes: float = 0.0,
    processes: int | None = None,
    user: User | None = None,
) -> dict:
    """Continue a finished or stopped run for ``steps`` more steps or ``minutes`` more minutes
    of training, from its last checkpoint (its limits replaced by that one; ``resume_run``
    checks the owner, the quota and the processes); the new limits."""
    rd = run_dir(run_id)
    check_owner(user, rd, "train longer")
    if not rd.last.is_file():
        raise RunError(f"Run {run_id} has no last checkpoint (last.pt) to train longer from.")
    try:
        state = read_metadata(rd.last).get("state") or {}
        limits = longer_limits(state.get("step", 0), state.get("elapsed", 0.0), steps, minutes)
    except (CheckpointError, ValueError) as e:
        raise RunError(f"Cannot train run {run_id} longer: {e}.") from None
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    train = {k: v for k, v in (rd.read_config().get("train") or {}).items() if k in known}
    problems = TrainConfig(**{**train, **limits}).problems()
    if problems := [p for p in problems if p.split()[0] in LIMITS]:  # its own, not old ones
        raise RunError(f"Cannot train run {run_id} longer: {'; '.join(problems)}.")
    resume_run(run_id, limits, processes, user)
    return limits


def stop_run(run_id: str, wait: float = 0.0, user: User | None = None) -> RunInfo:
    """Ask a live run to save a checkpoint and stop (STOP file + SIGTERM to the verified pid).

    An agent of several processes passes SIGTERM on to its workers; they stop at one step.
    A trainer that ignores it for STOP_GRACE_S is killed by ``enforce_stop``.
    """
    rd = run_dir(run_id)
    info = run_info(run_id)
    check_owner(user, rd, "stop")
    if info.state == "unknown":
        raise RunError(info.message)
    if not info.alive:
        raise RunError(f"Run {run_id} is not running (it is {info.state}).")
    rd.request_stop()
    processes.signal_trainer(info.pid, rd.path, info.identity)  # it saves last.pt, then exits
    if info.state == "starting":
        _wait_gone(info, 5.0)
        _record_early_stop(rd, info)
    _enforce_later(run_id)
    deadline = time.time() + wait  # until its process is gone, not only its end written
    while time.time() < deadline and (run_info(run_id).alive or not _wait_gone(info, 0)):
        time.sleep(0.2)
    return enforce_stop(run_id)


def _enforce_later(run_id: str) -> None:
    """Watch a stopping run from the server and kill its trainer once the grace period is
    over, whether or not a page is open; the watch ends with the trainer (or after WATCH_S)."""

    def watch() -> None:
        deadline = time.time() + WATCH_S
        while time.time() < deadline:
            time.sleep(0.5)
            try:
                info = run_info(run_id)
                if not info.alive:
                    return
                if info.stop_overdue:
                    enforce_stop(run_id)
                    return
            except (RunError, OSError):
                return

    threading.Thread(target=watch, name=f"stop {run_id}", daemon=True).start()


def _wait_gone(info: RunInfo, seconds: float) -> bool:
    """Wait up to ``seconds`` for a run's trainer to exit; True once it has."""
    deadline = time.time() + seconds
    while processes.check_trainer(info.pid, info.path, info.identity):
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def _record_early_stop(rd: RunDir, info: RunInfo) -> None:
    """A trainer stopped while still loading data leaves no final state: write one."""
    if _wait_gone(info, 0) and rd.read_status().get("state") in (None, *LIVE_STATES):
        rd.write_status(state="stopped", message=EARLY_STOP, eta_s=None)


def enforce_stop(run_id: str) -> RunInfo:
    """Kill (SIGKILL) a trainer that ignored a stop request for STOP_GRACE_S, and say so.

    An agent's workers are killed with it (processes.signal_trainer).
    """
    info = run_info(run_id)
    if not info.stop_overdue:
        return info
    rd = run_dir(run_id)
    if processes.signal_trainer(info.pid, rd.path, info.identity, signal.SIGKILL):
        _wait_gone(info, 5.0)
        last = f" (step {_last_step(rd)})" if rd.last.is_file() else ""
        rd.write_status(
            state="stopped",
            eta_s=None,
            message=f"The trainer did not stop within {STOP_GRACE_S:.0f} s of the stop request "
            f"and was killed (SIGKILL). Its last checkpoint{last} is kept; resume continues "
            "from there.",
        )
    return run_info(run_id)


def _last_step(rd: RunDir) -> str:
    """The step of a run's last checkpoint, from status.json's last evaluation, or '?'."""
    return str(rd.read_status().get("last_eval", "?"))


def delete_run(run_id: str, user: User | None = None) -> None:
    """Delete a run directory; refused while its trainer may be running."""
    check_owner(user, run_dir(run_id), "delete")
    with launch_lock():  # no launch or resume of this run can start meanwhile
        info = run_info(run_id)
        if info.alive or info.state == "unknown" or run_is_held(info.path):
            raise RunError(f"Run {run_id} is {info.state}; stop it before deleting it.")
        shutil.rmtree(info.path)


MAX_NAME_CHARS = 60  # longest run name


def rename_run(run_id: str, name: str, user: User | None = None) -> str:
    """Give a run a name people recognise (kept in job.json; '' removes it)."""
    name = " ".join(str(name).split())
    if len(name) > MAX_NAME_CHARS:
        raise RunError(f"A run name has at most {MAX_NAME_CHARS} characters (got {len(name)}).")
    rd = run_dir(run_id)
    check_owner(user, rd, "rename")
    with launch_lock():
        if not rd.path.is_dir():
            raise RunError(f"Run '{run_id}' does not exist (deleted, or another runs directory).")
        write_json(rd.job, {**(read_json(rd.job, {}) or {}), "name": name})
    return name
