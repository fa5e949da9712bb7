"""Plotly figures of activation patching: a layer x head grid per attention kind (and per q,
k, v, pattern), a layer x position grid of the residual stream, encoder and decoder, and each
head's or MLP's output position by position.

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
    """A heatmap per stack the rows patch, layer x position: the encoder's residual stream
    over the source tokens and the decoder's over its inputs (<bos> and the common prefix); a
    masked language model's one stream over its sentence."""
    axes = {"encoder_stream": list(source), "decoder_stream": list(prefix)}
    streams = [s for s in STREAM_NAMES if any(r["kind"] == s for r in rows)]
    grids = {s: stream_grid(rows, s) for s in streams}
    widths = [len(axes[s]) for s in streams]
    fig = make_subplots(
        1,
        len(streams),
        subplot_titles=[plotly_text(STREAM_NAMES[s]) for s in streams],
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


PART_NAMES = {"q": "queries (q)", "k": "keys (k)", "v": "values (v)", "pattern": "pattern"}
POSITION_NAMES = {  # a kind patched position by position, in the figure's words
    **KIND_NAMES,
    "encoder_mlp": "encoder MLPs",
    "decoder_mlp": "decoder MLPs",
}


def parts_figure(rows: Sequence[dict], about: str, direction: str = "denoise") -> go.Figure:
    """A layer x head heatmap per attention kind (rows) and per activation patched (columns:
    q, k, v, pattern) of each head's patching effect."""
    table = pd.DataFrame([r for r in rows if r["kind"] in KINDS and r.get("activation")])
    kinds = [k for k in KINDS if (table["kind"] == k).any()]
    parts = [p for p in PART_NAMES if (table["activation"] == p).any()]
    titles = [plotly_text(f"{KIND_NAMES[k]}: {PART_NAMES[p]}") for k in kinds for p in parts]
    fig = make_subplots(len(kinds), len(parts), subplot_titles=titles, horizontal_spacing=0.06)
    grids = []
    for r, kind in enumerate(kinds, start=1):
        for c, part in enumerate(parts, start=1):
            z = kind_grid(table[table["activation"] == part], kind, "effect")  # (L, H)
            grids.append(z)
            fig.add_trace(grid_trace(z, "effect", "+.2f", KIND_NAMES[kind]), r, c)
            fig.update_xaxes(title_text="head", dtick=1, row=r, col=c)
            fig.update_yaxes(dtick=1, autorange="reversed", row=r, col=c)
        fig.update_yaxes(title_text="layer", row=r, col=1)
    head = title_layout(
        "Patching each head's q, k, v and pattern", [about, NOTES[direction]], WIDE_TITLE_CHARS, 20
    )
    layers = max(g.shape[0] for g in grids)
    fig.update_layout(
        coloraxis=_coloraxis(np.concatenate([g.ravel() for g in grids])),
        height=int(110 + head["margin"]["t"] + len(kinds) * max(150, 44 * layers)),
        **head,
    )
    return fig


def position_grid(rows: Sequence[dict], kind: str) -> tuple[np.ndarray, list[str]]:
    """((R, N) effects of one kind patched position by position, R row names): a head's row
    "layer.head", an MLP's "layer"."""
    mine = [r for r in rows if r["kind"] == kind and r.get("position") is not None]
    names = list(dict.fromkeys(_row_name(r) for r in mine))
    grid = np.full((len(names), max(r["position"] for r in mine) + 1), np.nan)
    for r in mine:
        grid[names.index(_row_name(r)), r["position"]] = r["effect"]
    return grid.astype(np.float32), names


def _row_name(row: dict) -> str:
    """A position grid's row: "layer.head" of a head, "layer" of an MLP."""
    return f"{row['layer']}.{row['head']}" if row.get("head") is not None else f"{row['layer']}"


def positions_figure(
    rows: Sequence[dict],
    axes: dict[str, Sequence[str]],
    about: str,
    direction: str = "denoise",
) -> go.Figure:
    """One heatmap per kind patched position by position (each head's output, or each MLP's):
    rows "layer.head" or "layer", columns the positions of ``axes[kind]`` (the source's
    tokens, the decoder inputs', or a one-stack model's whole sequence)."""
    kinds = [k for k in POSITION_NAMES if k in axes and any(
        r["kind"] == k and r.get("position") is not None for r in rows)]  # fmt: skip
    grids = [position_grid(rows, k) for k in kinds]
    fig = make_subplots(
        len(kinds), 1, subplot_titles=[plotly_text(POSITION_NAMES[k]) for k in kinds],
        vertical_spacing=0.3 / max(1, len(kinds)),
    )  # fmt: skip
    for r, (kind, (z, names)) in enumerate(zip(kinds, grids), start=1):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=unique_labels(list(axes[kind])[: z.shape[1]]),  # HTML-safe: a typed word is text
                y=names,
                coloraxis="coloraxis",
                hovertemplate="%{y}, %{x}<br>effect %{z:+.3f}<extra></extra>",
            ),
            r,
            1,
        )
        fig.update_xaxes(title_text="position", tickangle=-45, row=r, col=1)
        fig.update_yaxes(title_text="layer.head" if "." in names[0] else "layer", row=r, col=1)
        fig.update_yaxes(type="category", autorange="reversed", row=r, col=1)
    head = title_layout(
        "Patching one position at a time", [about, NOTES[direction]], WIDE_TITLE_CHARS, 20
    )
    height = sum(max(160, 18 * len(names)) + 120 for _, names in grids)
    values = np.concatenate([z.ravel() for z, _ in grids]) if grids else np.zeros(1)
    fig.update_layout(
        coloraxis=_coloraxis(values), height=int(head["margin"]["t"] + height), **head
    )
    return fig
