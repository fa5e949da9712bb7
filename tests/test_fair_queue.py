"""The heavy-work slot's fair queue and the time limit of one heavy job (issue 49, item 8)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.measure.progress import Progress, TimeLimit, check_time, checked, time_limit
from core.runs.fair_queue import LIMIT_ENV, FairQueue, QueueRefused, limit_from_env


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_asker_runs_at_once_the_next_waits_its_turn():
    clock = Clock()
    q = FairQueue(clock=clock)
    a = q.join("a")
    b = q.join("b")
    assert a.started is not None and b.started is None
    assert q.place(a).ahead == 0
    place = q.place(b)
    assert (place.ahead, place.waiting) == (1, 1)
    clock.now += 12
    assert q.place(b).running_for == 12
    assert not q.wait(b, 0.01)
    q.leave(a)
    assert q.wait(b, 0.01) and q.place(b).ahead == 0
    assert q.spent("a") == 12


def test_who_held_the_slot_least_goes_first_whatever_the_order_they_asked():
    """The per-session share: a user asking again and again goes behind those who asked less."""
    clock = Clock()
    q = FairQueue(clock=clock)
    first = q.join("greedy")
    clock.now += 300  # greedy held the slot 300 s
    q.leave(first)
    holder = q.join("someone")  # now holds the slot
    greedy = q.join("greedy")  # asked first...
    clock.now += 1
    modest = q.join("modest")  # ...but modest has used nothing
    assert (q.place(modest).ahead, q.place(greedy).ahead) == (1, 2)
    clock.now += 5
    q.leave(holder)
    assert q.wait(modest, 0.01) and not q.wait(greedy, 0.01)
    q.leave(modest)
    assert q.wait(greedy, 0.01)


def test_time_in_the_slot_stops_counting_after_the_window():
    clock = Clock()
    q = FairQueue(clock=clock, window_s=60)
    t = q.join("a")
    clock.now += 50
    q.leave(t)
    assert q.spent("a") == 50
    clock.now += 61
    assert q.spent("a") == 0


def test_each_owner_has_one_place_and_the_line_has_a_length():
    q = FairQueue(max_waiting=2)
    q.join("a")  # runs
    with pytest.raises(QueueRefused, match="already have heavy work"):
        q.join("a")  # a second tab of the same user
    q.join("b")
    q.join("c")
    with pytest.raises(QueueRefused, match="2 people are already waiting"):
        q.join("d")


def test_leaving_the_line_before_ones_turn_frees_the_place():
    """A page rerun or a closed tab while waiting: its place goes, the others move up."""
    q = FairQueue()
    a, b, c = q.join("a"), q.join("b"), q.join("c")
    q.leave(b)
    assert q.place(c).ahead == 1
    q.leave(a)
    assert q.wait(c, 0.01)
    q.join("b")  # b may ask again


def test_threads_hold_the_slot_one_at_a_time_and_each_gets_a_turn():
    q = FairQueue()
    inside, most, done = [0], [0], []
    lock = threading.Lock()

    def job(name: str) -> None:
        t = q.join(name)
        while not q.wait(t, 0.05):
            pass
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)
        with lock:
            inside[0] -= 1
        q.leave(t)
        done.append(name)

    threads = [threading.Thread(target=job, args=(f"s{i}",)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert most[0] == 1 and sorted(done) == sorted(f"s{i}" for i in range(6))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.floats(0, 500)), min_size=1, max_size=12))
def test_the_line_is_ordered_by_time_used_then_by_arrival(history):
    """Whatever each owner held the slot before, the next to start used the least."""
    clock = Clock()
    q = FairQueue(clock=clock, window_s=1e9)
    for owner, seconds in history:
        t = q.join(owner)
        clock.now += seconds
        q.leave(t)
    holder = q.join("holder")
    tickets = {o: q.join(o) for o in "abcd"}
    q.leave(holder)
    started = next(o for o, t in tickets.items() if q.wait(t, 0))
    used = {o: q.spent(o) for o in "abcd"}
    assert used[started] == min(used.values())
    assert started == min(o for o in "abcd" if used[o] == used[started])  # then arrival


def test_a_job_stops_at_its_time_limit_at_the_next_check():
    clock = Clock()
    with time_limit(10, clock=clock):
        check_time()
        work = Progress(None, 3)
        work.advance(1, "one")
        clock.now += 11
        with pytest.raises(TimeLimit, match="stopped after 10 s"):
            work.advance(1, "two")
        with pytest.raises(TimeLimit):
            checked(None)(0.5, "a bare callback")
    check_time()  # outside the block: no limit


def test_the_time_limit_is_per_thread_and_nested_limits_restore():
    clock = Clock()
    seen = []
    with time_limit(1, clock=clock):
        clock.now += 2
        other = threading.Thread(target=lambda: seen.append(check_time()))
        other.start()
        other.join()
        with time_limit(None):
            check_time()
        with pytest.raises(TimeLimit):
            check_time()
    assert seen == [None]  # the other thread had no limit


def test_patching_stops_at_the_limit(tiny_model):
    from core.attention.patching import patch

    with time_limit(0.0), pytest.raises(TimeLimit):
        patch(tiny_model, "i am cold .", "you are cold .")


@pytest.mark.parametrize("raw", ["0", "-5", "ten", "inf", "nan"])
def test_a_limit_setting_it_does_not_understand_is_refused(monkeypatch, raw):
    monkeypatch.setenv(LIMIT_ENV, raw)
    with pytest.raises(ValueError, match=LIMIT_ENV):
        limit_from_env()


def test_the_limit_setting_is_read_in_seconds(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert limit_from_env() == 600.0
    monkeypatch.setenv(LIMIT_ENV, " 90 ")
    assert limit_from_env() == 90.0


def test_a_waiting_page_says_its_place_and_the_running_jobs_time():
    from core.runs.fair_queue import Place
    from pages.ui.heavy_work import ordinal, place_words

    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "101st",
    ]
    words = place_words(Place(ahead=2, waiting=3, running_for=42.4, limit_s=600), 7.2)
    assert "**2nd** in line (3 waiting)" in words
    assert "held it 42 s of at most 600 s" in words and "Waited 7 s" in words


@pytest.mark.parametrize("name, raw", [(LIMIT_ENV, "ten"), ("ATTENTION_STUDIO_MAX_RUNS", "-3")])
def test_the_app_serves_nothing_on_a_limit_setting_it_does_not_understand(
    studio_dirs, monkeypatch, name, raw
):
    from tests.helpers import run_app

    monkeypatch.setenv(name, raw)
    at = run_app()
    assert not at.exception
    assert [e.value for e in at.error] and name in at.error[0].value
    assert not at.button and not at.text_area
