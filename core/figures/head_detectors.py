"""Plotly figure of every decoder head's detector scores: one layer × head grid per score
(previous-token, duplicate-token, induction) on one 0..1 scale, the in-context-learning score
in its title."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.head_detectors import SCORES, HeadScores
from core.figures.attention import WIDE_TITLE_CHARS, title_layout

CELL_PX = 40  # the height of one layer's row
SHOWN = 0.4  # a score is written in its cell from this value on (every cell in a small grid)
SMALL = 64  # heads of a grid small enough to write every score in its cell
SUBTITLE_PX = 26  # room above the grids for their titles, below the figure's notes
TITLES = {"previous_token": "previous-token", "duplicate_token": "duplicate-token",
          "induction": "induction"}  # fmt: skip


def head_scores_figure(s: HeadScores) -> go.Figure:
    """Three layer × head heatmaps of the scores (0..1); a cell is written from ``SHOWN`` on
    (every cell of a grid of at most ``SMALL`` heads)."""
    L, H = s.induction.shape
    fig = make_subplots(rows=1, cols=len(SCORES), shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=[TITLES[n] for n in SCORES])  # fmt: skip
    for col, name in enumerate(SCORES, start=1):
        grid = getattr(s, name).numpy()  # (L, H)
        shown = grid >= (0.0 if L * H <= SMALL else SHOWN)
        text = np.where(shown, np.char.mod("%.2f", grid), "")
        fig.add_trace(
            go.Heatmap(
                z=grid.astype(np.float32),
                x=np.arange(H),
                y=np.arange(L),
                text=text.tolist(),
                texttemplate="%{text}",
                coloraxis="coloraxis",
                hovertemplate=f"layer %{{y}}, head %{{x}}<br>{TITLES[name]}: %{{z:.3f}}"
                "<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else None, row=1, col=col)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 16 else None,
                     row=1, col=1)  # fmt: skip
    early, late = s.early_late
    notes = [
        f"{s.sequences} sequences of {s.length} random tokens read twice (seed {s.seed}); "
        "each score the head's weight on its pattern per row the pattern reaches (1: perfect)",
        f"in-context learning: loss at token {late} minus at token {early} = {s.icl:+.3f} nats "
        f"(first copy {s.first_copy_loss:.2f}, repeat {s.repeat_loss:.2f})",
    ]
    title = "Head scores (TransformerLens's detectors)"
    head = title_layout(title, notes, WIDE_TITLE_CHARS, below=SUBTITLE_PX)  # grids' titles
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0,
                   "colorbar": {"title": {"text": "score"}, "thickness": 12}},
        height=int(head["margin"]["t"] + 70 + CELL_PX * max(L, 4)),
        **head,
    )  # fmt: skip
    return fig
