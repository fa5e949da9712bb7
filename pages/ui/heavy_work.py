"""The server's one slot for heavy work, shared by every session: head importance, the
faithfulness table, every head over training, an uploaded gold set, a saved model's heads,
activation patching.

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


class SlotTaken(Exception):  # noqa: N818 (a state, not an error of the caller's)
    """Every slot for heavy work is taken; the message says to try again."""


BUSY = (
    "Another session is running heavy work on this server right now (head importance, "
    "faithfulness, patching…), and one runs at a time: try again in a moment."
)


@contextlib.contextmanager
def heavy_slot_or_raise():
    """A slot for heavy work, or SlotTaken at once (for work a cached function computes: an
    exception is never kept as its result)."""
    with heavy_slot() as slot:
        if slot is None:
            raise SlotTaken(BUSY)
        yield slot


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
