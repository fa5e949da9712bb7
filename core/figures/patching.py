"""Plotly figures of activation patching: a layer x head grid per attention kind, and a
layer x position grid of the residual stream, encoder and decoder.

One diverging scale centred at 0: red carries the clean run's answer back (effect 1 = the
clean run), blue pushes further towards the corrupted run's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.kinds import KIND_NAMES, KINDS
from core.figures.attention import WIDE_TITLE_CHARS, title_layout, unique_labels
from core.figures.importance import color_range, grid_trace, kind_grid
from core.figures.labels import PLAIN_NUMBERS, plotly_text

SCALE = "RdBu_r"  # red: restores the clean answer
NOTES = {  # what the colours mean, by direction (core.attention.patching.DIRECTIONS)
    "denoise": "1 = the clean run, 0 = the corrupted run",
    "noise": "1 = the corrupted run's word, 0 = the clean run unchanged",
}
STREAM_NAMES = {"encoder_stream": "encoder layers", "decoder_stream": "decoder layers"}


def _coloraxis(values: np.ndarray) -> dict:
    """The shared colour axis: centred at 0, reaching at least 1 either side."""
    cmin, cmax = color_range(values, centred=True)
    reach = max(cmax, 1.0)
    bar = {"title": {"text": "effect"}} | PLAIN_NUMBERS
    return {"colorscale": SCALE, "cmin": -reach, "cmax": reach, "colorbar": bar}


def heads_figure(rows: Sequence[dict], about: str, direction: str = "denoise") -> go.Figure:
    """One layer x head heatmap per attention kind of each head's patching effect."""
    table = pd.DataFrame([r for r in rows if r["kind"] in KINDS])
    kinds = [k for k in KINDS if (table["kind"] == k).any()]
    grids = [kind_grid(table, k, "effect") for k in kinds]  # (L, H) each
    names = [plotly_text(KIND_NAMES[k]) for k in kinds]
    fig = make_subplots(1, len(kinds), subplot_titles=names, horizontal_spacing=0.08)
    for col, (kind, z) in enumerate(zip(kinds, grids), start=1):
        fig.add_trace(grid_trace(z, "effect", "+.2f", KIND_NAMES[kind]), 1, col)
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=col)
        fig.update_yaxes(dtick=1, autorange="reversed", row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    notes = [about, NOTES[direction]]
    head = title_layout("Patching each head's output", notes, WIDE_TITLE_CHARS, 20)
    layers = max(g.shape[0] for g in grids)
    fig.update_layout(
        coloraxis=_coloraxis(np.concatenate([g.ravel() for g in grids])),
        height=int(110 + head["margin"]["t"] + max(150, 44 * layers)),
        **head,
    )
    return fig


def stream_grid(rows: Sequence[dict], stream: str) -> np.ndarray:
    """(L, N) effects of patching one stack's layer outputs, position by position."""
    mine = [r for r in rows if r["kind"] == stream]
    grid = np.full(
        (max(r["layer"] for r in mine) + 1, max(r["position"] for r in mine) + 1), np.nan
    )
    for r in mine:
        grid[r["layer"], r["position"]] = r["effect"]
    return grid.astype(np.float32)  # (L, N)


def stream_figure(
    rows: Sequence[dict],
    source: Sequence[str],
    prefix: Sequence[str],
    about: str,
    direction: str = "denoise",
):
    """Two heatmaps, layer x position: the encoder's residual stream over the source tokens
    and the decoder's over its inputs (<bos> and the common prefix)."""
    axes = {"encoder_stream": list(source), "decoder_stream": list(prefix)}
    grids = {s: stream_grid(rows, s) for s in STREAM_NAMES}
    widths = [len(axes[s]) for s in STREAM_NAMES]
    fig = make_subplots(
        1,
        2,
        subplot_titles=[plotly_text(n) for n in STREAM_NAMES.values()],
        column_widths=[w / sum(widths) for w in widths],
        horizontal_spacing=0.1,
    )
    for col, (stream, z) in enumerate(grids.items(), start=1):
        labels = unique_labels(axes[stream])  # "i:token", HTML-safe: a typed word is text
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=labels,
                y=list(range(z.shape[0])),
                coloraxis="coloraxis",
                texttemplate="%{z:+.2f}",
                hovertemplate="layer %{y}, %{x}<br>effect %{z:+.3f}<extra></extra>",
            ),
            1,
            col,
        )
        fig.update_xaxes(title_text="position", tickangle=-45, row=1, col=col)
        fig.update_yaxes(dtick=1, autorange="reversed", row=1, col=col)
    fig.update_yaxes(title_text="layer (its output)", row=1, col=1)
    head = title_layout(
        "Patching the residual stream, one position at a time",
        [about, NOTES[direction]],
        WIDE_TITLE_CHARS,
        20,
    )
    layers = max(g.shape[0] for g in grids.values())
    values = np.concatenate([g.ravel() for g in grids.values()])
    fig.update_layout(
        coloraxis=_coloraxis(values),
        height=int(170 + head["margin"]["t"] + max(150, 44 * layers)),
        **head,
    )
    return fig
