"""Plotly figures inside one head: the q·k view (vectors, scores, softmax) and the lines view.

The q·k view is bertviz's neuron view, the lines view its head view. Every figure names
its axes in words; tokens sit on numeric or unique ("i:token") positions, so repeated
tokens never merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.attention.kinds import kind_labels, short_title
from core.attention.query_key import QueryKey
from core.figures.attention import WIDE_TITLE_CHARS, title_layout, token_axis, unique_labels
from core.figures.labels import plotly_text

VECTOR_COLORSCALE = "RdBu_r"  # signed vector entries: blue below 0, white at 0, red above
MASKED_COLOR = "#bdbdbd"  # a masked key's score bar and mask cell
UNROTATED_COLOR = "#c6dbef"  # a score of q and k before the rotary embedding rotates them
ROW_PX = 22  # height of one key's row
PANEL_GAP_PX = 40  # between two panels of the vectors figure: room for a panel's title
PANEL_TITLE_PX = 26  # room for the top panels' titles under a figure's subtitle
BOTTOM_PX = 60  # below the panels: the bottom axis's ticks and title
VECTORS_NOTE = "q and k from this head's W_q, W_k; colours centred on 0"
HEAD_COLORS = (  # one colour per head in the lines view (cycled beyond ten heads)
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)  # fmt: skip
OPACITY_BINS = 10  # lines are drawn in this many opacity steps (one trace per step and head)
MIN_LINE_WEIGHT = 0.01  # lighter lines are left out (they would be invisible)


def qk_title(v: QueryKey) -> str:
    """E.g. "Cross attention, layer 1, head 2: query 3 (nous)"."""
    where = f"{short_title(v.kind)}, layer {v.layer}, head {v.head}"
    return f"{where}: query {v.query} ({v.query_tokens[v.query]})"


def vectors_figure(v: QueryKey) -> go.Figure:
    """The query vector, every key vector and their elementwise products, over the head's dims.

    Rows: the query (top), then one row per key in each of the two lower panels; columns:
    the head's Dh dimensions. Each product row sums to q·k_j (the score before √d_k).
    """
    _, _, key_words = kind_labels(v.kind)
    n_keys = len(v.key_tokens)
    head = title_layout(qk_title(v), [VECTORS_NOTE], WIDE_TITLE_CHARS, below=PANEL_TITLE_PX)
    plot_px = 3 * ROW_PX + 2 * ROW_PX * n_keys + 2 * PANEL_GAP_PX  # the three panels and gaps
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=PANEL_GAP_PX / plot_px,
        row_heights=[1.5, n_keys, n_keys],
        subplot_titles=("query q", "keys k_j", "q ⊙ k_j (each row sums to q·k_j)"),
    )
    dims = np.arange(v.head_width)
    keys = unique_labels(v.key_tokens)
    vec_max = float(max(np.abs(v.q).max(), np.abs(v.keys).max(), 1e-6))
    prod_max = float(max(np.abs(v.products).max(), 1e-6))
    panels = (
        (1, v.q[None, :], [plotly_text(v.query_tokens[v.query])], "coloraxis", "q"),
        (2, v.keys, keys, "coloraxis", "k"),
        (3, v.products, keys, "coloraxis2", "q⊙k"),
    )
    for row, z, y, axis, name in panels:
        fig.add_trace(
            go.Heatmap(
                z=np.asarray(z, dtype=np.float32),  # (rows, Dh)
                x=dims,
                y=y,
                coloraxis=axis,
                hovertemplate=f"%{{y}}<br>dim %{{x}}<br>{name}=%{{z:.3f}}<extra></extra>",
            ),
            row=row,
            col=1,
        )
    for row in (2, 3):
        fig.update_yaxes(token_axis(key_words, v.key_tokens, reversed_=True), row=row, col=1)
    fig.update_yaxes({"title": {"text": "query"}, "type": "category"}, row=1, col=1)
    fig.update_xaxes(title_text=f"dimension of the head (d_k = {v.head_width})", row=3, col=1)
    bar = {"len": 0.45, "thickness": 12}
    fig.update_layout(
        coloraxis={"colorscale": VECTOR_COLORSCALE, "cmin": -vec_max, "cmax": vec_max}
        | {"colorbar": bar | {"title": {"text": "q, k"}, "y": 0.78}},
        coloraxis2={"colorscale": VECTOR_COLORSCALE, "cmin": -prod_max, "cmax": prod_max}
        | {"colorbar": bar | {"title": {"text": "q⊙k"}, "y": 0.22}},
        height=int(head["margin"]["t"] + plot_px + BOTTOM_PX),
        **head,
    )
    fig.update_layout(margin={"b": BOTTOM_PX})
    return fig


def scores_figure(v: QueryKey) -> go.Figure:
    """Per key: the scaled score q·k/√d_k, the mask and the softmax weight, side by side."""
    _, _, key_words = kind_labels(v.kind)
    keys = unique_labels(v.key_tokens)
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        column_widths=[0.42, 0.16, 0.42],
        subplot_titles=(v.score_words, "mask", "softmax"),
    )
    colors = np.where(v.mask, "#4292c6", MASKED_COLOR).tolist()
    fig.add_trace(
        go.Bar(
            x=np.asarray(v.scores, dtype=np.float32),
            y=keys,
            orientation="h",
            marker_color=colors,
            name="score",
            hovertemplate="key %{y}<br>score=%{x:.3f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    if v.unrotated is not None:  # RoPE: the same q and k before rotation, lighter
        fig.add_trace(
            go.Bar(
                x=np.asarray(v.unrotated, dtype=np.float32),
                y=keys,
                orientation="h",
                marker_color=UNROTATED_COLOR,
                name="before RoPE",
                hovertemplate="key %{y}<br>score before RoPE=%{x:.3f}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.update_layout(barmode="group")
    fig.add_trace(
        go.Heatmap(
            z=v.mask.astype(np.float32)[:, None],  # (Tk, 1)
            x=["may attend"],
            y=keys,
            text=np.where(v.mask, "open", "masked")[:, None].tolist(),  # never "yes"
            texttemplate="%{text}",
            colorscale=[[0, MASKED_COLOR], [1, "#ffffff"]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate="key %{y}<br>%{text}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(
            x=np.asarray(v.weights, dtype=np.float32),
            y=keys,
            orientation="h",
            marker_color="#08519c",
            text=[f"{w:.2f}" for w in v.weights],
            textposition="auto",
            cliponaxis=False,
            hovertemplate="key %{y}<br>weight=%{x:.3f}<extra></extra>",
        ),
        row=1,
        col=3,
    )
    fig.update_yaxes(token_axis(key_words, v.key_tokens, reversed_=True), row=1, col=1)
    fig.update_xaxes(showticklabels=False, row=1, col=2)
    fig.update_xaxes(range=[0, 1.05], title_text="weight", row=1, col=3)
    fig.update_xaxes(title_text="score", row=1, col=1)
    note = "masked keys get no weight; the softmax runs over the others"
    head = title_layout(qk_title(v), [note], WIDE_TITLE_CHARS, below=PANEL_TITLE_PX)
    fig.update_layout(
        showlegend=False,
        height=int(head["margin"]["t"] + BOTTOM_PX + max(2, len(keys)) * ROW_PX),
        **head,
    )
    fig.update_layout(margin={"b": BOTTOM_PX})
    return fig


def line_traces(
    weights: np.ndarray, color: str, name: str, group: str, shown: set, bins: int = OPACITY_BINS
) -> list:
    """One line trace per opacity step (``bins`` of them) for one head's (Tq, Tk) weights;
    shown: the (query, key) pairs to draw."""
    levels = np.minimum((weights * bins).astype(int), bins - 1)  # (Tq, Tk)
    traces = []
    for level in range(bins):
        xs, ys = [], []
        for i, j in zip(*np.nonzero((levels == level) & (weights >= MIN_LINE_WEIGHT))):
            if (int(i), int(j)) in shown:
                xs += [0, 1, None]
                ys += [int(i), int(j), None]
        if xs:
            traces.append(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": color, "width": 2},
                    opacity=(level + 0.5) / bins,
                    name=name,
                    legendgroup=group,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
    return traces


def lines_figure(
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    kind: str,
    heads: Sequence[int],
    title: str,
    pick: tuple[str, int] | None = None,
    note: str = "",
) -> go.Figure:
    """bertviz's head view: queries on the left, keys on the right, a line per pair.

    Args:
        weights: (H', Tq, Tk) weights of the heads drawn (NaN rows: blank, no lines).
        heads: the H' head numbers, for the legend; one colour each.
        pick: ("query", i) or ("key", j) shows only that token's lines; None: every line.
        note: a subtitle line (e.g. what was hidden).
    """
    _, query_words, key_words = kind_labels(kind)
    w = np.nan_to_num(np.asarray(weights, dtype=np.float32))  # (H', Tq, Tk)
    tq, tk = len(query_tokens), len(key_tokens)
    pairs = {(i, j) for i in range(tq) for j in range(tk)}
    if pick is not None:
        pairs = {(i, j) for i, j in pairs if (i if pick[0] == "query" else j) == pick[1]}
    fig = go.Figure()
    for h, head_weights in zip(heads, w):
        color = HEAD_COLORS[h % len(HEAD_COLORS)]
        for trace in line_traces(head_weights, color, f"head {h}", f"head {h}", pairs):
            fig.add_trace(trace)
        fig.add_trace(legend_entry(color, f"head {h}"))
    picked = {"query": pick[1] if pick and pick[0] == "query" else -1}
    picked["key"] = pick[1] if pick and pick[0] == "key" else -1
    fig.add_trace(token_column(0, query_tokens, "query", "middle left", picked["query"]))
    fig.add_trace(token_column(1, key_tokens, "key", "middle right", picked["key"]))
    rows = max(tq, tk)
    head = title_layout(
        title, [f"line opacity: weight; {note}" if note else "line opacity: weight"], 76
    )
    fig.update_layout(
        xaxis={"visible": False, "range": [-0.55, 1.55], "fixedrange": True},
        yaxis={"visible": False, "range": [rows - 0.5, -1.2], "fixedrange": True},
        annotations=[column_header(0, query_words), column_header(1, key_words)],
        legend={"orientation": "h", "y": -0.02, "yanchor": "top", "x": 0.5, "xanchor": "center"},
        height=int(head["margin"]["t"] + 90 + 26 * rows),
        plot_bgcolor="white",
        **head,
    )
    return fig


def legend_entry(color: str, name: str) -> go.Scatter:
    """A head's legend entry at full opacity (its lines are fainter); clicks toggle the head."""
    return go.Scatter(
        x=[None],
        y=[None],
        mode="lines",
        line={"color": color, "width": 3},
        name=name,
        legendgroup=name,
        showlegend=True,
    )


def token_column(x: float, tokens: Sequence[str], side: str, position: str, picked: int):
    """One column of tokens as text markers (the picked one bold); each carries (side, index)
    so a click on it picks it (``core.figures.clicks.clicked_token``)."""
    text = [
        f"<b>{plotly_text(t)}</b>" if i == picked else plotly_text(t) for i, t in enumerate(tokens)
    ]
    return go.Scatter(
        x=[x] * len(tokens),
        y=list(range(len(tokens))),
        customdata=[[side, i] for i in range(len(tokens))],  # what a click on it picks
        mode="markers+text",
        text=text,
        textposition=position,
        marker={"size": 10, "color": "#444"},
        showlegend=False,
        hovertemplate=f"{side} %{{y}}: %{{text}} (click: its lines only)<extra></extra>",
    )


def column_header(x: float, words: str) -> dict:
    """The words over one token column ("output token (query)")."""
    return {
        "text": f"<b>{plotly_text(words)}</b>",
        "x": x,
        "y": -1,
        "xref": "x",
        "yref": "y",
        "xanchor": "right" if x == 0 else "left",
        "showarrow": False,
        "font": {"size": 12},
    }
