"""bertviz's model view: every layer (rows) × head (columns) as a small line diagram, queries
on the left of each cell, keys on the right, one line per pair with the weight as opacity.

Beside the heat-map grid it shows the same weights as lines; a picked token keeps only its
own lines in every cell (as its outline does in the heat maps).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.kinds import kind_labels
from core.figures.attention import title_layout
from core.figures.inside_head import HEAD_COLORS, line_traces

MODEL_VIEW_BINS = 4  # opacity steps per cell (a trace each: cells x 4 traces in all)
CELL_PX = 120  # the smallest height of one cell
ROW_PX = 9  # a cell grows by this for each token on its longer side past 12


def model_view_figure(
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    layer_names: Sequence[str],
    pick: tuple[str, int] | None = None,
    note: str = "",
) -> go.Figure:
    """Every head of ``weights`` (L, H, Tq, Tk) as lines between a query column (left) and
    a key column (right) of dots; ``pick`` ("query", i) or ("key", j) keeps its lines only."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float32))  # (L, H, Tq, Tk)
    layers, heads, tq, tk = w.shape
    pairs = {(i, j) for i in range(tq) for j in range(tk)}
    if pick is not None:
        pairs = {(i, j) for i, j in pairs if (i if pick[0] == "query" else j) == pick[1]}
    titles = [f"{name} · head {h}" for name in layer_names for h in range(heads)]
    fig = make_subplots(
        rows=layers, cols=heads, subplot_titles=titles, horizontal_spacing=0.02,
        vertical_spacing=min(0.12, 0.5 / max(layers - 1, 1)),
    )  # fmt: skip
    for layer in range(layers):
        for h in range(heads):
            colour = HEAD_COLORS[h % len(HEAD_COLORS)]
            cell = line_traces(
                w[layer, h], colour, f"head {h}", f"head {h}", pairs, MODEL_VIEW_BINS
            )
            for trace in [*cell, *_dots(tq, tk)]:
                fig.add_trace(trace, row=layer + 1, col=h + 1)
    fig.update_xaxes(visible=False, range=[-0.15, 1.15], fixedrange=True)
    fig.update_yaxes(visible=False, range=[max(tq, tk) - 0.5, -0.5], fixedrange=True)
    _, query_words, key_words = kind_labels(kind)
    lines = [
        f"in each cell: {query_words} on the left, {key_words} on the right; line opacity: weight"
    ]
    head = title_layout(f"{kind_labels(kind)[0]}: model view", [*lines, *([note] if note else [])])
    cell_px = CELL_PX + ROW_PX * max(0, max(tq, tk) - 12)
    fig.update_layout(
        height=int(head["margin"]["t"] + 20 + layers * (cell_px + 24)),
        showlegend=False,
        plot_bgcolor="white",
        **head,
    )
    return fig


def _dots(tq: int, tk: int) -> list[go.Scatter]:
    """The query (left) and key (right) positions of a cell, as small grey dots."""
    return [
        go.Scatter(
            x=[x] * n,
            y=list(range(n)),
            mode="markers",
            hoverinfo="skip",
            marker={"size": 3, "color": "#888"},
            showlegend=False,
        )  # fmt: skip
        for x, n in ((0, tq), (1, tk))
    ]
