"""What the circuit scores cost: the induction preset's training speed with its heads scored at
every evaluation (as the Train page draws them) against the same run without them.

    python bench/circuit_cost.py [--repeats 5] [--steps 300]

Trains the "induction" preset ``--steps`` steps in this process, alternately with its circuit
scores and without them (``core.training.evaluation.circuit_scores`` replaced by a function
returning nothing, for the measurement only), the order of each pair swapped from pair to pair (the
machine is shared: interleaved, a slow spell hits both), and prints per run the wall and CPU
seconds of ``Trainer.run`` (steps and evaluations: the evaluations are what the scores add to)
and the seconds spent scoring, then the medians per mode, the ratio of speeds (plain / scored
seconds; 1.0 is free) in wall and CPU time, and the median share of a scored run's wall time
spent scoring (the steadiest figure on a shared machine: both parts of one run). No corpus
needed: the induction task makes its own data.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, median

sys.path.insert(0, str(ROOT))

from core import train as train_command  # noqa: E402
from core.training import evaluation, loop  # noqa: E402


def train_once(out: Path, steps: int, scored: bool) -> dict:
    """One run of the preset: wall seconds of Trainer.run and of its circuit scores."""
    spent = {"run": 0.0, "cpu": 0.0, "scores": 0.0}
    real_scores, real_run = evaluation.circuit_scores, loop.Trainer.run

    def timed_scores(model, n, k, *args, **kwargs):
        t0 = time.perf_counter()
        result = real_scores(model, n, k, *args, **kwargs) if scored else {}
        spent["scores"] += time.perf_counter() - t0
        return result

    def timed_run(self):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return real_run(self)
        finally:
            spent["run"] += time.perf_counter() - t0
            spent["cpu"] += time.process_time() - c0

    evaluation.circuit_scores, loop.Trainer.run = timed_scores, timed_run
    try:
        argv = ["--out", str(out), "--preset", "induction", "--max-steps", str(steps)]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = train_command.main(argv)
    finally:
        evaluation.circuit_scores, loop.Trainer.run = real_scores, real_run
    if code:
        sys.exit(f"training failed (exit {code})")
    seconds, scoring = round(spent["run"], 3), round(spent["scores"], 3)
    return {
        "scored": scored,
        "seconds": seconds,
        "cpu_s": round(spent["cpu"], 3),
        "scoring": scoring,
    }


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    runs: dict[bool, list[dict]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for scored in (True, False) if i % 2 == 0 else (False, True):
                r = train_once(Path(tmp) / f"run-{i}-{int(scored)}", args.steps, scored)
                runs[scored].append(r)
                print(json.dumps(r), flush=True)
    on, off = (median([r["seconds"] for r in runs[s]]) for s in (True, False))
    cpu_on, cpu_off = (median([r["cpu_s"] for r in runs[s]]) for s in (True, False))
    share = median([r["scoring"] / r["seconds"] for r in runs[True]])
    print(json.dumps({
        "steps": args.steps, "repeats": args.repeats, "scored_s": on, "plain_s": off,
        "speed_ratio": round(off / on, 3), "cpu_speed_ratio": round(cpu_off / cpu_on, 3),
        "scoring_share": round(share, 4),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
