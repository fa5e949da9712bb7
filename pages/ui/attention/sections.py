"""The Attention page's sections: each key's label, the view that draws it, the picker."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from core.attention.view_state import SECTION_KEYS, ViewState
from pages.ui.attention import (
    ablation_view,
    alignment_view,
    attribution_view,
    comparison_view,
    inside_head_view,
    logit_lens_view,
    maps_view,
    over_training_view,
    patching_view,
    playback_view,
    projector_view,
)
from pages.ui.attention.alignment_gold_view import open_alignment_on_best
from pages.ui.attention.inputs import SectionInputs
from pages.ui.view_widgets import widget_default


class Section(NamedTuple):
    """One section of the Attention page: its label and the view that draws it."""

    label: str  # shown on the "Show" radio
    draw: Callable[[SectionInputs], None]
    reads_view: bool = True  # whether it reads the kind, layer and head above it


def coming_section(state: ViewState) -> Section:
    """The section this run will draw (the picker's new value on a click), before the picker."""
    key = st.session_state.get("at_section") or state.section
    return SECTIONS.get(key, SECTIONS[state.section])


SECTIONS = {  # key (core.attention.view_state.SECTION_KEYS) -> section
    "maps": Section("Maps", maps_view.maps_section),
    "playback": Section("Decoding playback", playback_view.playback_section),
    "training": Section("Over training", over_training_view.training_section),
    "ablation": Section("Remove heads", ablation_view.ablation_section),
    "compare": Section("Compare", comparison_view.comparison_section),
    "attribution": Section("Attribution", attribution_view.attribution_section),
    "alignment": Section("Alignment", alignment_view.alignment_section),
    "inside": Section("Inside a head", inside_head_view.inside_head_section),
    "lens": Section("Logit lens", logit_lens_view.logit_lens_section, reads_view=False),
    "patch": Section("Patching", patching_view.patching_section, reads_view=False),
    "project": Section("Where tokens live", projector_view.projector_section, reads_view=False),
}


def _opened() -> None:
    """The section picker's callback: Alignment opens on the best reader."""
    if st.session_state.get("at_section") == "alignment":
        open_alignment_on_best()


def pick_section(state: ViewState) -> Section:
    """The "Show" radio (widget ``at_section``) over the sections; kept in the view state."""
    widget_default("at_section", state.section, SECTION_KEYS)
    state.section = st.radio(
        "Show",
        SECTION_KEYS,
        key="at_section",
        horizontal=True,
        format_func=lambda key: SECTIONS[key].label,
        on_change=_opened,
    )
    return SECTIONS[state.section]
