"""An encoder (BERT-style) run scores its heads as the circuits form: each evaluation records
the previous-token, duplicate-token and induction scores of every head on the repeated random
tokens a decoder-only run is scored on, and ``python -m core.circuits`` prints them."""

from __future__ import annotations

import json

import pytest
import torch

from core import circuits
from core.model.config import ModelConfig
from core.model.encoder_trainee import EncoderTrainee
from core.runs.run_dir import RunDir
from core.train import main
from core.training.circuits import circuit_scores, circuit_sequences
from core.training.settings import validate_settings
from tests.helpers import TINY_ARGS

LAYERS, HEADS = 2, 4


def tiny_encoder(seed: int = 0) -> EncoderTrainee:
    """An untrained encoder of LAYERS layers of HEADS heads over 40 ids (the mask past them)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(40, 40, d_model=16, num_heads=HEADS, d_ff=32, dropout=0.0, arch="encoder")
    return EncoderTrainee(cfg)


def test_an_encoder_scores_every_head_on_the_repeated_tokens():
    model = tiny_encoder()
    model.train()
    scores = circuit_scores(model, 6, 36)
    for name in ("previous_token", "duplicate_token", "induction"):
        grid = scores[name]
        assert len(grid) == LAYERS and all(len(row) == HEADS for row in grid)
        assert all(0.0 <= v <= 1.0 for row in grid for v in row)
    assert scores["length"] == 6 and all(
        isinstance(scores[k], float) for k in ("repeat_loss", "first_copy_loss", "icl")
    )
    assert model.training  # read in eval mode, left as it was


def test_an_encoders_token_losses_mask_one_token_at_a_time():
    """Token i's loss is the masked-LM loss with token i alone masked (both sides in view)."""
    model = tiny_encoder().eval()
    ids = circuit_sequences(4, 36, sequences=2)  # (2, 9)
    with torch.no_grad():
        losses = model.token_losses(ids)  # (2, 8)
        assert losses.shape == (2, 8)
        for row, i in ((0, 1), (1, 5), (0, 8)):
            masked = ids[row : row + 1].clone()
            masked[0, i] = model.mask_id
            logits = model.lm(input_ids=masked).logits[0, i]  # (V,)
            alone = torch.nn.functional.cross_entropy(logits[None], ids[row, i : i + 1])
            assert float(losses[row, i - 1]) == pytest.approx(float(alone), abs=1e-5)


def test_an_encoder_on_the_induction_or_lm_task_is_refused_in_one_line():
    """Their sequences are laid out for a causal reader: an encoder's heads are scored on its
    translation runs instead."""
    for task in ("induction", "lm"):
        refused = validate_settings(
            "induction", {"data": {"task": task}, "model": {"arch": "encoder"}}
        )
        assert refused == [f"the {task} task trains a decoder-only model (arch)"]


@pytest.mark.slow  # trains a run
def test_a_seeded_encoder_run_records_circuits_that_the_command_prints(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--arch", "encoder", "--num-train", "29", "--num-val", "1", "--epochs", "0"]
    flags += ["--max-steps", "8", "--eval-every", "4"]
    assert main([*TINY_ARGS, *flags, "--out", str(out)]) == 0
    evals = [r for r in RunDir(out).read_metrics() if r["record"] == "eval"]
    assert [r["step"] for r in evals] == [4, 8]
    for record in evals:
        grid = record["circuits"]["induction"]
        assert len(grid) == 2 and all(len(row) == 4 for row in grid)  # the tiny model's heads
        assert "val_fill_accuracy" in record and "val_bleu" not in record
    capsys.readouterr()
    assert circuits.main(["--run", str(out)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["step"] for line in lines[:-1]] == [4, 8]
    assert lines[-1]["summary"] and lines[-1]["evaluations"] == 2
