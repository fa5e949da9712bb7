"""Portable checkpoints: the data they were trained on is named, never a machine path."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from core.corpus.source import FRA_ENG_SHA1, sha1_of
from core.model.checkpoints import (
    CheckpointError,
    compact,
    data_config_of,
    portable_data_config,
    read_checkpoint,
    save_checkpoint,
)
from core.model.studio_loading import load_checkpoint
from core.model.transformer import Transformer
from tests.helpers import SHIPPED, TINY

MACHINE_PATH = re.compile(r"^(/|[A-Za-z]:[\\/])")  # POSIX root or a Windows drive letter


def strings(obj) -> list[str]:
    """Every string inside nested dicts, lists and tuples (keys included)."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in strings(k) + strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in strings(v)]
    return []


@pytest.mark.parametrize("name", ["last.pt", "best.pt"])
def test_training_never_saves_the_corpus_path(tiny_run, name):
    """A run's checkpoints name their corpus by base name and SHA-1, not by its path."""
    ckpt = read_checkpoint(tiny_run / name)
    assert not [s for s in strings(ckpt) if str(TINY.parent) in s or MACHINE_PATH.match(s)]
    data = ckpt["data_config"]
    assert data["source"] == "tiny.tsv" and data["source_sha1"] == sha1_of(TINY)
    assert data["split"] == "head" and data["min_freq"] == 1  # the split settings stay
    assert data_config_of(ckpt).source == "tiny.tsv"


def test_the_shipped_checkpoint_holds_no_machine_path():
    """checkpoints/fra-eng-small.pt names fra-eng and keeps float16 weights, loaded safely."""
    if not SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    ckpt = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    assert [s for s in strings(ckpt) if MACHINE_PATH.match(s)] == []
    assert ckpt["data_config"]["source"] == "fra-eng"
    assert {v.dtype for v in ckpt["state_dict"].values()} == {torch.float16}
    assert "optimizer" not in ckpt and "rng" not in ckpt
    load_checkpoint(SHIPPED)


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("/home/ada/corpora/pairs.tsv", "pairs.tsv"),
        ("C:\\Users\\ada\\pairs.tsv", "pairs.tsv"),
        ("D:/corpora/pairs.zip", "pairs.zip"),
        ("fra-eng", "fra-eng"),
    ],
)
def test_sources_become_names(source, name):
    """Any path becomes its base name (POSIX or Windows); "fra-eng" stays."""
    data = portable_data_config({"source": source, "max_len": 9})
    assert data["source"] == name and data["max_len"] == 9


def test_a_file_is_named_and_hashed(tmp_path, monkeypatch):
    """A local corpus gets its SHA-1; d2l's fra-eng.zip, recognised by it, is "fra-eng"."""
    copy = tmp_path / "my-pairs.tsv"
    shutil.copy(TINY, copy)
    data = portable_data_config({"source": str(copy), "split": "head"})
    assert data == {"source": "my-pairs.tsv", "split": "head", "source_sha1": sha1_of(TINY)}
    assert portable_data_config({"source": "ignored"}, path=copy)["source_sha1"] == sha1_of(TINY)
    monkeypatch.setattr("core.model.checkpoints.FRA_ENG_SHA1S", (sha1_of(TINY),))
    assert portable_data_config({"source": str(copy)})["source"] == "fra-eng"
    assert portable_data_config({"source": "fra-eng"}, path=copy)["source"] == "fra-eng"


def test_fra_eng_by_name_keeps_its_checksum(monkeypatch, tmp_path):
    """ "fra-eng" with no local copy is recorded with d2l's official SHA-1."""
    monkeypatch.setenv("FRA_ENG_ZIP", str(tmp_path / "absent.zip"))
    assert portable_data_config({"source": "fra-eng"})["source_sha1"] == FRA_ENG_SHA1


def test_compact_copy_makes_an_old_checkpoint_portable(tiny_model, tmp_path):
    """A checkpoint saved with a machine path loses it when compacted (to ship or promote)."""
    old = tmp_path / "old.pt"
    data = {"source": str(TINY), "split": "head"}
    save_checkpoint(
        old, tiny_model.model, tiny_model.src_vocab, tiny_model.tgt_vocab, data_config=data
    )
    ckpt = read_checkpoint(compact(old, tmp_path / "small.pt"))
    assert ckpt["data_config"] == {**data, "source": "tiny.tsv", "source_sha1": sha1_of(TINY)}
    assert not [s for s in strings(ckpt) if MACHINE_PATH.match(s)]


def test_compact_refuses_weights_float16_cannot_hold(tiny_model, tmp_path):
    """A weight past float16's range would become inf: the compact copy is refused."""
    model = Transformer(tiny_model.model.cfg)
    with torch.no_grad():
        next(model.parameters())[0] = 1e6
    src = tmp_path / "big.pt"
    save_checkpoint(src, model, tiny_model.src_vocab, tiny_model.tgt_vocab)
    with pytest.raises(CheckpointError, match="try --float32"):
        compact(src, tmp_path / "small.pt")
    assert not (tmp_path / "small.pt").exists()
    compact(src, tmp_path / "small.pt", half=False)


def test_a_checkpoints_corpus_is_found_only_in_the_apps_folders_and_by_content(
    tmp_path, monkeypatch
):
    """Never the current directory's file of that name; never a file of other content."""
    from pathlib import Path

    from core.corpus.source import DataError, sha1_of
    from core.model.checkpoints import trained_data

    data_folder = tmp_path / "data"
    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(data_folder))

    right = b"go .\tva !\ni lost .\tj'ai perdu .\n"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data.tsv").write_bytes(right)
    monkeypatch.chdir(tmp_path / "elsewhere")
    meta = {"data_config": {"source": "data.tsv", "source_sha1": sha1_of(Path("data.tsv"))}}
    with pytest.raises(DataError, match="cannot be rebuilt"):
        trained_data(meta)  # only in the current directory: not read
    (data_folder / "data.tsv").write_bytes(b"other .\tautre .\n")
    with pytest.raises(DataError, match="not the corpus this model was trained on"):
        trained_data(meta)
    (data_folder / "data.tsv").write_bytes(right)
    assert trained_data(meta).source == str(data_folder / "data.tsv")
    given = tmp_path / "elsewhere" / "data.tsv"  # --data on the command line: taken as given
    assert trained_data(meta, str(given)).source == str(given)


def test_a_checkpoint_trained_on_fra_eng_zip_finds_the_copy_the_app_reads(tmp_path, monkeypatch):
    """A model that records fra-eng.zip by name (the shipped decoder) finds the app's own
    copy of it ($FRA_ENG_ZIP, else the cache), checked by its SHA-1 like any recorded file."""
    from core.corpus.source import DataError, sha1_of
    from core.model.checkpoints import trained_data

    monkeypatch.setenv("ATTENTION_STUDIO_DATA", str(tmp_path / "data"))  # an empty folder
    copy = tmp_path / "elsewhere" / "my-copy.zip"
    copy.parent.mkdir()
    copy.write_bytes(b"pretend zip bytes")
    monkeypatch.setenv("FRA_ENG_ZIP", str(copy))
    meta = {"data_config": {"source": "fra-eng.zip", "source_sha1": sha1_of(copy)}}
    assert trained_data(meta).source == str(copy)
    wrong = {"data_config": {"source": "fra-eng.zip", "source_sha1": "0" * 40}}
    with pytest.raises(DataError, match="not the corpus this model was trained on"):
        trained_data(wrong)
