"""Real browser (headless Chromium): where an authenticating proxy names the user in a header,
another student sees a run but none of the buttons that would change it (issue 31, item 10).

The proxy is played by the test (``tests.header_proxy``): it sets the header on every
request it passes to the app, the page's and the websocket's, as a proxy in front of it would.
"""

from __future__ import annotations

import json

import pytest

from core.runs.owners import IDENTITY_ENV, PROXY_HEADER, PROXY_SECRET_ENV, TEACHERS_ENV
from core.runs.run_dir import RunDir
from tests import helpers
from tests.header_proxy import HeaderProxy
from tests.helpers import ARTIFACTS, assert_no_browser_exception

RUN = "20260101-000000-d2l"


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    """An app server that knows its users from X-Forwarded-User, over one run of alice's."""
    runs = tmp_path_factory.mktemp("owners-browser")
    rd = RunDir(runs / RUN)
    rd.create()
    rd.write_status(state="stopped", message="")
    rd.job.write_text(json.dumps({"run_id": RUN, "owner": "alice", "launched_at": 0}))
    env = {IDENTITY_ENV: "header:X-Forwarded-User", TEACHERS_ENV: "carol"}
    proc, url = helpers.start_server(runs, env=env)
    yield {"url": url, "runs": runs}
    helpers.stop_server(proc)


@pytest.mark.parametrize("user, may", [("bob", False), ("alice", True), ("carol", True)])
def test_a_run_shows_its_actions_to_its_owner_and_teachers_only(class_server, chromium, user, may):
    proxy = HeaderProxy(class_server["url"], "X-Forwarded-User", user)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(f"{proxy.url}/train?run={RUN}")
        page.get_by_text("All runs", exact=True).wait_for(timeout=60_000)
        page.get_by_text(f"Signed in as {user}").wait_for(timeout=30_000)
        delete = page.get_by_role("button", name="Delete run…")
        if may:
            delete.wait_for(timeout=30_000)
        assert (delete.count() == 1) is may
        if not may:
            page.get_by_text("belongs to alice").first.wait_for(timeout=10_000)
        assert_no_browser_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"owners_{user}.png"))
    finally:
        context.close()
        proxy.close()


SECRET = "a-shared-secret-for-the-test"


@pytest.fixture(scope="module")
def secret_server(tmp_path_factory):
    """An app server that trusts X-Forwarded-User only beside the proxy's secret."""
    runs = tmp_path_factory.mktemp("owners-secret")
    env = {IDENTITY_ENV: "header:X-Forwarded-User", TEACHERS_ENV: "carol"}
    proc, url = helpers.start_server(runs, env=env | {PROXY_SECRET_ENV: SECRET})
    yield url
    helpers.stop_server(proc)


def signed_in_as(url: str, chromium) -> str:
    """The sidebar's "Signed in as …" or "Not signed in" line of the Home page at ``url``."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(url)
        line = page.get_by_text("Signed in as").or_(page.get_by_text("Not signed in"))
        line.first.wait_for(timeout=60_000)
        assert_no_browser_exception(page)
        return line.first.inner_text()
    finally:
        context.close()


@pytest.mark.parametrize(
    "secret, signed_in",
    [(SECRET, "Signed in as carol"), ("a-guess-at-the-secret-xxxx", "Not signed in"), ("", None)],
)
def test_a_header_is_trusted_only_beside_the_proxys_secret(
    secret_server, chromium, secret, signed_in
):
    """Issue 49: a client that reaches the port and names itself carol is not carol."""
    more = {PROXY_HEADER: secret} if secret else {}
    proxy = HeaderProxy(secret_server, "X-Forwarded-User", "carol", more)
    try:
        assert signed_in_as(proxy.url, chromium) == (signed_in or "Not signed in")
    finally:
        proxy.close()


def test_a_header_sent_twice_signs_nobody_in(secret_server, chromium):
    """A client sends X-Forwarded-User: carol itself; a careless proxy appends bob's (and the
    secret) instead of replacing it: two values, nobody signed in."""
    careless = HeaderProxy(
        secret_server, "X-Forwarded-User", "bob", {PROXY_HEADER: SECRET}, appends=True
    )
    client = HeaderProxy(careless.url, "X-Forwarded-User", "carol")
    try:
        assert signed_in_as(careless.url, chromium) == "Signed in as bob"  # once: bob
        assert signed_in_as(client.url, chromium) == "Not signed in"
    finally:
        client.close()
        careless.close()


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory):
    """The app served as an operator may serve it: ``uvicorn app:app --host 0.0.0.0``, header
    identity without a secret. Streamlit's ``server.address`` still reads 127.0.0.1 there."""
    if helpers.own_address() is None:
        pytest.skip("this machine has no address but loopback")
    runs = tmp_path_factory.mktemp("owners-uvicorn")
    env = {IDENTITY_ENV: "header:X-Forwarded-User", TEACHERS_ENV: "teacher"}
    env |= {PROXY_SECRET_ENV: "", "ATTENTION_STUDIO_WARM": "0"}
    proc, url = helpers.start_server(runs, env=env, uvicorn_host="0.0.0.0")
    yield url
    helpers.stop_server(proc)


@pytest.mark.parametrize(
    "via, more, signed_in",
    [
        ("own", {}, "Not signed in"),  # from this machine's network address: anyone's
        ("own", {"X-Forwarded-For": "127.0.0.1"}, "Not signed in"),
        ("127.0.0.1", {"X-Forwarded-For": "127.0.0.1"}, "Not signed in"),  # forwarded
        ("127.0.0.1", {}, "Signed in as teacher"),  # straight from loopback: the proxy
    ],
)
def test_a_header_is_trusted_by_the_connections_peer_not_the_servers_setting(
    uvicorn_server, chromium, via, more, signed_in
):
    """Issue 64, item 1: under uvicorn on every interface, a client that reaches the port from
    the network and names itself the teacher is nobody; a proxy on loopback is trusted."""
    address = helpers.own_address() if via == "own" else via
    proxy = HeaderProxy(uvicorn_server, "X-Forwarded-User", "teacher", more, via=address)
    try:
        assert signed_in_as(proxy.url, chromium) == signed_in
    finally:
        proxy.close()
