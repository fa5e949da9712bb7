"""Tests for core.attention.snapshots: a probe sentence's attention over training, with its
metrics."""

from __future__ import annotations

import shutil

import pytest

from core.attention import snapshots
from core.corpus.text import tokenize
from core.runs.run_dir import RunDir
from core.training.config import D2L_PROBES


def test_snapshot_series_with_metrics(tiny_run):
    assert snapshots.probe_sentences(tiny_run) == D2L_PROBES
    series = snapshots.snapshot_series(tiny_run, "i'm home .")
    assert series.steps == RunDir(tiny_run).snapshot_steps() == [50, 100, 150]
    records = RunDir(tiny_run).read_metrics()
    for frame in series.frames:
        losses = [r["loss"] for r in records if r["record"] == "train" and r["step"] <= frame.step]
        assert frame.loss == pytest.approx(losses[-1])
        assert frame.val_bleu is None  # the tiny run has no validation split
        assert frame.maps.encoder.shape == (2, 4, 4, 4)
        assert frame.maps.src_tokens == ["i'm", "home", ".", "<eos>"]
    assert series.frames[-1].maps.output_tokens == tokenize("je suis chez moi .") + ["<eos>"]
    assert snapshots.snapshot_series(tiny_run, "never probed .").frames == []


def test_snapshot_series_skips_damaged_files(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "snapshots" / "step_00000200.pt").write_bytes(b"garbage")
    RunDir(run).append_metrics({"record": "eval", "step": 100, "val_bleu": 12.0, "val_loss": 1.5})
    series = snapshots.snapshot_series(run, "go .")
    assert series.steps == [50, 100, 150] and series.skipped == ["step 200: UnpicklingError"]
    assert (series.frames[1].val_bleu, series.frames[1].val_loss) == (12.0, 1.5)
    assert snapshots.probe_sentences(run) == D2L_PROBES  # falls back to an older snapshot
    assert snapshots.probe_sentences(tmp_path / "nothing") == []
