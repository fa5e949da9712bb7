"""AppTest tests of a Hugging Face model folder on the Translate and Attention pages: listed
by the picker with its size and languages, translated, its maps shown, heads removed, and one
line where a section cannot read it (``TranslationModel.supports``)."""

from __future__ import annotations

import json
import shutil

import pytest

from core.attention.ablation import HeadSpec, ablated
from core.model.capabilities import NO_HISTORY, replay_problem
from core.model.parts import DecodeSettings
from pages.ui.attention.sections import SECTION_KEYS
from tests.helpers import assert_clean, fra_eng_like, plain, run_page_script


@pytest.fixture
def hf_dirs(studio_dirs, hf_models) -> dict:
    """The studio's folders with the tiny Marian and M2M100 models under checkpoints/."""
    for family in ("marian", "m2m_100"):
        shutil.copytree(hf_models[family], studio_dirs["checkpoints"] / family)
    return studio_dirs


def texts(at) -> str:
    return plain("\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def test_the_translate_page_lists_and_translates_a_model_folder(hf_dirs):
    at = run_page_script(
        "translate.py", {"model": "checkpoints/marian/", "sentence": "i am cold ."}
    )
    assert_clean(at)
    assert at.selectbox(key="tr_model").value == "checkpoints/marian/"
    labels = at.selectbox(key="tr_model").options  # as the picker writes them
    assert any("checkpoints/marian/ · 4 heads · Hugging Face marian · en→fr" in x for x in labels)
    assert "marian · 0.04 M params · 32 wide · 2+2 layers · 4 heads · en→fr" in texts(at)
    assert at.text_input(key="tr_sentence").label == "Source sentence (en)"
    assert "Source tokens as the model saw them" in texts(at)
    assert ":gray-badge[</s>]" in texts(at)


def test_a_multilingual_model_offers_its_target_languages(hf_dirs):
    at = run_page_script("translate.py", {"model": "checkpoints/m2m_100/"})
    assert_clean(at)
    box = at.selectbox(key="tr_target")
    assert box.options == ["__de__", "__en__", "__fr__"] and box.value == "__fr__"
    assert at.dataframe[0].value["output token"].iloc[0] == "__fr__"
    box.set_value("__de__").run()
    assert_clean(at)
    assert at.dataframe[0].value["output token"].iloc[0] == "__de__"
    assert at.query_params["target_lang"] == "__de__"


@pytest.mark.parametrize("section", SECTION_KEYS)
def test_every_attention_section_shows_the_model_or_says_why_not(
    hf_dirs, hf_loaded, section, monkeypatch, tmp_path
):
    query = {"model": "checkpoints/marian/", "sentence": "the boy is tall .", "section": section}
    if section == "attribution":  # faithfulness's sample: fra-eng (a stand-in with its words)
        monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))
    if section == "patch":  # the tiny model writes the same words for both: answers given
        query |= {"corrupt": "the girl is tall .", "patch_ask": "1"}
        query |= {"patch_answer": "garçon", "patch_wrong": "fille"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    problem = hf_loaded["marian"].supports(section)
    if section == "training":  # decided from the disk: no run, no .history beside the folder
        assert problem is None
        problem = replay_problem(False, 0)
        assert problem == NO_HISTORY
    if problem:
        assert plain(at.info[-1].value) == problem
    elif section == "attribution":  # the default method (ALTI+), then value zeroing
        assert len(at.get("plotly_chart")) >= 2  # cross-attention beside the contributions
        assert "not trained here" in texts(at)  # faithfulness: its sample said
        at.selectbox(key="atr_method").set_value("value-zeroing").run()
        assert_clean(at)
        assert not at.info and len(at.get("plotly_chart")) >= 2
    elif section == "alignment":
        assert "Links" in texts(at) and at.get("plotly_chart")
        assert "22 readers scored on" in texts(at)  # the shipped gold set, every reader
    elif section == "inside":  # Marian scales by 1/√d like the paper
        assert "score_j = q·k / √8" in texts(at) and at.get("plotly_chart")
    elif section == "lens":
        assert "lm_head" in texts(at) and at.get("plotly_chart")
    elif section == "patch":  # patching reads a Hugging Face model too: heads and stream
        assert "the answers you gave are “garçon” (clean) and “fille” (corrupted)" in texts(at)
        assert "Logit difference (clean word − corrupted word)" in texts(at)
        assert len(at.get("plotly_chart")) >= 2
    elif section in ("maps", "playback"):
        specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        assert specs, "no map drawn"
        drawn = json.dumps(specs)
        assert "&lt;/s&gt;" in drawn  # the model's own </s>, escaped for Plotly
        assert at.toggle(key="at_hide").label == "Hide </s>/<pad>"  # Marian's own boundaries
        assert section == "playback" or "3:tall" in drawn  # the source on the cross map


def test_removing_heads_changes_the_hugging_face_translation(
    hf_dirs, hf_loaded, monkeypatch, tmp_path
):
    monkeypatch.setenv("FRA_ENG_ZIP", str(fra_eng_like(tmp_path)))  # head importance's sample
    sentence = "the boy is tall ."
    query = {"model": "checkpoints/marian/", "sentence": sentence, "section": "ablation"}
    at = run_page_script("attention.py", query)
    box = at.multiselect(key="ab_heads")
    at = box.set_value([o for o in box.options if o.startswith("Cross ")]).run()
    assert_clean(at)
    assert len(at.multiselect(key="ab_heads").value) == 8  # every cross-attention head
    heads = [HeadSpec("cross", layer, head) for layer in range(2) for head in range(4)]
    with ablated(hf_loaded["marian"], heads):
        cut = hf_loaded["marian"].translate(sentence, DecodeSettings())
    full = hf_loaded["marian"].translate(sentence, DecodeSettings())
    # the tiny Marian's final_logits_bias writes the same words without them: the change
    # is in what the model computes, the translation's log-probability
    assert f"{cut.log_prob:.2f}" != f"{full.log_prob:.2f}"
    shown = [m.value for m in at.metric]
    assert shown == [f"{full.log_prob:.2f}", f"{cut.log_prob:.2f}"]  # original, then removed
    assert at.metric[1].delta == f"{cut.log_prob - full.log_prob:+.2f}"
    assert cut.text in texts(at) and full.text in texts(at)
    assert at.button(key="ab_compute")  # head importance is offered (tests/test_hf_importance.py)


def test_a_hugging_face_translation_is_fitted_by_its_own_tokenizer(hf_loaded):
    """The budget counts the pieces the model's tokenizer really makes."""
    from core.runs import budget
    from pages.ui.cached import fitted

    hm = hf_loaded["marian"]
    settings, note = fitted(hm, "the boy is tall .", DecodeSettings(max_len=200))
    src = len(hm.tokenizer("the boy is tall .")["input_ids"])
    longest = budget.longest_output(vars(hm.cfg), src, 200)
    assert (settings.max_len, bool(note)) == ((longest, True) if longest < 63 else (200, False))


@pytest.mark.parametrize("a", ["checkpoints/marian/", "checkpoints/fra-eng-small.pt"])
def test_a_hugging_face_model_compares_with_the_studios_own_word_by_word(hf_dirs, a):
    b = "checkpoints/fra-eng-small.pt" if a.endswith("/") else "checkpoints/marian/"
    query = {"model": a, "sentence": "i am cold .", "section": "compare", "kind": "cross"}
    at = run_page_script("attention.py", {**query, "other": b})
    assert_clean(at)
    assert at.selectbox(key="cmp_other").value == b
    assert "A and B cut sentences into different pieces" in texts(at)
    assert "Both decoders read A's output" in texts(at)  # the outputs differ: A's is fed
    assert len(at.get("plotly_chart")) >= 3  # A, B and B − A
    at.radio(key="cmp_mode").set_value("two sentences").run()
    assert_clean(at)
    label = "Second source sentence (en) (B)" if a.endswith("/") else "Second English sentence (B)"
    assert at.text_input(key="cmp_sentence").label == label


def test_a_sentencepiece_models_candidates_are_written_as_its_tokens(studio_dirs, hf_models):
    """Issue 53, items 2 and 7: candidates kept SentencePiece's ▁, so Attribution's "Rather
    than" opened on the written word itself ("▁respect" is not "respect") and the section
    started red; Translate called a SentencePiece tokenizer "BPE"."""
    shutil.copytree(hf_models["marian-spm"], studio_dirs["checkpoints"] / "spm")
    query = {"model": "checkpoints/spm/", "sentence": "the boy is tall ."}
    at = run_page_script("translate.py", query)
    assert_clean(at)
    candidates = at.dataframe[-1].value.astype(str).to_numpy().ravel().tolist()
    assert not any("\u2581" in c for c in candidates)
    if "##" in texts(at):
        assert "reads SentencePiece pieces" in texts(at) and "BPE" not in texts(at)
    at = run_page_script("attention.py", {**query, "section": "attribution"})
    assert_clean(at)
    assert not any("own word" in e.value for e in at.error)
    rather = at.selectbox(key="atr_contrast_word")
    chosen = at.selectbox(key="atr_contrast_step")
    written = chosen.format_func(chosen.value).split(": ", 1)[1]  # "3: respect"
    assert not any("\u2581" in o for o in rather.options)
    assert written not in rather.options and rather.value != written


def test_the_tokenizers_algorithm_is_named(hf_loaded):
    assert hf_loaded["marian-spm"].pieces_name == "SentencePiece"
    assert hf_loaded["marian"].pieces_name == "word-level"
