"""Speed of "Every head over training": 20 snapshots × all heads × 100 validation sentences.

    python bench/trajectories_speed.py [--run DIR] [--sentences 100] [--repeats 3]

Without ``--run`` it first trains a run of its own (the "small" preset on fra-eng with the
word vocabulary, an evaluation every 20 steps for 400 steps: 20 snapshots, each with its
kept float16 model). Then, ``--repeats`` times, each with an empty disk cache: the first
computation the Attention page's "Measure" button and ``python -m core.trajectories`` make
(``core.alignment.head_aer.head_trajectories``: for every snapshot, the probe maps' numbers;
for every kept model, 100 validation sentences teacher-forced with every map, each cross
head's AER on the shipped gold set, and the source share by ALTI+), and the same call again
from the cache. The peer, timed in the same run: one teacher-forced pass over the same 100
validation sentences (the least any per-step measurement must do). Prints medians, the
per-step cost, the ratio to the peer and the goal (first time under 60 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, corpus_path, median

from core.alignment.head_aer import head_trajectories
from core.attention.trajectories import _Validation
from core.attention.trajectory_numbers import validation_means
from core.model.opened import open_model
from core.runs.run_dir import RunDir

GOAL_S = 60.0


def make_run(out: Path) -> Path:
    """Train the bench's run (20 evaluations, a model kept at each) with the project's command."""
    argv = [sys.executable, "-m", "core.train", "--data", "fra-eng", "--preset", "small"]
    argv += ["--tokenizer", "word", "--max-steps", "400", "--time-budget", "0"]
    argv += ["--eval-every", "20", "--eval-sentences", "20", "--out", str(out), "--no-progress"]
    subprocess.run(argv, check=True, cwd=ROOT)
    return out


def first_time(run: Path, sentences: int, cache: Path) -> tuple[float, object]:
    """Seconds of the computation with an empty cache in ``cache``, and its result."""
    os.environ["ATTENTION_STUDIO_RUNS"] = str(cache)
    start = time.perf_counter()
    result = head_trajectories(run, None, sentences, "measure")
    return time.perf_counter() - start, result


def peer_seconds(run: Path, sentences: int) -> float:
    """One teacher-forced pass with every map over the validation sentences (last model)."""
    rd = RunDir(run)
    lm = open_model(rd.snapshot_model(rd.snapshot_model_steps()[-1]))
    rows = _Validation(sentences, None).rows(lm)
    start = time.perf_counter()
    validation_means(lm, rows)
    return time.perf_counter() - start


def main() -> None:
    """Print the medians and the goal."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="a run directory with kept snapshot models (default: train one)")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    os.environ["FRA_ENG_ZIP"] = corpus_path()
    work = Path(tempfile.mkdtemp(prefix="trajectories-speed-"))
    run = Path(args.run) if args.run else make_run(work / "run")
    rd = RunDir(run)
    snaps, models = rd.snapshot_steps(), rd.snapshot_model_steps()
    print(f"{len(snaps)} snapshots, {len(models)} kept models, {args.sentences} sentences")
    firsts, cached, peers = [], [], []
    for i in range(args.repeats):
        seconds, result = first_time(run, args.sentences, work / f"cache-{i}")
        heads = len(result.frame("probes")) // max(len(result.steps), 1)
        again = time.perf_counter()
        head_trajectories(run, None, args.sentences, "cached")
        cached.append(time.perf_counter() - again)
        firsts.append(seconds)
        peers.append(peer_seconds(run, args.sentences))
        print(
            f"repeat {i + 1}: first {seconds:.1f} s ({heads} heads, {result.computed} steps "
            f"measured, notes {len(result.notes)}), cached {cached[-1]:.2f} s, "
            f"peer {peers[-1] * 1000:.0f} ms",
            flush=True,
        )
    first, peer = median(firsts), median(peers)
    print(
        f"first time: median {first:.1f} s (runs {min(firsts):.1f}-{max(firsts):.1f}); "
        f"goal < {GOAL_S:.0f} s: {'ok' if first < GOAL_S else 'OVER'}"
    )
    print(
        f"per kept model: {first / max(len(models), 1):.2f} s; "
        f"{first / peer / max(len(models), 1):.1f}× the peer's single pass"
    )
    print(f"from the cache: median {median(cached):.2f} s")


if __name__ == "__main__":
    main()
