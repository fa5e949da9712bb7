"""The server's start-up warm-up (app.py's st.App, pages/ui/warm.py): a class's first pages do
not each wait for torch's import and the default model."""

from __future__ import annotations

import ast
import asyncio
import threading

from streamlit.web.server.app_discovery import discover_asgi_app

from core.model.parts import DecodeSettings
from core.runs.catalogue import default_entry, list_models
from pages.ui import cached, model_picker, warm
from pages.ui.frame import PAGES, PAGES_DIR
from pages.ui.view_state import DEFAULT_SENTENCE
from tests.helpers import ROOT


def test_app_py_is_streamlits_asgi_app_serving_the_studio_script():
    found = discover_asgi_app(ROOT / "app.py")
    assert found.is_asgi_app and found.app_name == "app"
    tree = ast.parse((ROOT / "app.py").read_text())
    called = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args]
    assert any(
        isinstance(a, ast.Constant) and a.value == "studio.py" for c in called for a in c.args
    )
    assert (ROOT / "studio.py").is_file()


def test_the_warm_up_imports_what_every_page_imports_and_no_page_script():
    names = warm.page_modules()
    for module in ("pages.ui.cached", "pages.ui.attention.sections", "pages.ui.train.form"):
        assert module in names
    scripts = {f"pages.{script.removesuffix('.py')}" for script, *_ in PAGES}
    assert not scripts & set(names)  # running a page script would draw it
    for script, *_ in PAGES:  # every import of every page is in the list
        tree = ast.parse((PAGES_DIR / script).read_text())
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert modules <= set(names)


def test_the_warm_up_keeps_the_default_model_and_its_default_translation(studio_dirs):
    entries = list_models(str(studio_dirs["checkpoints"]), str(studio_dirs["runs"]))
    entry = default_entry([e for e in entries if e.usable])
    assert not model_picker._loaded.peek(entry.path, entry.mtime)[0]
    done = warm.warm_up()
    assert done["model"] == entry.key and done["imports_s"] >= 0 and done["model_s"] >= 0
    found, lm = model_picker._loaded.peek(entry.path, entry.mtime)
    assert found  # the pages' own cache: their first run loads nothing
    t = cached.translate(lm, entry.path, entry.mtime, DEFAULT_SENTENCE, DecodeSettings())
    again = cached.translate(lm, entry.path, entry.mtime, DEFAULT_SENTENCE, DecodeSettings())
    assert t is again and t.text  # the default sentence is kept, as a page keeps it
    model_picker._loaded.clear()


def test_without_a_model_the_warm_up_only_imports(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_STUDIO_CHECKPOINTS", str(tmp_path / "none"))
    monkeypatch.setenv("ATTENTION_STUDIO_RUNS", str(tmp_path / "runs"))
    assert warm.warm_up()["model"] is None


def test_a_failing_warm_up_stops_nothing_and_says_why(monkeypatch):
    def broken():
        raise OSError("disk gone")

    monkeypatch.setattr(warm, "warm_up", broken)
    said = []
    monkeypatch.setattr(warm.LOG, "warning", lambda *args: said.append(args[0] % args[1:]))
    warm._warm_in_background()  # returns: the server goes on
    assert said == ["Warm-up skipped (OSError: disk gone); the first pages do it instead."]


def _threads_started_by_lifespan() -> list[str]:
    before = {t.name for t in threading.enumerate()}

    async def enter():
        async with warm.lifespan(None):
            return [t.name for t in threading.enumerate() if t.name not in before]

    started = []  # in a thread of its own: another test's event loop may run in this one
    runner = threading.Thread(target=lambda: started.extend(asyncio.run(enter())))
    runner.start()
    runner.join()
    return [name for name in started if name != runner.name]


def test_the_lifespan_warms_in_the_background_unless_switched_off(monkeypatch):
    ran = threading.Event()
    monkeypatch.setattr(warm, "_warm_in_background", ran.set)
    monkeypatch.setenv(warm.WARM_ENV, "0")
    assert _threads_started_by_lifespan() == [] and not ran.is_set()
    monkeypatch.delenv(warm.WARM_ENV)
    _threads_started_by_lifespan()
    assert ran.wait(5)


def test_a_page_waits_for_the_warm_up_under_way(monkeypatch):
    release, started = threading.Event(), threading.Event()

    def slow_warm_up():
        started.set()
        assert release.wait(30)
        return {"imports_s": 0, "model": None, "model_s": 0}

    monkeypatch.setattr(warm, "warm_up", slow_warm_up)
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    assert warm.wait_until_warm(0)  # no warm-up yet: nothing to wait for
    _threads_started_by_lifespan()
    assert started.wait(30)
    assert not warm.wait_until_warm(0)  # under way: a page run would import beside it
    release.set()
    assert warm.wait_until_warm(30)


def test_a_failed_warm_up_keeps_no_page_waiting(monkeypatch):
    def broken():
        raise ImportError("cannot import name 'LlamaForCausalLM' from 'transformers'")

    monkeypatch.setattr(warm, "warm_up", broken)
    monkeypatch.setattr(warm.LOG, "warning", lambda *args: None)
    warm._WARM.clear()
    warm._warm_then_release()
    assert warm.wait_until_warm(0)


def test_the_app_runs_a_page_only_once_the_warm_up_is_over(monkeypatch):
    from streamlit.testing.v1 import AppTest

    waited = []
    monkeypatch.setattr(warm, "wait_until_warm", lambda timeout=0: waited.append(timeout) or True)
    at = AppTest.from_file(str(ROOT / "studio.py"), default_timeout=60).run()
    assert waited == [0] and not at.exception  # asked before the page ran; it was over
    assert [t.value for t in at.title] == ["Attention Studio"]
