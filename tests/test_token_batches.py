"""Batches cut by a token budget (``TrainConfig.batch_tokens``, fairseq's --max-tokens)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.corpus.batches import batch_indices, rank_groups, token_batches
from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training.config import TrainConfig
from core.training.loop import Trainer, TrainState
from tests import helpers


def test_token_batches_fit_the_budget_and_keep_every_pair_once():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(2, 30, 500)]
    idx = sorted(range(500), key=lambda i: lengths[i])
    batches = token_batches(idx, lengths, 120)
    assert sorted(j for b in batches for j in b) == list(range(500))
    for b in batches:
        assert len(b) * max(lengths[j] for j in b) <= 120
    assert token_batches([0, 1], [200, 3], 100) == [[0], [1]]  # too long: alone
    again = batch_indices(lengths, 16, True, 7, True, max_tokens=120)
    assert again == batch_indices(lengths, 16, True, 7, True, max_tokens=120)
    assert sorted(j for b in again for j in b) == list(range(500))
    sizes = [len(b) for b in again]
    assert max(sizes) > 3 * min(sizes)  # short sentences: many in a batch, long: few


def test_each_process_gets_every_other_pair_of_a_token_budget_batch():
    encoded = [(np.zeros(n), np.zeros(n + 1)) for n in range(3, 40)]
    alone = list(rank_groups(encoded, 4, seed=1, max_tokens=60))  # the global batches
    shares = [list(rank_groups(encoded, 4, 1, rank=r, world_size=2, max_tokens=30)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == len(alone)
    for (group, _, total), (first, _, t0), (second, here1, t1) in zip(alone, *shares):
        assert first == group[0::2] and t0 == t1 == total
        assert second == (group[1::2] or group[:1])
        assert here1 == (0 if len(group) == 1 else sum(len(encoded[i][1]) - 1 for i in second))


def tiny(batch_tokens: int = 0, epochs: int = 2, state: TrainState | None = None) -> Trainer:
    data = DataConfig(**{**helpers.TINY_RUN["data"], "source": str(helpers.TINY)})
    corpus = load_corpus(data)
    torch.manual_seed(0)
    model_cfg = {**helpers.TINY_RUN["model"], "num_encoder_layers": 1, "num_decoder_layers": 1}
    model = Transformer(
        ModelConfig(
            src_vocab_size=len(corpus.src_vocab), tgt_vocab_size=len(corpus.tgt_vocab), **model_cfg
        )
    )
    cfg = TrainConfig(
        **{**helpers.TINY_RUN["train"], "epochs": epochs, "batch_size": 4, "eval_every": 1000},
        batch_tokens=batch_tokens,
        probes=[],
    )
    return Trainer(model, corpus, cfg, state)


def test_a_token_budget_run_trains_exactly_its_epochs_on_every_pair():
    trainer = tiny(batch_tokens=40)
    seen = []
    original = trainer.train_step

    def counting(src, tgt, *rest):
        seen.append(src.size(0))
        assert src.size(0) * max(src.size(1), tgt.size(1) - 1) <= 40 or src.size(0) == 1
        return original(src, tgt, *rest)

    trainer.train_step = counting
    assert trainer.run() == "finished"
    assert sum(seen) == 2 * len(trainer.train_data)  # each pair once per epoch
    assert trainer.state.step == trainer.epoch_length(0, 1) + trainer.epoch_length(1, 1)


def test_the_step_on_a_token_budget_batch_is_the_plain_step():
    plain, budget = tiny(), tiny(batch_tokens=40)
    src, tgt, here, total, align = next(budget.epoch_batches())
    a = plain.train_step(src, tgt, here, total, align)
    b = budget.train_step(src, tgt, here, total, align)
    assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
    for p, q in zip(plain.model.parameters(), budget.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_resume_with_other_processes_keeps_the_share_of_the_epoch():
    probe = tiny(batch_tokens=40)
    old = probe.epoch_length(0, 2)
    trainer = tiny(batch_tokens=40, state=TrainState(step=2, batch_in_epoch=old // 2, world_size=2))
    assert trainer.state.world_size == 1
    assert trainer.state.batch_in_epoch == round(old // 2 / old * trainer.epoch_length(0, 1))


def test_batch_tokens_is_a_checked_setting():
    assert "batch_tokens cannot be negative (got -5)" in TrainConfig(batch_tokens=-5).problems()
    with pytest.raises(ValueError):
        TrainConfig(batch_tokens=10**9).validate()
