"""Does ``torch.compile`` pay inside a ten-minute budget? Compile cost, cache, and speed.

    python bench/compile_cost.py [--preset small] [--precision bf16|fp32] [--steps 60]

Runs the trainer's own step (``Trainer.train_step``, the preset's real length-bucketed
fra-eng batches) in fresh child processes, each on the same batches:

- ``eager``: the step as the trainer runs it today;
- ``compiled, cold cache``: ``model.loss_terms`` through ``torch.compile`` (Inductor, the
  default automatic dynamic shapes, so the bucket lengths cost one static and one dynamic
  compile) with an empty on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, FX-graph and autograd
  caches on): what a user's first run on a machine would pay;
- ``compiled, warm cache``: the same again in a new process with that cache filled: what
  every later run pays.

For each: seconds to the end of the first step, seconds for the first ``--steps`` steps
(compiles included), target tokens/s over the next ``--steps`` steps (steady state), and the
first step's loss (equal within bf16/fp32 rounding, or the compiled step is not the same
computation). Then the verdict: minutes of a ten-minute budget the compile costs, and the
steady speed-up. Needs fra-eng.zip and a C++ compiler (Inductor's CPU code).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, corpus_path

BUDGET_S = 600.0


def child(mode: str, preset: str, precision: str, steps: int) -> dict:
    """One measurement in this process (called with --child)."""
    import torch
    from mfu import every_batch, trainer_for

    trainer = trainer_for(preset, precision == "bf16", "cpu")
    batches = list(itertools.islice(every_batch(trainer), 2 * steps))
    if mode != "eager":
        trainer.objective = torch.compile(trainer.model.loss_terms)
    start = time.perf_counter()
    losses, marks = [], []
    for src, tgt, here, total, align in batches:
        out = trainer.train_step(src, tgt, here, total, align)
        losses.append(out["loss"])
        marks.append(time.perf_counter() - start)
    tokens = sum(int(b[1][:, 1:].ne(0).sum()) for b in batches[steps:])
    steady = marks[-1] - marks[steps - 1]
    return {
        "mode": mode,
        "first_step_s": marks[0],
        "first_steps_s": marks[steps - 1],
        "steady_tokens_per_s": tokens / steady,
        "first_loss": losses[0],
        "losses": losses[:5],
    }


def run_child(mode: str, args, cache: Path) -> dict:
    """A fresh process measuring ``mode`` (the cache directory set in its environment)."""
    env = os.environ | {
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "FRA_ENG_ZIP": corpus_path(),
    }
    argv = [sys.executable, __file__, "--child", mode, "--preset", args.preset]
    argv += ["--precision", args.precision, "--steps", str(args.steps)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT / "bench")
    if done.returncode:
        sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Eager, compiled with a cold cache, compiled with a warm one; then the verdict."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.preset, args.precision, args.steps)))
        return
    cache = Path(tempfile.mkdtemp(prefix="inductor-cache-"))
    rows = {}
    for mode in ("eager", "compiled-cold", "compiled-warm"):
        rows[mode] = r = run_child(mode, args, cache)
        print(
            f"{mode:14s} first step {r['first_step_s']:6.1f} s, first {args.steps} steps "
            f"{r['first_steps_s']:6.1f} s, then {r['steady_tokens_per_s']:7.0f} tokens/s, "
            f"first loss {r['first_loss']:.5f}",
            flush=True,
        )
    eager = rows["eager"]
    for mode in ("compiled-cold", "compiled-warm"):
        r = rows[mode]
        speedup = r["steady_tokens_per_s"] / eager["steady_tokens_per_s"]
        paid = max(r["first_steps_s"] - eager["first_steps_s"], 0.0)  # compiling, mostly
        gain = max(BUDGET_S - paid, 0.0) * speedup / BUDGET_S  # tokens in the budget vs eager
        print(
            f"{mode}: steady {speedup:.2f}x eager; the first {args.steps} steps cost {paid:.0f} s "
            f"more; a {BUDGET_S / 60:.0f}-minute budget trains {gain:.2f}x eager's tokens"
        )
    gap = abs(rows["compiled-cold"]["first_loss"] - eager["first_loss"])
    print(f"first-step loss |compiled - eager|: {gap:.2e}")


if __name__ == "__main__":
    main()
