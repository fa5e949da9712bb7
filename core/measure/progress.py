"""Progress of long measurements, reported to a callback (a page's bar, a terminal's), and
the deadline a shared server gives one heavy job (``time_limit``), checked as work advances."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

ProgressFn = Callable[[float, str], None]  # (fraction done 0..1, what is being done)

_deadline = threading.local()  # per thread: .at (a time.monotonic() value) and .seconds


class TimeLimit(Exception):  # noqa: N818 (the server's rule, not a mistake of the caller)
    """The work ran past the time the server gives one heavy job; its words say so."""


@contextlib.contextmanager
def time_limit(seconds: float | None, clock: Callable[[], float] = time.monotonic):
    """Work in this block (on this thread) stops with TimeLimit at its next check past
    ``seconds`` (None: no limit). Checks: every ``Progress.advance``, every ``check_time``."""
    before = getattr(_deadline, "limit", None)
    _deadline.limit = None if seconds is None else (clock() + seconds, seconds, clock)
    try:
        yield
    finally:
        _deadline.limit = before


def check_time() -> None:
    """TimeLimit when this thread's work is past its ``time_limit``; else nothing."""
    limit = getattr(_deadline, "limit", None)
    if limit is not None and limit[2]() > limit[0]:
        raise TimeLimit(
            f"stopped after {limit[1]:.0f} s, the most one heavy job may run on this server, "
            "so that others waiting get their turn: ask for fewer sentences, or run the "
            "command line on your own machine"
        )


def checked(report: ProgressFn | None) -> ProgressFn:
    """``report`` (or nothing) that first checks the time limit: for work reporting progress
    through a bare callback."""

    def call(fraction: float, what: str) -> None:
        check_time()
        if report:
            report(fraction, what)

    return call


class Progress:
    """Reports a fraction of weighted work done, with what is being done, to a callback."""

    def __init__(self, report: ProgressFn | None, total: float):
        self.report, self.total, self.done = report, max(total, 1e-9), 0.0

    def advance(self, amount: float, what: str) -> None:
        """Count ``amount`` more work as done and report (TimeLimit past a ``time_limit``)."""
        check_time()
        self.done += amount
        if self.report:
            self.report(min(self.done / self.total, 1.0), what)
