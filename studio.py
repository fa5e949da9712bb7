"""Attention Studio's script: every session runs it (``app.py`` serves it).

The pages are the scripts in ``pages/``, registered with ``st.navigation`` in
``pages/ui/frame.py``.
"""

from __future__ import annotations

import streamlit as st

from pages.ui.frame import run_app

st.set_page_config(page_title="Attention Studio", layout="wide")
run_app()
