"""What the server may trust of a session's connection (issue 64, items 1 and 2): its peer's
address, the proxy's secret, and the client's address a place in the heavy queue belongs to."""

from __future__ import annotations

import pytest

from core.runs import connection
from core.runs.connection import Connection, client_address, direct_loopback, is_loopback
from core.runs.fair_queue import FairQueue, QueueRefused

SECRET = "s3cret-s3cret-s3cret"


def conn(peer: str | None, **fields) -> Connection:
    """A connection from ``peer`` whose handshake carried these headers (each a list)."""
    lower = {k.lower().replace("_", "-"): v for k, v in fields.items()}
    return Connection(peer, lambda name: list(lower.get(name.lower(), [])))


@pytest.mark.parametrize(
    "value, loopback",
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("127.0.0.1:5555", True),
        ("192.0.2.2", False),
        ("fd00::2", False),
        ("localhost", False),
        ("", False),
        (None, False),
        ("1" * 500, False),
        ("127.0.0.1\n", True),
    ],
)
def test_loopback_is_read_from_the_address_itself(value, loopback):
    assert is_loopback(value) is loopback


def test_a_forwarding_header_makes_a_loopback_peer_prove_nothing():
    assert direct_loopback(conn("127.0.0.1"))
    assert not direct_loopback(conn("127.0.0.1", x_forwarded_for=["10.1.2.3"]))
    assert not direct_loopback(conn("127.0.0.1", forwarded=["for=10.1.2.3"]))
    assert not direct_loopback(conn(None))


def test_the_client_is_its_peer_unless_a_proven_proxy_forwards_its_address(monkeypatch):
    monkeypatch.delenv(connection.PROXY_SECRET_ENV, raising=False)
    forged = {"x_forwarded_for": ["10.9.9.9"]}
    assert client_address(conn("203.0.113.5", **forged)) == "203.0.113.5"  # not a proxy's
    assert client_address(conn(None)) is None
    local = conn("127.0.0.1", x_forwarded_for=["198.51.100.4"])  # a proxy on this machine
    assert client_address(local) == "198.51.100.4"
    assert client_address(conn("127.0.0.1")) == "127.0.0.1"
    monkeypatch.setenv(connection.PROXY_SECRET_ENV, SECRET)
    via = {"x_attention_studio_proxy": [SECRET]}
    # the proxy appends the address it saw: the last one; the client's own claims come first
    chain = {"x_forwarded_for": ["10.9.9.9, 198.51.100.4"]}
    assert client_address(conn("192.0.2.10", **via, **chain)) == "198.51.100.4"
    assert client_address(conn("192.0.2.10", **via, x_forwarded_for=["a", "198.51.100.4:80"])) == (
        "198.51.100.4"
    )
    assert client_address(conn("192.0.2.10", **chain)) == "192.0.2.10"  # no secret: the peer
    wrong = {"x_attention_studio_proxy": [SECRET + "!"]}
    assert client_address(conn("192.0.2.10", **wrong, **chain)) == "192.0.2.10"
    assert client_address(conn("192.0.2.10", **via, x_forwarded_for=["junk"])) == "192.0.2.10"


def test_nine_sessions_of_one_client_hold_one_place_and_are_told_where_it_stands():
    """Issue 64, item 2: one client's sessions share one place; another client still gets in."""
    now = [0.0]
    queue = FairQueue(slots=1, limit_s=600, max_waiting=8, clock=lambda: now[0])
    other = queue.join("client:10.0.0.1")  # another student holds the slot
    first = queue.join("client:10.0.0.7")
    now[0] = 42.0
    for _ in range(8):
        with pytest.raises(QueueRefused, match="already have heavy work waiting, 1st in line"):
            queue.join("client:10.0.0.7")
    victim = queue.join("client:10.0.0.9")  # the ninth student is not turned away
    assert queue.place(victim).ahead == 2
    queue.leave(other)
    assert first.started is None and queue.wait(first, 0) and first.started is not None
    with pytest.raises(QueueRefused, match=r"running \(0 s of at most 600 s\)"):
        queue.join("client:10.0.0.7")


def test_the_heavy_queue_owner_is_the_client_where_no_user_is_known(monkeypatch):
    """Two browser sessions from one address are one owner; from two addresses, two."""
    from pages.ui import heavy_work

    monkeypatch.delenv("ATTENTION_STUDIO_IDENTITY", raising=False)
    seen = iter([conn("192.0.2.50"), conn("192.0.2.50"), conn("192.0.2.51"), conn(None)])
    monkeypatch.setattr(heavy_work, "connection", lambda: next(seen))
    owners = [heavy_work.owner() for _ in range(4)]
    assert owners[0] == owners[1] == "client:192.0.2.50"
    assert owners[2] == "client:192.0.2.51"
    assert owners[3].startswith("session:")  # no connection (a test harness): the session


def test_streamlit_still_gives_a_sessions_peer_where_identity_reads_it():
    """pages.ui.identity.peer_address reads a session's client context (its ``remote_ip``):
    fails when a Streamlit upgrade moves it (the browser test then proves it end to end)."""
    from streamlit.runtime.session_manager import ClientContext, SessionClient
    from streamlit.web.server.starlette.starlette_websocket import StarletteClientContext

    assert isinstance(getattr(ClientContext, "remote_ip", None), property)
    assert isinstance(getattr(StarletteClientContext, "remote_ip", None), property)
    assert "client_context" in dir(SessionClient)
