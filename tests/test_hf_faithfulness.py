"""Faithfulness of a Hugging Face encoder-decoder (core.attribution.faithfulness through the
one interface): its words among its pieces, occlusion with its own unknown token, batched
log-probabilities equal to the model's own pass, and the table on the page and from the
command."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from core import attribute as attribute_command
from core.attribution import faithfulness as fa
from core.attribution.methods import METHODS
from core.corpus.bpe import join_pieces
from core.corpus.splits import Split
from core.measure.sample import sample_of
from core.model import hugging_face as hf
from tests import helpers
from tests.helpers import assert_clean, fra_eng_like, plain, run_page_script
from tests.test_hf_importance import model_folder


def test_words_are_found_among_sentencepiece_pieces_without_the_specials(hf_loaded):
    hm = hf_loaded["marian-spm"]
    ids = hm.source("the tallest boys are tired .").ids
    tokens = hm.source_tokens(ids)
    spans = fa.source_spans(hm, ids)
    words = [join_pieces(tokens[a:b])[0] for a, b in spans]
    assert words == ["the", "tallest", "boys", "are", "tired", "."]
    assert all(b <= len(ids) - 1 for _, b in spans)  # </s> belongs to no word


def test_a_language_code_belongs_to_no_word(hf_loaded):
    hm = hf_loaded["m2m_100"]
    code = hm.tokenizer.convert_tokens_to_ids("__en__")
    ids = [code, *hm.source("the boy is tall .").ids]  # as M2M100 writes it
    assert hm.source_tokens(ids)[0] == "__en__"
    assert fa.source_spans(hm, ids) == [(i, i + 1) for i in range(1, 6)]


@pytest.mark.parametrize("family", ["marian", "t5", "m2m_100"])
def test_occluded_log_probs_in_one_batch_equal_the_models_own_passes(hf_loaded, family):
    hm = hf_loaded[family]
    target = "__fr__" if family == "m2m_100" else None
    sample = sample_of(hm, Split(helpers.word_pairs(3)), 3, target)
    case = fa.translate_sample(hm, sample, target)[1]
    assert case.out_ids[-1] == hm.model.config.eos_token_id or len(case.out_ids) > 5
    unk = hm.unk_id
    assert unk == hm.tokenizer.unk_token_id is not None  # its own unknown token
    sources = [case.src_ids] + [fa.occluded(case.src_ids, case.spans, [w], unk) for w in (1, 0)]
    assert sources[1] != case.src_ids and unk in sources[1]
    batched = fa.output_logp(hm, sources, case.out_ids)  # (3, T)
    for row, src in zip(batched, sources):
        logp, _ = hf.forced_pass(hm, *hf.forced_inputs(hm, src, case.out_ids))  # (1, T, V)
        own = logp[0].gather(-1, torch.tensor(case.out_ids)[:, None])[:, 0]
        assert torch.allclose(row, own, atol=1e-5)
    assert (batched[0] - batched[1]).abs().max() > 1e-6  # occluding a known word changes it


def test_faithfulness_of_a_model_folder_measures_the_methods_that_read_it(
    hf_models, hf_loaded, tmp_path, monkeypatch, capsys
):
    folder = model_folder(hf_models, tmp_path, monkeypatch, "t5")
    result = fa.faithfulness_for(hf_loaded["t5"], folder, 4, METHODS)
    measured = {r["method"] for r in result.methods}
    assert measured == {*METHODS, fa.RANDOM} - {"integrated-gradients"}  # no IG for T5
    assert result.sentences == 4 and result.tokens > 0
    # the table says which layer and head "raw cross-attention" read
    assert result.row("attention")["name"] == "Raw cross-attention (last layer, mean of heads)"
    for row in result.methods:
        assert row["spearman"] is None or -1 <= row["spearman"] <= 1
        assert len(row["deletion"]) == 3
    assert fa.lookup_faithfulness(folder, hf_loaded["t5"], 4, METHODS).cached
    argv = ["--checkpoint", str(folder), "--faithfulness", "--sentences", "4"]
    assert attribute_command.main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    slow = {"gradient-shap"}  # the default methods: IG (and GradientSHAP) left out
    assert {x["method"] for x in lines} == measured - slow
    by_method = {r["method"]: r["spearman"] for r in result.methods if r["method"] not in slow}
    assert {x["method"]: x["spearman"] for x in lines} == by_method
    assert attribute_command.main([*argv, "--method", "integrated-gradients"]) == 2
    assert "does not converge for T5" in capsys.readouterr().err


def test_the_page_measures_faithfulness_of_a_model_folder(
    studio_dirs, hf_models, tmp_path, monkeypatch
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))
    shutil.copytree(hf_models["marian"], studio_dirs["checkpoints"] / "marian")
    query = {
        "model": "checkpoints/marian/",
        "sentence": "the boy is tall .",
        "section": "attribution",
    }
    at = run_page_script("attention.py", query)
    assert any("not trained here" in c.value for c in at.caption)
    assert not any("Not measured" in c.value for c in at.caption)  # every method reads Marian
    at.button(key="atr_measure").click().run()
    assert_clean(at)
    table = at.dataframe[-1].value
    rows = len(fa.DEFAULT_METHODS) + 1  # saliency and DeepLIFT among them, and the baseline
    assert len(table) == rows and "Random ranking (baseline)" in list(table["method"])
    assert any("all the validation split holds" in plain(m.value) for m in at.markdown)
    assert np.isfinite(table["drop k=1"].astype(float)).any()
