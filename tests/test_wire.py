"""The load test's students without a browser (bench/wire.py) against a real app server: they
speak this Streamlit's protocol, and what they check fails where the page did not answer."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.figures.head_roles import ROLES_TITLE
from tests import helpers


def run(coroutine):
    """Run a coroutine on a thread of its own: a worker that ran a browser test holds
    Playwright's event loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture
def wire():
    if not helpers.SHIPPED.is_file():
        pytest.skip("checkpoints/fra-eng-small.pt not trained yet")
    from bench import students, wire

    return students, wire


def test_students_without_a_browser_translate_browse_and_remove_heads(app_server, wire):
    students, wire = wire
    results: list = []
    until = time.time() + 8
    args = (students.SENTENCES, students.KIND_WORDS, students.HEADS, 90.0)
    students = [wire.student(app_server["url"], seed, until, results, *args) for seed in (0, 1)]

    async def both():
        await asyncio.gather(*students)

    run(both())
    assert [e for *_, e in results if e] == []
    done = {what for what, *_ in results}
    assert {"open a page", "translate", "remove heads"} <= done, done


def test_a_student_sees_what_the_page_answered(app_server, wire):
    """The kind switch brings the map of that kind; a widget the page lacks, or an answer
    without what the student waits for, is an error, not a fast interaction."""
    students, wire = wire

    async def session():
        s = wire.WireSession(app_server["url"], 90.0)
        await s.connect()
        try:
            first = wire.translation(await s.open("translate"))
            again = wire.translation(await s.set(wire.SENTENCE_LABEL, "string_value", "go ."))
            await s.open("attention", {"sentence": "i lost ."})
            specs = wire.chart_specs(await s.set(wire.KIND_LABEL, "string_value", "Encoder self"))
            with pytest.raises(wire.WireError, match="no widget"):
                await s.set("Not a widget", "string_value", "x")
            return first, again, specs
        finally:
            await s.close()

    first, again, specs = run(session())
    assert first.startswith("### ") and again.startswith("### ") and first != again
    maps = [spec for spec in specs if ROLES_TITLE not in spec]  # the roles': every kind's
    assert any(students.KIND_WORDS["Encoder self"] in spec for spec in maps)
    assert not any(students.KIND_WORDS["Cross"] in spec for spec in maps)
