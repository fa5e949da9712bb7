"""A trainer beside a busy machine: tokens/s quiet, then with a spin loop started mid-run.

    python bench/busy_machine.py [--repeats 3] [--entry command|app] [--preset small]
        [--quiet-s 20] [--busy-s 30] [--modes share,fixed,passive] [--env KEY=VALUE ...]

Each run trains the preset on fra-eng on torch's default threads (two on a 2-core machine):
``--warmup-s`` seconds of training first, then ``--quiet-s`` seconds measured quiet, then a
second process starts a spin loop (``python -c "while True: pass"``, one core kept busy) and
``--busy-s`` seconds are measured beside it, the trainer's adaptation included. The trainer
is started as a person starts it (``--entry command``: ``python -m core.train``) or as the
Train page does (``--entry app``: ``core.runs.jobs.start_run``, ``--request``, niced).
Modes, interleaved: ``share`` the trainer as it is (``core.runs.cpu_share``: it measures the
machine during the run and trains on one thread fewer while a core is taken; its threads wait
passively where ``ATTENTION_STUDIO_PASSIVE_WAITS=1``), ``fixed`` the old behaviour
(``ATTENTION_STUDIO_TRAINER_SHARE=0``: OpenMP's spinning threads, as many as it started
with, whatever happens), ``passive`` the old one with passive waits alone
(``OMP_WAIT_POLICY=PASSIVE``). Prints each run's quiet and busy target tokens per wall second
(from the run's metrics records), their ratio, what the trainer said about its threads, and per
mode the medians. Needs fra-eng.zip ($FRA_ENG_ZIP or ../shared/data/fra-eng.zip).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, corpus_path, median

sys.path.insert(0, str(ROOT))

from core.cpu_load import SHARE_ENV, WAIT_POLICY_ENV  # noqa: E402
from core.runs import jobs  # noqa: E402
from core.runs.run_dir import RunDir  # noqa: E402

MODES = {  # each mode's environment
    "share": {SHARE_ENV: "1"},
    "fixed": {SHARE_ENV: "0"},
    "passive": {SHARE_ENV: "0", WAIT_POLICY_ENV: "PASSIVE"},
}
SPIN = [sys.executable, "-c", "while True: pass"]  # one core kept busy


def train_records(rd: RunDir) -> list[dict]:
    """The run's training records so far."""
    if not rd.metrics.is_file():
        return []
    return [r for r in rd.read_metrics() if r.get("record") == "train"]


def rate_between(records: list[dict], start: float, end: float) -> float:
    """Target tokens per wall second between wall times ``start`` and ``end``, from the
    records logged then (each record's tokens: its rate times the training seconds it
    covers); a run too slow to log twice in the window is read from the records around it."""
    inside = [i for i, r in enumerate(records) if start <= r["time"] <= end and i > 0]
    if len(inside) < 2:  # widened to the records around the window, where there are some
        before = [i for i, r in enumerate(records) if r["time"] < start]
        after = [i for i, r in enumerate(records) if r["time"] > end]
        inside = before[-1:] + inside + after[:1]
    if len(inside) < 2:
        return float("nan")
    tokens = sum(
        (records[i].get("tokens_per_s") or 0.0)
        * (records[i]["elapsed"] - records[i - 1]["elapsed"])
        for i in inside[1:]
    )
    return tokens / (records[inside[-1]]["time"] - records[inside[0]]["time"])


def start_trainer(entry: str, runs: Path, args, env: dict) -> tuple[RunDir, subprocess.Popen]:
    """Start one run of the preset (as a person or as the Train page does); its directory."""
    budget = args.warmup_s + args.quiet_s + args.busy_s + 60.0  # stopped by hand before
    train = ["--time-budget", str(budget), "--log-every", str(args.log_every)]
    if entry == "app":
        settings = {
            "data": {"source": "fra-eng"},
            "train": {"time_budget": budget, "epochs": 0, "log_every": args.log_every},
        }
        settings["train"]["eval_every"] = 10**6
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)  # what the server's environment would hold
        try:
            run_id = jobs.start_run(args.preset, settings)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return RunDir(runs / run_id), None
    rd = RunDir(runs / f"command-{time.time_ns()}")
    argv = [sys.executable, "-m", "core.train", "--out", str(rd.path), "--preset", args.preset]
    argv += ["--data", os.environ["FRA_ENG_ZIP"], "--eval-every", str(10**6), "--no-progress"]
    log = open(runs / f"{rd.path.name}.log", "w")
    proc = subprocess.Popen(argv + train, cwd=ROOT, env=env, stdout=log, stderr=log)
    return rd, proc


def stop_trainer(rd: RunDir, proc: subprocess.Popen | None) -> str:
    """Stop the run; what it said about its threads."""
    if proc is None:
        jobs.stop_run(rd.path.name, wait=60.0)
        log = rd.path / "train.log"
    else:
        proc.terminate()
        proc.wait(timeout=60)
        log = rd.path.with_name(f"{rd.path.name}.log")
    text = log.read_text() if log.is_file() else ""
    rd.path.with_name(f"{rd.path.name}.log").write_text(text)  # kept: the run directory goes
    said = [line for line in text.splitlines() if "Sharing the CPU" in line]
    return "; ".join(s.split(": ", 1)[-1].split(" (")[0] for s in said) or "no change"


def wait_for_training(rd: RunDir, proc, seconds: float = 600.0) -> float:
    """Wait until the run logs its first training record; the wall time then."""
    end = time.time() + seconds
    while not train_records(rd):
        if time.time() > end or (proc is not None and proc.poll() is not None):
            sys.exit(f"{rd.path} did not start training")
        time.sleep(0.5)
    return time.time()


def one_run(mode: str, runs: Path, args) -> tuple[float, float, str]:
    """Quiet and busy tokens/s of one run in ``mode``, and what the trainer said."""
    env = {k: v for k, v in os.environ.items() if k not in (SHARE_ENV, WAIT_POLICY_ENV)}
    env.update({**MODES[mode], **dict(e.split("=", 1) for e in args.env)})
    rd, proc = start_trainer(args.entry, runs, args, env)
    spin = None
    try:
        began = wait_for_training(rd, proc)
        time.sleep(args.warmup_s + args.quiet_s)
        spin_at = time.time()
        spin = subprocess.Popen(SPIN)
        time.sleep(args.busy_s)
        end = time.time()
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()
        said = stop_trainer(rd, proc)
    records = train_records(rd)
    shutil.rmtree(rd.path, ignore_errors=True)  # its checkpoints: 100 MB a run for "small"
    quiet = rate_between(records, began + args.warmup_s, spin_at)
    busy = rate_between(records, spin_at, end)
    return quiet, busy, said


def main() -> None:
    """Interleave the modes' runs; print each run and the medians per mode."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--entry", choices=("command", "app"), default="command")
    p.add_argument("--preset", default="small")
    p.add_argument("--modes", default="share,fixed", help=f"comma-separated: {', '.join(MODES)}")
    p.add_argument("--warmup-s", type=float, default=10.0)
    p.add_argument("--quiet-s", type=float, default=20.0)
    p.add_argument("--busy-s", type=float, default=30.0)
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the trainer")
    args = p.parse_args()
    os.environ["FRA_ENG_ZIP"] = corpus_path()
    runs = Path(tempfile.mkdtemp(prefix="busy-machine-"))
    os.environ["ATTENTION_STUDIO_RUNS"] = str(runs)
    modes = args.modes.split(",")
    figures = {m: [] for m in modes}
    for i in range(args.repeats):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            quiet, busy, said = one_run(mode, runs, args)
            figures[mode].append((quiet, busy, busy / quiet))
            print(
                f"run {i + 1} {mode:6s}: quiet {quiet:7.0f} tokens/s, busy {busy:7.0f} "
                f"tokens/s, busy/quiet {busy / quiet:.2f} ({said})",
                flush=True,
            )
    for mode, rows in figures.items():
        quiet, busy, ratio = (median([r[k] for r in rows]) for k in range(3))
        print(
            f"{mode:6s} (median of {len(rows)}): quiet {quiet:.0f} tokens/s, busy {busy:.0f} "
            f"tokens/s, busy/quiet {ratio:.2f}"
        )
    print("goal: busy/quiet at least 0.45 with a spin loop started mid-run on 2 cores")
    print(f"load average now: {os.getloadavg()[0]:.2f}; the trainers' logs in {runs}")


if __name__ == "__main__":
    main()
