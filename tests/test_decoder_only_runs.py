"""A decoder-only model trained here, in every command (issue 66): a finished induction run
(built from the shipped model's folder and history, no training) saved as a model, exported to
TensorBoard, asked for its trajectories; the shipped induction model's head scores at the length
it trained on and its head importance refused. The pages: tests/test_app_decoder_only.py."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest
import torch

from core import ablate as ablate_command
from core import head_scores as head_scores_command
from core import trajectories as trajectories_command
from core.checkpoint import main as checkpoint_main
from core.corpus.config import DataConfig
from core.model.config import ModelConfig
from core.model.opened import open_model
from core.runs.catalogue import ModelError
from core.runs.circuit_history import trained_length
from core.runs.history import HistoryFile
from core.runs.owners import User
from core.runs.promotion import PROMOTED, promote
from core.training.config import TrainConfig
from core.training.presets import PRESETS
from tests import helpers
from tests.helpers import ROOT

SHIPPED = ROOT / "checkpoints" / "induction-2l.hf"
HISTORY = ROOT / "checkpoints" / "induction-2l.history"
RUN = "ind"


@pytest.fixture
def induction_dirs(tmp_path, monkeypatch, make_run) -> dict:
    """checkpoints/ with the shipped induction model and its history; runs/ind, a finished
    induction run whose checkpoints are decoder-only training states with folders beside."""
    studio_dirs = helpers.empty_studio_dirs(tmp_path, monkeypatch)
    shutil.copytree(SHIPPED, studio_dirs["checkpoints"] / SHIPPED.name)
    shutil.copy(HISTORY, studio_dirs["checkpoints"] / HISTORY.name)
    rd = make_run(studio_dirs["runs"], RUN, {"state": "finished", "step": 2000}, checkpoint=True)
    preset = PRESETS["induction"]
    data, model = DataConfig(**preset["data"]), ModelConfig(260, 260, **preset["model"])
    summary = {"task": "induction", "induction_length": 16, "induction_min_length": 4}
    summary |= {"induction_tokens": 256, "train": 20000, "val": 256, "src_vocab": 260}
    rd.write_config(
        {
            "data": asdict(data),
            "model": asdict(model),
            "train": asdict(TrainConfig()),
            "summary": summary,
        }
    )
    for path in (rd.best, rd.last):
        ckpt = torch.load(path, weights_only=True)
        ckpt["model_config"]["arch"] = "decoder-only"  # its training state; the model: .hf
        ckpt["state"]["step"] = 2000
        torch.save(ckpt, path)
        shutil.copytree(SHIPPED, path.with_suffix(".hf"))
    with open(rd.metrics, "w", encoding="utf-8") as f:
        for record in HistoryFile(HISTORY).read_metrics():
            f.write(json.dumps(record) + "\n")
    (rd.path / "snapshots").mkdir(exist_ok=True)
    return studio_dirs | {"ind": rd.path}


def test_head_scores_default_to_the_length_an_induction_model_trained_on(induction_dirs, capsys):
    assert trained_length(induction_dirs["checkpoints"] / SHIPPED.name) == 16
    assert trained_length(induction_dirs["ind"] / "best.pt") == 16
    assert trained_length(ROOT / "checkpoints" / "fra-eng-small.pt") is None
    assert head_scores_command.main(["--checkpoint", str(SHIPPED)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["length"] == 16


def test_save_as_a_model_copies_a_decoder_only_runs_folder(induction_dirs):
    dest = promote(RUN, "best", "ind-saved")
    assert dest == induction_dirs["checkpoints"] / "ind-saved.hf" and dest.is_dir()
    assert not (induction_dirs["checkpoints"] / "ind-saved.pt").exists()
    assert open_model(str(dest)).meta.get("task") == "induction"  # the door opens it
    assert json.loads((dest / PROMOTED).read_text())["run"] == RUN
    assert HistoryFile(dest.with_suffix(".history")).read_metrics()  # its circuits travel
    with pytest.raises(ModelError, match="already exists"):
        promote(RUN, "best", "ind-saved")
    assert promote(RUN, "last", "ind-saved", overwrite=True) == dest
    assert promote(RUN, "best", "ind-saved", overwrite=True, user=User()) == dest  # the app's
    with pytest.raises(ModelError, match="cannot be replaced from the app"):  # the shipped one
        promote(RUN, "best", "induction-2l", overwrite=True, user=User())
    assert not (induction_dirs["checkpoints"] / SHIPPED.name / PROMOTED).exists()  # untouched


@pytest.mark.parametrize("user", [None, User("teacher", True)], ids=["command", "app"])
def test_a_name_taken_by_a_model_of_the_other_form_is_refused(induction_dirs, user, capsys):
    """One name, one model: ``name.pt`` and ``name.hf`` share ``name.history``, so a decoder-only
    run saved as the shipped ``fra-eng-small`` replaced that model's history (and a run without
    one removed it); the same through ``core.checkpoint``, both ways."""
    ckpts = induction_dirs["checkpoints"]
    shutil.copy(ROOT / "checkpoints" / "fra-eng-small.pt", ckpts / "fra-eng-small.pt")
    shutil.copy(ROOT / "checkpoints" / "fra-eng-small.history", ckpts / "fra-eng-small.history")
    before = {p.name: p.read_bytes() for p in ckpts.iterdir() if p.is_file()}
    for overwrite in (False, True):
        with pytest.raises(
            ModelError, match=r"'fra-eng-small' already exists \(fra-eng-small.pt\)"
        ):
            promote(RUN, "best", "fra-eng-small", overwrite=overwrite, user=user)
    assert not (ckpts / "fra-eng-small.hf").exists()
    best = str(induction_dirs["ind"] / "best.pt")
    assert checkpoint_main([best, str(ckpts / "fra-eng-small.hf")]) == 2
    assert "fra-eng-small.pt is there" in capsys.readouterr().err
    (ckpts / "induction-2l.pt").write_bytes(b"")  # the other way: a file under a folder's name
    assert (
        checkpoint_main(
            [str(ROOT / "checkpoints" / "fra-eng-small.pt"), str(ckpts / "induction-2l.pt")]
        )
        == 2
    )
    assert "induction-2l.hf is there" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ckpts.iterdir() if p.is_file()} == before | {
        "induction-2l.pt": b""
    }
    assert not (ckpts / "fra-eng-small.hf").exists()


def test_the_tensorboard_export_carries_each_heads_circuit_scores(induction_dirs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from core.figures.tensorboard import export_tensorboard

    summary = export_tensorboard(induction_dirs["ind"], tmp_path / "tb", images=False)
    events = EventAccumulator(str(tmp_path / "tb" / summary["events_file"]))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        f"circuits/induction/layer {layer} head {h}" for layer in (0, 1) for h in range(4)
    } <= tags
    assert {
        "circuits/repeat_loss",
        "circuits/icl",
        "circuits/previous_token/layer 0 head 0",
    } <= tags
    last = events.Scalars("circuits/induction/layer 1 head 3")[-1]
    assert last.step > 1000 and last.value > 0.5  # the head formed


@pytest.mark.parametrize("where", ["--run ind", "--checkpoint ind/best.pt"])
def test_trajectories_of_a_history_without_snapshots_are_refused_in_one_line(
    induction_dirs, capsys, where
):
    """A run whose history keeps no snapshots: written before one-stack runs kept them
    (tests/test_one_stack_replay.py replays a run that has them, and the shipped model)."""
    flag, name = where.split()
    path = {"ind": induction_dirs["ind"], "ind/best.pt": induction_dirs["ind"] / "best.pt"}[name]
    assert trajectories_command.main([flag, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "python -m core.circuits --run" in err


def test_head_importance_of_an_induction_model_is_refused_in_one_line(capsys):
    assert ablate_command.main(["--checkpoint", str(SHIPPED)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "induction task" in err and "head importance" in err
