"""The page's words when a section needs the model's training corpus and this server lacks it
(the library's words, which name the command line's remedies too, below for the admin)."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from core.corpus.source import DataError
from core.model.checkpoints import validation_source
from pages.ui.text import md

WHY = (
    "it needs the validation sentences of the model's training corpus, and that corpus is "
    "not on this server (or the file there is not the one the model was trained on). Whoever "
    "runs the app can add it: fra-eng by letting the app download it or by setting "
    "`FRA_ENG_ZIP` to a copy, another corpus by putting its file in the app's data folder. "
    "The details below say which file is missing."
)


def corpus_missing(meta: Mapping) -> DataError | None:
    """Why the validation sentences of the model with ``meta`` cannot be had on this server
    (neither its corpus nor pairs the model carries), in the page's words; None when they
    can."""
    try:
        validation_source(meta, command=False)
    except DataError as e:
        return e
    return None


def no_corpus(what: str, e: Exception) -> None:
    """``what`` cannot be done here (e.g. "Faithfulness cannot be measured for this model
    here"), why and how to get the corpus, calmly (nothing is broken), and the library's
    message under "Details"."""
    st.info(f"{what}: {WHY}", icon=":material/dataset:")
    with st.expander("Details (for whoever runs the server)"):
        st.caption(md(e))
