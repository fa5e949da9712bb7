"""Who may change what: runs and saved models belong to whoever made them, where users are known.

The operator tells the server how it knows its users (``ATTENTION_STUDIO_IDENTITY``):

- unset: nobody is known, and every session may do everything (one person's machine, or a
  class that trusts itself), as the app always did;
- ``streamlit``: Streamlit's own login (``st.login``; an ``[auth]`` section in
  ``.streamlit/secrets.toml``): a user is their e-mail address (else their ``sub``);
- ``header:NAME``: a header that an authenticating reverse proxy sets on every request,
  e.g. ``header:X-Forwarded-User`` (the app must then be reachable only through that proxy).

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

from core.runs.run_dir import RunDir, RunError, read_json

IDENTITY_ENV = "ATTENTION_STUDIO_IDENTITY"  # "", "streamlit" or "header:NAME"
TEACHERS_ENV = "ATTENTION_STUDIO_TEACHERS"  # users who may change everything, comma-separated
MAX_NAME_CHARS = 200  # a longer user name is not one
VISITOR = "visitors who are not signed in can only look"
HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")  # an HTTP header's name


class OwnershipError(Exception):
    """A user may not change a run or model that is somebody else's; the message says whose."""


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
    """How the server knows its users: "" (it does not), "streamlit" or "header"."""
    value = os.environ.get(IDENTITY_ENV, "").strip()
    if value == "streamlit":
        return "streamlit"
    return "header" if identity_header() else ""


def identity_header() -> str | None:
    """The header that names the user (``header:NAME``), or None."""
    value = os.environ.get(IDENTITY_ENV, "").strip()
    name = value.partition(":")[2].strip() if value.startswith("header:") else ""
    return name if HEADER_RE.fullmatch(name) else None


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
