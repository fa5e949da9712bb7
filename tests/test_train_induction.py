"""A decoder-only model trained by ``python -m core.train`` on the induction task, end to end:
the head forms (seeded, on the CPU), every evaluation records the circuits, the run saves
``save_pretrained`` folders other tools open, and it resumes where it stopped."""

from __future__ import annotations

import json

import pytest
import torch

from core.model.checkpoints import read_checkpoint
from core.model.config import ModelConfig
from core.model.trainee import build_model
from core.runs.run_dir import RunDir
from core.train import main
from core.training.circuits import phase_change

INDUCTION = [  # the preset: two layers that form the head at ~step 550 on a CPU (seeded)
    *("--preset", "induction", "--eval-every", "50", "--log-every", "50", "--no-progress"),
]
STEPS = 700


def evaluations(out) -> list[dict]:
    """The run's evaluation records."""
    return [r for r in RunDir(out).read_metrics() if r.get("record") == "eval"]


def best_induction(record: dict) -> float:
    """The highest induction score of any head at one evaluation."""
    return max(max(row) for row in record["circuits"]["induction"])


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    """One seeded run of STEPS steps (trained once for the module's tests)."""
    out = tmp_path_factory.mktemp("induction") / "run"
    assert main(["--out", str(out), "--max-steps", str(STEPS), *INDUCTION]) == 0
    return out


@pytest.mark.slow  # trains a model for a few hundred steps
def test_an_induction_head_forms_and_every_evaluation_records_it(induction_run):
    records = evaluations(induction_run)
    assert [r["step"] for r in records] == list(range(50, STEPS + 1, 50))
    first, last = records[0], records[-1]
    assert best_induction(first) < 0.1  # before the phase change
    assert best_induction(last) >= 0.5  # after it: one head attends to the token after
    assert last["circuits"]["repeat_loss"] < 0.5 * first["circuits"]["repeat_loss"]
    assert last["circuits"]["icl"] < 0  # later tokens predicted better than early ones
    change = phase_change(records)
    assert change is not None and 50 <= change["start"] <= change["end"] <= STEPS
    assert change["before"] is not None and change["before"] < change["formed"]
    assert "val_bleu" not in last  # an induction run translates nothing
    status = RunDir(induction_run).read_status()
    assert status["state"] == "finished" and status["step"] == STEPS


@pytest.mark.slow
def test_the_run_saves_folders_transformers_opens_equal_to_its_checkpoint(induction_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rd = RunDir(induction_run)
    ckpt = read_checkpoint(rd.last)
    cfg = ModelConfig(**ckpt["model_config"])
    assert cfg.arch == "decoder-only"
    trainee = build_model(cfg)
    trainee.load_state_dict(ckpt["state_dict"])
    trainee.eval()
    lm = AutoModelForCausalLM.from_pretrained(rd.folder_of(rd.last)).eval()
    tokenizer = AutoTokenizer.from_pretrained(rd.folder_of(rd.last))
    ids = torch.tensor([tokenizer("t3 t9 t1 t3 t9 t1")["input_ids"]])
    assert ids.tolist() == [[1, 7, 13, 5, 7, 13, 5]]  # <bos>, then t_i is id i + 4
    with torch.no_grad():
        theirs = lm(ids).logits
        ours = trainee.lm(ids).logits
    assert torch.allclose(theirs, ours, atol=1e-5)
    folder = json.dumps(json.loads((rd.folder_of(rd.best) / "config.json").read_text()))
    assert str(induction_run.parent) not in folder  # no path of this machine


@pytest.mark.slow
def test_a_resumed_induction_run_continues_its_records(induction_run, tmp_path):
    import shutil

    out = tmp_path / "again"
    shutil.copytree(induction_run, out)
    more = str(STEPS + 100)
    assert main(["--out", str(out), "--resume", "--max-steps", more, "--no-progress"]) == 0
    steps = [r["step"] for r in evaluations(out)]
    assert steps == list(range(50, STEPS + 101, 50))
    assert all("circuits" in r for r in evaluations(out))


def test_the_settings_of_an_induction_run_are_checked_as_a_whole():
    from core.training.settings import validate_settings

    ok = validate_settings("induction")
    assert ok == []
    aligned = validate_settings("induction", {"train": {"align_weight": 1.0}})
    assert any("align_weight trains a cross-attention head" in p for p in aligned)
    encoder_decoder = validate_settings("induction", {"model": {"arch": "encoder-decoder"}})
    assert encoder_decoder and all("Traceback" not in p for p in encoder_decoder)


def test_the_shipped_induction_model_shows_its_phase_change_and_its_circuit():
    """checkpoints/induction-2l.hf (docs/training.md says how it was made): its history holds
    the phase change, and through the studio's door its heads are a previous-token head in
    layer 0 and an induction head in layer 1, the repeat predicted."""
    from core.attention.head_detectors import head_scores
    from core.model.opened import open_model
    from core.runs.history import open_history
    from tests.helpers import ROOT

    folder = ROOT / "checkpoints" / "induction-2l.hf"
    records = open_history(folder.with_suffix(".history")).read_metrics()
    change = phase_change(records)
    assert change is not None and change["before"] < change["formed"]
    evals = [r for r in records if "circuits" in r]
    assert best_induction(evals[0]) < 0.1 and best_induction(evals[-1]) >= 0.5
    assert evals[-1]["circuits"]["repeat_loss"] < 0.05 * evals[0]["circuits"]["repeat_loss"]
    s = head_scores(open_model(str(folder)), 10, 8, 0)
    assert float(s.previous_token[0].max()) >= 0.4 and float(s.induction[1].max()) >= 0.5
    assert s.summary()["repeat_loss"] < 0.1 < s.summary()["first_copy_loss"]
