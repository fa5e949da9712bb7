"""The ETA of heavy work (pages/ui/progress.py): smoothed, so a phase that runs slower or
faster than its share moves it gradually (head importance's went 385 -> 87 -> 142 s)."""

from __future__ import annotations

import pytest

from pages.ui.progress import SMOOTHING_S, Eta


class Clock:
    """A clock the test moves: no test depends on how fast the machine is."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_steady_work_gets_the_plain_guess():
    clock = Clock()
    eta = Eta(clock)
    assert eta(0.01) is None  # too early to guess
    for step in range(1, 11):
        clock.now = 10.0 * step
        assert eta(step / 20) == pytest.approx(200.0 - 10.0 * step)  # 10 s per 5 %


def test_a_phase_that_runs_slower_moves_the_eta_gradually_then_fully():
    clock = Clock()
    eta = Eta(clock)
    clock.now = 50.0
    assert eta(0.5) == pytest.approx(50.0)  # half done in 50 s
    clock.now = 51.0
    raw = 51.0 / 0.2 * 0.8  # the work re-estimated: only 20 % done (a slow phase) -> 204 s
    shown = eta(0.2)
    assert 49.0 < shown < 49.0 + 0.1 * (raw - 49.0)  # one second later: a small step, not +155 s
    clock.now = 51.0 + 10 * SMOOTHING_S  # much later, still at 20 %
    later_raw = clock.now / 0.2 * 0.8
    assert eta(0.2) == pytest.approx(later_raw, rel=0.01)  # it has followed the guess
    assert eta.words(1.0) == " — about 0 s left"


def test_a_runs_eta_counts_its_evaluations_and_survives_a_resume():
    """A resumed run read "ETA 0 s"; the d2l preset's read "1 h 25-41 min" between pauses."""
    from core.runs.recorder import RunEta

    clock = Clock()
    eta = RunEta(clock)
    clock.now = 100.0  # resumed at 60 %: the first step of this process
    assert eta(0.6) is None
    clock.now = 110.0  # 1 % more in 10 s (an evaluation's pause included)
    assert eta(0.61) == pytest.approx(390.0)
    clock.now = 140.0  # a 30 s evaluation: no progress, the pace slows
    assert eta(0.61) == pytest.approx(0.39 * 40 / 0.01)
    clock.now = 150.0
    assert eta(1.0) == 0.0
