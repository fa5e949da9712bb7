"""Tests for core.runs.processes and the app's use of it: a pid is verified before any signal."""

from __future__ import annotations

import time

import pytest

from core.places import runs_root
from core.runs import jobs, processes
from core.runs import status as run_status
from core.runs.run_dir import RunDir, RunError
from tests.helpers import fake_trainer, wait_for


@pytest.fixture
def sleeper_run(jobs_env, make_run):
    """(RunDir, process): a running run whose trainer is a sleeping stand-in."""
    rd = make_run(runs_root(), "live", {"state": "running"})
    proc = fake_trainer(rd.path)
    yield rd, proc
    proc.kill()
    proc.wait()


def _record(rd, pid: int, identity: str | None) -> None:
    """Write the launch record the app keeps in job.json."""
    from core.runs.run_dir import read_json, write_json

    write_json(rd.job, {**read_json(rd.job, {}), "pid": pid, "identity": identity})


def test_identity_is_stable_and_tells_processes_apart(sleeper_run):
    rd, proc = sleeper_run
    mine = processes.identity(proc.pid)
    assert mine and mine == processes.identity(proc.pid) and ":" in mine
    assert processes.check_trainer(proc.pid, rd.path, mine) is True
    assert processes.check_trainer(proc.pid, rd.path / "other", mine) is False


def test_a_recycled_pid_is_not_the_trainer_and_is_never_signalled(sleeper_run):
    """The pid exists and even runs core.train for this run, but it started at another time."""
    rd, proc = sleeper_run
    _record(rd, proc.pid, "another-boot:12345")
    info = run_status.run_info("live")
    assert (info.state, info.alive) == ("failed", False)
    with pytest.raises(RunError, match="not running"):
        jobs.stop_run("live")
    time.sleep(0.3)
    assert proc.poll() is None  # still alive: nothing was sent to it


def test_without_proc_the_state_is_unknown_and_nothing_is_signalled(
    sleeper_run, monkeypatch, tmp_path
):
    rd, proc = sleeper_run
    _record(rd, proc.pid, processes.identity(proc.pid))
    monkeypatch.setattr(processes, "PROC", tmp_path / "no-proc")  # e.g. macOS, or hidden /proc
    info = run_status.run_info("live")
    assert (info.state, info.alive, info.resumable) == ("unknown", False, False)
    assert "cannot be verified" in info.message
    for action in (jobs.stop_run, jobs.delete_run, jobs.resume_run):
        with pytest.raises(RunError):
            action("live")
    assert processes.signal_trainer(proc.pid, rd.path, info.identity) is False
    time.sleep(0.3)
    assert proc.poll() is None and rd.path.is_dir()


def test_a_trainer_that_ignores_stop_is_killed_after_the_grace_period(
    jobs_env, make_run, monkeypatch
):
    rd = make_run(runs_root(), "hung", {"state": "running"})
    proc = fake_trainer(rd.path, ignore_sigterm=True)
    try:
        _record(rd, proc.pid, processes.identity(proc.pid))
        monkeypatch.setattr(run_status, "STOP_GRACE_S", 0.5)
        info = jobs.stop_run("hung", wait=0.2)
        assert info.alive and info.stopping  # SIGTERM ignored, still within the grace period
        time.sleep(0.6)
        info = jobs.enforce_stop("hung")
        assert (info.state, info.alive) == ("stopped", False)
        assert "did not stop within" in info.message and "SIGKILL" in info.message
        assert proc.wait(timeout=10) == -9
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_is_enforced_with_no_page_open(jobs_env, make_run, monkeypatch):
    """Nobody polls after the request: the server itself kills the trainer after the grace."""
    rd = make_run(runs_root(), "hung", {"state": "running"})
    proc = fake_trainer(rd.path, ignore_sigterm=True)
    try:
        _record(rd, proc.pid, processes.identity(proc.pid))
        monkeypatch.setattr(run_status, "STOP_GRACE_S", 0.5)
        jobs.stop_run("hung")  # and nothing else: no enforce_stop, no run_info
        assert proc.wait(timeout=10) == -9
        wait_for(lambda: RunDir(rd.path).read_status()["state"] == "stopped", 10, "the record")
    finally:
        proc.kill()
        proc.wait()


def test_a_second_trainer_of_a_running_run_stops_at_once(tmp_path, capsys):
    """Two resumes of one run: the second trainer leaves the first one's files alone."""
    import os

    from core.runs.locks import hold_run
    from core.train import main

    run = tmp_path / "run"
    run.mkdir()
    fd = hold_run(run)  # the first trainer
    try:
        assert main(["--out", str(run), "--resume"]) == 2
        assert "already being trained" in capsys.readouterr().err
        assert not (run / "status.json").exists()
    finally:
        os.close(fd)


def test_a_finished_trainer_never_stays_a_zombie():
    """Its exit status is collected as soon as it ends, without anyone polling."""
    import subprocess

    proc = subprocess.Popen(["sleep", "0.2"])
    processes.adopt(proc)
    deadline = time.time() + 10
    while time.time() < deadline and (
        processes._stat_fields(proc.pid) is not None or proc.pid in processes._CHILDREN
    ):
        time.sleep(0.05)
    assert processes._stat_fields(proc.pid) is None  # gone from /proc: no defunct child left
    assert proc.pid not in processes._CHILDREN


def fake_agent(run_path):
    """(agent, worker pid): a stand-in torchrun agent and its worker, each in its own session.

    Both command lines name ``core.train`` and the run, as torchrun's do; both ignore SIGTERM.
    """
    import subprocess
    import sys

    worker = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"w = subprocess.Popen([sys.executable, '-c', {worker!r}, '-m', 'core.train', "
        f"'--out', {str(run_path)!r}], start_new_session=True); "
        "print(w.pid, flush=True); time.sleep(60)"
    )
    argv = [sys.executable, "-c", code, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    agent = subprocess.Popen(
        [*argv, "-m", "core.train", "--out", str(run_path)], stdout=subprocess.PIPE, text=True
    )
    return agent, int(agent.stdout.readline())


def gone(pid: int) -> bool:
    """True once ``pid`` has exited, every thread of it (a zombie waiting for its reaper counts
    as exited). A killed process's main thread can be a zombie while its other threads (Gloo's)
    still exit, and its files (the run's trainer lock) are closed only after the last one."""
    from pathlib import Path

    fields = processes._stat_fields(pid)
    if fields is None or fields[0] not in ("Z", "X"):
        return fields is None
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return False
    return True


def test_a_torchrun_agent_is_the_trainer_and_sigkill_reaches_its_workers(jobs_env, make_run):
    """SIGTERM goes to the agent alone (it passes it on); SIGKILL to its workers as well."""
    import signal

    rd = make_run(runs_root(), "group", {"state": "running"})
    agent, worker = fake_agent(rd.path)
    try:
        mine = processes.identity(agent.pid)
        assert processes.check_trainer(agent.pid, rd.path, mine) is True
        assert processes.workers(agent.pid, rd.path) == [worker]
        assert processes.workers(agent.pid, rd.path / "other") == []
        assert processes.signal_trainer(agent.pid, rd.path, mine)  # SIGTERM: ignored here
        time.sleep(0.3)
        assert not gone(worker) and agent.poll() is None
        assert processes.signal_trainer(agent.pid, rd.path, mine, signal.SIGKILL)
        assert agent.wait(timeout=10) == -signal.SIGKILL
        deadline = time.time() + 10
        while not gone(worker) and time.time() < deadline:
            time.sleep(0.05)
        assert gone(worker)  # no orphaned worker keeps training
    finally:
        agent.kill()
        agent.wait()
