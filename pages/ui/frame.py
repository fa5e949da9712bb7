"""The app's frame: its pages, the navigation every page runs under, links and the footer.

Multipage by ``st.navigation`` + ``st.Page``: studio.py (the script app.py serves) runs
``run_app()``. Streamlit also treats a ``pages/`` folder beside it as an automatic page
list, used for a first request straight to a page URL; ``ensure_app_navigation`` then
registers the app's own navigation (public ``st.navigation``, which ends that mode) and
reruns. Only page scripts sit in ``pages/`` itself; helpers live in ``pages/ui/``, which
Streamlit never lists.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import streamlit as st
from streamlit.errors import StreamlitAPIException

from core.corpus.text import ATTRIBUTION
from core.corpus.user_files import data_credit
from core.runs.cpu_share import server_threads
from pages.ui.heavy_work import limit_problem
from pages.ui.identity import identity_problem, user_line

if TYPE_CHECKING:
    from core.model.interface import TranslationModel

PAGES_DIR = Path(__file__).resolve().parent.parent
NAV_KEY = "_app_navigation"  # set once studio.py's navigation has run in this session
PAGES = [  # (script in pages/, title, icon, what it is for)
    ("home.py", "Home", ":material/home:", "what the app is, the models and the runs"),
    (
        "train.py",
        "Train",
        ":material/model_training:",
        "configure and launch training, watch the curves live, stop, resume, compare runs",
    ),
    (
        "translate.py",
        "Translate",
        ":material/translate:",
        "translate English sentences with a trained model (greedy or beam search)",
    ),
    (
        "attention.py",
        "Attention",
        ":material/grid_on:",
        "inspect encoder, decoder and cross attention, head by head",
    ),
]


def app_pages() -> list:
    """The st.Page of every page script, Home first (the default)."""
    return [
        st.Page(PAGES_DIR / script, title=title, icon=icon, default=script == "home.py")
        for script, title, icon, _ in PAGES
    ]


def unknown_page() -> str | None:
    """The page the browser's URL asked for when the app has none of that name, else None.

    Streamlit's navigation then runs Home in its place and says only "Page not found" in a
    dialog; ``st.context.url`` still holds the path asked for on that first run."""
    url = st.context.url
    if not url:  # no browser (AppTest), or a client that sent no URL
        return None
    known = [page.url_path for page in app_pages()]
    return unknown_path(urlsplit(url).path, st.get_option("server.baseUrlPath") or "", known)


def unknown_path(path: str, base: str, known: list[str]) -> str | None:
    """The page name in a URL's ``path`` (below the server's ``base`` path) when it is none
    of the ``known`` pages' URL paths ("" being Home), else None."""
    rest, base = unquote(path).strip("/"), base.strip("/")
    if base and (rest == base or rest.startswith(f"{base}/")):
        rest = rest[len(base) :].strip("/")
    return None if rest in ("", *known) else rest


def run_app() -> None:
    """Build the navigation and run the page the URL names (studio.py's whole job)."""
    st.session_state[NAV_KEY] = True
    # who a session is cannot be trusted, or a setting is not understood: serve nothing
    if problem := identity_problem() or limit_problem():
        st.navigation(app_pages(), position="hidden")
        st.error(problem)
        st.stop()
    server_threads()  # one torch thread per page run: no core waits on another (cpu_share)
    page = st.navigation(app_pages())
    user_line()  # who is signed in, where the server knows its users
    page.run()


def ensure_app_navigation() -> None:
    """On a first request straight to a page URL, hand over to the app's navigation.

    Done once per session: a rerun would drop the widget event that caused this run.
    """
    if st.session_state.get(NAV_KEY):
        return
    st.session_state[NAV_KEY] = True
    st.navigation(app_pages(), position="hidden")  # ends the pages/ folder's automatic mode
    st.rerun()


def link(script: str, label: str, query: dict | None = None) -> None:
    """A link to another page of the app (``script`` in pages/), with URL parameters."""
    with contextlib.suppress(StreamlitAPIException):  # a page run alone has no navigation
        st.page_link(str(PAGES_DIR / script), label=label, query_params=query)


def page_links() -> None:
    """One link per page except Home, with what it is for."""
    for script, title, icon, what in PAGES[1:]:
        st.page_link(str(PAGES_DIR / script), label=f"{title}: {what}", icon=icon)


def footer(credit: str = ATTRIBUTION) -> None:
    """The data credit under a page: the corpus's (Home, Train), or the shown model's own
    (``model_footer``); nothing for data that owes none."""
    if credit:
        st.divider()
        st.caption(f"Data: {credit}")


def model_footer(lm: TranslationModel) -> None:
    """The footer of a page showing ``lm``: the credit for the data it was trained on, from its
    metadata (none for an induction model's random tokens or a model not trained here)."""
    footer(data_credit(lm.meta.get("data_config")))
