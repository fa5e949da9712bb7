"""Decoding latency: one 10-word sentence, greedy with every attention map, on the CPU.

    python bench/decode_latency.py [--checkpoint checkpoints/fra-eng-small.pt] [--repeats 50]

Prints the median milliseconds of ``core.model.decode.translate`` (greedy and beam 4, both
returning all encoder, decoder-self and cross maps) and of plain cached greedy decoding.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import ROOT, median

from core.model.decode import greedy_decode, prepare_source, translate
from core.model.parts import MAX_LEN
from core.model.studio_loading import load_checkpoint

SENTENCE = "i think we should go to the beach tomorrow morning ."  # 10 words + "."


def time_ms(fn, repeats: int) -> tuple[float, list[float]]:
    """Median and all run times of fn() in milliseconds, after two warm-up calls."""
    fn()
    fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return median(runs), runs


def main() -> None:
    """Print latency figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args()
    lm = load_checkpoint(args.checkpoint)
    cfg = lm.model.cfg
    print(
        f"model: {args.checkpoint} ({cfg.d_model} wide, {cfg.num_encoder_layers}+"
        f"{cfg.num_decoder_layers} blocks, {cfg.num_heads} heads), "
        f"{torch.get_num_threads()} CPU threads"
    )
    t = translate(lm.model, lm.src_vocab, lm.tgt_vocab, SENTENCE)
    print(f"sentence: {SENTENCE!r} -> {t.text!r} ({len(t.output_tokens)} output steps)")
    for name, kw in [
        ("greedy + all attention maps", {}),
        ("beam 4 + all attention maps", {"beam_size": 4}),
    ]:
        med, runs = time_ms(
            lambda kw=kw: translate(lm.model, lm.src_vocab, lm.tgt_vocab, SENTENCE, **kw),
            args.repeats,
        )
        print(f"  {name:30s} median {med:6.1f} ms  (min {min(runs):.1f}, max {max(runs):.1f})")
    ids, _, _, _ = prepare_source(SENTENCE, lm.src_vocab, cfg.max_positions)
    src = torch.tensor([ids])  # (1, S)
    lm.model.eval()
    med, runs = time_ms(lambda: greedy_decode(lm.model, src, MAX_LEN), args.repeats)
    name = "cached greedy, no maps"
    print(f"  {name:30s} median {med:6.1f} ms  (min {min(runs):.1f}, max {max(runs):.1f})")


if __name__ == "__main__":
    main()
