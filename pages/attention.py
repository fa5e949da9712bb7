"""Attention page: encoder, decoder and cross attention of one sentence, head by head."""

from __future__ import annotations

import streamlit as st

from core.attention.kinds import reading_hint
from core.attention.view_state import SECTION_KEYS, ViewState, clamp_view
from core.model.decode import TranslationError
from pages.ui import ablation_view, compare_view, maps_view, playback_view, training_view
from pages.ui.cached import sentence_maps, translate
from pages.ui.frame import ensure_app_navigation, footer, link
from pages.ui.model_picker import pick_model
from pages.ui.section_inputs import SectionInputs
from pages.ui.text import md
from pages.ui.view_controls import view_controls
from pages.ui.view_widgets import (
    ATTENTION_KEYS,
    TRANSLATE_KEYS,
    sentence_input,
    view_state,
    widget_default,
    write_url,
)

SECTIONS = {  # section key (core.attention.view_state.SECTION_KEYS) -> (label, what draws it)
    "maps": ("Maps", maps_view.maps_section),
    "playback": ("Decoding playback", playback_view.playback_section),
    "training": ("Over training", training_view.training_section),
    "ablation": ("Remove heads", ablation_view.ablation_section),
    "compare": ("Compare", compare_view.comparison_section),
}


def pick_section(state: ViewState) -> str:
    """The "Show" radio (widget ``at_section``) over the sections; kept in the view state."""
    widget_default("at_section", state.section, SECTION_KEYS)
    state.section = st.radio(
        "Show",
        SECTION_KEYS,
        key="at_section",
        horizontal=True,
        format_func=lambda key: SECTIONS[key][0],
    )
    return state.section


def main() -> None:
    """Build the page."""
    ensure_app_navigation()
    st.title("Attention")
    state = view_state()
    picked = pick_model(state, "at")
    if picked is None:
        write_url(state, ("sentence",))
        footer()
        return
    entry, lm = picked
    sentence_input(state, "at")
    settings = state.settings()
    try:
        t = translate(lm, entry.path, entry.mtime, state.sentence, settings)
    except TranslationError as e:
        st.error(md(e))
        write_url(state, ATTENTION_KEYS)
        footer()
        return
    key = (entry.path, entry.mtime, state.sentence, settings)
    pieces = sentence_maps(t, key)
    mode = "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}"
    st.markdown(f"**Translation ({mode}):** {md(t.text) or '(empty)'}")
    for w in t.warnings:
        st.warning(md(w))
    link("translate.py", "Change decoding on the Translate page", state.to_query(TRANSLATE_KEYS))
    clamp_view(state, pieces)
    stretch = view_controls(pieces, state, lm.subword)
    maps = sentence_maps(t, key, state.words)
    section = pick_section(state)
    st.caption(reading_hint(state.kind))
    SECTIONS[section][1](SectionInputs(entry, lm, t, pieces, maps, state, stretch))
    write_url(state, ATTENTION_KEYS)
    footer()


main()
