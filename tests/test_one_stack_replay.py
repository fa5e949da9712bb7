"""A one-stack run replayed over training (issue 66): a decoder-only induction run and an
encoder run, each of a few seeded CPU steps written by the project's own command, keep an
attention snapshot at every evaluation within their byte budget; their trajectories carry
each head's numbers (and an induction run's circuit scores, with its phase change), the same
from ``python -m core.trajectories``; a model with no run beside it is refused in one line.
The pages: tests/test_app_one_stack_replay.py."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from core import trajectories as trajectories_command
from core.alignment.head_aer import head_trajectories
from core.attention.trajectories import Trajectories, as_json_lines, with_circuits
from core.model.capabilities import NO_HISTORY, NO_SNAPSHOTS, problem, replay_problem
from core.runs import budget, quota, run_bytes
from core.runs.circuit_history import circuit_evals, score
from core.runs.history import HistoryFile
from core.runs.run_dir import RunDir
from core.train import main
from core.training.circuits import circuit_sequences, phase_change
from core.training.settings import to_flags
from tests.helpers import ROOT, TINY_PRESET, tiny_config

INDUCTION = ["--preset", "induction", "--max-steps", "20", "--eval-every", "10"]
INDUCTION += ["--log-every", "10", "--no-progress"]
ENCODER = tiny_config(
    data={"num_train": 20, "num_val": 10},
    model={"arch": "encoder"},
    train={"epochs": 0, "max_steps": 20, "eval_every": 10, "log_every": 10, "lr": 0.001},
)
SHIPPED_HISTORY = ROOT / "checkpoints" / "induction-2l.history"
SHIPPED_FOLDER = ROOT / "checkpoints" / "induction-2l.hf"


def train_one_stack(out, args: list[str]):
    """A finished run in ``out`` (seeded, on the CPU), by ``python -m core.train``."""
    assert main([*args, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def one_stack_runs(tmp_path_factory) -> dict:
    """{"induction": a 20-step decoder-only induction run, "encoder": a 20-step encoder run}."""
    root = tmp_path_factory.mktemp("one-stack")
    encoder = ["--preset", TINY_PRESET, *to_flags(ENCODER), "--no-progress"]
    return {
        "induction": train_one_stack(root / "induction", INDUCTION),
        "encoder": train_one_stack(root / "encoder", encoder),
    }


def evaluations(run) -> list[int]:
    """The steps the run evaluated at."""
    return [r["step"] for r in RunDir(run).read_metrics() if r.get("record") == "eval"]


@pytest.mark.slow  # trains two runs of a few steps
@pytest.mark.parametrize("task", ["induction", "encoder"])
def test_a_one_stack_run_keeps_a_snapshot_at_every_evaluation_within_its_budget(
    one_stack_runs, task
):
    run = one_stack_runs[task]
    rd = RunDir(run)
    assert rd.snapshot_steps() == evaluations(run) == [10, 20]
    settings = json.loads((run / "config.json").read_text())
    for step in rd.snapshot_steps():
        assert rd.snapshot_path(step).stat().st_size <= run_bytes.snapshot_bytes(settings)
        assert budget.sizeof(rd.load_snapshot(step)["probes"]) <= run_bytes.snapshot_bytes(settings)
    assert quota.folder_bytes(run) <= run_bytes.run_budget(settings).total


@pytest.mark.slow
def test_an_induction_snapshot_is_one_pass_over_the_sequence_its_circuit_scores_read(
    one_stack_runs,
):
    run = one_stack_runs["induction"]
    (probe,) = RunDir(run).load_snapshot(20)["probes"]
    length = circuit_evals(RunDir(run).read_metrics())[-1]["circuits"]["length"]
    ids = circuit_sequences(length, 256, sequences=1)[0].tolist()  # [bos, a, a]
    n = 2 * length + 1
    assert probe["decoder_self"].shape == (2, 4, n, n)  # the preset's 2 layers of 4 heads
    assert (
        probe["output_tokens"]
        == probe["decoder_inputs"]
        == ["<bos>"] + [f"t{i - 4}" for i in ids[1:]]
    )
    assert probe["encoder"].numel() == probe["cross"].numel() == 0 and probe["src_tokens"] == []


@pytest.mark.slow
def test_an_encoder_snapshot_reads_each_probe_sentence_once(one_stack_runs):
    probes = RunDir(one_stack_runs["encoder"]).load_snapshot(10)["probes"]
    assert [p["sentence"] for p in probes][:1] == ["go ."]
    first = probes[0]
    assert first["src_tokens"] == ["<bos>", "go", ".", "<eos>"]
    assert first["encoder"].shape == (2, 4, 4, 4)  # the tiny model's 2 layers of 4 heads
    assert first["decoder_self"].numel() == first["cross"].numel() == 0
    assert first["output_tokens"] == []


@pytest.mark.slow
def test_the_trajectories_of_an_induction_run_carry_its_circuit_scores(one_stack_runs):
    run = one_stack_runs["induction"]
    t = head_trajectories(run, None, 10, "measure")
    table = t.frame("probes")
    assert set(table["kind"]) == {"decoder_self"} and len(table) == 2 * 2 * 4
    evals = {r["step"]: r for r in circuit_evals(RunDir(run).read_metrics())}
    for _, row in table.iterrows():
        for measure in ("induction", "previous_token", "duplicate_token"):
            expected = score(evals[row["step"]], measure, (row["layer"], row["head"]))
            assert row[measure] == pytest.approx(expected)
    assert {"induction", "previous", "entropy"} <= set(t.available()["probes"])
    assert t.model_steps == [] and t.notes == []  # no translation to teacher-force
    assert t.phase is None  # 20 steps: no head formed


@pytest.mark.slow
def test_the_trajectories_of_an_encoder_run_read_its_one_kind(one_stack_runs):
    t = head_trajectories(one_stack_runs["encoder"], None, 10, "measure")
    table = t.frame("probes")
    assert set(table["kind"]) == {"encoder"} and sorted(set(table["step"])) == [10, 20]
    assert table["entropy"].notna().all()
    evals = {r["step"]: r for r in circuit_evals(RunDir(one_stack_runs["encoder"]).read_metrics())}
    for _, row in table.iterrows():  # its circuit scores, where its evaluations measure them
        found = evals.get(row["step"])
        expected = score(found, "induction", (row["layer"], row["head"])) if found else None
        assert (
            row["induction"] == pytest.approx(expected) if found else math.isnan(row["induction"])
        )
    assert t.model_steps == [] and t.notes == []


def test_the_phase_change_is_marked_from_the_runs_circuit_scores():
    """Over the shipped induction model's evaluations, the records at its steps get each head's
    scores and the trajectories the phase change ``phase_change`` finds."""
    records = HistoryFile(SHIPPED_HISTORY).read_metrics()
    evals = circuit_evals(records)
    out = Trajectories(steps=[e["step"] for e in evals])
    for e in evals:
        out.records += [
            {"basis": "probes", "step": e["step"], "kind": "decoder_self", "layer": 1, "head": h}
            for h in range(4)
        ]
    with_circuits(out, records)
    assert out.phase == phase_change(evals) and out.phase is not None
    last = [r for r in out.records if r["step"] == evals[-1]["step"]]
    assert [r["induction"] for r in last] == evals[-1]["circuits"]["induction"][1]
    assert json.loads(json.dumps(as_json_lines(out)[0]))["phase"]["formed"] == out.phase["formed"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["run", "best.pt", "best.hf"])
def test_the_command_prints_an_induction_runs_heads_and_scores(one_stack_runs, capsys, where):
    run = one_stack_runs["induction"]
    flag = ["--run", str(run)] if where == "run" else ["--checkpoint", str(run / where)]
    assert trajectories_command.main([*flag, "--probes-only"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    head, records = lines[0], lines[1:]
    assert head["steps"] == [10, 20] and head["phase"] is None
    assert "induction" in head["available"]["probes"]
    assert len(records) == 16 and all(r["kind"] == "decoder_self" for r in records)
    assert all(
        isinstance(r["induction"], float) and not math.isnan(r["induction"]) for r in records
    )
    same = head_trajectories(run, None, 10, "off").records  # what the page calls
    assert [r["induction"] for r in records] == [r["induction"] for r in same]


def test_the_shipped_induction_model_replays_its_snapshots_and_circuit_scores(capsys):
    """checkpoints/induction-2l.hf beside its .history (trained once runs kept snapshots):
    ``python -m core.trajectories`` prints every head of both layers at each snapshot with its
    circuit scores and the phase change; the history is small and names no machine path."""
    assert SHIPPED_HISTORY.stat().st_size < 2 * 2**20  # the shipped histories: a few MB at most
    blob = SHIPPED_HISTORY.read_bytes()
    assert not [p for p in (b"/work/", b"/tmp/", b"/home/", b"/root/") if p in blob]
    steps = HistoryFile(SHIPPED_HISTORY).snapshot_steps()
    assert len(steps) >= 10, "the shipped history keeps no snapshots: NO_SNAPSHOTS"
    argv = ["--checkpoint", str(SHIPPED_FOLDER), "--probes-only"]
    assert trajectories_command.main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    head, records = lines[0], lines[1:]
    assert head["steps"] == steps and head["phase"]["formed"] == 575
    assert head["phase"]["before"] < head["phase"]["formed"]
    assert len(records) == 2 * 4 * len(steps) and {r["kind"] for r in records} == {"decoder_self"}
    best = (head["phase"]["layer"], head["phase"]["head"])
    ours = [r["induction"] for r in records if (r["layer"], r["head"]) == best]
    assert ours[0] < 0.1 and ours[-1] >= 0.5  # before the phase change, and after


def test_a_model_folder_with_no_run_beside_it_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "alone.hf"
    shutil.copytree(SHIPPED_FOLDER, folder)
    assert trajectories_command.main(["--checkpoint", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and NO_HISTORY in err


def test_replaying_is_decided_from_the_disk_not_from_the_family():
    assert replay_problem(False, 0) == NO_HISTORY
    assert replay_problem(True, 0) == NO_SNAPSHOTS
    assert replay_problem(True, 3) is None
    families = ("studio", "hugging face", "language model", "masked language model")
    assert all(problem(f, "", "training", t) is None for f in families for t in ("", "induction"))


@pytest.mark.slow
@pytest.mark.parametrize("task, images", [("induction", 2), ("encoder", 8)])
def test_the_tensorboard_export_draws_the_one_kind_a_snapshot_holds(
    one_stack_runs, tmp_path, task, images
):
    """One image per probe and snapshot, of the kind it holds (an empty kind once divided by
    zero): the induction run's one sequence, the encoder's four probe sentences, at 2 steps."""
    from core.figures.tensorboard import export_tensorboard

    done = export_tensorboard(one_stack_runs[task], tmp_path / "tb")
    assert done["images"] == images and done["left_out"] == {}
