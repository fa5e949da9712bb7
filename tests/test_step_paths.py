"""The GPU's step paths against the plain step: batches made ahead by a thread, and a step
that reads the device once (clipping and the finite check queued on the device)."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from core.corpus.batches import prefetched
from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training.config import TrainConfig
from core.training.loop import Trainer


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "batch-prefetch"]


def test_prefetched_keeps_order_and_every_item():
    assert list(prefetched(iter(range(100)), depth=3)) == list(range(100))
    assert list(prefetched([])) == []


def test_prefetched_raises_the_makers_error_at_its_item():
    def items():
        yield 1
        yield 2
        raise ValueError("bad batch")

    got = []
    with pytest.raises(ValueError, match="bad batch"):
        for item in prefetched(items()):
            got.append(item)
    assert got == [1, 2]


def test_prefetched_stops_its_thread_when_the_caller_leaves():
    made = []

    def endless():
        for i in range(10**9):
            made.append(i)
            yield i

    it = prefetched(endless(), depth=2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    deadline = time.monotonic() + 5
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert prefetch_threads() == []
    assert len(made) <= 3 + 2 + 2  # at most the queue's depth (and one in hand) ahead


def trainer(tiny_corpus, one_sync: bool, prefetch: bool, **train) -> Trainer:
    corpus = load_corpus(
        DataConfig(source=str(tiny_corpus), split="head", min_freq=1, num_train=29, num_val=1)
    )
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16, num_heads=2)
    )
    cfg = TrainConfig(batch_size=4, device="cpu", seed=3, **train)
    t = Trainer(model, corpus, cfg)
    t.one_sync, t.prefetch = one_sync, prefetch
    return t


def losses_and_weights(t: Trainer) -> tuple[list[tuple], dict]:
    records = []
    t.on("step", lambda _, info: records.append((info["step"], info["loss"], info["grad_norm"])))
    t.run()
    return records, t.model.state_dict()


@pytest.mark.parametrize("grad_clip", [1.0, 0.05, 0.0])  # clipped sometimes, always, never
def test_the_gpu_step_paths_equal_the_plain_step(tiny_corpus, grad_clip):
    """12 steps (an epoch and a half) with both paths on: the same losses, norms and weights."""
    settings = dict(max_steps=12, eval_every=100, log_every=1, grad_clip=grad_clip, amp=False)
    plain, plain_weights = losses_and_weights(trainer(tiny_corpus, False, False, **settings))
    fast, fast_weights = losses_and_weights(trainer(tiny_corpus, True, True, **settings))
    assert [s for s, _, _ in fast] == list(range(1, 13))
    for (_, loss, norm), (_, loss2, norm2) in zip(plain, fast):
        assert loss2 == pytest.approx(loss, rel=1e-6) and norm2 == pytest.approx(norm, rel=1e-6)
    for name, value in plain_weights.items():
        torch.testing.assert_close(fast_weights[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("one_sync", [False, True])
def test_a_non_finite_step_changes_no_weight_and_no_adam_state(tiny_corpus, one_sync):
    t = trainer(tiny_corpus, one_sync, False, max_steps=5)
    src, tgt, *_ = next(t.epoch_batches())
    t.train_step(src, tgt)  # a first step, so Adam has moments to keep
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in t.optimizer.state.values()]
    real = t.objective
    t.objective = lambda *args: (real(*args)[0] * math.nan, None)
    out = t.train_step(src, tgt)
    assert out["finite"] is False and math.isnan(out["loss"])
    for name, value in t.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(float(s["step"]) == 1 for s in t.optimizer.state.values())
    for m, state in zip(moments, t.optimizer.state.values()):
        assert torch.equal(state["exp_avg"], m)
    assert not hasattr(t.optimizer, "found_inf")  # the next plain step is not skipped
