"""A play button for a slider: while playing, a fragment shows the next position every tick.

Streamlit 1.67 has no server push: ``st.fragment(run_every=PLAY_S)`` reruns the part of the
page that draws the position, and each of those runs moves one position on. The button sits
outside that fragment, so its click reruns the page and turns ``run_every`` on or off. At
the last position playing stops, and one rerun of the page turns the ticking off.
"""

from __future__ import annotations

import streamlit as st

PLAY_S = 1.2  # seconds between positions while playing


def playing(key: str) -> bool:
    """Whether the player ``key`` is playing."""
    return bool(st.session_state.get(f"{key}_playing"))


def _toggle(key: str, at_end: bool) -> None:
    """Start (from the first position when at the last) or stop the player."""
    now = not playing(key)
    st.session_state[f"{key}_playing"] = now
    st.session_state[f"{key}_started"] = now  # the click's own run shows where it starts
    st.session_state[f"{key}_restart"] = now and at_end


def play_button(key: str, at_end: bool, where=st) -> None:
    """The "▶ Play" / "⏸ Pause" button of the player ``key``."""
    label = "⏸ Pause" if playing(key) else "▶ Play"
    where.button(
        label,
        key=f"{key}_button",
        on_click=_toggle,
        args=(key, at_end),
        help="Step through the positions one by one (about one a second).",
    )


def run_every(key: str) -> float | None:
    """The fragment's ``run_every``: PLAY_S while playing, else None."""
    return PLAY_S if playing(key) else None


def next_index(key: str, index: int, count: int) -> int:
    """The position to show in this run: ``index``, or the next one while playing.

    The run of the click stays where it is (or goes back to 0 from the last position); every
    later run moves one on. At the last position the player stops and the page reruns once.
    """
    if not playing(key) or count <= 1:
        return index
    if st.session_state.pop(f"{key}_started", False):
        return 0 if st.session_state.pop(f"{key}_restart", False) else index
    index = min(index + 1, count - 1)
    if index == count - 1:
        st.session_state[f"{key}_playing"] = False
        st.session_state[f"{key}_stopped"] = True
    return index


def rerun_if_stopped(key: str) -> None:
    """After drawing the last position: rerun the page once so the ticking stops."""
    if st.session_state.pop(f"{key}_stopped", False):
        st.rerun()
