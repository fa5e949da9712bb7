"""AppTest tests of the Attention and Translate pages' links: every view setting travels in
the URL and back (issue 69, item 7), and each value a link asked for and did not get is
named in one note (issue 68, item 6); with the edges found beside them (issue 68, items 5
and 10; issue 69, item 8)."""

from __future__ import annotations

import shutil

import pytest
from streamlit.testing.v1 import AppTest

from pages.ui.view_state import MAX_TEXT_CHARS
from tests.helpers import assert_clean, plain, run_page_script

INPUTS = (  # the AppTest element types of the widgets a user sets
    *("radio", "selectbox", "multiselect", "toggle", "checkbox", "number_input"),
    *("text_input", "text_area", "slider", "select_slider", "button_group"),
)
SCENES = [  # URL values that show each section's widgets (and those a choice reveals)
    {"section": "maps"},
    {"section": "playback"},
    {"section": "training"},
    {"section": "ablation"},
    {"section": "compare"},
    {"section": "compare", "other_sentence": "go ."},
    {"section": "attribution", "method": "integrated-gradients"},
    {"section": "alignment"},
    {"section": "inside"},
    {"section": "lens"},
    {"section": "logit_attribution"},
    {"section": "patch", "corrupt": "i'm cold .", "patch_ask": "1"},
    {"section": "patch", "corrupt": "i'm cold .", "patch_ask": "1", "patch_method": "path"},
    {"section": "project", "space_side": "decoder"},
    {"section": "maps", "model": "checkpoints/wide-6x8.pt", "max_len": "12"},  # 6 × 8 heads
]
SCENE_WIDGETS = {  # widget -> the URL key its scene sets (the fresh page must show it)
    "at_section": "section",
    "atr_method": "method",
    "at_corrupt": "corrupt",
    "at_patch_ask": "patch_ask",
    "space_side": "space_side",
}
CHANGES = {  # widget -> a value other than the page's first (in the order they are set)
    "at_sentence": "go .",
    "at_target_text": "va .",
    "at_kind": "decoder_self",
    "at_layer": 1,
    "at_head": "2",
    "at_hide": True,
    "at_stretch": True,
    "at_token": "k1",
    "at_click_axis": "key",
    "at_overview": "lines",
    "at_all_layers": True,
    "at_model": "runs/tiny/last.pt",
    "at_ref": "je suis .",
    "at_step": 2,
    "at_train_step": 100,
    "at_diff_from": 50,
    "at_probe": "go .",
    "at_traj_basis": "validation",
    "at_traj_metric": "diagonal",
    "ab_heads": ["Cross L0 H1"],
    "ab_sentences": 100,
    "cmp_other": "runs/tiny/last.pt",
    "cmp_sentence": "he's calm .",
    "atr_function": "prob",
    "atr_aggregation": "l2",
    "atr_normalisation": "none",
    "atr_baseline": "uniform",
    "atr_steps": 16,
    "atr_rule": "riemann_left",
    "atr_keep_specials": True,
    "atr_samples": 2,
    "atr_contrast_step": 1,
    "atr_contrast_method": "integrated-gradients",
    "atr_contrast_function": "prob",
    "atr_sentences": 100,
    "atr_slow": True,
    "al_all": True,
    "al_both": True,
    "al_mode": "awo",
    "al_reverse": "runs/tiny/last.pt",
    "al_gold": "held-out",  # last: the held-out set's corpus is not here, the panel ends
    "at_query": 2,
    "at_lines_all": True,
    "at_lines_token": "q1",
    "at_lens": "rank",
    "at_dla_step": 1,
    "at_dla_answer": "suis",
    "at_dla_wrong": "es",
    "at_patch_dir": "noise",
    "at_patch_prefix": "je",
    "at_patch_answer": "suis",
    "at_patch_wrong": "es",
    "at_patch_method": "attribution",  # (path hides what to patch: its own scene shows it)
    "at_patch_receivers": "cross:1.0",
    "at_patch_freeze_mlps": True,
    "at_patch_sites": "mlp_positions",
    "atr_contrast_source": "i am hot .",
    "atr_source_spans": "0:2",
    "atr_target_spans": "0:2",
    "space_layer": "all",
    "space_colour": "position",
    "space_method": "umap",
    "space_dims": 3,
    "space_sentences": 100,
    "space_reads": "translation",
}
LAST_OPTION = {"atr_contrast_word"}  # the options depend on the step: the last one is set
NOT_IN_URL = {  # widget -> why its value does not travel in a link
    "cmp_mode": "follows the compared model or sentence, which travel (other, other_sentence)",
    "ab_least": "the count the 'Remove these heads' button uses; the heads travel (ablate)",
    "al_one_indexed": "how uploaded gold files are read: a link carries no files",
}
# Not shown with these tiny models, kept by the same means: at_words (words), cmp_all_layers
# (all_layers), cmp_forced (forced), al_plain (plain), ab_precision (precision),
# space_sentence and space_position (space_pick).


def value_of(at: AppTest, key: str):
    """The value of the widget ``key`` on the page (None when it is not shown)."""
    for kind in INPUTS:
        for w in at.get(kind):
            if getattr(w, "key", None) == key:
                return w.value
    return None


def shown_widgets(at: AppTest) -> dict[str, object]:
    """{key: widget} of every input widget on the page (a segmented control is a button
    group to AppTest)."""
    return {w.key: w for kind in INPUTS for w in at.get(kind) if getattr(w, "key", None)}


def notes(at: AppTest) -> list[str]:
    """The link's notes on the page."""
    return [plain(w.value) for w in at.warning if "The link asked for" in w.value]


def test_every_view_widget_goes_through_the_url_and_back(studio_dirs, wide_checkpoint):
    """Each widget of each section set to another value, the page's URL opened afresh: the
    widget shows that value again, and the link gets no note. A widget the table does not
    know fails the test (a new one must travel, or say why it cannot)."""
    shutil.copy(wide_checkpoint, studio_dirs["checkpoints"] / wide_checkpoint.name)
    walked: set[str] = set()
    for scene in SCENES:
        at = run_page_script("attention.py", scene)
        assert_clean(at)
        shown = shown_widgets(at)
        unknown = set(shown) - set(CHANGES) - LAST_OPTION - set(SCENE_WIDGETS) - set(NOT_IN_URL)
        assert not unknown, f"{scene}: widgets neither kept in the URL nor excused: {unknown}"
        wanted = {}
        for key in [k for k in (*CHANGES, *LAST_OPTION) if k in shown and k not in walked]:
            widget = shown_widgets(at)[key]  # (an earlier change may not hide it)
            options = getattr(widget, "options", None)
            if options is not None and 0 < len(options) < 2:
                continue  # one choice: nothing to change
            value = widget.options[-1] if key in LAST_OPTION else CHANGES[key]
            widget.set_value(value).run()
            assert_clean(at)
            wanted[key] = value_of(at, key)
            assert wanted[key] == value, (scene, key, wanted[key])
            walked.add(key)
        link = {k: at.query_params[k] for k in at.query_params}
        fresh = run_page_script("attention.py", link)
        assert_clean(fresh)
        assert not notes(fresh), (scene, notes(fresh))
        got = {key: value_of(fresh, key) for key in wanted}
        assert got == wanted, f"{scene}: not kept by the URL {link}"
        for key, name in SCENE_WIDGETS.items():
            if key in shown:
                assert value_of(fresh, key) == {"1": True}.get(scene[name], scene[name]), key


@pytest.mark.parametrize(
    ("query", "words"),
    [
        (
            {"section": "bogus", "layer": "99999999999999999999"},
            [
                "`layer=99999999999999999999` and `section=bogus`",
                "layers 0 to 1; showing `layer=1`",
                "`section=maps`",
            ],
        ),
        (
            {"layer": "-1", "head": "-2"},
            [
                "`layer=-1` and `head=-2`",
                "layers 0 to 1; showing `layer=0`",  # this model's range, not the link's
                "heads 0 to 3, mean, max; showing `head=0`",
            ],
        ),
        (
            {"section": "ablation", "ablate": "cross:9:0", "precision": "int4"},
            [
                "`ablate=cross:9:0` and `precision=int4`",
                "2 decoder layers (0..1); left at its default.",
                "`precision`: not one of float32, bfloat16;",  # "" (the machine's) not listed
            ],
        ),
        (
            {"section": "compare", "other": "checkpoints/nope.pt"},
            ["`other=checkpoints/nope.pt`", "not found, cannot be used", "showing `other="],
        ),
        (
            {"section": "training", "train_step": "123456", "diff_from": "7"},
            [
                "`train_step`: not one of this run's snapshot steps, ",
                "`diff_from`: not one of this run's other snapshot steps (B is ",
            ],
        ),
        ({"kind": "sideways"}, ["`kind=sideways`", "encoder, decoder_self, cross"]),
        (
            {"section": "attribution", "method": "magic"},
            ["`method=magic`", "showing `method=alti`"],
        ),
        (
            {"model": "nope.pt", "hide": "maybe"},
            ["`model=nope.pt` and `hide=maybe`", "not found", "`hide`: not 1 or 0"],
        ),
        ({"section": "playback", "step": "50"}, ["output steps 0 to 5; showing `step=5`"]),
        (
            {"section": "logit_attribution", "dla_step": "50"},
            ["`dla_step=50`", "output steps 0 to 5; showing `dla_step=5`"],
        ),
        (
            {"section": "attribution", "method": "integrated-gradients", "baseline": "mask"},
            ["`baseline=mask`", "no MASK token; showing `baseline=zero`"],
        ),
        (
            {"sentence": "go " * (MAX_TEXT_CHARS // 3 + 10)},
            ["too long for a link (at most 2,000): type it in the box"],
        ),
    ],
)
def test_a_link_names_in_one_note_every_value_it_did_not_get(studio_dirs, query, words):
    """Issue 68, item 6: bad URL values were replaced silently."""
    at = run_page_script("attention.py", query)
    assert_clean(at)
    (note,) = notes(at)
    assert [w for w in words if w not in note] == [], note
    assert not [w for w in at.warning if "link" in w.value and "The link asked" not in w.value]
    asked = [v for v in query.values() if len(v) > 3]  # said in the note alone, not again
    assert not [
        w
        for w in at.warning
        if "The link asked" not in w.value and any(v in w.value for v in asked)
    ]
    at.run()  # said once, on the run that read the link
    assert not notes(at)


def test_the_translate_page_names_what_a_link_asked_for_and_did_not_get(studio_dirs):
    at = run_page_script("translate.py", {"beam": "-3", "max_len": "x", "layer": "9"})
    assert_clean(at)
    (note,) = notes(at)
    assert "`beam=-3` and `max_len=x`" in note and "from 1 to 16" in note
    assert "not a whole number" in note and "layer" not in note  # not this page's


def test_a_long_paste_is_named_once_not_also_as_empty(studio_dirs):
    """Issue 68, item 5: 2,490 characters said "at most 2,000" and "The sentence is empty"."""
    paste = ("go . " * 600)[:2490]
    for page, key in (("attention.py", "at_sentence"), ("translate.py", "tr_sentence")):
        at = run_page_script(page)
        at.text_input(key=key).set_value(paste).run()
        assert_clean(at)
        errors = [plain(e.value) for e in at.error]
        assert len(errors) == 1 and "2,490 characters" in errors[0], (page, errors)
        assert not any("empty" in e for e in errors)


def test_integrated_gradients_says_its_chosen_baseline_and_steps(studio_dirs):
    """Issue 68, item 10: the caption said "from zero embeddings in 32 steps" whatever was
    chosen."""
    query = {"section": "attribution", "method": "integrated-gradients"}
    at = run_page_script("attention.py", query)
    at.selectbox(key="atr_baseline").set_value("unk").run()
    at.number_input(key="atr_steps").set_value(64).run()
    assert_clean(at)
    words = [plain(c.value) for c in at.caption if "Sundararajan" in c.value]
    assert words and "from the UNK token's embedding in 64 steps" in words[0]
    assert "zero embeddings" not in words[0] and "32 steps" not in words[0]
    assert {"baseline": "unk", "ig_steps": "64"}.items() <= dict(at.query_params).items()


def test_only_the_baselines_a_model_has_are_offered(studio_dirs):
    """Issue 69, item 8: MASK was offered for a tokenizer without a mask token."""
    query = {"section": "attribution", "method": "integrated-gradients"}
    at = run_page_script("attention.py", query)
    assert_clean(at)
    options = at.selectbox(key="atr_baseline").options
    assert "the MASK token's embedding" not in options
    assert "the UNK token's embedding" in options and "zero embeddings" in options
