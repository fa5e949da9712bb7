"""The server's slot for heavy work as a fair queue (issue 49, item 8).

Heavy work (head importance, faithfulness, patching, every head over training...) runs one
job at a time. Whoever asks while the slot is taken waits in line and is told their place.
The line is fair, not first-come-first-served: the next job is the waiting one whose owner
(a user where the server knows users, else the client's address: every tab and session of
one browser, or of one machine, is one owner) has held the slot least in
the last ``window_s`` seconds, so one person asking again and again goes behind everyone
who asked less, as a batch scheduler's fair share does. Each owner has one place in line at
a time (a second tab or session is told where its first job stands), the line holds at most
``max_waiting`` owners, and each job may hold the slot for ``limit_s`` seconds: the work
checks its deadline (``core.measure.progress.time_limit``) and stops past it.

No Streamlit here: ``pages/ui/heavy_work.py`` keeps one queue per server and shows the place.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LIMIT_ENV = "ATTENTION_STUDIO_HEAVY_LIMIT_S"
LIMIT_S = 600.0  # the longest one heavy job may hold the slot (seconds)
WINDOW_S = 1800.0  # how far back an owner's time in the slot counts against their place
MAX_WAITING = 8  # owners waiting at once; a ninth is told to come back


class QueueRefused(Exception):  # noqa: N818 (a state of the server, not a mistake)
    """This owner cannot join the line now: the message says why, in the user's words."""


@dataclass(eq=False)
class Ticket:
    """One owner's place: waiting (``started`` None), then holding the slot until released."""

    owner: str
    arrived: float
    order: int  # ties broken by arrival, then by this
    started: float | None = None
    deadline: float | None = None


@dataclass(frozen=True)
class Place:
    """Where a ticket stands: ``ahead`` jobs run or wait before it (0: it holds the slot)."""

    ahead: int
    waiting: int  # tickets in line, this one included when it waits
    running_for: float  # seconds the longest-running job has held the slot (0: none runs)
    limit_s: float


@dataclass
class FairQueue:
    """``slots`` jobs at once; the rest wait, least recent use first (see the module)."""

    slots: int = 1
    limit_s: float = LIMIT_S
    window_s: float = WINDOW_S
    max_waiting: int = MAX_WAITING
    clock: Callable[[], float] = time.monotonic
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _waiting: list[Ticket] = field(default_factory=list, repr=False)
    _running: list[Ticket] = field(default_factory=list, repr=False)
    _spent: dict[str, list[tuple[float, float]]] = field(default_factory=dict, repr=False)
    _count: itertools.count = field(default_factory=itertools.count, repr=False)

    def join(self, owner: str) -> Ticket:
        """A place in line for ``owner``, or QueueRefused (already in line, or the line full)."""
        with self._cond:
            if mine := [t for t in self._running + self._waiting if t.owner == owner]:
                raise QueueRefused(
                    f"You already have heavy work {self._where(mine[0])} on this server (in "
                    "another tab or a section still computing): one job at a time for each "
                    "person, so others get a turn. Try again when it is done."
                )
            if len(self._waiting) >= self.max_waiting:
                raise QueueRefused(
                    f"{len(self._waiting)} people are already waiting for this server's heavy "
                    "work slot, the most it lets wait: try again in a few minutes."
                )
            ticket = Ticket(owner, self.clock(), next(self._count))
            self._waiting.append(ticket)
            self._start_if_first(ticket)
            return ticket

    def wait(self, ticket: Ticket, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``ticket`` to hold the slot; True once it does."""
        with self._cond:
            self._cond.wait_for(lambda: self._start_if_first(ticket), timeout)
            return ticket.started is not None

    def leave(self, ticket: Ticket) -> None:
        """Give the slot back (its time counted against the owner), or the place in line."""
        with self._cond:
            if ticket in self._running:
                self._running.remove(ticket)
                now = self.clock()
                self._spent.setdefault(ticket.owner, []).append((now, now - ticket.started))
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
            self._cond.notify_all()

    def place(self, ticket: Ticket) -> Place:
        """Where ``ticket`` stands now."""
        with self._cond:
            now = self.clock()
            running_for = max((now - t.started for t in self._running), default=0.0)
            line = self._line()
            ahead = 0 if ticket.started is not None else len(self._running) + line.index(ticket)
            return Place(ahead, len(line), running_for, self.limit_s)

    def _where(self, ticket: Ticket) -> str:
        """Under the lock: 'running (42 s of at most 600 s)' or 'waiting, 2nd in line'."""
        if ticket.started is not None:
            held = self.clock() - ticket.started
            return f"running ({held:.0f} s of at most {self.limit_s:.0f} s)"
        ahead = len(self._running) + self._line().index(ticket)
        return f"waiting, {ordinal(ahead)} in line"

    def spent(self, owner: str) -> float:
        """Seconds ``owner`` held the slot in the last ``window_s`` (their share used)."""
        with self._cond:
            return self._spent_now(owner)

    def _spent_now(self, owner: str) -> float:
        since = self.clock() - self.window_s
        kept = [(end, s) for end, s in self._spent.get(owner, []) if end >= since]
        self._spent[owner] = kept
        return sum(s for _, s in kept)

    def _line(self) -> list[Ticket]:
        """The waiting tickets in the order they will start."""
        used = {t.owner: self._spent_now(t.owner) for t in self._waiting}
        return sorted(self._waiting, key=lambda t: (used[t.owner], t.arrived, t.order))

    def _start_if_first(self, ticket: Ticket) -> bool:
        """Under the lock: start ``ticket`` if a slot is free and it is first in line."""
        if ticket.started is not None:
            return True
        if len(self._running) >= self.slots or self._line()[0] is not ticket:
            return False
        self._waiting.remove(ticket)
        ticket.started = self.clock()
        ticket.deadline = ticket.started + self.limit_s
        self._running.append(ticket)
        return True


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th … 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def limit_from_env() -> float:
    """The per-job limit: ATTENTION_STUDIO_HEAVY_LIMIT_S seconds (> 0), else LIMIT_S."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if not raw:
        return LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{LIMIT_ENV} must be a number of seconds above 0, not {raw!r}")
    return value
