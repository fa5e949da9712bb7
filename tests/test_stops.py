"""Stopping before training: SIGTERM while the corpus loads ends the trainer at once, and a run
killed before its first checkpoint is started again by ``--resume`` from its settings."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from core.runs.run_dir import RunDir, write_json
from core.runs.status import EARLY_STOP
from core.train import main
from tests.helpers import ROOT, TINY_PRESET, TINY_RUN, wait_for

SLOW_LOAD = """
import sys, time
from core.runs import training_run
def load_corpus(*args, **kwargs):  # a corpus that takes a minute to prepare
    print("loading", flush=True)
    for _ in range(600):
        time.sleep(0.1)
    raise SystemExit("the corpus finished loading: the stop was not acted on")
training_run.prepared_corpus = load_corpus
from core.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a trainer process
def test_sigterm_while_the_corpus_loads_stops_at_once(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_LOAD, "--preset", TINY_PRESET, "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "loading"
        asked = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stdout.read()
        assert time.time() - asked < 5
    finally:
        proc.kill()
    status = RunDir(out).read_status()
    assert (status["state"], status["message"]) == ("stopped", EARLY_STOP)


def request_only_run(tmp_path):
    """A run the app launched whose trainer died before its first checkpoint."""
    rd = RunDir(tmp_path / "run")
    rd.create()
    settings = json.loads(json.dumps(TINY_RUN))
    settings["train"].update(epochs=0, max_steps=6, eval_every=3)
    write_json(
        rd.request,
        {
            "settings": {
                "data": settings["data"],
                "model": settings["model"],
                "train": settings["train"],
            }
        },
    )
    rd.write_status(state="running", pid=1)
    return rd


def test_resume_before_the_first_checkpoint_starts_the_run_again(tmp_path, capsys):
    rd = request_only_run(tmp_path)
    assert main(["--out", str(rd.path), "--resume", "--request", "--no-progress"]) == 0
    assert "starting it again from its settings" in capsys.readouterr().out
    status = rd.read_status()
    assert status["state"] == "finished" and status["step"] == 6 and not status["resumed"]
    assert rd.last.is_file() and rd.read_config()["train"]["max_steps"] == 6


def test_resume_with_no_settings_at_all_says_so(tmp_path, capsys):
    rd = RunDir(tmp_path / "empty")
    rd.create()
    assert main(["--out", str(rd.path), "--resume", "--no-progress"]) == 2
    assert "no checkpoint (last.pt) and no settings" in capsys.readouterr().err


def test_a_restarted_run_keeps_new_limits_from_the_command_line(tmp_path):
    rd = request_only_run(tmp_path)
    code = main(["--out", str(rd.path), "--resume", "--request", "--max-steps", "4"])
    assert code == 0
    wait_for(lambda: rd.read_status().get("state") == "finished", 30, "the run to finish")
    assert rd.read_status()["step"] == 4
