"""Tests for core.view_state: what the pages show, through the URL and back."""

from __future__ import annotations

import pytest

from core.attention.view_state import SECTIONS, ViewState, clamp_view
from core.model.checked_translation import DEFAULT_SENTENCE


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
        section="Decoding playback",
        step=3,
        forced="B",
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
        ({"beam": "-2", "max_len": "100000"}, {"beam": 1, "max_len": 500}),
        ({"alpha": "nan"}, {"alpha": 0.6}),
        ({"hide": "true"}, {"hide": True}),
        ({"section": "Sideways", "step": "-4"}, {"section": "Maps", "step": 0}),
        ({"section": "Over training", "step": "x"}, {"section": "Over training", "step": 0}),
        (
            {"section": "Decoding playback", "step": "2"},
            {"section": "Decoding playback", "step": 2},
        ),
    ],
)
def test_view_state_ignores_malformed_values(query, expected):
    state = ViewState.from_query(query)
    assert {k: getattr(state, k) for k in expected} == expected


def test_output_step_travels_only_with_the_playback():
    assert ViewState(section="Decoding playback", step=2).to_query(("section", "step")) == {
        "section": "Decoding playback",
        "step": "2",
    }
    assert ViewState(section="Maps", step=2).to_query(("section", "step")) == {}
    assert set(SECTIONS) >= {"Maps", "Decoding playback", "Over training"}


def test_clamp_view_keeps_layer_and_head_inside_the_model(home_translation):
    maps = home_translation[1]
    state = clamp_view(ViewState(kind="cross", layer=9, head="7", step=99), maps)
    assert (state.layer, state.head) == (1, "3")
    assert state.step == len(maps.output_tokens) - 1
    state = clamp_view(ViewState(kind="cross", head="rollout"), maps)
    assert state.head == "0"
