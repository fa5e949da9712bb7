"""Fault injection: the real trainer, killed (SIGKILL) at random moments and resumed each time,
ends as the run that was never killed: same curve, same final weights, loadable checkpoints."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from core.model.checkpoints import read_checkpoint
from core.model.studio_loading import load_checkpoint
from core.runs.run_dir import RunDir, read_json
from tests.helpers import ROOT, TINY_ARGS

STEPS = 300
SMALLEST = [  # the smallest model that learns: 32 wide, 1 + 1 blocks; frequent checkpoints
    *TINY_ARGS,
    *("--d-model", "32", "--num-heads", "4", "--d-ff", "64", "--dropout", "0.1"),
    *("--num-encoder-layers", "1", "--num-decoder-layers", "1"),
    *("--num-train", "24", "--num-val", "6", "--batch-size", "4"),
    *("--device", "cpu", "--threads", "1"),
    *("--epochs", "0", "--max-steps", str(STEPS), "--eval-every", "10", "--log-every", "5"),
    *("--probes", "go ."),
]
KILLS = ["mid-epoch", "imports", "loading", "checkpoint", "mid-epoch", "checkpoint"]
POLL_S = 0.001  # how often the run's files are looked at while waiting for a moment to kill


def launch(out: Path, log, resume: bool) -> subprocess.Popen:
    """Start ``python -m core.train`` on the tiny corpus (or resume the run in ``out``)."""
    args = (
        ["--out", str(out), "--resume", "--no-progress"]
        if resume
        else [*SMALLEST, "--out", str(out)]
    )
    return subprocess.Popen(
        [sys.executable, "-m", "core.train", *args],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(proc: subprocess.Popen, moment, timeout: float = 60.0) -> bool:
    """Poll ``moment()`` until it is true (True) or the process has ended (False)."""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        if moment():
            return True
        time.sleep(POLL_S)
    return False


def checkpoint_step(out: Path) -> int:
    """The step of the run's last.pt (0 before the first)."""
    return read_checkpoint(out / "last.pt")["state"]["step"] if (out / "last.pt").exists() else 0


def own_status(out: Path, proc: subprocess.Popen) -> dict:
    """status.json once this process has written it ({} before)."""
    status = read_json(out / "status.json", {}) or {}
    return status if status.get("pid") == proc.pid else {}


def moment(kind: str, out: Path, proc: subprocess.Popen, rng: random.Random):
    """A predicate that turns true at a random moment of ``kind`` in this process's life."""
    if kind == "imports":  # Python and torch still loading: nothing written yet
        at = time.time() + rng.uniform(0.05, 0.6)
        return lambda: time.time() >= at
    if kind == "loading":  # corpus, model and checkpoint being read (or training just begun)
        return lambda: bool(own_status(out, proc))
    target = max(checkpoint_step(out) + rng.randint(5, 30), 15)  # a random later step
    if kind == "checkpoint":  # then between a checkpoint's temporary file and its rename
        temps = [out / "last.pt.tmp", out / "best.pt.tmp"]  # (old ones go before "running")
        return lambda: reached(out, proc, target) and any(os.path.exists(t) for t in temps)
    return later(rng.uniform(0.0, 0.05), lambda: reached(out, proc, target))  # "mid-epoch"


def later(delay: float, moment):
    """A predicate that turns true ``delay`` seconds after ``moment()`` first did."""
    since: list[float] = []

    def check() -> bool:
        if not since and moment():
            since.append(time.time())
        return bool(since) and time.time() - since[0] >= delay

    return check


def reached(out: Path, proc: subprocess.Popen, step: int) -> bool:
    """True once this process is training and has recorded ``step``."""
    status = own_status(out, proc)
    return status.get("state") == "running" and status["step"] >= step


def train_steps(out: Path) -> list[int]:
    """Steps of the complete training records of a run."""
    return [r["step"] for r in RunDir(out).read_metrics() if r["record"] == "train"]


def kill_at(kind: str, out: Path, log, rng: random.Random) -> bool:
    """Run the trainer (resuming after the first time) and SIGKILL it at a moment of ``kind``.

    Returns whether a checkpoint's temporary file was left behind (a torn write).
    """
    proc = launch(out, log, resume=(out / "last.pt").exists())
    hit = wait_until(proc, moment(kind, out, proc, rng))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert hit, f"the run ended before a '{kind}' moment: {Path(log.name).read_text()[-2000:]}"
    steps = train_steps(out)
    assert steps == sorted(set(steps)), f"steps go back after a '{kind}' kill: {steps}"
    assert read_json(out / "status.json") is not None  # status.json is always whole
    return kind == "checkpoint" and any(out.glob("*.pt.tmp"))


def same_weights(a: Path, b: Path) -> bool:
    """True if two checkpoints hold the same weights (within float tolerance)."""
    wa, wb = read_checkpoint(a)["state_dict"], read_checkpoint(b)["state_dict"]
    return wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_killed_and_resumed_run_equals_the_unbroken_run(tmp_path):
    """SIGKILL at startup, mid-epoch and mid-checkpoint, resumed each time: nothing differs."""
    rng = random.Random(1234)  # the kill moments are reproducible
    unbroken, out = tmp_path / "unbroken", tmp_path / "killed"
    with open(tmp_path / "unbroken.log", "w") as ulog, open(tmp_path / "train.log", "w") as log:
        reference = launch(unbroken, ulog, resume=False)  # trains beside the killed runs
        torn = [kill_at(kind, out, log, rng) for kind in KILLS]
        final = launch(out, log, resume=True)
        assert final.wait(timeout=120) == 0, (tmp_path / "train.log").read_text()[-2000:]
        assert reference.wait(timeout=120) == 0, (tmp_path / "unbroken.log").read_text()[-2000:]
    assert any(torn), "no kill landed inside a checkpoint write"
    assert RunDir(out).read_status()["state"] == "finished"
    assert train_steps(out) == train_steps(unbroken) == list(range(5, STEPS + 1, 5))
    evals = [r["step"] for r in RunDir(out).read_metrics() if r["record"] == "eval"]
    assert evals == list(range(10, STEPS + 1, 10))
    losses = [r["loss"] for r in RunDir(out).read_metrics() if r["record"] == "train"]
    expected = [r["loss"] for r in RunDir(unbroken).read_metrics() if r["record"] == "train"]
    assert torch.allclose(torch.tensor(losses), torch.tensor(expected), atol=1e-5)
    for name in ("last.pt", "best.pt"):
        load_checkpoint(out / name)
        assert same_weights(out / name, unbroken / name), name
    assert RunDir(out).snapshot_steps() == RunDir(unbroken).snapshot_steps()
