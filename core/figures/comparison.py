"""Plotly figures of comparisons: difference maps B − A, and a picked token's outline.

Built on core.figures.attention (the same heatmaps and grids, on a diverging scale).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from core.attention.comparison import DIFF_WORDS
from core.attention.kinds import kind_labels
from core.attention.token_pick import Highlight
from core.figures.attention import DIFFERENCE, grid_figure, heatmap_figure

HIGHLIGHT_COLOR = "#ff7f0e"  # outline of a picked query row or key column
MIN_DIFF_RANGE = 0.01  # a difference scale never narrower than ±this (equal maps stay white)


def diff_range(diff: np.ndarray, stretch: bool = False) -> float:
    """Half-width of a difference's symmetric colour range: max |B − A| (or its 99th pct)."""
    values = np.abs(np.asarray(diff, dtype=np.float64))
    values = values[~np.isnan(values)]
    if values.size == 0:
        return 1.0
    top = float(np.percentile(values, 99) if stretch else values.max())
    return min(max(top, MIN_DIFF_RANGE), 1.0)


def diff_note(zmax: float) -> str:
    """The subtitle of a difference map: how to read its colours."""
    return (
        f"{DIFF_WORDS}: red where B attends more, blue where A does; "
        f"scale ±{zmax:.3g}, white = equal"
    )


def diff_figure(
    diff: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    title: str,
    note: str = "",
    stretch: bool = False,
) -> go.Figure:
    """One difference map B − A (Tq, Tk) on a diverging scale centred at 0, symmetric."""
    zmax = diff_range(diff, stretch)
    notes = "; ".join(x for x in (note, diff_note(zmax)) if x)
    return heatmap_figure(
        diff, query_tokens, key_tokens, kind, title, zmax, notes, scale=DIFFERENCE
    )


def diff_grid_figure(
    diff: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    layers: Sequence[int],
    note: str = "",
    stretch: bool = False,
) -> go.Figure:
    """Small multiples of B − A (L, H, Tq, Tk), one diverging scale for all."""
    zmax = diff_range(diff, stretch)
    notes = "; ".join(x for x in (note, diff_note(zmax)) if x)
    title = f"{DIFF_WORDS}, every head: {kind_labels(kind)[0]}"
    names = [f"layer {i}" for i in layers]
    fig = grid_figure(
        diff, query_tokens, key_tokens, kind, names, None, zmax, notes, DIFFERENCE, title
    )
    if len(layers) == 1:
        fig.update_layout(height=max(300, int(fig.layout.height)))
    return fig


def highlight_shapes(pick: Highlight, axes: Sequence[tuple[str, str]] = (("x", "y"),)) -> list:
    """An outline around the picked row or column on each (x, y) axis pair of a figure."""
    if pick.problem or pick.index < 0:
        return []
    lo, hi = pick.index - 0.5, pick.index + 0.5
    shapes = []
    for x, y in axes:
        if pick.axis == "query":
            box = {"xref": f"{x} domain", "x0": 0, "x1": 1, "yref": y, "y0": lo, "y1": hi}
        else:
            box = {"xref": x, "x0": lo, "x1": hi, "yref": f"{y} domain", "y0": 0, "y1": 1}
        shapes.append(box | {"type": "rect", "line": {"color": HIGHLIGHT_COLOR, "width": 2}})
    return shapes


def add_highlight(fig: go.Figure, pick: Highlight | None) -> go.Figure:
    """The figure with the picked row or column outlined on every heatmap in it."""
    if pick is None:
        return fig
    axes = dict.fromkeys((t.xaxis or "x", t.yaxis or "y") for t in fig.data if t.type == "heatmap")
    fig.update_layout(shapes=[*fig.layout.shapes, *highlight_shapes(pick, list(axes))])
    return fig
