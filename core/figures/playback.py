"""Plotly figures of one decoding step: the next-token candidates and each head's row.

The Attention page's decoding playback draws them; token axes as in ``core.figures.attention``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from core.figures.attention import COLORSCALE, title_layout, token_axis, unique_labels


def topk_figure(tokens: Sequence[str], probs: Sequence[float]) -> go.Figure:
    """Horizontal bars of next-token candidates, most likely on top."""
    if len(tokens) != len(probs):
        raise ValueError(f"Got {len(tokens)} tokens but {len(probs)} probabilities.")
    labels = unique_labels(tokens)
    fig = go.Figure(
        go.Bar(
            x=np.asarray(probs, dtype=np.float32),
            y=labels,
            orientation="h",
            text=[f"{p:.2f}" for p in probs],
            textposition="auto",  # inside a long bar, beside a short one: never clipped
            cliponaxis=False,
            hovertemplate="%{y}<br>p=%{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": "Next-token candidates"},
        xaxis={"title": {"text": "probability"}, "range": [0, 1.05]},
        yaxis=token_axis("candidate token", tokens, reversed_=True),
        height=int(max(200, 110 + 28 * len(tokens))),
        margin={"t": 50},
    )
    return fig


def head_rows_figure(
    rows: np.ndarray, key_tokens: Sequence[str], title: str, key_words: str, note: str = ""
) -> go.Figure:
    """Heads as rows (H, K): how each head of one layer spreads one query's attention.

    ``title`` and ``note`` (the subtitle) are plain text: they are wrapped and escaped here.
    """
    heads = [f"head {h}" for h in range(rows.shape[0])]
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(rows, dtype=np.float32),
            x=unique_labels(key_tokens),
            y=heads,
            zmin=0.0,
            zmax=1.0,
            colorscale=COLORSCALE,
            colorbar={"title": {"text": "weight"}},
            hovertemplate="%{y}<br>key %{x}<br>w=%{z:.3f}<extra></extra>",
        )
    )
    head = title_layout(title, [note])
    fig.update_layout(
        xaxis={**token_axis(key_words, key_tokens), "tickangle": -45},
        yaxis={"title": {"text": "head"}, "autorange": "reversed"},
        height=int(100 + head["margin"]["t"] + 28 * len(heads)),
        **head,
    )
    return fig
