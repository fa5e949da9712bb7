"""Tests for core.places: the run and model directories follow the environment."""

from __future__ import annotations

from core import places


def test_dirs_follow_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(places.CHECKPOINTS_ENV, str(tmp_path / "c"))
    monkeypatch.setenv(places.RUNS_ENV, str(tmp_path / "r"))
    assert places.checkpoints_root() == tmp_path / "c" and places.runs_root() == tmp_path / "r"
    monkeypatch.delenv(places.CHECKPOINTS_ENV)
    assert places.checkpoints_root() == places.REPO_ROOT / "checkpoints"
