"""Real browser: "Over training" with every head's trajectory and B − A at 760 and 1400 px,
and both play buttons stepping on their own (st.fragment run_every, which AppTest never fires).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

from tests.helpers import assert_no_browser_exception
from tests.test_browser_attention import TINY_MODEL, look, settle


def copy_tiny(app_server, tiny_run) -> str:
    """The tiny run in the server's runs directory; returns the server's URL."""
    shutil.copytree(tiny_run, Path(app_server["runs"]) / "browser-tiny", dirs_exist_ok=True)
    return app_server["url"]


def test_over_training_reads_well_at_760_and_1400_px(app_server, browser_page, tiny_run):
    url, page = copy_tiny(app_server, tiny_run), browser_page
    problems = {}
    query = {"model": TINY_MODEL, "section": "training", "train_step": "100", "diff_from": "50"}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3000})
        page.goto(f"{url}/attention?" + urlencode(query))
        settle(page, 4)
        page.get_by_text("Every head over training").first.wait_for(timeout=60_000)
        page.get_by_text("step 100 − step 50").first.wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        name = f"attention_trajectories_{width}"
        problems[name] = look(page, name)
    assert not any(problems.values()), problems


def test_play_steps_through_training_and_decoding(app_server, browser_page, tiny_run):
    url, page = copy_tiny(app_server, tiny_run), browser_page
    query = {"model": TINY_MODEL, "section": "training", "train_step": "50"}
    page.goto(f"{url}/attention?" + urlencode(query))
    settle(page, 4)
    page.get_by_role("button", name="▶ Play").click()
    page.wait_for_function("() => location.search.includes('train_step=100')", timeout=30_000)
    page.get_by_role("button", name="▶ Play").wait_for(timeout=30_000)  # stopped at the end
    assert "train_step=150" in page.url
    assert_no_browser_exception(page)

    page.goto(f"{url}/attention?" + urlencode({"model": TINY_MODEL, "section": "playback"}))
    settle(page)
    page.get_by_role("button", name="▶ Play").click()
    page.wait_for_function("() => location.search.includes('step=2')", timeout=30_000)
    assert_no_browser_exception(page)


def test_the_shipped_models_heads_on_validation_sentences(app_server, browser_page):
    """A fresh clone's shipped model: every step's validation numbers and source share come
    from its .history file (no run, no corpus needed), at 760 and 1400 px."""
    url, page = app_server["url"], browser_page
    problems = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3600})
        page.goto(f"{url}/attention?" + urlencode({"section": "training"}))
        settle(page, 4)
        page.get_by_text("Every head over training").first.wait_for(timeout=60_000)
        radio = page.locator("[data-testid=stRadio] label").filter(has_text="validation")
        radio.first.click()
        page.get_by_text("Source share of the predictions").first.wait_for(timeout=60_000)
        settle(page, 4)
        assert page.get_by_text("source share (ALTI+)").count() >= 1  # the chart's legend
        assert_no_browser_exception(page)
        name = f"attention_trajectories_shipped_{width}"
        problems[name] = look(page, name)
    assert not any(problems.values()), problems
