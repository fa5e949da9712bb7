"""Real browser: a tiny Hugging Face Marian model (an operator's models folder) on the
Translate and Attention pages, at 1400 and 760 px."""

from __future__ import annotations

import shutil
from urllib.parse import urlencode

import pytest

from tests import helpers
from tests.helpers import ARTIFACTS, assert_no_browser_exception
from tests.test_browser_attention import wait_for_heatmaps


@pytest.fixture(scope="module")
def hf_server(tmp_path_factory, hf_models):
    """An app server whose operator's models folder holds the tiny Marian model."""
    models = tmp_path_factory.mktemp("hf-models")
    shutil.copytree(hf_models["marian"], models / "tiny-marian")
    runs = tmp_path_factory.mktemp("hf-runs")
    proc, url = helpers.start_server(runs, env={"ATTENTION_STUDIO_MODELS": str(models)})
    yield url
    helpers.stop_server(proc)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 760])
def test_a_hugging_face_model_in_a_real_browser(hf_server, chromium, width):
    context = chromium.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    query = {"model": "models/tiny-marian/", "sentence": "the boy is tall ."}
    try:
        page.goto(f"{hf_server}/translate?" + urlencode(query))
        page.get_by_role("textbox", name="Source sentence (en)").wait_for(timeout=60_000)
        page.get_by_text("Source tokens as the model saw them").wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        page.goto(f"{hf_server}/attention?" + urlencode(query))
        wait_for_heatmaps(page, "Cross attention", 1 + 2 * 4)  # large map + 2 layers × 4 heads
        assert_no_browser_exception(page)
        page.get_by_text("Compare", exact=True).click()  # B: the shipped model, word by word
        page.get_by_text("A and B cut sentences into different pieces").wait_for(timeout=60_000)
        page.get_by_text("Both decoders read").first.wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"hugging_face_{width}.png"), full_page=True)
    finally:
        context.close()
