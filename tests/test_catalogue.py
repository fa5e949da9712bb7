"""Tests for core.runs.catalogue: the one model catalogue, its descriptions, and promotion."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from core.model.checkpoints import load_checkpoint, read_checkpoint
from core.places import checkpoints_root, runs_root
from core.runs import catalogue as models
from core.runs.budget import parameters
from core.runs.promotion import promote
from core.runs.run_dir import RunDir


def _touch(path, t: float) -> None:
    os.utime(path, (t, t))


# ----------------------------------------------------------------------------- the catalogue


def test_list_models_newest_first_with_details_and_broken_files(
    tmp_path, tiny_checkpoint, tiny_run
):
    ckpts, runs = tmp_path / "ckpts", tmp_path / "runs"
    ckpts.mkdir()
    shutil.copy(tiny_checkpoint, ckpts / models.SHIPPED_NAME)
    (ckpts / "broken.pt").write_bytes(b"not a checkpoint")
    shutil.copytree(tiny_run, runs / "tiny")
    (runs / "starting").mkdir()
    (runs / "starting" / "config.json").write_text("{}")
    for i, path in enumerate(
        [
            ckpts / "broken.pt",
            runs / "tiny" / "best.pt",
            runs / "tiny" / "last.pt",
            ckpts / models.SHIPPED_NAME,
            runs / "starting",
        ]
    ):
        _touch(path, 1_000_000 + i)
    entries = models.list_models(ckpts, runs)
    assert [e.key for e in entries] == [
        "runs/starting/",
        "checkpoints/fra-eng-small.pt",
        "runs/tiny/last.pt",
        "runs/tiny/best.pt",
        "checkpoints/broken.pt",
    ]
    origins = {e.key: e.origin for e in entries}
    assert origins["runs/tiny/best.pt"] == "run best" and origins["runs/tiny/last.pt"] == "run last"
    shipped = entries[1]
    assert shipped.usable and shipped.origin == "shipped model"
    assert (shipped.heads, shipped.step) == (4, 150)
    params = sum(p.numel() for p in load_checkpoint(tiny_checkpoint).model.parameters())
    assert parameters(read_checkpoint(tiny_checkpoint)["model_config"]) == params
    assert shipped.size == f"{params / 1e6:.2f} M params · 64 wide · 2+2 blocks · 4 heads"
    assert shipped.data.startswith("tiny.tsv, ")
    assert shipped.run_dir == str(runs / "tiny")  # found through the checkpoint's run name
    broken = entries[-1]
    assert not broken.usable and "not a readable" in broken.reason
    assert not entries[0].usable and "no checkpoint" in entries[0].reason
    assert models.default_entry(entries) is shipped
    assert models.find_entry(entries, "checkpoints/broken.pt") is None


def test_list_models_reads_val_bleu_of_last_from_metrics(tmp_path, tiny_run):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "tiny")
    RunDir(runs / "tiny").append_metrics({"record": "eval", "step": 150, "val_bleu": 42.5})
    entries = {e.key: e for e in models.list_models(tmp_path / "none", runs)}
    assert entries["runs/tiny/last.pt"].val_bleu == 42.5
    assert entries["runs/tiny/best.pt"].val_bleu is None  # best_bleu is -1: never measured
    assert "val BLEU 42.5" in entries["runs/tiny/last.pt"].label
    assert all(len(e.label) <= 80 for e in entries.values())  # a picker line at 760 px


def test_list_models_of_missing_directories_is_empty(tmp_path):
    assert models.list_models(tmp_path / "a", tmp_path / "b") == []
    assert models.default_entry([]) is None


def test_default_entry_without_shipped_model_is_newest_usable():
    old = models.ModelEntry("runs/a/last.pt", "a", "run last", 1.0)
    new = models.ModelEntry("runs/b/last.pt", "b", "run last", 2.0)
    broken = models.ModelEntry("runs/c/last.pt", "c", "run last", 3.0, usable=False, reason="x")
    assert models.default_entry([broken, new, old]) is new


def test_list_models_survives_a_damaged_metrics_file(tmp_path, tiny_run):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "tiny")
    (runs / "tiny" / "metrics.jsonl").write_text("{half a record\n" + json.dumps({"x": 1}))
    assert {e.key for e in models.list_models(tmp_path / "none", runs)} == {
        "runs/tiny/best.pt",
        "runs/tiny/last.pt",
    }


# ----------------------------------------------------------------------------- promotion


def test_promote_copies_weights_without_optimizer(jobs_env, make_run):
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    dest = promote("done", "best", "fr-tiny")
    assert dest == checkpoints_root() / "fr-tiny.pt"
    ckpt = read_checkpoint(dest)
    assert "optimizer" not in ckpt and ckpt["promoted_from"]["run"] == "done"
    with pytest.raises(models.ModelError, match="already exists"):
        promote("done", "last", "fr-tiny")
    assert promote("done", "last", "fr-tiny.pt", overwrite=True) == dest
    (checkpoints_root() / "junk.pt").write_bytes(b"not a checkpoint")
    entries = {e.key: e for e in models.list_models()}
    saved = entries["checkpoints/fr-tiny.pt"]
    assert saved.usable and saved.reason == "" and saved.step == 7
    assert saved.origin == "saved from run done at step 7"
    junk = entries["checkpoints/junk.pt"]
    assert not junk.usable and "not a readable" in junk.reason


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "a/b",
        "",
        " ",
        ".hidden",
        "-x",
        "x" * 65,
        "two words",
        "..",
        "/abs",
        "a\\b",
        "ok\nx",
    ],
)
def test_promote_refuses_unsafe_names(jobs_env, name, make_run):
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    with pytest.raises(models.ModelError, match="not a valid model name"):
        promote("done", "best", name)
    assert not checkpoints_root().exists() or not any(checkpoints_root().iterdir())


def test_promote_needs_a_checkpoint(jobs_env, make_run):
    make_run(runs_root(), "empty", {"state": "failed"})
    with pytest.raises(models.ModelError, match="no usable best checkpoint"):
        promote("empty", "best", "x")
    with pytest.raises(models.ModelError, match="'best' or 'last'"):
        promote("empty", "middle", "x")


def test_models_frame_one_row_per_model(jobs_env, make_run):
    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    promote("done", "best", "fr-demo")
    (checkpoints_root() / "broken.pt").write_bytes(b"junk")
    frame = models.models_frame(models.list_models())
    assert list(frame.columns) == ["model", "origin", "val BLEU", "step", "size", "data", "problem"]
    rows = frame.set_index("model")
    assert set(rows.index) == {
        "checkpoints/broken.pt",
        "checkpoints/fr-demo.pt",
        "runs/done/best.pt",
        "runs/done/last.pt",
    }
    assert "not a readable" in rows.loc["checkpoints/broken.pt", "problem"]
    (checkpoints_root() / "broken.pt").unlink()
    assert "problem" not in models.models_frame(models.list_models()).columns  # none has one
    assert rows.loc["checkpoints/broken.pt", "size"] == ""
    demo = rows.loc["checkpoints/fr-demo.pt"]
    assert (demo["origin"], demo["val BLEU"], demo["step"]) == (
        "saved from run done at step 7",
        12.5,
        7,
    )


def test_promote_refuses_a_checkpoint_with_nan_weights(jobs_env, make_run):
    import torch

    from core.model.checkpoints import atomic_save

    rd = make_run(runs_root(), "nan", {"state": "diverged"}, checkpoint=True)
    ckpt = read_checkpoint(rd.last)
    name = next(iter(ckpt["state_dict"]))
    ckpt["state_dict"][name] = torch.full_like(ckpt["state_dict"][name], float("nan"))
    atomic_save(ckpt, rd.last)
    with pytest.raises(models.ModelError, match="NaN or infinite"):
        promote("nan", "last", "bad-model")
    assert not (checkpoints_root() / "bad-model.pt").exists()


def test_two_sessions_promoting_one_name_cannot_both_win(jobs_env, make_run):
    import threading

    make_run(runs_root(), "done", {"state": "finished"}, checkpoint=True)
    outcomes, start = [], threading.Barrier(4)

    def save() -> None:
        start.wait()
        try:
            promote("done", "best", "same-name")
            outcomes.append("saved")
        except models.ModelError as e:
            outcomes.append(str(e))

    threads = [threading.Thread(target=save) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("saved") == 1
    assert all("already exists" in o for o in outcomes if o != "saved")
    load_checkpoint(checkpoints_root() / "same-name.pt")
    assert [p.name for p in checkpoints_root().iterdir()] == ["same-name.pt"]  # no temp left


def test_a_dangling_link_is_listed_without_a_path_of_the_server(tmp_path):
    """Issue 49, item 9: a checkpoint that is a link to nothing (a copy gone wrong) is an
    unusable entry whose reason names it, never the server's folders."""
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    (ck / "gone.pt").symlink_to(tmp_path / "nowhere" / "model.pt")
    entries = models.list_models(str(ck), str(tmp_path / "runs"))
    (entry,) = [e for e in entries if "gone" in e.key]
    assert not entry.usable and "gone.pt" in entry.reason
    assert str(tmp_path) not in entry.reason
