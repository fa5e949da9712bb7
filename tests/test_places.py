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
