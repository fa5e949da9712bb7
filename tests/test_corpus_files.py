"""Tests for core.corpus_files: uploads staged and counted, data described in words."""

from __future__ import annotations

import pytest

from core import corpus_files
from core.data import DataError
from core.places import runs_root
from core.settings import merged_settings
from tests.helpers import TINY_JOB, TINY_PRESET


def test_uploads_are_size_limited_and_counted(jobs_env, monkeypatch):
    path = corpus_files.stage_upload("mine.tsv", b"Go.\tVa !\nbroken line\nHi.\tSalut.\n")
    assert path.parent == runs_root() / corpus_files.UPLOADS
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
    ],
)
def test_describe_data(data, text):
    assert corpus_files.describe_data(data) == text
