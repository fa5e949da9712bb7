"""Real browser (headless Chromium): what changes where the user clicked Launch (issue #21, 4).

Launch sits at the foot of the form; with "Advanced" open that is thousands of pixels down
the page. After the click the form and Advanced must fold up and the new run must be in
view: a note naming it, its state badge and its progress bar, at 1400 and at 760 px.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import ARTIFACTS, assert_no_browser_exception, open_new_run
from tests.test_browser_distributed import settle

NOTE = ".st-key-launched"  # pages.ui.train.launch_note's note on the run just launched
IN_VIEW = """(selector) => {
  const box = document.querySelector(selector);
  if (!box) return false;
  const r = box.getBoundingClientRect();
  return r.height > 0 && r.top >= -2 && r.bottom <= window.innerHeight;
}"""

SCROLLED = """() => Math.max(window.scrollY, ...[...document.querySelectorAll("*")].map(
  (e) => e.scrollTop))"""  # the page scrolls inside Streamlit's main section, not the window


def expander_open(page, label: str) -> bool:
    """Whether the expander whose own summary reads ``label`` is open (not one around it)."""
    return page.locator("details > summary", has_text=label).first.evaluate(
        "s => s.parentElement.open"
    )


def fill_and_launch(page, url: str, corpus: str, processes: int) -> float:
    """A d2l run on the tiny corpus, Advanced open, Launch clicked; the click's page y."""
    page.goto(url + "/train")
    open_new_run(page)
    page.get_by_text("d2l chapter", exact=True).wait_for(timeout=30_000)
    settle(page)
    page.get_by_text("d2l chapter", exact=True).click()
    page.wait_for_url(re.compile(r"[?&]preset=d2l"), timeout=30_000)
    settle(page)
    page.get_by_text("file path", exact=True).click()
    path = page.get_by_label(re.compile("Path to a tab-separated file"))
    path.wait_for(timeout=30_000)
    settle(page)
    path.fill(corpus)
    path.press("Enter")
    page.get_by_text("30 usable pairs, 0 skipped lines.").wait_for(timeout=30_000)
    settle(page)
    page.get_by_text("Advanced: every hyper-parameter").click()
    settle(page)
    page.get_by_label("epochs", exact=True).fill("100000")
    if processes > 1:
        page.get_by_label("processes", exact=True).fill(str(processes))
    launch = page.get_by_role("button", name="Launch training")
    launch.scroll_into_view_if_needed()
    y = page.evaluate(SCROLLED) + launch.bounding_box()["y"]
    launch.click()
    return y


@pytest.mark.parametrize(("width", "processes"), [(1400, 1), (760, 2)])
def test_after_launch_the_form_folds_and_the_new_run_is_in_view(
    browser_page, app_server, tiny_corpus, kill_trainers, width, processes
):
    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        before = {p.name for p in app_server["runs"].iterdir()}
        clicked_at = fill_and_launch(page, app_server["url"], str(tiny_corpus), processes)
        assert clicked_at > 1500, clicked_at  # Launch was far down the page
        page.wait_for_url(
            lambda url: (
                (m := re.search(r"[?&]run=([^&]+)", url)) is not None and m[1] not in before
            ),
            timeout=30_000,
        )
        run_id = re.search(r"run=([^&]+)", page.url)[1]
        page.locator(NOTE).wait_for(timeout=30_000)
        page.wait_for_function(IN_VIEW, arg=NOTE, timeout=10_000)  # scrolled into view
        note = page.locator(NOTE).text_content()
        assert f"Launched run {run_id}" in note, note
        if processes > 1:
            assert "2 processes" in note, note
        assert not expander_open(page, "New run")
        assert not expander_open(page, "Advanced: every hyper-parameter")
        badge = "span.stMarkdownBadge"
        page.locator(badge).first.wait_for(timeout=30_000)
        page.wait_for_function(IN_VIEW, arg=badge, timeout=10_000)  # the run's state
        page.wait_for_function(IN_VIEW, arg='[data-testid="stProgress"]', timeout=10_000)
        page.wait_for_function(IN_VIEW, arg='[data-testid="stExpander"]', timeout=10_000)
        assert_no_browser_exception(page)
        page.screenshot(path=str(ARTIFACTS / f"train_after_launch_{width}.png"))
        page.locator("summary", has_text="New run").click()  # opens again, Advanced shut
        settle(page)
        assert expander_open(page, "New run")
        assert not expander_open(page, "Advanced: every hyper-parameter")
        page.screenshot(path=str(ARTIFACTS / f"train_form_reopened_{width}.png"))
    except BaseException:
        page.screenshot(path=str(ARTIFACTS / f"train_after_launch_{width}_failure.png"))
        raise
    finally:
        kill_trainers(app_server["runs"])
