"""Real browser (headless Chromium): the Alignment section at 760 and 1400 px."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

from tests.helpers import assert_no_browser_exception
from tests.test_browser_attention import look, settle
from tests.test_browser_attribution import CROWDED, LONG, SENTENCE, X_TICKS, wait_for_title

MODEL = "runs/browser-alignment/last.pt"
LINKS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(p =>
  p.querySelectorAll('.scatterlayer .trace').length)"""  # scatter traces drawn per chart


def test_alignment_section_reads_well_at_two_widths(app_server, browser_page, tiny_run):
    shutil.copytree(tiny_run, Path(app_server["runs"]) / "browser-alignment", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    page.set_viewport_size({"width": 1400, "height": 3000})
    query = {"model": MODEL, "sentence": SENTENCE, "section": "alignment"}
    page.goto(f"{url}/attention?" + urlencode({**query, "layer": "0", "head": "0"}))  # a reader
    wait_for_title(page, "AWO (attention when outputting)")
    wait_for_title(page, "AER of each reader, AWI")
    settle(page, 3)  # the reader's matrix and one AER grid per mode
    assert_no_browser_exception(page)
    assert page.evaluate(X_TICKS, 0) == ["the", "cat", "sees", "the", "dog", "."]
    assert page.evaluate(X_TICKS, 1) == ["le", "chat", "voit", "le", "chien", "."]  # French row
    assert page.evaluate(LINKS)[1] >= 6 + 2  # a line per link, and the words' dots
    assert page.get_by_role("button", name="Links as CSV").count() == 1
    assert page.locator('[data-testid="stDataFrame"]').count() == 1  # every reader's AER

    page.get_by_text("AWI (attention when inputting)", exact=True).click()
    wait_for_title(page, "AWI (attention when inputting) — layer 0")
    settle(page, 3)
    assert parse_qs(urlparse(page.url).query)["align"] == ["awi"]
    assert_no_browser_exception(page)
    problems = {}
    for width in (1400, 760):
        page.set_viewport_size({"width": width, "height": 3400})  # the whole section
        page.wait_for_timeout(1500)
        problems[width] = look(page, f"attention_alignment_{width}") + page.evaluate(CROWDED)
    page.goto(f"{url}/attention?" + urlencode({**query, "sentence": LONG}))  # at 760 px
    wait_for_title(page, "AER of each reader, AWI")
    settle(page, 3)
    page.get_by_text("Opened on the reader that aligns best").wait_for()  # no reader named
    assert_no_browser_exception(page)
    problems["long"] = look(page, "attention_alignment_long_760") + page.evaluate(CROWDED)
    assert not any(problems.values()), problems
