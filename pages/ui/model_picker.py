"""The model picker: list the models (cached), choose one, show its caption, load it."""

from __future__ import annotations

import functools

import streamlit as st

from core.model.checkpoints import CheckpointError
from core.model.interface import TranslationModel
from core.model.opened import open_model
from core.places import checkpoints_root, runs_root, shown_path
from core.runs import budget
from core.runs import catalogue as models
from pages.ui.frame import link
from pages.ui.shared_cache import MODELS, shared
from pages.ui.text import code, md
from pages.ui.view_state import ViewState
from pages.ui.view_widgets import widget_default


@st.cache_data(show_spinner=False, ttl=5)
def _list_models(checkpoints: str, runs: str) -> list[models.ModelEntry]:
    """Models on disk, newest first (re-read every few seconds)."""
    return models.list_models(checkpoints, runs)


def model_entries() -> list[models.ModelEntry]:
    """Every model the app can offer (from core.runs.catalogue, the one catalogue)."""
    return _list_models(str(checkpoints_root()), str(runs_root()))


def load_model(path: str, mtime: float) -> TranslationModel:
    """A checkpoint loaded once per path and modification time (never mutated), unless its
    weights pass what the server opens (budget.MODEL_BYTES): then CheckpointError says so."""
    if problem := _open_problem(path, mtime):
        raise CheckpointError(problem)
    return _loaded(path, mtime)


@functools.lru_cache(maxsize=256)
def _open_problem(path: str, mtime: float) -> str | None:
    """Why the server will not open this model file (None: it will), once per file version."""
    return budget.open_problem(path)


@shared(spinner="Loading the model…", pool=MODELS)
def _loaded(path: str, mtime: float) -> TranslationModel:
    """A checkpoint or Hugging Face model folder loaded (kept among the server's open models,
    within their bytes)."""
    return open_model(path, max_bytes=budget.HF_MODEL_BYTES)


def choose_model(state: ViewState, prefix: str) -> models.ModelEntry | None:
    """The picker (widget key ``<prefix>_model``); None, with a message, if no model works."""
    entries = model_entries()
    if state.model and models.find_entry([e for e in entries if e.usable], state.model) is None:
        _list_models.clear()  # asked for a model newer than the list (re-read every 5 s)
        entries = model_entries()
    usable = [e for e in entries if e.usable]
    starting = [e for e in entries if not e.usable and e.reason == models.NO_CHECKPOINT_YET]
    broken = [e for e in entries if not e.usable and e not in starting]
    entry = None
    if not usable:
        st.error(
            "No trained model is available yet: nothing usable in "
            f"{code(shown_path(checkpoints_root()))} or {code(shown_path(runs_root()))}. Train "
            "one on the Train page, then come back."
        )
        link("train.py", "Go to the Train page")
    else:
        by_key = {e.key: e for e in usable}
        chosen = models.find_entry(usable, state.model) or models.default_entry(usable)
        if state.model and state.model != chosen.key:
            gone = "not found or cannot be used (renamed, deleted or damaged?)"
            if "model" in state.asked:  # from a link: said in its note (link_note)
                state.why["model"] = gone
            else:
                st.warning(f"Model {code(state.model)} was {gone}: showing the default model.")
        widget_default(f"{prefix}_model", chosen.key, list(by_key))
        state.model = st.selectbox(
            "Model (newest first)",
            list(by_key),
            key=f"{prefix}_model",
            format_func=lambda k: by_key[k].label,
        )
        entry = by_key[state.model]
    if starting:  # not a fault: each appears with its first checkpoint
        runs = ", ".join(code(e.key) for e in starting)
        st.caption(
            f"Still starting, no checkpoint yet: {runs}. Each appears here once it saves one."
        )
    if broken:
        with st.expander(f"{len(broken)} model file(s) cannot be used"):
            for e in broken:
                st.markdown(f"- {code(e.key)}: {md(e.reason)}")
    return entry


def pick_model(state: ViewState, prefix: str) -> tuple[models.ModelEntry, TranslationModel] | None:
    """Choose a model, caption it and load it; None (with a message) when that fails."""
    entry = choose_model(state, prefix)
    if entry is None:
        return None
    if not any(e.origin == "shipped model" for e in model_entries() if e.usable):
        st.caption(
            f"The shipped model {code(models.SHIPPED_NAME)} is not in "
            f"{code(shown_path(checkpoints_root()))} yet: showing the models trained here."
        )
    st.caption(md(models.entry_caption(entry)))
    try:
        return entry, load_model(entry.path, entry.mtime)
    except CheckpointError as e:
        st.error(f"This model cannot be loaded: {md(e)}")
        return None
