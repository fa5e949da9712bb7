"""Attention page, "Head scores" section: every decoder head's previous-token, duplicate-token
and induction scores and the model's in-context-learning score, on random tokens read twice."""

from __future__ import annotations

import streamlit as st

from core.attention.head_detectors import LENGTH, HeadScores, HeadScoresError, head_scores
from core.attention.maps import export_name
from core.figures.head_detectors import head_scores_figure
from core.model.interface import TranslationModel
from core.runs.circuit_history import trained_length
from pages.ui.attention.inputs import SectionInputs
from pages.ui.charts import chart
from pages.ui.shared_cache import shared
from pages.ui.text import md


@shared(spinner="Reading random tokens twice…")
def scores(_lm: TranslationModel, key: tuple, length: int) -> HeadScores:
    """The model's head scores at ``length`` tokens per copy and the default count and seed
    (``key``: model file, its prompt's key)."""
    return head_scores(_lm, length)


def head_scores_section(page: SectionInputs) -> None:
    """The three score grids, the in-context-learning score, and what they measure."""
    trained = trained_length(page.entry.path)  # an induction model's own length, if known
    length = trained or LENGTH
    try:
        s = scores(page.lm, (page.entry.path, page.entry.mtime, page.lm.view_key), length)
    except HeadScoresError as e:
        st.error(md(str(e)))
        return
    name = export_name(page.state.model, page.state.sentence, None, None, None, "head scores")
    chart(head_scores_figure(s), "head_scores", name=name)
    early, late = s.early_late
    st.markdown(
        f"**In-context learning score:** {s.icl:+.3f} nats (loss at token {late} minus at "
        f"token {early}; negative: later tokens are predicted better)"
    )
    st.caption(
        "TransformerLens's head detectors on a start token and random tokens read twice, as "
        "the decoder's inputs after the model's example sentence: previous-token, weight on "
        "the token just before; duplicate-token, from a token of the second copy to the same "
        "token in the first; induction, to the token that followed it there (Olsson et al. "
        "2022). In-context learning: Olsson's loss at the 500th token minus at the 50th, the "
        f"positions scaled to this context. {length} tokens per copy"
        + (" (the length its circuit scores were measured at in training)" if trained else "")
        + ". Other sizes and seeds, as JSON lines: python -m core.head_scores."
    )
