"""Memory bounds: corpora capped in pairs, lines and line length and read as streams; a trainer
launched by the app capped in memory, failing clearly instead of making the machine swap."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import zipfile

import pytest

from core.corpus import source
from core.corpus.config import DataConfig
from core.corpus.source import DataError, corpus_pairs
from core.corpus.splits import inspect_file, load_splits
from core.runs.trainer_process import trainer_env
from core.training import devices
from tests.helpers import ROOT


def write_pairs(path, n: int, line: bytes = b"ab\tcd\n"):
    """A corpus of ``n`` copies of one tiny pair."""
    path.write_bytes(line * n)
    return path


def test_more_pairs_than_the_cap_is_refused_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_PAIRS", 50)
    path = write_pairs(tmp_path / "many.tsv", 60)
    with pytest.raises(DataError, match=r"more than 50 sentence pairs; set max_pairs"):
        load_splits(DataConfig(source=str(path)))
    with pytest.raises(DataError, match="more than 50 sentence pairs"):
        inspect_file(path)
    splits = load_splits(DataConfig(source=str(path), max_pairs=50))  # stops before the cap
    assert splits.summary["pairs_read"] == 50


def test_more_lines_than_the_cap_is_refused(tmp_path, monkeypatch):
    """Blank and malformed lines count too: a file of empty lines is no way around the cap."""
    monkeypatch.setattr(source, "MAX_LINES", 100)
    path = tmp_path / "blank.tsv"
    path.write_bytes(b"ab\tcd\n" + b"\n" * 200)
    with pytest.raises(DataError, match=r"more than 100 lines"):
        inspect_file(path)


def test_a_huge_line_is_skipped_as_malformed_without_being_held(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_LINE_CHARS", 100)
    path = tmp_path / "huge.tsv"
    path.write_bytes(b"go .\tva !\n" + b"x" * 5000 + b"\tlong\n" + b"hi .\tsalut !\n")
    counts: dict = {}
    assert list(corpus_pairs(path, counts)) == [("go .", "va !"), ("hi .", "salut !")]
    assert counts == {"pairs": 2, "skipped": 1}
    assert inspect_file(path)["skipped"] == 1


@pytest.mark.slow  # writes and reads a 3 MB corpus twice, allocations traced
@pytest.mark.parametrize("zipped", [False, True])
def test_inspecting_a_corpus_streams_it(tmp_path, monkeypatch, zipped):
    """Counting half a million tiny pairs (3 MB) holds a few MB, not the pairs (holding them
    took 0.4 GB for 10 MB before, so about 120 MB here)."""
    monkeypatch.setattr(source, "MAX_PAIRS", 10**8)
    monkeypatch.setattr(source, "MAX_LINES", 10**8)
    path = write_pairs(tmp_path / "tiny.tsv", 3 * 2**20 // 6)
    if zipped:
        with zipfile.ZipFile(tmp_path / "tiny.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.write(path, "fra.txt")
        path = tmp_path / "tiny.zip"
    tracemalloc.start()
    try:
        info = inspect_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info["usable"] == 3 * 2**20 // 6 and info["examples"][0] == ("ab", "cd")
    assert peak < 16 * 2**20, f"inspecting held {peak / 2**20:.0f} MB"


def test_a_non_utf8_line_deep_in_a_streamed_file_is_a_clear_error(tmp_path):
    path = tmp_path / "latin.tsv"
    path.write_bytes(b"go .\tva !\n" * 100_000 + "caf\u00e9\tcaf\u00e9\n".encode("latin-1"))
    with pytest.raises(DataError, match="is not UTF-8 text"):
        inspect_file(path)


@pytest.mark.parametrize(
    ("value", "limit"),
    [(None, None), ("0", None), ("2", 2 * 2**30), ("0.5", 2**29), ("lots", None), ("inf", None)],
)
def test_the_trainer_memory_cap_is_read_from_its_environment(value, limit):
    env = {} if value is None else {devices.MEMORY_ENV: value}
    assert devices.memory_limit(env) == limit


def test_the_app_gives_each_trainer_process_a_share_of_the_memory():
    total = devices.total_memory()
    one = float(trainer_env(1, {})[devices.MEMORY_ENV])
    two = float(trainer_env(2, {})[devices.MEMORY_ENV])
    assert one == pytest.approx(devices.MEMORY_SHARE * total / 2**30, abs=0.01)
    assert two == pytest.approx(one / 2, abs=0.01)
    assert trainer_env(1, {devices.MEMORY_ENV: "0"})[devices.MEMORY_ENV] == "0"  # kept


@pytest.mark.slow  # a trainer process
def test_a_corpus_that_outgrows_the_trainers_memory_fails_clearly(tmp_path):
    """A million tiny pairs under a 1 GB cap: a 'failed' run that says why, not swapping."""
    corpus = write_pairs(tmp_path / "tiny.tsv", 1_000_000)
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "core.train", "--out", str(out), "--preset", "d2l"]
        + ["--data", str(corpus), "--max-steps", "5", "--epochs", "0", "--no-progress"]
        + ["--device", "cpu"],
        cwd=ROOT,
        env={**trainer_env(1), devices.MEMORY_ENV: "1.0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "failed" and "ran out of memory" in status["message"]
    assert "1.0 GB" in status["message"] and "max_pairs" in status["message"]


def test_snapshots_are_thinned_evenly_keeping_the_first_and_the_last(tmp_path):
    from core.runs import run_dir
    from core.runs.budget import MAX_SNAPSHOTS

    rd = run_dir.RunDir(tmp_path / "run")
    rd.create()
    for step in range(10, 10 * (MAX_SNAPSHOTS + 40) + 1, 10):
        rd.save_snapshot(step, [])
    steps = rd.snapshot_steps()
    assert len(steps) <= MAX_SNAPSHOTS
    assert steps[0] == 10 and steps[-1] == 10 * (MAX_SNAPSHOTS + 40)
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    assert max(gaps) <= 4 * min(gaps)  # spread out: no stretch of training left bare


def test_stale_and_excess_uploads_are_deleted(jobs_env, monkeypatch):
    import os
    import time

    from core.corpus import user_files

    old = user_files.stage_upload("old.tsv", b"go .\tva !\n")
    os.utime(old, (time.time() - 2 * user_files.UPLOAD_TTL_S,) * 2)
    monkeypatch.setattr(user_files, "MAX_UPLOADS_BYTES", 40)
    first = user_files.stage_upload("a.tsv", b"a .\tb !\n" * 3)  # 24 bytes
    os.utime(first, (time.time() - 10,) * 2)
    second = user_files.stage_upload("b.tsv", b"c .\td !\n" * 3)  # 48 in all: over the cap
    assert not old.exists()  # a day old, unused
    # audit: the cap was checked before the new upload was written, which then passed it;
    # room is made for it first, so the staged files never hold more than the cap
    assert not first.exists() and second.exists()
    staged = [p for p in user_files.uploads_root().rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in staged) <= user_files.MAX_UPLOADS_BYTES
    assert user_files.prune_uploads() == []


def test_the_catalogue_reads_metadata_without_the_weights(tmp_path):
    """A 400 MB checkpoint is described without its weights entering memory."""
    import torch

    from core.model.checkpoints import FORMAT, read_metadata

    path = tmp_path / "big.pt"
    torch.save(
        {
            "format": FORMAT,
            "src_vocab": ["<pad>", "<bos>", "<eos>", "<unk>"],
            "tgt_vocab": ["<pad>", "<bos>", "<eos>", "<unk>"],
            "model_config": {},
            "state_dict": {"w": torch.zeros(100 * 2**20)},
        },
        path,
    )

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    before = rss()
    meta = read_metadata(path)
    assert rss() - before < 50 * 2**20 and "state_dict" not in meta


def test_a_damaged_tokenizer_makes_a_model_unusable_not_a_crash(tmp_path, tiny_checkpoint):
    import torch

    from core.model.checkpoints import CheckpointError
    from core.model.studio_loading import load_checkpoint
    from core.runs.catalogue import list_models

    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    ckpt["tokenizers"] = {"src": '{"version": "1.0", "model": {broken'}
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    torch.save(ckpt, folder / "damaged.pt")
    with pytest.raises(CheckpointError, match="BPE tokenizer is damaged"):
        load_checkpoint(folder / "damaged.pt")
    (entry,) = list_models(folder, tmp_path / "runs")
    assert not entry.usable and "BPE tokenizer is damaged" in entry.reason


@pytest.mark.slow  # a trainer process
def test_the_apps_trainers_run_below_the_server():
    """The trainer lowers its own priority when the app asks (the pages answer first)."""
    env = trainer_env(1, {})
    assert env[devices.NICE_ENV] == str(devices.TRAINER_NICE)
    code = "from core.training.devices import lower_priority; print(lower_priority())"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == str(devices.TRAINER_NICE), done.stderr
    assert devices.lower_priority({}) == 0  # alone (no app): unchanged
