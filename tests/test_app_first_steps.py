"""AppTests of what a new user meets first with the shipped models: each page credits the data
its model was trained on (Tatoeba for the translators, nothing for the induction model's random
tokens), the Train form credits fra-eng where it is chosen, and the playback's comparison
names a typed translation as what it shows; "Merge pieces into words" is greyed out where no
token continues a word."""

from __future__ import annotations

import json
import shutil

import pytest

from core.corpus.source import FRA_ENG_SHA1
from core.corpus.text import ATTRIBUTION
from core.corpus.user_files import data_credit
from tests import helpers
from tests.helpers import ROOT, assert_clean, plain, run_page_script
from tests.test_app_sequence_models import SHIPPED

TRANSLATOR = ROOT / "checkpoints" / "fra-eng-small.pt"  # trained on fra-eng (Tatoeba)
DECODER = ROOT / "checkpoints" / "fra-eng-decoder.hf"  # BPE pieces, on fra-eng too
CREDIT = "Data: English-French pairs from the Tatoeba Project"


@pytest.fixture
def shipped(tmp_path, monkeypatch) -> dict:
    """checkpoints/ with the shipped translator, decoder-only translator and induction model;
    runs/ empty."""
    dirs = helpers.empty_studio_dirs(tmp_path, monkeypatch)
    shutil.copy(TRANSLATOR, dirs["checkpoints"] / TRANSLATOR.name)
    shutil.copytree(SHIPPED, dirs["checkpoints"] / SHIPPED.name)
    shutil.copytree(DECODER, dirs["checkpoints"] / DECODER.name)
    return dirs


def page(script: str, **query):
    at = run_page_script(script, query)
    assert_clean(at)
    assert not at.error, [plain(e.value) for e in at.error]
    return at


def credits(at) -> list[str]:
    return [plain(c.value) for c in at.caption if c.value.startswith("Data:")]


@pytest.mark.parametrize(
    "data, owed",
    [
        ({"source": "fra-eng", "max_len": 12}, True),
        ({"source": "fra-eng.zip", "source_sha1": "0" * 40}, True),  # d2l's file, by name
        ({"source": "pairs.tsv", "source_sha1": FRA_ENG_SHA1}, True),  # by its SHA-1
        ({"source": "fra-eng", "task": "induction"}, False),  # random tokens, no corpus read
        ({"source": "mes-paires.tsv", "source_sha1": "1" * 40}, False),  # a file of one's own
        ({}, False),  # a model not trained here records no data
        (None, False),
    ],
)
def test_the_credit_follows_the_recorded_data(data, owed):
    assert data_credit(data) == (ATTRIBUTION if owed else "")


@pytest.mark.parametrize("script", ["attention.py", "translate.py"])
def test_the_induction_model_owes_tatoeba_nothing(shipped, script):
    at = page(script, model=f"checkpoints/{SHIPPED.name}/")
    assert at.selectbox(key=f"{script[:2]}_model").value == f"checkpoints/{SHIPPED.name}/"
    assert not credits(at)


@pytest.mark.parametrize("script", ["attention.py", "translate.py"])
def test_a_translator_trained_on_fra_eng_credits_tatoeba(shipped, script):
    at = page(script, model=f"checkpoints/{TRANSLATOR.name}")
    (credit,) = credits(at)
    assert credit == f"Data: {ATTRIBUTION}" and credit.startswith(CREDIT)


def test_the_train_form_credits_fra_eng_where_it_is_chosen(shipped, monkeypatch):
    monkeypatch.setenv("FRA_ENG_ZIP", str(ROOT / "tests" / "data" / "tiny.tsv"))  # no network
    at = page("train.py")  # no run yet: the form is open on its first preset, on fra-eng
    assert at.radio(key="data_source").value == "fra-eng"
    assert credits(at) == [f"Data: {ATTRIBUTION}"]
    at.radio(key="preset").set_value("induction").run()  # random tokens: no corpus chosen
    assert not credits(at)


def chart_titles(at) -> list[str]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return [s["layout"]["title"]["text"].replace("<br>", " ") for s in specs]


def test_a_typed_translation_is_not_called_free_running(shipped):
    model = f"checkpoints/{TRANSLATOR.name}"
    at = page("attention.py", model=model, section="playback", target="je suis moi .")
    assert at.text_input(key="at_ref").value == "je suis chez moi ."  # the book's reference
    typed, reference = chart_titles(at)[-2:]
    assert "your translation" in typed and "free-running" not in typed
    assert "teacher-forced (the reference)" in reference
    assert "Your translation vs a reference" in [s.value for s in at.subheader]
    assert not [t for t in chart_titles(at) if "free-running" in t]
    assert any("empty “Your translation” above" in c.value for c in at.caption)
    own = page("attention.py", model=model, section="playback")  # nothing typed: its own
    assert "free-running (the model's own output)" in chart_titles(own)[-2]
    assert "Teacher-forced vs free-running" in [s.value for s in own.subheader]


def test_merging_pieces_is_offered_only_where_a_token_continues_a_word(shipped):
    at = page("attention.py", model=f"checkpoints/{SHIPPED.name}/")  # t1 … t255: whole tokens
    merge = at.toggle(key="at_words")
    assert merge.disabled and "nothing to merge" in merge.help
    decoder = f"checkpoints/{DECODER.name}/"
    whole = page("attention.py", model=decoder, sentence="i'm home .")
    assert whole.toggle(key="at_words").disabled  # BPE, but every word here is one piece
    split = page("attention.py", model=decoder, sentence="the unbelievable elephant .")
    assert not split.toggle(key="at_words").disabled  # un ##b ##el …: merging joins them
    split.toggle(key="at_words").set_value(True).run()
    assert "unbelievable" in json.dumps(
        [json.loads(c.proto.spec) for c in split.get("plotly_chart")]
    )


@pytest.fixture
def masked(tmp_path, monkeypatch) -> str:
    """checkpoints/ with a tiny random BERT alone; its key."""
    from tests.lm_tiny import save_tiny_encoder

    helpers.empty_studio_dirs(tmp_path, monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    save_tiny_encoder(tmp_path / "checkpoints" / "tiny-bert", "bert")
    return "checkpoints/tiny-bert/"


def test_a_masked_models_hide_toggle_names_and_hides_its_own_boundary(masked):
    at = page("attention.py", model=masked, kind="encoder")
    hide = at.toggle(key="at_hide")
    assert hide.label == "Hide [CLS]/[SEP]"
    big = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "[CLS]" in big["layout"]["xaxis"]["ticktext"]
    hide.set_value(True).run()
    big = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert not {"[CLS]", "[SEP]"} & set(big["layout"]["xaxis"]["ticktext"])


def test_a_model_that_fills_in_one_pass_offers_no_decoding_to_change(masked):
    at = page("translate.py", model=masked, beam="3")
    assert not [r for r in at.radio if r.key == "tr_mode"]  # no greedy / beam search to pick
    assert not [n for n in at.number_input if n.key in ("tr_beam", "tr_alpha")]
    said = [plain(c.value) for c in at.caption]
    assert "This model writes no output step by step" in " ".join(said)
    assert any("one pass, no decoding" in c for c in said)
    assert not any("beam 3" in c or "decoder steps" in c for c in said)
    heads = " ".join(m.value for m in at.markdown)
    assert "Top candidates for each mask" in heads and "next token" not in heads
    attention = page("attention.py", model=masked)
    links = [p.proto.label for p in attention.get("page_link")]
    assert not [label for label in links if "Change decoding" in label]
    filled = [plain(m.value) for m in attention.markdown if m.value.startswith("**Filled")]
    assert filled and "(greedy)" not in filled[0]
