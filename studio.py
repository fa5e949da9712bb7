"""Attention Studio's script: every session runs it (``app.py`` serves it).

The pages are the scripts in ``pages/``, registered with ``st.navigation`` in
``pages/ui/frame.py``. A run waits for the server's warm-up under way (``pages/ui/warm.py``):
never two threads importing the same libraries at once.
"""

from __future__ import annotations

import streamlit as st

from pages.ui import warm
from pages.ui.frame import run_app

st.set_page_config(page_title="Attention Studio", layout="wide")
if not warm.wait_until_warm(0):  # the server's start-up is importing: not beside it
    with st.spinner("The server is starting: loading its libraries and default model…"):
        warm.wait_until_warm()
run_app()
