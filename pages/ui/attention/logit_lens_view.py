"""Attention page, "Logit lens" section: each decoder layer's top words at each output step."""

from __future__ import annotations

import streamlit as st

from core.attention.logit_lens import LENS_COLORS
from core.attention.maps import export_name
from core.figures import logit_lens as figs
from pages.ui.attention import cached_inside_head as cached
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.text import md
from pages.ui.view_widgets import widget_default

COLOR_WORDS = {"prob": "probability of the chosen word", "rank": "rank of the chosen word"}


def logit_lens_section(page: SectionInputs) -> None:
    """The lens chart (colour by the chosen word's probability or rank) and what it projects."""
    state = page.state
    key = page.key
    lens = cached.lens(page.lm, page.translation, key)
    widget_default("at_lens", state.lens, LENS_COLORS)
    state.lens = st.radio(
        "Colour",
        LENS_COLORS,
        key="at_lens",
        horizontal=True,
        format_func=lambda c: COLOR_WORDS[c],
    )
    name = export_name(state.model, state.sentence, None, None, None, f"logit lens {state.lens}")
    chart(figs.logit_lens_figure(lens, state.lens), "lens", name=name)
    last, summary = lens.layers - 1, lens.summary()
    how = (
        "pre-LN: the final layer norm comes first, as after its last layer"
        if page.lm.cfg.norm_first
        else "post-LN: each layer's output is already layer-normed, so no norm is added"
    )
    read = (
        "The translation is fed back by teacher forcing: each step reads the words the model "
        "wrote before it."
        if lens.decodes
        else "One pass over the sentence: each row is a predicted position (a mask token, or "
        "every token where there is none), each layer's lens its guess for the word there."
    )
    st.caption(
        md(
            f"Projected: {summary['projected']}. This model is {how}. Layer {last}'s lens is "
            f"the model's own output. {read} {summary['early']} of {summary['steps']} chosen "
            "words are the top word from an earlier layer on."
        )
    )
