"""Tests for the models a run keeps at its snapshots and what they measure: every head on the
validation sentences at every kept step, the source share (ALTI+) per step, the numbers kept
in a model's .history file (read there without the run or the corpus), and the thinning."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from core import checkpoint as checkpoint_command
from core import trajectories as command
from core.alignment.head_aer import head_trajectories, source_share, store_in_history
from core.attention.trajectories import STORED_KEY, Trajectories, snapshot_models, trajectories
from core.attention.trajectory_reading import source_share_reading
from core.attribution.methods import attribute
from core.corpus.vocab import Vocab
from core.figures.trajectories import trajectory_figure
from core.model.checkpoints import read_checkpoint, read_metadata
from core.model.studio_model import StudioModel
from core.runs.history import HistoryFile, history_path
from core.runs.run_dir import RunDir, thinned
from tests import helpers


@pytest.fixture
def runs_env(tmp_path, monkeypatch):
    """The runs root (and so the trajectories cache) in a temporary directory."""
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


# ----------------------------------------------------------------------------- kept models


def test_a_run_keeps_a_float16_model_at_every_snapshot(val_run):
    rd = RunDir(val_run)
    assert rd.snapshot_model_steps() == rd.snapshot_steps() == [40, 80, 120, 160]
    for step in rd.snapshot_model_steps():
        ckpt = read_checkpoint(rd.snapshot_model(step))
        assert ckpt["state"]["step"] == step
        assert "optimizer" not in ckpt
        floats = [v for v in ckpt["state_dict"].values() if v.is_floating_point()]
        assert floats and all(v.dtype == torch.float16 for v in floats)
    last = read_checkpoint(rd.last)["state_dict"]  # the last kept model is the last weights
    kept = read_checkpoint(rd.snapshot_model(160))["state_dict"]
    for name, value in last.items():
        if value.is_floating_point():
            torch.testing.assert_close(kept[name].float(), value.half().float())


def test_snapshot_models_zero_keeps_none(tmp_path):
    out = tmp_path / "run"
    assert helpers.train_tiny(out, "--epochs", "20", "--snapshot-models", "0") == 0
    assert RunDir(out).snapshot_steps() and not RunDir(out).snapshot_model_steps()


@pytest.mark.parametrize(
    ("steps", "keep", "gone"),
    [
        ([1, 2, 3], 3, set()),
        ([1, 2, 3, 4], 3, {2, 4} - {4}),  # every other one goes, the last stays
        ([10, 20, 30, 40, 50, 60], 5, {20, 40}),
        ([1, 2, 3], 1, {1, 2}),
        ([1, 2, 3], 0, {1, 2, 3}),
    ],
)
def test_thinning_keeps_the_first_and_last_spread_evenly(steps, keep, gone):
    assert thinned(steps, keep) == gone


def test_a_run_keeps_at_most_snapshot_models(tmp_path):
    out = tmp_path / "run"
    extra = ("--epochs", "40", "--eval-every", "8", "--snapshot-models", "3")
    assert helpers.train_tiny(out, *extra) == 0
    rd = RunDir(out)
    kept, snaps = rd.snapshot_model_steps(), rd.snapshot_steps()
    # 8 16 24 | +32: 8 24 32 | +40: 8 32 40 (every other one, and the last)
    assert len(snaps) == 5 and kept == [8, 32, 40]
    assert set(kept) <= set(snaps)


def test_rewind_drops_later_kept_models(val_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(val_run, run)
    RunDir(run).rewind(80)
    assert RunDir(run).snapshot_model_steps() == [40, 80]


# ----------------------------------------------------------------------------- measuring


def test_every_kept_step_has_validation_numbers_and_a_source_share(runs_env, val_run):
    seen = []
    result = head_trajectories(val_run, sentences=6, progress=lambda f, w: seen.append((f, w)))
    steps = RunDir(val_run).snapshot_steps()
    assert result.model_steps == steps and not result.notes and not result.pending
    table = result.frame("validation")
    assert sorted(set(table["step"])) == steps
    assert len(table) == len(steps) * len(result.frame("probes")) // len(result.steps)
    share = result.model_frame()
    assert share["step"].tolist() == steps
    assert share["source_share"].between(0, 1).all()
    assert seen[-1][0] == 1.0 and [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert any(w.startswith("validation at step") for _, w in seen)
    again = head_trajectories(val_run, sentences=6, validation="cached")
    assert again.computed == 0 and again.model_records == result.model_records
    assert again.frame().equals(result.frame())


def test_source_share_is_alti_plus_on_the_references(val_run):
    lm = StudioModel.load(RunDir(val_run).snapshot_model(160))
    rows = [([5, 6, Vocab.eos_id], [7, 8]), ([9, Vocab.eos_id], [10])]
    by_hand = [attribute(lm, s, [*t, Vocab.eos_id], "alti").source_share.mean() for s, t in rows]
    assert source_share(lm, rows) == pytest.approx(float(np.mean(by_hand)))
    assert math.isnan(source_share(lm, []))


def test_a_bpe_run_measures_its_kept_models(runs_env, tmp_path):
    out = tmp_path / "bpe"
    extra = ("--tokenizer", "bpe", "--bpe-vocab", "120", "--num-train", "24", "--num-val", "6")
    assert helpers.train_tiny(out, *extra, "--epochs", "60", "--eval-every", "20") == 0
    result = head_trajectories(out, sentences=6)
    assert result.model_steps == RunDir(out).snapshot_model_steps() == [20, 40, 60]
    assert not result.notes and not result.pending
    cross = result.frame("validation").query("kind == 'cross'")
    assert sorted(set(cross["step"])) == [20, 40, 60] and cross["aer"].between(0, 1).all()
    assert result.model_frame()["source_share"].between(0, 1).all()


# ----------------------------------------------------------------------------- history files


def _saved_model(run, dest):
    """The run's last.pt saved as a model with its history, as ``core.checkpoint`` does."""
    assert checkpoint_command.main([str(run / "last.pt"), str(dest)]) == 0
    return dest


def test_the_checkpoint_command_reports_progress_while_it_measures(
    runs_env, val_run, tmp_path, monkeypatch
):
    """Issue 53, item 8: `core.checkpoint` was silent for 7 minutes while it measured."""
    seen = []

    def measuring(run_dir, checkpoint, up_to_step=None, progress=None, **_):
        seen.append(progress)
        progress(0.5, "validation at step 50")

    monkeypatch.setattr(checkpoint_command, "store_in_history", measuring)
    run = tmp_path / "run"
    shutil.copytree(val_run, run)
    assert checkpoint_command.main([str(run / "last.pt"), str(tmp_path / "m.pt")]) == 0
    assert len(seen) == 1 and callable(seen[0])


def test_a_saved_model_carries_its_heads_over_training(runs_env, val_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(val_run, run)
    dest = _saved_model(run, tmp_path / "models" / "m.pt")
    section = HistoryFile(history_path(dest)).section(STORED_KEY)
    assert section["sentences"] == 100
    assert [s["model"]["step"] for s in section["steps"]] == RunDir(run).snapshot_steps()
    measured = head_trajectories(run, None, 100, "cached")
    shutil.rmtree(run)  # neither the run nor the cache nor the corpus is needed any more
    shutil.rmtree(runs_env, ignore_errors=True)
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path / "nowhere"))
    shipped = head_trajectories(history_path(dest), dest, 100, "cached")
    assert shipped.model_steps == measured.model_steps and not shipped.pending
    assert shipped.frame("validation").equals(measured.frame("validation"))
    assert shipped.model_records == measured.model_records


def test_the_history_keeps_steps_up_to_the_models_own(runs_env, val_run, tmp_path):
    store_dest = tmp_path / "early.pt"
    shutil.copy(RunDir(val_run).snapshot_model(80), store_dest)
    history_path(store_dest).write_bytes(b"")  # no history file worth the name: refused
    with pytest.raises(ValueError):
        store_in_history(val_run, store_dest, 80, sentences=6)
    history_path(store_dest).unlink()
    assert store_in_history(val_run, store_dest, 80, sentences=6) is None  # no history file
    dest = tmp_path / "m.pt"
    assert checkpoint_command.main([str(val_run / "last.pt"), str(dest), "--no-trajectories"]) == 0
    assert HistoryFile(history_path(dest)).section(STORED_KEY) is None
    store_in_history(val_run, dest, 80, sentences=6)
    steps = HistoryFile(history_path(dest)).section(STORED_KEY)["steps"]
    assert [s["model"]["step"] for s in steps] == [40, 80]


def test_a_history_with_other_sentences_is_not_used(runs_env, val_run, tmp_path):
    dest = tmp_path / "m.pt"
    assert checkpoint_command.main([str(val_run / "last.pt"), str(dest), "--no-trajectories"]) == 0
    store_in_history(val_run, dest, None, sentences=6)
    other = trajectories(history_path(dest), dest, sentences=7, validation="cached")
    assert other.pending == [read_metadata(dest)["state"]["step"]]


def test_the_command_prints_the_source_share(runs_env, val_run, capsys):
    assert command.main(["--run", str(val_run), "--sentences", "6"]) == 0
    head = json.loads(capsys.readouterr().out.splitlines()[0])
    shares = head["model_records"]
    assert [r["step"] for r in shares] == RunDir(val_run).snapshot_steps()
    assert all(0 <= r["source_share"] <= 1 for r in shares)


def test_snapshot_models_prefer_the_full_precision_checkpoint(val_run):
    rd = RunDir(val_run)
    full = {read_metadata(p)["state"]["step"]: p.name for p in (rd.last, rd.best)}
    models = snapshot_models(val_run)
    assert sorted(models) == rd.snapshot_model_steps()
    for step, path in models.items():
        assert path.name == full.get(step, f"model_{step:08d}.pt")


# ----------------------------------------------------------------------------- reading, figure


def _share(values):
    return pd.DataFrame(
        {"step": [100 * (i + 1) for i in range(len(values))], "source_share": values}
    )


def test_reading_the_source_share():
    assert source_share_reading(_share([0.5])) is None
    dip = source_share_reading(_share([0.50, 0.40, 0.60]))
    assert "lowest 0.400 at step 200" in dip and "fell first, then rose" in dip
    assert "rose from the first" in source_share_reading(_share([0.3, 0.4, 0.5]))
    assert "did not rise" in source_share_reading(_share([0.5, 0.45, 0.44]))
    flat = source_share_reading(_share([0.853, 0.650, 0.604, 0.559, 0.560, 0.5595]))  # the audit's
    assert "did not rise" in flat and "then rose" not in flat  # +0.0006 past the lowest: no rise


def test_the_figure_shows_the_source_share_under_the_loss(runs_env, val_run):
    result = head_trajectories(val_run, sentences=6)
    table = result.frame("validation")
    records = RunDir(val_run).read_metrics()
    fig = trajectory_figure(
        table, "entropy", "cross", table.iloc[:0], records, 80, "", result.model_frame()
    )
    names = [t.name for t in fig.data]
    assert "source share (ALTI+)" in names
    share = next(t for t in fig.data if t.name == "source share (ALTI+)")
    assert list(share.x) == RunDir(val_run).snapshot_steps()
    plain = trajectory_figure(table, "entropy", "cross", table.iloc[:0], records, 80, "", None)
    assert "source share (ALTI+)" not in [t.name for t in plain.data]


def test_an_empty_result_has_an_empty_model_frame():
    assert Trajectories().model_frame().empty


def test_a_large_model_keeps_fewer_copies_and_one_past_the_budget_none():
    from core.runs.budget import KEPT_MODELS_BYTES
    from core.runs.run_bytes import models_to_keep

    shape = {"num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2}
    assert models_to_keep(20, 110, shape) == 20 and models_to_keep(0, 110, shape) == 0
    eighth = KEPT_MODELS_BYTES // 16  # parameters whose float16 copy is an eighth of the budget
    assert models_to_keep(20, eighth, shape) == 8
    assert models_to_keep(20, KEPT_MODELS_BYTES, shape) == 0  # one copy alone passes it


def test_a_copy_without_the_corpus_says_so_and_keeps_no_empty_steps(
    runs_env, val_run, tmp_path, monkeypatch, capsys
):
    """Where the run's corpus is gone, ``core.checkpoint`` writes the history without the
    validation numbers and says why (it kept empty steps silently before)."""
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path / "nowhere"))
    dest = tmp_path / "m.pt"
    assert checkpoint_command.main([str(val_run / "last.pt"), str(dest)]) == 0
    out = capsys.readouterr().out
    said = "note: no validation numbers over training in the history: none of the 4 kept models"
    assert said in out and out.count("cannot be rebuilt") == 1  # the reason, once
    assert HistoryFile(history_path(dest)).section(STORED_KEY) is None
    shipped = head_trajectories(history_path(dest), dest, 100, "cached")
    assert shipped.frame("validation").empty  # nothing claimed measured
