"""How often an open page polls a live run (pages/ui/polling.py): the operator's setting,
kept within 1-60 s, the default where it is not a number."""

from __future__ import annotations

import pytest

from pages.ui.polling import POLL_ENV, poll_seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, 5.0),
        ("2.5", 2.5),
        ("0", 1.0),
        ("-3", 1.0),
        ("900", 60.0),
        ("soon", 5.0),
        ("nan", 5.0),
    ],
)
def test_the_poll_interval_is_the_operators_within_bounds(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv(POLL_ENV, raising=False)
    else:
        monkeypatch.setenv(POLL_ENV, value)
    assert poll_seconds() == seconds
