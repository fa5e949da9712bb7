"""Model FLOPs utilisation: the trainer's useful FLOP/s against this machine's matmul peak.

    python bench/mfu.py [--presets d2l,small] [--precisions fp32,bf16] [--rounds 5]
                        [--steps 20] [--device cpu|cuda] [--ceiling]

For each preset and precision, in each round (medians over rounds):

- **trainer FLOP/s**: ``Trainer.train_step`` (the project's own step: forward, backward,
  clipping, fused Adam) on the preset's real fra-eng batches, timed over ``--steps`` steps;
  the FLOPs are those of the step's forward and backward matrix products, counted by
  ``torch.utils.flop_counter.FlopCounterMode`` on the same batches (attention scores
  included, with each batch's real padded shapes, so the data's source/target length ratio
  is in the count);
- **peak FLOP/s**: the best of plain matrix products of the model's own shapes (tokens of a
  batch x d_model by d_model x 3 d_model, by d_model x d_ff, d_ff x d_model, and the output
  layer's d_model x V) in the same precision, timed in the same round;
- **MFU** = trainer / peak;
- with ``--ceiling``, the step once more under ``torch.profiler``: the self time of its
  matrix products (mm, addmm, bmm, baddbmm) and of the fused Adam step, the products' own
  GFLOP/s inside the step, and the **ceiling**: the MFU of a step that did nothing but its
  products and Adam, at the speed they run there (the rest of the step counted as free).

Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time

import torch
from common import corpus_path, median
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training.config import TrainConfig
from core.training.devices import cpu_has_native_bf16
from core.training.loop import Trainer
from core.training.presets import PRESETS


def trainer_for(preset: str, amp: bool, device: str) -> Trainer:
    """The preset's Trainer on fra-eng, as core.train builds it."""
    cfg = PRESETS[preset]
    corpus = load_corpus(DataConfig(**{**cfg["data"], "source": corpus_path()}))
    model_cfg = ModelConfig(
        src_vocab_size=len(corpus.src_vocab), tgt_vocab_size=len(corpus.tgt_vocab), **cfg["model"]
    )
    train = TrainConfig(**{**cfg["train"], "amp": amp, "device": device, "probes": []})
    torch.manual_seed(0)
    return Trainer(Transformer(model_cfg), corpus, train)


def every_batch(trainer: Trainer):
    """The trainer's batches, epoch after epoch."""
    for epoch in itertools.count():
        trainer.state.epoch = epoch
        yield from trainer.epoch_batches()


def step_flops(trainer: Trainer, batch) -> int:
    """FLOPs of one step's forward and backward on a batch (a throw-away copy of the model)."""
    model = copy.deepcopy(trainer.model)
    src, tgt = batch[0].to(trainer.device), batch[1].to(trainer.device)
    with FlopCounterMode(display=False) as counter:
        with torch.autocast(
            trainer.device.type, torch.bfloat16, enabled=trainer.amp_dtype is not None
        ):
            loss = model.loss(src, tgt[:, :-1], tgt[:, 1:], trainer.cfg.label_smoothing)
        loss.backward()
    return counter.get_total_flops()


def sync(device: torch.device) -> None:
    """Wait for the device (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def trainer_speed(trainer: Trainer, batches: list) -> float:
    """FLOP/s of the trainer's own steps on these batches."""
    flops = sum(step_flops(trainer, b) for b in batches)
    sync(trainer.device)
    start = time.perf_counter()
    for src, tgt, here, total, align in batches:
        trainer.train_step(src, tgt, here, total, align)
    sync(trainer.device)
    return flops / (time.perf_counter() - start)


def peak_speed(trainer: Trainer, tokens: int, repeats: int = 5) -> float:
    """Best FLOP/s of plain matrix products of the model's own shapes."""
    cfg, dev = trainer.model.cfg, trainer.device
    dtype = torch.bfloat16 if trainer.amp_dtype is not None else torch.float32
    n = -(-tokens // 64) * 64
    shapes = [(n, cfg.d_model, 3 * cfg.d_model), (n, cfg.d_model, cfg.d_ff)]
    shapes += [(n, cfg.d_ff, cfg.d_model), (n, cfg.d_model, cfg.tgt_vocab_size)]
    best = 0.0
    for m, k, out in shapes:
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, out, device=dev, dtype=dtype)
        a @ b  # warm-up (kernel selection)
        times = []
        for _ in range(repeats):
            sync(dev)
            start = time.perf_counter()
            a @ b
            sync(dev)
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * k * out / min(times))
    return best


PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def step_parts(trainer: Trainer, batches: list) -> tuple[float, float, float]:
    """(FLOPs, seconds in matrix products, seconds in Adam) of the trainer's steps, profiled."""
    flops = sum(step_flops(trainer, b) for b in batches)
    with profile(activities=[ProfilerActivity.CPU, *cuda_activity(trainer.device)]) as prof:
        for src, tgt, here, total, align in batches:
            trainer.train_step(src, tgt, here, total, align)
        sync(trainer.device)
    products = adam = 0.0
    on_gpu = trainer.device.type == "cuda"
    for e in prof.key_averages():  # a GPU's kernel time, else the CPU's
        seconds = (e.self_device_time_total if on_gpu else e.self_cpu_time_total) / 1e6
        if e.key in PRODUCTS:
            products += seconds
        elif "adam" in e.key.lower() and e.key.startswith("aten::"):
            adam += seconds
    return flops, products, adam


def cuda_activity(device: torch.device) -> list:
    """The profiler's CUDA activity where the step runs on a GPU."""
    return [ProfilerActivity.CUDA] if device.type == "cuda" else []


def ceiling(trainer: Trainer, batches: list, peak: float) -> dict:
    """The products' own FLOP/s in the step, and the MFU of a step of products and Adam only."""
    flops, products, adam = step_parts(trainer, batches)
    return {
        "products_gflops": flops / products / 1e9,
        "products_ms": products / len(batches) * 1e3,
        "adam_ms": adam / len(batches) * 1e3,
        "ceiling": flops / (products + adam) / peak,
    }


def measure(preset: str, precision: str, args) -> dict:
    """Medians over rounds of trainer FLOP/s, peak FLOP/s and their ratio."""
    trainer = trainer_for(preset, precision == "bf16", args.device)
    batches = list(itertools.islice(every_batch(trainer), args.steps * (args.rounds + 1)))
    warm, batches = batches[: args.steps], batches[args.steps :]
    trainer_speed(trainer, warm[:3])  # first steps: kernel selection, allocator
    rounds = []
    for r in range(args.rounds):
        chunk = batches[r * args.steps : (r + 1) * args.steps]
        tokens = int(median([b[1][:, 1:].ne(0).sum().item() for b in chunk]))
        ours, peak = trainer_speed(trainer, chunk), peak_speed(trainer, tokens)
        rounds.append((ours, peak, ours / peak))
    ours, peak, ratio = (median([x[i] for x in rounds]) for i in range(3))
    row = {
        "preset": preset,
        "precision": precision,
        "trainer_gflops": ours / 1e9,
        "peak_gflops": peak / 1e9,
        "mfu": ratio,
        "rounds": len(rounds),
    }
    if args.ceiling:
        row.update(ceiling(trainer, batches[: args.steps], peak))
    return row


def main() -> None:
    """Print one line per preset and precision, then the table for bench/README.md."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", default="d2l,small")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ceiling", action="store_true", help="also profile the step's products")
    args = p.parse_args()
    bf16 = args.device == "cuda" or cpu_has_native_bf16()
    precisions = [x for x in args.precisions.split(",") if x == "fp32" or bf16]
    rows = [measure(pr, pc, args) for pr in args.presets.split(",") for pc in precisions]
    print(f"\n{args.device}, {torch.get_num_threads()} threads, medians of {args.rounds} rounds")
    print("| preset | precision | trainer GFLOP/s | matmul peak GFLOP/s | MFU |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['preset']} | {r['precision']} | {r['trainer_gflops']:.0f} | "
            f"{r['peak_gflops']:.0f} | {r['mfu']:.1%} |"
        )
    if args.ceiling:
        head = "products in the step GFLOP/s | products ms/step | Adam ms/step | ceiling"
        print(f"\n| preset | precision | {head} |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['preset']} | {r['precision']} | {r['products_gflops']:.0f} | "
                f"{r['products_ms']:.1f} | {r['adam_ms']:.1f} | {r['ceiling']:.1%} |"
            )


if __name__ == "__main__":
    main()
