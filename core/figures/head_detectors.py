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


def writes_every_cell(grid_shape: tuple[int, ...]) -> bool:
    """Whether a (layers, heads) grid is small enough (``SMALL`` heads at most) to have its
    every score written in its cell."""
    layers, heads = grid_shape[:2]
    return layers * heads <= SMALL


def written_words(grid_shape: tuple[int, ...], shown: float) -> str:
    """Which values ``score_grids`` writes in a grid of this shape, in words."""
    if writes_every_cell(grid_shape):
        return "every value is written in its cell"
    return f"a value is written where it reaches {shown:g}"


def score_grids(
    grids: dict[str, np.ndarray], title: str, notes: list[str], shown: float, bar: str
) -> go.Figure:
    """One layer × head heatmap per (L, H) grid of ``grids`` ({subplot title: grid}) on one
    0..1 scale; a cell is written from ``shown`` on (every cell of a grid of at most
    ``SMALL`` heads)."""
    L, H = next(iter(grids.values())).shape
    fig = make_subplots(rows=1, cols=len(grids), shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=list(grids))  # fmt: skip
    for col, (name, grid) in enumerate(grids.items(), start=1):
        grid = np.asarray(grid, dtype=np.float32)  # (L, H)
        written = grid >= (0.0 if writes_every_cell(grid.shape) else shown)
        fig.add_trace(
            go.Heatmap(
                z=grid,
                x=np.arange(H),
                y=np.arange(L),
                text=np.where(written, np.char.mod("%.2f", grid), "").tolist(),
                texttemplate="%{text}",
                coloraxis="coloraxis",
                hovertemplate=f"layer %{{y}}, head %{{x}}<br>{name}: %{{z:.3f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else None, row=1, col=col)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 16 else None,
                     row=1, col=1)  # fmt: skip
    head = title_layout(title, notes, WIDE_TITLE_CHARS, below=SUBTITLE_PX)  # grids' titles
    fig.update_layout(
        coloraxis={"colorscale": "Blues", "cmin": 0.0, "cmax": 1.0,
                   "colorbar": {"title": {"text": bar}, "thickness": 12}},
        height=int(head["margin"]["t"] + 70 + CELL_PX * max(L, 4)),
        **head,
    )  # fmt: skip
    return fig


def head_scores_figure(s: HeadScores) -> go.Figure:
    """Three layer × head heatmaps of the scores (0..1), each cell written from ``SHOWN`` on."""
    early, late = s.early_late
    notes = [
        f"{s.sequences} sequences of {s.length} random tokens read twice (seed {s.seed}); "
        "each score the head's weight on its pattern per row the pattern reaches (1: perfect)",
        f"in-context learning: loss at token {late} minus at token {early} = {s.icl:+.3f} nats "
        f"(first copy {s.first_copy_loss:.2f}, repeat {s.repeat_loss:.2f})",
    ]
    grids = {TITLES[n]: getattr(s, n).numpy() for n in SCORES}
    return score_grids(grids, "Head scores (TransformerLens's detectors)", notes, SHOWN, "score")
