"""Tests for core.corpus.user_files: only the app's folders are read, uploads staged and counted."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from core.corpus import user_files as corpus_files
from core.corpus.source import DataError
from core.places import DATA_ENV, RUNS_ENV, runs_root
from core.training.settings import merged_settings
from tests.helpers import TINY_JOB, TINY_PRESET


def test_uploads_are_size_limited_and_counted(jobs_env, monkeypatch):
    path = corpus_files.stage_upload("mine.tsv", b"Go.\tVa !\nbroken line\nHi.\tSalut.\n")
    assert path.parent.parent == runs_root() / corpus_files.UPLOADS and path.name == "mine.tsv"
    info = corpus_files.inspect_data(path)
    assert (info["usable"], info["skipped"]) == (2, 1)
    with pytest.raises(DataError, match="no usable sentence pairs"):
        corpus_files.inspect_data(corpus_files.stage_upload("bad.txt", b"no tabs here\n"))
    monkeypatch.setattr(corpus_files, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(DataError, match="upload limit"):
        corpus_files.stage_upload("big.tsv", b"x" * 11)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (None, "data unknown"),
        ({"source": "fra-eng", "split": "random", "max_len": 12}, "fra-eng (Tatoeba), ≤12 tokens"),
        (
            merged_settings(TINY_PRESET, TINY_JOB)["data"],
            "tiny.tsv, first 24 + 6 pairs, ≤20 tokens",
        ),
        ({"source": "/data/tiny.tsv", "split": "head", "max_len": 20}, "tiny.tsv, ≤20 tokens"),
        ({"source": "t.tsv", "split": "head", "num_train": 0, "num_val": 128}, "t.tsv, all pairs"),
        (
            {"source": "fra-eng", "max_len": 12, "tokenizer": "bpe", "bpe_vocab": 6000},
            "fra-eng (Tatoeba), ≤12 tokens, BPE pieces (6000)",
        ),
    ],
)
def test_describe_data(data, text):
    assert corpus_files.describe_data(data) == text


# ----------------------------------------------------------------------------- the app's folders


def write_pairs(path):
    """A small valid pairs file at ``path``; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Go.\tVa !\nHi.\tSalut.\n")
    return path


@pytest.fixture
def folders(tmp_path, monkeypatch) -> dict:
    """Data folder, download cache and runs root in tmp_path; a valid corpus outside them."""
    dirs = {name: tmp_path / name for name in ("data", "cache", "runs")}
    monkeypatch.setenv(DATA_ENV, str(dirs["data"]))
    monkeypatch.setenv("ATTENTION_STUDIO_CACHE", str(dirs["cache"]))
    monkeypatch.setenv(RUNS_ENV, str(dirs["runs"]))
    return {**dirs, "outside": write_pairs(tmp_path / "elsewhere" / "pairs.tsv")}


def test_files_in_the_app_folders_are_read(folders):
    write_pairs(folders["data"] / "sub" / "mine.tsv")
    info = corpus_files.inspect_data("sub/mine.tsv")  # relative: in the data folder
    assert info["path"] == str(folders["data"] / "sub" / "mine.tsv") and info["usable"] == 2
    assert corpus_files.inspect_data(write_pairs(folders["cache"] / "c.tsv"))["usable"] == 2
    assert corpus_files.source_problems(str(folders["data"] / "sub" / "mine.tsv")) == []


def outside_absolute(f):
    return str(f["outside"])


def outside_by_dots(f):
    return "../elsewhere/pairs.tsv"


def outside_by_symlink(f):
    link = f["data"] / "link.tsv"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f["outside"])
    return "link.tsv"


def outside_home(f):
    return "~/pairs.tsv"


def device_outside(f):
    return "/dev/zero"


@pytest.mark.parametrize(
    "make", [outside_absolute, outside_by_dots, outside_by_symlink, outside_home, device_outside]
)
def test_files_outside_the_app_folders_are_refused(folders, make):
    """Whatever the path looks like, it is resolved first; outside the folders it is refused."""
    source = make(folders)
    with pytest.raises(DataError, match="outside") as refused:
        corpus_files.inspect_data(source)
    message = str(refused.value)
    assert "data folder (data/)" in message and "download cache" in message and DATA_ENV in message
    for folder in (folders["data"], folders["cache"], folders["outside"].parent):
        assert str(folder) not in message  # no folder of the server is named
    assert corpus_files.source_problems(source) == [str(refused.value)]


def missing(f, monkeypatch):
    return "missing.tsv"


def folder(f, monkeypatch):
    (f["data"] / "folder.tsv").mkdir(parents=True)
    return "folder.tsv"


def device(f, monkeypatch):
    monkeypatch.setenv(DATA_ENV, "/dev")
    return "zero"


def fifo(f, monkeypatch):
    f["data"].mkdir(parents=True, exist_ok=True)
    os.mkfifo(f["data"] / "pipe.tsv")
    return "pipe.tsv"


def unreadable(f, monkeypatch):
    path = write_pairs(f["data"] / "locked.tsv")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: refuse it the way the kernel would
        real_open = Path.open

        def refusing_open(self, *args, **kwargs):
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", refusing_open)
    return "locked.tsv"


def latin1(f, monkeypatch):
    path = f["data"] / "latin1.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("été\tsummer\n".encode("latin-1"))
    return "latin1.tsv"


def zipped(f, name: str) -> bytearray:
    """The bytes of a zip of fra.txt (a few hundred pairs), written as data/<name>."""
    path = f["data"] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fra.txt", "".join(f"Go {i}.\tVa {i} !\n" for i in range(300)))
    return bytearray(path.read_bytes())


def truncated_zip(f, monkeypatch):
    raw = zipped(f, "cut.zip")
    (f["data"] / "cut.zip").write_bytes(raw[:-40])
    return "cut.zip"


def corrupt_zip(f, monkeypatch):
    raw = zipped(f, "corrupt.zip")
    start = raw.index(b"fra.txt") + len("fra.txt")  # the compressed data follows the name
    raw[start + 20 : start + 60] = bytes(40)
    (f["data"] / "corrupt.zip").write_bytes(raw)
    return "corrupt.zip"


def encrypted_zip(f, monkeypatch):
    raw = zipped(f, "locked.zip")
    for at in (raw.index(b"PK\x03\x04") + 6, raw.rindex(b"PK\x01\x02") + 8):
        raw[at] |= 1  # the "encrypted" flag bit
    (f["data"] / "locked.zip").write_bytes(raw)
    return "locked.zip"


def nul_byte(f, monkeypatch):
    return "bad\0name.tsv"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (missing, "Corpus file not found"),
        (folder, "is a folder"),
        (device, "not a regular file"),
        (fifo, "not a regular file"),
        (unreadable, r"cannot be read \(Permission denied\)"),
        (latin1, "not UTF-8"),
        (truncated_zip, "damaged or unsupported zip"),
        (corrupt_zip, "damaged or unsupported zip"),
        (encrypted_zip, "damaged or unsupported zip.*encrypted"),
        (nul_byte, "not a usable file path"),
    ],
)
def test_every_read_error_is_a_data_error(folders, monkeypatch, make, message):
    """No read error escapes as another exception: each is a DataError that says what to do."""
    source = make(folders, monkeypatch)
    with pytest.raises(DataError, match=message) as refused:
        corpus_files.inspect_data(source)
    assert corpus_files.source_problems(source) == [str(refused.value)]
