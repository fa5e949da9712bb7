"""Tests for core.runs.catalogue: the one model catalogue, its descriptions, and promotion."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from core.model.checkpoints import read_checkpoint
from core.model.studio_loading import load_checkpoint
from core.places import checkpoints_root, runs_root
from core.runs import catalogue as models
from core.runs.budget import parameters
from core.runs.promotion import promote
from core.runs.run_dir import RunDir
from tests.helpers import ROOT


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
    assert not broken.usable and "not an Attention Studio checkpoint" in broken.reason
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


def reversed_copy(checkpoint, dest):
    """A copy of a studio checkpoint whose data settings say it translates French→English."""
    import torch

    ckpt = read_checkpoint(checkpoint)
    ckpt["data_config"] = {**ckpt.get("data_config", {}), "direction": "fr-en"}
    torch.save(ckpt, dest)
    return dest


def test_each_model_says_what_it_translates_before_it_is_opened(
    tmp_path, tiny_checkpoint, lm_models, hf_models
):
    """What Compare's default and Alignment's opposite direction choose by (issues 68.1,
    69.10): each entry's (source, target) from its files, None for a masked LM."""
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    shutil.copy(tiny_checkpoint, ckpts / "fra-eng-small.pt")
    reversed_copy(tiny_checkpoint, ckpts / "fr-en.pt")
    for name, folder in (("bert", lm_models["bert"]), ("gpt2", lm_models["gpt2"])):
        shutil.copytree(folder, ckpts / name)
    for name in ("t5", "marian"):
        shutil.copytree(hf_models[name], ckpts / name)
    shutil.copytree(ROOT / "checkpoints" / "induction-2l.hf", ckpts / "induction-2l.hf")
    every = models.list_models(ckpts, tmp_path / "runs")
    said = {e.key: e.languages for e in every}
    assert said == {
        "checkpoints/fra-eng-small.pt": ("en", "fr"),
        "checkpoints/fr-en.pt": ("fr", "en"),
        "checkpoints/bert/": None,  # fills masks: it translates nothing
        "checkpoints/gpt2/": ("en", "fr"),  # by its default prompt
        "checkpoints/t5/": ("source", "target"),  # its files do not say
        "checkpoints/marian/": ("en", "fr"),
        "checkpoints/induction-2l.hf/": None,  # random tokens read twice: Compare's model B
        # offered it and the page fell on an IndexError
    }
    assert {e.key for e in models.translators(every, every[0])} <= {
        k for k, v in said.items() if v is not None
    }


def entry(key: str, origin: str, mtime: float, languages=("en", "fr"), run_dir=None):
    return models.ModelEntry(key, key, origin, mtime, languages=languages, run_dir=run_dir)


def test_compare_opens_on_another_translator_of_the_same_direction():
    """Issue 68, item 1: model B defaulted to the newest entry, a BERT folder (an error), or a
    barely-trained run still training; the shipped aligned model is beside the shipped one."""
    shipped = entry("checkpoints/fra-eng-small.pt", "shipped model", 1.0)
    aligned = entry("checkpoints/fra-eng-small-aligned.pt", "shipped model", 1.0)
    reverse = entry("checkpoints/fr-en-small-aligned.pt", "shipped model", 1.0, ("fr", "en"))
    bert = entry("checkpoints/bert/", models.HF_ORIGIN, 9.0, None)
    training = entry("runs/new/last.pt", "run last", 8.0, run_dir="runs/new")
    best = entry("runs/new/best.pt", "run best", 7.0, run_dir="runs/new")
    t5 = entry("checkpoints/t5/", models.HF_ORIGIN, 6.0, models.UNKNOWN_LANGUAGES)
    every = [bert, training, best, t5, reverse, aligned, shipped]
    assert models.compared_entry(every, shipped, ("en", "fr")) is aligned
    assert models.compared_entry(every, training, ("en", "fr")) is best  # its own run's
    assert models.compared_entry(every, reverse, ("fr", "en")) is t5  # may be French→English
    assert models.compared_entry([reverse, shipped], reverse, ("fr", "en")) is None  # never the
    # other direction: it would read the sentence as unknown words
    assert models.compared_entry(every, t5, models.UNKNOWN_LANGUAGES) is shipped
    assert bert not in models.translators(every, shipped)
    assert models.compared_entry([bert, shipped], shipped, ("en", "fr")) is None


def test_the_opposite_direction_offers_only_models_of_the_opposite_direction():
    """Issue 69, item 10: English→French runs, BERT and GPT-2 were offered to combine with an
    English→French model."""
    shipped = entry("checkpoints/fra-eng-small.pt", "shipped model", 1.0)
    reverse = entry("checkpoints/fr-en-small-aligned.pt", "shipped model", 1.0, ("fr", "en"))
    own = entry("runs/fr/last.pt", "run last", 5.0, ("fr", "en"))
    others = [
        entry("runs/en/last.pt", "run last", 4.0),
        entry("checkpoints/bert/", models.HF_ORIGIN, 3.0, None),
        entry("checkpoints/gpt2/", models.HF_ORIGIN, 2.0),
        entry("checkpoints/t5/", models.HF_ORIGIN, 2.0, models.UNKNOWN_LANGUAGES),
    ]
    every = [own, *others, reverse, shipped]
    assert models.reverse_entries(every, shipped, ("en", "fr")) == [reverse, own]
    gpt2, run_en = others[2], others[0]  # GPT-2 translates English→French by its prompt
    assert models.reverse_entries(every, reverse, ("fr", "en")) == [shipped, gpt2, run_en]
    assert models.reverse_entries(every, others[3], models.UNKNOWN_LANGUAGES) == []


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
    assert not junk.usable and "not an Attention Studio checkpoint" in junk.reason


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
    assert "not an Attention Studio checkpoint" in rows.loc["checkpoints/broken.pt", "problem"]
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
