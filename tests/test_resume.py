"""Exact resume: a run stopped at step k and resumed is the run that was never stopped."""

from __future__ import annotations

import json

import pytest
import torch

from core.model.checkpoints import read_checkpoint
from core.runs.run_dir import RunDir
from core.train import main
from core.training.random_streams import rng_state, set_rng_state
from tests.helpers import train_tiny

STEPS = 40  # the whole run
RESUMABLE = (  # dropout, a validation split, 6 batches an epoch, a record a step, on the CPU
    "--dropout",
    "0.3",
    "--num-train",
    "24",
    "--num-val",
    "6",
    "--batch-size",
    "4",
    "--epochs",
    "0",
    "--log-every",
    "1",
    "--eval-every",
    "10",
    "--device",
    "cpu",  # bit-exact (CUDA's atomic adds are not)
)


def train_records(run) -> list[tuple[int, float]]:
    """(step, loss) of every training record of a run."""
    return [(r["step"], r["loss"]) for r in RunDir(run).read_metrics() if r["record"] == "train"]


def resume(run, *extra: str) -> int:
    """``python -m core.train --out RUN --resume`` with ``extra`` flags; returns its code."""
    return main(["--out", str(run), "--resume", "--no-progress", *extra])


def assert_same_curve(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    """The same steps with the same losses (within float tolerance)."""
    assert [s for s, _ in got] == [s for s, _ in expected]
    assert [loss for _, loss in got] == pytest.approx([loss for _, loss in expected], abs=1e-6)


def same_weights(a, b) -> bool:
    """True if two checkpoints hold the same weights (within float tolerance)."""
    wa, wb = read_checkpoint(a)["state_dict"], read_checkpoint(b)["state_dict"]
    return wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    """The run trained in one go: STEPS steps with dropout and evaluations."""
    out = tmp_path_factory.mktemp("unbroken") / "run"
    assert train_tiny(out, *RESUMABLE, "--max-steps", str(STEPS)) == 0
    return out


@pytest.mark.parametrize("stop_at", [6, 17], ids=["epoch-end", "mid-epoch"])
def test_resumed_run_equals_the_unbroken_run(unbroken, tmp_path, stop_at):
    """Same loss at every step and the same final weights, with dropout on."""
    out = tmp_path / "run"
    assert train_tiny(out, *RESUMABLE, "--max-steps", str(stop_at)) == 0
    assert read_checkpoint(out / "last.pt")["state"]["step"] == stop_at
    assert resume(out, "--max-steps", str(STEPS)) == 0
    expected = train_records(unbroken)
    assert [s for s, _ in expected] == list(range(1, STEPS + 1))
    assert_same_curve(train_records(out), expected)
    assert same_weights(out / "last.pt", unbroken / "last.pt")


def append_lines(path, *lines: str) -> None:
    """Append raw text lines to a file (the last one may lack its newline)."""
    with open(path, "a") as f:
        f.write("".join(lines))


def test_resume_drops_what_came_after_the_checkpoint(unbroken, tmp_path):
    """Records and snapshots after last.pt's step go, a torn last line too; the curve goes on."""
    out = tmp_path / "run"
    assert train_tiny(out, *RESUMABLE, "--max-steps", "20") == 0
    rd = RunDir(out)
    # what a crash after step 20's checkpoint leaves: later records, a snapshot, a torn line
    later = [json.dumps({"record": "train", "step": s, "loss": 9.0}) + "\n" for s in (21, 22)]
    append_lines(rd.metrics, *later, '{"record": "train", "step": 23, "lo')
    torch.save({"step": 30, "probes": []}, rd.snapshots / "step_00000030.pt")
    (out / "last.pt.tmp").write_bytes(b"half a checkpoint")
    assert resume(out, "--max-steps", "30") == 0
    steps = [s for s, _ in train_records(out)]
    assert steps == list(range(1, 31))
    assert_same_curve(train_records(out), train_records(unbroken)[:30])
    assert all(loss != 9.0 for _, loss in train_records(out))
    assert rd.snapshot_steps() == [10, 20, 30]
    assert rd.load_snapshot(30)["probes"]  # the resumed run's own snapshot
    assert not (out / "last.pt.tmp").exists()
    assert all(line.startswith("{") for line in rd.metrics.read_text().splitlines())


def test_append_never_glues_a_record_onto_a_torn_line(tmp_path):
    """A record appended after a half-written line starts a line of its own."""
    rd = RunDir(tmp_path / "run")
    rd.create()
    rd.append_metrics({"record": "train", "step": 1})
    append_lines(rd.metrics, '{"record": "train", "st')
    rd.append_metrics({"record": "train", "step": 2})
    rd.append_metrics({"record": "eval", "step": 2})
    assert [(r["record"], r["step"]) for r in rd.read_metrics()] == [
        ("train", 1),
        ("train", 2),
        ("eval", 2),
    ]


def test_rewind_keeps_records_up_to_the_step(tmp_path):
    """rewind(step) keeps complete records up to ``step``, in order, and nothing else."""
    rd = RunDir(tmp_path / "run")
    rd.create()
    for step in (5, 10, 10, 15):
        rd.append_metrics({"record": "train", "step": step})
    append_lines(rd.metrics, "not json\n", '{"step": 1')
    rd.rewind(10)
    assert [r["step"] for r in rd.read_metrics()] == [5, 10, 10]
    assert rd.metrics.read_text().endswith("}\n")


def test_random_streams_continue_where_they_were_saved():
    """rng_state / set_rng_state replay torch's and Python's random numbers."""
    import random

    saved = rng_state()
    first = torch.rand(3), random.random()
    set_rng_state(saved)
    assert torch.equal(torch.rand(3), first[0]) and random.random() == first[1]
    set_rng_state(saved["torch"])  # an old checkpoint's CPU state alone
    assert torch.equal(torch.rand(3), first[0])
