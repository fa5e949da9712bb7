"""Real browser: a fresh server whose first request is a page URL still uses app.py's menu."""

from __future__ import annotations

import pytest

from tests.helpers import assert_no_browser_exception, start_server, stop_server


@pytest.mark.parametrize("page", ["train", "translate"])
def test_first_request_to_a_page_url_gets_the_app_navigation(page, tmp_path, browser_page):
    """Reloading or sharing /train must not fall back to listing every file of pages/."""
    proc, url = start_server(tmp_path)
    try:
        browser_page.goto(f"{url}/{page}")
        nav = browser_page.get_by_test_id("stSidebarNav")
        nav.get_by_text("Home", exact=True).wait_for(timeout=60_000)
        names = [t.strip().split("\n")[-1] for t in nav.get_by_role("link").all_inner_texts()]
        assert names == ["Home", "Train", "Translate", "Attention"]
        assert_no_browser_exception(browser_page)
    finally:
        stop_server(proc)
