"""Plotly figures of attention: one large map and the layer × head grid.

Every figure names both axes in words; repeated tokens keep their own row and column.
"""

from __future__ import annotations

import functools
import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.comparison import DIFF_WORDS
from core.attention.kinds import check_tokens, kind_labels, reading_hint
from core.attention.maps import View, hide_columns
from core.attention.sentence_maps import SentenceMaps
from core.figures import plain
from core.figures.labels import plotly_text

COLORSCALE = "Blues"
DIFF_COLORSCALE = "RdBu_r"  # differences: blue below 0, white at 0, red above
BLANK_COLOR = "#d9d9d9"  # blank (NaN) cells are drawn grey, unlike 0 (white)
BLANK_NAME = "blank"  # the name of the grey traces over blank cells
MAX_GRID_TICKS = 20  # the grid shows token tick labels only up to this many tokens
GRID_PLOT_PX = 560  # width of a grid's cells together in a 760 px page (the narrow layout)
TICK_GAP_PX = 12  # upright (-90°) labels this far apart never overlap (10 px font)
GRID_TICK_CHARS = 8  # a grid's tick label is cut to this many characters
TITLE_CHARS = 44  # title line length that fits a chart in half of a 760 px wide page
WIDE_TITLE_CHARS = 76  # ... in the whole width of a 760 px wide page
TITLE_LINE_PX, NOTE_LINE_PX = 24, 17  # height of a title line and of a subtitle line
TITLE_SHIFT_PX = 12  # Plotly lifts a title anchored at its top by this much per extra line
REMOVED_COLOR = "#d62728"  # the outline and label of a removed head's cell in a grid
REMOVED_WORD = "removed"
FULL_GRID_CELLS = 16  # a model with at most this many layer × head cells shows its full grid


def shows_full_grid(layers: int, heads: int) -> bool:
    """Whether a grid of ``layers`` × ``heads`` maps is drawn whole by default (else one layer)."""
    return layers * heads <= FULL_GRID_CELLS


@dataclass(frozen=True)
class Scale:
    """A heatmap's colours: 0..zmax for weights, or −zmax..zmax centred on 0 for differences."""

    colors: str = COLORSCALE
    name: str = "weight"  # colour bar title
    hover: str = "w"  # the value's name in the hover text
    diverging: bool = False  # True: the range is symmetric around 0

    def zmin(self, zmax: float) -> float:
        """Bottom of the colour range for a top of ``zmax``."""
        return -zmax if self.diverging else 0.0


WEIGHTS = Scale()
DIFFERENCE = Scale(DIFF_COLORSCALE, DIFF_WORDS, DIFF_WORDS, diverging=True)


def unique_labels(tokens: Sequence[str]) -> list[str]:
    """Category labels "i:token" so repeated tokens keep their own row/column (HTML-safe)."""
    return [f"{i}:{plotly_text(tok)}" for i, tok in enumerate(tokens)]


def percentile_cap(weights: np.ndarray, q: float = 99) -> float:
    """Colour-scale maximum at the q-th percentile, so diffuse heads stay visible (NaN: blank)."""
    values = np.asarray(weights, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return 1.0
    cap = float(np.percentile(values, q))
    return min(cap, 1.0) if cap > 0 else 1.0


def wrapped_lines(texts: Sequence[str], width: int) -> list[str]:
    """Each text broken at spaces into lines of at most ``width`` characters, Plotly-escaped."""
    return [
        plotly_text(line)
        for text in texts
        if text
        for line in textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    ]


def title_layout(
    title: str, notes: Sequence[str] = (), chars: int = TITLE_CHARS, below: int = 0
) -> dict:
    """Title and subtitle wrapped to fit, and a top margin that holds them (+ ``below`` px).

    Plotly never wraps a title, so a long one is cut at the chart's edge; ``chars`` is the
    longest title line, subtitle lines get 1.4 times as many (smaller font).
    """
    head = wrapped_lines([title], chars)
    sub = wrapped_lines(notes, int(chars * 1.4))
    shift = TITLE_SHIFT_PX * (len(head) - 1)
    top = 24 + shift + TITLE_LINE_PX * len(head) + NOTE_LINE_PX * len(sub) + below
    return {
        "title": {
            "text": "<br>".join(head),
            "x": 0.0,
            "xanchor": "left",
            "xref": "container",
            "y": 1.0,
            "yanchor": "top",
            "yref": "container",
            "pad": {"t": 12 + shift, "l": 12},
            "subtitle": {"text": "<br>".join(sub), "font": {"size": 12}},
        },
        "margin": {"t": top},
    }


def token_axis(title: str, tokens: Sequence[str], reversed_: bool = False) -> dict:
    """Layout for a categorical token axis with plain-token tick text."""
    axis = {
        "title": {"text": title},
        "type": "category",
        "tickmode": "array",
        "tickvals": unique_labels(tokens),
        "ticktext": [plotly_text(t) for t in tokens],
    }
    if reversed_:
        axis["autorange"] = "reversed"
    return axis


def heatmap_figure(
    weights2d: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    title: str | None = None,
    zmax: float = 1.0,
    note: str | None = None,
    blank: Mapping[int, str] | None = None,
    scale: Scale = WEIGHTS,
) -> go.Figure:
    """One large heatmap: rows are queries (first on top), columns are keys.

    Args:
        weights2d: (Tq, Tk) attention (NaN cells are drawn blank).
        query_tokens, key_tokens: Tq and Tk tokens.
        kind: "encoder", "decoder_self" or "cross".
        title: figure title; defaults to the kind's title.
        zmax: top of the colour scale (see percentile_cap).
        note: what was done to the map ("a; b"), one subtitle line per part.
        blank: query row -> the hidden tokens that held all its weight (a NaN row),
            written across the row.
        scale: WEIGHTS (0..zmax) or DIFFERENCE (−zmax..zmax).
    """
    default_title, query_words, key_words = kind_labels(kind)
    check_tokens(weights2d.shape, query_tokens, key_tokens)
    x, y = unique_labels(key_tokens), unique_labels(query_tokens)
    trace = {
        "type": "heatmap",
        "z": np.asarray(weights2d, dtype=np.float32),  # (Tq, Tk)
        "x": x,
        "y": y,
        "zmin": scale.zmin(zmax),
        "zmax": zmax,
        "colorscale": plain.colorscale(scale.colors),
        "colorbar": {"title": {"text": plotly_text(scale.name)}},
        "hovertemplate": f"query %{{y}}<br>key %{{x}}<br>{scale.hover}=%{{z:.3f}}<extra></extra>",
    }
    head = title_layout(title or default_title, [reading_hint(kind), *note_lines(note)])
    layout = {
        "xaxis": token_axis(key_words, key_tokens) | {"tickangle": -45},
        "yaxis": token_axis(query_words, query_tokens, reversed_=True),
        "height": int(min(900, max(300, 22 * len(query_tokens) + 110)) + head["margin"]["t"]),
        **head,
    }
    if blank:  # (an empty list, validated, is no annotation at all)
        layout["annotations"] = blank_row_labels(blank, query_tokens)
    return plain.figure([trace, *blank_cells(weights2d, x, y)], layout)


def blank_cells(z: np.ndarray, x: Sequence[str], y: Sequence[str], axes=("x", "y")) -> list:
    """A grey trace over the blank (NaN) cells of a heatmap, none when there are none."""
    blank = np.isnan(np.asarray(z, dtype=np.float32))  # (Tq, Tk)
    if not blank.any():
        return []
    return [
        {
            "type": "heatmap",
            "name": BLANK_NAME,
            "z": np.where(blank, 1.0, np.nan).astype(np.float32),  # (Tq, Tk)
            "x": list(x),
            "y": list(y),
            "xaxis": axes[0],
            "yaxis": axes[1],
            "colorscale": [[0, BLANK_COLOR], [1, BLANK_COLOR]],
            "showscale": False,
            "hoverinfo": "skip",
        }
    ]


def blank_row_labels(blank: Mapping[int, str], query_tokens: Sequence[str]) -> list[dict]:
    """A label across each blank row: "all weight on <bos> (hidden)"."""
    labels = unique_labels(query_tokens)
    return [
        {
            "text": plotly_text(f"all weight on {tokens} (hidden)"),
            "xref": "paper",
            "x": 0.5,
            "yref": "y",
            "y": labels[row],
            "showarrow": False,
            "font": {"size": 12, "color": "#444"},
        }
        for row, tokens in blank.items()
    ]


def note_lines(note: str | None) -> list[str]:
    """A view's note ("a; b; c") as one subtitle paragraph per part."""
    return [part.strip() for part in (note or "").split("; ") if part.strip()]


@functools.lru_cache(maxsize=32)
def _grid_skeleton(layer_names: tuple, head_names: tuple) -> str:
    """make_subplots layout and per-cell axis ids as JSON (cached: it is the slow part)."""
    fig = make_subplots(
        rows=len(layer_names),
        cols=len(head_names),
        shared_xaxes=True,
        shared_yaxes=True,
        row_titles=list(layer_names),
        column_titles=list(head_names),
        horizontal_spacing=min(0.02, 0.5 / len(head_names)),
        vertical_spacing=min(0.03, 0.5 / len(layer_names)),
    )
    refs = [
        [fig.get_subplot(r + 1, c + 1) for c in range(len(head_names))]
        for r in range(len(layer_names))
    ]
    axes = [[[s.xaxis.plotly_name, s.yaxis.plotly_name] for s in row] for row in refs]
    return json.dumps({"layout": fig.layout.to_plotly_json(), "axes": axes})


def _grid_axes(layout: dict, axes: list, tokens: tuple, words: tuple) -> None:
    """Categorical token axes on every cell, y reversed, titles on the outer edge."""
    query_tokens, key_tokens = tokens
    common = {"type": "category", "tickmode": "array", "tickfont": {"size": 11}}
    x_ticks = _grid_ticks(key_tokens, grid_x_ticks(len(axes[0])))
    x_ticks |= {"tickangle": -90, "tickfont": {"size": 10}}  # upright: every token of a
    # sentence of up to 11 under a cell of a 4-head grid in a 760 px page
    y_ticks = _grid_ticks(query_tokens, MAX_GRID_TICKS)
    for name, axis in layout.items():
        if name.startswith("xaxis"):
            axis.update(common | x_ticks)
        elif name.startswith("yaxis"):
            axis.update(common | y_ticks | {"autorange": "reversed"})
    bottom_left, middle_left = axes[-1][0], axes[(len(axes) - 1) // 2][0]
    layout[bottom_left[0]]["title"] = {"text": words[1]}
    layout[middle_left[1]]["title"] = {"text": words[0]}


def grid_x_ticks(heads: int) -> int:
    """How many key labels fit under one cell of a grid ``heads`` cells wide, never overlapping."""
    return max(2, min(MAX_GRID_TICKS, GRID_PLOT_PX // heads // TICK_GAP_PX))


def short_token(token: str, chars: int = GRID_TICK_CHARS) -> str:
    """A token cut to ``chars`` characters ("…" marks the cut) for a small cell's tick."""
    return token if len(token) <= chars else token[: chars - 1] + "…"


def _grid_ticks(tokens: Sequence[str], most: int) -> dict:
    """Tick values and short labels: every token, or every k-th beyond ``most`` (hover has all)."""
    every = max(1, -(-len(tokens) // most))  # ceil(len / most)
    labels = unique_labels(tokens)
    text = [plotly_text(short_token(t)) for t in tokens]
    return {"tickvals": labels[::every], "ticktext": text[::every]}


def _grid_trace(z: np.ndarray, axes: list, labels: tuple, cell_name: str, value: str) -> dict:
    """One light heatmap trace (dict, float32, no customdata) on the shared coloraxis."""
    hover = f"{cell_name}<br>query %{{y}}<br>key %{{x}}<br>{value}=%{{z:.3f}}<extra></extra>"
    return {
        "type": "heatmap",
        "z": z,  # (Tq, Tk) float32
        "x": labels[1],
        "y": labels[0],
        "xaxis": axes[0].replace("axis", ""),
        "yaxis": axes[1].replace("axis", ""),
        "coloraxis": "coloraxis",
        "hovertemplate": hover,
    }


def grid_figure(
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    layer_names: Sequence[str] | None = None,
    head_names: Sequence[str] | None = None,
    zmax: float = 1.0,
    note: str | None = None,
    scale: Scale = WEIGHTS,
    title: str | None = None,
    removed: Sequence[tuple[int, int]] = (),
) -> go.Figure:
    """Small multiples, one heatmap per (layer, head), on one shared colour scale.

    Args:
        weights: (L, H, Tq, Tk) attention (NaN cells are drawn blank).
        query_tokens, key_tokens: Tq and Tk tokens.
        kind: "encoder", "decoder_self" or "cross".
        layer_names, head_names: row/column titles; default "layer i" / "head j" (0-based).
        zmax: top of the shared colour scale.
        note: what was done to the maps ("a; b"), one subtitle line per part.
        scale: WEIGHTS (0..zmax) or DIFFERENCE (−zmax..zmax).
        title: figure title; defaults to the kind's title.
        removed: (row, column) of the cells whose head is removed: outlined and labelled.
    """
    default_title, query_words, key_words = kind_labels(kind)
    title = title or default_title
    check_tokens(weights.shape, query_tokens, key_tokens)
    n_layers, n_heads = weights.shape[:2]
    layer_names = tuple(layer_names or [f"layer {i}" for i in range(n_layers)])
    head_names = tuple(head_names or [f"head {j}" for j in range(n_heads)])
    skeleton = json.loads(_grid_skeleton(layer_names, head_names))
    layout, axes = skeleton["layout"], skeleton["axes"]
    _grid_axes(layout, axes, (query_tokens, key_tokens), (query_words, key_words))
    z = np.asarray(weights, dtype=np.float32)  # (L, H, Tq, Tk)
    labels = (unique_labels(query_tokens), unique_labels(key_tokens))
    data = [
        _grid_trace(z[i, j], axes[i][j], labels, f"{layer_names[i]}, {head_names[j]}", scale.hover)
        for i in range(n_layers)
        for j in range(n_heads)
    ]
    refs = [
        [a.replace("axis", "") for a in axes[i][j]] for i in range(n_layers) for j in range(n_heads)
    ]
    data += [
        t
        for cell, ref in zip(z.reshape(-1, *z.shape[2:]), refs)
        for t in blank_cells(cell, labels[1], labels[0], ref)
    ]
    head = title_layout(title, [reading_hint(kind), *note_lines(note)], WIDE_TITLE_CHARS, 28)
    layout |= head | {
        "coloraxis": {
            "colorscale": plain.colorscale(scale.colors),
            "cmin": scale.zmin(zmax),
            "cmax": zmax,
            "colorbar": {"title": {"text": plotly_text(scale.name)}},
        },
        "height": int(40 + head["margin"]["t"] + n_layers * max(170, 60 + 16 * len(query_tokens))),
    }
    marks = [removed_mark(axes[i][j]) for i, j in removed]
    if marks:  # (an empty list, validated, is none at all)
        layout["shapes"] = [m[0] for m in marks]
        layout["annotations"] = layout.get("annotations", []) + [m[1] for m in marks]
    return plain.figure(data, layout)


def removed_mark(axes: Sequence[str]) -> tuple[dict, dict]:
    """An outline around one grid cell and a "removed" label in its top right corner."""
    xref, yref = (f"{a.replace('axis', '')} domain" for a in axes)
    box = {"xref": xref, "yref": yref, "x0": 0, "x1": 1, "y0": 0, "y1": 1}
    shape = {"type": "rect", **box, "line": {"color": REMOVED_COLOR, "width": 3}}
    label = {
        "text": f"<b>{REMOVED_WORD}</b>",
        "xref": xref,
        "yref": yref,
        "x": 1,
        "y": 1,
        "xanchor": "right",
        "yanchor": "top",
        "showarrow": False,
        "font": {"size": 11, "color": REMOVED_COLOR},
        "bgcolor": "rgba(255, 255, 255, 0.8)",
    }
    return shape, label


def view_figure(view: View, stretch: bool = False, zmax: float | None = None) -> go.Figure:
    """The large heatmap of a view (colour scale 0..1, or stretched to the 99th percentile).

    ``zmax`` sets the top of the scale instead (two maps shown side by side share one).
    """
    zmax = zmax if zmax is not None else percentile_cap(view.weights) if stretch else 1.0
    note = "; ".join(x for x in (view.note, "colour scale stretched" if stretch else "") if x)
    return heatmap_figure(
        view.weights,
        view.query_tokens,
        view.key_tokens,
        view.kind,
        title=view.title,
        zmax=zmax,
        note=note or None,
        blank=view.blank,
    )


def grid_view_figure(
    maps: SentenceMaps,
    kind: str,
    hide: bool = False,
    layers: Sequence[int] | None = None,
    stretch: bool = False,
    removed: Sequence[tuple[int, int]] = (),
) -> go.Figure:
    """Small multiples of the chosen layers (default all) × every head, one colour scale.

    ``removed``: the (layer, head) pairs of removed heads, outlined and labelled in the grid.
    """
    w = maps.weights(kind)  # (L, H, Tq, Tk)
    layers = list(range(w.shape[0])) if layers is None else list(layers)
    queries, keys = maps.tokens(kind)
    cut = hide_columns(w[layers], queries, keys, hide)  # (L', H, Tq, Tk')
    zmax = percentile_cap(cut.weights) if stretch else 1.0
    note = "; ".join(x for x in (cut.note, "colour scale stretched" if stretch else "") if x)
    names = [f"layer {i}" for i in layers]
    cells = [(layers.index(layer), head) for layer, head in removed if layer in layers]
    fig = grid_figure(
        cut.weights, queries, cut.keys, kind, names, zmax=zmax, note=note, removed=cells
    )
    if len(layers) == 1:
        fig.update_layout(height=max(300, int(fig.layout.height)))
    return fig
