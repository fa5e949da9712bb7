"""Real browser: "Where tokens live" at 760 and 1400 px, and a click on a point picks it.

Screenshots go to tests/artifacts/ (tokens_*.png); nothing may be cut or overlap.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

from tests.helpers import assert_no_browser_exception
from tests.test_browser_attention import look, settle

MODEL = "runs/browser-val/last.pt"  # the tiny run with 6 validation sentences
POINT = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  const t = gd._fullData[0], L = gd._fullLayout, box = gd.getBoundingClientRect();
  return [box.left + L.xaxis._offset + L.xaxis.d2p(t.x[0]),
          box.top + L.yaxis._offset + L.yaxis.d2p(t.y[0]), t.customdata[0]];
}"""


def _drawn(page) -> None:
    """Wait for the scatter's WebGL canvas and for the app to stop running."""
    page.locator(".js-plotly-plot .gl-canvas-context").first.wait_for(timeout=90_000)
    settle(page)


def test_a_click_on_a_point_picks_it_and_the_section_reads_well(app_server, browser_page, val_run):
    shutil.copytree(val_run, Path(app_server["runs"]) / "browser-val", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    problems = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 1800})
        query = {"model": MODEL, "section": "project", "space_layer": "all", "space_pick": "1:1:0"}
        page.goto(f"{url}/attention?" + urlencode(query))
        _drawn(page)
        assert_no_browser_exception(page)
        problems[f"tokens_{width}"] = look(page, f"tokens_{width}")
    assert not any(problems.values()), problems
    page.goto(f"{url}/attention?" + urlencode({"model": MODEL, "section": "project"}))
    _drawn(page)
    x, y, data = page.evaluate(POINT)
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_function("p => location.search.includes(p)", arg="space_pick", timeout=30_000)
    pick = parse_qs(urlparse(page.url).query)["space_pick"][0]
    assert pick == ":".join(str(int(v)) for v in data[1:])  # sentence:position:layer
    page.get_by_text("Nearest neighbours of").wait_for(timeout=30_000)
    assert_no_browser_exception(page)
