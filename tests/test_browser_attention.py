"""Real browser: translate a sentence, open the Attention page, redraw the heatmaps.

How fast the heatmaps draw is measured by the benchmarks (bench/), not here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

from tests.helpers import ARTIFACTS, SHIPPED, assert_no_browser_exception

LONG_TINY = "the cat sees the dog and the dog sees the cat ."  # 11 words the tiny model knows
LONG_REAL = "i think that we should go to the beach together tomorrow morning ."  # 12 words

ALL_DRAWN = """([title, n]) => {
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    const heatmaps = document.querySelectorAll('.js-plotly-plot .hm');
    const titled = plots.filter(p => (p.querySelector('.gtitle') || {}).textContent
                                     ?.includes(title));
    return heatmaps.length >= n && plots.length >= 2 && titled.length === plots.length;
}"""


def wait_for_heatmaps(page, title: str, count: int, timeout_s: float = 60) -> None:
    """Wait until ``count`` heatmaps are drawn and every chart's title has ``title``."""
    page.wait_for_function(ALL_DRAWN, arg=[title, count], timeout=timeout_s * 1000)


def test_translate_then_inspect_attention(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    model = "runs/browser-tiny/last.pt"

    page.goto(f"{url}/translate?" + urlencode({"model": model}))
    box = page.get_by_label("English sentence")
    box.fill("i'm home .")
    box.press("Enter")
    page.get_by_text("je suis chez moi .", exact=True).first.wait_for(timeout=60_000)
    assert_no_browser_exception(page)

    page.get_by_text("Inspect its attention").click()
    wait_for_heatmaps(page, "Cross attention", 1 + 2 * 4)  # large map + 2 layers × 4 heads
    assert_no_browser_exception(page)
    assert "kind=cross" in page.url and "sentence=i%27m+home" in page.url.replace("%20", "+")
    assert page.get_by_text("output token (query)").count() >= 1

    page.get_by_text("Encoder self", exact=True).click()
    wait_for_heatmaps(page, "Encoder self-attention", 9)
    assert_no_browser_exception(page)
    assert "kind=encoder" in page.url

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 2200})
    page.screenshot(path=str(ARTIFACTS / "attention_page.png"))


def test_heatmaps_of_a_long_sentence_redraw_for_every_kind(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    if SHIPPED.is_file():
        query = {"model": "checkpoints/fra-eng-small.pt", "sentence": LONG_REAL}
    else:
        query = {"model": "runs/browser-tiny/last.pt", "sentence": LONG_TINY}
    page.goto(f"{url}/attention?" + urlencode({**query, "kind": "encoder"}))
    page.locator(".js-plotly-plot .hm").first.wait_for(timeout=90_000)
    n = page.locator(".js-plotly-plot .hm").count()
    for kind, title in (
        ("Cross", "Cross attention"),
        ("Decoder self", "Decoder self"),
        ("Encoder self", "Encoder self"),
    ):
        page.get_by_text(kind, exact=True).click()
        wait_for_heatmaps(page, title, n)
        assert_no_browser_exception(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "attention_long_sentence.png"))
