"""Real browser: the "Inside a head" and "Logit lens" sections at 760 and 1400 px.

Screenshots go to tests/artifacts/ (inside_*.png, lens_*.png); nothing may be cut or overlap.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

from tests.helpers import SHIPPED, assert_no_browser_exception
from tests.test_browser_attention import TINY_MODEL, look, settle

LONG_REAL = "i don't know if tom will be able to come to the party tomorrow ."  # 15 words, 15 out
VIEWS = {  # name -> (query, heatmaps drawn when the section is done)
    "inside": ({"section": "inside", "kind": "decoder_self", "layer": "1", "head": "2"}, 4),
    "inside_all": ({"section": "inside", "query": "3", "lines_all": "1", "token": "q3"}, 4),
    "lens": ({"section": "lens"}, 1),
    "lens_rank": ({"section": "lens", "lens": "rank"}, 1),
}


def test_inside_a_head_reads_well_from_760_to_1400_px(app_server, browser_page, tiny_run):
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    problems = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 3000})
        for name, (query, heatmaps) in VIEWS.items():
            page.goto(f"{url}/attention?" + urlencode({"model": TINY_MODEL, **query}))
            settle(page, heatmaps)
            assert_no_browser_exception(page)
            problems[f"{name}_{width}"] = look(page, f"{name}_{width}")
    assert not any(problems.values()), problems


def test_the_shipped_model_inside_a_head_and_its_lens(app_server, browser_page, tiny_run):
    """A 15-token sentence (the shipped model, else the tiny one): lines and lens stay legible."""
    runs = Path(app_server["runs"])
    shutil.copytree(tiny_run, runs / "browser-tiny", dirs_exist_ok=True)
    url, page = app_server["url"], browser_page
    model = "checkpoints/fra-eng-small.pt" if SHIPPED.is_file() else TINY_MODEL
    problems = {}
    for width in (760, 1400):
        page.set_viewport_size({"width": width, "height": 4200})  # the lines view too
        for section, heatmaps in (("inside", 4), ("lens", 1)):
            query = {"model": model, "sentence": LONG_REAL, "section": section, "query": "5"}
            page.goto(f"{url}/attention?" + urlencode(query))
            settle(page, heatmaps)
            assert_no_browser_exception(page)
            problems[f"{section}_long_{width}"] = look(page, f"{section}_long_{width}")
    assert not any(problems.values()), problems
