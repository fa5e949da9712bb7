"""Sharing the CPU between the server and its trainers (core.runs.cpu_share)."""

from __future__ import annotations

import os

import pytest
import torch

from core.runs import cpu_share
from core.runs.cpu_share import BUSY_CORES, IDLE_CORES, MIN_WINDOW_S, CpuShare
from core.runs.trainer_process import trainer_env


class FakeMachine:
    """Wall seconds and CPU seconds (the machine's, the trainer's) a test moves by hand."""

    def __init__(self):
        self.wall, self.machine, self.own, self.applied = 0.0, 0.0, 0.0, []
        self.waited = 0.0  # seconds the trainer's threads waited for a core

    def spend(
        self, seconds: float, own_cores: float, other_cores: float, waiting: float = 0.0
    ) -> None:
        self.wall += seconds
        self.own += own_cores * seconds
        self.machine += (own_cores + other_cores) * seconds
        self.waited += waiting * seconds

    def share(self, full: int = 2) -> CpuShare:
        return CpuShare(
            full,
            machine=lambda: self.machine,
            own=lambda: self.own,
            clock=lambda: self.wall,
            apply=self.applied.append,
            waited=lambda: self.waited,
        )


def test_a_trainer_yields_a_core_while_others_keep_one_busy_and_takes_it_back():
    m = FakeMachine()
    share = m.share(full=2)
    m.spend(10, own_cores=2.0, other_cores=0.1)  # alone: all threads
    assert share.update() == 2 and m.applied == []
    m.spend(10, own_cores=1.0, other_cores=1.0)  # a class works on the server
    assert share.update() == 1 and m.applied == [1]
    m.spend(10, own_cores=1.0, other_cores=(BUSY_CORES + IDLE_CORES) / 2)  # in between: kept
    assert share.update() == 1 and m.applied == [1]
    m.spend(10, own_cores=1.0, other_cores=0.05)  # the class has gone
    assert share.update() == 2 and m.applied == [1, 2]
    assert share.changes == 2


def test_a_short_window_measures_nothing_and_keeps_its_start():
    m = FakeMachine()
    share = m.share(full=4)
    m.spend(MIN_WINDOW_S / 2, own_cores=4.0, other_cores=2.0)
    assert share.update() == 4 and m.applied == []  # too short to judge
    m.spend(MIN_WINDOW_S / 2, own_cores=4.0, other_cores=2.0)  # now one window, both halves
    assert share.update() == 3 and m.applied == [3]


def test_one_thread_is_all_a_trainer_has_to_give():
    m = FakeMachine()
    share = m.share(full=1)
    m.spend(10, own_cores=1.0, other_cores=1.0)
    assert share.update() == 1 and m.applied == []


def test_every_cpu_trainer_on_default_threads_shares_unless_told_not_to():
    """Issue 66, item 5: the command's trainer kept the threads it started with, and fell to a
    tenth of its speed when another process took a core mid-run; it shares as the app's does."""
    on = {cpu_share.SHARE_ENV: "1"}
    assert cpu_share.trainer_share("cpu", 0, on) is not None
    assert cpu_share.trainer_share("cuda", 0, on) is None  # a GPU run needs no core given up
    assert cpu_share.trainer_share("cpu", 2, on) is None  # the user named its threads
    assert cpu_share.trainer_share("cpu", 0, {}) is not None  # python -m core.train by hand
    assert cpu_share.trainer_share("cpu", 0, {"OMP_NUM_THREADS": "2"}) is None  # ... chose
    assert cpu_share.trainer_share("cpu", 0, {cpu_share.SHARE_ENV: "0"}) is None  # the old way
    assert trainer_env(1, {})[cpu_share.SHARE_ENV] == "1"  # the app's launcher asks
    assert trainer_env(1, {cpu_share.SHARE_ENV: "0"})[cpu_share.SHARE_ENV] == "0"


def test_a_trainer_whose_threads_wait_for_a_core_yields_one_though_the_others_look_light():
    """Issue 66, item 5: beside a busy loop, a trainer's two spinning threads took half of the
    loop's core, so the others read 0.6-0.7 cores, at the edge of BUSY_CORES; the time its
    threads waited for a core says it plainly."""
    m = FakeMachine()
    share = m.share(full=2)
    m.spend(10, own_cores=2.0, other_cores=0.05, waiting=0.05)  # quiet: a little waiting
    assert share.update() == 2 and m.applied == []
    m.spend(10, own_cores=1.5, other_cores=BUSY_CORES - 0.1, waiting=0.5)  # a loop took a core
    assert share.update() == 1 and m.applied == [1]
    m.spend(10, own_cores=1.0, other_cores=1.0, waiting=0.05)  # one thread, the loop runs on
    assert share.update() == 1 and m.applied == [1]
    waiting = cpu_share.WAIT_CORES + 0.2  # on one thread, waiting is no reason to take two
    m.spend(10, own_cores=1.0, other_cores=0.5, waiting=waiting)
    assert share.update() == 1
    m.spend(10, own_cores=1.0, other_cores=0.02, waiting=0.0)  # the loop has stopped
    assert share.update() == 2 and m.applied == [1, 2]


def test_a_sharing_trainers_threads_wait_passively_where_asked_unless_someone_chose():
    """Issue 66, item 5: OpenMP's threads spin between operations; beside a busy loop the one
    on its core took turns with it at every operation. Sleeping threads fix that but cost a
    quiet machine ~28 %: asked for by ATTENTION_STUDIO_PASSIVE_WAITS=1 only."""
    from core.cpu_load import PASSIVE_ENV, WAIT_POLICY_ENV, passive_waits

    assert WAIT_POLICY_ENV not in trainer_env(1, {})  # off by default: spinning waits
    assert WAIT_POLICY_ENV not in passive_waits({})
    asked = {PASSIVE_ENV: "1"}
    assert trainer_env(1, dict(asked)).get(WAIT_POLICY_ENV) == "PASSIVE"  # the app's
    assert passive_waits(dict(asked))[WAIT_POLICY_ENV] == "PASSIVE"  # a command's
    chosen = {**asked, WAIT_POLICY_ENV: "ACTIVE"}
    assert trainer_env(1, chosen)[WAIT_POLICY_ENV] == "ACTIVE"
    assert WAIT_POLICY_ENV not in trainer_env(1, {**asked, cpu_share.SHARE_ENV: "0"})
    assert WAIT_POLICY_ENV not in passive_waits({**asked, "OMP_NUM_THREADS": "2"})


@pytest.mark.slow  # a fresh interpreter: OpenMP reads its wait policy once, as torch loads
def test_the_command_sets_the_wait_policy_before_torch_loads_where_asked():
    import subprocess
    import sys

    from core.cpu_load import PASSIVE_ENV
    from core.places import REPO_ROOT

    WAIT_POLICY_ENV = "OMP_WAIT_POLICY"  # noqa: N806 - OpenMP's name

    code = (
        "import builtins, os, runpy, sys\n"
        "real = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    if name.split('.')[0] == 'torch' and 'seen' not in os.environ:\n"
        f"        os.environ['seen'] = os.environ.get({WAIT_POLICY_ENV!r}, 'unset')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = spy\n"
        "sys.argv = ['core.train', '--help']\n"
        "try:\n"
        "    runpy.run_module('core.train', run_name='__main__')\n"
        "except SystemExit:\n"
        "    print('policy when torch loaded:', os.environ.get('seen'))\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (WAIT_POLICY_ENV, cpu_share.SHARE_ENV, "OMP_NUM_THREADS", PASSIVE_ENV)
    }
    for extra, seen in (({}, "unset"), ({PASSIVE_ENV: "1"}, "PASSIVE")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
        )
        assert f"policy when torch loaded: {seen}" in done.stdout, done.stderr[-2000:]


def test_the_machine_and_the_process_cpu_seconds_are_read():
    if not cpu_share.os.path.isfile("/proc/stat"):
        pytest.skip("no /proc/stat here")
    own, machine = cpu_share.own_busy_seconds(), cpu_share.machine_busy_seconds()
    sum(i * i for i in range(200_000))  # some work of this process
    assert cpu_share.own_busy_seconds() >= own
    assert cpu_share.machine_busy_seconds() >= machine > 0


def test_the_server_computes_on_one_thread_and_heavy_work_on_all(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(cpu_share, "_default_threads", None)
    monkeypatch.setattr(cpu_share, "_heavy", 0)
    try:
        torch.set_num_threads(2)
        assert cpu_share.server_threads() == cpu_share.SERVER_THREADS
        with cpu_share.all_threads():
            assert torch.get_num_threads() == 2
            with cpu_share.all_threads():  # two heavy computations at once
                assert cpu_share.server_threads() == 2  # a page run meanwhile changes nothing
            assert torch.get_num_threads() == 2  # the other one still runs
        assert torch.get_num_threads() == cpu_share.SERVER_THREADS
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # a process of its own session, as the app starts its trainers
def test_a_trainer_in_its_own_session_lowers_the_sessions_niceness_too(tmp_path):
    import subprocess
    import sys

    from core.places import REPO_ROOT
    from core.training import devices

    group = tmp_path / "autogroup"  # stands for /proc/self/autogroup
    code = (
        "from core.training.devices import lower_priority; "
        f"print(lower_priority(autogroup={str(group)!r}))"
    )
    env = {**trainer_env(1, {}), devices.NICE_ENV: "10"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    assert done.stdout.strip() == "10", done.stderr
    assert group.read_text() == "10"


def test_a_run_the_app_launched_gives_a_thread_up_at_its_records(tmp_path, monkeypatch):
    """core.train with SHARE_ENV set: CpuShare measures at each metrics record (here every
    record sees a busy machine, so the run trains on one thread fewer) and the run ends."""
    from tests import helpers

    monkeypatch.setenv(cpu_share.SHARE_ENV, "1")
    monkeypatch.setattr(cpu_share, "MIN_WINDOW_S", 0.0)
    monkeypatch.setattr(cpu_share, "BUSY_CORES", -1.0)  # always "busy"
    seen = []
    update = CpuShare.update
    monkeypatch.setattr(CpuShare, "update", lambda self: seen.append(update(self)) or seen[-1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert helpers.train_tiny(tmp_path / "run", "--epochs", "3", "--log-every", "1") == 0
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 1  # what the run left this process with
    finally:
        torch.set_num_threads(before)


def test_home_and_train_name_the_threads_a_run_starts_with_not_the_servers_one(
    studio_dirs, monkeypatch
):
    """Issue 53, item 7: Home and Train said "cpu (1 thread)" (the server's own count) while
    runs started on torch's default (two on this machine)."""
    import torch

    from core.runs.cpu_share import default_threads, server_threads
    from tests.helpers import run_app

    before = torch.get_num_threads()
    monkeypatch.setattr(cpu_share, "_default_threads", None)  # a server process's first page
    try:
        torch.set_num_threads(2)  # torch's default here, whatever an earlier test set
        server_threads()
        assert torch.get_num_threads() == 1 and default_threads() == 2
        at = run_app()
        (line,) = [m.value for m in at.markdown if "Training device" in m.value]
        n = default_threads()
        if "cpu" in line:
            assert f"cpu ({n} thread{'s' * (n != 1)})" in line
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- issue 53, item 3


def test_the_share_is_checked_on_a_timer_at_every_step_not_at_the_metrics_cadence():
    """A starved run kept two threads for 6.5 minutes, until its next metrics record: the
    trainer now asks after every step, and the machine is read once a window has passed."""
    m = FakeMachine()
    reads = []
    share = CpuShare(
        2,
        machine=lambda: reads.append(1) or m.machine,
        own=lambda: m.own,
        clock=lambda: m.wall,
        apply=m.applied.append,
    )
    reads.clear()
    for _ in range(10):  # ten quick steps inside one window: the clock alone
        m.spend(MIN_WINDOW_S / 20, own_cores=1.0, other_cores=1.0)
        share.update()
    assert not reads and share.threads == 2
    m.spend(MIN_WINDOW_S, own_cores=1.0, other_cores=1.0)
    assert share.update() == 1 and len(reads) == 1  # the first step past the window


def test_the_trainer_tells_after_every_step(tiny_corpus):
    """The "batch" event comes after every step (metrics come every log_every), and the
    trainer process's share listens to it."""
    from core.corpus.config import DataConfig
    from core.corpus.splits import load_corpus
    from core.model.config import ModelConfig
    from core.model.transformer import Transformer
    from core.runs import training_run
    from core.training.config import TrainConfig
    from core.training.loop import Trainer

    assert 'trainer.on("batch", lambda' in open(training_run.__file__).read()
    corpus = load_corpus(
        DataConfig(source=str(tiny_corpus), split="head", min_freq=1, num_train=29, num_val=1)
    )
    model = Transformer(ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16))
    cfg = TrainConfig(
        epochs=0, max_steps=5, batch_size=4, log_every=5, eval_every=10**6, threads=1, device="cpu"
    )
    trainer = Trainer(model, corpus, cfg)
    batches, records = [], []
    trainer.on("batch", lambda _t, info: batches.append(info["step"]))
    trainer.on("step", lambda _t, info: records.append(info["step"]))
    trainer.run()
    assert batches == [1, 2, 3, 4, 5] and records == [5]


def test_a_command_takes_one_thread_fewer_on_a_busy_machine(monkeypatch):
    from core import cpu_load

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(cpu_load, "others_cores", lambda seconds=0.25: 1.4)
        note = cpu_load.command_threads()
        assert torch.get_num_threads() == 1 and "computing on 1 of 2 threads" in note
        torch.set_num_threads(2)
        monkeypatch.setattr(cpu_load, "others_cores", lambda seconds=0.25: 0.1)
        assert cpu_load.command_threads() is None and torch.get_num_threads() == 2
        monkeypatch.setattr(cpu_load, "others_cores", lambda seconds=0.25: 1.4)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user chose
        assert cpu_load.command_threads() is None and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_command_prints_the_busy_machine_note_before_its_lines(monkeypatch, capsys):
    """The wiring tests/conftest.py's ``quiet_machine`` replaces: a command on a busy
    machine says on stderr that it computes on fewer threads, then runs as usual."""
    import argparse

    import core.command_line

    note = "note: the other processes keep 1.4 cores busy: computing on 1 of 2 threads"
    monkeypatch.setattr(core.command_line, "command_threads", lambda env=None: note)
    parser = argparse.ArgumentParser()
    assert core.command_line.run_command(parser, lambda args: ["a line"], argv=[]) == 0
    out = capsys.readouterr()
    assert out.err.strip() == note and out.out.strip() == "a line"
    assert core.command_line.run_command(parser, lambda a: ["x"], argv=[], share_cores=False) == 0
    assert capsys.readouterr().err == ""


def test_the_machine_is_read_from_proc():
    from core import cpu_load

    busy = cpu_load.others_cores(0.05)
    assert busy is None or busy >= 0.0


def test_the_threads_waiting_time_is_read_from_proc():
    from core import cpu_load

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc here")
    before = cpu_load.run_delay_seconds()
    sum(i * i for i in range(200_000))
    assert cpu_load.run_delay_seconds() >= before >= 0.0
