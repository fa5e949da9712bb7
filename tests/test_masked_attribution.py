"""Masked language models (BERT, RoBERTa) through the door for attribution (issue 65 P6): the
filled token at each mask explained over the sentence, every method of the Attribution section
computed from the model's record (``Record.one_stack``) and checked against the model's own
forward from ids (transformers' ``output_attentions``, torch.autograd through
``...ForMaskedLM`` from ``inputs_embeds``); the page shows the section, and ``python -m
core.attribute`` prints what the page's library call returns. A mask token is counted once:
as the decoder input its row reads (its sentence column is 0)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution.explain import explain
from core.attribution.methods import METHODS, attribute
from core.model.parts import DecodeSettings
from tests.helpers import assert_clean, fra_eng_like, plain, run_page_script

FAMILIES = ("bert", "roberta")
SETTINGS = DecodeSettings(max_len=8)


LONG = "the boy is tall and the girl is small but the dog is big ."  # no mask: every token


@pytest.fixture(scope="module", params=FAMILIES)
def filled(request, lm_loaded):
    """(model, its translation of two masks: the filled tokens, the masks' positions)."""
    m = lm_loaded[request.param]
    t = m.translate(f"the {m.mask_token} is {m.mask_token} .", SETTINGS)
    return m, t, m.positions(t.src_ids)


@pytest.fixture(scope="module", params=[(f, s) for f in FAMILIES for s in ("masks", "every")])
def predicted(request, lm_loaded):
    """(model, its translation, the predicted positions): two masks filled, or a sentence
    without a mask predicted at every token, more tokens than one gradient pass's group of
    steps (``gradients.GROUP``)."""
    family, which = request.param
    m = lm_loaded[family]
    sentence = LONG if which == "every" else f"the {m.mask_token} is {m.mask_token} ."
    t = m.translate(sentence, SETTINGS)
    assert which == "masks" or len(t.out_ids) > 10
    return m, t, m.positions(t.src_ids)


def own_logp(m, ids, emb=None):
    """(S, V) log-probabilities of the model's own forward from ids (or word embeddings)."""
    x = torch.tensor([list(ids)])
    if emb is None:
        return m.model(input_ids=x).logits[0].log_softmax(-1)
    return m.model(inputs_embeds=emb[None]).logits[0].log_softmax(-1)


def expected_rows(m, scores: torch.Tensor, at: list[int]) -> np.ndarray:
    """(T, S + T) of (T, S) scores over the sentence: each mask's column moved to the decoder
    inputs' block (counted once, as the decoder input)."""
    T, S = len(at), scores.size(1)
    out = torch.zeros(T, S + T, dtype=scores.dtype)
    out[:, :S] = scores
    out[:, S:] = scores[:, at]
    out[:, at] = 0
    return out.numpy()


def test_masked_models_are_offered_attribution_and_every_method(filled):
    m, _, _ = filled
    assert m.supports("attribution") is None
    assert [x for x in METHODS if m.supports(x)] == []
    for section in ("alignment", "compare", "translate"):  # still refused (patching: at the mask)
        assert "does not translate" in m.supports(section)


def test_gradient_x_input_is_autograd_through_the_models_own_forward(predicted):
    m, t, at = predicted
    a = attribute(m, t.src_ids, t.out_ids, "grad-input")
    emb = m.model.get_input_embeddings()(torch.tensor(t.src_ids)).detach().requires_grad_()
    logp = own_logp(m, t.src_ids, emb)  # (S, V)
    scores = []
    for row, (i, y) in enumerate(zip(at, t.out_ids)):
        (g,) = torch.autograd.grad(logp[i, y], emb, retain_graph=row < len(at) - 1)
        scores.append((g * emb).sum(-1).detach())  # (S,) aggregation "sum"
    raw = expected_rows(m, torch.stack(scores), at)
    assert a.contributions.shape == (len(at), len(t.src_ids) + len(at))
    assert np.allclose(a.raw, raw, atol=1e-5)
    shown = np.abs(raw) / np.abs(raw).sum(1, keepdims=True)
    assert np.allclose(a.contributions, shown, atol=1e-5)


def test_integrated_gradients_are_complete_on_the_filled_token(predicted):
    m, t, at = predicted
    a = attribute(m, t.src_ids, t.out_ids, "integrated-gradients")
    with torch.no_grad():
        logp = own_logp(m, t.src_ids, m.model.get_input_embeddings()(torch.tensor(t.src_ids)))
        zero = own_logp(m, t.src_ids, torch.zeros(len(t.src_ids), m.cfg.d_model))
    gap = [float(logp[i, y] - zero[i, y]) for i, y in zip(at, t.out_ids)]
    assert np.allclose(a.raw.sum(1), gap, rtol=0.02, atol=1e-3)
    assert a.completeness < 0.02


def test_rollout_and_raw_attention_are_the_models_own_attentions(filled):
    m, t, at = filled
    with torch.no_grad():
        o = m.model(input_ids=torch.tensor([t.src_ids]), output_attentions=True)
    weights = [w[0].double() for w in o.attentions]  # L x (H, S, S)
    S = len(t.src_ids)
    whole = torch.eye(S, dtype=torch.double)
    for w in weights:
        whole = (0.5 * w.mean(0) + 0.5 * torch.eye(S, dtype=torch.double)) @ whole
    for method, rows in (("rollout", whole[at]), ("attention", weights[-1].mean(0)[at])):
        expected = expected_rows(m, rows, at)
        expected /= expected.sum(1, keepdims=True)
        got = attribute(m, t.src_ids, t.out_ids, method).contributions
        assert np.allclose(got, expected, atol=1e-5), method


@pytest.mark.parametrize("method", ["norm", "alti", "value-zeroing", "saliency"])
def test_the_other_methods_give_rows_over_the_sentence(filled, method):
    m, t, at = filled
    a = attribute(m, t.src_ids, t.out_ids, method)
    assert a.contributions.shape == (len(at), len(t.src_ids) + len(at))
    assert np.allclose(a.contributions.sum(1), 1, atol=1e-5)
    assert np.all(a.contributions[:, at] == 0)  # each mask counted once


def test_the_command_prints_the_pages_library_call(filled, lm_models, capsys):
    m, t, _ = filled
    family = "bert" if m.mask_token == "[MASK]" else "roberta"
    sentence = f"the {m.mask_token} is {m.mask_token} ."
    argv = ["--checkpoint", str(lm_models[family]), "--method", "alti", sentence]
    assert attribute_cmd.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    page = explain(m, t, "alti", None, "mean").to_json()
    assert out["output"] == page["output"] and out["source"] == page["source"]
    assert np.allclose(out["contributions"], page["contributions"], atol=2e-6)
    assert np.allclose(out["source_share"], page["source_share"], atol=2e-6)


@pytest.mark.parametrize("method", ["grad-input", "alti"])
def test_a_files_lines_are_each_sentences_own_attribution(filled, lm_models, tmp_path, method):
    """``--input``: sentences whose masks sit apart are explained one at a time
    (``supports("shared_passes")``), each line what the sentence alone gives."""
    m, _, _ = filled
    family = "bert" if m.mask_token == "[MASK]" else "roberta"
    mask = m.mask_token
    lines = [f"the boy is {mask} .", f"{mask} cat sat on the {mask} .", LONG]
    (tmp_path / "in.tsv").write_text("\n".join(lines) + "\n")
    argv = ["--checkpoint", str(lm_models[family]), "--method", method]
    argv += ["--input", str(tmp_path / "in.tsv"), "--out", str(tmp_path / "out.jsonl")]
    assert attribute_cmd.main(argv) == 0
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert "shared passes" in m.supports("shared_passes")
    for line, r in zip(lines, records):
        assert "error" not in r, r
        t = m.translate(line, SETTINGS)
        a = attribute(m, t.src_ids, t.out_ids, method)
        assert np.allclose(r["contributions"], a.contributions, atol=2e-6)


@pytest.fixture
def masked_dirs(studio_dirs, lm_models, tmp_path, monkeypatch) -> dict:
    monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))  # faithfulness's sample
    for family in FAMILIES:
        shutil.copytree(lm_models[family], studio_dirs["checkpoints"] / family)
    return studio_dirs


@pytest.mark.parametrize("family", FAMILIES)
def test_the_attention_page_shows_the_attribution_of_a_masked_model(masked_dirs, family):
    mask = "[MASK]" if family == "bert" else "<mask>"
    query = {"model": f"checkpoints/{family}/", "sentence": f"the boy is {mask} ."}
    at = run_page_script("attention.py", query | {"section": "attribution", "method": "alti"})
    assert_clean(at)
    assert not at.info, [plain(i.value) for i in at.info]
    charts = [c.proto.id for c in at.get("plotly_chart")]
    assert len(charts) >= 2  # what attention shows, what the tokens contribute
    assert at.selectbox(key="atr_method").value == "alti"
    said = plain("\n".join(c.value for c in at.caption))
    assert "hidden by the mask token" in said  # faithfulness: ranked (test_masked_faithfulness)
    assert not at.error, [plain(e.value) for e in at.error]
