"""Who may undo what (issue 31, item 10): where the server knows its users (Streamlit's login
or a proxy's header), runs and saved models belong to whoever made them; others may view
and compare, only the owner or a teacher may stop, resume, delete, rename, annotate, save
from or replace. Without an identity the app behaves as it always did."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from core.runs import jobs, owners
from core.runs.catalogue import ModelError
from core.runs.connection import Connection
from core.runs.notes import write_notes
from core.runs.promotion import promote
from core.runs.run_dir import RunDir, RunError, read_json
from tests.helpers import ROOT, assert_clean, plain

ALICE, BOB, VISITOR = owners.User("alice"), owners.User("bob"), owners.User()
TEACHER = owners.User("carol", teacher=True)


@pytest.fixture
def by_header(monkeypatch):
    """The server knows its users from the X-Forwarded-User header; carol is a teacher."""
    monkeypatch.setenv(owners.IDENTITY_ENV, "header:X-Forwarded-User")
    monkeypatch.setenv(owners.TEACHERS_ENV, "carol, dave")


def test_identity_sources_and_teachers_from_the_operators_settings(monkeypatch):
    monkeypatch.delenv(owners.IDENTITY_ENV, raising=False)
    assert owners.identity_mode() == "" and owners.may_change(VISITOR, "alice")
    for value, mode in (("streamlit", "streamlit"), ("header:X-User", "header"), ("", "")):
        monkeypatch.setenv(owners.IDENTITY_ENV, value)
        assert owners.identity_mode() == mode
    monkeypatch.setenv(owners.TEACHERS_ENV, " carol ,dave,")
    assert owners.user_named("carol").teacher and not owners.user_named("alice").teacher
    assert owners.user_named("  al  ice ").name == "al ice"
    assert owners.user_named("x" * 500).name is None and owners.user_named(None).name is None


@pytest.mark.parametrize(
    "user, owner, allowed",
    [
        (ALICE, "alice", True),
        (BOB, "alice", False),
        (TEACHER, "alice", True),
        (VISITOR, "alice", False),
        (BOB, None, False),  # made before users were known: a teacher's
        (TEACHER, None, True),
        (None, "alice", True),  # the command line: the operator
    ],
)
def test_who_may_change_what_where_users_are_known(by_header, user, owner, allowed):
    assert owners.may_change(user, owner) is allowed


def _run_of(runs, name: str, owner: str | None, state: str = "stopped") -> RunDir:
    rd = RunDir(runs / name)
    rd.create()
    rd.write_status(state=state)
    rd.job.write_text(json.dumps({"run_id": name, "owner": owner, "launched_at": 0}))
    return rd


def test_only_the_owner_or_a_teacher_may_rename_annotate_resume_or_delete(jobs_env, by_header):
    rd = _run_of(jobs_env["runs"], "20260101-000000-d2l", "alice")
    for action in (
        lambda u: jobs.rename_run(rd.name, "mine now", user=u),
        lambda u: write_notes(rd.name, "=HYPERLINK()", "x", user=u),
        lambda u: jobs.resume_run(rd.name, user=u),
        lambda u: jobs.delete_run(rd.name, user=u),
    ):
        with pytest.raises(RunError, match="belongs to alice: only its owner or a teacher"):
            action(BOB)
        with pytest.raises(RunError, match="Sign in to"):
            action(VISITOR)
    assert rd.path.is_dir() and "name" not in read_json(rd.job)
    assert jobs.rename_run(rd.name, "alice's", user=ALICE) == "alice's"
    assert jobs.rename_run(rd.name, "checked", user=TEACHER) == "checked"
    jobs.delete_run(rd.name, user=ALICE)
    assert not rd.path.exists()


def test_a_run_records_who_started_it_and_a_visitor_may_not_start_one(
    jobs_env, by_header, tiny_settings
):
    from tests.helpers import TINY_PRESET

    with pytest.raises(RunError, match="Sign in to make a run"):
        jobs.start_run(TINY_PRESET, tiny_settings, user=VISITOR)
    run_id = jobs.start_run(TINY_PRESET, tiny_settings, user=ALICE)
    assert read_json(RunDir(jobs_env["runs"] / run_id).job)["owner"] == "alice"
    with pytest.raises(RunError, match="belongs to alice"):
        jobs.stop_run(run_id, user=BOB)
    jobs.stop_run(run_id, wait=30, user=ALICE)


def test_without_an_identity_everyone_may_do_everything_as_before(jobs_env, monkeypatch):
    monkeypatch.delenv(owners.IDENTITY_ENV, raising=False)
    rd = _run_of(jobs_env["runs"], "20260101-000000-d2l", "alice")
    assert jobs.rename_run(rd.name, "renamed", user=VISITOR) == "renamed"
    jobs.delete_run(rd.name, user=BOB)


def test_a_saved_model_is_replaced_only_by_its_owner_or_a_teacher(jobs_env, by_header, tiny_run):
    shutil.copytree(tiny_run, jobs_env["runs"] / "done")
    (jobs_env["runs"] / "done" / "job.json").write_text(json.dumps({"owner": "alice"}))
    dest = promote("done", "last", "alice-model", user=ALICE)
    with pytest.raises(ModelError, match="belongs to alice"):
        promote("done", "last", "bob-copy", user=BOB)  # bob may not save from alice's run
    before = dest.read_bytes()
    (jobs_env["runs"] / "done" / "job.json").write_text(json.dumps({"owner": "bob"}))
    with pytest.raises(ModelError, match="Model alice-model belongs to alice"):
        promote("done", "last", "alice-model", overwrite=True, user=BOB)
    assert dest.read_bytes() == before
    promote("done", "last", "alice-model", overwrite=True, user=TEACHER)


# ----------------------------------------------------------------------------- the page


def train_page(monkeypatch, runs, user: dict, run_id: str) -> AppTest:
    """The Train page on ``run_id`` as a user signed in with Streamlit's own login."""
    monkeypatch.setenv(owners.IDENTITY_ENV, "streamlit")
    monkeypatch.setenv(owners.TEACHERS_ENV, "carol@school.org")
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(runs))
    at = AppTest.from_file(str(ROOT / "pages" / "train.py"), default_timeout=60)
    at.user = user
    at.query_params["run"] = run_id
    return at.run()


@pytest.mark.parametrize(
    "who, may",
    [
        ({"is_logged_in": True, "email": "alice@school.org"}, True),
        ({"is_logged_in": True, "email": "bob@school.org"}, False),
        ({"is_logged_in": True, "email": "carol@school.org"}, True),  # a teacher
        ({"is_logged_in": False}, False),
    ],
)
def test_the_train_page_offers_a_runs_actions_to_its_owner_and_teachers_only(
    tmp_path, monkeypatch, who, may
):
    rd = _run_of(tmp_path, "20260101-000000-d2l", "alice@school.org")
    at = train_page(monkeypatch, tmp_path, who, rd.name)
    assert_clean(at)
    labels = [b.label for b in at.button]
    captions = " ".join(plain(c.value) for c in at.caption)
    assert ("Delete run…" in labels) is may
    assert ("Save name" in [b.label for b in at.button]) is may  # the rename form
    if not may:
        assert "belongs to alice@school.org" in captions or "Sign in to change" in captions


# ----------------------------------------------------------------------------- issue 49


@pytest.mark.parametrize(
    "value",
    ["Streamlit", "header:X-Forwarded-User,", "headers:X-Forwarded-User", "header:", "header:a b"],
)
def test_a_mistyped_identity_setting_is_refused_not_read_as_nobody_known(monkeypatch, value):
    monkeypatch.setenv(owners.IDENTITY_ENV, value)
    with pytest.raises(owners.IdentityConfigError, match="not a setting the server understands"):
        owners.identity_mode()
    assert "not a setting the server understands" in owners.identity_problem("127.0.0.1")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_identity_value_is_understood_or_refused(value):
    """Whatever an operator types: one of the three modes, or a refusal in one line."""
    import os

    old = os.environ.get(owners.IDENTITY_ENV)
    os.environ[owners.IDENTITY_ENV] = value.replace("\x00", "")
    try:
        problem = owners.identity_problem("127.0.0.1")
        if problem is None:
            assert owners.identity_mode() in ("", "streamlit", "header")
        else:
            assert "\n" not in problem and owners.IDENTITY_ENV in problem
    finally:
        if old is None:
            os.environ.pop(owners.IDENTITY_ENV, None)
        else:
            os.environ[owners.IDENTITY_ENV] = old


def test_header_identity_needs_a_secret_or_a_loopback_server(monkeypatch, by_header):
    monkeypatch.delenv(owners.PROXY_SECRET_ENV, raising=False)
    for address in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert owners.identity_problem(address) is None
    for address in ("0.0.0.0", "", "10.0.0.5"):
        assert "needs proof that the proxy sent the header" in owners.identity_problem(address)
    monkeypatch.setenv(owners.PROXY_SECRET_ENV, "short")
    assert "at least 16 characters" in owners.identity_problem("0.0.0.0")
    monkeypatch.setenv(owners.PROXY_SECRET_ENV, "s3cret-s3cret-s3cret")
    assert owners.identity_problem("0.0.0.0") is None


def headers(peer: str | None = "127.0.0.1", **fields) -> Connection:
    """A connection from ``peer`` whose handshake carried these headers (each a list)."""
    lower = {k.lower().replace("_", "-"): v for k, v in fields.items()}
    return Connection(peer, lambda name: list(lower.get(name.lower(), [])))


def test_a_header_names_the_user_only_once_and_only_with_the_proxys_secret(monkeypatch, by_header):
    secret = "s3cret-s3cret-s3cret"
    monkeypatch.delenv(owners.PROXY_SECRET_ENV, raising=False)  # straight from loopback: trusted
    assert owners.header_user(headers(x_forwarded_user=["alice"])).name == "alice"
    assert owners.header_user(headers(x_forwarded_user=["carol", "bob"])).name is None
    assert owners.header_user(headers()).name is None
    monkeypatch.setenv(owners.PROXY_SECRET_ENV, secret)
    assert owners.header_user(headers(x_forwarded_user=["carol"])).name is None  # no proof
    sent = {"x_forwarded_user": ["carol"], "x_attention_studio_proxy": [secret]}
    assert owners.header_user(headers(**sent)).teacher
    assert owners.header_user(headers("203.0.113.7", **sent)).teacher  # from anywhere
    wrong = {"x_forwarded_user": ["carol"], "x_attention_studio_proxy": [secret + "x"]}
    assert owners.header_user(headers(**wrong)).name is None
    twice = {"x_forwarded_user": ["carol"], "x_attention_studio_proxy": [secret, secret]}
    assert owners.header_user(headers(**twice)).name is None
    monkeypatch.setenv(owners.PROXY_SECRET_ENV, "short")  # too short to prove anything
    assert owners.header_user(headers(x_forwarded_user=["carol"])).name is None
    short = {**sent, "x_attention_studio_proxy": ["short"]}
    assert owners.header_user(headers(**short)).name is None


@pytest.mark.parametrize(
    "peer, forwarded, trusted",
    [
        ("127.0.0.1", None, True),
        ("::1", None, True),
        ("127.0.0.2", None, True),  # all of 127.0.0.0/8 is this machine
        ("::ffff:127.0.0.1", None, True),
        ("192.0.2.2", None, False),  # the machine's own network address: anyone's way in
        ("10.0.0.5", None, False),
        ("0.0.0.0", None, False),
        (None, None, False),  # no connection known: nobody
        ("localhost", None, False),  # a name, not an address the socket gives
        ("127.0.0.1", "127.0.0.1", False),  # the peer may be what a forwarding header said
        ("127.0.0.1", "203.0.113.9", False),
    ],
)
def test_without_a_secret_a_header_is_trusted_only_straight_from_loopback(
    monkeypatch, by_header, peer, forwarded, trusted
):
    """Issue 64, item 1: the connection's own peer decides, never the server's setting."""
    monkeypatch.delenv(owners.PROXY_SECRET_ENV, raising=False)
    more = {"x_forwarded_for": [forwarded]} if forwarded else {}
    user = owners.header_user(headers(peer, x_forwarded_user=["carol"], **more))
    assert (user.name == "carol") is trusted
    for name in ("Forwarded",):  # any forwarding header, not only X-Forwarded-For
        conn = headers(peer, x_forwarded_user=["carol"], **{name: ["for=127.0.0.1"]})
        assert owners.header_user(conn).name is None


def test_a_server_that_cannot_trust_its_header_serves_one_line(monkeypatch, studio_dirs):
    monkeypatch.setenv(owners.IDENTITY_ENV, "header:X-Forwarded-User")
    monkeypatch.delenv(owners.PROXY_SECRET_ENV, raising=False)
    from streamlit import config

    old = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")  # every interface: anyone can send a header
    try:
        at = AppTest.from_file(str(ROOT / "studio.py"), default_timeout=120)
        at.run()
    finally:
        config.set_option("server.address", old)
    assert not at.exception
    assert len(at.error) == 1 and "needs proof that the proxy sent" in at.error[0].value
    assert not at.button and not at.text_input  # nothing else is served
