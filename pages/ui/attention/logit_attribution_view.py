"""Attention page, "Direct logit attribution" section: each head's, each feed-forward's and the
embeddings' share of one output step's logit (or logit difference), and the accumulated
stream (``core.attention.logit_attribution``; ``python -m core.logit_attribution`` prints the
same figures)."""

from __future__ import annotations

import streamlit as st

from core.attention.logit_attribution import (
    LogitAttribution,
    LogitAttributionError,
    logit_attribution,
)
from core.attention.maps import export_name
from core.figures.logit_attribution import logit_attribution_figure
from core.model.interface import TranslationModel
from core.model.parts import Translation
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.shared_cache import shared
from pages.ui.text import md
from pages.ui.view_widgets import bounded, widget_default


@shared(spinner="Taking the step's logit apart…")
def attributed(
    _lm: TranslationModel, _t: Translation, key: tuple, step: int, answer: str, wrong: str
) -> LogitAttribution:
    """One step's logit taken apart (``key``: the translation's cache key and the model's
    view key), cached for every session: one teacher-forced pass, as the maps' (not heavy
    work: it waited behind head importance in the server's heavy slot)."""
    return logit_attribution(_lm, _t, step, answer or None, wrong or None)


def _question(page: SectionInputs) -> tuple[int, str, str]:
    """(step, answer, wrong) from the section's widgets, kept in the view state (``dla_step``
    -1: the last step)."""
    t, state = page.translation, page.state
    steps = list(range(len(t.out_ids)))
    if state.dla_step == -1:
        state.granted("dla_step")  # "the last step": the last shown
    state.why["dla_step"] = f"this translation has output steps 0 to {steps[-1]}"
    widget_default("at_dla_step", state.dla_step if state.dla_step in steps else steps[-1], steps)
    left, mid, right = st.columns([2, 1, 1])
    step = left.selectbox(
        "Output step",
        steps,
        key="at_dla_step",
        format_func=lambda s: f"{s}: {t.output_tokens[s]!r} (reads {t.decoder_inputs[s]!r})",
    )
    followed = state.dla_step == -1 and step == steps[-1]  # still the default: the last
    state.dla_step = -1 if followed else step
    for name, where, label in (
        ("dla_answer", mid, "Answer (empty: the word written)"),
        ("dla_wrong", right, "Minus (empty: none)"),
    ):
        widget_default(f"at_{name}", getattr(state, name))
        setattr(state, name, bounded(where.text_input(label, key=f"at_{name}"), "box").strip())
    return step, state.dla_answer, state.dla_wrong


def logit_attribution_section(page: SectionInputs) -> None:
    """The heads × layers grids, the per-layer bars and the accumulated line of one step."""
    if not page.translation.out_ids:
        st.info("There is no output step to take apart: translate a sentence first.")
        return
    if why := page.lm.supports("logit_attribution"):
        st.info(md(why))
        return
    step, answer, wrong = _question(page)
    try:
        key = (*page.key, page.lm.view_key)
        a = attributed(page.lm, page.translation, key, step, answer, wrong)
    except LogitAttributionError as e:
        st.error(md(str(e)))
        return
    name = export_name(page.state.model, page.state.sentence, None, None, None, "logit attribution")
    chart(logit_attribution_figure(a), "logit_attribution", name=name)
    st.caption(
        md(
            f"The model's own logit{' difference' if a.wrong else ''}: {a.logit:.4f}; the "
            f"terms' sum: {a.total:.4f}. Each term is what one part wrote into the stream at "
            "this step (a head's z through its slice of W_o, an attention's bias, a "
            "feed-forward sub-layer, the embeddings), carried through every norm after it with "
            "the norm's scale frozen at this pass's value (a post-LN model's norms after every "
            "sub-layer, a pre-LN model's final norm; each norm's bias a term of its own), then "
            "through the output layer, as TransformerLens's decompose_resid and logit_attrs. "
            "Every term, as JSON lines: python -m core.logit_attribution."
        )
    )
