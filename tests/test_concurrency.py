"""Several sessions at once: start, resume, stop, delete and promote the same runs.

Threads stand for browser sessions (they share one Streamlit process). Nothing may be
corrupted, at most one trainer may ever write a run, and every refusal is a message.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from core.model.studio_loading import load_checkpoint
from core.places import runs_root
from core.runs import jobs
from core.runs import status as run_status
from core.runs.catalogue import ModelError
from core.runs.promotion import promote
from core.runs.run_dir import RunDir, RunError
from tests.helpers import wait_for

ACTIONS = ("resume", "stop", "stop", "delete", "promote", "start")


def _trainers_of(path: Path) -> int:
    """How many live processes are ``core.train`` for this run directory."""
    count = 0
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if "core.train" in args and str(path) in args and state != "Z":
            count += 1
    return count


def _act(action: str, run_id: str, settings: dict, seed: int) -> str:
    """Do one action; return 'ok' or the refusal's message (other errors propagate)."""
    try:
        if action == "resume":
            jobs.resume_run(run_id)
        elif action == "stop":
            jobs.stop_run(run_id, wait=2)
        elif action == "delete":
            jobs.delete_run(run_id)
        elif action == "promote":
            promote(run_id, "last", f"copy-{seed % 2}", overwrite=seed % 3 == 0)
        else:
            jobs.start_run("d2l", settings)
    except (RunError, ModelError) as e:
        assert str(e).strip(), "a refusal must say why"
        return str(e)
    return "ok"


def test_sessions_racing_on_the_same_run(jobs_env, tiny_settings):
    run_id = jobs.start_run("d2l", tiny_settings)
    rd = RunDir(runs_root() / run_id)
    wait_for(lambda: any(r["record"] == "train" for r in rd.read_metrics()), what="a first step")
    jobs.stop_run(run_id, wait=30)
    assert run_status.run_info(run_id).resumable
    seen, errors, done = [], [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(_trainers_of(rd.path))
            time.sleep(0.05)

    def session(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(4):
                _act(rng.choice(ACTIONS), run_id, tiny_settings, seed)
        except Exception as e:  # noqa: BLE001 - reported below with the session's seed
            errors.append(f"session {seed}: {type(e).__name__}: {e}")

    watcher = threading.Thread(target=watch)
    watcher.start()
    sessions = [threading.Thread(target=session, args=(seed,)) for seed in range(6)]
    for t in sessions:
        t.start()
    for t in sessions:
        t.join(timeout=120)
    done.set()
    watcher.join()
    assert not errors, errors
    assert max(seen) <= 1  # never two trainers in one run directory
    for info in run_status.list_runs():
        if info.alive:
            jobs.stop_run(info.run_id, wait=30)
    for info in run_status.list_runs():  # every run left is consistent and loadable
        steps = [r["step"] for r in RunDir(info.path).read_metrics() if r["record"] == "train"]
        assert steps == sorted(set(steps)), f"{info.run_id}: steps repeat or go back"
        assert info.state in ("stopped", "finished", "failed"), info.state
        if info.has_last:
            load_checkpoint(info.path / "last.pt")
