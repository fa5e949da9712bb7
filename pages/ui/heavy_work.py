"""The server's one slot for heavy work, shared by every session: head importance, the
faithfulness table, every head over training, a gold set's alignment scoring (uploaded or the
app's own) and the readers beyond one head, a saved model's heads, activation patching, the
projector.

A fair queue (``core.runs.fair_queue``): whoever asks while the slot is taken waits in line
with their place shown, the least recent user first; one place per user (or client address
where the server knows no users); each job stops at the server's time limit
(ATTENTION_STUDIO_HEAVY_LIMIT_S, 600 s by default).
"""

from __future__ import annotations

import contextlib
import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core.measure.progress import TimeLimit, time_limit
from core.runs.connection import client_address
from core.runs.cpu_share import all_threads
from core.runs.fair_queue import FairQueue, Place, QueueRefused, Ticket, limit_from_env, ordinal
from core.runs.quota import settings_problem
from pages.ui.identity import connection, current_user

HEAVY_SLOTS = 1  # heavy jobs the server runs at once (each takes every core)
POLL_S = 0.5  # how often a waiting page shows its place again
MAX_WAIT_S = 900.0  # a page waits this long in line before it says to come back

__all__ = ["TimeLimit", "heavy_slot", "heavy_slot_or_raise", "SlotTaken"]


@st.cache_resource(show_spinner=False)
def heavy_queue() -> FairQueue:
    """The server's line for heavy work, shared by every session."""
    return FairQueue(slots=HEAVY_SLOTS, limit_s=limit_from_env())


def limit_problem() -> str | None:
    """Why the server must not serve with its limit settings (heavy-work time, number of
    runs) as written (None: it may)."""
    try:
        limit_from_env()
    except ValueError as e:
        return str(e)
    return settings_problem()


class SlotTaken(Exception):  # noqa: N818 (a state, not an error of the caller's)
    """No slot for heavy work now (the line is full, or waited too long); the message says
    what to do."""


def owner() -> str:
    """Whose turn this is: the signed-in user; else the client, by its address (every session
    of one browser or machine: ``core.runs.connection.client_address``); else, where the
    session has no connection (a test harness), the session."""
    name = current_user().name
    if name:
        return f"user:{name}"
    if address := client_address(connection()):
        return f"client:{address}"
    ctx = get_script_run_ctx()
    return f"session:{ctx.session_id if ctx else 'none'}"


def place_words(place: Place, waited: float) -> str:
    """What a waiting page says: its place, the running job's time, what happens next."""
    running = (
        f"the job running now has held it {place.running_for:.0f} s of at most "
        f"{place.limit_s:.0f} s"
        if place.running_for
        else "it is being handed on"
    )
    return (
        f"Waiting for the server's heavy-work slot (one job runs at a time): you are "
        f"**{ordinal(place.ahead)}** in line ({place.waiting} waiting); {running}. Waited "
        f"{waited:.0f} s: this starts by itself when your turn comes, keep the tab open."
    )


def gave_up(waited: float) -> str:
    """What a page says when it stops waiting."""
    return (
        f"Other sessions' heavy work still holds the server's slot after {waited:.0f} s of "
        "waiting (one runs at a time): try again in a few minutes."
    )


def _wait(queue: FairQueue, ticket: Ticket) -> str | None:
    """Wait for ``ticket`` to hold the slot, showing its place; None once it does, else why
    the page stopped waiting."""
    if ticket.started is not None:
        return None
    note, start = st.empty(), time.monotonic()
    try:
        while not queue.wait(ticket, POLL_S):
            waited = time.monotonic() - start
            if waited >= MAX_WAIT_S:
                return gave_up(waited)
            note.info(place_words(queue.place(ticket), waited))  # a rerun or Stop ends it here
        return None
    finally:
        note.empty()


@contextlib.contextmanager
def _held():
    """(ticket, None) holding the slot, every core and the time limit; or (None, why not)."""
    queue = heavy_queue()
    try:
        ticket = queue.join(owner())
    except QueueRefused as e:
        yield None, str(e)
        return
    try:
        why = _wait(queue, ticket)
        if why is not None:
            yield None, why
            return
        with all_threads(), time_limit(queue.limit_s):  # heavy work gains from every core
            yield ticket, None
    finally:
        queue.leave(ticket)


@contextlib.contextmanager
def heavy_slot():
    """The slot, after waiting in line with the place shown; None (the reason already shown
    as a warning) when the line is full or the wait too long. Work inside stops with
    TimeLimit past the server's limit: callers show it as they show their own errors."""
    with _held() as (ticket, why):
        if why is not None:
            st.warning(why)
        yield ticket


@contextlib.contextmanager
def heavy_slot_or_raise():
    """The slot, or SlotTaken (for work a cached function computes: an exception is never
    kept as its result)."""
    with _held() as (ticket, why):
        if why is not None:
            raise SlotTaken(why)
        yield ticket
