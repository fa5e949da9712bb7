"""Widgets and cached loaders shared by the Translate and Attention pages."""

from __future__ import annotations

import contextlib

import streamlit as st
from streamlit.errors import StreamlitAPIException

from core import explore as ex
from core.checkpoint import CheckpointError, LoadedModel, load_checkpoint
from core.data import ATTRIBUTION
from core.decode import Translation


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def load_model(path: str, mtime: float) -> LoadedModel:
    """A checkpoint loaded once per path and modification time (never mutated)."""
    return load_checkpoint(path)


@st.cache_data(show_spinner=False, ttl=5)
def list_models(checkpoints: str, runs: str) -> list[ex.ModelEntry]:
    """Models on disk, newest first (re-read every few seconds)."""
    return ex.list_models(checkpoints, runs)


@st.cache_data(show_spinner=False, max_entries=256)
def translate(
    _lm: LoadedModel, path: str, mtime: float, sentence: str, settings: ex.DecodeSettings
) -> Translation:
    """A translation with all maps, cached per model file, sentence and settings."""
    return ex.translate_sentence(_lm, sentence, settings)


@st.cache_data(show_spinner="Rebuilding the validation split…", max_entries=8)
def validation_examples(_meta: dict, data_key: str) -> tuple[list[ex.ValidationExample], str]:
    """Validation sentences of a model's corpus (slow once, then cached by data settings)."""
    return ex.validation_examples(_meta)


def ensure_app_navigation() -> None:
    """Hand over to app.py's st.navigation when Streamlit ran this page in legacy mode.

    With a ``pages/`` folder beside app.py, a fresh server whose first request is a page
    URL (a shared link, a reload) runs that page directly and lists every file of
    ``pages/`` in the sidebar. Turning the legacy flag off and rerunning runs app.py.
    Done once per session: a rerun would drop the widget event that caused this run.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and not st.session_state.get("_app_navigation"):
        st.session_state["_app_navigation"] = True
        PagesManager.uses_pages_directory = False
        st.rerun()


def view_state() -> ex.ViewState:
    """The shared view state: from the URL on the session's first run, then the session's."""
    if "view_state" not in st.session_state:
        st.session_state["view_state"] = ex.ViewState.from_query(st.query_params.to_dict())
    return st.session_state["view_state"]


def write_url(state: ex.ViewState, keys: tuple[str, ...]) -> None:
    """Put this page's part of the state into the URL, dropping keys at their defaults."""
    wanted = state.to_query(keys)
    for key in keys:
        if key in wanted:
            if st.query_params.get(key) != wanted[key]:
                st.query_params[key] = wanted[key]
        elif key in st.query_params:
            del st.query_params[key]


def widget_default(key: str, value, options=None) -> None:
    """Seed a widget's session value from the state unless the widget already holds one."""
    if key not in st.session_state or (
        options is not None and st.session_state[key] not in options
    ):
        st.session_state[key] = value


def link(page: str, label: str, query: dict | None = None) -> None:
    """A link to another page of the app; silently absent when the page runs on its own."""
    with contextlib.suppress(StreamlitAPIException):
        st.page_link(page, label=label, query_params=query)


def pick_model(state: ex.ViewState, prefix: str) -> tuple[ex.ModelEntry, LoadedModel] | None:
    """The model picker (widget key ``<prefix>_model``); None, with a message, if none works."""
    entries = list_models(str(ex.checkpoints_dir()), str(ex.runs_dir()))
    usable = [e for e in entries if e.usable]
    broken = [e for e in entries if not e.usable]
    if not usable:
        st.error(
            f"No trained model is available yet: nothing usable in `{ex.checkpoints_dir()}` "
            f"or `{ex.runs_dir()}`. Train one on the Train page, then come back."
        )
        link("pages/train.py", "Go to the Train page", None)
    else:
        keys = [e.key for e in usable]
        chosen = ex.find_entry(usable, state.model) or ex.default_entry(usable)
        widget_default(f"{prefix}_model", chosen.key, keys)
        by_key = {e.key: e for e in usable}
        state.model = st.selectbox(
            "Model (newest first)",
            keys,
            key=f"{prefix}_model",
            format_func=lambda k: by_key[k].label,
        )
    if broken:
        with st.expander(f"{len(broken)} model file(s) cannot be used"):
            for e in broken:
                st.markdown(f"- `{e.key}`: {e.reason}")
    if not usable:
        return None
    entry = by_key[state.model]
    if not any(e.kind == "shipped checkpoint" and e.key.endswith(ex.SHIPPED_NAME) for e in usable):
        st.caption(
            f"The shipped model `{ex.SHIPPED_NAME}` is not in `{ex.checkpoints_dir()}` "
            "yet: showing the models trained here."
        )
    st.caption(
        f"{entry.kind} · {entry.data} · {entry.size} · "
        + (f"step {entry.step:,}" if entry.step is not None else "step unknown")
        + " · "
        + (
            f"val BLEU {entry.val_bleu:.1f}"
            if entry.val_bleu is not None
            else "no validation BLEU recorded"
        )
    )
    try:
        return entry, load_model(entry.path, entry.mtime)
    except CheckpointError as e:
        st.error(f"This model cannot be loaded: {e}")
        return None


def sentence_input(state: ex.ViewState, prefix: str) -> str:
    """The English sentence box (widget key ``<prefix>_sentence``), kept in the view state."""
    widget_default(f"{prefix}_sentence", state.sentence)
    state.sentence = st.text_input("English sentence", key=f"{prefix}_sentence", max_chars=1000)
    return state.sentence


def attribution() -> None:
    """The corpus attribution, shown wherever the data or a model trained on it is used."""
    st.divider()
    st.caption(f"Data: {ATTRIBUTION}")
