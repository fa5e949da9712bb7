"""Word level vs BPE on one training budget: held-out BLEU and <unk> share of the output.

    python bench/tokenizer_quality.py [--minutes 10] [--bpe-vocab 6000] [--precisions fp32,bf16]
                                      [--mode pinned|alone] [--seed 0] [--out DIR]

For each precision, trains the "small" preset twice with the project's own command
(``python -m core.train``), once with d2l's word vocabulary and once with BPE pieces,
each for the same number of minutes, then evaluates both best checkpoints on the same
held-out test sentences (the split is made by words, so it is the same for both):
multi-reference BLEU on words (pieces joined), and the share of output words that are
<unk>. The loss is per token (word or piece), so it is printed but not compared.

``--mode pinned`` (default) trains the two side by side, each pinned to its own CPU core
with one thread, so both get the same machine at the same time (needs 2 cores);
``--mode alone`` trains them one after the other with every core each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, budget_command, held_out_figures

from core.training.devices import cpu_has_native_bf16

TOKENIZERS = ("word", "bpe")


def train_command(out: Path, tokenizer: str, args, amp: bool, threads: int) -> list[str]:
    """The core.train command line of one run."""
    return budget_command(
        out,
        "small",
        args.minutes,
        *("--tokenizer", tokenizer, "--bpe-vocab", str(args.bpe_vocab)),
        *("--amp" if amp else "--no-amp", "--threads", str(threads), "--seed", str(args.seed)),
    )


def pinned(core: int):
    """A preexec_fn pinning the child process to one CPU core."""
    return lambda: os.sched_setaffinity(0, {core})


def train_pair(args, precision: str) -> dict[str, Path]:
    """Train word and BPE runs for one precision; returns their run directories."""
    amp = precision == "bf16"
    outs = {tok: Path(args.out) / f"{precision}-{tok}" for tok in TOKENIZERS}
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    if args.mode == "pinned":
        cores = sorted(os.sched_getaffinity(0))[:2]
        procs = [
            subprocess.Popen(
                train_command(outs[tok], tok, args, amp, 1),
                cwd=ROOT,
                preexec_fn=pinned(core),
                stdout=subprocess.DEVNULL,
            )
            for tok, core in zip(TOKENIZERS, cores)
        ]
        if any(p.wait() != 0 for p in procs):
            sys.exit("a training run failed")
    else:
        for tok in TOKENIZERS:
            subprocess.run(train_command(outs[tok], tok, args, amp, 0), cwd=ROOT, check=True)
    return outs


def evaluate(run: Path) -> dict:
    """Test-split figures of a run's best checkpoint."""
    lm, result = held_out_figures(run)
    state = lm.meta["state"]
    result.update(
        tokens_per_s=state["tokens"] / max(state["elapsed"], 1e-9),
        vocab=f"{lm.src_vocab.describe()} / {lm.tgt_vocab.describe()}",
    )
    return result


def main() -> None:
    """Train and evaluate every pair, print one table and the JSON figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--bpe-vocab", type=int, default=6000)
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--mode", choices=("pinned", "alone"), default="pinned")
    p.add_argument("--seed", type=int, default=0, help="training seed (the split stays)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "tokenizers"))
    args = p.parse_args()
    precisions = [x for x in args.precisions.split(",") if x == "fp32" or cpu_has_native_bf16()]
    figures = {}
    for precision in precisions:
        start = time.perf_counter()
        outs = train_pair(args, precision)
        print(f"{precision}: trained both in {time.perf_counter() - start:.0f} s", flush=True)
        figures[precision] = {tok: evaluate(out) for tok, out in outs.items()}
    print(f"\n{args.minutes:g} min each ({args.mode}), small preset, same test sentences")
    print(
        f"{'':6s} {'tokenizer':9s} {'test BLEU':>9s} {'<unk> out':>9s} {'steps':>6s} "
        f"{'tok/s':>6s}  vocabulary"
    )
    for precision, runs in figures.items():
        for tok, r in runs.items():
            print(
                f"{precision:6s} {tok:9s} {r['bleu']:9.1f} {r['unk_share']:9.2%} {r['steps']:6d} "
                f"{r['tokens_per_s']:6.0f}  {r['vocab']}"
            )
        gain = runs["bpe"]["bleu"] - runs["word"]["bleu"]
        print(f"{precision:6s} BPE - word: {gain:+.1f} BLEU")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
