"""Tests for core.runs.history: a model's training history in one file beside its checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from core.attention import snapshots
from core.checkpoint import main as checkpoint_main
from core.figures.training import training_curve_figure
from core.places import runs_root
from core.runs import catalogue as models
from core.runs import history
from core.runs.promotion import promote
from core.runs.run_dir import RunDir
from tests.helpers import SHIPPED


def test_a_history_file_replays_like_its_run(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    RunDir(run).append_metrics(
        {"record": "eval", "step": 100, "val_bleu": 9.5, "examples": [{"src": "x", "ref": "y"}]}
    )
    dest = history.write_history(run, tmp_path / "model.pt", up_to_step=100)
    assert dest == tmp_path / "model.history"
    from_file = snapshots.snapshot_series(dest, "i'm home .")
    from_run = snapshots.snapshot_series(run, "i'm home .")
    assert from_file.steps == [50, 100] and from_run.steps == [50, 100, 150]
    for a, b in zip(from_file.frames, from_run.frames, strict=False):
        assert (a.loss, a.val_bleu) == (b.loss, b.val_bleu)
        assert a.maps.output_tokens == b.maps.output_tokens
        np.testing.assert_allclose(a.maps.cross, b.maps.cross, atol=1e-3)
    assert from_file.frames[1].val_bleu == 9.5
    assert snapshots.probe_sentences(dest) == snapshots.probe_sentences(run)
    records = history.open_history(dest).read_metrics()
    assert max(r["step"] for r in records) == 100
    assert all("examples" not in r for r in records)  # no corpus sentences travel with a model
    curve = training_curve_figure(dest, 50)
    assert curve.data[0].x[-1] == 100


def test_history_holds_no_text_but_the_record_kind():
    record = {"record": "eval", "step": 5, "val_bleu": 1.0, "path": 3, "examples": [], "x": "y"}
    assert history.clean_record(record) == {"record": "eval", "step": 5, "val_bleu": 1.0}


def test_a_damaged_or_foreign_history_file_has_no_history(tmp_path):
    (tmp_path / "a.history").write_bytes(b"junk")
    torch.save({"format": "something else"}, tmp_path / "b.history")
    for name in ("a.history", "b.history", "missing.history"):
        h = history.open_history(tmp_path / name)
        assert h.read_metrics() == [] and h.snapshot_steps() == []
        assert snapshots.probe_sentences(tmp_path / name) == []


def test_a_saved_model_carries_its_history_after_its_run_is_gone(jobs_env, tiny_run):
    shutil.copytree(tiny_run, runs_root() / "tiny")
    dest = promote("tiny", "last", "keeper")
    assert history.history_path(dest).is_file()
    shutil.rmtree(runs_root() / "tiny")
    entry = models.find_entry(models.list_models(), "checkpoints/keeper.pt")
    assert entry.run_dir is None and entry.history == str(history.history_path(dest))
    assert snapshots.snapshot_series(entry.history, "go .").steps == [50, 100, 150]


def test_compacting_a_run_checkpoint_writes_its_history(tmp_path, tiny_run, capsys):
    out = tmp_path / "small.pt"
    assert checkpoint_main([str(tiny_run / "last.pt"), str(out)]) == 0
    assert "small.history" in capsys.readouterr().out
    assert history.open_history(history.history_path(out)).snapshot_steps() == [50, 100, 150]
    other = tmp_path / "bare.pt"
    assert checkpoint_main([str(tiny_run / "last.pt"), str(other), "--no-history"]) == 0
    assert not history.history_path(other).exists()


@pytest.mark.skipif(not SHIPPED.is_file(), reason="the shipped model is not trained yet")
def test_the_shipped_model_ships_its_training_history():
    path = history.history_path(SHIPPED)
    assert path.is_file(), "checkpoints/fra-eng-small.history is missing"
    assert path.stat().st_size < 5 * 2**20  # a few MB at most
    h = history.open_history(path)
    steps = h.snapshot_steps()
    assert len(steps) >= 5 and steps[-1] == torch.load(SHIPPED, weights_only=True)["state"]["step"]
    assert any(r.get("val_bleu") for r in h.read_metrics())
    blob = path.read_bytes()
    for machine_path in (b"/work/", b"/tmp/", b"/home/", b"/root/"):
        assert machine_path not in blob


def test_a_compact_copy_of_a_run_s_last_model_says_its_own_bleu(tmp_path, tiny_run, monkeypatch):
    from core.model.checkpoints import atomic_save, read_checkpoint
    from core.runs.catalogue import bleu_at, read_entry

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    ckpt = read_checkpoint(run / "last.pt")
    ckpt["state"]["best_bleu"] = 99.0  # the run's best so far: not this model's
    atomic_save(ckpt, run / "last.pt")
    step, own = ckpt["state"]["step"], 12.5
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for r in records:  # the tiny run measures no BLEU: its last evaluation says 12.5
        if r.get("record") == "eval" and r.get("step") == step:
            r["val_bleu"] = own
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bleu_at(run, step) == own
    out = tmp_path / "ship" / "small.pt"
    out.parent.mkdir()
    assert checkpoint_main([str(run / "last.pt"), str(out), "--no-trajectories"]) == 0
    assert read_checkpoint(out)["val_bleu"] == own
    entry = read_entry(out, "checkpoints/small.pt", None, tmp_path / "no-runs")
    assert entry.val_bleu == own and f"val BLEU {own:.1f}" in entry.label
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path))  # saved from the page: the same
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "saved"))
    saved = promote("run", "last", "keeper")
    assert read_checkpoint(saved)["val_bleu"] == own
    bare = tmp_path / "bare.pt"  # a file outside any run: the state's figure, as before
    assert checkpoint_main([str(out), str(bare), "--no-history"]) == 0
    assert "val_bleu" not in read_checkpoint(bare) or read_checkpoint(bare)["val_bleu"] == own


def test_a_copy_never_overwrites_what_the_studio_did_not_write(tmp_path, tiny_run, capsys):
    """Issue 72: ``core.checkpoint best.pt pairs.tsv`` overwrote the user's data file (and
    wrote pairs.history). DST ends in .pt and, where it is there, is a studio checkpoint; its
    .history beside it, where it is there, a studio history."""
    src = str(tiny_run / "last.pt")
    data = tmp_path / "pairs.tsv"
    data.write_text("hello\tbonjour\n")
    text_pt, foreign = tmp_path / "notes.pt", tmp_path / "fresh.history"
    text_pt.write_text("my notes\n")
    foreign.write_text("not a history\n")
    for dst, said in [
        (data, "pairs.tsv: the copy's name ends in .pt"),
        (text_pt, "notes.pt is there and is not a model the studio wrote"),
        (tmp_path / "fresh.pt", "fresh.history is there and is not a history the studio wrote"),
    ]:
        assert checkpoint_main([src, str(dst)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and said in err
    assert data.read_text() == "hello\tbonjour\n" and text_pt.read_text() == "my notes\n"
    assert foreign.read_text() == "not a history\n"
    assert not (tmp_path / "pairs.history").exists() and not (tmp_path / "fresh.pt").exists()
    assert checkpoint_main([src, str(tmp_path / "fresh.pt"), "--no-history"]) == 0
    assert foreign.read_text() == "not a history\n"
    mine = tmp_path / "mine.pt"  # a fresh DST, then the studio's own copy replaced
    for _ in range(2):
        assert checkpoint_main([src, str(mine), "--no-trajectories"]) == 0
        assert history.open_history(history.history_path(mine)).snapshot_steps() != []
    assert checkpoint_main([str(mine), str(mine), "--no-history"]) == 2
    assert "mine.pt is SRC" in capsys.readouterr().err
    other = shutil.copytree(tiny_run, tmp_path / "other-run")  # a run's own checkpoint
    before = (other / "last.pt").read_bytes()
    assert checkpoint_main([str(mine), str(other / "last.pt"), "--no-history"]) == 2
    assert "is a run's own checkpoint (it resumes from it)" in capsys.readouterr().err
    assert (other / "last.pt").read_bytes() == before


def test_a_model_folder_replaces_only_a_folder_the_studio_wrote(
    tmp_path, tiny_checkpoint, lm_models
):
    """A decoder-only run's copy is a folder: DST ends in .hf and, where it is there, is a
    model folder trained here (no other folder is deleted to make room)."""
    from core.model.checkpoints import atomic_save, read_checkpoint

    run = tmp_path / "run"
    ckpt = read_checkpoint(tiny_checkpoint)
    ckpt["model_config"]["arch"] = "decoder-only"
    atomic_save(ckpt, run / "best.pt")
    shutil.copytree(lm_models["gpt2"], run / "best.hf")
    config = json.loads((run / "best.hf" / "config.json").read_text())
    config["attention_studio"] = {"task": "translation"}  # as trainee_folder records it
    (run / "best.hf" / "config.json").write_text(json.dumps(config))
    src = str(run / "best.pt")
    theirs, hub = tmp_path / "theirs.hf", tmp_path / "hub.hf"
    theirs.mkdir()
    (theirs / "photo.jpg").write_text("keep me")
    shutil.copytree(lm_models["gpt2"], hub)  # a model folder, but not one trained here
    for dst in (theirs, hub, tmp_path / "plain", tmp_path / "model.pt"):
        assert checkpoint_main([src, str(dst), "--no-history"]) == 2
    assert (theirs / "photo.jpg").read_text() == "keep me"
    assert "attention_studio" not in (hub / "config.json").read_text()
    assert not (tmp_path / "plain").exists() and not (tmp_path / "model.pt").exists()
    ours = tmp_path / "ours.hf"
    for _ in range(2):  # new, then replaced
        assert checkpoint_main([src, str(ours), "--no-history"]) == 0
        assert json.loads((ours / "config.json").read_text()) == config
