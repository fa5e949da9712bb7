"""One way to show an attention chart: full width, saved from its toolbar under a readable name."""

from __future__ import annotations

import streamlit as st


def chart(fig, key: str, where=st, name: str = "attention", on_click=None) -> None:
    """A Plotly chart at full width; its toolbar saves it as ``name``.png. ``on_click``: called
    (before the next run) when a point is clicked; it reads the selection from
    ``st.session_state[key]``."""
    config = {"displaylogo": False, "toImageButtonOptions": {"filename": name}}
    if on_click is None:
        where.plotly_chart(fig, width="stretch", key=key, config=config)
    else:
        where.plotly_chart(
            fig, width="stretch", key=key, config=config, on_select=on_click,
            selection_mode="points",
        )  # fmt: skip
