"""Heatmap drawing time in a real browser: the Attention page of a 12-word sentence.

    python bench/heatmap_render.py [--repeats 5] [--width 1400]

Starts the app on a loopback port with the shipped model, opens the Attention page in
headless Debian Chromium and prints, per attention kind, the median seconds from the click
on the kind to every heatmap of the view being drawn (large map + one layer's heads).
These were timing limits inside the browser tests; they are figures, so they live here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from common import ROOT, median

sys.path.insert(0, str(ROOT))

from tests.helpers import launch_chromium, start_server, stop_server

SENTENCE = "i think that we should go to the beach together tomorrow morning ."
KINDS = (
    ("Cross", "Cross attention"),
    ("Decoder self", "Decoder self"),
    ("Encoder self", "Encoder self"),
)
DRAWN = """([title, n]) => {
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    const heatmaps = document.querySelectorAll('.js-plotly-plot .hm');
    const titled = plots.filter(
        p => (p.querySelector('.gtitle') || {}).textContent?.startsWith(title));
    return heatmaps.length >= n && titled.length >= 1;
}"""


def redraw_seconds(page, label: str, title: str, count: int) -> float:
    """Seconds from clicking an attention kind to ``count`` heatmaps drawn under ``title``."""
    start = time.perf_counter()
    page.get_by_text(label, exact=True).click()
    page.wait_for_function(DRAWN, arg=[title, count], timeout=120_000)
    return time.perf_counter() - start


def main() -> None:
    """Print the median redraw time per kind."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--width", type=int, default=1400)
    args = p.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="heatmap-bench-"))
    os.environ["ATTENTION_STUDIO_RUNS"] = str(runs)
    proc, url = start_server(runs)
    from playwright.sync_api import sync_playwright

    timings = {label: [] for label, _ in KINDS}
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": args.width, "height": 1100})
            query = {
                "model": "checkpoints/fra-eng-small.pt",
                "sentence": SENTENCE,
                "kind": "encoder",
            }
            page.goto(f"{url}/attention?" + urlencode(query))
            page.locator(".js-plotly-plot .hm").first.wait_for(timeout=120_000)
            time.sleep(2)
            count = page.locator(".js-plotly-plot .hm").count()
            for _ in range(args.repeats):
                for label, title in KINDS:
                    timings[label].append(redraw_seconds(page, label, title, count))
            browser.close()
    finally:
        stop_server(proc)
    print(f"{len(SENTENCE.split())} tokens, {count} heatmaps per view, {args.width} px wide:")
    for label, values in timings.items():
        spread = f"min {min(values):.2f}, max {max(values):.2f}"
        print(f"  {label:13s} median {median(values):.2f} s ({spread})")


if __name__ == "__main__":
    main()
