"""Real browser (headless Chromium): remove heads, see the maps change, rank the heads."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

from core.model.checkpoints import atomic_save, read_checkpoint
from tests.helpers import assert_no_browser_exception
from tests.test_ablation_page import VAL_DATA
from tests.test_browser_attention import look, settle

MODEL = "runs/browser-ablate/last.pt"
HEATMAP_Z = """n => {  // the first heatmap's z of the n-th Plotly chart, flattened
  const gd = document.querySelectorAll('.js-plotly-plot')[n];
  const trace = gd && gd._fullData && gd._fullData.find(t => t.type === 'heatmap');
  return trace ? Array.from(trace.z, row => Array.from(row)).flat() : null;  // typed rows
}"""
CHART_TITLES = """() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))
  .map(t => t.textContent)"""


def pick_head(page, label: str) -> None:
    """Choose ``label`` in the "Heads to remove" multiselect, as a user would (type, Enter)."""
    box = page.get_by_role("combobox", name="Heads to remove")
    box.click()
    box.fill(label)
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")


def test_remove_heads_and_rank_them_in_a_browser(app_server, browser_page, tiny_run):
    run = Path(app_server["runs"]) / "browser-ablate"
    shutil.copytree(tiny_run, run, dirs_exist_ok=True)
    ckpt = read_checkpoint(run / "last.pt")
    ckpt["data_config"] = dict(VAL_DATA)  # 6 validation pairs of tests/data/tiny.tsv
    atomic_save(ckpt, run / "last.pt")
    url, page = app_server["url"], browser_page
    query = {"model": MODEL, "kind": "cross", "layer": "1", "section": "Remove heads"}
    page.goto(f"{url}/attention?" + urlencode(query))
    page.get_by_role("button", name="Compute head importance").wait_for(timeout=60_000)
    for label in ("Encoder self L0 H0", "Encoder self L0 H1", "Cross L0 H0", "Cross L0 H1"):
        pick_head(page, label)
        settle(page)
    settle(page, 2 + 2 * 4)  # original, without the heads, and the grid without them
    assert_no_browser_exception(page)
    spec = parse_qs(urlparse(page.url).query)["ablate"][0]
    assert spec.split(",") == ["encoder:0:0", "encoder:0:1", "cross:0:0", "cross:0:1"]
    assert page.get_by_text("4 heads removed", exact=False).count() >= 1
    original, removed = page.evaluate(HEATMAP_Z, 0), page.evaluate(HEATMAP_Z, 1)
    assert original and removed and original != removed  # layer 1 reads other inputs now

    page.get_by_role("button", name="Compute head importance").click()
    wanted = ["Change in BLEU with the head removed", "Pruning curve", "Gradient"]
    page.wait_for_function(  # every chart of the importance panel drawn
        f"w => w.every(t => ({CHART_TITLES})().join(' ').includes(t))", arg=wanted, timeout=120_000
    )
    settle(page)
    assert_no_browser_exception(page)
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3000})
        page.wait_for_timeout(1500)
        assert look(page, f"attention_remove_heads_{width}") == []
    shutil.rmtree(Path(app_server["runs"]) / ".ablation", ignore_errors=True)
