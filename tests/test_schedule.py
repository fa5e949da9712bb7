"""The learning-rate schedules: warm-up, 1/sqrt(step), constant, and linear to zero."""

from __future__ import annotations

import itertools

import pytest

from core.model.transformer import Transformer
from core.training.config import TrainConfig, learning_rate


def test_warmup_then_decay():
    """The learning rate rises linearly to its peak, then decays as 1/sqrt(step)."""
    cfg = TrainConfig(lr=1e-3, warmup_steps=100)
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(400, cfg) == pytest.approx(5e-4)
    cfg.schedule = "constant"
    assert learning_rate(400, cfg) == pytest.approx(1e-3)


def test_linear_schedule_reaches_zero_at_the_end_of_the_run():
    """ "linear": the warm-up ramp, then the peak times the part of the run still to go."""
    cfg = TrainConfig(lr=1e-3, warmup_steps=100, schedule="linear")
    assert learning_rate(50, cfg, 0.01) == pytest.approx(5e-4)  # the ramp, as before
    assert learning_rate(100, cfg, 0.1) == pytest.approx(9e-4)  # never above 1 - progress
    assert learning_rate(400, cfg, 0.5) == pytest.approx(5e-4)
    assert learning_rate(4000, cfg, 1.0) == 0.0
    assert learning_rate(99, cfg, 0.995) == pytest.approx(5e-6)  # a short run: the lower
    cfg.warmup_steps = 0
    assert learning_rate(1, cfg, 0.0) == pytest.approx(1e-3)
    assert learning_rate(10, cfg, 0.25) == pytest.approx(7.5e-4)


def test_linear_schedule_follows_the_time_budget(tiny_corpus):
    """A time-limited run decays by the share of its budget spent, and ends near zero."""
    from core.corpus.config import DataConfig
    from core.corpus.splits import load_corpus
    from core.model.config import ModelConfig
    from core.training.loop import Trainer

    corpus = load_corpus(
        DataConfig(source=str(tiny_corpus), split="head", min_freq=1, num_train=29, num_val=1)
    )
    model = Transformer(ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16))
    cfg = TrainConfig(
        epochs=0,
        time_budget=1.0,
        batch_size=4,
        warmup_steps=0,
        schedule="linear",
        log_every=1,
        eval_every=10**6,
        eval_sentences=1,
        threads=1,
        device="cpu",
    )
    ticks = itertools.count()
    trainer = Trainer(model, corpus, cfg, clock=lambda: next(ticks) * 0.05)  # 0.05 s a step
    lrs = []
    trainer.on("step", lambda _, info: lrs.append((info["progress"], info["lr"])))
    assert trainer.run() == "finished"
    assert len(lrs) == 20 and lrs[0][1] == 1e-3 and lrs[-1][1] < 1e-3 * 0.2  # 0 spent before
    for (before, _), (_, lr) in zip(lrs, lrs[1:]):  # the share spent before each step
        assert lr == pytest.approx(1e-3 * (1 - before))
    assert lrs[-1][1] < 1e-3 * 0.5
