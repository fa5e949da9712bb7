"""Real browser: a tiny Llama (an operator's models folder) translating by its prompt on the
Translate and Attention pages — Maps with the head roles, Inside a head with RoPE — at 1400
and 760 px."""

from __future__ import annotations

import shutil
from urllib.parse import urlencode

import pytest

from tests import helpers
from tests.helpers import ARTIFACTS, assert_no_browser_exception

DRAWN = """(n) => document.querySelectorAll('.js-plotly-plot .hm').length >= n
    && [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(
        t => t.textContent.includes('Cross attention'))
    && [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(
        t => t.textContent.includes('What each head does'))"""


@pytest.fixture(scope="module")
def lm_server(tmp_path_factory, lm_models):
    """An app server whose operator's models folder holds the tiny Llama model."""
    models = tmp_path_factory.mktemp("lm-models")
    shutil.copytree(lm_models["llama"], models / "tiny-llama")
    runs = tmp_path_factory.mktemp("lm-runs")
    proc, url = helpers.start_server(runs, env={"ATTENTION_STUDIO_MODELS": str(models)})
    yield url
    helpers.stop_server(proc)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 760])
def test_a_decoder_only_model_in_a_real_browser(lm_server, chromium, width):
    context = chromium.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    query = {"model": "models/tiny-llama/", "sentence": "the boy is tall ."}
    try:
        page.goto(f"{lm_server}/translate?" + urlencode(query))
        page.get_by_role("textbox", name="Prompt template").wait_for(timeout=60_000)
        page.get_by_text("Source tokens as the model saw them").wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        page.goto(f"{lm_server}/attention?" + urlencode(query))
        # the large map, 2 layers × 4 heads, the three head-role grids
        page.wait_for_function(DRAWN, arg=1 + 2 * 4 + 3, timeout=60_000)
        page.get_by_text("one causal attention per layer").wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"language_model_{width}.png"), full_page=True)
        page.goto(f"{lm_server}/attention?" + urlencode(query | {"section": "inside"}))
        page.get_by_text("rotated by their positions").wait_for(timeout=60_000)
        page.get_by_text("heads 0, 1 read the same keys").wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        page.screenshot(path=str(ARTIFACTS / f"language_model_inside_{width}.png"), full_page=True)
    finally:
        context.close()
