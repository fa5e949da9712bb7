"""AppTest tests of the Translate page (run on its own, without app.py)."""

from __future__ import annotations

import shutil

import pytest
import torch
from streamlit.testing.v1 import AppTest

from core.corpus.text import D2L_TEST_PAIRS
from tests.helpers import VAL_DATA, assert_clean, plain, run_page_script


def run_page(query: dict | None = None) -> AppTest:
    """Run the page once (with URL query parameters) and return the test app."""
    return run_page_script("translate.py", query)


def texts(at: AppTest) -> str:
    """All Markdown and captions of the page, joined, as they read (escapes removed)."""
    return plain(raw_texts(at))


def raw_texts(at: AppTest) -> str:
    """All Markdown and captions of the page, joined, as Markdown source."""
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_renders_with_the_shipped_checkpoint(studio_dirs):
    at = run_page()
    assert_clean(at)
    assert at.selectbox(key="tr_model").value == "checkpoints/fra-eng-small.pt"
    assert "### je suis chez moi ." in texts(at)
    assert ":blue-badge[i'm]" in texts(at) and ":gray-badge[<eos>]" in texts(at)
    topk = at.dataframe[0].value
    assert list(topk["output token"]) == ["je", "suis", "chez", "moi", ".", "<eos>"]
    assert "Tatoeba" not in texts(at)  # trained on tiny.tsv: no credit (test_app_first_steps)
    assert at.query_params["model"] == "checkpoints/fra-eng-small.pt"
    assert at.query_params["sentence"] == "i'm home ."


def test_sentence_from_the_url_and_typed(studio_dirs):
    at = run_page({"sentence": "go ."})
    assert "### va !" in texts(at)
    at.text_input(key="tr_sentence").set_value("he's calm .").run()
    assert_clean(at)
    assert "### il est calme ." in texts(at)
    assert at.query_params["sentence"] == "he's calm ."


def test_beam_search(studio_dirs):
    at = run_page()
    at.radio(key="tr_mode").set_value("Beam search").run()
    at.number_input(key="tr_beam").set_value(3).run()
    assert_clean(at)
    assert "### je suis chez moi ." in texts(at)
    assert "beam 3, α 0.6" in texts(at)
    assert at.query_params["beam"] == "3"
    at.radio(key="tr_mode").set_value("Greedy").run()
    assert "beam" not in at.query_params


@pytest.mark.parametrize(
    ("sentence", "message"),
    [
        ("", "empty"),
        ("zorglub blorp", "None of these words"),
        ("go . " * 40, "at most 60"),
    ],
)
def test_bad_input_gives_a_clear_message(studio_dirs, sentence, message):
    at = run_page()
    at.text_input(key="tr_sentence").set_value(sentence).run()
    assert_clean(at)
    assert len(at.error) == 1 and message in plain(at.error[0].value)
    assert not at.dataframe or "output token" not in at.dataframe[0].value


LONG_PASTE = ("i'm home . " * 154)[:1538]  # a 1,538-character paste: 419 tokens


def test_a_long_paste_is_kept_and_refused_with_its_length(studio_dirs):
    """The box keeps a long paste whole (no character cap drops it) and the page names why."""
    assert len(LONG_PASTE) == 1538
    at = run_page()
    box = at.text_input(key="tr_sentence")
    assert not box.max_chars or box.max_chars >= 100_000
    box.set_value(LONG_PASTE).run()
    assert_clean(at)
    assert at.text_input(key="tr_sentence").value == LONG_PASTE
    (error,) = [plain(e.value) for e in at.error]
    assert "The sentence has 419 tokens (1,538 characters)" in error
    assert "at most 60 tokens" in error and "empty" not in error
    assert at.query_params["sentence"] == LONG_PASTE  # a shared link keeps it too


def test_unknown_words_are_marked(studio_dirs):
    at = run_page({"sentence": "i'm home zorglub ."})
    assert_clean(at)
    assert ":red-badge[zorglub]" in texts(at)
    assert any("zorglub" in w.value for w in at.warning)


MARKUP = "**x** :red[y] $z$ <b>"  # bold, a Streamlit colour directive, math, HTML
ESCAPED = r"\*\*x\*\* \:red\[y\] \$z\$ \<b\>"


def test_markdown_in_the_sentence_is_shown_literally(studio_dirs):
    at = run_page({"sentence": f"i'm home {MARKUP}"})
    assert_clean(at)
    for token in ESCAPED.split():
        assert f":red-badge[{token}]" in raw_texts(at)  # unknown words, escaped
    (warning,) = [w.value for w in at.warning]
    assert all(token in warning for token in ESCAPED.split())
    assert (
        plain(warning)
        == f"Not in the model's vocabulary (read as <unk>): {MARKUP.replace(' ', ', ')}."
    )
    at.text_input(key="tr_sentence").set_value(MARKUP).run()  # no known word: an error
    assert_clean(at)
    assert ESCAPED in at.error[0].value and MARKUP in plain(at.error[0].value)


def test_unknown_model_from_the_url_falls_back_with_a_warning(studio_dirs):
    at = run_page({"model": "checkpoints/**gone**.pt"})
    assert_clean(at)
    assert at.selectbox(key="tr_model").value == "checkpoints/fra-eng-small.pt"
    (warning,) = [plain(w.value) for w in at.warning]
    assert "`model=checkpoints/**gone**.pt`" in warning and "not found" in warning
    assert "### je suis chez moi ." in texts(at)


def test_d2l_check_in_one_click(studio_dirs):
    at = run_page()
    assert not at.metric
    at.button(key="tr_d2l").click().run()
    assert_clean(at)
    assert at.metric[0].value == "100.0"
    rows = at.dataframe[-1].value
    assert list(rows["translation"]) == [
        "va !",
        "j'ai perdu .",
        "il est calme .",
        "je suis chez moi .",
    ]


def test_no_model_points_to_the_train_page(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "none"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "none-either"))
    at = run_page()
    assert_clean(at)
    assert "No trained model is available" in at.error[0].value
    assert "Train page" in at.error[0].value


def test_damaged_files_are_listed_not_fatal(studio_dirs):
    (studio_dirs["checkpoints"] / "broken.pt").write_bytes(b"\x00garbage")
    at = run_page()
    assert_clean(at)
    assert "checkpoints/broken.pt" not in at.selectbox(key="tr_model").options
    assert any("broken.pt" in m.value for m in at.expander[0].markdown)
    assert "### je suis chez moi ." in texts(at)


def test_model_choice_lists_runs_newest_first(studio_dirs):
    at = run_page()
    options = at.selectbox(key="tr_model").options
    assert len(options) == 3 and any("runs/tiny/best.pt" in o for o in options)
    at.selectbox(key="tr_model").set_value("runs/tiny/best.pt").run()
    assert_clean(at)
    assert at.query_params["model"] == "runs/tiny/best.pt"


def test_validation_sentence_fills_the_box_and_shows_references(studio_dirs, tiny_corpus):
    ckpt = torch.load(studio_dirs["checkpoints"] / "fra-eng-small.pt", weights_only=True)
    ckpt["data_config"] = {**VAL_DATA, "num_train": 20}  # found by name and SHA-1
    torch.save(ckpt, studio_dirs["checkpoints"] / "fra-eng-small.pt")
    shutil.rmtree(studio_dirs["runs"])
    at = run_page()
    at.toggle(key="tr_use_val").set_value(True).run()
    assert_clean(at)
    assert at.selectbox(key="tr_val").options[0] == "i am tall ."
    at.selectbox(key="tr_val").set_value("he is cold .").run()
    assert_clean(at)
    assert at.text_input(key="tr_sentence").value == "he is cold ."
    assert "**References:** `il a froid .`" in texts(at)
    assert "### il a froid ." in texts(at)
    # the first reference travels in the view (and URL) to the Attention page's teacher forcing
    assert at.query_params["reference"] == "il a froid ."
    shared = {k: at.query_params[k] for k in at.query_params} | {"section": "playback"}
    attention = run_page_script("attention.py", shared)
    assert_clean(attention)
    assert attention.text_input(key="at_ref").value == "il a froid ."
    at.text_input(key="tr_sentence").set_value("he is tall .").run()
    assert "reference" not in at.query_params  # it was the other sentence's


def test_real_shipped_model(shipped_model_dirs):
    at = run_page({"sentence": "i'm home ."})
    assert_clean(at)
    assert at.selectbox(key="tr_model").value == "checkpoints/fra-eng-small.pt"
    assert "### " in texts(at) and not at.error
    at.button(key="tr_d2l").click().run()
    assert_clean(at)
    assert 0.0 <= float(at.metric[0].value) <= 100.0


@pytest.mark.parametrize(
    ("query", "beam", "alpha", "max_len"),
    [
        ({"beam": "4", "alpha": "1000"}, 4, 2.0, 50),  # OverflowError in the beam before
        ({"beam": "4", "alpha": "-1000"}, 4, 0.0, 50),  # ZeroDivisionError before
        ({"max_len": "300"}, 4, 0.6, 200),  # the widget reset to 1 before
        ({"max_len": "-5", "beam": "999"}, 16, 0.6, 1),
        ({"alpha": "nan", "beam": "2", "max_len": "1e9"}, 2, 0.6, 50),
    ],
)
def test_url_values_land_inside_the_widgets_ranges(studio_dirs, query, beam, alpha, max_len):
    at = run_page(query)
    assert_clean(at)
    assert at.number_input(key="tr_beam").value == beam
    assert at.number_input(key="tr_alpha").value == pytest.approx(alpha)
    assert at.number_input(key="tr_max_len").value == max_len
    assert at.query_params.get("max_len", "50") == str(max_len)


def test_a_paste_longer_than_the_page_reads_is_named_in_one_line(studio_dirs):
    """Issue 49, item 9: a 10,000-character paste is named, not tokenised at every rerun."""
    from pages.ui.view_state import MAX_TEXT_CHARS

    at = run_page_script("translate.py")
    at.text_input(key="tr_sentence").set_value("go " * 5000).run()
    assert not at.exception
    assert any(f"at most {MAX_TEXT_CHARS:,}" in e.value for e in at.error)


def test_a_run_still_starting_is_not_listed_as_a_broken_model(studio_dirs):
    """Issue 53, item 8: "1 model file(s) cannot be used" for a run that was only starting."""
    starting = studio_dirs["runs"] / "20260102-000000-small"
    starting.mkdir()
    (starting / "config.json").write_text("{}")
    at = run_page_script("translate.py")
    assert_clean(at)
    assert not [e for e in at.expander if "cannot be used" in e.label]
    assert any("Still starting, no checkpoint yet" in c.value for c in at.caption)
    assert any("20260102-000000-small" in c.value for c in at.caption)


def test_a_links_sentence_past_its_limit_is_named_not_silently_replaced(studio_dirs):
    """Issue 53, item 8: a shared URL's long sentence silently became "i'm home ."."""
    from pages.ui.view_state import MAX_TEXT_CHARS

    at = run_page({"sentence": "go " * (MAX_TEXT_CHARS // 3 + 10)})
    assert_clean(at)
    (warning,) = [plain(w.value) for w in at.warning if "too long for a link" in w.value]
    assert "The link asked for `sentence=go go" in warning and "type it in the box" in warning
    at.run()  # said once, on the run that read the link
    assert not [w for w in at.warning if "too long for a link" in w.value]


def test_a_french_to_english_model_reads_french_and_shows_its_own_example(studio_dirs, reverse_run):
    shutil.copytree(reverse_run, studio_dirs["runs"] / "fr-en")
    at = run_page({"model": "runs/fr-en/last.pt"})
    assert_clean(at)
    box = at.text_input(key="tr_sentence")
    assert box.label == "French sentence" and box.value == "je suis chez moi ."
    assert at.query_params["sentence"] == "je suis chez moi ."
    assert not at.error  # the tiny model reads its French words
    at.selectbox(key="tr_model").set_value("checkpoints/fra-eng-small.pt").run()
    assert_clean(at)
    assert at.text_input(key="tr_sentence").value == "i'm home ."  # back to English's example
    at.text_input(key="tr_sentence").set_value("he's calm .").run()
    at.selectbox(key="tr_model").set_value("runs/fr-en/last.pt").run()
    assert at.text_input(key="tr_sentence").value == "he's calm ."  # a typed sentence stays


def test_the_d2l_check_of_a_french_to_english_model_runs_french_to_english(
    studio_dirs, reverse_run
):
    """It once fed a fr→en model the book's English sentences and scored against the
    French; it now runs the pairs reversed, and the caption says which way it runs."""
    shutil.copytree(reverse_run, studio_dirs["runs"] / "fr-en")
    at = run_page({"model": "checkpoints/fra-eng-small.pt"})
    said = next(plain(c.value) for c in at.caption if plain(c.value).startswith("Runs "))
    assert said.startswith("Runs English → French: translates “go .”")
    at.selectbox(key="tr_model").set_value("runs/fr-en/last.pt").run()
    assert_clean(at)
    said = next(plain(c.value) for c in at.caption if plain(c.value).startswith("Runs "))
    assert said.startswith("Runs French → English: translates “va !”, “j'ai perdu .”")
    assert "against the book's English sentences" in said
    at.button(key="tr_d2l").click().run()
    assert_clean(at)
    rows = at.dataframe[-1].value
    assert list(rows["source"]) == [fr for _, fr in D2L_TEST_PAIRS]
    assert list(rows["reference"]) == [en for en, _ in D2L_TEST_PAIRS]
    assert at.metric[0].label == "Corpus BLEU (sacreBLEU, up to 3-grams)"
