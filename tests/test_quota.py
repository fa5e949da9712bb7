"""Disk quota of the runs folder and the saved models, checked at start, resume, save and
promote, with a message that names what to delete (issue 31, items 3 and 6); and a restart
from no checkpoint that starts afresh (item 9)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest

from core.model.checkpoints import read_metadata
from core.places import checkpoints_root
from core.runs import budget, jobs, quota, run_bytes
from core.runs.catalogue import SHIPPED_NAME, ModelError
from core.runs.owners import User
from core.runs.promotion import promote
from core.runs.run_dir import RunDir, RunError, read_json
from tests.helpers import ROOT, TINY_PRESET, run_dirs, wait_for

BROWSER = User()  # a browser session where the server knows no users


def test_a_launch_past_the_quota_is_refused_and_says_what_to_delete(
    jobs_env, tiny_settings, monkeypatch, tiny_run
):
    shutil.copytree(tiny_run, jobs_env["runs"] / "20260101-000000-old")
    held = quota.folder_bytes(jobs_env["runs"])
    monkeypatch.setenv(quota.QUOTA_ENV, str((held + 10_000) / budget.GB))
    with pytest.raises(RunError, match="Not enough room: this run may take up to") as e:
        jobs.start_run(TINY_PRESET, tiny_settings)
    assert "largest: run 20260101-000000-old" in str(e.value)
    assert quota.QUOTA_ENV in str(e.value)
    assert [p.name for p in run_dirs(jobs_env["runs"])] == ["20260101-000000-old"]  # nothing


def test_a_launch_past_the_number_of_runs_is_refused_first_for_everyone_then_per_user(
    jobs_env, tiny_settings, monkeypatch, make_run
):
    """Issue 49, item 9: no cap on the number of runs (1,000 checkpoints' metadata read in
    73 s on the first page after a restart)."""
    for i in range(3):
        rd = make_run(jobs_env["runs"], f"20260101-00000{i}-d2l", {"state": "stopped"})
        job = read_json(rd.job) | {"owner": "alice" if i else "bob"}
        rd.job.write_text(json.dumps(job))
    monkeypatch.setenv(quota.MAX_RUNS_ENV, "3")
    with pytest.raises(RunError, match=r"keeps at most 3 runs \(ATTENTION_STUDIO_MAX_RUNS\)"):
        jobs.start_run(TINY_PRESET, tiny_settings)
    monkeypatch.setenv(quota.MAX_RUNS_ENV, "8")
    monkeypatch.setenv(quota.CLASS_SIZE_ENV, "4")  # a quarter of 8 each: alice has 2
    assert "you have 2" in quota.runs_problem("alice")
    assert quota.runs_problem("bob") is None and quota.runs_problem(None) is None
    assert len(run_dirs(jobs_env["runs"])) == 3  # nothing was made


def test_a_few_users_leave_room_for_the_rest_of_a_class(tmp_path, monkeypatch):
    """Issue 64, item 12: with a quarter each, four users filled the 200 runs. By default each
    user keeps a twentieth (10 of 200 runs, 5 % of the disk quota); teachers are not held to
    a share; the settings are the operator's."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path))
    for name in (quota.MAX_RUNS_ENV, quota.CLASS_SIZE_ENV, quota.USER_MAX_RUNS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ATTENTION_STUDIO_TEACHERS", "carol")
    for user in ("u0", "u1", "u2", "u3", "carol"):
        for i in range(quota.user_max_runs()):
            RunDir(tmp_path / f"{user}-{i:02d}").create()
            (tmp_path / f"{user}-{i:02d}" / "job.json").write_text(json.dumps({"owner": user}))
    assert quota.user_max_runs() == 10
    assert "Each user may keep at most 10 runs" in quota.runs_problem("u0")
    assert quota.runs_problem("u4") is None  # 50 of 200 taken: the class still has room
    assert quota.runs_problem("carol") is None  # a teacher
    assert quota.user_quota_bytes(20 * budget.GB) == budget.GB
    monkeypatch.setenv(quota.USER_MAX_RUNS_ENV, "11")
    assert quota.runs_problem("u0") is None
    monkeypatch.setenv(quota.CLASS_SIZE_ENV, "many")
    assert quota.CLASS_SIZE_ENV in quota.runs_problem("u4")
    assert quota.CLASS_SIZE_ENV in quota.settings_problem()


@pytest.mark.parametrize("raw", ["0", "-1", "ten", "2.5"])
def test_a_number_of_runs_it_does_not_understand_stops_every_launch(monkeypatch, raw):
    monkeypatch.setenv(quota.MAX_RUNS_ENV, raw)
    with pytest.raises(budget.BudgetError, match=quota.MAX_RUNS_ENV):
        quota.max_runs()
    assert quota.MAX_RUNS_ENV in quota.runs_problem()


def test_a_launch_records_its_budget_and_a_live_run_counts_for_it(
    jobs_env, tiny_settings, monkeypatch
):
    run_id = jobs.start_run(TINY_PRESET, tiny_settings)
    job = read_json(RunDir(jobs_env["runs"] / run_id).job)
    assert job["budget_bytes"] >= run_bytes.run_budget(job["settings"]).total  # + its corpus copy
    wait_for(lambda: RunDir(jobs_env["runs"] / run_id).last.is_file(), what="a checkpoint")
    charged = {h.name: h.charge for h in quota.holders(lambda rid: rid == run_id)}
    assert charged[run_id] == job["budget_bytes"]  # what it may still grow to
    jobs.stop_run(run_id, wait=30)


def test_a_resume_past_the_quota_is_refused(jobs_env, make_run, monkeypatch):
    rd = make_run(jobs_env["runs"], "20260101-000000-d2l", {"state": "stopped"}, checkpoint=True)
    (rd.path / "config.json").write_text(json.dumps({"data": {}, "model": {}, "train": {}}))
    job = read_json(rd.job) | {"budget_bytes": 50 * budget.MB}
    rd.job.write_text(json.dumps(job))
    monkeypatch.setenv(quota.QUOTA_ENV, str(10 * budget.MB / budget.GB))
    with pytest.raises(RunError, match="Not enough room: run 20260101-000000-d2l may take"):
        jobs.resume_run(rd.name)


def test_the_default_quota_is_half_of_what_the_disk_leaves_the_app(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path))
    monkeypatch.delenv(quota.QUOTA_ENV, raising=False)
    free = shutil.disk_usage(tmp_path).free
    assert abs(quota.quota_bytes(10**9) - (free + 10**9) / 2) < 2**30  # free changes a bit
    monkeypatch.setenv(quota.QUOTA_ENV, "2.5")
    assert quota.quota_bytes(0) == int(2.5 * budget.GB)
    monkeypatch.setenv(quota.USER_QUOTA_ENV, "0.5")
    assert quota.user_quota_bytes(10 * budget.GB) == budget.GB // 2


def test_each_user_has_a_share_of_the_quota(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "ckpts"))
    monkeypatch.setenv(quota.QUOTA_ENV, str(100 * budget.MB / budget.GB))
    monkeypatch.setenv(quota.CLASS_SIZE_ENV, "4")  # a quarter each: 25 MB
    for name, owner in (("a1", "alice"), ("a2", "alice"), ("b1", "bob")):
        rd = RunDir(tmp_path / "runs" / name)
        rd.create()
        (rd.path / "last.pt").write_bytes(b"x" * 10 * budget.MB)
        rd.job.write_text(json.dumps({"owner": owner}))
    quota.check_room(10 * budget.MB, "this run", "bob")  # bob holds 10 of his 25 MB
    with pytest.raises(budget.BudgetError, match="your runs and saved models already take") as e:
        quota.check_room(10 * budget.MB, "this run", "alice")  # alice holds 20 of hers
    assert "a1" in str(e.value) and "b1" not in str(e.value)  # only what alice may delete


# ----------------------------------------------------------------------------- saved models


@pytest.fixture
def run_to_save(jobs_env, tiny_run):
    """A finished run in the runs folder, and the shipped model in the models folder."""
    shutil.copytree(tiny_run, jobs_env["runs"] / "done")
    jobs_env["checkpoints"].mkdir()
    shutil.copy(tiny_run / "last.pt", jobs_env["checkpoints"] / SHIPPED_NAME)
    return jobs_env


def test_nobody_replaces_the_shipped_model_from_a_browser(run_to_save):
    shipped = run_to_save["checkpoints"] / SHIPPED_NAME
    before = shipped.read_bytes()
    with pytest.raises(ModelError, match="is the shipped model or a file the server's operator"):
        promote("done", "last", "fra-eng-small", overwrite=True, user=BROWSER)
    assert shipped.read_bytes() == before
    promote("done", "last", "fra-eng-small", overwrite=True)  # the operator's command line may


def test_saving_past_the_quota_or_the_count_is_refused(run_to_save, monkeypatch):
    dest = promote("done", "last", "mine", user=BROWSER)
    assert read_metadata(dest)["promoted_from"]["owner"] is None  # no users known
    monkeypatch.setattr(quota, "MAX_SAVED_MODELS", 2)
    with pytest.raises(ModelError, match="keeps at most 2 saved models"):
        promote("done", "last", "another", user=BROWSER)
    promote("done", "last", "mine", overwrite=True, user=BROWSER)  # a replacement: no new file
    monkeypatch.setattr(quota, "MAX_SAVED_MODELS", 3)
    (checkpoints_root() / "ind-saved.hf").mkdir()  # a decoder-only run's model: a folder
    with pytest.raises(ModelError, match="keeps at most 3 saved models"):  # it was not counted
        promote("done", "last", "another", user=BROWSER)
    monkeypatch.setenv(quota.QUOTA_ENV, str(budget.MB / budget.GB))
    with pytest.raises(ModelError, match="Not enough room: model mine may take"):
        promote("done", "last", "mine", overwrite=True, user=BROWSER)


# ----------------------------------------------------------------------------- restart


@pytest.mark.slow  # two trainer processes
def test_a_run_killed_before_its_first_checkpoint_restarts_afresh(tmp_path, tiny_settings):
    """SIGKILL after the first logged steps, before the first checkpoint; then --resume:
    its records start again at step 1 (not 1, 2, 1, 2, 3 ...), its snapshots and status too."""
    from core.training.settings import merged_settings

    out = tmp_path / "run"
    settings = merged_settings(TINY_PRESET, tiny_settings)
    settings["train"] |= {"eval_every": 10**6, "log_every": 1, "max_steps": 10**6, "epochs": 0}
    out.mkdir()
    (out / "request.json").write_text(json.dumps({"settings": settings}))
    argv = [sys.executable, "-m", "core.train", "--out", str(out), "--request", "--no-progress"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rd = RunDir(out)
    try:
        wait_for(lambda: len(rd.read_metrics()) >= 3, what="three records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not rd.last.is_file()
    rd.save_snapshot(2, [])  # as if it had written one
    (out / "request.json").write_text(json.dumps({"limits": {"max_steps": 40}}))
    done = subprocess.run(
        [*argv, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "starting it again from its settings" in done.stdout
    steps = [r["step"] for r in rd.read_metrics() if r.get("record") == "train"]
    assert steps == sorted(steps) and steps[0] == 1 and len(steps) == len(set(steps))
    assert 2 not in rd.snapshot_steps() and rd.read_status()["state"] == "finished"
