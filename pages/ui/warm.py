"""The server's start-up: what every first page would otherwise wait for, done beforehand.

A page's first run in a fresh server imports torch and the studio (about 1.5 s here), opens
the picker's default model and pays torch's first calls on it: ten students opening their
pages at once all waited for that (bench/load.py: 3.3 s p95). ``lifespan`` (app.py's
``st.App``) starts ``warm_up`` in a background thread as the server starts, so the server
answers at once and is ready before the first student arrives. Nothing here may stop the
server: a warm-up that fails says why on the console, and the pages then do the work
themselves as before. A page run waits for a warm-up under way (``wait_until_warm``): run
beside it, a page's first import of a transformers class could come back half made
("cannot import name 'LlamaForCausalLM' from 'transformers'" on Home), and the page would
have waited for the same imports and the same model anyway.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import threading
import time

from streamlit.logger import get_logger

LOG = get_logger(__name__)  # Streamlit's console logging (its ``logger.level``, info)
WARM_ENV = "ATTENTION_STUDIO_WARM"  # "0": no warm-up
WAIT_S = 120.0  # a page waits at most this long for the warm-up, then does the work itself
_WARM = threading.Event()  # set: no warm-up under way (none started, or it is over)
_WARM.set()


def page_modules() -> list[str]:
    """Every module the page scripts import (read from their source: the scripts themselves
    draw a page when run, so they are not imported)."""
    from pages.ui.frame import PAGES, PAGES_DIR  # the studio's imports: not at the server's start

    names: list[str] = []
    for script, *_ in PAGES:
        tree = ast.parse((PAGES_DIR / script).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
    return list(dict.fromkeys(names))


def warm_model() -> str | None:
    """Open the picker's default model (``catalogue.default_entry``) into the server's model
    cache and translate the pages' default sentence with it, kept as the pages keep it; the
    model's key, or None when there is no usable model."""
    from core.places import checkpoints_root, runs_root
    from core.runs.catalogue import default_entry, list_models
    from pages.ui.cached import sentence_maps, translate
    from pages.ui.model_picker import load_model
    from pages.ui.view_state import ViewState

    usable = [e for e in list_models(str(checkpoints_root()), str(runs_root())) if e.usable]
    if not usable:
        return None
    entry, state = default_entry(usable), ViewState()
    lm = load_model(entry.path, entry.mtime)
    settings = state.settings()
    t = translate(lm, entry.path, entry.mtime, state.sentence, settings)
    sentence_maps(t, (entry.path, entry.mtime, state.sentence, settings, state.target))
    return entry.key


def warm_up() -> dict:
    """Import the pages' modules, then warm the default model; what was done, with seconds."""
    started = time.perf_counter()
    for name in page_modules():
        importlib.import_module(name)
    from core.runs.cpu_share import server_threads

    server_threads()  # the pages' thread policy for this process
    imported = time.perf_counter()
    model = warm_model()
    return {
        "imports_s": round(imported - started, 2),
        "model": model,
        "model_s": round(time.perf_counter() - imported, 2),
    }


def wait_until_warm(timeout: float = WAIT_S) -> bool:
    """Wait for a warm-up under way to end (at most ``timeout`` seconds); whether it has."""
    return _WARM.wait(timeout)


def _warm_in_background() -> None:
    """warm_up, its outcome on the server's console (a failure never reaches a page)."""
    try:
        done = warm_up()
    except Exception as e:  # noqa: BLE001 - the pages do the work themselves then
        LOG.warning("Warm-up skipped (%s: %s); the first pages do it instead.", type(e).__name__, e)
        return
    LOG.info("Warmed up: imports %(imports_s)s s, model %(model)s in %(model_s)s s", done)


def _warm_then_release() -> None:
    """The warm-up thread: ``_warm_in_background``, then the waiting pages go on, however it
    ended."""
    try:
        _warm_in_background()
    finally:
        _WARM.set()


@contextlib.asynccontextmanager
async def lifespan(_app):
    """st.App's start-up and shut-down: the warm-up starts in a daemon thread (unless
    ``ATTENTION_STUDIO_WARM=0``) and the server serves meanwhile."""
    if os.environ.get(WARM_ENV, "1") != "0":
        _WARM.clear()  # the pages wait for it from now on (wait_until_warm)
        threading.Thread(target=_warm_then_release, name="warm-up", daemon=True).start()
    yield
