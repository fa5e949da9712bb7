"""Text inside Plotly figures: every label a user or a model wrote goes through ``plotly_text``."""

from __future__ import annotations

import html


def plotly_text(text: str) -> str:
    """Text Plotly shows literally: it reads <b>, <a href=...> and &...; in labels as HTML."""
    return html.escape(str(text), quote=False)
