"""Tests for core.runs.log_lines and the live status built on it: torchrun's banner is never
what a starting run says (issue #21, item 7).

tests/data/torchrun_banner.log is the first four lines torchrun 2.13 printed here for
``torchrun --standalone --nproc-per-node 2 -m core.train ...``; torchrun_banner_glog.log
the first 22 with ``TORCH_LOGS=+distributed`` (torch's "I1123 23:08:27.867000 6168 f.py:169]"
lines), both copied from real runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.places import runs_root
from core.runs import log_lines
from core.runs import status as run_status
from tests.helpers import fake_trainer

DATA = Path(__file__).parent / "data"
BANNER = (DATA / "torchrun_banner.log").read_text()
GLOG_BANNER = (DATA / "torchrun_banner_glog.log").read_text()
OLD_BANNER = (  # torch <= 2.1 (logging.basicConfig's format), as quoted in hailanyi/CasA#26
    "WARNING:torch.distributed.run:\n"
    "*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
    "avoid your system being overloaded, please further tune the variable for optimal "
    "performance in your application as needed. \n"
    "*****************************************\n"
)
TRAINING = "training on cpu (1 thread) × 2 processes: {'pairs_read': 30}"


def test_the_fixtures_are_torchruns_banner():
    assert BANNER.splitlines()[1] == "*" * 41
    assert BANNER.splitlines()[2].startswith("Setting OMP_NUM_THREADS environment variable")
    assert GLOG_BANNER.splitlines()[4].startswith("I1123 23:08:27.867000 6168 site-packages/")


@pytest.mark.parametrize("banner", [BANNER, GLOG_BANNER, OLD_BANNER], ids=["2.13", "glog", "old"])
def test_torchruns_banner_says_nothing(banner):
    assert log_lines.last_message(banner) == ""
    assert all(log_lines.message(line) == "" for line in banner.splitlines())


@pytest.mark.parametrize("banner", [BANNER, GLOG_BANNER, OLD_BANNER], ids=["2.13", "glog", "old"])
def test_the_trainers_own_line_after_the_banner_is_shown(banner):
    assert log_lines.last_message(banner + TRAINING + "\n") == TRAINING
    warned = banner + "warning: only 30 pairs\n" + GLOG_BANNER.splitlines()[-1] + "\n"
    assert log_lines.last_message(warned) == "warning: only 30 pairs"  # the trainer's own


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("=" * 30, ""),
        ("   ", ""),
        ("[rank0]:W1123 23:08:31.620000 6213 site-packages/torch/x.py:1] slow", ""),
        ("/usr/lib/python3/site-packages/torch/a.py:12: UserWarning: TypedStorage", ""),
        ("  warnings.warn(", ""),
        (
            "E1123 23:08:31.620000 6213 site-packages/torch/x.py:1] worker 1 failed",
            "worker 1 failed",
        ),
        ("ERROR:torch.distributed.elastic:worker 1 failed", "worker 1 failed"),
        ("error: the corpus has no pairs", "error: the corpus has no pairs"),
        ("Traceback (most recent call last):", "Traceback (most recent call last):"),
    ],
)
def test_what_a_line_says(line, said):
    assert log_lines.message(line) == said


@pytest.mark.parametrize(
    ("processes", "words"), [(1, "starting the trainer"), (2, "starting 2 processes")]
)
def test_starting_words(processes, words):
    assert log_lines.starting_words(processes) == words


def test_a_starting_multi_process_run_says_so_not_the_banner(jobs_env, make_run):
    rd = make_run(runs_root(), "two-starting", {}, job={"processes": 2})
    rd.log.write_text(BANNER)
    sleeper = fake_trainer(rd.path)
    try:
        rd.write_status(pid=sleeper.pid, state="starting")
        info = run_status.run_info("two-starting")
        assert (info.live, info.processes) == (True, 2)
        assert run_status.log_message("two-starting") == ""
        assert run_status.doing_now(info) == "starting 2 processes"
        with open(rd.log, "a") as log:
            log.write(TRAINING + "\n")
        assert run_status.log_message("two-starting") == TRAINING
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_run_that_died_in_the_banner_names_no_asterisks(jobs_env, make_run, dead_pid):
    rd = make_run(runs_root(), "died", {"state": "running", "pid": dead_pid()})
    rd.log.write_text(BANNER + "error: the corpus has no pairs\n" + BANNER)
    info = run_status.run_info("died")
    assert info.state == "failed" and "*" not in info.message
    assert info.message.endswith("Last log line: error: the corpus has no pairs")
