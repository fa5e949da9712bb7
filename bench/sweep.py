"""The best model ten minutes can buy: train settings for one fixed budget, then test BLEU.

    python bench/sweep.py [--minutes 10] [--mode pinned|alone] [--only NAME,NAME]
                          [--seed 0] [--out DIR] [--list]

    # bench/README.md's table: --only was,lr2e-3,tokens2600,d384,3+3,ffn512,bpe8000,dropout0
    # then --only d0-tokens2600,d0-lr2e-3, then --only linear,linear-lr2e-3,linear-lr3e-3,
    # linear-tokens2600; and --mode alone --only was,dropout0,small (--seed 0 and 1)

Each setting is the "small" preset with a few flags changed (``SETTINGS`` below), trained
with the project's own command (``python -m core.train``) for the same number of minutes on
fra-eng minus its held-out splits, then its best checkpoint is scored on the held-out test
split (multi-reference BLEU; ``max_len`` is never changed, so every setting meets the same
test sentences). Printed per setting: test BLEU, validation BLEU, steps, target tokens/s,
parameters, the training process's peak resident memory; one JSON line each is appended
to ``DIR/results.jsonl`` as it comes, then a table sorted by BLEU, with the Pareto front
(no other setting both smaller and better) marked.

``--mode pinned`` (default) trains two settings side by side, each pinned to its own core
with one thread: twice the settings in the same hours, each with half the machine, so the
ranking is that of a smaller budget. ``--mode alone`` trains one at a time with every core,
as a user does: the figures a preset is chosen by.
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

OLD_SCHEDULE = ["--schedule", "inverse_sqrt", "--lr", "0.001"]  # before the third round
WAS = ["--dropout", "0.1", *OLD_SCHEDULE]  # the "small" preset before this sweep (see --list)
SETTINGS: dict[str, list[str]] = {  # name -> flags over the "small" preset (later flags win)
    "small": [],  # the preset as it is now (the third round's winner)
    "was": WAS,  # the preset as it was on 25 November 2026 before the sweep
    # the first round: one change each to the preset as it was
    "lr2e-3": [*WAS, "--lr", "0.002"],
    "ffn512": [*WAS, "--d-ff", "512"],
    "3+3": [*WAS, "--num-encoder-layers", "3", "--num-decoder-layers", "3"],
    "d384": [*WAS, "--d-model", "384", "--num-heads", "6", "--d-ff", "1536"],
    "tokens2600": [*WAS, "--batch-tokens", "2600", "--lr", "0.0014"],
    "bpe8000": [*WAS, "--bpe-vocab", "8000", "--max-vocab", "8000"],
    "dropout0": OLD_SCHEDULE,  # the first round's winner: dropout 0 (the preset's since)
    # the second round: no dropout with the first round's runners-up
    "d0-tokens2600": [*OLD_SCHEDULE, "--batch-tokens", "2600", "--lr", "0.0014"],
    "d0-lr2e-3": [*OLD_SCHEDULE, "--lr", "0.002"],
    # not run (25 November 2026)
    "d0-ffn512": [*OLD_SCHEDULE, "--d-ff", "512"],
    "d0-3+3": [*OLD_SCHEDULE, "--num-encoder-layers", "3", "--num-decoder-layers", "3"],
    "d0-bpe4000": [*OLD_SCHEDULE, "--bpe-vocab", "4000", "--max-vocab", "4000"],
    # the third round: no dropout, the learning rate decaying to zero at the end of the budget
    "linear": ["--lr", "0.001"],
    "linear-lr2e-3": [],  # the winner: the preset now
    "linear-lr3e-3": ["--lr", "0.003"],
    "linear-tokens2600": ["--batch-tokens", "2600"],
}
PRESET_AS_SWEPT = {  # the "small" preset's settings the sweep started from (for --list)
    "model": "d_model 256, 4 heads, 2+2 blocks, d_ff 1024, dropout 0.1 (now 0)",
    "train": "batch 128 pairs, lr 1e-3 (now 2e-3), inverse_sqrt (now linear), warm-up 400, "
    "label smoothing 0.1",
    "data": "BPE 6000, max_len 12 words",
}


def pinned(core: int):
    """A preexec_fn pinning the child process to one CPU core."""
    return lambda: os.sched_setaffinity(0, {core})


def command(name: str, out: Path, minutes: float, threads: int, seed: int = 0) -> list[str]:
    """The core.train command of one setting."""
    extra = [*SETTINGS[name], "--threads", str(threads), "--seed", str(seed)]
    return budget_command(out, "small", minutes, *extra)


def train(names: list[str], args) -> dict[str, float]:
    """Train ``names`` at once (pinned: one core each); -> peak RSS MB of each process."""
    cores = sorted(os.sched_getaffinity(0))
    procs = {}
    for i, name in enumerate(names):
        out = Path(args.out) / name
        shutil.rmtree(out, ignore_errors=True)
        pin = args.mode == "pinned"
        procs[name] = subprocess.Popen(
            command(name, out, args.minutes, 1 if pin else 0, args.seed),
            cwd=ROOT,
            preexec_fn=pinned(cores[i % len(cores)]) if pin else None,
            stdout=subprocess.DEVNULL,
        )
    peak = {}
    for name, proc in procs.items():
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            sys.exit(f"{name}: training failed ({proc.returncode})")
        peak[name] = usage.ru_maxrss / 1024  # KB -> MB on Linux
    return peak


def score(name: str, args, peak_mb: float) -> dict:
    """Test-split figures of one trained setting."""
    run = Path(args.out) / name
    lm, result = held_out_figures(run)
    state = lm.meta["state"]
    return {
        "setting": name,
        "flags": " ".join(SETTINGS[name]),
        "mode": args.mode,
        "seed": args.seed,
        "minutes": args.minutes,
        "test_bleu": round(result["bleu"], 2),
        "val_bleu": round(result["val_bleu"], 2),
        "steps": result["steps"],
        "tokens_per_s": round(state["tokens"] / max(state["elapsed"], 1e-9)),
        "parameters": lm.model.num_parameters(),
        "peak_rss_mb": round(peak_mb),
    }


def pareto(rows: list[dict]) -> set[str]:
    """Settings no other beats on both test BLEU (higher) and parameters (fewer)."""
    return {
        r["setting"]
        for r in rows
        if not any(
            o["test_bleu"] >= r["test_bleu"]
            and o["parameters"] <= r["parameters"]
            and (o["test_bleu"], o["parameters"]) != (r["test_bleu"], r["parameters"])
            for o in rows
        )
    }


def table(rows: list[dict]) -> None:
    """The results, best first; * marks the Pareto front."""
    front = pareto(rows)
    print(
        f"\n{'setting':12s} {'test':>5s} {'val':>5s} {'steps':>6s} {'tok/s':>6s} "
        f"{'params':>7s} {'RSS MB':>6s}  flags"
    )
    for r in sorted(rows, key=lambda r: -r["test_bleu"]):
        mark = "*" if r["setting"] in front else " "
        print(
            f"{r['setting']:11s}{mark} {r['test_bleu']:5.1f} {r['val_bleu']:5.1f} "
            f"{r['steps']:6d} {r['tokens_per_s']:6d} {r['parameters'] / 1e6:6.1f}M "
            f"{r['peak_rss_mb']:6d}  {r['flags']}"
        )


def main() -> None:
    """Train and score each setting; print JSON lines and the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--mode", choices=("pinned", "alone"), default="pinned")
    p.add_argument("--seed", type=int, default=0, help="the runs' seed (batches, weights, masks)")
    p.add_argument("--only", default="", help="comma-separated setting names (default: all)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "sweep"))
    p.add_argument("--list", action="store_true", help="print the settings and exit")
    args = p.parse_args()
    if args.list:
        print(json.dumps({"preset": PRESET_AS_SWEPT, "settings": SETTINGS}, indent=2))
        return
    names = [n for n in args.only.split(",") if n] or list(SETTINGS)
    if unknown := [n for n in names if n not in SETTINGS]:
        sys.exit(f"unknown settings: {', '.join(unknown)} (see --list)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    width = 2 if args.mode == "pinned" else 1
    rows = []
    for i in range(0, len(names), width):
        group = names[i : i + width]
        start = time.perf_counter()
        peaks = train(group, args)
        print(f"trained {', '.join(group)} in {time.perf_counter() - start:.0f} s", flush=True)
        for name in group:
            rows.append(score(name, args, peaks[name]))
            print(json.dumps(rows[-1]), flush=True)
            with open(Path(args.out) / "results.jsonl", "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    table(rows)


if __name__ == "__main__":
    main()
