"""The server's one slot for heavy work, shared by every session: head importance, the
faithfulness table, every head over training, an uploaded gold set, a saved model's heads.

A second session asking while the slot is taken is told so at once; nobody queues.
"""

from __future__ import annotations

import contextlib
import threading

import streamlit as st

from core.runs.cpu_share import all_threads

HEAVY_SLOTS = 1  # head-importance computations the server runs at once (each takes a core)


@st.cache_resource(show_spinner=False)
def heavy_slots() -> threading.BoundedSemaphore:
    """The server's slots for heavy work, shared by every session."""
    return threading.BoundedSemaphore(HEAVY_SLOTS)


@contextlib.contextmanager
def heavy_slot():
    """A slot for heavy work, or None at once when every slot is taken (nobody queues)."""
    slots = heavy_slots()
    if not slots.acquire(blocking=False):
        yield None
        return
    try:
        with all_threads():  # heavy work alone gains from every core (cpu_share)
            yield slots
    finally:
        slots.release()
