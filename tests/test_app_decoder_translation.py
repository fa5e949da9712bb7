"""AppTest of a decoder-only model trained here on translation (issue 66): the "decoder"
preset on the Train page, its folder on the Translate page (read as trained: ``source <eos>
<bos>``, no template) and the Attention page's three blocks."""

from __future__ import annotations

import pytest

from core.model.opened import open_model
from core.model.parts import DecodeSettings
from core.model.trainee import export_folder
from tests import helpers
from tests import test_app_train_induction as train_choices
from tests.helpers import assert_clean, plain, run_page_script
from tests.test_decoder_translation import random_trainee, tiny_corpus

launched = train_choices.launched  # the fixture: each launch the page asks for

NAME = "dec-translation.hf"


@pytest.fixture
def decoder_folder(tmp_path, monkeypatch):
    """checkpoints/ holding one decoder-only translation folder (an untrained tiny trainee)."""
    helpers.empty_studio_dirs(tmp_path, monkeypatch)
    vocab = tiny_corpus().src_vocab
    data = {"source": "tiny.tsv", "split": "head", "min_freq": 1}
    return export_folder(
        random_trainee(vocab), vocab, tmp_path / "checkpoints" / NAME, "translation", data
    )


def page_text(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def test_the_translate_page_reads_the_sentence_as_the_model_trained(decoder_folder):
    expected = open_model(str(decoder_folder)).translate("I'm home.", DecodeSettings())
    at = run_page_script("translate.py", {"model": f"checkpoints/{NAME}/", "sentence": "I'm home."})
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    text = page_text(at)
    assert list(at.dataframe[0].value["output token"]) == expected.output_tokens  # the door's
    assert ":blue-badge[i'm]" in text and ":gray-badge[<eos>]" in text  # preprocessed, as trained
    assert "English:" not in text  # no prompt template around it
    assert "tr_prompt" not in [box.key for box in at.text_area]  # and none offered to type
    assert "translates by prompting" not in text


def test_the_attention_page_draws_its_three_blocks(decoder_folder):
    at = run_page_script(
        "attention.py",
        {"model": f"checkpoints/{NAME}/", "sentence": "I'm home.", "section": "maps"},
    )
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    assert at.get("plotly_chart")


def test_the_decoder_preset_launches_a_decoder_only_model_on_translation(launched):
    """The Train page's "decoder" preset: Task translation, Architecture decoder-only, the
    corpus and its lengths shown (it reads sentence pairs), no encoder layers."""
    from tests.test_app_train import button, train_page

    at = train_page()
    at.radio(key="preset").set_value("decoder").run()
    assert_clean(at)
    assert at.selectbox(key="decoder.data.task").value == "translation"
    assert at.selectbox(key="decoder.model.arch").value == "decoder-only"
    numbers = train_choices.keys_of(at, "number_input")
    assert "decoder.data.max_len" in numbers and "decoder.model.num_kv_heads" in numbers
    assert "decoder.model.num_encoder_layers" not in numbers
    assert "data_source" in train_choices.keys_of(at, "radio")
    button(at, "Launch training").click().run()
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    ((preset, chosen),) = launched
    assert preset == "decoder" and chosen["data"]["task"] == "translation"
    assert chosen["model"]["arch"] == "decoder-only" and chosen["model"]["num_kv_heads"] == 2
