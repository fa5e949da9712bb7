"""Head importance of a decoder-only language model: measured by the loss of each sentence's
first reference after its prompt, every head set run again from its lowest layer only
(``core.model.layer_runs``), equal to whole passes; the page and the command show the loss alone."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch

from core import ablate
from core.attention.ablation import HeadSpec
from core.attention.head_measures import Measures
from core.attention.importance import (
    BY_LOSS,
    LOSS_CURVE_POINTS,
    importance_for,
    lookup_importance,
    model_facts,
)
from core.corpus.splits import Split
from core.measure.sample import sample_of
from core.model import sites
from core.model.resumed import resumable
from tests import helpers
from tests.helpers import assert_clean, plain, run_page_script
from tests.lm_tiny import LM_FAMILIES


@pytest.fixture(params=LM_FAMILIES)
def lm(request, lm_loaded):
    return lm_loaded[request.param]


def batch(lm):
    """Two pairs of unequal lengths as the forced passes pad them: (B, S), (B, T), labels."""
    from core.model.batched import forced_batch

    sample = sample_of(lm, Split(helpers.word_pairs(2)), 2)
    return forced_batch(lm, sample.encoded)


def test_running_again_from_any_layer_equals_the_whole_pass(lm):
    src, dec, _ = batch(lm)
    with torch.no_grad():
        whole, again = resumable(lm, src, dec)  # (B, T, D)
        assert torch.allclose(whole, lm.hidden(src, dec), atol=1e-6)
        for start in range(lm.cfg.num_decoder_layers):
            assert torch.allclose(again("decoder_self", start), whole, atol=1e-5)
            gate = torch.ones(lm.cfg.num_heads)
            gate[1] = 0.0
            with lm.rows_gated({("decoder_self", start): gate}):
                expected = lm.hidden(src, dec)
                assert torch.allclose(again("decoder_self", start), expected, atol=1e-5)
            assert not torch.allclose(expected, whole, atol=1e-4)  # the head mattered
    with torch.no_grad(), sites.LayerInputs(lm.model), pytest.raises(RuntimeError):
        again("decoder_self", 0)  # never inside a capture: it would keep its own inputs


@pytest.fixture
def lm_folder(lm_models, tmp_path, monkeypatch):
    """A copy of the tiny Llama's folder, a fra-eng stand-in and the app's folders."""
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    return shutil.copytree(lm_models["llama"], tmp_path / "llama")


def test_a_language_models_importance_is_its_loss_alone(lm_loaded, lm_folder, capsys):
    lm, seen = lm_loaded["llama"], []
    result = importance_for(lm, lm_folder, 5, progress=lambda f, w: seen.append(f))
    assert result.measured == BY_LOSS and result.bleu is None
    assert result.sentences == result.pairs == 5  # each sentence's first reference
    assert len(result.heads) == 8 and "delta_bleu" not in result.frame()
    assert [p["removed"] for p in result.pruning] == list(range(9))  # 8 heads: every point
    assert result.pruning[0]["loss"] == result.loss and "bleu" not in result.pruning[1]
    rises = [r["delta_loss"] for r in result.heads]
    order = result.order()
    assert [rises[h.layer * 4 + h.head] for h in order] == sorted(rises)
    assert result.agreement().keys() == {"loss"}
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
    facts = model_facts(lm)
    cached = lookup_importance(lm_folder, lm.meta, 5, precision=result.precision, model=facts)
    assert cached.heads == result.heads
    other = model_facts(lm.with_prompt("Translate: {src}\nIn French:"))
    assert lookup_importance(lm_folder, lm.meta, 5, precision=result.precision, model=other) is None
    assert ablate.main(["--checkpoint", str(lm_folder), "--sentences", "5"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["measured"] == "loss" and lines[0]["bleu"] is None
    assert "spearman_bleu" not in lines[0] and lines[1:] == result.heads


def test_each_heads_loss_is_the_first_references_loss_without_it(lm_loaded, lm_folder):
    from core.measure.sample import validation_sample
    from core.model.checkpoints import validation_source

    lm = lm_loaded["gpt2"]
    result = importance_for(lm, lm_folder, 4, precision="float32")
    cfg, carried = validation_source(lm.meta)
    sample = validation_sample(lm, cfg, 4, None, carried)
    firsts, at = [], 0
    for refs in sample.references:
        firsts.append(sample.encoded[at])
        at += len(refs)
    heads = [HeadSpec("decoder_self", 1, 3), HeadSpec("decoder_self", 0, 0)]
    first_only = dataclasses.replace(sample, encoded=firsts)
    losses = Measures(lm, first_only).losses([[]] + [[h] for h in heads])
    rows = {(r["layer"], r["head"]): r for r in result.heads}
    assert result.loss == pytest.approx(losses[0], abs=1e-6)
    for h, loss in zip(heads, losses[1:]):
        assert rows[(h.layer, h.head)]["loss"] == pytest.approx(loss, abs=1e-6)


def test_the_page_shows_a_language_models_importance_in_loss(
    studio_dirs, lm_models, tmp_path, monkeypatch
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    shutil.copytree(lm_models["llama"], studio_dirs["checkpoints"] / "llama")
    query = {"model": "checkpoints/llama/", "sentence": "the boy is tall .", "section": "ablation"}
    at = run_page_script("attention.py", query)
    at.number_input(key="ab_sentences").set_value(4)
    at.button(key="ab_compute").click().run()
    assert_clean(at)
    shown = plain(" ".join([m.value for m in at.markdown] + [c.value for c in at.caption]))
    assert "baseline loss" in shown and "on 4 validation sentences" in shown
    line = next(m.value for m in at.markdown if "Removing each head alone" in m.value)
    assert "first reference" in shown and "BLEU" not in line
    assert [t.label for t in at.tabs] == ["Change in loss"]
    assert at.button(key="ab_remove")  # the least important heads can be removed
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Pruning curve" in t and "baseline loss" in t for t in titles)
    assert LOSS_CURVE_POINTS == 10


def test_a_masked_language_models_importance_is_its_masked_lm_loss(
    studio_dirs, lm_models, lm_loaded, tmp_path, monkeypatch
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(helpers.fra_eng_like(tmp_path)))
    folder = shutil.copytree(lm_models["bert"], studio_dirs["checkpoints"] / "bert")
    bert = lm_loaded["bert"]
    result = importance_for(bert, folder, 5)
    assert result.measured == BY_LOSS and result.sentences == 5 and len(result.heads) == 8
    assert {r["kind"] for r in result.heads} == {"encoder"}
    assert any(r["delta_loss"] != 0 for r in result.heads)
    query = {"model": "checkpoints/bert/", "sentence": "the boy is [MASK] .", "section": "ablation"}
    at = run_page_script("attention.py", query)
    at.number_input(key="ab_sentences").set_value(5)
    at.button(key="ab_compute").click().run()  # read from the disk cache
    assert_clean(at)
    shown = plain(" ".join([m.value for m in at.markdown] + [c.value for c in at.caption]))
    assert "masked-LM loss" in shown and "read from the disk cache" in shown


def test_another_threads_pass_leaves_the_kept_inputs_alone(lm_loaded):
    import threading

    lm = lm_loaded["llama"]
    src, dec, _ = batch(lm)
    with torch.no_grad(), sites.LayerInputs(lm.model) as kept:
        other = threading.Thread(target=lambda: lm.hidden(src[:1], dec[:1]))
        other.start()
        other.join()
        assert kept.calls == {}  # the other thread's pass kept nothing here
        lm.model(input_ids=src)
    assert list(kept.calls) == [f"sequence.{i}" for i in range(lm.cfg.num_decoder_layers)]
