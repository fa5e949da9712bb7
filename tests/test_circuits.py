"""Circuit scores in training (``core.training.circuits``): the head detector's numbers
(``core.attention.head_detectors``, one set of formulas in ``core.model.detector_scores``) on
fixed sequences [bos, a, a] of the task's tokens, JSON-able and of a known size; and the phase
change read from a run's eval records."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from core.attention import head_detectors as hd
from core.corpus.vocab import Vocab
from core.training.circuits import (
    BEFORE,
    FORMED,
    best_head_series,
    circuit_scores,
    circuit_sequences,
    phase_change,
)

L, H = 2, 3


class FakeTrainee(torch.nn.Module):
    """What ``circuit_scores`` asks of a model: attention weights and token losses, here
    functions of the ids (random but fixed), remembering the ids it read."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(L * H))
        self.read: list[torch.Tensor] = []
        self.modes: list[bool] = []

    def patterns(self, ids: torch.Tensor) -> torch.Tensor:
        """(L, B, H, N, N) causal softmax weights of scores made from the ids."""
        self.read.append(ids)
        self.modes.append(self.training)
        B, N = ids.shape
        g = torch.Generator().manual_seed(int(ids.sum()))
        scores = torch.randn(L, B, H, N, N, generator=g) * self.w.view(L, 1, H, 1, 1)
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        return scores.masked_fill(~causal, -math.inf).softmax(-1)

    def token_losses(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, N - 1) positive losses made from the ids."""
        return (ids[:, 1:].float() / 7).sin() ** 2 * 4


def test_the_sequences_are_a_start_token_and_distinct_tokens_read_twice():
    ids = circuit_sequences(n=10, types=12, sequences=5, seed=3)
    assert ids.shape == (5, 21)
    assert (ids[:, 0] == Vocab.bos_id).all()
    assert torch.equal(ids[:, 1:11], ids[:, 11:])
    for row in ids[:, 1:11]:
        assert len(set(row.tolist())) == 10 and row.min() >= 4 and row.max() <= 15
    assert torch.equal(ids, circuit_sequences(10, 12, 5, 3))  # fixed: every evaluation the same


def test_the_scores_are_the_head_detectors_on_the_same_weights_and_losses():
    """Given the same weights and losses, the dict holds what ``HeadScores`` gives (its rows
    and summary), rounded; the model read the sequences once, in eval mode, and is left in
    training mode; no global random draw was taken."""
    torch.manual_seed(0)
    model = FakeTrainee().train()
    before = torch.get_rng_state()
    out = circuit_scores(model, n=6, K=20, sequences=4, seed=1)
    assert torch.equal(torch.get_rng_state(), before)
    assert model.training and model.modes == [False]
    (ids,) = model.read
    assert torch.equal(ids, circuit_sequences(6, 20, 4, 1))
    with torch.no_grad():
        weights, losses = model.patterns(ids), model.token_losses(ids)
    want = hd.HeadScores(
        **hd.scores_of(weights, 6), losses=losses.mean(0), length=6, sequences=4, seed=1
    )
    for row in want.rows():
        for name in hd.SCORES:
            assert out[name][row["layer"]][row["head"]] == pytest.approx(row[name], abs=1e-4)
    summary = want.summary()
    for key in ("icl", "first_copy_loss", "repeat_loss", "length", "sequences"):
        assert out[key] == pytest.approx(summary[key], abs=1e-4), key
    assert json.loads(json.dumps(out)) == out
    assert [len(out[name]) for name in hd.SCORES] == [L] * 3
    assert all(len(row) == H for name in hd.SCORES for row in out[name])


def test_a_perfect_induction_head_scores_one():
    """A head whose weights are the induction pattern scores 1 on induction, 0 elsewhere it
    does not reach; the losses of a perfect copier are 0 on the repeat."""

    class Copier(FakeTrainee):
        def patterns(self, ids):
            B, N = ids.shape
            n = (N - 1) // 2
            w = torch.eye(N).expand(L, B, H, N, N).clone()
            w[:, :, 0, n + 1 :] = hd.detection_patterns(n)["induction"][n + 1 :]
            return w

        def token_losses(self, ids):
            n = (ids.shape[1] - 1) // 2
            return torch.cat([torch.full((len(ids), n), 3.0), torch.zeros(len(ids), n)], 1)

    out = circuit_scores(Copier(), n=8, K=64)
    assert out["induction"][0][0] == 1 and out["induction"][1][1] == 0
    assert out["repeat_loss"] == 0 and out["first_copy_loss"] == 3 and out["icl"] == -3


def test_fewer_types_than_tokens_scores_shorter_sequences():
    """n distinct tokens need n types: with fewer the sequences are cut to K, and say so."""
    model = FakeTrainee()
    out = circuit_scores(model, n=16, K=5, sequences=2)
    assert out["length"] == 5 and model.read[0].shape == (2, 11)


def records(scores: list[float], step: int = 20, losses: list[float] | None = None, head=(1, 2)):
    """Eval records every ``step`` steps whose head ``head`` has these induction scores (the
    others 0.2 and falling), and these repeat losses (default: 4 minus 4 x the score)."""
    out = []
    for i, s in enumerate(scores):
        grid = [[0.2 / (i + 1)] * H for _ in range(L)]
        grid[head[0]][head[1]] = s
        loss = losses[i] if losses else round(4 - 4 * s, 4)
        out.append({"step": (i + 1) * step, "circuits": {"induction": grid, "repeat_loss": loss}})
    return out


def test_a_head_that_forms():
    """0.05 .. 0.08 .. then up to 0.9: before is the last step under 0.1, formed the first at
    0.5 or more, the steepest rise between the two evaluations with the largest gain."""
    change = phase_change(records([0.05, 0.08, 0.3, 0.75, 0.9, 0.92]))
    assert change == {
        "layer": 1,
        "head": 2,
        "score": 0.92,
        "before": 40,
        "formed": 80,
        "start": 60,
        "end": 80,
        "rise": 0.45,
        "repeat_loss_before": 2.8,
        "repeat_loss_after": 1.0,
    }
    assert BEFORE == 0.1 and FORMED == 0.5


def test_a_head_that_never_forms_is_no_phase_change():
    assert phase_change(records([0.05, 0.2, 0.45, 0.3])) is None
    assert phase_change(records([0.05, 0.7, 0.4])) is None  # up, then down again
    assert phase_change([]) is None
    assert phase_change([{"step": 10, "val_loss": 3.0}]) is None  # a translation run's records


def test_an_earlier_record_of_another_shape_or_a_null_score_is_a_gap():
    """A record whose grid lacks the best head, or holds null there, reads as NaN (once an
    IndexError / TypeError from the command and the Train page)."""
    rs = records([0.05, 0.08, 0.3, 0.75, 0.9, 0.92])
    rs[0]["circuits"]["induction"] = [[0.1] * H]  # one layer: no layer 1
    rs[1]["circuits"]["induction"][1][2] = None
    change = phase_change(rs)
    assert change["formed"] == 80 and change["before"] is None and change["start"] == 60
    steps, scores, _, head = best_head_series(rs)
    assert head == (1, 2) and math.isnan(scores[0]) and math.isnan(scores[1])


def test_a_noisy_rise_is_read_from_its_last_climb():
    """An early spike above 0.5 that falls back is not the phase change; the head formed once
    it stayed above; the steepest rise is per step, inside the window; records without circuit
    scores and out of order are read by step."""
    scores = [0.04, 0.6, 0.07, 0.09, 0.3, 0.35, 0.8, 0.55, 0.85]
    recs = records(scores)
    recs.insert(3, {"step": 70, "val_loss": 2.0})  # an evaluation without circuits
    change = phase_change(list(reversed(recs)))
    assert (change["before"], change["formed"]) == (80, 140)
    assert (change["start"], change["end"], change["rise"]) == (120, 140, 0.45)
    uneven = records(scores[:3] + [0.3, 0.9])
    uneven[-1]["step"] = 400  # 0.3 -> 0.9 over 320 steps is slower than 0.07 -> 0.3 over 20
    change = phase_change(uneven)
    assert (change["start"], change["end"], change["formed"]) == (60, 80, 400)


def test_a_head_above_the_line_from_the_first_record():
    """Formed before the first evaluation: no step under 0.1, no rise seen."""
    change = phase_change(records([0.7, 0.9]))
    assert (change["before"], change["formed"], change["start"], change["end"]) == (
        None,
        20,
        None,
        None,
    )
    assert change["repeat_loss_before"] is None and change["score"] == 0.9


@pytest.mark.slow  # trains (about 3 s on one CPU thread)
def test_an_induction_head_forms_on_the_task_and_the_phase_change_finds_it():
    """The lead's sizes (2 layers, d 64, 4 heads, n 16, K 64, batch 32, Adam 1e-3), trained on
    the induction corpus through the trainee's loss: by step 120 a head scores over 0.9 on
    induction, the repeat loss has fallen from about ln 64, and the phase change lies inside.
    One length for every copy makes it fast (a head copies from 16 back: scored at 16 it is
    an induction head); the two-head circuit of drawn lengths: tests/test_train_induction.py."""
    from core.corpus.batches import rank_batches
    from core.corpus.config import DataConfig
    from core.corpus.induction import induction_corpus
    from core.model.config import ModelConfig
    from core.model.trainee import build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fixed = {"induction_min_length": 16, "induction_tokens": 64}
        corpus = induction_corpus(DataConfig(task="induction", induction_sequences=3840, **fixed))
        torch.manual_seed(0)
        sizes = {"d_model": 64, "num_heads": 4, "d_ff": 128, "num_decoder_layers": 2}
        cfg = ModelConfig(src_vocab_size=68, tgt_vocab_size=68, dropout=0.0, arch="decoder-only")
        model = build_model(replace(cfg, **sizes))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        recs = []
        for step, (src, tgt, _, _) in enumerate(rank_batches(corpus.ids["train"], 32, 0), 1):
            loss, _ = model.loss_terms(src, tgt[:, :-1], tgt[:, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                recs.append({"step": step, "circuits": circuit_scores(model, 16, 64)})
    finally:
        torch.set_num_threads(threads)
    first, last = recs[0]["circuits"], recs[-1]["circuits"]
    assert max(max(row) for row in first["induction"]) < BEFORE
    assert max(max(row) for row in last["induction"]) > 0.9
    assert first["repeat_loss"] > 3.5 and last["repeat_loss"] < 1.0 < first["first_copy_loss"]
    change = phase_change(recs)
    assert change is not None and 20 <= change["start"] < change["end"] <= change["formed"] <= 120
