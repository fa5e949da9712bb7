"""Real browser (headless Chromium): where an authenticating proxy names the user in a header,
another student sees a run but none of the buttons that would change it (issue 31, item 10).

The proxy is played by the test (``tests.header_proxy``): it sets the header on every
request it passes to the app, the page's and the websocket's, as a proxy in front of it would.
"""

from __future__ import annotations

import json

import pytest

from core.runs.owners import IDENTITY_ENV, TEACHERS_ENV
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
