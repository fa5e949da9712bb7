"""Plotly figure of one attention's head roles: one layer × head grid per role it can have
(previous- and next-token, first- and last-token sinks, duplicate-token, induction), each cell
the head's mean weight on it, the attention named in its title."""

from __future__ import annotations

import plotly.graph_objects as go

from core.attention.head_roles import ROLE_SHARE, AttentionRoles
from core.attention.kinds import kind_labels
from core.figures.head_detectors import score_grids, written_words

ROLES_TITLE = "What each head does"  # every roles figure's title begins so


def roles_title(a: AttentionRoles) -> str:
    """What the figure of one attention's roles is called: "What each head does: Cross
    attention (decoder → encoder)"."""
    return f"{ROLES_TITLE}: {kind_labels(a.kind)[0]}"


def head_roles_figure(a: AttentionRoles) -> go.Figure:
    """A layer × head heatmap per role on one 0..1 scale; a head whose weight reaches the
    role's share is marked with its value (every head, in a small grid)."""
    grids = a.grids()
    shape = next(iter(grids.values())).shape  # (L, H)
    notes = [
        f"mean weight on the role's key; {written_words(shape, ROLE_SHARE)}",
        f"previous / next / first / last token: over this translation's {a.tokens} queries"
        + (f"; duplicate and induction: over {a.repeated} random tokens read twice"
           if a.repeated else ""),
    ]  # fmt: skip
    return score_grids(grids, roles_title(a), notes, ROLE_SHARE, "weight")
