"""Progress bars with an ETA for heavy work (head importance, faithfulness, alignment)."""

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


class LateProgress:
    """A ``report(fraction, what)`` whose progress bar appears only once work runs past
    ``after`` seconds, so quick work shows nothing; ``done()`` removes the bar."""

    def __init__(self, after: float = 1.0):
        self.after, self.bar = after, None
        self.start = time.perf_counter()

    def __call__(self, fraction: float, what: str) -> None:
        elapsed = time.perf_counter() - self.start
        if self.bar is None and elapsed < self.after:
            return
        text = f"{what.capitalize()}: {fraction:.0%}{time_left(elapsed, fraction)}"
        if self.bar is None:
            self.bar = st.progress(fraction, text=text)
        else:
            self.bar.progress(fraction, text=text)

    def done(self) -> None:
        """Remove the bar, if it appeared."""
        if self.bar is not None:
            self.bar.empty()
