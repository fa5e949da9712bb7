"""Plotly figures built from plain dicts, checked by Plotly's validators only where asked.

A page builds its figures again on every rerun, and Plotly's validation of each property was
most of the time: a large attention map took 10 ms to build, the layer × head grid 16 ms,
4 ms each without it (the same JSON). The server builds them unchecked; the tests set
``ATTENTION_STUDIO_CHECK_FIGURES=1`` (tests/conftest.py), so every figure they build is
validated as before, and a property Plotly does not know still fails there.
"""

from __future__ import annotations

import functools
import os

import plotly.graph_objects as go

CHECK_ENV = "ATTENTION_STUDIO_CHECK_FIGURES"


def checked() -> bool:
    """Whether figures are validated as they are built (the tests' setting)."""
    return os.environ.get(CHECK_ENV, "") == "1"


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure of ``data`` (trace dicts, each with its "type") and ``layout`` (a dict), as
    ``go.Figure(data=data, layout=layout)`` builds it, validated only when ``checked()``."""
    return go.Figure(data=data, layout=layout, _validate=checked())


def colorscale(name: str) -> list[list]:
    """A named colour scale as the [[position, colour], ...] list Plotly's validation makes of
    it (Plotly.js knows some names with other colours than Plotly's Python side)."""
    return [list(step) for step in _named_scale(name)]


@functools.cache
def _named_scale(name: str) -> tuple:
    return go.Heatmap(colorscale=name).colorscale  # ((position, colour), ...)
