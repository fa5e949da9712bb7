"""The app server's memory with an opus-mt-sized Hugging Face model: resident set while it
serves the Attention page, and its high-water mark after head importance on 50 sentences,
both read from the server process itself (``/proc/PID/status``: VmRSS, VmHWM).

    python bench/hf_server_memory.py

The model is ``bench/hf_speed.py``'s (random weights, opus-mt-en-fr's configuration, 75 M
parameters, a word-level tokenizer over its 59,514 pieces). Head importance reads the
studio's default data for such a model (fra-eng); here a stand-in corpus of the tokenizer's
words (``FRA_ENG_ZIP``) of 4-12 words a sentence. Headless Chromium opens the Attention page
on a 20-token sentence, waits until it is idle, opens "Remove heads", asks for 50 sentences,
presses "Compute head importance" and waits for the grid. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hf_speed  # noqa: E402
from hf_browser_idle import idle, served  # noqa: E402

from tests import helpers  # noqa: E402

MODEL = "checkpoints/opus-mt-en-fr-random/"


def status_mb(pid: int, field: str) -> float:
    """A /proc/PID/status field (VmRSS, VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def stand_in_corpus(path: Path, pairs: int = 3000) -> Path:
    """A fra.txt-in-a-zip of the random model's words, standing in for fra-eng."""
    rng = random.Random(0)
    lines = []
    for _ in range(pairs):
        words = [f"w{rng.randrange(59000)}" for _ in range(rng.randrange(4, 13))]
        lines.append(f"{' '.join(words)} .\t{' '.join(reversed(words))} .\tCC-BY")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fra.txt", "\n".join(lines) + "\n")
    return path


def measure(url: str, pid: int) -> dict:
    """Serve the page, then compute head importance; the server's memory at each point."""
    from playwright.sync_api import sync_playwright

    peak = {"rss": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak["rss"] = max(peak["rss"], status_mb(pid, "VmRSS"))
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    with sync_playwright() as p:
        browser = helpers.launch_chromium(p)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        query = {"model": MODEL, "sentence": hf_speed.SENTENCE, "max_len": "20"}
        page.goto(f"{url}/attention?" + urlencode(query))
        idle(page)
        serving = status_mb(pid, "VmRSS")
        page.goto(f"{url}/attention?" + urlencode({**query, "section": "ablation"}))
        box = page.get_by_role("spinbutton", name="Validation sentences")
        box.wait_for(timeout=300_000)
        box.fill("50")
        box.press("Enter")
        page.wait_for_timeout(1500)
        start = time.perf_counter()
        page.get_by_role("button", name="Compute head importance").click()
        page.get_by_text("computed in").first.wait_for(timeout=900_000)
        seconds = time.perf_counter() - start
        after = status_mb(pid, "VmRSS")
        browser.close()
    done.set()
    return {
        "serving_rss_mb": round(serving),
        "importance_s": round(seconds, 1),
        "after_importance_rss_mb": round(after),
        "peak_rss_sampled_mb": round(peak["rss"]),
        "peak_hwm_mb": round(status_mb(pid, "VmHWM")),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args()

    def corpus(root: Path) -> dict:
        return {"FRA_ENG_ZIP": str(stand_in_corpus(root / "fra-eng.zip"))}

    with served(corpus) as (proc, url):
        print(json.dumps(measure(url, proc.pid)))


if __name__ == "__main__":
    main()
