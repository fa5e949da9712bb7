"""What the server knows of one browser session's connection, and what it may trust of it.

A browser session reaches the server over one websocket. The server knows two things about it
that the browser cannot choose: the address the connection came from (its TCP peer, as the
ASGI server reports it) and, where the operator set one, whether the proxy's secret came with
the handshake. Everything else in the handshake's headers is the client's to write.

- **A direct loopback connection**: the peer is a loopback address (127.0.0.0/8, ::1) and the
  handshake carries no forwarding header (``X-Forwarded-For``, ``Forwarded``). A forwarding
  header matters because an ASGI server may replace the peer by what it says (uvicorn does
  for peers in ``--forwarded-allow-ips``, 127.0.0.1 by default): with one present, the peer
  seen is no longer what the socket saw, so it proves nothing.
- **A proven proxy**: the secret in ``ATTENTION_STUDIO_PROXY_SECRET`` came exactly once in
  ``X-Attention-Studio-Proxy`` (compared in constant time).
- **The client's address** (whose turn it is in the heavy queue, where no user is known):
  where a trusted proxy forwards it (one proven by the secret, or one on this machine), the
  last address of its ``X-Forwarded-For`` (the one the proxy itself appended); otherwise the
  peer. Without a forwarded address, everyone behind one proxy or one NAT is one client.

What the server listens on (``server.address``, uvicorn's ``--host``) never enters these
decisions: ``uvicorn app:app --host 0.0.0.0`` leaves Streamlit's setting at 127.0.0.1.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass

PROXY_SECRET_ENV = "ATTENTION_STUDIO_PROXY_SECRET"  # what the proxy proves itself with
PROXY_HEADER = "X-Attention-Studio-Proxy"  # the header the proxy sends the secret in
FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded")  # headers a server may read a peer from
FORWARDED_FOR = "X-Forwarded-For"  # where a proxy names the client's address
MIN_SECRET_CHARS = 16  # a shorter secret is guessed (and the server refuses to serve)
MAX_ADDRESS_CHARS = 64  # longer than any IPv6 address with a zone: not one

ValuesOf = Callable[[str], list[str]]  # every value a request carries for a header name


@dataclass(frozen=True)
class Connection:
    """One session's connection: its peer's address (None: no server connection, e.g. a test
    harness) and ``values_of(name)``, every value its handshake carried for a header."""

    peer: str | None
    values_of: ValuesOf


def proxy_secret() -> str:
    """The secret the authenticating proxy sends in PROXY_HEADER ("" where none is set)."""
    return os.environ.get(PROXY_SECRET_ENV, "").strip()


def address(value: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``value`` as an IP address (a port, brackets, an IPv6 zone and the IPv4-mapped form
    read as what they are), or None when it is not one."""
    if not isinstance(value, str) or not value or len(value) > MAX_ADDRESS_CHARS:
        return None
    text = value.strip()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]  # [v6] or [v6]:port
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]  # v4:port
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def is_loopback(value: object) -> bool:
    """Whether ``value`` is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z)."""
    ip = address(value)
    return ip is not None and ip.is_loopback


def forwarded(conn: Connection) -> bool:
    """Whether the handshake carries a header an ASGI server may have read its peer from."""
    return any(conn.values_of(name) for name in FORWARDING_HEADERS)


def direct_loopback(conn: Connection) -> bool:
    """Whether the connection came straight from this machine: a loopback peer, no
    forwarding header (module docstring)."""
    return is_loopback(conn.peer) and not forwarded(conn)


def proxy_proven(conn: Connection) -> bool:
    """Whether a secret (of at least MIN_SECRET_CHARS) is set and the handshake carried it
    exactly once."""
    secret = proxy_secret()
    if len(secret) < MIN_SECRET_CHARS:
        return False
    sent = conn.values_of(PROXY_HEADER)
    return len(sent) == 1 and hmac.compare_digest(sent[0].encode(), secret.encode())


def client_address(conn: Connection) -> str | None:
    """The address of the browser behind this connection, as the server can know it: the last
    address a trusted proxy (one proven by the secret, or one on this machine) appended to
    X-Forwarded-For, else the peer (None: unknown)."""
    if proxy_proven(conn) or is_loopback(conn.peer):
        chain = ",".join(conn.values_of(FORWARDED_FOR)).split(",")
        ip = address(chain[-1].strip())
        if ip is not None:
            return str(ip)
    ip = address(conn.peer)
    return None if ip is None else str(ip)
