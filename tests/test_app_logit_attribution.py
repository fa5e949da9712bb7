"""AppTest tests of the Attention page's "Direct logit attribution" section."""

from __future__ import annotations

import shutil

import numpy as np

from core.attention.logit_attribution import logit_attribution
from core.model.opened import open_model
from core.model.parts import DecodeSettings
from tests.helpers import assert_clean, heavy_slot_held, plain, run_page_script
from tests.test_app_attention import json_z, specs, title

HOME = "i'm home ."  # the tiny model: je suis chez moi . <eos>


def captions(at) -> str:
    return plain(" ".join(c.value for c in at.caption))


def test_the_section_draws_the_librarys_figures_and_follows_its_widgets(studio_dirs):
    at = run_page_script("attention.py", {"section": "logit_attribution", "sentence": HOME})
    assert_clean(at)
    (fig,) = specs(at)
    assert title(fig).startswith("Direct logit attribution")
    m = open_model(str(studio_dirs["checkpoints"] / "fra-eng-small.pt"))
    t = m.translate(HOME, DecodeSettings())
    a = logit_attribution(m, t)  # the last step, the word it wrote
    heat = [tr for tr in fig["data"] if tr["type"] == "heatmap"]
    for h, attention in zip(heat, ("self", "cross"), strict=True):
        assert np.allclose(json_z(h["z"]), a.head_grid(attention))
    assert f"The model's own logit: {a.logit:.4f}; the terms' sum: {a.total:.4f}" in captions(at)
    at.selectbox(key="at_dla_step").set_value(1).run()
    at.text_input(key="at_dla_answer").set_value("suis").run()
    at.text_input(key="at_dla_wrong").set_value("es").run()
    assert_clean(at)
    d = logit_attribution(m, t, 1, "suis", "es")
    assert f"own logit difference: {d.logit:.4f}" in captions(at)


def test_one_steps_terms_do_not_wait_behind_heavy_work(studio_dirs):
    """One teacher-forced pass, as the maps': a student's chart waited behind another's head
    importance (up to 600 s) in the server's heavy slot, and a second tab was refused."""
    with heavy_slot_held():
        at = run_page_script("attention.py", {"section": "logit_attribution", "sentence": HOME})
    assert_clean(at)
    assert not at.warning and len(specs(at)) == 1


def test_a_word_the_model_lacks_is_one_line(studio_dirs):
    at = run_page_script("attention.py", {"section": "logit_attribution", "sentence": HOME})
    at.text_input(key="at_dla_answer").set_value("zzzq").run()
    assert [plain(e.value) for e in at.error] == [
        "The model has no output token 'zzzq': give one of its tokens (as the translation "
        "shows them)."
    ]
    assert not at.exception and not at.get("plotly_chart")


def test_a_masked_lm_is_taken_apart_at_its_mask_and_gemma_2_is_refused(studio_dirs, lm_models):
    for family in ("bert", "gemma2"):
        shutil.copytree(lm_models[family], studio_dirs["checkpoints"] / family)
    sentence = "the boy is [MASK] ."
    query = {"model": "checkpoints/bert/", "sentence": sentence, "section": "logit_attribution"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert at.get("plotly_chart") and "the terms' sum" in captions(at)
    at = run_page_script("attention.py", query | {"model": "checkpoints/gemma2/"})
    assert_clean(at)
    assert "Direct logit attribution" not in at.radio(key="at_section").options  # not offered:
    assert any("soft-caps its logits" in plain(w.value) for w in at.warning)  # the link's note
