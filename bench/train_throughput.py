"""Training throughput: our step vs a torch.nn.Transformer twin, and bucketing vs d2l padding.

    python bench/train_throughput.py [--repeats 5] [--batches 12] [--bucket-pairs 8000]

Part 1 times our training step and a same-size model built on torch.nn.Transformer on
identical fra-eng batches, interleaved, and prints median target tokens/s and the ratio,
plus the fraction of this CPU's matmul roofline the step reaches.
Part 2 trains on the same pairs with length-bucketed batches (our loader) and with every
sentence padded to a fixed num_steps as d2l does, and prints the end-to-end speed-up.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from common import TorchTwin, adam, corpus_path, median, time_steps
from torch.utils.flop_counter import FlopCounterMode

from core.data import DataConfig, Split, batches, encode_pairs, load_corpus
from core.devices import autocast_dtype, cpu_has_native_bf16
from core.model import ModelConfig, Transformer

SIZES = {
    "d2l chapter (256 wide, 2+2 blocks, 4 heads, FFN 64)": dict(
        d_model=256, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64, dropout=0.2
    ),
    "realistic (256 wide, 3+3 blocks, 8 heads, FFN 1024)": dict(
        d_model=256, num_heads=8, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024, dropout=0.1
    ),
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


def measure(models, opts, data, repeats, amp) -> dict[str, list[float]]:
    """Interleaved repeats: target tokens/s of each model's step on the same batches."""
    speed = {k: [] for k in models}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        for k in models:  # warm-up
            time_steps(models[k], opts[k], data[:2])
        for _ in range(repeats):
            for k in models:
                seconds, tokens = time_steps(models[k], opts[k], data)
                speed[k].append(tokens / seconds)
    return speed


def compare_with_twin(corpus, name, size, args, roofline) -> None:
    """Our step and the twin's on the same batches, in fp32 and (if native) bf16 autocast."""
    enc = encode_pairs(corpus.train, corpus.src_vocab, corpus.tgt_vocab)
    data = list(batches(enc, 128, shuffle=True, seed=0))[: args.batches]
    cfg = ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **size)
    torch.manual_seed(0)
    models = {"ours": Transformer(cfg), "nn.Transformer twin": TorchTwin(cfg)}
    opts = {k: adam(m) for k, m in models.items()}
    print(f"\n{name}, batch 128, {len(data)} identical batches, {args.repeats} repeats")
    precisions = [("fp32", False)] + ([("bf16 autocast", True)] if cpu_has_native_bf16() else [])
    for label, amp in precisions:
        speed = measure(models, opts, data, args.repeats, amp)
        for k, runs in speed.items():
            print(
                f"  {label:13s} {k:20s} {median(runs):7.0f} target tokens/s  (runs: "
                f"{', '.join(f'{s:.0f}' for s in runs)})"
            )
        ours, twin = median(speed["ours"]), median(speed["nn.Transformer twin"])
        print(f"  {label:13s} ratio ours / twin: {ours / twin:.2f}x")
        if not amp:
            flops = sum(step_flops(models["ours"], opts["ours"], b) for b in data[:3]) / 3
            tokens = sum(int((t[:, 1:] != 0).sum()) for _, t in data[:3]) / 3
            achieved = flops / tokens * ours / 1e9
            print(
                f"  our fp32 step: {flops / 1e9:.1f} GFLOP per batch, {achieved:.0f} GFLOP/s "
                f"= {achieved / roofline:.0%} of the {roofline:.0f} GFLOP/s fp32 roofline"
            )


def bucketing_speedup(corpus, args) -> None:
    """Same pairs, same model: bucketed batches vs fixed num_steps padding (d2l)."""
    pairs = list(corpus.train.pairs)
    random.Random(0).shuffle(pairs)
    enc = encode_pairs(Split(pairs[: args.bucket_pairs]), corpus.src_vocab, corpus.tgt_vocab)
    num_steps = max(max(len(s), len(t) - 1) for s, t in enc)
    size = SIZES["realistic (256 wide, 3+3 blocks, 8 heads, FFN 1024)"]
    cfg = ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **size)
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
    amp = autocast_dtype(torch.device("cpu")) is not None  # as core.train_loop would train
    for _ in range(args.bucket_repeats):
        for k, make in modes.items():
            start = time.perf_counter()
            data = make()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                seconds, tokens = time_steps(model, opt, data)
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
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--bucket-pairs", type=int, default=10000)
    p.add_argument("--bucket-repeats", type=int, default=3)
    p.add_argument("--max-vocab", type=int, default=10000)
    p.add_argument("--skip-twin", action="store_true")
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
        for name, size in SIZES.items():
            compare_with_twin(corpus, name, size, args, roofline)
    if not args.skip_bucketing:
        bucketing_speedup(corpus, args)


if __name__ == "__main__":
    main()
