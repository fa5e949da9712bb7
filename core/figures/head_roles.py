"""Plotly figure of a decoder-only model's head roles: one layer × head grid per role
(previous-token, first-token sink, induction), each cell the head's mean weight on it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.head_roles import ROLE_SHARE, ROLES, HeadRoles
from core.figures.attention import WIDE_TITLE_CHARS, title_layout

CELL_PX = 26  # the height of one layer's row


def head_roles_figure(r: HeadRoles) -> go.Figure:
    """Three layer × head heatmaps on one 0..1 scale; a head whose weight reaches the role's
    share is marked with its value."""
    grids = (r.previous, r.first, r.induction)  # (L, H) each
    L, H = r.previous.shape
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=ROLES)  # fmt: skip
    for col, (role, grid) in enumerate(zip(ROLES, grids), start=1):
        text = np.where(grid >= ROLE_SHARE, np.char.mod("%.2f", grid), "")
        fig.add_trace(
            go.Heatmap(
                z=np.asarray(grid, dtype=np.float32),
                x=np.arange(H),
                y=np.arange(L),
                text=text.tolist(),
                texttemplate="%{text}",
                coloraxis="coloraxis",
                hovertemplate=f"layer %{{y}}, head %{{x}}<br>{role}: %{{z:.3f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else None, row=1, col=col)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 16 else None,
                     row=1, col=1)  # fmt: skip
    notes = [
        f"mean weight on the role's key; a value is written where it reaches {ROLE_SHARE:g}",
        f"previous / first token: over this translation's {r.tokens} tokens; induction: over "
        f"{r.repeated} random tokens read twice",
    ]
    head = title_layout("What each head does", notes, WIDE_TITLE_CHARS)
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0,
                   "colorbar": {"title": {"text": "weight"}, "thickness": 12}},
        height=int(head["margin"]["t"] + 70 + CELL_PX * max(L, 4)),
        **head,
    )  # fmt: skip
    return fig
