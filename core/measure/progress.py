"""Progress of long measurements, reported to a callback (a page's bar, a terminal's)."""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[float, str], None]  # (fraction done 0..1, what is being done)


class Progress:
    """Reports a fraction of weighted work done, with what is being done, to a callback."""

    def __init__(self, report: ProgressFn | None, total: float):
        self.report, self.total, self.done = report, max(total, 1e-9), 0.0

    def advance(self, amount: float, what: str) -> None:
        """Count ``amount`` more work as done and report."""
        self.done += amount
        if self.report:
            self.report(min(self.done / self.total, 1.0), what)
