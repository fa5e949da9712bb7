"""Training throughput: our step vs a torch.nn.Transformer twin and a d2l transcription.

    python bench/train_throughput.py [--repeats 7] [--batches 12] [--sizes d2l,realistic]
                                     [--skip-bucketing]

Part 1 times one training step (loss, backward, fused Adam) of our model, of a same-size
model built on torch.nn.Transformer (bench/common.py) and of a plain PyTorch
transcription of d2l.ai's chapter 11.7 code (bench/d2l_twin.py) on identical fra-eng
batches, interleaved batch by batch, in fp32 and (on CPUs with native bf16) in bf16
autocast entered each step as core.training.loop does. It prints median target tokens/s,
the ratios ours / twin and ours / d2l, and the share of this CPU's fp32 matmul roofline
our fp32 step reaches.
Part 2 trains on the same pairs with length-bucketed batches (our loader) and with every
sentence padded to a fixed num_steps as d2l does, and prints the end-to-end speed-up.
bench/train_profile.py shows where the step's time goes.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from common import TorchTwin, adam, corpus_path, interleaved_speeds, median, time_steps
from d2l_twin import D2LTransformer
from torch.utils.flop_counter import FlopCounterMode

from core.corpus.batches import batches, encode_pairs
from core.corpus.config import DataConfig
from core.corpus.splits import Split, load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training.devices import autocast_dtype, cpu_has_native_bf16
from core.training.presets import PRESETS

SIZES = {  # name: (description, ModelConfig fields)
    "d2l": (
        "d2l chapter (256 wide, 2+2 blocks, 4 heads, FFN 64, dropout 0.2)",
        dict(PRESETS["d2l"]["model"]),
    ),
    "realistic": (
        "realistic (256 wide, 3+3 blocks, 8 heads, FFN 1024, dropout 0.1)",
        dict(
            d_model=256,
            num_heads=8,
            num_encoder_layers=3,
            num_decoder_layers=3,
            d_ff=1024,
            dropout=0.1,
        ),
    ),
}
IMPLEMENTATIONS = {  # column: model class, each with loss(src, tgt_in, tgt_out, smoothing)
    "ours": Transformer,
    "nn.Transformer twin": TorchTwin,
    "d2l transcription": D2LTransformer,
}


def matmul_roofline(n: int = 2048, repeats: int = 10, dtype=torch.float32) -> float:
    """Peak GFLOP/s of an n x n matmul on this machine (fastest of several runs)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times) / 1e9


def step_flops(model, opt, batch) -> float:
    """FLOPs of one training step (forward + backward), counted by PyTorch."""
    with FlopCounterMode(display=False) as counter:
        time_steps(model, opt, [batch])
    return counter.get_total_flops()


def training_batches(corpus, count: int) -> list:
    """The first ``count`` length-bucketed, shuffled training batches of 128 pairs."""
    enc = encode_pairs(corpus.train, corpus.src_vocab, corpus.tgt_vocab)
    return list(batches(enc, 128, shuffle=True, seed=0))[:count]


def print_speeds(label: str, speed: dict[str, list[float]]) -> None:
    """Median tokens/s of each implementation, its runs, and ours / each other one."""
    for k, runs in speed.items():
        print(
            f"  {label:13s} {k:20s} {median(runs):7.0f} target tokens/s  (runs: "
            f"{', '.join(f'{s:.0f}' for s in runs)})"
        )
    ours = median(speed["ours"])
    ratios = [f"ours / {k.split()[0]}: {ours / median(v):.2f}x" for k, v in speed.items()]
    print(f"  {label:13s} " + ",  ".join(ratios[1:]))


def print_roofline(model, opt, data, speed: float, roofline: float) -> None:
    """GFLOP per batch of our fp32 step and the share of the fp32 matmul roofline it reaches."""
    flops = sum(step_flops(model, opt, b) for b in data[:3]) / 3
    tokens = sum(int((t[:, 1:] != 0).sum()) for _, t in data[:3]) / 3
    achieved = flops / tokens * speed / 1e9
    print(
        f"  our fp32 step: {flops / 1e9:.1f} GFLOP per batch, {achieved:.0f} GFLOP/s "
        f"= {achieved / roofline:.0%} of the {roofline:.0f} GFLOP/s fp32 roofline"
    )


def compare_implementations(corpus, size: str, args, roofline) -> None:
    """Ours, the twin and d2l on the same batches, in fp32 and (if native) bf16 autocast."""
    description, fields = SIZES[size]
    data = training_batches(corpus, args.batches)
    cfg = ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **fields)
    torch.manual_seed(0)
    models = {k: make(cfg) for k, make in IMPLEMENTATIONS.items()}
    opts = {k: adam(m) for k, m in models.items()}
    print(f"\n{description}, batch 128, {len(data)} identical batches, {args.repeats} repeats")
    precisions = [("fp32", False)] + ([("bf16 autocast", True)] if cpu_has_native_bf16() else [])
    for label, amp in precisions:
        speed = interleaved_speeds(models, opts, data, args.repeats, amp)
        print_speeds(label, speed)
        if not amp:
            print_roofline(models["ours"], opts["ours"], data, median(speed["ours"]), roofline)


def bucketing_speedup(corpus, args) -> None:
    """Same pairs, same model: bucketed batches vs fixed num_steps padding (d2l)."""
    pairs = list(corpus.train.pairs)
    random.Random(0).shuffle(pairs)
    enc = encode_pairs(Split(pairs[: args.bucket_pairs]), corpus.src_vocab, corpus.tgt_vocab)
    num_steps = max(max(len(s), len(t) - 1) for s, t in enc)
    cfg = ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **SIZES["realistic"][1])
    torch.manual_seed(0)
    model = Transformer(cfg)
    opt = adam(model)
    modes = {
        "length-bucketed": lambda: list(batches(enc, 128, seed=1)),
        f"fixed num_steps={num_steps} (d2l)": lambda: list(
            batches(enc, 128, seed=1, fixed_len=num_steps)
        ),
    }
    runs = {k: [] for k in modes}
    amp = autocast_dtype(torch.device("cpu")) is not None  # as core.training.loop would train
    for _ in range(args.bucket_repeats):
        for k, make in modes.items():
            start = time.perf_counter()
            data = make()
            seconds, tokens = time_steps(model, opt, data, amp)
            runs[k].append(time.perf_counter() - start)
    print(
        f"\nEnd to end, realistic size, {len(enc)} fra-eng pairs (one epoch, "
        f"{args.bucket_repeats} repeats, {'bf16 autocast' if amp else 'fp32'})"
    )
    for k, times in runs.items():
        print(f"  {k:28s} {median(times):7.1f} s/epoch  {tokens / median(times):7.0f} tokens/s")
    first, second = (median(t) for t in runs.values())
    print(f"  speed-up from bucketing: {second / first:.2f}x")


def main() -> None:
    """Run both parts and print their figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--bucket-pairs", type=int, default=10000)
    p.add_argument("--bucket-repeats", type=int, default=3)
    p.add_argument("--max-vocab", type=int, default=10000)
    p.add_argument("--sizes", default="d2l,realistic", help="comma-separated: d2l, realistic")
    p.add_argument("--skip-twin", action="store_true", help="skip part 1 (the comparison)")
    p.add_argument("--skip-bucketing", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    corpus = load_corpus(DataConfig(source=corpus_path(), max_len=20, max_vocab=args.max_vocab))
    roofline = matmul_roofline()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"2048^2 matmul: {roofline:.0f} GFLOP/s fp32, "
        f"{matmul_roofline(dtype=torch.bfloat16):.0f} bf16; vocab {len(corpus.src_vocab)} / "
        f"{len(corpus.tgt_vocab)}, {len(corpus.train.pairs)} training pairs (max_len 20)"
    )
    if not args.skip_twin:
        for size in args.sizes.split(","):
            compare_implementations(corpus, size, args, roofline)
    if not args.skip_bucketing:
        bucketing_speedup(corpus, args)


if __name__ == "__main__":
    main()
