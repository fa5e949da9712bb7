"""Who uses this browser session, as the server's identity source tells (``core.runs.owners``):
Streamlit's own login (``st.user``) or a header an authenticating reverse proxy sets, trusted
only with proof that the proxy sent it, read from this session's own connection
(``core.runs.connection``)."""

from __future__ import annotations

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core.runs import owners
from core.runs.connection import Connection
from pages.ui.text import md


def peer_address() -> str | None:
    """The address this session's websocket came from, as the server's socket gave it (None
    where the session has no connection, as under AppTest).

    Streamlit's public ``st.context.ip_address`` answers None both for 127.0.0.1 / ::1 and
    where it knows nothing, so a trust decision cannot read it; this reads the session's
    client context it is made from (``remote_ip``, what Streamlit's own code calls the TCP
    peer) and checks the two agree. tests/test_connection.py fails if an upgrade moves it."""
    ctx = get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    client = runtime.get_instance().get_client(ctx.session_id)
    peer = getattr(getattr(client, "client_context", None), "remote_ip", None)
    if not isinstance(peer, str):
        return None
    public = st.context.ip_address
    return peer if public is None or public == peer else None


def connection() -> Connection:
    """This session's connection: its peer and its handshake's headers."""
    return Connection(peer_address(), st.context.headers.get_all)


def current_user() -> owners.User:
    """This session's user (``User()``, nobody known, where the server knows no users)."""
    mode = owners.identity_mode()
    if mode == "streamlit":
        info = st.user
        name = (info.get("email") or info.get("sub")) if info.get("is_logged_in") else None
        return owners.user_named(name)
    if mode == "header":
        return owners.header_user(connection())
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
