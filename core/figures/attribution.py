"""Plotly figures of token attribution: the contribution matrix, source shares, deletion curves.

The contribution matrix puts the source block and the target-prefix block side by side with a
divider between them; prefix cells an output token cannot read (later tokens) are blank.

Shape key: S source tokens, T output tokens (and T prefix tokens), K deletion sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.attention.word_maps import merge_weights
from core.attribution.explain import SHARE_FLAG, Explained
from core.attribution.faithfulness import DELETION_K, RANDOM, Faithfulness
from core.attribution.spans import visible_in_spans
from core.figures.attention import (
    COLORSCALE,
    DIFF_COLORSCALE,
    WIDE_TITLE_CHARS,
    blank_cells,
    percentile_cap,
    title_layout,
    unique_labels,
)
from core.figures.labels import legend_below, plotly_text

DIVIDER_COLOR = "#222"  # the line between the source block and the prefix block
SHARE_COLOR = "#1f77b4"  # an output token drawn mostly from the source
FLAG_COLOR = "#d62728"  # an output token drawn mostly from the target prefix (flagged)
RANDOM_COLOR = "#7f7f7f"  # the random baseline's deletion curve (dashed)
OUTPUT_WORDS = "output token (explained)"
CONTRIBUTOR_WORDS = "source token | target-prefix token (contributor)"
BLOCK_LABEL_PX = 22  # room above the plot for the "source" / "target prefix" labels
COLUMN_PX = 18  # width of one token column that keeps -45° tick labels apart
FRAME_PX = 220  # a heatmap's width besides its columns: y tick labels, axis title, colour bar
PANEL_PX = 340  # the narrowest panel: a TITLE_CHARS line fits (half of a 760 px page)


def panel_width(columns: int) -> int:
    """Pixels a heatmap of ``columns`` token columns needs to keep its tick labels apart."""
    return max(PANEL_PX, FRAME_PX + COLUMN_PX * columns)


def visible_prefix(pieces: Explained, words: bool = False, spans=None) -> np.ndarray:
    """(T, T) True where output token t can read prefix token j (j <= t); in words, or with
    output ``spans`` (``core.attribution.spans``) each read as one token, if asked.

    ``pieces`` is the explanation over the model's own tokens: a merged word can read part of
    the next prefix word (its own first pieces), so the mask is merged like the weights.
    """
    T = len(pieces.output)
    if spans:
        return visible_in_spans(spans, T)  # (T', P')
    causal = np.tril(np.ones((T, T), dtype=np.float32))  # (T, T)
    if not words:
        return causal > 0
    return merge_weights(causal, pieces.output, pieces.prefix) > 0  # (T', T')


def contribution_matrix(e: Explained, visible: np.ndarray | None = None) -> np.ndarray:
    """(T, S + T) contributions with the prefix cells an output token cannot read as NaN."""
    S, T = len(e.source), len(e.output)
    visible = np.tril(np.ones((T, T), dtype=bool)) if visible is None else visible
    z = np.asarray(e.contributions, dtype=np.float32).copy()  # (T, S + T)
    z[:, S:][~visible] = np.nan
    return z


def _block_labels(S: int, T: int) -> list[dict]:
    """Labels "source" over the first S columns and "target prefix" over the last T, on top."""
    return [
        {
            "text": text,
            "xref": "x",
            "x": (start + start + n - 1) / 2,
            "yref": "paper",
            "y": 1.0,
            "yanchor": "bottom",
            "showarrow": False,
            "font": {"size": 12, "color": "#444"},
        }
        for text, start, n in (("source", 0, S), ("target prefix", S, T))
    ]


def divider(S: int) -> dict:
    """A vertical line between column S - 1 (last source token) and column S (<bos>)."""
    return {
        "type": "line",
        "xref": "x",
        "x0": S - 0.5,
        "x1": S - 0.5,
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "line": {"color": DIVIDER_COLOR, "width": 2},
    }


def contribution_figure(
    e: Explained,
    title: str,
    visible: np.ndarray | None = None,
    stretch: bool = False,
    notes: Sequence[str] = (),
) -> go.Figure:
    """Output tokens (rows) × [source | target prefix] (columns): each row's contributions.

    Args:
        e: the explanation shown (pieces, or words after in_words).
        title: plain text, wrapped and escaped here.
        visible: (T, T) prefix cells each row can read (default j <= t); the rest are blank.
        stretch: top the colour scale at the 99th percentile instead of the largest value.
        notes: plain-text subtitle lines.
    """
    S, T = len(e.source), len(e.output)
    z = contribution_matrix(e, visible)  # (T, S + T)
    signed = bool(np.nanmin(z, initial=0.0) < 0)  # scores not normalised (their signs kept)
    zmax = percentile_cap(np.abs(z) if signed else z, 99 if stretch else 100)
    x, y = unique_labels([*e.source, *e.prefix]), unique_labels(e.output)
    word = "score" if signed else "share"
    trace = go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=-zmax if signed else 0.0,
        zmax=zmax,
        colorscale=DIFF_COLORSCALE if signed else COLORSCALE,
        colorbar={"title": {"text": word}},
        hovertemplate=f"output %{{y}}<br>from %{{x}}<br>{word}=%{{z:.3f}}<extra></extra>",
    )
    scale = "99th percentile" if stretch else f"largest {'|score|' if signed else 'share'}"
    low = f"−{zmax:.2f}" if signed else "0"
    lines = [*notes, f"colour scale {low}–{zmax:.2f} ({scale}); grey: later prefix tokens"]
    head = title_layout(title, lines, below=BLOCK_LABEL_PX)
    fig = go.Figure([trace, *blank_cells(z, x, y)])
    fig.update_layout(
        xaxis=_axis(CONTRIBUTOR_WORDS, x, [*e.source, *e.prefix]) | {"tickangle": -45},
        yaxis=_axis(OUTPUT_WORDS, y, e.output) | {"autorange": "reversed"},
        shapes=[divider(S)],
        annotations=_block_labels(S, T),
        height=int(min(900, max(300, 22 * T + 110)) + head["margin"]["t"]),
        **head,
    )
    return fig


def _axis(title: str, labels: Sequence[str], tokens: Sequence[str]) -> dict:
    """A categorical token axis: one category per position, the plain token as its tick."""
    return {
        "title": {"text": title},
        "type": "category",
        "tickmode": "array",
        "tickvals": list(labels),
        "ticktext": [plotly_text(t) for t in tokens],
    }


def source_share_figure(e: Explained, title: str) -> go.Figure:
    """One bar per output token: the share of its contributions from the source (flagged red)."""
    share = np.asarray(e.source_share, dtype=np.float32)  # (T,)
    flagged = e.flagged()
    labels = unique_labels(e.output)
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=share,
            marker={"color": [FLAG_COLOR if f else SHARE_COLOR for f in flagged]},
            hovertemplate="%{x}<br>from the source %{y:.2f}<extra></extra>",
        )
    )
    fig.add_hline(y=SHARE_FLAG, line_dash="dash", line_color="#888")
    notes = [
        f"red: under {SHARE_FLAG:.1f}, drawn mostly from the target prefix; "
        f"{sum(flagged)} of {len(flagged)} flagged",
    ]
    head = title_layout(title, notes, WIDE_TITLE_CHARS)
    fig.update_layout(
        xaxis=_axis("output token", labels, e.output) | {"tickangle": -45},
        yaxis={"title": {"text": "share from the source"}, "range": [0, 1.02]},
        height=int(260 + head["margin"]["t"]),
        **head,
    )
    return fig


def contrast_figure(e: Explained, step: int, title: str) -> go.Figure:
    """One step of a contrastive explanation: a signed bar per source and prefix token (up to
    the step), positive where the token favours the written word over the alternative."""
    S = e.attribution.source_length
    raw = np.asarray(e.attribution.raw[step], dtype=np.float32)  # (S + T,)
    tokens = list(e.source) + list(e.prefix[: step + 1])
    values = np.concatenate([raw[:S], raw[S : S + step + 1]])
    labels = unique_labels(tokens)
    colors = [FLAG_COLOR if v < 0 else SHARE_COLOR for v in values]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=values,
            marker={"color": colors},
            hovertemplate="%{x}<br>%{y:+.3f}<extra></extra>",
        )
    )
    fig.add_vline(x=S - 0.5, line_dash="dot", line_color="#888")
    notes = [
        f"“{e.output[step]}” rather than “{e.contrast[step]}”: blue favours the written word, "
        "red the alternative; left of the dotted line the source, right the prefix"
    ]
    head = title_layout(title, notes, WIDE_TITLE_CHARS)
    fig.update_layout(
        xaxis=_axis("token", labels, tokens) | {"tickangle": -45},
        yaxis={"title": {"text": "score"}, "zeroline": True},
        height=int(280 + head["margin"]["t"]),
        **head,
    )
    return fig


def faithfulness_table(result: Faithfulness) -> pd.DataFrame:
    """One row per method, best Spearman first: ρ with its 95% interval, drops at k, sample."""
    rows = []
    for r in result.methods:
        low, high = r["spearman_ci95"] or (None, None)
        drops = [*r["deletion"], *[None] * len(DELETION_K)][: len(DELETION_K)]
        rows.append(
            {
                "method": r["name"],
                "Spearman ρ": r["spearman"],
                "ρ 95% low": low,
                "ρ 95% high": high,
                **{f"drop k={k}": d for k, d in zip(DELETION_K, drops)},
                "sentences": r["sentences"],
            }
        )
    return pd.DataFrame(rows).astype({"sentences": int})


def deletion_figure(result: Faithfulness) -> go.Figure:
    """Mean log-probability drop against k top source words removed: a line per method."""
    fig = go.Figure()
    for r in result.methods:
        baseline = r["method"] == RANDOM
        drops = [np.nan if d is None else d for d in r["deletion"]]
        fig.add_trace(
            go.Scatter(
                x=list(DELETION_K[: len(drops)]),
                y=np.asarray(drops, dtype=np.float32),
                mode="lines+markers",
                name=plotly_text(r["name"]),
                line={"dash": "dash", "color": RANDOM_COLOR} if baseline else {},
                hovertemplate="k=%{x}<br>drop %{y:.3f}<extra>%{fullData.name}</extra>",
            )
        )
    notes = [
        "the method's top-k source words for each output token replaced by <unk>",
        "higher: the method found the words the output depends on; dashed: random ranking",
    ]
    head = title_layout("Deletion curve", notes, WIDE_TITLE_CHARS)
    fig.update_layout(
        xaxis={"title": {"text": "source words removed (k)"}, "tickvals": list(DELETION_K)},
        yaxis={"title": {"text": "mean drop in log p(output token)"}},
        **legend_below(fig, 400 + head["margin"]["t"], per_row=4),
        **head,
    )
    return fig
