"""One quiet session: seconds from opening each page to idle, and on the Attention page from
a widget change (the attention kind, a head removed) to idle. Issue 36's goals: every page
idle within 1.5 s of opening, the Attention page within 1 s of a widget change.

    python bench/page_idle.py [--repeats 5]

An app server on a loopback port with the shipped model (a copy of checkpoints/), nothing
training; one headless Chromium session (1400 px wide) opens Home, Train, Translate and
Attention in turn, ``--repeats`` rounds after one warm-up round (the server's first imports
and model load, reported apart), then switches the attention kind and removes one head at a
time on the Attention page's "Remove heads" section. "Idle": Streamlit's running indicator
gone and what the page draws last is on it. Prints JSON lines (median and each timing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import HEADS, KIND_WORDS  # noqa: E402  (the load test's students do the same)
from tests.helpers import launch_chromium, start_server, stop_server  # noqa: E402

RUNNING = '[data-testid="stStatusWidget"]'
FOOTER = "text=packaged by manythings.org"  # the attribution every page but Train ends with
PAGES = {  # page -> (its URL path, what it draws last)
    "Home": ("", FOOTER),
    "Train": ("train", '[data-testid="stForm"]'),
    "Translate": ("translate", FOOTER),
    "Attention": ("attention", FOOTER),
}
CHARTS_DRAWN = (  # every Plotly chart on the page has its plot drawn
    "[...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
    ".every(c => c.querySelector('.main-svg'))"
)
KINDS = list(KIND_WORDS)  # the "Attention kind" radio's labels
TITLE_SHOWN = (  # the large map's title names the kind
    "t => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
    ".some(e => e.textContent.startsWith(t))"
)


def idle(page, last: str) -> None:
    """Wait until ``last`` is drawn, the app has stopped running and every chart is drawn."""
    page.locator(last).first.wait_for(timeout=120_000)
    page.wait_for_function(f"!document.querySelector('{RUNNING}')", timeout=120_000)
    page.wait_for_function(CHARTS_DRAWN, timeout=120_000)


def timed(action) -> float:
    """Seconds ``action`` takes."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def open_pages(page, url: str) -> dict[str, float]:
    """Each page opened once: {page: seconds to idle}."""
    out = {}
    for name, (path, last) in PAGES.items():
        start = time.perf_counter()
        page.goto(f"{url}/{path}")
        idle(page, last)
        out[name] = time.perf_counter() - start
    return out


def attention_changes(page, url: str, repeats: int) -> dict[str, list[float]]:
    """On "Remove heads": remove one more head, then switch the kind (the section draws maps
    once a head is removed), ``repeats`` times each."""
    page.goto(f"{url}/attention?section=ablation")
    idle(page, FOOTER)
    kind, out = "Cross", {"switch the attention kind": [], "remove one more head": []}
    radio = page.locator('[data-testid="stRadio"]').filter(has_text="Attention kind")
    box = page.locator('[data-testid="stMultiSelect"] input').first
    for i in range(repeats):
        kind = KINDS[i % 2] if kind == "Cross" else "Cross"

        def remove(i=i):
            box.click()
            box.fill(HEADS[i % len(HEADS)])
            box.press("Enter")
            box.press("Escape")
            page.get_by_text(f"{i + 1} head{'s' * (i != 0)} removed").first.wait_for()
            idle(page, FOOTER)

        out["remove one more head"].append(timed(remove))

        def switch(kind=kind):
            radio.get_by_text(kind, exact=True).first.click()
            page.wait_for_function(TITLE_SHOWN, arg=KIND_WORDS[kind], timeout=120_000)
            idle(page, FOOTER)

        out["switch the attention kind"].append(timed(switch))

    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="idle-"))
    shutil.copytree(ROOT / "checkpoints", tmp / "checkpoints")
    (tmp / "runs").mkdir()
    server, url = start_server(
        tmp / "runs", env={"ATTENTION_STUDIO_CHECKPOINTS": str(tmp / "checkpoints")}
    )
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            first = open_pages(page, url)
            rounds = [open_pages(page, url) for _ in range(args.repeats)]
            changes = attention_changes(page, url, args.repeats)
            browser.close()
    finally:
        stop_server(server)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"first_open_s": {k: round(v, 2) for k, v in first.items()}}))
    for name in PAGES:
        times = [r[name] for r in rounds]
        row = {"open": name, "median_s": round(statistics.median(times), 2)}
        print(json.dumps({**row, "each_s": [round(t, 2) for t in times]}))
    for what, times in changes.items():
        row = {"change": what, "median_s": round(statistics.median(times), 2)}
        print(json.dumps({**row, "each_s": [round(t, 2) for t in times]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
