"""Attention Studio: the entry point (``streamlit run app.py``).

``app`` is Streamlit's ASGI application (``st.App``) serving ``studio.py``, the script every
session runs. Its start-up warms the server in the background (``pages/ui/warm.py``): the
pages' imports, torch among them, and the picker's default model with one translation, so a
class's first pages do not each wait for them. ``ATTENTION_STUDIO_WARM=0`` skips it.
Streamlit's ``/_stcore/metrics`` is closed unless ``ATTENTION_STUDIO_METRICS=1``
(``pages/ui/closed_routes.py``).
"""

from __future__ import annotations

import streamlit as st
from starlette.middleware import Middleware

from pages.ui.closed_routes import ClosedRoutes
from pages.ui.warm import lifespan

app = st.App("studio.py", lifespan=lifespan, middleware=[Middleware(ClosedRoutes)])
