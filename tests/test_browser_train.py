"""Real browser (headless Chromium): launch a tiny run from the Train page, watch, stop."""

from __future__ import annotations

import json
import re
import shutil

from tests.helpers import (
    ARTIFACTS,
    assert_no_browser_exception,
    open_new_run,
    wait_for_logged_step,
)

LOSS_POINTS = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  if (!gd || !gd.data || !gd.data.length) return 0;
  const x = gd.data[gd.data.length - 1].x;  // curves are downsampled: compare the last step
  return x.length ? Number(x[x.length - 1]) : 0;
}"""


def test_launch_watch_and_stop_from_the_train_page(
    browser_page, app_server, tiny_corpus, kill_trainers
):
    page = browser_page
    try:
        page.goto(app_server["url"] + "/train")
        open_new_run(page)
        page.get_by_text("d2l chapter", exact=True).wait_for(timeout=30_000)
        page.get_by_text("d2l chapter", exact=True).click()
        page.get_by_text("file path", exact=True).click()
        path = page.get_by_label(re.compile("Path to a tab-separated file"))
        path.fill(str(tiny_corpus))
        path.press("Enter")
        page.get_by_text("30 usable pairs, 0 skipped lines.").wait_for(timeout=30_000)
        page.get_by_text("Advanced: every hyper-parameter").click()
        page.get_by_label("epochs", exact=True).fill("100000")
        before = {p.name for p in app_server["runs"].iterdir()}  # earlier tests' runs
        page.get_by_role("button", name="Launch training").click()

        page.wait_for_url(  # the new run's id, not one an earlier test left on the server
            lambda url: (
                (m := re.search(r"[?&]run=(\d{8}-\d{6}-d2l)", url)) is not None
                and m[1] not in before
            ),
            timeout=30_000,
        )
        run_id = re.search(r"run=([^&]+)", page.url)[1]
        train = json.loads((app_server["runs"] / run_id / "job.json").read_text())["settings"]
        assert (train["train"]["log_every"], train["train"]["eval_every"]) == (1, 20)  # d2l's
        # the trainer first (its start is the slow part under load; a failure shows its log),
        # then the page: step 2 drawn
        wait_for_logged_step(app_server["runs"] / run_id, 2)
        page.wait_for_function(f"({LOSS_POINTS})() >= 2", timeout=90_000)
        first = page.evaluate(LOSS_POINTS)
        page.wait_for_function(f"({LOSS_POINTS})() > {first}", timeout=60_000)  # live update
        assert_no_browser_exception(page)
        assert page.get_by_text(re.compile(r"ETA \d")).count() == 1  # progress bar with ETA
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train_page_running.png"), full_page=True)

        buttons = page.get_by_test_id("stButton")  # not the toolbar's own "Stop"
        buttons.get_by_role("button", name="Stop", exact=True).click()
        badge = page.locator("span.stMarkdownBadge", has_text="stopped")  # not the runs table's
        badge.wait_for(timeout=60_000)
        buttons.get_by_role("button", name="Resume").wait_for(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "train_page_stopped.png"), full_page=True)
        assert_no_browser_exception(page)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train_page_failure.png"), full_page=True)
        raise
    finally:
        kill_trainers(app_server["runs"])


def test_the_layers_panel_reads_well_at_two_widths(app_server, browser_page, tiny_run):
    """Norms and TensorBoard-style distributions: no legend on an axis title, no title cut."""
    from tests.test_browser_attention import LAYOUT_PROBLEMS, settle

    shutil.copytree(tiny_run, app_server["runs"] / "browser-layers", dirs_exist_ok=True)
    page = browser_page
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(app_server["url"] + "/train?run=browser-layers")
        page.get_by_text("Layers: weight and gradient norms and distributions").click()
        page.get_by_text("weights of source embedding").first.wait_for(timeout=60_000)
        settle(page)
        assert_no_browser_exception(page)
        assert page.evaluate(LAYOUT_PROBLEMS) == [], width
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"train_layers_{width}.png"), full_page=True)
