"""Tests for core.runs.jobs: start, stop, resume and delete runs; the CPU and GPU job limits.

The lifecycle tests start the real ``python -m core.train`` on the tiny corpus (alone, and
as two processes under torchrun).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import pytest

from core.corpus.user_files import stage_upload
from core.places import runs_root
from core.runs import capacity, jobs, processes, trainer_process
from core.runs import status as run_status
from core.runs.locks import acquire_gpu_lock
from core.runs.run_dir import RunDir, RunError, read_json, write_json
from core.training import devices, settings
from tests.helpers import fake_trainer, run_dirs, wait_for
from tests.test_distributed import processes_of
from tests.test_processes import gone


@pytest.mark.parametrize(
    ("env", "limit"),
    [
        (capacity.MAX_CPU_JOBS_ENV, capacity.max_cpu_jobs),
        (capacity.MAX_GPU_JOBS_ENV, capacity.max_gpu_jobs),
    ],
)
def test_job_limits_come_from_the_environment(monkeypatch, env, limit):
    monkeypatch.setenv(env, "3")
    assert limit() == 3
    monkeypatch.setenv(env, "many")
    assert limit() == 1


def test_refused_settings_start_nothing(jobs_env):
    with pytest.raises(RunError, match="divisible by num_heads"):
        jobs.start_run("d2l", {"model": {"num_heads": 3}})
    assert run_dirs(runs_root()) == []


def test_start_run_refuses_while_the_gpu_is_busy(jobs_env, monkeypatch, tiny_settings):
    for module in (jobs, settings):
        monkeypatch.setattr(module, "resolve_device", lambda name="auto": "cuda")
    monkeypatch.setattr(devices, "device_memory", lambda device_type: None)
    fd = acquire_gpu_lock("other", capacity.max_gpu_jobs())
    try:
        with pytest.raises(RunError, match="GPU is busy: run other"):
            jobs.start_run("d2l", tiny_settings)
    finally:
        os.close(fd)
    assert run_dirs(runs_root()) == []


def test_stopping_a_starting_run_ends_it_as_stopped(jobs_env, make_run):
    """Before the trainer's SIGTERM handler exists, stop kills it and records 'stopped'."""
    rd = make_run(runs_root(), "early", {"state": "starting"})
    loader = fake_trainer(rd.path)
    try:
        rd.write_status(pid=loader.pid)
        assert run_status.run_info("early").state == "starting"
        info = jobs.stop_run("early", wait=10)
        assert (info.state, info.alive, info.resumable) == ("stopped", False, False)
        assert info.message == "Stopped before training began."
    finally:
        loader.kill()
        loader.wait()


def test_delete_run(jobs_env, make_run):
    rd = make_run(runs_root(), "gone", {"state": "finished"}, checkpoint=True)
    jobs.delete_run("gone")
    assert not rd.path.exists()


def test_lifecycle_start_stop_resume_and_death(jobs_env, tiny_settings, tiny_corpus):
    """One real run: start, limits, stop, resume, then a kill the app must notice."""
    upload = stage_upload("tiny.tsv", tiny_corpus.read_bytes())
    tiny_settings["data"]["source"] = str(upload)
    run_id = jobs.start_run("d2l", tiny_settings)
    rd = RunDir(runs_root() / run_id)
    assert run_id.endswith("-d2l") and (rd.path / "corpus" / "tiny.tsv").is_file()  # its name
    info = run_status.run_info(run_id)
    assert info.alive and info.live and processes.check_trainer(info.pid, rd.path, info.identity)
    with pytest.raises(RunError, match="1 CPU training job"):
        jobs.start_run("d2l", tiny_settings)  # the limit is one CPU job
    with pytest.raises(RunError, match="stop it before deleting"):
        jobs.delete_run(run_id)
    with pytest.raises(RunError, match="nothing to resume"):
        jobs.resume_run(run_id)
    wait_for(lambda: run_status.run_info(run_id).step >= 4 and rd.last.is_file(), what="4 steps")

    info = jobs.stop_run(run_id, wait=60)
    assert (info.state, info.alive, info.resumable) == ("stopped", False, True)
    stopped_at = info.step
    assert [r.run_id for r in run_status.list_runs()] == [run_id]

    jobs.resume_run(run_id)
    info = wait_for(
        lambda: (i := run_status.run_info(run_id)).step > stopped_at + 2 and i,
        what="the resumed run to go on",
    )
    assert info.state == "running" and info.alive
    steps = [r["step"] for r in run_status.read_metrics(run_id) if r["record"] == "train"]
    assert steps == sorted(steps) and steps[-1] > stopped_at  # one continued curve
    assert len(json.loads(rd.job.read_text())["launches"]) == 2

    child = processes._CHILDREN.pop(info.pid)  # forget it, as a restarted server would
    os.kill(info.pid, signal.SIGKILL)
    try:
        info = wait_for(
            lambda: (i := run_status.run_info(run_id)).state == "failed" and i,
            what="the death to be noticed",
        )  # the unreaped zombie counts as dead
        assert info.resumable and not info.alive and "ended unexpectedly" in info.message
        with pytest.raises(RunError, match="is not running"):
            jobs.stop_run(run_id)
    finally:
        child.wait(timeout=10)
    assert run_status.run_info(run_id).state == "failed"  # every reader sees it, none writes it


def test_user_values_reach_the_trainer_as_data_never_as_argv(jobs_env, tiny_settings, tmp_path):
    """A probe that looks like a flag stays a probe; the trainer's argv holds no user value."""
    evil = tmp_path / "elsewhere"
    tiny_settings["train"]["probes"] = [f"--out={evil}", "--preset=base", "go ."]
    run_id = jobs.start_run("d2l", tiny_settings)
    rd = RunDir(runs_root() / run_id)
    config = wait_for(lambda: rd.read_config(), what="config.json")
    assert config["train"]["probes"] == [f"--out={evil}", "--preset=base", "go ."]
    assert config["model"]["d_model"] == tiny_settings["model"]["d_model"]  # not "base"
    pid = run_status.run_info(run_id).pid
    argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")[:-1]
    assert argv[1:] == ["-m", "core.train", "--out", str(rd.path), "--request", "--no-progress"]
    assert json.loads(rd.request.read_text())["settings"]["train"]["probes"][0] == f"--out={evil}"
    assert not evil.exists()


@pytest.mark.parametrize("resume", [False, True])
def test_several_processes_are_launched_by_the_loopback_agent(jobs_env, resume):
    """The command line: the same fixed trainer flags, and a checked count of processes."""
    import sys

    rd = RunDir(runs_root() / "run")
    head = [sys.executable, "-m", "core.train", "--out", str(rd.path), "--request"]
    tail = ["--resume", "--no-progress"] if resume else ["--no-progress"]
    assert trainer_process.trainer_argv(rd, resume) == [*head, *tail]
    assert trainer_process.trainer_argv(rd, resume, processes=2) == [*head, "--processes=2", *tail]


@pytest.mark.parametrize(
    ("processes", "message"),
    [
        (0, "processes must be a whole number, 1 or more (got 0)"),
        ("2", "processes must be a whole number, 1 or more (got '2')"),
        (True, "processes must be a whole number"),
        (10_000, "processes (10000) cannot exceed"),
    ],
)
def test_an_impossible_number_of_processes_starts_nothing(
    jobs_env, tiny_settings, processes, message
):
    with pytest.raises(RunError, match=re.escape(message)):
        jobs.start_run("d2l", tiny_settings, processes=processes)
    assert run_dirs(runs_root()) == []


def test_max_processes_counts_gpus_or_cpu_cores(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert capacity.max_processes("cuda") == 4
    assert capacity.max_processes("cpu") == os.cpu_count()
    assert capacity.max_processes("mps") == 1


def test_a_two_process_job_starts_stops_resumes_and_dies_as_one(jobs_env, tiny_settings):
    """The app's torchrun job: recognised, stopped and resumed as one, killed with its workers."""
    if capacity.max_processes("cpu") < 2:
        pytest.skip("needs two CPU cores")
    run_id = jobs.start_run("d2l", tiny_settings, processes=2)
    rd = RunDir(runs_root() / run_id)
    info = run_status.run_info(run_id)
    argv = open(f"/proc/{info.pid}/cmdline", "rb").read().decode().split("\0")[:-1]
    assert argv[1:4] == ["-m", "core.train", "--out"] and "--processes=2" in argv
    assert info.alive and processes.check_trainer(info.pid, rd.path, info.identity)
    wait_for(lambda: run_status.run_info(run_id).step >= 4 and rd.last.is_file(), what="4 steps")
    info = run_status.run_info(run_id)
    assert info.device.endswith(" × 2 processes") and info.status["world_size"] == 2
    workers = processes.workers(info.pid, rd.path)
    assert len(workers) == 2
    listening = listening_addresses([info.pid, *workers])
    assert listening and all(host == "127.0.0.1" for host, _ in listening), listening

    info = jobs.stop_run(run_id, wait=60)  # SIGTERM to the agent, which stops both workers
    assert (info.state, info.alive, info.resumable) == ("stopped", False, True)
    wait_for(lambda: processes_of(rd.path) == [], 30, "every process of the run to exit")
    stopped_at = info.step

    jobs.resume_run(run_id)  # with as many processes as before
    assert json.loads(rd.job.read_text())["processes"] == 2
    info = wait_for(
        lambda: (i := run_status.run_info(run_id)).step > stopped_at + 2 and i,
        what="the resumed run to go on",
    )
    assert info.status["world_size"] == 2
    steps = [r["step"] for r in run_status.read_metrics(run_id) if r["record"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] > stopped_at
    with pytest.raises(RunError, match="stop it before deleting"):
        jobs.delete_run(run_id)

    workers = processes.workers(info.pid, rd.path)
    assert len(workers) == 2
    processes.signal_trainer(info.pid, rd.path, info.identity, signal.SIGKILL)  # as enforce_stop
    processes._CHILDREN.pop(info.pid).wait(timeout=10)
    wait_for(lambda: all(gone(w) for w in workers), 30, "the workers to be killed too")
    info = wait_for(lambda: (i := run_status.run_info(run_id)).state == "failed" and i)
    jobs.delete_run(run_id)  # nothing holds the run any more
    assert not rd.path.exists()


def listening_addresses(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket these processes listen on (from /proc)."""
    import ipaddress
    import socket

    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            raw, port = cols[1].split(":")
            packed = bytes.fromhex(raw)
            words = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
            address = ipaddress.ip_address(socket.inet_ntop(family, words))
            mapped = getattr(address, "ipv4_mapped", None)
            found.append((str(mapped or address), int(port, 16)))
    return found


def test_a_run_whose_trainer_wrote_its_end_but_still_exits_is_not_resumed_yet(jobs_env, make_run):
    """Between a trainer's last status and its exit (its lock already closed) a resume would
    start a second trainer beside it: it is refused until the process is gone."""
    rd = make_run(jobs_env["runs"], "20260101-000000-d2l", {"state": "stopped"}, checkpoint=True)
    exiting = fake_trainer(rd.path)
    try:
        identity = processes.identity(exiting.pid)
        write_json(rd.job, {**read_json(rd.job), "pid": exiting.pid, "identity": identity})
        rd.write_status(state="stopped")  # written after the launch: its own end
        assert run_status.run_info(rd.name).alive is False
        with pytest.raises(RunError, match="still exiting"):
            jobs.resume_run(rd.name)
    finally:
        exiting.kill()
        exiting.wait()
