"""Who may change what: runs and saved models belong to whoever made them, where users are known.

The operator tells the server how it knows its users (``ATTENTION_STUDIO_IDENTITY``):

- unset: nobody is known, and every session may do everything (one person's machine, or a
  class that trusts itself), as the app always did;
- ``streamlit``: Streamlit's own login (``st.login``; an ``[auth]`` section in
  ``.streamlit/secrets.toml``): a user is their e-mail address (else their ``sub``);
- ``header:NAME``: a header that an authenticating reverse proxy sets on every request,
  e.g. ``header:X-Forwarded-User``. A header proves nothing by itself (any client can send
  one), so the server trusts it only with proof that the proxy sent it, read from the
  connection itself (``core.runs.connection``): the proxy also sends
  ``X-Attention-Studio-Proxy`` with the secret in ``ATTENTION_STUDIO_PROXY_SECRET``
  (compared in constant time), or, without a secret, the session's websocket came straight
  from a loopback address (the proxy on the same machine), whatever address the server was
  told to listen on. A request carrying the user's header (or the secret) zero or several
  times is not signed in: a proxy that appends rather than replaces is not bypassed. A
  server started on more than loopback without a secret says so on every page and serves
  nothing (an operator's mistake named at once; the check per connection holds anyway).

Any other value of ``ATTENTION_STUDIO_IDENTITY`` (``Streamlit``, ``header:X-User,``,
``headers:…``) is refused in one line, never read as "nobody is known".

Where users are known, a run or a saved model belongs to whoever made it: everybody may view
and compare it; only its owner, or a user named in ``ATTENTION_STUDIO_TEACHERS``
(comma-separated), may stop, resume, delete, rename or annotate a run, save a model from it
or replace a saved model. A session with no user (not logged in) may only look. The
command line is the operator's: ``user=None`` in the library may do everything. Nobody
replaces from a browser a model the app did not save (the shipped model, the operator's files).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from core.runs.connection import (
    MIN_SECRET_CHARS,
    PROXY_HEADER,
    PROXY_SECRET_ENV,
    Connection,
    direct_loopback,
    proxy_proven,
    proxy_secret,
)
from core.runs.run_dir import RunDir, RunError, read_json

IDENTITY_ENV = "ATTENTION_STUDIO_IDENTITY"  # "", "streamlit" or "header:NAME"
LOOPBACK = ("127.0.0.1", "::1", "localhost")  # server addresses only this machine reaches
TEACHERS_ENV = "ATTENTION_STUDIO_TEACHERS"  # users who may change everything, comma-separated
MAX_NAME_CHARS = 200  # a longer user name is not one
VISITOR = "visitors who are not signed in can only look"
HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")  # an HTTP header's name


class OwnershipError(Exception):
    """A user may not change a run or model that is somebody else's; the message says whose."""


class IdentityConfigError(ValueError):
    """The operator's identity settings cannot be used; the message says what to set."""


@dataclass(frozen=True)
class User:
    """A browser session's user: their name where the server knows it (None: nobody known)."""

    name: str | None = None
    teacher: bool = False  # may change everything (ATTENTION_STUDIO_TEACHERS)

    @property
    def words(self) -> str:
        """E.g. 'alice@school.org (teacher)', or 'not signed in'."""
        if self.name is None:
            return "not signed in"
        return f"{self.name} (teacher)" if self.teacher else self.name


def identity_mode() -> str:
    """How the server knows its users: "" (it does not), "streamlit" or "header";
    IdentityConfigError for a value it does not understand."""
    value = os.environ.get(IDENTITY_ENV, "").strip()
    if value in ("", "streamlit"):
        return value
    if identity_header() is not None:
        return "header"
    raise IdentityConfigError(
        f"{IDENTITY_ENV}={value[:60]!r} is not a setting the server understands: leave it "
        "unset (nobody is known), or set streamlit, or header:NAME with NAME a header name "
        "(e.g. header:X-Forwarded-User)."
    )


def identity_header() -> str | None:
    """The header that names the user (``header:NAME``), or None."""
    value = os.environ.get(IDENTITY_ENV, "").strip()
    name = value[len("header:") :].strip() if value.startswith("header:") else ""
    return name if HEADER_RE.fullmatch(name) else None


def identity_problem(address: str) -> str | None:
    """Why the server must not serve with these identity settings while listening on
    ``address`` (None: it may)."""
    try:
        mode = identity_mode()
    except IdentityConfigError as e:
        return str(e)
    secret = proxy_secret()
    if mode != "header" or (secret and len(secret) >= MIN_SECRET_CHARS):
        return None
    if secret:
        return f"{PROXY_SECRET_ENV} must be at least {MIN_SECRET_CHARS} characters."
    if (address or "").strip().strip("[]") in LOOPBACK:
        return None
    return (
        f"Header identity ({IDENTITY_ENV}=header:{identity_header()}) needs proof that the "
        f"proxy sent the header: set {PROXY_SECRET_ENV} and have the proxy send "
        f"{PROXY_HEADER} with it, or run the server on --server.address 127.0.0.1 behind "
        "the proxy (docs/serving.md)."
    )


def header_user(conn: Connection) -> User:
    """The user a proxy named in this connection's handshake: nobody unless the header came
    exactly once and the proxy proved it sent it: where a secret is set, the secret came
    exactly once and matches; without one, the connection came straight from loopback."""
    proven = proxy_proven(conn) if proxy_secret() else direct_loopback(conn)
    names = conn.values_of(identity_header() or "") if proven else []
    return user_named(names[0]) if len(names) == 1 else User()


def teachers() -> set[str]:
    """The users who may change everything."""
    return {t.strip() for t in os.environ.get(TEACHERS_ENV, "").split(",") if t.strip()}


def clean_name(value: object) -> str | None:
    """A user name as the server records it: one printable line, or None when there is none."""
    if not isinstance(value, str):
        return None
    name = " ".join(value.split())
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        return None
    return name


def user_named(value: object) -> User:
    """The User of a name the identity source gave (a teacher when listed)."""
    name = clean_name(value)
    return User(name, name is not None and name in teachers())


def may_change(user: User | None, owner: str | None) -> bool:
    """Whether ``user`` may change something ``owner`` made (``user`` None: the command line)."""
    if user is None or not identity_mode():
        return True
    if user.name is None:
        return False
    return user.teacher or owner == user.name


def may_create(user: User | None) -> bool:
    """Whether ``user`` may make new runs and models (where users are known, a signed-in one)."""
    return user is None or not identity_mode() or user.name is not None


def owner_of(user: User | None) -> str | None:
    """What a new run or model records as its owner (None where users are not known)."""
    return user.name if user is not None and identity_mode() else None


def check_change(user: User | None, owner: str | None, action: str, thing: str) -> None:
    """OwnershipError unless ``user`` may ``action`` (e.g. "delete") ``thing`` (e.g. "run X")."""
    if may_change(user, owner):
        return
    if user is not None and user.name is None:
        raise OwnershipError(
            f"Sign in to {action} {thing}: visitors who are not signed in can only look."
        )
    whose = f"belongs to {owner}" if owner else "was made before users were known"
    raise OwnershipError(
        f"{thing[0].upper()}{thing[1:]} {whose}: only its owner or a teacher may {action} it. "
        "You can still view and compare it."
    )


def check_create(user: User | None, what: str) -> None:
    """OwnershipError unless ``user`` may make ``what`` (e.g. "a run")."""
    if not may_create(user):
        raise OwnershipError(
            f"Sign in to make {what}: visitors who are not signed in can only look."
        )


def run_owner(rd: RunDir) -> str | None:
    """Who made a run (its job.json's owner; None where users were not known)."""
    owner = (read_json(rd.job, {}) or {}).get("owner")
    return owner if isinstance(owner, str) else None


def check_owner(user: User | None, rd: RunDir, action: str) -> None:
    """RunError unless ``user`` may ``action`` (e.g. "delete") the run."""
    try:
        check_change(user, run_owner(rd), action, f"run {rd.name}")
    except OwnershipError as e:
        raise RunError(str(e)) from None
