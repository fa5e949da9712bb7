"""Plotly figure of direct logit attribution: each attention's heads as a layer × head grid
(red adds to the logit, blue takes from it), the per-layer terms as bars and the accumulated
stream as a line."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.logit_attribution import LogitAttribution
from core.figures.attention import WIDE_TITLE_CHARS, title_layout

CELL_PX = 40  # the height of one layer's row in a head grid
SMALL = 64  # heads of a grid small enough to write every term in its cell
SUBTITLE_PX = 26  # room above the panels for their titles


def layer_bars(a: LogitAttribution) -> dict[str, np.ndarray]:
    """{what: per-group values} drawn as bars: each layer's feed-forward, heads (all
    attentions), biases, and the embeddings; the groups as ``per_layer`` names them."""
    groups = [r["layer"] for r in a.per_layer()]
    kinds = {"heads": ("head",), "feed-forward": ("mlp",), "embeddings": ("embed",)}
    kinds["biases"] = ("attention bias", "norm bias", "output bias")
    bars = {name: np.zeros(len(groups)) for name in kinds}
    for r in a.rows:
        where = "embed" if r["kind"] == "embed" else r["layer"]
        where = "output" if where is None else where
        name = next(n for n, ks in kinds.items() if r["kind"] in ks)
        bars[name][groups.index(where)] += r["value"]
    return bars


def logit_attribution_figure(a: LogitAttribution) -> go.Figure:
    """The head grids (one per attention), then the per-layer bars with the accumulated line."""
    grids = {f"{att} heads": a.head_grid(att) for att in a.attentions}
    cols = len(grids) + 1
    fig = make_subplots(rows=1, cols=cols, subplot_titles=[*grids, "per layer, accumulated"],
                        horizontal_spacing=0.08)  # fmt: skip
    scale = max([float(np.abs(g).max()) for g in grids.values()] + [1e-9])
    for col, (name, grid) in enumerate(grids.items(), start=1):
        L, H = grid.shape
        fig.add_trace(
            go.Heatmap(
                z=grid,
                x=np.arange(H),
                y=np.arange(L),
                text=np.char.mod("%.2f", grid).tolist() if L * H <= SMALL else None,
                texttemplate="%{text}" if L * H <= SMALL else None,
                coloraxis="coloraxis",
                hovertemplate=f"layer %{{y}}, head %{{x}}<br>{name}: %{{z:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="head", dtick=1 if H <= 16 else None, row=1, col=col)
        fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if L <= 16 else None,
                         row=1, col=col)  # fmt: skip
    groups = [str(r["layer"]) for r in a.per_layer()]
    for name, values in layer_bars(a).items():
        fig.add_trace(go.Bar(x=groups, y=values, name=name), row=1, col=cols)
    accumulated = [r["value"] for r in a.accumulated()]
    fig.add_trace(
        go.Scatter(x=groups, y=accumulated, name="accumulated", mode="lines+markers"),
        row=1,
        col=cols,
    )
    fig.update_xaxes(title_text="layer", type="category", row=1, col=cols)
    what = f"logit({a.answer})" + (f" − logit({a.wrong})" if a.wrong else "")
    notes = [
        f"step {a.step} (reads {a.reads!r}): {what} = {a.logit:.4f}, the terms sum to "
        f"{a.total:.4f}; each norm's scale frozen at this pass's value"
    ]
    head = title_layout("Direct logit attribution", notes, WIDE_TITLE_CHARS, below=SUBTITLE_PX)
    fig.update_layout(
        barmode="relative",
        coloraxis={"colorscale": "RdBu_r", "cmin": -scale, "cmax": scale,
                   "colorbar": {"title": {"text": "logit", "side": "top"}, "thickness": 10,
                                "orientation": "h", "len": 0.3, "x": 0.2, "y": -0.32,
                                "yanchor": "top"}},
        height=int(head["margin"]["t"] + 150 + CELL_PX * max(a.layers, 6)),
        **{**head, "margin": {**head["margin"], "b": 120}},  # the colour bar below the grids
    )  # fmt: skip
    return fig
