"""Progress bars with an ETA for heavy work (head importance, faithfulness, alignment)."""

from __future__ import annotations

import math
import time

import streamlit as st

SMOOTHING_S = 20.0  # the ETA follows a new guess with this time constant, in seconds


class Eta:
    """Seconds left, smoothed. The raw guess, elapsed / fraction x (1 - fraction), jumps when
    one phase of the work runs slower or faster than its share (head importance went
    385 -> 87 -> 142 s); the shown guess counts down and moves toward each new raw guess with
    a time constant of SMOOTHING_S, so how often progress is reported does not matter."""

    def __init__(self, clock=time.perf_counter):
        self.clock, self.start = clock, clock()
        self.shown: float | None = None
        self.at = self.start

    def __call__(self, fraction: float) -> float | None:
        """The smoothed seconds left at ``fraction`` done (None before 2 %)."""
        now = self.clock()
        if fraction < 0.02:
            return None
        raw = (now - self.start) / fraction * (1 - fraction)
        if self.shown is None or fraction >= 1:
            self.shown = raw
        else:
            follow = 1 - math.exp(-(now - self.at) / SMOOTHING_S)
            counted_down = max(self.shown - (now - self.at), 0.0)
            self.shown = counted_down + follow * (raw - counted_down)
        self.at = now
        return self.shown

    def words(self, fraction: float) -> str:
        """ " — about 12 s left", or "" before a guess."""
        left = self(fraction)
        return "" if left is None else f" — about {left:.0f} s left"


def progress_bar():
    """(bar, report): a progress bar and the ``report(fraction, what)`` callback that moves it,
    with a smoothed ETA."""
    bar = st.progress(0.0, text="Starting…")
    eta = Eta()

    def report(fraction: float, what: str) -> None:
        bar.progress(fraction, text=f"{what.capitalize()}: {fraction:.0%}{eta.words(fraction)}")

    return bar, report


class LateProgress:
    """A ``report(fraction, what)`` whose progress bar appears only once work runs past
    ``after`` seconds, so quick work shows nothing; ``done()`` removes the bar."""

    def __init__(self, after: float = 1.0):
        self.after, self.bar = after, None
        self.start, self.eta = time.perf_counter(), Eta()

    def __call__(self, fraction: float, what: str) -> None:
        elapsed = time.perf_counter() - self.start
        if self.bar is None and elapsed < self.after:
            return
        text = f"{what.capitalize()}: {fraction:.0%}{self.eta.words(fraction)}"
        if self.bar is None:
            self.bar = st.progress(fraction, text=text)
        else:
            self.bar.progress(fraction, text=text)

    def done(self) -> None:
        """Remove the bar, if it appeared."""
        if self.bar is not None:
            self.bar.empty()
