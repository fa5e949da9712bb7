"""AppTest tests of what a new user tripped over in the Attention page's sections (issues 68
and 69): Compare's default model B and an empty output, a masked LM's playback and logit lens,
patching's gap, Alignment's models of the opposite direction, and a sentence a tokenizer
spells out letter by letter (Translate page too)."""

from __future__ import annotations

import os
import shutil
import time

import torch

from core.model.checkpoints import read_checkpoint
from tests.helpers import assert_clean, plain, run_page_script
from tests.test_translation import save_word_level_qwen2


def texts(at) -> str:
    """Every markdown, caption, info and warning of the page, as it reads."""
    parts = [*at.markdown, *at.caption, *at.info, *at.warning]
    return plain("\n".join(p.value for p in parts))


def reversed_copy(checkpoint, dest):
    """A copy of a studio checkpoint whose data settings say it translates French→English."""
    ckpt = read_checkpoint(checkpoint)
    ckpt["data_config"] = {**ckpt.get("data_config", {}), "direction": "fr-en"}
    torch.save(ckpt, dest)
    return dest


def test_compare_opens_on_the_aligned_model_beside_the_shipped_one(studio_dirs, lm_models):
    """Issue 68, item 1: model B defaulted to the newest entry, a BERT folder ("A masked
    language model fills mask tokens: it has no translation to rate")."""
    ckpts = studio_dirs["checkpoints"]
    shutil.rmtree(studio_dirs["runs"] / "tiny")  # as shipped: no run of theirs here
    shutil.copy(ckpts / "fra-eng-small.pt", ckpts / "fra-eng-small-aligned.pt")
    shutil.copytree(lm_models["bert"], ckpts / "bert")
    newest = time.time() + 60
    os.utime(ckpts / "bert" / "config.json", (newest, newest))  # the newest entry of the list
    at = run_page_script("attention.py", {"section": "compare"})
    assert_clean(at)
    assert at.selectbox(key="cmp_other").value == "checkpoints/fra-eng-small-aligned.pt"
    assert not at.error and not any("bert" in o for o in at.selectbox(key="cmp_other").options)
    assert at.query_params["other"] == "checkpoints/fra-eng-small-aligned.pt"


def test_an_empty_output_is_named_not_taken_for_an_empty_reference(studio_dirs, hf_models):
    """Issue 68, item 1: with T5 as model A (an empty output) Compare said "The reference is
    empty: type the translation to force" though nothing was typed."""
    shutil.copytree(hf_models["t5"], studio_dirs["checkpoints"] / "t5")
    query = {"model": "checkpoints/t5/", "sentence": "i am cold .", "section": "compare"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert at.selectbox(key="cmp_other").value == "checkpoints/fra-eng-small.pt"
    assert "reference is empty" not in " ".join(e.value for e in at.error)
    assert "Model A's output is empty (nothing to feed): both decoders read model B's" in texts(at)
    assert at.get("plotly_chart")  # compared on B's output


def test_a_masked_lm_has_no_playback_and_its_lens_reads_the_masks(studio_dirs, lm_models):
    """Issue 68, item 2: playback on BERT said "Step 0: reads [CLS], produces …" and offered a
    reference to feed; the logit lens said "each decoder layer's top word"."""
    shutil.copytree(lm_models["bert"], studio_dirs["checkpoints"] / "bert")
    query = {"model": "checkpoints/bert/", "sentence": "the boy is [MASK] .", "section": "playback"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert "Decoding playback" not in at.radio(key="at_section").options  # not offered:
    assert any("no decoding steps to play back" in plain(w.value) for w in at.warning)  # the note
    assert "Step 0" not in texts(at) and not [b for b in at.text_input if b.key == "at_reference"]
    at = run_page_script("attention.py", query | {"section": "lens"})
    assert_clean(at)
    said = texts(at)
    assert "One pass over the sentence: each row is a predicted position" in said
    assert "teacher forcing" not in said
    title = at.get("plotly_chart")[0].proto.spec
    assert "each layer's top word at each masked position" in title and "decoder" not in title


def test_patching_says_when_the_gap_is_too_small_to_divide_by(studio_dirs, lm_models):
    """Issue 68, item 4: on a random model the clean and corrupted logit differences were a
    hundredth apart, and effects divided by that showed +1.68 and −0.89 with no caveat."""
    from core.attention.patching import patch
    from core.model.opened import open_model

    shutil.copytree(lm_models["llama"], studio_dirs["checkpoints"] / "llama")
    query = {"model": "checkpoints/llama/", "sentence": "the boy is tall .", "section": "patch"}
    query |= {"corrupt": "you are tall .", "patch_ask": "1", "patch_prefix": ""}
    query |= {"patch_answer": "the", "patch_wrong": "he"}
    lm = open_model(str(lm_models["llama"]))
    found = patch(lm, "the boy is tall .", "you are tall .", prefix="", answers=("the", "he"))
    assert abs(found.gap) < 1 and found.caveat  # a random model: the runs barely differ
    at = run_page_script("attention.py", query)
    assert_clean(at)
    assert plain(found.caveat) in [plain(w.value) for w in at.warning]


def test_the_opposite_direction_offers_only_models_of_the_opposite_direction(
    studio_dirs, lm_models
):
    """Issue 69, item 10: "A model of the opposite direction" listed English→French runs,
    BERT and GPT-2."""
    ckpts = studio_dirs["checkpoints"]
    reversed_copy(ckpts / "fra-eng-small.pt", ckpts / "fr-en.pt")
    for family in ("bert", "gpt2"):
        shutil.copytree(lm_models[family], ckpts / family)
    at = run_page_script("attention.py", {"section": "alignment"})
    assert_clean(at)
    offered = [o.split(" · ")[0] for o in at.selectbox(key="al_reverse").options]
    assert offered == ["(none)", "checkpoints/fr-en.pt"]


def test_a_sentence_spelt_out_letter_by_letter_is_said_on_both_pages(studio_dirs, tmp_path):
    """Issue 69, item 11: a Qwen2 folder whose word-level vocabulary transformers reads as
    byte-level translated into broken pieces without a word said."""
    save_word_level_qwen2(studio_dirs["checkpoints"] / "qwen2")
    query = {"model": "checkpoints/qwen2/", "sentence": "the boy is tall ."}
    for page in ("translate.py", "attention.py"):
        at = run_page_script(page, query)
        assert_clean(at)
        warned = [plain(w.value) for w in at.warning if "single characters cut" in w.value]
        assert len(warned) == 1, page
        assert warned[0].startswith("12 of this sentence's 13 pieces"), warned
