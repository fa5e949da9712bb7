"""A progress bar with an ETA for heavy work (head importance, faithfulness)."""

from __future__ import annotations

import time

import streamlit as st


def time_left(elapsed: float, fraction: float) -> str:
    """The ETA words, e.g. " — about 12 s left", once enough is done to guess ("" before)."""
    if fraction < 0.02:
        return ""
    return f" — about {elapsed / fraction * (1 - fraction):.0f} s left"


def progress_bar():
    """(bar, report): a progress bar and the ``report(fraction, what)`` callback that moves it."""
    bar = st.progress(0.0, text="Starting…")
    start = time.perf_counter()

    def report(fraction: float, what: str) -> None:
        left = time_left(time.perf_counter() - start, fraction)
        bar.progress(fraction, text=f"{what.capitalize()}: {fraction:.0%}{left}")

    return bar, report
