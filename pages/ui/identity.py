"""Who uses this browser session, as the server's identity source tells (``core.runs.owners``):
Streamlit's own login (``st.user``) or a header an authenticating reverse proxy sets, trusted
only with proof that the proxy sent it."""

from __future__ import annotations

import streamlit as st

from core.runs import owners
from pages.ui.text import md


def current_user() -> owners.User:
    """This session's user (``User()``, nobody known, where the server knows no users)."""
    mode = owners.identity_mode()
    if mode == "streamlit":
        info = st.user
        name = (info.get("email") or info.get("sub")) if info.get("is_logged_in") else None
        return owners.user_named(name)
    if mode == "header":
        return owners.header_user(st.context.headers.get_all)
    return owners.User()


def identity_problem() -> str | None:
    """Why this server must not serve with its identity settings (None: it may)."""
    return owners.identity_problem(str(st.get_option("server.address") or ""))


def user_line() -> None:
    """In the sidebar, where users are known: who is signed in, and Streamlit's sign-in."""
    mode = owners.identity_mode()
    if not mode:
        return
    user = current_user()
    st.sidebar.caption(f"Signed in as {md(user.name)}" if user.name else "Not signed in")
    if user.teacher:
        st.sidebar.caption("Teacher: you may change every run and model.")
    if mode != "streamlit":
        return
    if user.name is None and st.sidebar.button("Sign in"):
        st.login()
    if user.name is not None and st.sidebar.button("Sign out"):
        st.logout()


def not_yours(owner: str | None, what: str) -> str | None:
    """Why this session may only look at ``what`` (e.g. "run X"), or None when it may change it."""
    try:
        owners.check_change(current_user(), owner, "change", what)
    except owners.OwnershipError as e:
        return str(e)
    return None
