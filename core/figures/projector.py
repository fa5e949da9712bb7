"""Where tokens live: the projected points as a 2-D or 3-D scatter, coloured by token,
position, layer or sentence, the picked point and its nearest neighbours marked.

Every point carries its index in the projection as ``customdata``, so a click on the page
picks it whichever trace it is drawn in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from core.attention.projector import METHOD_NAMES, Projection
from core.figures.attention import WIDE_TITLE_CHARS, title_layout
from core.figures.labels import PLAIN_NUMBERS, legend_below, plotly_text

TOP_TOKENS = 12  # pieces coloured by themselves; the others are grey
OTHER_COLOR = "#c7c7c7"
PICK_COLOR = "#d62728"
PALETTE = qualitative.Plotly + qualitative.D3  # 20 colours, for tokens and layers
HEIGHT = 620


def layer_name(p: Projection, layer: int) -> str:
    """ "layer 0 (input)", "layer 2 (output)" or "layer 1"."""
    top = max(p.layers) if len(p.layers) > 1 else None
    if layer == 0:
        return "layer 0 (input)"
    return f"layer {layer} (output)" if layer == top else f"layer {layer}"


def hover_texts(p: Projection) -> list[str]:
    """Each point's hover: its piece, sentence, position and layer, then the sentence."""
    return [
        f"<b>{plotly_text(p.tokens[i])}</b> · sentence {p.sentence[i]}, position "
        f"{p.position[i]}, layer {p.layer[i]}<br>{plotly_text(p.texts[p.sentence[i]])}"
        for i in range(len(p.tokens))
    ]


def _trace(p: Projection, rows: np.ndarray, hover: Sequence[str], name: str, marker: dict):
    """A scatter of the points ``rows`` (2-D: WebGL; 3-D: a 3-D scatter)."""
    axes = {a: p.coords[rows, d] for d, a in enumerate("xyz"[: p.dims])}
    kind = go.Scatter3d if p.dims == 3 else go.Scattergl
    size = 3 if p.dims == 3 else 6
    return kind(
        **axes,
        mode="markers",
        name=plotly_text(name),
        marker={"size": size, "opacity": 0.8} | marker,
        customdata=np.stack([rows, p.sentence[rows], p.position[rows], p.layer[rows]], axis=1),
        hovertext=[hover[i] for i in rows],
        hoverinfo="text",
    )


def _grouped(p: Projection, colour: str, hover: Sequence[str]) -> list:
    """One trace per frequent token (others grey), per layer, or one coloured by a number."""
    everyone = np.arange(len(p.tokens))
    if colour in ("position", "sentence"):
        values = p.position if colour == "position" else p.sentence
        bar = {"title": {"text": colour}} | PLAIN_NUMBERS
        marker = {"color": values, "colorscale": "Viridis", "colorbar": bar, "showscale": True}
        return [_trace(p, everyone, hover, f"by {colour}", marker)]
    if colour == "layer":
        return [
            _trace(p, np.flatnonzero(p.layer == layer), hover, layer_name(p, layer),
                   {"color": PALETTE[i % len(PALETTE)]})
            for i, layer in enumerate(p.layers)
        ]  # fmt: skip
    common = [t for t, _ in Counter(p.tokens).most_common(TOP_TOKENS)]
    traces = []
    tokens = np.array(p.tokens, dtype=object)
    rest = np.flatnonzero(~np.isin(tokens, common))
    if rest.size:
        traces.append(_trace(p, rest, hover, "other pieces", {"color": OTHER_COLOR}))
    for i, token in enumerate(common):
        rows = np.flatnonzero(tokens == token)
        traces.append(_trace(p, rows, hover, token, {"color": PALETTE[i % len(PALETTE)]}))
    return traces


def axis_titles(p: Projection) -> list[str]:
    """ "PC1 · 16 % of the variance" for PCA, "UMAP 1" for UMAP."""
    if p.method == "pca":
        return [f"PC{i + 1} · {share:.0%} of the variance" for i, share in enumerate(p.explained)]
    return [f"{METHOD_NAMES[p.method]} {i + 1}" for i in range(p.dims)]


def projection_figure(
    p: Projection, colour: str, picked: int | None = None, near: Sequence[int] = ()
) -> go.Figure:
    """The points coloured by ``colour``; ``picked`` (a point's index) and its ``near``
    neighbours ringed."""
    hover = hover_texts(p)
    fig = go.Figure(_grouped(p, colour, hover))
    if near:
        ring = {"size": 13 if p.dims == 2 else 6, "color": "rgba(0,0,0,0)"}
        ring["line"] = {"color": "black", "width": 2}
        fig.add_trace(_trace(p, np.array(near), hover, "nearest neighbours", ring))
    if picked is not None:
        star = {"size": 16 if p.dims == 2 else 8, "color": PICK_COLOR, "symbol": "x"}
        fig.add_trace(_trace(p, np.array([picked]), hover, "picked", star | {"opacity": 1}))
    names = axis_titles(p)
    layers = layer_name(p, p.layers[0]) if len(p.layers) == 1 else "every layer"
    title = f"Where {p.side} tokens live: {layers}, {len(p.texts)} sentences"
    notes = [f"{METHOD_NAMES[p.method]} of {len(p.tokens):,} points; colour: {colour}"]
    head = title_layout(plotly_text(title), [plotly_text(n) for n in notes], WIDE_TITLE_CHARS)
    if p.dims == 3:
        scene = {f"{a}axis": {"title": {"text": n}} for a, n in zip("xyz", names)}
        fig.update_layout(scene=scene)
    else:
        fig.update_xaxes(title_text=names[0], zeroline=False, **PLAIN_NUMBERS)
        fig.update_yaxes(title_text=names[1], zeroline=False, **PLAIN_NUMBERS)
    fig.update_layout(height=HEIGHT, legend={"itemsizing": "constant"}, **head)
    if any(getattr(t.marker, "showscale", False) for t in fig.data):  # a colour bar on the right
        below = legend_below(fig, HEIGHT)  # the legend never on it (it was, in 3-D)
        fig.update_layout(height=below["height"], legend=below["legend"])
    return fig
