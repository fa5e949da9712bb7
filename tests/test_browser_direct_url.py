"""Real browser: a fresh server whose first request is a page URL still gets the app's menu."""

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


def test_an_unexpected_error_shows_no_details_to_the_browser(tmp_path, browser_page):
    """A short message in the page; the traceback, the message and the paths stay on the
    server's console (client.showErrorDetails in .streamlit/config.toml)."""
    from tests.helpers import ROOT

    proc, url = start_server(tmp_path, "tests/data/raises.py")
    try:
        browser_page.goto(url)
        browser_page.get_by_test_id("stException").wait_for(timeout=60_000)
        shown = browser_page.inner_text("body")
        assert "Traceback" not in shown and "raises.py" not in shown and str(ROOT) not in shown
        assert "only the server's console" not in shown and "RuntimeError" not in shown
    finally:
        stop_server(proc)
    assert "only the server's console" in (tmp_path / "server.log").read_text()


def test_a_page_the_app_has_not_is_named_on_home(app_server, browser_page):
    """Issue 68, item 6: /nosuchpage showed Home with Streamlit's "Page not found" dialog,
    which names no page; Home says which page the link asked for and which pages there are."""
    page = browser_page
    page.goto(f"{app_server['url']}/nosuchpage")
    note = page.get_by_text("There is no page")
    note.wait_for(timeout=60_000)
    words = note.inner_text()
    assert "/nosuchpage" in words and "Train, Translate, Attention" in words
    assert_no_browser_exception(page)


def test_a_strangers_text_shows_no_link_formatting_or_html(tmp_path, browser_page):
    """Review, round five: md() escaped Markdown, HTML and Streamlit's directives, but GFM's
    autolink literals (http://…, www.…, user@host) are found once the escapes are read, so a
    crafted ?run= put live links to another site in the app's own warning."""
    from tests.data.user_text import TEXT

    proc, url = start_server(tmp_path, "tests/data/user_text.py")
    try:
        browser_page.goto(url)
        boxes = browser_page.locator(
            "[data-testid=stMarkdownContainer], [data-testid=stCaptionContainer]"
        )
        boxes.nth(2).wait_for(timeout=60_000)  # the warning, the text and the caption
        for i in range(3):
            box = boxes.nth(i)
            assert box.locator("a, b, strong, em, span.katex, [style*=color]").count() == 0
            assert TEXT in box.inner_text().replace("\u2060", "")  # as typed, to the letter
        assert_no_browser_exception(browser_page)
    finally:
        stop_server(proc)
