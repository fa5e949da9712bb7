"""Contrastive explanations (core.attribution.contrast; ``core.attribute --contrast``): why
each y_t rather than y'_t, for the gradient methods and occlusion."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution.contrast import CONTRAST_METHODS, contrast_problem, foil_ids
from core.attribution.explain import explain_contrast
from core.attribution.methods import METHODS, AttributionError
from core.model.checked_translation import translate_sentence
from core.model.parts import DecodeSettings

SENTENCE, TARGET, FOIL = "i'm home .", "je suis chez moi .", "je suis chez elle ."


@pytest.fixture(scope="module")
def forced(tiny_model):
    return translate_sentence(tiny_model, SENTENCE, target=TARGET)


def test_only_the_methods_that_read_a_difference_contrast():
    gradient = [m for m in CONTRAST_METHODS if m != "occlusion"]  # the five gradient methods
    assert [m for m in METHODS if contrast_problem(m) is None] == gradient
    assert "cannot contrast" in contrast_problem("alti")
    assert contrast_problem("occlusion") is None and "unknown method" in contrast_problem("x")


def test_a_foil_must_differ_and_is_laid_on_the_translations_steps(tiny_model, forced):
    assert foil_ids(tiny_model, forced, FOIL)[3] != forced.out_ids[3]
    with pytest.raises(AttributionError, match="the translation itself"):
        foil_ids(tiny_model, forced, TARGET)


def test_a_foil_of_another_length_is_compared_where_they_first_differ(tiny_model, forced):
    """Issue 51, item 3: a contrast had to have the same number of pieces."""
    own = list(forced.out_ids)  # je suis chez moi . </s>
    shorter = foil_ids(tiny_model, forced, "je suis .")  # differs first at step 2
    assert shorter[:2] == own[:2] and shorter[2] != own[2] and shorter[3:] == own[3:]
    longer = foil_ids(tiny_model, forced, "je suis chez elle chez moi .")
    assert [t for t, (a, b) in enumerate(zip(own, longer)) if a != b] == [3]
    e = explain_contrast(tiny_model, forced, longer, "occlusion")
    assert e.attribution.extra["contrast_steps"] == [3]
    assert e.contrast[3] == "elle" and e.contrast[4] == "."  # the translation's own after it


def test_a_user_alignment_pairs_the_steps_compared(tiny_model, forced):
    from core.attribution.contrast import aligned_foil, parse_alignment

    assert parse_alignment("3-4, 4-5") == [(3, 4), (4, 5)]
    with pytest.raises(AttributionError, match="not a pair of steps"):
        parse_alignment("3:4")
    ids = foil_ids(tiny_model, forced, "je suis chez elle chez moi .", alignment="3-3,4-6")
    other = tiny_model.target_ids("je suis chez elle chez moi .", first=forced.out_ids[0])
    assert ids[3] == other[3] and ids[4] == other[6]
    with pytest.raises(AttributionError, match="out of range"):
        aligned_foil(forced.out_ids, other, [(9, 0)])
    with pytest.raises(AttributionError, match="No compared step differs"):
        foil_ids(tiny_model, forced, "je suis chez elle .", alignment="0-0")


def _difference(m, src_ids, out_ids, foil) -> np.ndarray:
    """(T,) log p(y_t) - log p(y'_t) after ``src_ids``, from the recorded pass."""
    p = m.forced(src_ids, out_ids)
    logp = p.logits[0].float().log_softmax(-1)  # (T, V)
    rows = torch.arange(len(out_ids))
    return (logp[rows, out_ids] - logp[rows, foil]).numpy()


def test_occlusion_is_the_drop_of_the_difference_token_by_token(tiny_model, forced):
    e = explain_contrast(tiny_model, forced, FOIL, "occlusion")
    foil = foil_ids(tiny_model, forced, FOIL)
    step = e.attribution.extra["contrast_steps"]
    assert step == [3] and e.contrast == ["je", "suis", "chez", "elle", ".", "<eos>"]
    whole = _difference(tiny_model, forced.src_ids, forced.out_ids, foil)
    S = len(forced.src_ids)
    for j in range(S):
        src = list(forced.src_ids)
        src[j] = tiny_model.unk_id
        drop = whole[3] - _difference(tiny_model, src, forced.out_ids, foil)[3]
        assert e.attribution.raw[3, j] == pytest.approx(drop, abs=1e-4)
    assert not e.attribution.raw[[0, 1, 2, 4, 5]].any()  # the words agree there
    assert np.allclose(e.contributions[3].sum(), 1)


def test_integrated_gradients_of_the_difference_are_complete(tiny_model, forced):
    e = explain_contrast(tiny_model, forced, FOIL, "integrated-gradients")
    assert e.attribution.completeness < 0.05  # rows sum to the difference's change
    raw = e.attribution.raw
    assert raw[3].any() and not raw[[0, 1, 2, 4, 5]].any()
    assert not raw[3, len(forced.src_ids) + 4 :].any()  # no later prefix token counts


def test_gradient_times_input_is_linear_in_the_two_log_probabilities(tiny_model, forced):
    from core.attribution.contrast import contrast_pick
    from core.attribution.gradients import embedding_task, grad_input

    p = tiny_model.forced(forced.src_ids, forced.out_ids)

    def task(foil):
        return embedding_task(tiny_model, p, contrast_pick(tiny_model, forced, foil))

    foil = foil_ids(tiny_model, forced, FOIL)
    g = grad_input(task(foil)).scores  # (T, S + T)
    same = grad_input(task(list(forced.out_ids))).scores
    assert torch.allclose(same, torch.zeros_like(same))  # y' = y: nothing to explain
    assert g[3].abs().sum() > 0


def test_a_hugging_face_model_contrasts(hf_loaded):
    hm = hf_loaded["marian"]
    t = hm.force("i am cold .", "je suis froid .", DecodeSettings())
    for method in CONTRAST_METHODS:
        e = explain_contrast(hm, t, "je suis chaud .", method)
        assert e.attribution.extra["contrast_steps"] == [2]
        assert e.contributions.shape == (len(t.out_ids), len(t.src_ids) + len(t.out_ids))
        assert e.contributions[2].sum() == pytest.approx(1.0, abs=1e-5)
    own = hm.translate("i am cold .", DecodeSettings(max_len=6))
    assert own.out_ids  # a model's own translation contrasts the same way


def test_the_command_contrasts_and_refuses_methods_that_cannot(val_checkpoint, capsys):
    args = ["--checkpoint", str(val_checkpoint), "--target", TARGET, "--contrast", FOIL]
    assert attribute_cmd.main([*args, "--method", "occlusion", SENTENCE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "occlusion" and out["contrast_steps"] == [3]
    assert out["contrast"][3] == "elle" and out["output"][3] == "moi"
    assert attribute_cmd.main([*args, "--method", "alti", SENTENCE]) == 2
    err = capsys.readouterr().err
    assert "alti cannot contrast" in err and err.count("\n") == 1


def test_the_attribution_section_contrasts_a_candidate_at_a_step(studio_dirs):
    from tests.helpers import assert_clean, run_page_script

    at = run_page_script("attention.py", {"sentence": SENTENCE, "section": "attribution"})
    assert_clean(at)
    assert "Why this word rather than another?" in [h.value for h in at.subheader]
    assert any("ALTI+ and value zeroing cannot" in c.value for c in at.caption)
    at.selectbox(key="atr_contrast_step").set_value(3).run()  # "moi"
    assert_clean(at)
    word = at.selectbox(key="atr_contrast_word")
    assert "moi" not in word.options and word.value in word.options
    for method in CONTRAST_METHODS:
        at.selectbox(key="atr_contrast_method").set_value(method).run()
        assert_clean(at)
        assert not at.error
        (chart,) = [c for c in at.get("plotly_chart") if "rather than" in c.proto.spec]
    assert at.query_params["contrast_step"] == "3"
    assert at.query_params["contrast_method"] == CONTRAST_METHODS[-1]
    assert at.query_params["contrast_word"] == word.value
    assert any(b.label == "Contrast as CSV" for b in at.get("download_button"))
    query = {"sentence": SENTENCE, "section": "attribution", **at.query_params}
    again = run_page_script("attention.py", {k: str(v) for k, v in query.items()})
    assert_clean(again)  # a shared link opens on the same step, word and method
    assert again.selectbox(key="atr_contrast_step").value == 3
    assert again.selectbox(key="atr_contrast_word").value == word.value
    assert again.selectbox(key="atr_contrast_method").value == CONTRAST_METHODS[-1]


def test_the_url_checks_the_contrastive_methods_against_the_librarys_own():
    from pages.ui.view_state import ViewState

    assert ViewState.from_query({"contrast_method": "occlusion"}).contrast_method == "occlusion"
    assert ViewState.from_query({"contrast_method": "alti"}).contrast_method == CONTRAST_METHODS[0]
