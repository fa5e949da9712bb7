"""A translation the user types, explained like the model's own (issue 35, item 1): the
target is teacher-forced after the sentence, every map and attribution method reads it, and
each target token carries its probability and rank under the model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core import attribute as attribute_cmd
from core.attribution.explain import explain, in_words
from core.model import hugging_face as hf
from core.model.checked_translation import translate_sentence
from core.model.parts import DecodeSettings, TranslationError, scored
from core.model.studio_model import StudioModel
from tests.helpers import assert_clean, plain, run_page_script
from tests.hf_tiny import FAMILIES

SENTENCE = "i'm home ."


def test_a_rank_counts_the_tokens_the_model_prefers():
    logp = torch.tensor([[0.1, 0.5, 0.4], [0.2, 0.2, 0.6]]).log()  # (T, V)
    logps, ranks = scored(logp, [2, 0])
    assert ranks == [2, 2]  # 0.4 behind 0.5; 0.2 tied with 0.2 (the better rank), behind 0.6
    assert np.exp(logps) == pytest.approx([0.4, 0.2])
    assert scored(logp, [1, 2])[1] == [1, 1]


def test_forcing_the_models_own_translation_gives_back_that_translation(tiny_model):
    own = translate_sentence(tiny_model, SENTENCE)
    forced = translate_sentence(tiny_model, SENTENCE, target=" ".join(own.words))
    assert forced.forced and not own.forced
    assert forced.out_ids == own.out_ids and forced.output_tokens == own.output_tokens
    assert forced.ranks == [1] * len(own.out_ids) == own.ranks  # greedy takes the top token
    assert forced.token_probs == pytest.approx(own.token_probs, abs=1e-5)
    assert forced.log_prob == pytest.approx(own.log_prob, abs=1e-4)
    for kind in ("encoder", "decoder_self", "cross"):  # every map of all three kinds
        assert torch.allclose(
            getattr(forced.attention, kind), getattr(own.attention, kind), atol=1e-5
        )


def test_another_target_is_scored_token_by_token(tiny_model):
    own = translate_sentence(tiny_model, SENTENCE)
    other = " ".join(reversed(own.words))
    forced = translate_sentence(tiny_model, SENTENCE, target=other)
    assert forced.tokens == list(reversed(own.words))
    assert forced.output_tokens[-1] == "<eos>" and len(forced.ranks) == len(forced.out_ids)
    assert forced.log_prob < own.log_prob  # greedy's choice is at least as likely per step
    assert max(forced.ranks) > 1
    assert forced.log_prob == pytest.approx(float(np.log(forced.token_probs).sum()), abs=1e-4)


def test_a_target_that_cannot_be_forced_is_a_message(tiny_model):
    with pytest.raises(TranslationError, match="The target has 61 tokens"):
        translate_sentence(tiny_model, SENTENCE, target="mot " * 61)
    with pytest.raises(TranslationError, match="The target is empty"):
        tiny_model.force(SENTENCE, "  ", DecodeSettings())
    assert not translate_sentence(tiny_model, SENTENCE, target="  ").forced  # none typed


def test_unknown_target_words_are_named(tiny_model):
    forced = translate_sentence(tiny_model, SENTENCE, target="je suis zorglub .")
    assert any("zorglub" in w and "target vocabulary" in w for w in forced.warnings)


@pytest.mark.parametrize("method", ["attention", "alti", "grad-input", "value-zeroing"])
def test_every_method_explains_the_target(tiny_model, method):
    forced = translate_sentence(tiny_model, SENTENCE, target="je suis chez moi .")
    e = explain(tiny_model, forced, method)
    assert e.output == forced.output_tokens and e.prefix == forced.decoder_inputs
    assert e.contributions.shape == (len(e.output), len(e.source) + len(e.prefix))
    assert e.ranks == forced.ranks and e.probabilities == forced.token_probs


@pytest.mark.parametrize("family", FAMILIES)
def test_a_hugging_face_model_scores_a_typed_target(hf_loaded, family):
    hm = hf_loaded[family]
    lang = "__fr__" if family == "m2m_100" else None
    target = "je suis froid ."
    forced = hf.forced_translation(hm, "i am cold .", target, target_lang=lang)
    ids = hf.target_ids(hm, target, lang)
    assert forced.forced and forced.out_ids == ids
    src = hf.encode_source(hm, "i am cold .")
    start = hm.model.config.decoder_start_token_id
    with torch.no_grad():
        logits = hm.model(input_ids=src, decoder_input_ids=torch.tensor([[start, *ids[:-1]]]))
    logp = logits.logits[0].float().log_softmax(-1)  # (T, V)
    for t, token in enumerate(ids):
        assert forced.ranks[t] == 1 + int((logp[t] > logp[t, token]).sum())
        assert forced.token_probs[t] == pytest.approx(float(logp[t, token].exp()), abs=1e-6)
    own = hf.translate(hm, "i am cold .", DecodeSettings(max_len=6), lang)
    first = 1 if lang else 0  # the language code is forced, not chosen
    assert all(r == 1 for r in own.ranks[first:-1])  # greedy takes the top token (the last: a
    # </s> that Marian and BART force at the length cap)


def test_the_command_explains_a_target(val_checkpoint, capsys):
    args = ["--checkpoint", str(val_checkpoint), "--target", "je suis chez moi ."]
    assert attribute_cmd.main([*args, SENTENCE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["output"] == ["je", "suis", "chez", "moi", ".", "<eos>"] and out["target"]
    lm = StudioModel.load(val_checkpoint)
    forced = translate_sentence(lm, SENTENCE, target="je suis chez moi .")
    assert out["rank"] == forced.ranks
    assert out["probability"] == pytest.approx(forced.token_probs, abs=1e-6)
    e = explain(lm, forced, "alti")
    assert np.allclose(out["contributions"], e.contributions, atol=1e-6)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--faithfulness"], "leave out --faithfulness"),
        (["--beam", "4", SENTENCE], "leave out --beam"),
        (["   "], "give a sentence"),
    ],
)
def test_a_target_with_flags_it_cannot_take_is_a_one_line_error(
    val_checkpoint, capsys, extra, message
):
    args = ["--checkpoint", str(val_checkpoint), "--target", "je suis ."]
    assert attribute_cmd.main([*args, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_bpe_models_target_in_words_multiplies_its_pieces(bpe_run):
    lm = StudioModel.load(bpe_run / "last.pt")
    forced = translate_sentence(lm, SENTENCE, target="je suis chez moi .")
    pieces, words = explain(lm, forced, "alti"), in_words(explain(lm, forced, "alti"))
    assert len(words.probabilities) == len(words.output) == len(words.ranks)
    assert np.prod(words.probabilities) == pytest.approx(np.prod(pieces.probabilities))
    assert max(words.ranks) == max(pieces.ranks)


def test_the_translate_page_rates_a_typed_translation(studio_dirs):
    at = run_page_script("translate.py")
    at.text_input(key="tr_target_text").set_value("je suis moi chez .").run()
    assert_clean(at)
    shown = plain("\n".join(m.value for m in at.markdown))
    assert "Your translation, as the model rates it" in [h.value for h in at.subheader]
    table = at.dataframe[1].value
    assert list(table["your token"]) == ["je", "suis", "moi", "chez", ".", "<eos>"]
    lm = StudioModel.load(studio_dirs["checkpoints"] / "fra-eng-small.pt")
    forced = translate_sentence(lm, SENTENCE, target="je suis moi chez .")
    assert list(table["rank"]) == forced.ranks
    assert f"log-probability **{forced.log_prob:.2f}**" in shown
    assert at.query_params["target"] == "je suis moi chez ."
    at.text_input(key="tr_sentence").set_value("i am cold .").run()  # another sentence
    assert at.text_input(key="tr_target_text").value == "" and "target" not in at.query_params


def test_the_attention_page_explains_the_target_in_the_link(studio_dirs):
    query = {"sentence": SENTENCE, "target": "je suis moi chez .", "section": "attribution"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    shown = plain("\n".join(m.value for m in at.markdown))
    assert "Your translation (fed to the decoder):** je suis moi chez ." in shown
    assert at.text_input(key="at_target_text").value == "je suis moi chez ."
    at.text_input(key="at_target_text").set_value("").run()  # back to the model's own
    shown = plain("\n".join(m.value for m in at.markdown))
    assert "Translation (greedy):** je suis chez moi ." in shown
