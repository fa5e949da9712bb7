"""Tests for core.places: the run, model and corpus folders follow the environment."""

from __future__ import annotations

from core import places


def test_dirs_follow_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(places.CHECKPOINTS_ENV, str(tmp_path / "c"))
    monkeypatch.setenv(places.RUNS_ENV, str(tmp_path / "r"))
    assert places.checkpoints_root() == tmp_path / "c" and places.runs_root() == tmp_path / "r"
    monkeypatch.delenv(places.CHECKPOINTS_ENV)
    assert places.checkpoints_root() == places.REPO_ROOT / "checkpoints"


def test_data_folder_follows_environment_and_is_created(monkeypatch, tmp_path):
    monkeypatch.setenv(places.DATA_ENV, str(tmp_path / "mine"))
    assert places.data_root() == tmp_path / "mine" and (tmp_path / "mine").is_dir()
    monkeypatch.delenv(places.DATA_ENV)
    monkeypatch.setattr(places, "REPO_ROOT", tmp_path / "repo")
    assert places.data_root() == tmp_path / "repo" / "data" and places.data_root().is_dir()


def test_corpus_folders_are_data_cache_and_uploads(monkeypatch, tmp_path):
    for env, name in (
        (places.DATA_ENV, "data"),
        ("ATTENTION_STUDIO_CACHE", "cache"),
        (places.RUNS_ENV, "runs"),
    ):
        monkeypatch.setenv(env, str(tmp_path / name))
    assert places.corpus_folders() == [
        tmp_path / "data",
        tmp_path / "cache",
        tmp_path / "runs" / places.UPLOADS,
    ]


def test_checkpoints_and_a_runs_files_reach_the_disk_before_their_rename(tmp_path, monkeypatch):
    """Issue 49, item 9: an atomic rename is crash-safe; the fsync before it makes it
    power-loss-safe (the old file or the new one, whole)."""
    import os

    import torch

    from core.model.checkpoints import atomic_save
    from core.runs.run_dir import write_json

    order = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: order.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: order.append("replace") or real_replace(a, b))
    atomic_save({"x": torch.zeros(2)}, tmp_path / "last.pt")
    assert order[:2] == ["fsync", "replace"]
    order.clear()
    write_json(tmp_path / "status.json", {"state": "running"})
    assert order[:2] == ["fsync", "replace"]
    assert (tmp_path / "status.json").read_text().strip().startswith("{")
