"""Tests for core.jobs: settings, launch, status, stop, resume, dead trainers, locks, promotion.

The lifecycle tests start the real ``python -m core.train`` on the tiny corpus.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from core import jobs
from core.checkpoint import read_checkpoint
from core.runs import RunDir
from core.train import build_parser, configs_from_args
from tests.conftest import fake_trainer


def wait_for(predicate, timeout: float = 90.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize("preset", ["d2l", "small"])
def test_presets_validate(preset):
    assert jobs.validate_settings(preset, {}) == []


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"model": {"num_heads": 3}}, "d_model (256) must be divisible by num_heads (3)"),
        ({"model": {"num_encoder_layers": 0}}, "num_encoder_layers must be at least 1"),
        ({"model": {"num_decoder_layers": 0}}, "num_decoder_layers must be at least 1"),
        ({"train": {"batch_size": 10_000_000}}, "a batch of 10000000 needs about"),
        ({"train": {"batch_size": 0}}, "batch_size must be at least 1"),
        ({"train": {"epochs": 0, "max_steps": 0, "time_budget": 0}}, "set a limit"),
        ({"train": {"device": "tpu"}}, "unknown device 'tpu'"),
        ({"data": {"max_len": 0}}, "max_len must be at least 1"),
        ({"data": {"source": "/no/such/pairs.tsv"}}, "Corpus file not found"),
        ({"model": {"width": 3}}, "unknown setting"),
        ({"optimizer": {}}, "Unknown settings group 'optimizer'"),
    ],
)
def test_impossible_settings_are_refused_with_the_reason(overrides, reason):
    problems = jobs.validate_settings("d2l", overrides)
    assert any(reason in p for p in problems), problems


def test_unknown_preset_is_refused():
    assert "Unknown preset 'huge'" in jobs.validate_settings("huge", {})[0]


def test_refused_settings_start_nothing(jobs_env):
    with pytest.raises(jobs.JobError, match="divisible by num_heads"):
        jobs.start_run("d2l", {"model": {"num_heads": 3}})
    assert [p for p in jobs.runs_root().iterdir() if not p.name.startswith(".")] == []


def test_flags_reach_the_trainer_unchanged():
    """Every form field passed as flags comes back identical from core.train's parser."""
    settings = jobs.defaults("small")
    settings["data"].update(source="/tmp/pairs.tsv", max_len=9, val_fraction=0.05)
    settings["model"].update(d_model=96, norm_first=True, dropout=0.25)
    settings["train"].update(amp=False, lr=1.5e-4, probes=["go .", "hi ."], schedule="constant")
    args = build_parser().parse_args(["--out", "x", "--preset", "small", *jobs._flags(settings)])
    cfg = configs_from_args(args)
    for section in jobs.SECTIONS:
        assert cfg[section] == settings[section], section


def test_form_fields_cover_every_setting_with_help():
    names = {(f.section, f.name) for f in jobs.form_fields()}
    expected = {(s, n) for s, values in jobs.defaults("d2l").items() for n in values}
    assert names == expected - {("data", "source")}
    assert all(f.help for f in jobs.form_fields())
    assert next(f for f in jobs.form_fields() if f.name == "schedule").kind == "choice"


def test_cpu_job_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(jobs.MAX_CPU_JOBS_ENV, "3")
    assert jobs.max_cpu_jobs() == 3
    monkeypatch.setenv(jobs.MAX_CPU_JOBS_ENV, "many")
    assert jobs.max_cpu_jobs() == 1


# ----------------------------------------------------------------------------- data


def test_uploads_are_size_limited_and_counted(jobs_env, monkeypatch):
    path = jobs.stage_upload("mine.tsv", b"Go.\tVa !\nbroken line\nHi.\tSalut.\n")
    assert path.parent == jobs.runs_root() / jobs.UPLOADS
    info = jobs.inspect_data(path)
    assert (info["usable"], info["skipped"]) == (2, 1)
    with pytest.raises(jobs.JobError, match="no usable sentence pairs"):
        jobs.inspect_data(jobs.stage_upload("bad.txt", b"no tabs here\n"))
    monkeypatch.setattr(jobs, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(jobs.JobError, match="upload limit"):
        jobs.stage_upload("big.tsv", b"x" * 11)


def test_log_tail_collapses_progress_redraws(jobs_env, make_run):
    rd = make_run(jobs.runs_root(), "logged", {"state": "finished"})
    rd.log.write_text("first\n 10%|#  \r 50%|#####  \r100%|##########\nlast line\n")
    assert jobs.log_tail("logged", 5) == "first\n100%|##########\nlast line"
    assert jobs.log_tail("logged", 1) == "last line"


# ----------------------------------------------------------------------------- states from disk


@pytest.mark.parametrize(
    ("status", "checkpoint", "state", "resumable"),
    [
        ({"state": "finished"}, True, "finished", True),
        ({"state": "stopped"}, True, "stopped", True),
        ({"state": "failed", "message": "boom"}, False, "failed", False),
        ({"state": "running", "pid": "dead"}, False, "failed", False),
        ({"state": "running", "pid": "dead"}, True, "failed", True),
        ({"state": "starting", "pid": "self"}, True, "failed", True),  # alive, not a trainer
    ],
)
def test_state_is_read_from_disk_and_dead_trainers_fail(
    jobs_env, status, checkpoint, state, resumable, make_run, dead_pid
):
    pid = {"dead": dead_pid(), "self": os.getpid()}.get(status.get("pid"))
    make_run(jobs.runs_root(), "r1", {**status, "pid": pid}, checkpoint=checkpoint)
    info = jobs.run_info("r1")
    assert (info.state, info.resumable, info.alive) == (state, resumable, False)
    if status["state"] in jobs.LIVE_STATES:
        assert "ended unexpectedly" in info.message
        assert ("can be resumed" in info.message) == resumable
        assert RunDir(info.path).read_status()["state"] == "failed"  # recorded for everyone


def test_a_live_trainer_found_on_disk_is_running(jobs_env, make_run):
    """A run launched before a server restart: only its files and its process remain."""
    rd = make_run(jobs.runs_root(), "r2", {"state": "running", "step": 40, "progress": 0.4})
    sleeper = fake_trainer(rd.path)
    try:
        rd.write_status(pid=sleeper.pid)
        info = jobs.run_info("r2")
        assert (info.state, info.alive, info.step, info.progress) == ("running", True, 40, 0.4)
        with pytest.raises(jobs.JobError, match="stop it before deleting"):
            jobs.delete_run("r2")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert jobs.run_info("r2").state == "failed"


def test_stopping_a_starting_run_ends_it_as_stopped(jobs_env, make_run):
    """Before the trainer's SIGTERM handler exists, stop kills it and records 'stopped'."""
    rd = make_run(jobs.runs_root(), "early", {"state": "starting"})
    loader = fake_trainer(rd.path)
    try:
        rd.write_status(pid=loader.pid)
        assert jobs.run_info("early").state == "starting"
        info = jobs.stop_run("early", wait=10)
        assert (info.state, info.alive, info.resumable) == ("stopped", False, False)
        assert info.message == "Stopped before training began."
    finally:
        loader.kill()
        loader.wait()


def test_describe_settings_names_the_book_experiment():
    text = jobs.describe_settings(jobs.defaults("d2l"))
    for part in (
        "first 512 + 128 pairs",
        "width 256",
        "2+2 blocks",
        "4 heads",
        "FFN 64",
        "dropout 0.2",
        "lr 0.0015",
        "batch 128",
        "30 epochs",
    ):
        assert part in text


def test_a_run_being_launched_is_starting(jobs_env, make_run):
    make_run(jobs.runs_root(), "r3", {}, job={"pid": None, "launched_at": time.time()})
    assert jobs.run_info("r3").state == "starting"


def test_list_runs_newest_first_and_run_ids_are_checked(jobs_env, make_run):
    make_run(jobs.runs_root(), "old", {"state": "finished"}, job={"created_at": 1.0})
    make_run(jobs.runs_root(), "new", {"state": "stopped"}, job={"created_at": 2.0})
    assert [r.run_id for r in jobs.list_runs()] == ["new", "old"]
    for bad in ("../old", "..", "a/b", ""):
        with pytest.raises(jobs.JobError, match="not a valid run id"):
            jobs.run_info(bad)
    with pytest.raises(jobs.JobError, match="does not exist"):
        jobs.run_info("missing")


def test_delete_run(jobs_env, make_run):
    rd = make_run(jobs.runs_root(), "gone", {"state": "finished"}, checkpoint=True)
    jobs.delete_run("gone")
    assert not rd.path.exists()


# ----------------------------------------------------------------------------- locks


def test_gpu_lock_is_exclusive_and_released_with_its_holder(jobs_env):
    fd = jobs.acquire_gpu_lock("first")
    with pytest.raises(jobs.JobError, match="GPU is busy: run first"):
        jobs.acquire_gpu_lock("second")
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))  # as a trainer holds it
    os.close(fd)
    try:
        with pytest.raises(jobs.JobError, match="GPU is busy"):
            jobs.acquire_gpu_lock("second")
    finally:
        holder.kill()
        holder.wait()
    os.close(jobs.acquire_gpu_lock("second"))  # a dead holder's lock is free again


def test_start_run_refuses_while_the_gpu_is_busy(jobs_env, monkeypatch, tiny_settings):
    monkeypatch.setattr(jobs, "resolve_device", lambda name="auto": "cuda")
    monkeypatch.setattr(jobs, "available_memory", lambda kind: None)
    fd = jobs.acquire_gpu_lock("other")
    try:
        with pytest.raises(jobs.JobError, match="GPU is busy: run other"):
            jobs.start_run("d2l", tiny_settings)
    finally:
        os.close(fd)
    assert [p for p in jobs.runs_root().iterdir() if not p.name.startswith(".")] == []


# ----------------------------------------------------------------------------- promotion


def test_promote_copies_weights_without_optimizer(jobs_env, make_run):
    make_run(jobs.runs_root(), "done", {"state": "finished"}, checkpoint=True)
    dest = jobs.promote("done", "best", "fr-tiny")
    assert dest == jobs.checkpoints_root() / "fr-tiny.pt"
    ckpt = read_checkpoint(dest)
    assert "optimizer" not in ckpt and ckpt["promoted_from"]["run"] == "done"
    with pytest.raises(jobs.JobError, match="already exists"):
        jobs.promote("done", "last", "fr-tiny")
    assert jobs.promote("done", "last", "fr-tiny.pt", overwrite=True) == dest
    (jobs.checkpoints_root() / "junk.pt").write_bytes(b"not a checkpoint")
    models = {m["name"]: m for m in jobs.list_models()}
    assert models["fr-tiny"]["error"] == "" and models["fr-tiny"]["step"] == 7
    assert "not a readable" in models["junk"]["error"]


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "a/b",
        "",
        " ",
        ".hidden",
        "-x",
        "x" * 65,
        "two words",
        "..",
        "/abs",
        "a\\b",
        "ok\nx",
    ],
)
def test_promote_refuses_unsafe_names(jobs_env, name, make_run):
    make_run(jobs.runs_root(), "done", {"state": "finished"}, checkpoint=True)
    with pytest.raises(jobs.JobError, match="not a valid model name"):
        jobs.promote("done", "best", name)
    assert not jobs.checkpoints_root().exists() or not any(jobs.checkpoints_root().iterdir())


def test_promote_needs_a_checkpoint(jobs_env, make_run):
    make_run(jobs.runs_root(), "empty", {"state": "failed"})
    with pytest.raises(jobs.JobError, match="no usable best checkpoint"):
        jobs.promote("empty", "best", "x")
    with pytest.raises(jobs.JobError, match="'best' or 'last'"):
        jobs.promote("empty", "middle", "x")


# ----------------------------------------------------------------------------- real trainers


def test_lifecycle_start_stop_resume_and_death(jobs_env, tiny_settings, tiny_corpus):
    """One real run: start, limits, stop, resume, then a kill the app must notice."""
    upload = jobs.stage_upload("tiny.tsv", tiny_corpus.read_bytes())
    tiny_settings["data"]["source"] = str(upload)
    run_id = jobs.start_run("d2l", tiny_settings)
    rd = RunDir(jobs.runs_root() / run_id)
    assert run_id.endswith("-d2l") and (rd.path / "data.tsv").is_file()  # upload copied in
    info = jobs.run_info(run_id)
    assert info.alive and info.live and jobs.is_trainer(info.pid, rd.path)
    with pytest.raises(jobs.JobError, match="1 CPU training job"):
        jobs.start_run("d2l", tiny_settings)  # the limit is one CPU job
    with pytest.raises(jobs.JobError, match="stop it before deleting"):
        jobs.delete_run(run_id)
    with pytest.raises(jobs.JobError, match="nothing to resume"):
        jobs.resume_run(run_id)
    wait_for(lambda: jobs.run_info(run_id).step >= 4 and rd.last.is_file(), what="4 steps")

    info = jobs.stop_run(run_id, wait=60)
    assert (info.state, info.alive, info.resumable) == ("stopped", False, True)
    stopped_at = info.step
    assert [r.run_id for r in jobs.list_runs()] == [run_id]

    jobs.resume_run(run_id)
    info = wait_for(
        lambda: (i := jobs.run_info(run_id)).step > stopped_at + 2 and i,
        what="the resumed run to go on",
    )
    assert info.state == "running" and info.alive
    steps = [r["step"] for r in jobs.read_metrics(run_id) if r["kind"] == "train"]
    assert steps == sorted(steps) and steps[-1] > stopped_at  # one continued curve
    assert len(json.loads((rd.path / jobs.JOB_FILE).read_text())["launches"]) == 2

    child = jobs._CHILDREN.pop(info.pid)  # forget it, as a restarted server would
    os.kill(info.pid, signal.SIGKILL)
    try:
        info = wait_for(
            lambda: (i := jobs.run_info(run_id)).state == "failed" and i,
            what="the death to be noticed",
        )  # the unreaped zombie counts as dead
        assert info.resumable and not info.alive and "ended unexpectedly" in info.message
        with pytest.raises(jobs.JobError, match="is not running"):
            jobs.stop_run(run_id)
    finally:
        child.wait(timeout=10)
    assert rd.read_status()["state"] == "failed"  # recorded for every reader
