"""Quality: train the default CPU configuration for N minutes, then test BLEU and speed.

    python bench/quality.py [--minutes 10] [--preset small] [--out bench/results/quality]

Trains with the project's own command (``python -m core.train``) on fra-eng minus its
held-out validation and test splits, then evaluates the best checkpoint on the test split
(multi-reference BLEU, loss, sentences/s of batched greedy translation).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time

from common import ROOT, budget_command, held_out_figures


def main() -> None:
    """Train, evaluate, print JSON figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--preset", default="small")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "quality"))
    p.add_argument("extra", nargs="*", help="more flags for core.train (after --)")
    args = p.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    cmd = budget_command(args.out, args.preset, args.minutes, *args.extra)
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True)
    wall = time.perf_counter() - start
    lm, result = held_out_figures(args.out)
    result.update(
        minutes_training=args.minutes,
        wall_seconds=round(wall, 1),
        parameters=lm.model.num_parameters(),
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
