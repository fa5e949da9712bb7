"""One way to show an attention chart: full width, saved from its toolbar under a readable name."""

from __future__ import annotations

import streamlit as st


def chart(fig, key: str, where=st, name: str = "attention") -> None:
    """A Plotly chart at full width; its toolbar saves it as ``name``.png."""
    config = {"displaylogo": False, "toImageButtonOptions": {"filename": name}}
    where.plotly_chart(fig, width="stretch", key=key, config=config)
