"""Distributed training throughput: tokens/s and peak memory with 1 and N processes.

    python bench/distributed_throughput.py [--processes 1,2] [--batch 64] [--steps 30]
    python bench/distributed_throughput.py --device cuda --processes 1,2,4,8 --threads 0

Each configuration is launched like the app launches a run: ``python -m
torch.distributed.run --standalone --nproc-per-node N`` with this script as the worker
(one plain process for N = 1). Every process trains with the same per-process batch (so N
processes take N times the pairs a step) through core.training.loop's Trainer: DDP, the
token-weighted loss and the per-step stop agreement included; no evaluation. Printed:
target tokens/s summed over processes (median of interleaved repeats), the ratio to one
process, and each process's peak RSS. On a CPU, one process using as many threads as the N
processes have cores together is measured too (``1 × N threads``): the fair comparison
on a machine whose cores are all busy either way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch
from common import ROOT, corpus_path, median

from core.corpus.config import DataConfig
from core.corpus.splits import load_corpus
from core.model.config import ModelConfig
from core.model.transformer import Transformer
from core.training import distributed
from core.training.config import TrainConfig
from core.training.loop import Trainer

MODEL = dict(  # the "small" preset's model
    d_model=256, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=1024, dropout=0.1
)


def worker(args) -> None:
    """One process of a configuration: train --warmup + --steps steps, rank 0 prints JSON."""
    world = distributed.world_from_env()
    distributed.start(world)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = DataConfig(source=corpus_path(), max_len=12, max_vocab=6000, max_pairs=args.pairs)
    with distributed.local_first(world):
        corpus = load_corpus(data)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **MODEL))
    cfg = TrainConfig(batch_size=args.batch, device=args.device, max_steps=10**9, probes=[])
    trainer = Trainer(model, corpus, cfg, world=world)
    tokens, seconds = timed_steps(trainer, args.warmup, args.steps)
    rss = distributed.gather(world, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10)
    if world.is_main:
        print(json.dumps({"tokens_per_s": tokens / seconds, "peak_rss_mb": rss}), flush=True)
    distributed.finish(world)


def timed_steps(trainer: Trainer, warmup: int, steps: int) -> tuple[int, float]:
    """(target tokens of all processes, rank 0's seconds) of ``steps`` steps after ``warmup``."""
    tokens, start = 0, 0.0
    for i, (src, tgt, here, total, _) in enumerate(trainer.epoch_batches()):
        if i == warmup:
            distributed.barrier(trainer.world)
            start = time.perf_counter()
        out = trainer.train_step(src, tgt, here, total)
        trainer.agree()
        tokens += out["tokens"] if i >= warmup else 0
        if i + 1 == warmup + steps:
            break
    return tokens, time.perf_counter() - start


def launch(processes: int, threads: int, args) -> dict:
    """Run one configuration as its own processes; the JSON rank 0 printed."""
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    flags = [
        *("--worker", "--threads", str(threads), "--batch", str(args.batch)),
        *("--steps", str(args.steps), "--warmup", str(args.warmup)),
        *("--pairs", str(args.pairs), "--device", args.device),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads or os.cpu_count())}
    out = subprocess.run(
        [*launcher, __file__, *flags], cwd=ROOT, env=env, capture_output=True, text=True
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        sys.exit(f"{processes} process(es) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def configurations(args) -> list[tuple[str, int, int]]:
    """(label, processes, threads per process) to measure, interleaved."""
    counts = [int(n) for n in args.processes.split(",")]
    configs = [(f"{n} process{'es' if n > 1 else ''}", n, args.threads) for n in counts]
    if args.device == "cpu" and args.threads:
        configs += [
            (f"1 process × {n * args.threads} threads", 1, n * args.threads)
            for n in counts
            if n > 1
        ]
    return configs


def main() -> None:
    """Measure every configuration --repeats times, interleaved, and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--processes", default="1,2", help="process counts to compare")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (0: all)")
    p.add_argument("--batch", type=int, default=64, help="sentence pairs per process and step")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--pairs", type=int, default=40000, help="fra-eng pairs read")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args()
    if args.worker:
        return worker(args)
    configs = configurations(args)
    results: dict[str, list[dict]] = {label: [] for label, _, _ in configs}
    for _ in range(args.repeats):
        for label, n, threads in configs:
            results[label].append(launch(n, threads, args))
            print(f"  {label}: {results[label][-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
    report(results, args)


def report(results: dict[str, list[dict]], args) -> None:
    """Median tokens/s, the ratio to the first configuration, peak RSS per process."""
    base = median([r["tokens_per_s"] for r in next(iter(results.values()))])
    cores = os.cpu_count()
    print(f"\n{args.device}, batch {args.batch} per process, {args.steps} steps, {cores} cores")
    for label, runs in results.items():
        speed = median([r["tokens_per_s"] for r in runs])
        rss = ", ".join(f"{m:,.0f}" for m in runs[-1]["peak_rss_mb"])
        print(
            f"{label:>26}: {speed:8,.0f} tokens/s  ×{speed / base:.2f}  peak RSS MB/process: {rss}"
        )
    print(
        "\nGPUs: python bench/distributed_throughput.py --device cuda --threads 0 "
        f"--processes 1,2,4,8 --batch {args.batch} (one process per GPU; NCCL)"
    )


if __name__ == "__main__":
    main()
