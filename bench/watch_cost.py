"""What watching costs: training tokens/s with the Train page open in Chromium vs unwatched.

    python bench/watch_cost.py [--repeats 3] [--seconds 60] [--preset small]
        [--page train|attention] [--poll 5]

Starts the app on a loopback port, then trains the same run (the preset on fra-eng, a
fixed time budget) alternately unwatched and watched (headless Chromium, 1400 px wide:
the Train page open on it, or with ``--page attention`` the Attention page's "Over
training" section on the run's last.pt, following new snapshots as they arrive, opened
once the first evaluation has saved it; the page polls the run at the app's own pace,
``--poll`` seconds, 5 unless set: the browser tests' server polls every second), and
prints each run's median target tokens/s after warm-up, the medians per mode and their
ratio, and each pair's ratio. Needs fra-eng.zip ($FRA_ENG_ZIP or
../shared/data/fra-eng.zip), Debian's Chromium and Playwright.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from common import ROOT, corpus_path, median

sys.path.insert(0, str(ROOT))

from bench.load import browser_pids, cpu_seconds
from core.runs import jobs
from core.runs import status as run_status
from core.runs.run_dir import RunDir
from pages.ui.polling import DEFAULT_POLL_S, POLL_ENV
from tests.helpers import launch_chromium, start_server, stop_server


def tokens_per_s(run_id: str, skip_s: float = 15.0) -> float:
    """Median logged tokens/s of a run, leaving out its first ``skip_s`` seconds of training."""
    records = RunDir(Path(os.environ["ATTENTION_STUDIO_RUNS"]) / run_id).read_metrics()
    rates = [
        r["tokens_per_s"]
        for r in records
        if r.get("record") == "train" and r.get("tokens_per_s") and r["elapsed"] > skip_s
    ]
    return median(rates) if rates else float("nan")


def browsers_cpu_seconds() -> float:
    """CPU seconds used so far by this process's Chromium processes (those still running)."""
    return sum(cpu_seconds(pid) for pid in browser_pids())


def watch(page, url: str, run_id: str, which: str) -> None:
    """Open the watching page on the run (Attention: once its first last.pt is there)."""
    if which == "train":
        page.goto(f"{url}/train?run={run_id}")
        return
    last = Path(os.environ["ATTENTION_STUDIO_RUNS"]) / run_id / "last.pt"
    while not last.exists() and run_status.run_info(run_id).live:
        time.sleep(0.5)
    query = urlencode({"model": f"runs/{run_id}/last.pt", "section": "training"})
    page.goto(f"{url}/attention?{query}")


def train_once(
    preset: str,
    seconds: float,
    threads: int,
    page=None,
    url: str = "",
    which: str = "train",
    server: int = 0,
) -> tuple[float, dict]:
    """One run of ``seconds`` of training; with ``page``, the chosen page watches it. Its
    median tokens/s, and the cores the server (pid ``server``) and the browser used."""
    train = {"time_budget": seconds, "epochs": 0, "threads": threads}
    if which == "attention":  # a snapshot every 100 steps, watched or not: views to follow
        train["eval_every"] = 100
    settings = {"data": {"source": "fra-eng"}, "train": train}
    run_id = jobs.start_run(preset, settings)
    start = (time.perf_counter(), cpu_seconds(server), browsers_cpu_seconds())
    if page is not None:
        watch(page, url, run_id, which)
    while (info := run_status.run_info(run_id)).live:
        browsers = browsers_cpu_seconds()  # read while the page is open
        time.sleep(1.0)
    wall = time.perf_counter() - start[0]
    cores = {
        "server": (cpu_seconds(server) - start[1]) / wall,
        "browser": (browsers - start[2]) / wall,
    }
    if page is not None:
        page.goto("about:blank")
    if info.state != "finished":
        from core.runs import processes

        check = processes.check_trainer(info.pid, info.path, info.identity)
        sys.exit(f"run {run_id} ended as {info.state} (check now: {check}): {info.message}")
    return tokens_per_s(run_id), cores


def main() -> None:
    """Alternate unwatched and watched runs; print the medians and the ratio."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--preset", default="small")
    p.add_argument("--threads", type=int, default=0, help="trainer threads (0: as the app)")
    p.add_argument("--page", choices=("train", "attention"), default="train")
    p.add_argument(
        "--poll",
        type=float,
        default=DEFAULT_POLL_S,
        help="seconds between the page's looks at the live run (the app's default)",
    )
    args = p.parse_args()
    os.environ["FRA_ENG_ZIP"] = corpus_path()
    runs = Path(tempfile.mkdtemp(prefix="watch-cost-"))
    os.environ["ATTENTION_STUDIO_RUNS"] = str(runs)
    proc, url = start_server(runs, env={POLL_ENV: str(args.poll)})  # the app's pace
    print(f"the page polls the live run every {args.poll:g} s", flush=True)
    from playwright.sync_api import sync_playwright

    rates = {"unwatched": [], "watched": []}
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for i in range(args.repeats):
                for mode in ("unwatched", "watched") if i % 2 == 0 else ("watched", "unwatched"):
                    watcher = page if mode == "watched" else None
                    rate, cores = train_once(
                        args.preset, args.seconds, args.threads, watcher, url, args.page, proc.pid
                    )
                    rates[mode].append(rate)
                    used = f"cores: server {cores['server']:.2f}, browser {cores['browser']:.2f}"
                    print(f"run {i + 1} {mode:9s}: {rate:8.0f} tokens/s ({used})", flush=True)
            browser.close()
    finally:
        stop_server(proc)
    watched, unwatched = median(rates["watched"]), median(rates["unwatched"])
    print(f"median unwatched {unwatched:.0f} tokens/s, watched {watched:.0f} tokens/s")
    print(f"watched / unwatched = {watched / unwatched:.2f} (goal: at least 0.90)")
    pairs = [w / u for w, u in zip(rates["watched"], rates["unwatched"])]  # one per repeat
    listed = ", ".join(f"{r:.2f}" for r in pairs)
    print(f"each pair: {listed} (median {median(pairs):.2f}): the machine's noise shows here")


if __name__ == "__main__":
    main()
