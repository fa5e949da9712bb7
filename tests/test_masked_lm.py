"""Masked language models (BERT, RoBERTa, DistilBERT, ELECTRA) through the one interface
(``core.model.masked``): tiny random models with their real checkpoints' flags
(``tests/lm_tiny.py``), each figure checked against the model's own forward; every section of
the Attention page shows the model or says in one line why not."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from core.attention.head_roles import head_roles
from core.attention.logit_lens import logit_lens
from core.model import lm_sites
from core.model.hf_folder import describe, size_label
from core.model.masked import MaskedModel
from core.model.parts import DecodeSettings, TranslationError
from pages.ui.attention.sections import SECTION_KEYS
from tests.helpers import assert_clean, plain, run_page_script
from tests.lm_tiny import ENCODER_FAMILIES, ENCODER_REAL_FLAGS

SETTINGS = DecodeSettings()


@pytest.fixture(scope="module", params=ENCODER_FAMILIES)
def mlm(request, lm_loaded) -> MaskedModel:
    return lm_loaded[request.param]


def own(mlm: MaskedModel, ids):
    """The model's own forward: (logits (S, V), L x (H, S, S), L + 1 hidden states (S, D))."""
    with torch.no_grad():
        o = mlm.model(
            input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True
        )
    return o.logits[0], [w[0] for w in o.attentions], [h[0] for h in o.hidden_states]


def test_the_folder_is_described_and_saved_with_the_real_flags(lm_models):
    for family in ENCODER_FAMILIES:
        info = describe(lm_models[family])
        assert info["family"] == "masked language model"
        assert f"{family} · " in size_label(info) and "2 layers · 4 heads · learned" in size_label(
            info
        )
        config = json.loads((lm_models[family] / "config.json").read_text())
        for flag, value in ENCODER_REAL_FLAGS[family].items():
            assert config.get(flag, value) == value, (family, flag)


def test_the_masks_are_filled_with_the_models_own_prediction(mlm):
    """(Its maps and probabilities the model's own, for every family: tests/test_conformance.py.)"""
    t = mlm.translate(f"the boy is {mlm.mask_token} .", SETTINGS)
    logits, _, _ = own(mlm, t.src_ids)
    at = [i for i, x in enumerate(t.src_ids) if x == mlm.mask_id]
    assert len(at) == 1 and t.decoder_inputs == [mlm.mask_token]
    assert t.out_ids == [int(logits[at[0]].argmax())]
    every = mlm.translate("the boy is tall .", SETTINGS)  # no mask: every token predicted
    assert len(every.out_ids) == len(every.src_ids) and "every token" in every.warnings[0]


def test_the_lens_and_the_roles_are_the_models_own(mlm):
    """(Inside a head: tests/test_conformance.py, one test over every family.)"""
    t = mlm.translate(f"the boy is {mlm.mask_token} .", SETTINGS)
    logits, weights, hidden = own(mlm, t.src_ids)
    lens = logit_lens(mlm, t)
    at = t.src_ids.index(mlm.mask_id)
    assert lens.chosen_prob[-1] == pytest.approx([float(logits[at].softmax(-1).max())], abs=1e-5)
    (r,) = head_roles(mlm, t).attentions  # its one attention, both ways: next and last too
    w = torch.stack(weights).numpy()
    assert np.allclose(r.scores["first"], w[..., 1:, 0].mean(-1), atol=1e-6)
    q = np.arange(w.shape[-1] - 1)  # every query but the last, and the token after it
    assert np.allclose(r.scores["next"], w[..., q, q + 1].mean(-1), atol=1e-6)


def test_what_it_cannot_do_is_said_in_one_line(mlm):
    for section in ("alignment", "compare", "translate"):
        assert "does not translate" in mlm.supports(section)
    for section in ("maps", "inside", "lens", "ablation", "project", "attribution", "patch"):
        assert mlm.supports(section) is None  # patching: at the first mask (test_masked_patching)
    assert "first mask" in mlm.supports("patch_prefix")
    # issue 68, item 2: playback said "Step 0: reads [CLS], produces …" of a model that
    # decodes nothing: one pass fills every mask
    for section in ("playback", "decoding"):
        assert "in one pass" in mlm.supports(section)
    with pytest.raises(TranslationError, match="no translation to rate"):
        mlm.force("the boy is tall .", "le garçon", SETTINGS)


def test_the_logit_lens_names_a_masked_lm_s_layers_and_positions(mlm):
    """Issue 68, item 2: the lens of a masked LM said "each decoder layer's top word at each
    output step"; it shows each layer's guess at each masked position."""
    from core.figures.logit_lens import logit_lens_figure

    lens = logit_lens(mlm, mlm.translate(f"the boy is {mlm.mask_token} .", SETTINGS))
    assert not lens.decodes and lens.row_words == "masked position"
    fig = logit_lens_figure(lens)
    title = fig.layout.title.text + fig.layout.xaxis.title.text + fig.layout.yaxis.title.text
    assert "decoder" not in title and "output step" not in title
    assert "each layer's top word at each masked position" in title


@pytest.fixture
def mlm_dirs(studio_dirs, lm_models) -> dict:
    shutil.copytree(lm_models["bert"], studio_dirs["checkpoints"] / "bert")
    return studio_dirs


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


@pytest.mark.parametrize("section", SECTION_KEYS)
def test_every_attention_section_shows_the_model_or_says_why_not(mlm_dirs, lm_loaded, section):
    query = {"model": "checkpoints/bert/", "sentence": "the boy is [MASK] .", "section": section}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    problem = lm_loaded["bert"].supports(section)
    if problem:  # not offered: the link opens the maps, its note says why
        assert at.radio(key="at_section").value == "maps"
        assert any(plain(problem).rstrip(".") in plain(w.value) for w in at.warning), problem
    elif section == "maps":
        assert at.get("plotly_chart") and "What each head does" in texts(at)
        assert "**Filled:**" in at.markdown[0].value or "Filled:" in texts(at)  # no decoding
        assert not [b for b in at.text_input if b.key == "at_target"]  # nothing to rate
    elif section == "ablation":  # heads removed: the mask filled again; importance by MLM loss
        assert at.multiselect(key="ab_heads").options[0] == "Encoder self L0 H0"
        assert "measures the loss" in texts(at)
        at.multiselect(key="ab_heads").set_value(["Encoder self L1 H2"]).run()
        assert_clean(at)
        assert "1 head removed" in texts(at)
    elif section == "project":  # one stack: the sentence's tokens only
        assert at.selectbox(key="space_side").options == ["encoder (source)"]
    elif section == "inside":  # opens on the mask; every token sees every other
        picker = at.selectbox(key="at_query")
        assert picker.options[picker.value] == "4: [MASK]" and "every token seeing" in texts(at)


def test_the_translate_page_fills_the_mask(mlm_dirs):
    at = run_page_script("translate.py", {"model": "checkpoints/bert/"})
    assert_clean(at)
    assert at.text_input(key="tr_sentence").value == "the boy is [MASK] ."
    assert "bert · 0.03 M params" in texts(at) and at.dataframe


def test_the_masked_lm_loss_runs_again_from_a_layer_as_a_whole_pass(mlm):
    from core.attention.ablation import HeadSpec
    from core.attention.head_measures import Measures
    from core.corpus.splits import Split
    from core.measure.sample import sample_of
    from tests import helpers

    sample = sample_of(mlm, Split(helpers.word_pairs(4)), 4)
    masked, wanted = mlm.loss_pair(sample.src_ids[0])
    assert masked.count(mlm.mask_id) == len(wanted) >= 1 and masked[0] == mlm.start_id
    pairs = [mlm.loss_pair(ids) for ids in sample.src_ids]
    sample = dataclasses.replace(sample, encoded=pairs)
    sets = [[], [HeadSpec("encoder", 1, 0)], [HeadSpec("encoder", 0, 3), HeadSpec("encoder", 1, 1)]]
    losses = Measures(mlm, sample).losses(sets)
    for heads, got in zip(sets, losses):
        model = copy.deepcopy(mlm.model)
        width = mlm.cfg.d_model // mlm.cfg.num_heads
        total, count = 0.0, 0
        with torch.no_grad():
            for h in heads:
                dense = lm_sites.output_projection_of(lm_sites.layers_of(model)[h.layer])
                dense.weight[:, h.head * width : (h.head + 1) * width] = 0.0
            for ids, targets in pairs:  # one sentence at a time, no padding
                logits = model(input_ids=torch.tensor([ids])).logits[0]
                at = [i for i, x in enumerate(ids) if x == mlm.mask_id]
                loss = torch.nn.functional.cross_entropy(
                    logits[at], torch.tensor(targets), reduction="sum"
                )
                total, count = total + float(loss), count + len(targets)
        assert got == pytest.approx(total / count, abs=1e-5)


@pytest.mark.parametrize("family", ["distilbert", "electra"])
def test_distilbert_and_electra_open_in_the_attention_page(studio_dirs, lm_models, family):
    """Issue 69, item 13: DistilBERT (W_o inside its attention, a head of four modules) and
    ELECTRA's generator (narrow embeddings) show the maps, Inside a head and the lens."""
    shutil.copytree(lm_models[family], studio_dirs["checkpoints"] / family)
    for section in ("maps", "inside", "lens"):
        query = {"model": f"checkpoints/{family}/", "sentence": "the boy is [MASK] .",
                 "section": section}  # fmt: skip
        at = run_page_script("attention.py", query)
        assert_clean(at)
        assert at.get("plotly_chart"), (family, section)
