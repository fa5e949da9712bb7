"""The page's words when a section needs the model's training corpus and this server lacks it
(the library's words, which name the command line's remedies too, below for the admin)."""

from __future__ import annotations

import streamlit as st

from pages.ui.text import md

WHY = (
    "it needs the validation sentences of the model's training corpus, and that corpus is "
    "not on this server (or the file there is not the one the model was trained on). Whoever "
    "runs the app can add it; the details below say what is missing."
)


def no_corpus(what: str, e: Exception) -> None:
    """``what`` cannot be done here (e.g. "Faithfulness cannot be measured for this model
    here"), why, and the library's message under "Details"."""
    st.error(f"{what}: {WHY}")
    with st.expander("Details (for whoever runs the server)"):
        st.caption(md(e))
