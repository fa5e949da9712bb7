"""Real browser (headless Chromium): the Attribution section at 760 and 1400 px."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

from tests.helpers import assert_no_browser_exception, with_validation_split
from tests.test_browser_attention import look, settle

MODEL = "runs/browser-attribution/last.pt"
SENTENCE = "the cat sees the dog ."  # "the" twice; the tiny model: "le chat voit le chien ."
CHART_TITLES = """() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))
  .map(t => t.textContent)"""
X_TICKS = """n => Array.from(  // the x tick labels of the n-th Plotly chart
  document.querySelectorAll('.js-plotly-plot')[n].querySelectorAll('.xtick text'))
  .map(t => t.textContent)"""
DIVIDERS = """n => document.querySelectorAll('.js-plotly-plot')[n]
  .querySelectorAll('.shapelayer path').length"""
CROWDED = """() => {  // charts past the page's right edge; x tick labels closer than 12 px
    const problems = [];
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
        const box = plot.getBoundingClientRect();
        const name = (plot.querySelector('.gtitle') || {}).textContent;
        if (box.right > document.documentElement.clientWidth + 1) problems.push('past: ' + name);
        const xs = [...plot.querySelectorAll('.xtick text')]
            .map(t => t.getBoundingClientRect().right);  // the anchor of a label turned -45°
        for (let i = 1; i < xs.length; i++) {
            if (xs[i] - xs[i - 1] < 12) { problems.push('crowded ticks: ' + name); break; }
        }
    }
    return problems;
}"""
LONG = "the cat sees the dog and the dog sees the cat and the cat sees the dog ."  # 17 words


def wait_for_title(page, words: str) -> None:
    """Wait until a chart's title holds ``words``."""
    page.wait_for_function(
        f"w => ({CHART_TITLES})().some(t => t.includes(w))", arg=words, timeout=120_000
    )


def test_attribution_section_reads_well_at_two_widths(app_server, browser_page, tiny_run):
    run = Path(app_server["runs"]) / "browser-attribution"
    shutil.copytree(tiny_run, run, dirs_exist_ok=True)
    with_validation_split(run / "last.pt", run / "last.pt")  # 6 validation pairs of tiny.tsv
    url, page = app_server["url"], browser_page
    page.set_viewport_size({"width": 1400, "height": 3000})
    query = {"model": MODEL, "sentence": SENTENCE, "section": "attribution"}
    page.goto(f"{url}/attention?" + urlencode({**query, "method": "grad-input"}))
    wait_for_title(page, "Gradient × input")
    settle(page, 2)
    assert_no_browser_exception(page)
    ticks = page.evaluate(X_TICKS, 1)  # the contribution matrix: source, then prefix
    assert ticks == ["the", "cat", "sees", "the", "dog", ".", "<eos>"] + [
        "<bos>",
        "le",
        "chat",
        "voit",
        "le",
        "chien",
        ".",
    ]
    assert page.evaluate(DIVIDERS, 1) >= 1

    page.get_by_role("combobox", name="Attribution method").click()
    page.get_by_role("option", name="Value zeroing").click()
    wait_for_title(page, "Value zeroing")
    settle(page, 2)
    assert parse_qs(urlparse(page.url).query)["method"] == ["value-zeroing"]

    page.get_by_role("button", name="Measure faithfulness on 200 validation sentences").click()
    wait_for_title(page, "Deletion curve")
    settle(page, 2)
    assert_no_browser_exception(page)
    assert (
        page.get_by_text("Random ranking (baseline)").count()
        + page.locator('[data-testid="stDataFrame"]').count()
        >= 1
    )
    problems = {}
    for width in (1400, 760):
        page.set_viewport_size({"width": width, "height": 4600})  # the whole section
        page.wait_for_timeout(1500)
        problems[width] = look(page, f"attention_attribution_{width}") + page.evaluate(CROWDED)
    page.goto(f"{url}/attention?" + urlencode({**query, "sentence": LONG}))  # at 760 px
    wait_for_title(page, "ALTI+")
    settle(page, 2)
    assert_no_browser_exception(page)
    problems["long"] = look(page, "attention_attribution_long_760") + page.evaluate(CROWDED)
    assert not any(problems.values()), problems
    shutil.rmtree(Path(app_server["runs"]) / ".attribution", ignore_errors=True)


def test_steps_past_their_limit_are_named_in_words(app_server, browser_page, tiny_run):
    """Issue 68, item 10: 512 integration steps showed only a red "!" beside the box."""
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    page = browser_page
    query = {"model": "runs/browser-tiny/last.pt", "section": "attribution"}
    query["method"] = "integrated-gradients"
    page.goto(f"{app_server['url']}/attention?" + urlencode(query))
    page.get_by_text("Choices: baseline, steps").click()
    box = page.get_by_role("spinbutton", name="Steps")
    box.fill("512")
    box.press("Enter")
    page.get_by_text("512 asked, 256 used").wait_for(timeout=60_000)
    assert "from 2 to 256" in page.inner_text("body")
