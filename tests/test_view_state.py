"""Tests for pages.ui.view_state: what the pages show, through the URL and back."""

from __future__ import annotations

import pytest

from core.model.checked_translation import DEFAULT_SENTENCE
from pages.ui.attention.sections import SECTION_FIELDS, SECTION_KEYS, SECTIONS, known_section
from pages.ui.view_state import MAX_REFERENCE_CHARS, OLD_SECTIONS, ViewState, clamp_view


def test_view_state_round_trips_through_the_url():
    state = ViewState(
        model="runs/a/best.pt",
        sentence="go .",
        beam=4,
        alpha=0.8,
        max_len=30,
        kind="encoder",
        layer=1,
        head="rollout",
        hide=True,
        section="playback",
        step=3,
        forced="B",
        reference="je suis calme .",
    )
    query = state.to_query()
    assert all(isinstance(v, str) for v in query.values())
    assert ViewState.from_query(query) == state
    assert set(ViewState().to_query()) == {"model", "sentence", "kind", "layer", "head"}
    assert ViewState().to_query(("sentence", "beam")) == {"sentence": DEFAULT_SENTENCE}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"layer": "x"}, {"layer": 0}),
        ({"layer": "-3"}, {"layer": 0}),
        ({"kind": "sideways"}, {"kind": "cross"}),
        ({"forced": "C"}, {"forced": "A"}),
        ({"head": "7x"}, {"head": "0"}),
        ({"beam": "-2", "max_len": "100000"}, {"beam": 1, "max_len": 200}),
        ({"alpha": "nan"}, {"alpha": 0.6}),
        ({"hide": "true"}, {"hide": True}),
        ({"section": "Sideways", "step": "-4"}, {"section": "maps", "step": 0}),
        ({"section": "training", "step": "x"}, {"section": "training", "step": 0}),
        ({"section": "playback", "step": "2"}, {"section": "playback", "step": 2}),
        ({"section": "Decoding playback", "step": "2"}, {"section": "playback", "step": 2}),
        ({"section": "compare"}, {"section": "compare"}),
        ({"reference": "x" * (MAX_REFERENCE_CHARS + 1)}, {"reference": ""}),
        ({"reference": "il a froid ."}, {"reference": "il a froid ."}),
    ],
)
def test_view_state_ignores_malformed_values(query, expected):
    state = ViewState.from_query(query)
    known_section(state)  # the section picker's check: an unknown key opens the first section
    assert {k: getattr(state, k) for k in expected} == expected


def test_attribution_method_travels_only_with_its_section():
    assert ViewState(section="attribution", method="norm").to_query(
        ("method",), SECTION_FIELDS
    ) == {"method": "norm"}
    assert ViewState(section="maps", method="norm").to_query(("method",), SECTION_FIELDS) == {}
    assert (
        ViewState(section="attribution").to_query(("method",), SECTION_FIELDS) == {}
    )  # the default
    state = ViewState.from_query({"section": "attribution", "method": "rollout"})
    assert (state.section, state.method) == ("attribution", "rollout")
    assert ViewState.from_query({"method": "x" * 3000}).method == ViewState.method


def test_alignment_mode_travels_only_with_its_section():
    assert ViewState(section="alignment", align="awi").to_query(("align",), SECTION_FIELDS) == {
        "align": "awi"
    }
    assert ViewState(section="maps", align="awi").to_query(("align",), SECTION_FIELDS) == {}
    assert (
        ViewState(section="alignment").to_query(("align",), SECTION_FIELDS) == {}
    )  # the default, AWO
    state = ViewState.from_query({"section": "alignment", "align": "awi"})
    assert (state.section, state.align) == ("alignment", "awi")
    assert ViewState.from_query({"align": "AWI"}).align == "awo"  # only the two modes


def test_output_step_travels_only_with_the_playback():
    assert ViewState(section="playback", step=2).to_query(("section", "step"), SECTION_FIELDS) == {
        "section": "playback",
        "step": "2",
    }
    assert ViewState(section="maps", step=2).to_query(("section", "step"), SECTION_FIELDS) == {}


@pytest.mark.parametrize(("label", "key"), OLD_SECTIONS.items())
def test_a_link_with_an_old_section_label_opens_that_section(label, key):
    """Links made before the section keys carried the label shown then (section=Remove+heads)."""
    assert key in SECTION_KEYS
    state = ViewState.from_query({"section": label})
    assert state.section == key
    assert state.to_query(("section",)) == ({} if key == SECTION_KEYS[0] else {"section": key})


def test_reference_belongs_to_its_sentence():
    state = ViewState.from_query({"sentence": "he is cold .", "reference": "il a froid ."})
    assert state.forced_reference() == "il a froid ."
    state.set_sentence("he is cold .")  # the same sentence: the reference stays
    assert state.to_query(("reference",)) == {"reference": "il a froid ."}
    state.set_sentence("i'm home .")  # another: the d2l book's reference, kept out of the URL
    assert state.reference == "" and state.forced_reference() == "je suis chez moi ."
    state.set_reference("je suis chez moi .")
    assert state.to_query(("reference",)) == {}
    state.set_reference("je suis à la maison .")
    assert state.to_query(("reference",)) == {"reference": "je suis à la maison ."}
    assert ViewState(sentence="a new one .").forced_reference() == ""


def test_clamp_view_keeps_layer_and_head_inside_the_model(home_translation):
    maps = home_translation[1]
    state = clamp_view(ViewState(kind="cross", layer=9, head="7", step=99), maps)
    assert (state.layer, state.head) == (1, "3")
    assert state.step == len(maps.output_tokens) - 1
    state = clamp_view(ViewState(kind="cross", head="rollout"), maps)
    assert state.head == "0"


def test_each_sections_fields_are_its_own_and_the_view_states():
    """A new section is one line of SECTIONS: its key, label, view and the fields only it
    writes (each a ViewState field, owned by one section)."""
    owned = [name for s in SECTIONS.values() for name in s.fields]
    assert len(owned) == len(set(owned)) == len(SECTION_FIELDS)
    assert set(owned) <= set(ViewState.__dataclass_fields__)
    assert tuple(SECTIONS) == SECTION_KEYS
    state = ViewState(section="patch", corrupt="the girl is tall .", step=3)
    assert state.to_query(("corrupt", "step"), SECTION_FIELDS) == {"corrupt": "the girl is tall ."}


def test_a_links_values_the_state_cannot_hold_are_listed_with_why():
    """Issue 68, item 6: what a link asked for and did not get, for its one note."""
    query = {
        "layer": "99999999999999999999",
        "kind": "sideways",
        "hide": "maybe",
        "beam": "-3",
        "alpha": "0.60",
        "section": "Decoding playback",
        "ig_steps": "512",
    }
    state = ViewState.from_query(query)
    refused = {name: (asked, shown, why) for name, asked, shown, why in state.refused(query)}
    assert set(refused) == {"layer", "kind", "hide", "beam", "ig_steps"}  # 0.60 is 0.6
    assert refused["beam"] == ("-3", "1", "from 1 to 16")
    assert refused["ig_steps"] == ("512", "256", "from 2 to 256")
    assert refused["kind"][1:] == ("cross", "not one of encoder, decoder_self, cross")
    assert refused["hide"][2] == "not 1 or 0"
    assert state.section == "playback" and state.refused(query) == []  # checked once


def test_clamp_view_says_why_for_the_links_note(home_translation):
    state = ViewState.from_query({"layer": "7", "head": "9"})
    clamp_view(state, home_translation[1])
    refused = {name: why for name, _, _, why in state.refused(["layer", "head"])}
    assert refused["layer"] == "this model's cross-attention has layers 0 to 1"
    assert refused["head"].startswith("this model's cross-attention has heads 0 to 3")
    state = ViewState.from_query({"layer": "-1", "head": "-2", "step": "-5"})
    clamp_view(state, home_translation[1])  # the model's ranges, not the link's limits
    refused = {name: why for name, _, _, why in state.refused(["layer", "head", "step"])}
    assert refused["layer"] == "this model's cross-attention has layers 0 to 1"
    assert refused["head"] == "this model's cross-attention has heads 0 to 3, mean, max"
    assert refused["step"].startswith("this translation has output steps 0 to ")


def test_a_page_the_app_has_not_is_named_from_the_urls_path():
    from pages.ui.frame import unknown_path

    known = ["", "train", "translate", "attention"]
    assert unknown_path("/nosuchpage", "", known) == "nosuchpage"
    assert unknown_path("/", "", known) is None and unknown_path("/train/", "", known) is None
    assert unknown_path("/studio/attention", "/studio", known) is None
    assert unknown_path("/studio/x%20y", "studio", known) == "x y"
