"""Tests for core.runs.status: states read from disk, dead trainers, run lists, logs, durations."""

from __future__ import annotations

import math
import os
import time

import pytest

from core.places import runs_root
from core.runs import jobs
from core.runs import status as run_status
from core.runs.run_dir import RunDir, RunError
from tests.helpers import fake_trainer

DIED = "The training process ended unexpectedly (server killed, machine rebooted or a crash)."
RESUMABLE = " It can be resumed from its last checkpoint."


@pytest.mark.parametrize(
    ("status", "checkpoint", "state", "resumable", "message"),
    [
        ({"state": "finished"}, True, "finished", True, ""),
        ({"state": "stopped"}, True, "stopped", True, ""),
        ({"state": "failed", "message": "boom"}, False, "failed", False, "boom"),
        ({"state": "running", "pid": "dead"}, False, "failed", False, DIED),
        ({"state": "running", "pid": "dead"}, True, "failed", True, DIED + RESUMABLE),
        # pid "self" is alive but is not a trainer
        ({"state": "starting", "pid": "self"}, True, "failed", True, DIED + RESUMABLE),
    ],
)
def test_state_is_read_from_disk_and_dead_trainers_fail(
    jobs_env, status, checkpoint, state, resumable, message, make_run, dead_pid
):
    pid = {"dead": dead_pid(), "self": os.getpid()}.get(status.get("pid"))
    make_run(runs_root(), "r1", {**status, "pid": pid}, checkpoint=checkpoint)
    info = run_status.run_info("r1")
    assert (info.state, info.resumable, info.alive) == (state, resumable, False)
    assert info.message == message
    written = RunDir(info.path).read_status()["state"]
    assert written == status["state"]  # a read never writes: every reader sees the same death


def test_a_live_trainer_found_on_disk_is_running(jobs_env, make_run):
    """A run launched before a server restart: only its files and its process remain."""
    rd = make_run(runs_root(), "r2", {"state": "running", "step": 40, "progress": 0.4})
    sleeper = fake_trainer(rd.path)
    try:
        rd.write_status(pid=sleeper.pid)
        info = run_status.run_info("r2")
        assert (info.state, info.alive, info.step, info.progress) == ("running", True, 40, 0.4)
        with pytest.raises(RunError, match="stop it before deleting"):
            jobs.delete_run("r2")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run_status.run_info("r2").state == "failed"


def test_a_run_being_launched_is_starting(jobs_env, make_run):
    make_run(runs_root(), "r3", {}, job={"pid": None, "launched_at": time.time()})
    assert run_status.run_info("r3").state == "starting"


def test_list_runs_newest_first_and_run_ids_are_checked(jobs_env, make_run):
    make_run(runs_root(), "old", {"state": "finished"}, job={"created_at": 1.0})
    make_run(runs_root(), "new", {"state": "stopped"}, job={"created_at": 2.0})
    assert [r.run_id for r in run_status.list_runs()] == ["new", "old"]
    for bad in ("../old", "..", "a/b", ""):
        with pytest.raises(RunError, match="not a valid run id"):
            run_status.run_info(bad)
    with pytest.raises(RunError, match="does not exist"):
        run_status.run_info("missing")


def test_log_tail_collapses_progress_redraws(jobs_env, make_run):
    rd = make_run(runs_root(), "logged", {"state": "finished"})
    rd.log.write_text("first\n 10%|#  \r 50%|#####  \r100%|##########\nlast line\n")
    assert run_status.log_tail("logged", 5) == "first\n100%|##########\nlast line"
    assert run_status.log_tail("logged", 1) == "last line"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (-1, "—"),
        (math.inf, "—"),
        (12.4, "12 s"),
        (200, "3 min 20 s"),
        (3900, "1 h 05 min"),
    ],
)
def test_format_duration(seconds, text):
    assert run_status.format_duration(seconds) == text


def test_runs_are_listed_under_the_launch_lock_with_a_dead_trainer_on_disk(
    jobs_env, make_run, dead_pid
):
    """Launch, resume and delete list runs while holding the launch lock: a dead trainer
    found then must not make the read take the lock again (it used to hang every session)."""
    import threading

    from core.runs.locks import launch_lock

    make_run(runs_root(), "dead", {"state": "running", "pid": dead_pid()}, checkpoint=True)
    seen = []

    def launch_like() -> None:
        with launch_lock():
            seen.extend(r.state for r in run_status.list_runs())

    worker = threading.Thread(target=launch_like, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "listing runs under the launch lock hung"
    assert seen == ["failed"]
