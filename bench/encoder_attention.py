"""The encoder (BERT) trainer's CPU step on the eager attention against torch's fused SDPA.

    python bench/encoder_attention.py [--steps 40] [--threads 0]

The "small" preset's sizes as an encoder (``arch`` encoder: width 256, 4 heads, 2 layers, FFN
1024, BPE 6,000 shared, batch 128 of fra-eng pairs up to 12 tokens, bf16 autocast where the CPU
has it), two ``Trainer``s with the same starting weights: one as the studio runs it (its
masked-LM loss pass on ``core.model.attention_path.training_attention``'s choice, eager on a
CPU), one with that choice patched to SDPA (the step before 29 November 2026). After 5 warm-up steps
each, every batch is trained by both, in alternating order (a machine shared with other work
loads them alike); the medians of the per-step seconds, and their ratio, are printed.
Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip).
"""

from __future__ import annotations

import argparse
import itertools
import time
from unittest import mock

import torch
from common import corpus_path, median

from core.corpus.config import DataConfig
from core.model import attention_path, trainee
from core.model.config import ModelConfig
from core.runs.corpus_cache import prepared_corpus
from core.training.config import TrainConfig
from core.training.loop import Trainer
from core.training.presets import PRESETS


def encoder_trainer() -> Trainer:
    """The "small" preset's sizes as an encoder Trainer on fra-eng (seeded weights)."""
    cfg = PRESETS["small"]
    data = DataConfig(**{**cfg["data"], "source": corpus_path(), "shared_vocab": True})
    corpus = prepared_corpus(data)
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab),
        tgt_vocab_size=len(corpus.tgt_vocab),
        **{**cfg["model"], "arch": "encoder"},
    )
    torch.manual_seed(0)
    train = TrainConfig(**{**cfg["train"], "device": "cpu", "probes": []})
    return Trainer(trainee.build_model(model_cfg), corpus, train)


def on_sdpa(trainer: Trainer):
    """The trainer's step with its loss pass on SDPA (the CPU path before the eager one)."""

    def step(src, tgt):
        with mock.patch.object(attention_path, "training_attention", lambda device: "sdpa"):
            return trainer.train_step(src, tgt)

    return step


def seconds(step, src, tgt) -> float:
    """Seconds of one step on a batch."""
    start = time.perf_counter()
    step(src, tgt)
    return time.perf_counter() - start


def main() -> None:
    """Print each path's median step, target tokens/s and the ratio, for docs/training.md."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=0, help="0: torch's default")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    eager = encoder_trainer()
    steps = {"eager (studio)": eager.train_step, "SDPA": on_sdpa(encoder_trainer())}
    batches = list(itertools.islice(eager.epoch_batches(), args.steps + 5))
    for step in steps.values():
        for src, tgt, *_ in batches[:5]:  # kernel choice, allocator
            step(src, tgt)
    times: dict[str, list[float]] = {name: [] for name in steps}
    targets = []
    for i, (src, tgt, *_) in enumerate(batches[5:]):
        for name in list(steps)[:: 1 if i % 2 == 0 else -1]:
            times[name].append(seconds(steps[name], src, tgt))
        targets.append(int(tgt[:, 1:].ne(0).sum()))
    params = eager.model.num_parameters() / 1e6
    print(f"cpu, {torch.get_num_threads()} threads, encoder at 'small' sizes ({params:.1f} M "
          f"parameters), amp {eager.cfg.amp}, {len(targets)} steps each, interleaved")  # fmt: skip
    print("| loss pass | median step (ms) | target tokens/s |\n|---|---|---|")
    for name, t in times.items():
        rate = median([n / s for n, s in zip(targets, t, strict=True)])
        print(f"| {name} | {1000 * median(t):.0f} | {rate:,.0f} |")
    ratio = median([s / e for s, e in zip(times["SDPA"], times["eager (studio)"], strict=True)])
    print(f"SDPA / eager, the median of per-batch ratios: {ratio:.2f}")


if __name__ == "__main__":
    main()
