"""A training process gives its free heap back: trim_heap after setup and at every record."""

from __future__ import annotations

import json
import sys

import pytest

from core.runs import system
from tests.helpers import train_tiny

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or system.MALLOC_TRIM is None, reason="glibc only"
)


@linux
def test_trim_heap_gives_freed_memory_back():
    blocks = [bytearray(1000) for _ in range(200_000)]  # about 200 MB in heap-sized pieces
    last = blocks[-1]  # the top of the heap stays in use, so free() alone cannot shrink it
    del blocks
    before = system.resident_mb()
    system.trim_heap()
    assert system.resident_mb() < before - 100, "malloc_trim gave nothing back"
    assert len(last) == 1000


def test_trim_heap_is_harmless_without_glibc(monkeypatch):
    monkeypatch.setattr(system, "MALLOC_TRIM", None)
    system.trim_heap()  # nothing to do, no error


def test_a_run_trims_after_setup_and_at_every_metrics_record(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("core.runs.recorder.trim_heap", lambda: calls.append("record"))
    monkeypatch.setattr("core.runs.training_run.trim_heap", lambda: calls.append("setup"))
    assert train_tiny(tmp_path / "run", "--epochs", "20", "--log-every", "5") == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if '"train"' in line]
    assert calls[0] == "setup" and calls.count("setup") == 1
    assert calls.count("record") == len(records) > 0
    assert all(r["rss_mb"] > 0 for r in records)  # sampled after the trim
