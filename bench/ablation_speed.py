"""Head ablation speed: the importance grid over validation sentences, and a live re-translation.

    python bench/ablation_speed.py [--checkpoint checkpoints/fra-eng-small.pt] [--sentences 200]
                                   [--repeats 3] [--threads N]

Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip) for the validation split.
Prints the median seconds of the importance grid (BLEU and loss with each head removed
alone, batched, plus the gradient score) and of ``head_importance`` as a whole (the grid
and the pruning curve); then the median milliseconds of translating a 10-word sentence
greedily with all maps, with three heads removed and with none.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from common import ROOT, corpus_path, median
from decode_latency import SENTENCE, time_ms

from core.attention import importance as hi
from core.attention.ablation import ablated, all_heads, parse_heads
from core.attention.head_measures import Measures
from core.measure.sample import validation_sample
from core.model.checkpoints import trained_data
from core.model.opened import open_model
from core.model.parts import GREEDY

REMOVED = "encoder:1:0,decoder_self:0:2,cross:1:3"  # the heads the live re-translation removes


def seconds(fn, repeats: int) -> tuple[float, list[float]]:
    """Median and all run times of fn() in seconds (no warm-up: each run is long)."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return median(runs), runs


def grid(lm, sample) -> None:
    """The importance grid: BLEU (batched) and loss with each head removed, gradient scores."""
    measures = Measures(lm, sample)
    sets = [[]] + [[h] for h in all_heads(lm.cfg)]
    measures.bleu(sets)
    measures.losses(sets)
    measures.gradients()


def report(name: str, med: float, runs: list[float], unit: str) -> None:
    """One line: name, median, min and max."""
    print(f"  {name:44s} median {med:7.2f} {unit}  (min {min(runs):.2f}, max {max(runs):.2f})")


def main() -> None:
    """Print ablation timings."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--sentences", type=int, default=hi.SENTENCES)
    p.add_argument("--repeats", type=int, default=3, help="runs of the importance grid")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    args = p.parse_args()
    os.environ.setdefault("FRA_ENG_ZIP", corpus_path())
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = open_model(args.checkpoint)
    cfg = lm.cfg
    start = time.perf_counter()
    sample = validation_sample(lm, trained_data(lm.meta), args.sentences)
    print(
        f"model: {args.checkpoint} ({cfg.d_model} wide, {cfg.num_encoder_layers}+"
        f"{cfg.num_decoder_layers} blocks, {cfg.num_heads} heads, {len(all_heads(cfg))} in all), "
        f"{torch.get_num_threads()} CPU threads, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"sample: {len(sample.sources)} validation sentences, {len(sample.encoded)} pairs "
        f"(split rebuilt in {time.perf_counter() - start:.1f} s, not counted below)"
    )
    report(
        "importance grid (BLEU, loss, gradient)",
        *seconds(lambda: grid(lm, sample), args.repeats),
        "s",
    )
    whole = seconds(lambda: hi.head_importance(lm, sample), args.repeats)
    report("head_importance (grid + pruning curve)", *whole, "s")
    heads = parse_heads(REMOVED)

    def removed() -> None:
        with ablated(lm, heads):
            lm.translate(SENTENCE, GREEDY)

    print(f"sentence: {SENTENCE!r}; removed: {REMOVED}")
    report("greedy + all maps, 3 heads removed", *time_ms(removed, 50), "ms")

    def plain() -> None:
        lm.translate(SENTENCE, GREEDY)

    report("greedy + all maps, no head removed", *time_ms(plain, 50), "ms")


if __name__ == "__main__":
    main()
