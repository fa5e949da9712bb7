"""An encoder-only masked language model trained by ``python -m core.train --arch encoder`` on
the tiny corpus's pairs, end to end: it learns (the validation loss of its fixed mask falls),
records its fill accuracy, resumes masking as an unbroken run would, and saves a BERT folder
that transformers and the studio's door open."""

from __future__ import annotations

import shutil

import pytest
import torch

from core.model.checkpoints import CheckpointError, compact, read_checkpoint
from core.model.config import ModelConfig
from core.model.trainee import build_model
from core.runs.run_dir import RunDir
from core.train import main
from core.training.settings import to_flags
from tests.helpers import TINY_PRESET, tiny_config

ENCODER_RUN = tiny_config(  # 20 pairs to learn, 10 to measure the fixed mask's loss on
    data={"num_train": 20, "num_val": 10},
    model={"arch": "encoder"},
    train={"epochs": 0, "max_steps": 200, "eval_every": 20, "log_every": 10, "lr": 0.001},
)
ARGS = ["--preset", TINY_PRESET, *to_flags(ENCODER_RUN), "--no-progress"]


def records(run, kind: str) -> list[dict]:
    """The run's records of one kind ("train", "eval")."""
    return [r for r in RunDir(run).read_metrics() if r.get("record") == kind]


@pytest.fixture(scope="module")
def encoder_run(tmp_path_factory):
    """One seeded run of the tiny encoder (trained once for the module's tests)."""
    out = tmp_path_factory.mktemp("encoder") / "run"
    assert main([*ARGS, "--out", str(out)]) == 0
    return out


@pytest.mark.slow  # trains a model for 200 steps
def test_an_encoder_learns_the_pairs_as_a_masked_language_model(encoder_run):
    evals = records(encoder_run, "eval")
    assert [r["step"] for r in evals] == list(range(20, 201, 20))
    losses = [r["val_loss"] for r in evals]
    assert min(losses) < losses[0] - 0.5  # the fixed mask's loss falls
    assert all(0.0 <= r["val_fill_accuracy"] <= 1.0 for r in evals)
    assert not any("val_bleu" in r or "examples" in r for r in evals)  # it writes no French
    best = min(evals, key=lambda r: r["val_loss"])
    assert (
        best["is_best"]
        and read_checkpoint(RunDir(encoder_run).best)["state"]["step"] == (best["step"])
    )
    status = RunDir(encoder_run).read_status()
    assert status["state"] == "finished" and status["step"] == 200


@pytest.mark.slow
def test_its_best_folder_opens_in_transformers_and_through_the_door(encoder_run, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from core.model.opened import open_model
    from core.model.parts import DecodeSettings

    rd = RunDir(encoder_run)
    ckpt = read_checkpoint(rd.best)
    cfg = ModelConfig(**ckpt["model_config"])
    assert cfg.arch == "encoder"
    trainee = build_model(cfg)
    trainee.load_state_dict(ckpt["state_dict"])
    trainee.eval()
    folder = rd.folder_of(rd.best)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pair = tokenizer("i am cold .", f"je suis {tokenizer.mask_token} .", return_tensors="pt")
    lm = AutoModelForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        theirs = lm(**pair).logits
        ours = trainee.lm(**pair).logits
    assert torch.allclose(theirs, ours, atol=1e-5)
    door = open_model(str(rd.best))  # a run's best.pt: its folder, as the masked model it is
    sentence = f"i am {door.mask_token} ."
    filled = door.translate(sentence, DecodeSettings())
    ids = torch.tensor([filled.src_ids])
    at = filled.src_ids.index(tokenizer.mask_token_id)
    with torch.no_grad():
        assert filled.out_ids == [int(trainee.lm(input_ids=ids).logits[0, at].argmax())]
    copy = compact(rd.best, tmp_path / "encoder.hf")  # python -m core.checkpoint's copy
    again = open_model(str(copy)).translate(sentence, DecodeSettings())
    assert again.out_ids == filled.out_ids and again.src_ids == filled.src_ids
    alone = tmp_path / "alone" / "best.pt"  # the training state without its folder
    alone.parent.mkdir()
    shutil.copy(rd.best, alone)
    with pytest.raises(CheckpointError, match="training state of an encoder model: open the"):
        open_model(str(alone))


RESUMABLE = tiny_config(  # dropout, a record a step: a resumed run must mask as the unbroken
    data={"num_train": 24, "num_val": 6},
    model={"arch": "encoder", "dropout": 0.3},
    train={"epochs": 0, "batch_size": 4, "log_every": 1, "eval_every": 10, "device": "cpu"},
)
STEPS = 30


@pytest.mark.slow  # trains a run twice, broken and unbroken
def test_a_resumed_encoder_run_masks_as_the_unbroken_run(tmp_path):
    args = ["--preset", TINY_PRESET, *to_flags(RESUMABLE), "--no-progress"]
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    assert main([*args, "--out", str(unbroken), "--max-steps", str(STEPS)]) == 0
    assert main([*args, "--out", str(broken), "--max-steps", "13"]) == 0
    more = ["--resume", "--no-progress", "--max-steps", str(STEPS)]
    assert main(["--out", str(broken), *more]) == 0
    curve = [(r["step"], r["loss"]) for r in records(unbroken, "train")]
    again = [(r["step"], r["loss"]) for r in records(broken, "train")]
    assert [s for s, _ in again] == [s for s, _ in curve] == list(range(1, STEPS + 1))
    assert [v for _, v in again] == pytest.approx([v for _, v in curve], abs=1e-6)
    evals = {r["step"]: r["val_loss"] for r in records(unbroken, "eval")}  # 10, 20, 30
    again = {r["step"]: r["val_loss"] for r in records(broken, "eval")}  # and 13, where it stopped
    assert [again[step] for step in evals] == pytest.approx(list(evals.values()), abs=1e-6)
    a, b = (read_checkpoint(run / "last.pt")["state_dict"] for run in (unbroken, broken))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert RunDir(broken).folder_of(RunDir(broken).last).is_dir()
