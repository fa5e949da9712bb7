"""Plotly figure of a decoder-only model's head roles: one layer × head grid per role
(previous-token, first-token sink, duplicate-token, induction), each cell the head's mean
weight on it."""

from __future__ import annotations

import plotly.graph_objects as go

from core.attention.head_roles import ROLE_SHARE, ROLES, HeadRoles
from core.figures.head_detectors import score_grids


def head_roles_figure(r: HeadRoles) -> go.Figure:
    """Four layer × head heatmaps on one 0..1 scale; a head whose weight reaches the role's
    share is marked with its value."""
    notes = [
        f"mean weight on the role's key; a value is written where it reaches {ROLE_SHARE:g}",
        f"previous / first token: over this translation's {r.tokens} tokens; duplicate and "
        f"induction: over {r.repeated} random tokens read twice",
    ]
    grids = dict(zip(ROLES, r.grids()))
    return score_grids(grids, "What each head does", notes, ROLE_SHARE, "weight")
