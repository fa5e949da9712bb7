"""Alignment-supervised training (Garg et al. 2019) against plain training, on one budget.

    python bench/align_supervision.py [--steps 3500 | --minutes 10]
        [--sources eflomal,teacher] [--eflomal PATH] [--teacher checkpoints/fra-eng-small.pt]
        [--weight 0.05] [--layer 0] [--head 0] [--out DIR]

Trains the "small" preset with the project's own command (``python -m core.train``) on one
budget: once plainly, and once per source with ``--align-weight`` on one cross-attention
head, toward alignments of the training pairs from

- ``eflomal`` (default): the statistical aligner run here as an external program (GPLv3,
  never imported; ``pip install eflomal`` in any environment, pass ``--eflomal``), both
  directions symmetrised with grow-diag-final-and, handed to the trainer as files
  (``--align-links``/``--align-pairs``);
- ``teacher``: a checkpoint's best attention reader (``--align-teacher``), as Garg et al.
  do without a statistical aligner.

Then, for both runs' best checkpoints: the AER of the supervised head and of the best
reader on the shipped gold set (``core/alignment/gold``), and multi-reference BLEU on the
held-out test split. The runs train side by side, one thread each. The budget is
``--steps`` optimiser steps (default 3,500: what the preset trains in ten minutes on this
2-core CPU when nothing else runs, README), the same for every run whatever else the machine
is doing; ``--minutes`` gives a wall-clock budget instead (fair only on a quiet machine).

Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, budget_command, corpus_path, held_out_figures

from core.alignment.aer import grow_diag_final_and
from core.alignment.eflomal_teacher import run_eflomal
from core.alignment.extract import Reader
from core.alignment.gold import studio_gold
from core.alignment.grid import alignment_grid
from core.corpus.config import DataConfig
from core.corpus.splits import load_splits
from core.training.presets import PRESETS


def eflomal_files(program: str, folder: Path) -> list[str]:
    """Align the small preset's training pairs with eflomal; its files as core.train flags."""
    data = DataConfig(**{**PRESETS["small"]["data"], "source": corpus_path()})
    pairs = load_splits(data).train.pairs
    lines = [f"{' '.join(s)} ||| {' '.join(t)}" for s, t in pairs]
    start = time.perf_counter()
    fwd, rev = run_eflomal(program, pairs)
    links = [grow_diag_final_and(a, b, len(s), len(t)) for a, b, (s, t) in zip(fwd, rev, pairs)]
    (folder / "train.src-tgt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "train.links").write_text(
        "\n".join(" ".join(f"{i}-{j}" for i, j in sorted(k)) for k in links) + "\n",
        encoding="utf-8",
    )
    print(f"eflomal aligned {len(pairs):,} training pairs in {time.perf_counter() - start:.0f} s")
    return [
        "--align-links",
        str(folder / "train.links"),
        "--align-pairs",
        str(folder / "train.src-tgt"),
    ]


def train_all(args, supervision: dict[str, list[str]]) -> dict[str, Path]:
    """Train the plain run and one supervised run per source, side by side; their folders."""
    outs = {"plain": Path(args.out) / "plain"}
    flags = {"plain": []}
    for source, files in supervision.items():
        outs[source] = Path(args.out) / f"supervised-{source}"
        flags[source] = [
            *files,
            *("--align-weight", str(args.weight)),
            *("--align-layer", str(args.layer), "--align-head", str(args.head)),
        ]
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    budget = ["--max-steps", str(args.steps), "--time-budget", "0"] if args.steps else []
    procs = [
        subprocess.Popen(
            budget_command(out, "small", args.minutes, "--threads", "1", *flags[k], *budget),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        for k, out in outs.items()
    ]
    if any(p.wait() != 0 for p in procs):
        sys.exit("a training run failed")
    return outs


def figures(run: Path, layer: int, head: int) -> dict:
    """Test BLEU, and AER of the supervised head and of the best reader on the gold set."""
    lm, result = held_out_figures(run)
    pairs, gold = studio_gold()
    grid = alignment_grid(lm, pairs, gold)
    head_row = next(r for r in grid.rows if r.reader() == Reader(layer, head, "awo"))
    best = grid.best
    return {
        "test_bleu": round(result["bleu"], 2),
        "steps": result["steps"],
        "head_aer": round(head_row.aer, 4),
        "best_aer": round(best.aer, 4),
        "best_reader": f"layer {best.layer} head {best.head} {best.mode}",
        "tokens_per_s": round(lm.meta["state"]["tokens"] / max(lm.meta["state"]["elapsed"], 1e-9)),
    }


def main() -> None:
    """Train every run, print one table and the JSON figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3500, help="0: use --minutes")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--sources", default="eflomal,teacher")
    p.add_argument("--eflomal", default=shutil.which("eflomal-align"))
    p.add_argument("--teacher", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--weight", type=float, default=0.05)
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--head", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "align_supervision"))
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    supervision = {}
    for source in args.sources.split(","):
        if source == "eflomal":
            if not args.eflomal:
                sys.exit("eflomal-align not found: pip install eflomal (GPLv3), pass --eflomal")
            supervision["eflomal"] = eflomal_files(args.eflomal, Path(args.out))
        elif source == "teacher":
            supervision["teacher"] = ["--align-teacher", args.teacher]
    start = time.perf_counter()
    outs = train_all(args, supervision)
    print(f"trained {len(outs)} runs in {time.perf_counter() - start:.0f} s", flush=True)
    results = {k: figures(out, args.layer, args.head) for k, out in outs.items()}
    budget = f"{args.steps:,} steps" if args.steps else f"{args.minutes:g} min"
    print(
        f"\n{budget} each, small preset, supervised head: layer {args.layer} head {args.head}, "
        f"weight {args.weight:g}"
    )
    print(
        f"{'run':11s} {'test BLEU':>9s} {'head AER':>9s} {'best AER':>9s} {'steps':>6s}"
        "  best reader"
    )
    for k, r in results.items():
        print(
            f"{k:11s} {r['test_bleu']:9.1f} {r['head_aer']:9.3f} {r['best_aer']:9.3f} "
            f"{r['steps']:6d}  {r['best_reader']}"
        )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
