"""Real browser (headless Chromium): the Train page's runs table and settings chart render."""

from __future__ import annotations

import pytest

from core.places import RUNS_ENV
from core.runs.notes import write_notes
from tests import helpers
from tests.helpers import ARTIFACTS, assert_no_browser_exception
from tests.test_runs_table import make_trained_run

PARCOORDS_AXES = """() => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')]
    .find(g => g.data && g.data.length && g.data[0].type === 'parcoords');
  return gd ? gd.querySelectorAll('.axis-title').length : 0;
}"""


@pytest.fixture(scope="module")
def runs_server(tmp_path_factory):
    """An app server of its own, over a runs directory this module fills."""
    runs = tmp_path_factory.mktemp("runs-table-browser")
    proc, url = helpers.start_server(runs)
    yield {"url": url, "runs": runs}
    helpers.stop_server(proc)


@pytest.mark.parametrize("width", [760, 1400])
def test_the_runs_table_and_settings_chart_render(
    runs_server, chromium, make_run, monkeypatch, width
):
    monkeypatch.setenv(RUNS_ENV, str(runs_server["runs"]))
    if not (runs_server["runs"] / "alpha").is_dir():
        make_trained_run(make_run, "alpha", created=1, bleus=(3.0, 6.0))
        make_trained_run(make_run, "beta", created=2, lr=5e-4, heads=4, bleus=(2.0, 4.0))
        make_trained_run(make_run, "gamma", created=3, lr=2e-3, bleus=(1.0, 8.0))
        write_notes("alpha", "The **baseline** <b>run</b>", "baseline, sweep")
        write_notes("beta", "4 heads, half lr", "sweep")
    context = chromium.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    try:
        page.goto(runs_server["url"] + "/train?run=alpha&compare=beta")
        page.get_by_text("All runs", exact=True).wait_for(timeout=60_000)
        page.get_by_text("Settings that differ").wait_for(timeout=30_000)
        page.wait_for_function(f"({PARCOORDS_AXES})() >= 5", timeout=60_000)
        # lr and heads differ, then final loss, val loss and final BLEU
        assert page.evaluate(PARCOORDS_AXES) == 5
        tables = page.get_by_test_id("stDataFrame")
        tables.nth(1).wait_for(timeout=30_000)  # the settings diff and the runs table
        for i in range(tables.count()):
            assert tables.nth(i).bounding_box()["width"] > 100
        assert_no_browser_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.get_by_text("All runs", exact=True).scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"runs_table_{width}.png"))
        chart = page.locator(".js-plotly-plot").last  # the page scrolls inside Streamlit
        chart.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"runs_parcoords_{width}.png"))
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"runs_table_{width}_failure.png"), full_page=True)
        raise
    finally:
        context.close()
