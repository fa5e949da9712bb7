"""The Attention page in headless Chromium with an opus-mt-sized Hugging Face model: seconds
from opening the page to idle (a fresh server: transformers imported, the model loaded), and
from pressing Enter on a new sentence to idle (the URL carries the sentence, the app has
stopped running, a heatmap is drawn), median of the repeats after the first.

    python bench/hf_browser_idle.py --repeats 4

The model is ``bench/hf_speed.py``'s: random weights with opus-mt-en-fr's configuration
(75 M parameters), 20-token sentences, 20 output tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hf_speed  # noqa: E402

from tests import helpers  # noqa: E402

HEATMAP = "() => document.querySelectorAll('.js-plotly-plot .hm').length >= 1"
SENTENCE_IN_URL = "s => new URLSearchParams(location.search).get('sentence') === s"


def idle(page) -> None:
    """Wait until the app has stopped running and a heatmap is drawn."""
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=300_000)
    page.wait_for_function(HEATMAP, timeout=300_000)


def measure(url: str, repeats: int) -> dict:
    """Open the page once, then type ``repeats`` new sentences; the seconds of each."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = helpers.launch_chromium(p)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        query = {"model": "checkpoints/opus-mt-en-fr-random/", "sentence": hf_speed.SENTENCE}
        start = time.perf_counter()
        page.goto(f"{url}/attention?" + urlencode({**query, "max_len": "20"}))
        idle(page)
        first, again = time.perf_counter() - start, []
        for i in range(repeats):
            new = " ".join(f"w{100 + 20 * i + j}" for j in range(19)) + " ."
            box = page.get_by_label("Source sentence", exact=True)
            box.fill(new)
            start = time.perf_counter()
            box.press("Enter")
            page.wait_for_function(SENTENCE_IN_URL, arg=new, timeout=300_000)
            idle(page)
            again.append(time.perf_counter() - start)
        browser.close()
    return {
        "first_open_s": round(first, 2),
        "new_sentence_s": [round(x, 2) for x in again],
        "new_sentence_median_s": round(statistics.median(again[1:] or again), 2),
    }


@contextmanager
def served(env: Callable[[Path], dict] = lambda root: {}):
    """(process, URL) of an app server whose only model is the random opus-mt-sized one,
    in a temporary folder ``root``; ``env(root)``: more of the server's environment."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf_speed.build(root / "checkpoints" / "opus-mt-en-fr-random")
        (root / "runs").mkdir()
        more = {"ATTENTION_STUDIO_CHECKPOINTS": str(root / "checkpoints"), **env(root)}
        proc, url = helpers.start_server(root / "runs", env=more)
        try:
            yield proc, url
        finally:
            helpers.stop_server(proc)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args()
    with served() as (_, url):
        print(json.dumps(measure(url, args.repeats)))


if __name__ == "__main__":
    main()
